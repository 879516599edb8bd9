"""``recording.json``: the manifest that says what a recording holds, and how it is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from hankweave_replay.format import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_FILE,
    RecordingError,
    __version__,
)


class _Model(BaseModel):
    # Unknown keys are kept, so a manifest written by a newer minor version still opens.  Built
    # on first use: the module is imported at every CLI start.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow",
                              serialize_by_alias=True, defer_build=True)


class RecordedCodon(_Model):
    """One codon record a recording covers: the newest attempt of a codon in the recorded
    execution thread."""

    codon_id: str
    """The runtime codon id (``review#1`` inside loops)."""
    run_id: str
    status: str
    """The recorded record's status (``completed``, ``failed``, ``skipped``, ...)."""
    log: str | None
    """The codon log inside the recording (``logs/<runId>/<codon>-claude.log``), or None when
    the record never started an agent (it failed or was skipped before).  A path whose file is
    absent from the recording is a missing log."""
    snapshot: str | None
    """The end-of-codon checkpoint id; its files are under ``snapshots/<id>/``.  None when the
    record has no such checkpoint (its effects on the workspace are not replayed)."""
    checkpoint_patterns: list[str] = Field(default_factory=list)
    """The ``checkpointedFiles`` patterns in force when the snapshot was taken: the files of the
    work tree they select are made exactly the snapshot's on replay."""


class RecordingManifest(_Model):
    """``recording.json``: what an exported recording holds."""

    format: Literal["hankweave-recording"] = FORMAT
    format_version: int = FORMAT_VERSION
    created_at: str
    hankweave_version: str
    replay_version: str = __version__
    hank: str
    """The hank file inside the recording (``hank/hank.json``)."""
    data: str | None
    """The data source inside the recording, or None when it was left out (see ``notes``)."""
    checkpoint_backend: str
    """The backend the snapshots were read with (informational)."""
    complete: bool
    """Whether the recorded execution had finished its plan.  An unfinished recording (a run
    that failed or was stopped) replays up to where it stopped."""
    codons: list[RecordedCodon] = Field(default_factory=list)
    """Chronological: the order the recorded thread ran them."""
    notes: list[str] = Field(default_factory=list)
    """What was left out or changed while exporting (large files, redactions, ...)."""
    bundle_hash: str | None = None
    """The ``bundleHash`` of the ``.hank`` bundle the recorded run was started from (its
    ``hank.lock`` is in the hank folder), or None when it ran a hank directory."""
    redactions: int = 0
    """How many secrets were replaced with ``[REDACTED:<kind>]`` (the notes say where)."""
    redactions_by_kind: dict[str, int] = Field(default_factory=dict)
    """:attr:`redactions` by kind (``env``, ``provider-key``, ``token``, ``url-credentials``:
    :data:`hankweave.api.REDACTION_KINDS`)."""


def read_manifest(root: Path) -> RecordingManifest:
    """Read and check ``recording.json`` of an unpacked recording."""
    path = root / MANIFEST_FILE
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise RecordingError(f"not a hankweave recording: {MANIFEST_FILE} is missing") from None
    except (OSError, ValueError) as exc:
        raise RecordingError(f"cannot read {MANIFEST_FILE}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise RecordingError(f"not a hankweave recording: {MANIFEST_FILE} has no"
                             f' "format": "{FORMAT}"')
    version = raw.get("formatVersion")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise RecordingError(f"the recording has format version {version}, newer than this"
                             f" hankweave-replay {__version__} reads ({FORMAT_VERSION}); upgrade"
                             " with: pip install -U hankweave-replay")
    try:
        return RecordingManifest.model_validate(raw)
    except ValidationError as exc:
        raise RecordingError(f"invalid {MANIFEST_FILE}: {validation_problems(exc)}") from None


def write_manifest(root: Path, manifest: RecordingManifest) -> None:
    """Write ``recording.json`` into the unpacked recording at ``root``."""
    (root / MANIFEST_FILE).write_text(
        json.dumps(manifest.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8")


def validation_problems(exc: ValidationError, most: int | None = None) -> str:
    """A model's refusal in one line: ``where: why`` for each problem (the first ``most``)."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}"
                     for e in exc.errors()[:most])
