"""Exporting: an execution directory staged as an unpacked recording, then packed into one
reproducible ``.hwrec.tar.gz``."""

from __future__ import annotations

import contextlib
import gzip
import os
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave_replay.codons import stage_codons
from hankweave_replay.execution import (
    backend_name,
    covered_records,
    read_meta,
    read_state,
    refuse_live_runtime,
)
from hankweave_replay.format import META_FILE, RECORDING_SUFFIX, STATE_FILE, RecordingError
from hankweave_replay.manifest import RecordedCodon, RecordingManifest, write_manifest
from hankweave_replay.staging import Staging, neutral_meta, stage_data, stage_hank

if TYPE_CHECKING:
    from hankweave.api import ExecutionLayout, HankweaveState


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_recording` wrote."""

    path: Path
    manifest: RecordingManifest
    size: int
    """The archive's size in bytes."""
    redactions: int
    """How many secrets were replaced with ``[REDACTED:<kind>]`` (by kind: the manifest's
    ``redactions_by_kind``)."""


def export_recording(execution_dir: Path, output: Path | None = None, *,
                     env: Mapping[str, str] | None = None, cwd: Path | None = None,
                     backend: str | None = None, redact: bool = True) -> ExportResult:
    """Write the recording of ``execution_dir`` to one ``.tar.gz`` archive.

    ``output`` defaults to ``<execution dir name>.hwrec.tar.gz`` in ``cwd``; an existing file
    is replaced (atomically: a reader sees the old or the new archive).  ``env`` (default: this
    process's environment) selects the checkpoint backend like the runtime does and names
    secrets to redact (see :func:`stage_recording`); ``backend`` overrides the backend name.

    Raises :class:`RecordingError` when the directory is not a finished execution, a runtime
    holds its lock, its hank is gone, or a checkpoint cannot be read.
    """
    env = dict(os.environ) if env is None else dict(env)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    execution_dir = Path(os.path.abspath(cwd / execution_dir))
    target = Path(os.path.abspath(cwd / (output or f"{execution_dir.name}{RECORDING_SUFFIX}")))
    if target.is_dir():
        raise RecordingError(f"{target} is a directory; give the archive's file name, such as"
                             f" {target / (execution_dir.name + RECORDING_SUFFIX)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hankweave-export-") as scratch:
        staging = Path(scratch) / "recording"
        manifest = stage_recording(execution_dir, staging, env=env, cwd=cwd, backend=backend,
                                   exclude=(target,), redact=redact)
        partial = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            _write_archive(staging, partial, manifest.created_at)
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
    return ExportResult(target, manifest, target.stat().st_size, manifest.redactions)


def stage_recording(execution_dir: Path, target: Path, *, env: Mapping[str, str],
                    cwd: Path, backend: str | None = None, exclude: Sequence[Path] = (),
                    minimal: bool = False, redact: bool = True) -> RecordingManifest:
    """Write the unpacked recording of ``execution_dir`` into the new directory ``target``.

    This is the one way a recording is made: :func:`export_recording` archives the result, and
    opening an execution directory for replay stages it into a temporary directory first.
    ``exclude`` names files never to copy (the archive being written).

    ``minimal`` (what opening for replay passes) also accepts an execution that records only
    what replay needs, as Hankweave 0.10.0's replay does: ``state.json`` runs of codons with
    their ``codonId`` and ``claudeLogPath``, and an ``execution-meta.json`` naming the hank
    (see :mod:`hankweave_replay.minimal`).  Such an execution has no checkpoints, so its file
    changes are not replayed (a note says so).

    With ``redact`` (the default), once every file is staged each one has its secrets replaced
    with ``[REDACTED:<kind>]`` (:mod:`hankweave_replay.redaction`): the values of the recorded
    ``env`` maps, of provider-key variables assigned anywhere in the recording, of ``env``'s
    passthrough and secret-looking variables, and token shapes.  Opening an execution directory
    for replay redacts too, so the copy a replayed execution keeps holds no secret either.
    """
    source = _read_execution(Path(execution_dir), env=env, cwd=cwd, backend=backend,
                             minimal=minimal)
    staging = _new_staging(target, source.notes)
    skip = {Path(os.path.abspath(p)) for p in exclude} | {source.layout.path}
    members = _stage_members(staging, source, skip, env)
    if redact:
        staging.redact(env)
    else:
        staging.notes.append("secrets were not redacted (exported with --no-redact)")
    manifest = _manifest(source, staging, members)
    write_manifest(target, manifest)
    return manifest


@dataclass
class _Execution:
    """The execution a recording is made of, read and checked before anything is written."""

    layout: ExecutionLayout
    meta: dict[str, Any]
    """The raw ``execution-meta.json``."""
    hank_file: Path
    state: HankweaveState
    notes: list[str]
    """What reading it changed (a minimal recorded state), for the manifest."""
    backend_name: str
    complete: bool
    """Whether it had finished its plan."""


@dataclass(frozen=True)
class _Members:
    """Where the staged hank and data are inside the recording, and the covered codons."""

    hank: str
    data: str | None
    codons: list[RecordedCodon]


def _read_execution(execution_dir: Path, *, env: Mapping[str, str], cwd: Path,
                    backend: str | None, minimal: bool) -> _Execution:
    from hankweave.api import ExecutionLayout, analyze_execution_thread

    layout = ExecutionLayout(execution_dir)
    hw = layout.hankweave_dir
    if not layout.state_file.exists() and not layout.state_log_file.exists():
        raise RecordingError(f"{layout.path}: not an execution directory (no"
                             " .hankweave/state.json)")
    refuse_live_runtime(hw)
    meta, hank_file = read_meta(layout, minimal=minimal)
    state, notes = read_state(hw, minimal=minimal, created_at=meta.get("createdAt"))
    name = backend or backend_name(hank_file, env, cwd)
    thread = analyze_execution_thread(state)
    complete = not thread.failed and not thread.has_running_codon and thread.next_codon_id is None
    return _Execution(layout, meta, hank_file, state, notes, name, complete)


def _new_staging(target: Path, notes: list[str]) -> Staging:
    if target.exists() and any(target.iterdir()):
        raise RecordingError(f"{target}: the staging directory is not empty")
    target.mkdir(parents=True, exist_ok=True)
    return Staging(target, notes=notes)


def _stage_members(staging: Staging, source: _Execution, skip: set[Path],
                   env: Mapping[str, str]) -> _Members:
    """Stage every member but the manifest: the hank, the data, the codons' logs and
    snapshots, the state and the metadata."""
    from hankweave.api import dump_state

    hank = stage_hank(staging, source.hank_file, skip)
    data = stage_data(staging, source.layout, source.meta, skip)
    state = source.state
    codons = stage_codons(staging, source.layout.path, state, covered_records(state),
                          source.backend_name, env)
    for run in state.runs:
        # The only absolute path in state: where the recording machine kept the run's logs.
        run.run_folder = f".hankweave/runs/{run.run_id}"
    staging.write(STATE_FILE, dump_state(state) + b"\n")
    staging.write(META_FILE, neutral_meta(source.meta, hank, data))
    return _Members(hank, data, codons)


def _manifest(source: _Execution, staging: Staging, members: _Members) -> RecordingManifest:
    from hankweave.api import REDACTION_KINDS, utc_now_iso
    from hankweave.api import __version__ as hankweave_version

    total = staging.note_redactions()
    return RecordingManifest(
        created_at=utc_now_iso(), hankweave_version=hankweave_version, hank=members.hank,
        data=members.data, checkpoint_backend=source.backend_name, complete=source.complete,
        bundle_hash=(source.meta.get("bundleHash")
                     if isinstance(source.meta.get("bundleHash"), str) else None),
        codons=members.codons, notes=staging.notes, redactions=total,
        redactions_by_kind={kind: staging.redactions[kind] for kind in REDACTION_KINDS
                            if staging.redactions[kind]})


def _write_archive(root: Path, output: Path, created_at: str) -> None:
    """A gzipped tar of ``root``: sorted members, neutral owners, one mtime, so exporting the
    same execution twice gives the same bytes."""
    from hankweave.api import parse_iso

    mtime = int(parse_iso(created_at).timestamp())
    with open(output, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(_archive_paths(root)):
            rel = path.relative_to(root).as_posix()
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            if info.isfile():
                info.mode = 0o755 if info.mode & 0o111 else 0o644
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                info.mode = 0o755 if info.isdir() else 0o777
                tar.addfile(info)
        raw.flush()
        os.fsync(raw.fileno())


def _archive_paths(root: Path) -> Iterator[Path]:
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            yield Path(directory, name)
