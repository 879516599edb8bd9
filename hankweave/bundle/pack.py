"""``hankweave pack``: a hank's closure as one deterministic ``.hank`` file, and its lock.

The bundle is zstd (level 19) over the canonical tar of ``hank.lock`` then the closure's files
sorted by their UTF-8 bytes (:mod:`hankweave.bundle.tar`): the same hank packs to the same bytes
on any machine, whatever the files' times, owners or umask. The bundle is published atomically
(a temporary file beside it, then a rename), then the same lock is written beside the hank as
``hank.lock`` (the "sidecar", for review in version control) unless ``--no-lock``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from hankweave.bundle.closure import (
    IGNORE_DEFAULTS_FINGERPRINT,
    LOCK_NAME,
    Closure,
    compute_closure,
    hank_file_of,
)
from hankweave.bundle.lock import (
    COMPATIBLE_RUNTIME,
    SEMVER,
    HankLock,
    LockedFile,
    bundle_hash,
    serialize_lock,
)
from hankweave.bundle.tar import Member, write_tar
from hankweave.fsutil import atomic_write_bytes

__all__ = ["BUNDLE_SUFFIXES", "PackError", "PackResult", "build_lock", "default_bundle_name",
           "pack_hank"]

BUNDLE_SUFFIXES = (".hank", ".tar.zst")
ZSTD_LEVEL = 19


class PackError(Exception):
    """The hank cannot be packed (the message says why and where)."""


@dataclass(frozen=True)
class PackResult:
    closure: Closure
    lock: HankLock | None
    """None with ``check``: nothing was built."""
    output: Path | None = None
    sidecar: Path | None = None
    bundle_bytes: int = 0


def build_lock(closure: Closure, runtime_min: str = COMPATIBLE_RUNTIME) -> HankLock:
    """The lock of a closure that succeeded (``runtime_min``: the oldest runtime it needs)."""
    from hankweave.bundle.inputs import codon_inputs

    files = {f.path: LockedFile(mode=f.mode, sha256=f.sha256) for f in closure.sorted_files()}
    digest = bundle_hash(files, runtime_min)
    meta = (closure.raw or {}).get("meta")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) and meta["name"] else None
    version = meta.get("version") if isinstance(meta.get("version"), str) and meta[
        "version"] else None
    return HankLock.model_validate({
        "v": 1, "name": name or f"hank-{digest[:12]}", "version": version or "0.0.0",
        "bundleHash": digest, "files": {p: e.model_dump() for p, e in files.items()},
        "codonInputs": codon_inputs(closure), "runtime": {"min": runtime_min},
        "ignoreDefaults": IGNORE_DEFAULTS_FINGERPRINT})


def bundle_bytes(closure: Closure, lock: HankLock) -> bytes:
    """The ``.hank`` file: zstd of the canonical tar, the lock first."""
    import zstandard

    members = [Member(LOCK_NAME, serialize_lock(lock), "644")]
    members += [Member(f.path, f.data, f.mode) for f in closure.sorted_files()]
    tar = write_tar(members)
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True,
                                    write_checksum=False).compress(tar)


def default_bundle_name(closure: Closure) -> str:
    """``<name>-<version>.hank`` from the hank's ``meta`` (else its folder), made file-safe."""
    meta = (closure.raw or {}).get("meta")
    meta = meta if isinstance(meta, dict) else {}
    name = str(meta["name"]) if isinstance(meta.get("name"), str) else closure.hank_dir.name
    version = str(meta["version"]) if isinstance(meta.get("version"), str) else "unversioned"
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9._-]+", "-", f"{name}".lower())).strip("-")
    version_slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", version).strip("-")
    if not slug or not version_slug:
        raise PackError("meta.name/meta.version do not form a safe file name; give"
                        " --output NAME.hank")
    return f"{slug}-{version_slug}.hank"


def pack_hank(argument: Path, *, output: Path | None = None, check: bool = False,
              write_sidecar: bool = True, runtime_min: str | None = None,
              cwd: Path | None = None) -> PackResult:
    """Pack the hank ``argument`` names (a directory or its hank file).

    Raises:
        PackError: a usage problem, or the bundle could not be written. A hank with problems is
            not an error here: the result's closure lists them and nothing is written.
    """
    runtime_min = runtime_min or COMPATIBLE_RUNTIME
    if not SEMVER.match(runtime_min):
        raise PackError(f"--min-runtime {runtime_min!r} is not a SemVer version (like 0.12.0)")
    if output is not None and not str(output).endswith(BUNDLE_SUFFIXES):
        raise PackError(f"--output must end in .hank or .tar.zst so that run recognises it"
                        f" (got {str(output)!r})")
    hank_file = hank_file_of(argument)
    if not os.path.exists(argument):
        raise PackError(f"{argument} does not exist")
    closure = compute_closure(hank_file)
    if not closure.ok or check:
        return PackResult(closure, None)
    lock = build_lock(closure, runtime_min)
    target = Path(os.path.abspath((cwd or Path.cwd()) / (output or default_bundle_name(closure))))
    _check_target(target, closure)
    data = bundle_bytes(closure, lock)
    try:
        atomic_write_bytes(target, data, mode=0o644)
    except OSError as exc:
        raise PackError(f"cannot write {target}: {exc.strerror or exc}") from None
    sidecar = None
    if write_sidecar:
        sidecar = closure.hank_dir / LOCK_NAME
        try:
            atomic_write_bytes(sidecar, serialize_lock(lock), mode=0o644)
        except OSError as exc:
            raise PackError(f"the bundle is written at {target}, but writing the lock"
                            f" {sidecar} failed: {exc.strerror or exc}") from None
    return PackResult(closure, lock, target, sidecar, len(data))


def _check_target(target: Path, closure: Closure) -> None:
    if not target.parent.is_dir():
        raise PackError(f"output directory {target.parent} does not exist")
    if target.is_dir():
        raise PackError(f"output {target} is a directory")
    for path in closure.files:
        source = closure.hank_dir / path
        if target == source or (os.path.exists(target) and os.path.samefile(target, source)):
            raise PackError(f"output {target} would overwrite the hank's own file {path}")
    for record in closure.refs.values():
        if record.kind == "dir" and target.is_relative_to(closure.hank_dir / record.path):
            raise PackError(f"output {target} is inside the copied directory {record.path};"
                            " it would be swept into the next pack")
