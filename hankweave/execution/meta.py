"""`execution-meta.json`: what an execution directory was created from (format v1.1.0).

Execution setup writes it on every start: the data source and its hash (the resume key), the
hank file and its hash (to notice edits), how the data is linked, where the execution was
made, and for a replay the recording it keeps. `createdAt` and `recording` are kept across
resumes; `lastUsed` is refreshed.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from hankweave import __version__
from hankweave.config.errors import ConfigError
from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes

META_VERSION = "1.1.0"

LinkType = Literal["symlink", "copy"]


class ExecutionMetaError(ConfigError):
    """`execution-meta.json` cannot be read or is not valid."""


class _MetaModel(BaseModel):
    # Unknown keys are kept, so metadata written by a newer version survives a rewrite.
    model_config = ConfigDict(
        extra="allow",
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
    )


class MetaEnvironment(_MetaModel):
    """Where the execution was set up."""

    invocation_method: str = "python"
    platform: str = ""
    arch: str = ""
    os_release: str = ""
    runtime: str = ""


class ForkOrigin(_MetaModel):
    """Where a fork came from (``hankweave fork``, docs/fork.md): its history up to and
    including ``codon`` is that of ``execution``."""

    execution: str
    """The source execution directory (absolute)."""
    codon: str
    """The codon the fork continues after (a loop iteration's runtime id: ``review#2``)."""
    run_id: str
    """The source run whose record of the codon the fork keeps."""
    checkpoint: str
    """That record's end checkpoint: the fork's workspace as it started."""
    forked_at: str
    changed_history: list[str] | None = None
    """Codons up to ``codon`` whose inputs the fork's hank changed, kept by
    ``--allow-changed-history`` (``id: why``)."""


class ExecutionMeta(_MetaModel):
    """The content of `.hankweave/execution-meta.json`."""

    version: str = META_VERSION
    read_only_source_data_path: str
    """The data source as given (absolute)."""
    read_only_source_resolved_data_path: str | None = None
    """The data source with symlinks resolved."""
    data_hash: str
    """The resume key (see :mod:`hankweave.execution.datahash`)."""
    hank_hash: str | None = None
    """sha256 hex of the hank file's text."""
    hank_path: str | None = None
    link_type: LinkType = "symlink"
    created_at: str
    last_used: str
    hankweave_version: str = __version__
    environment: MetaEnvironment | None = None
    recording: str | None = None
    """A replay: the recording it plays, kept inside the execution directory (a path relative to
    it, `.hankweave/recording`). A resume plays the rest of it; an execution without it is not
    a replay."""
    recording_source: str | None = None
    """A replay: the recording it was started from, as given (`run.hwrec.tar.gz`, a folder, a
    URL); a hankweave addition, for listings."""
    bundle_hash: str | None = None
    """A run of a `.hank` bundle: its `bundleHash` (Hankweave 0.12; docs/bundles.md)."""
    bundle_path: str | None = None
    """A run of a `.hank` bundle: the bundle file (absolute), or its path inside the remote
    repository. `hankPath` is then the verified extraction's `hank.json`."""
    remote: dict[str, str] | None = None
    """A remote hank: `url` (no password), `ref`, `commit` and `path` (docs/remote-hanks.md)."""
    forked_from: ForkOrigin | None = None
    """A fork: the execution, codon, run and checkpoint it continues from (docs/fork.md)."""

    def to_json_bytes(self) -> bytes:
        """The file content: 2-space JSON and a trailing newline, `None` fields left out."""
        data = self.model_dump(by_alias=True, exclude_none=True)
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


_ARCH_NAMES = {
    "x86_64": "x64",
    "amd64": "x64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "i386": "ia32",
}


def current_environment(invocation_method: str = "python") -> MetaEnvironment:
    """This process's platform, in the vocabulary of the original (`linux`, `x64`, ...)."""
    machine = platform.machine()
    return MetaEnvironment(
        invocation_method=invocation_method,
        platform=sys.platform,
        arch=_ARCH_NAMES.get(machine.lower(), machine),
        os_release=platform.release(),
        runtime=f"python {platform.python_version()}",
    )


def load_execution_meta(path: Path) -> ExecutionMeta:
    """Read `execution-meta.json`.

    Raises:
        ExecutionMetaError: the file is missing, unreadable, not JSON or not valid metadata;
            the message names the file.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExecutionMetaError(f"Execution metadata not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExecutionMetaError(f"Cannot read execution metadata {path}: {exc}") from None
    try:
        return ExecutionMeta.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or '<root>'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ExecutionMetaError(f"Invalid execution metadata {path}: {problems}") from None


def save_execution_meta(path: Path, meta: ExecutionMeta) -> None:
    """Write `execution-meta.json` atomically (a reader sees the old or the new file)."""
    atomic_write_bytes(path, meta.to_json_bytes(), mode=PRIVATE_FILE_MODE)
