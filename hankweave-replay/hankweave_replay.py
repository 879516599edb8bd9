"""Replay recorded hankweave executions offline, and export them as portable recordings.

Two things, one module:

**Recordings.** ``hankweave export -e DIR -o FILE`` packs a finished execution into one
``.hwrec.tar.gz`` archive that replays on any machine::

    recording.json          the manifest (RecordingManifest): which codon records it covers
    state.json              the recorded state, run folders made relative
    execution-meta.json     hank and data paths pointing inside the archive
    hank/                   the hank directory: hank.json and every file it references
    data/                   the data source, when it is small (<= 10 MiB)
    logs/<runId>/*.log      the codon logs of the covered records
    snapshots/<checkpoint>/ each covered record's end-of-codon checkpoint, as plain files

Snapshots are written by the execution's own checkpoint backend
(:meth:`~hankweave.checkpoints.CheckpointStore.materialize`), so the archive never holds a
nested git repository.  Secrets are left out or redacted: no ``runtime.lock`` (the control
token), no ``logs/server.log``, no event journal, no environment; in every file written, the
values of the recorded ``env`` maps, of provider-key variables (those of the exporting shell and
those assigned anywhere in the recording), of secret-looking shell variables and the
``HANKWEAVE_<X>`` passthrough, and common token shapes become ``[REDACTED:<kind>]``
(:class:`hankweave.api.Redactor`; ``--no-redact`` opts out).

**Replay.** :class:`ReplayHarness` is the harness registered as ``replay``.  The kernel's
``--replay SOURCE`` (and ``hankweave replay SOURCE``) calls :meth:`ReplayHarness.open_recording`
with an archive, an unpacked recording or an execution directory (exported to a temporary
directory first, so there is one path), then runs the recorded hank in a fresh execution with a
harness class bound to the recording; the new execution keeps a copy of the opened recording
(``.hankweave/recording/``), which ``hankweave run -e DIR`` reopens to resume the replay.  Each
codon streams its recorded log records unchanged, instantly or with the recorded gaps, and just
before the ``result`` record that ends its last pass makes the recorded workspace effects
happen: the covered files of ``agentRoot/`` become exactly those of the recorded end-of-codon
snapshot.  A replay never calls a provider.

The plugin's entry point is :mod:`hankweave_replay_plugin`, which every ``hankweave`` start
loads; this module is imported only when a replay, an export or the harness list needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any, ClassVar, Literal, cast

import click
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

# The kernel API beyond the harness interface is imported where it is used.
from hankweave.api import REPLAY_HARNESS, Harness
from hankweave.api import __version__ as hankweave_version
from hankweave_replay_plugin import RECORDING_SUFFIX, export_command

if TYPE_CHECKING:
    from hankweave.api import (
        AttemptContext,
        CheckpointStore,
        CodonExecution,
        CodonRequest,
        HankweaveState,
        Redactor,
    )

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "RECORDING_SUFFIX",
    "ArchiveLimits",
    "ExportResult",
    "RecordedCodon",
    "RecordingError",
    "RecordingManifest",
    "ReplayHarness",
    "ReplayRecording",
    "apply_snapshot",
    "export_command",
    "export_recording",
    "stage_recording",
    "unpack_recording",
]

__version__ = "0.1.0"

FORMAT: Literal["hankweave-recording"] = "hankweave-recording"
FORMAT_VERSION = 1
"""Bumped when a reader of an older version could not replay the archive correctly."""
MANIFEST_FILE = "recording.json"
STATE_FILE = "state.json"
META_FILE = "execution-meta.json"
HANK_DIR = "hank"
DATA_DIR = "data"
LOGS_DIR = "logs"
SNAPSHOTS_DIR = "snapshots"

MAX_DATA_BYTES = 10 * 1024 * 1024
"""A data source larger than this (in total) is left out of the archive, with a note."""
MAX_HANK_FILE_BYTES = 10 * 1024 * 1024
"""A hank-directory file larger than this is left out (hank files are prompts and templates)."""
DEFAULT_MAX_DELAY_MS = 5000
"""The cap on one recorded gap in ``recorded`` pacing (the original's default)."""
UNTIMED_GAP_MS = 5
"""The gap in ``recorded`` pacing when a record has no usable timestamp (the original's)."""
SPEEDS = ("instant", "recorded")
MINIMAL_STATE_TIME = "1970-01-01T00:00:00.000Z"
"""The time given to what a minimal recorded state leaves undated, when its metadata has no
``createdAt`` either."""
_NO_CHECKPOINT = "none"
"""The original's ``completionCheckpoint`` placeholder: no checkpoint to restore."""


class RecordingError(ValueError):
    """A recording cannot be written, unpacked or opened; the message says what and where.

    A ``ValueError``, so the kernel's launch reports it as "Cannot replay SOURCE: ...".
    """


# ----- the manifest -----------------------------------------------------------------------------


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
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}"
                             for e in exc.errors())
        raise RecordingError(f"invalid {MANIFEST_FILE}: {problems}") from None


# ----- secrets ----------------------------------------------------------------------------------


_HANK_ENV_KEYS = frozenset({"env", "environment", "envVars"})
"""The key of a codon's ``env`` map, and the spellings the hank loader corrects to it (only in
hank files: ``execution-meta.json``'s ``environment`` describes the machine)."""


def _env_maps(value: Any, keys: frozenset[str]) -> Iterator[Mapping[str, str]]:
    """Every ``env`` map (an object of strings under one of ``keys``) in parsed JSON: the
    codons' in the hank file and in the state's recorded plan, and any other a later format
    adds."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in keys and isinstance(item, dict) and \
                    all(isinstance(v, str) for v in item.values()):
                yield item
            else:
                yield from _env_maps(item, keys)
    elif isinstance(value, list):
        for item in value:
            yield from _env_maps(item, keys)


def _export_redactor(files: Mapping[str, Path], env: Mapping[str, str]) -> Redactor:
    """The redactor of one recording, told every secret it must find before it redacts.

    Known before reading: the values of every ``env`` map in the staged hank directory's JSON
    files and ``state.json`` (whatever the variable's name), and the exporting shell's
    ``HANKWEAVE_<X>`` passthrough values and secret-looking variables.  Then this first pass
    over every staged file learns the values assigned to provider-key variables in it
    (``OPENAI_API_KEY=...`` an agent printed), so they are redacted everywhere, not only where
    they were assigned.
    """
    from hankweave.api import Redactor, hankweave_passthrough

    redactor = Redactor()
    for relative, path in files.items():
        in_hank = relative.startswith(f"{HANK_DIR}/") and relative.endswith(".json")
        if in_hank or relative == STATE_FILE:
            with contextlib.suppress(ValueError):
                keys = _HANK_ENV_KEYS if in_hank else frozenset({"env"})
                for env_map in _env_maps(json.loads(path.read_bytes()), keys):
                    redactor.add_env(env_map)
    redactor.add_env(hankweave_passthrough(env).set)
    redactor.add_env(env, secret_names_only=True)
    for path in files.values():  # one file in memory at a time: snapshots may be large
        redactor.learn(path.read_bytes().decode("utf-8", "surrogateescape"))
    return redactor


@dataclass
class _Staging:
    """What one export collects while it writes the staging directory."""

    root: Path
    notes: list[str] = field(default_factory=list)
    redactions: Counter[str] = field(default_factory=Counter)
    redacted_files: list[str] = field(default_factory=list)

    def write(self, relative: str, data: bytes, *, executable: bool = False) -> None:
        """Write one archive member (redacted later, once every member is known)."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o755 if executable else 0o644)

    def redact(self, env: Mapping[str, str]) -> None:
        """Replace every secret in every staged file (symlinks of snapshots are not files)."""
        files: dict[str, Path] = {}
        for directory, _, names in os.walk(self.root):  # never follows a link
            for name in names:
                path = Path(directory, name)
                if not path.is_symlink():
                    files[path.relative_to(self.root).as_posix()] = path
        redactor = _export_redactor(files, env)
        for relative, path in sorted(files.items()):
            redacted, counts = redactor.redact_bytes(path.read_bytes())
            if counts:
                mode = stat.S_IMODE(path.stat().st_mode)
                path.write_bytes(redacted)
                path.chmod(mode)
                self.redactions.update(counts)
                self.redacted_files.append(relative)


# ----- export -----------------------------------------------------------------------------------


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
    (see :func:`_complete_minimal_state`).  Such an execution has no checkpoints, so its file
    changes are not replayed (a note says so).

    With ``redact`` (the default), once every file is staged each one has its secrets replaced
    with ``[REDACTED:<kind>]`` (:meth:`_Staging.redact`): the values of the recorded ``env``
    maps, of provider-key variables assigned anywhere in the recording, of ``env``'s
    passthrough and secret-looking variables, and token shapes.  Opening an execution directory
    for replay redacts too, so the copy a replayed execution keeps holds no secret either.
    """
    from hankweave.api import (
        REDACTION_KINDS,
        ExecutionLayout,
        analyze_execution_thread,
        dump_state,
        utc_now_iso,
    )

    layout = ExecutionLayout(Path(execution_dir))
    hw = layout.hankweave_dir
    if not layout.state_file.exists() and not layout.state_log_file.exists():
        raise RecordingError(f"{layout.path}: not an execution directory (no"
                             " .hankweave/state.json)")
    _refuse_live_runtime(hw)
    meta_raw, hank_file = _read_meta(layout, minimal=minimal)
    state, state_notes = _read_state(hw, minimal=minimal, created_at=meta_raw.get("createdAt"))
    backend_name = backend or _backend_name(hank_file, env, cwd)
    if target.exists() and any(target.iterdir()):
        raise RecordingError(f"{target}: the staging directory is not empty")
    target.mkdir(parents=True, exist_ok=True)
    staging = _Staging(target, notes=state_notes)
    skip = {Path(os.path.abspath(p)) for p in exclude} | {layout.path}

    hank_member = _stage_hank(staging, hank_file, skip)
    data_member = _stage_data(staging, layout, meta_raw, skip)
    thread = analyze_execution_thread(state)
    complete = not thread.failed and not thread.has_running_codon and thread.next_codon_id is None
    chosen = _covered_records(state)
    codons = _stage_codons(staging, layout, state, chosen, backend_name, env)

    for run in state.runs:
        # The only absolute path in state: where the recording machine kept the run's logs.
        run.run_folder = f".hankweave/runs/{run.run_id}"
    staging.write(STATE_FILE, dump_state(state) + b"\n")
    staging.write(META_FILE, _neutral_meta(meta_raw, hank_member, data_member))
    if redact:
        staging.redact(env)
    else:
        staging.notes.append("secrets were not redacted (exported with --no-redact)")
    total = sum(staging.redactions.values())
    if total:
        shown = ", ".join(staging.redacted_files[:10])
        more = len(staging.redacted_files) - 10
        staging.notes.append(f"{total} secret(s) replaced with [REDACTED:<kind>] in"
                             f" {shown}{f' and {more} more file(s)' if more > 0 else ''}")
    manifest = RecordingManifest(
        created_at=utc_now_iso(), hankweave_version=hankweave_version, hank=hank_member,
        data=data_member, checkpoint_backend=backend_name, complete=complete, codons=codons,
        notes=staging.notes, redactions=total,
        redactions_by_kind={kind: staging.redactions[kind] for kind in REDACTION_KINDS
                            if staging.redactions[kind]})
    (target / MANIFEST_FILE).write_text(
        json.dumps(manifest.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8")
    return manifest


def _refuse_live_runtime(hankweave_dir: Path) -> None:
    from hankweave.api import LockCorruptError, live_runtime_lock

    try:
        holder = live_runtime_lock(hankweave_dir)
    except LockCorruptError as exc:
        raise RecordingError(str(exc)) from None
    if holder is not None:
        raise RecordingError(
            f"{hankweave_dir.parent} is in use by a running hankweave runtime"
            f" ({holder.describe()}); export it after the run has ended")


def _read_state(hankweave_dir: Path, *, minimal: bool = False, created_at: Any = None,
                ) -> tuple[HankweaveState, list[str]]:
    """The execution's state, strictly read, and notes for the recording's manifest.

    With ``minimal``, a ``state.json`` the state model refuses is read again as a minimal
    recorded state (:func:`_complete_minimal_state`), its timestamps ``created_at``.
    """
    from hankweave.api import StateLoadError, read_state_strict

    notes: list[str] = []
    try:
        state, _ = read_state_strict(hankweave_dir)
    except StateLoadError as exc:
        if not minimal:
            raise RecordingError(str(exc)) from None
        state, notes = _read_minimal_state(hankweave_dir / STATE_FILE, str(exc), created_at)
    if not state.runs:
        raise RecordingError(f"{hankweave_dir.parent} has no runs yet: there is nothing to"
                             " record")
    return state, notes


def _read_minimal_state(path: Path, strict_error: str, created_at: Any,
                        ) -> tuple[HankweaveState, list[str]]:
    from hankweave.api import HankweaveState

    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
        raise RecordingError(strict_error) from None  # the strict reader's message says why
    if not isinstance(raw, dict):
        raise RecordingError(f"{path}: not a state (the file is not a JSON object)")
    stamp = created_at if isinstance(created_at, str) and created_at else MINIMAL_STATE_TIME
    uncheckpointed = _complete_minimal_state(raw, path, stamp)
    try:
        state = HankweaveState.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}"
                             for e in exc.errors()[:5])
        raise RecordingError(f"{path}: not a state replay can read: {problems}") from None
    notes = []
    if uncheckpointed:
        notes.append(f"the recorded state has no end-of-codon checkpoint for codon(s)"
                     f" {', '.join(uncheckpointed)} (a minimal recorded state); their logs are"
                     " replayed, their file changes are not")
    return state, notes


def _complete_minimal_state(raw: dict[str, Any], path: Path, stamp: str) -> list[str]:
    """Fill in, in place, what the state model requires and a minimal recorded state lacks.

    Hankweave 0.10.0's replay reads only each run's codons, their ``codonId`` and
    ``claudeLogPath`` (its own fixtures write nothing more), so a state of that shape is
    completed here: a run's ``runId`` (``run-<n>``), ``runFolder`` (``.hankweave/runs/<runId>``),
    ``gitBranch``, ``startingConditions`` (fresh), ``startTime`` and ``serverPid``; a codon's
    ``status`` (completed) and the fields its status requires, with no checkpoint and no
    recorded cost (the replay takes costs from the logs).  Only what replay cannot do without
    is an error: a run with codons, and each codon's ``codonId`` and ``claudeLogPath`` (a
    failed or skipped record without one never started an agent).

    Returns the ids of the codons that ran an agent and have no end-of-codon checkpoint.
    """
    from hankweave.api import run_branch

    runs = raw.get("runs")
    if not isinstance(runs, list) or not any(
            isinstance(run, dict) and run.get("codons") for run in runs):
        raise RecordingError(f"{path}: no run with codons (runs[].codons): there is nothing to"
                             " replay")
    uncheckpointed: list[str] = []
    for number, run in enumerate(runs, start=1):
        if not isinstance(run, dict):
            raise RecordingError(f"{path}: run {number} is not a JSON object")
        run_id = run.setdefault("runId", f"run-{number}")
        if not isinstance(run_id, str) or not run_id:
            raise RecordingError(f"{path}: run {number} has an invalid runId ({run_id!r})")
        run.setdefault("runFolder", f".hankweave/runs/{run_id}")
        run.setdefault("gitBranch", run_branch(run_id))
        run.setdefault("startingConditions", {"type": "fresh"})
        run.setdefault("startTime", stamp)
        run.setdefault("serverPid", 0)
        codons = run.setdefault("codons", [])
        if not isinstance(codons, list):
            raise RecordingError(f"{path}: the codons of run {run_id} are not a list")
        for position, record in enumerate(codons, start=1):
            if not isinstance(record, dict):
                raise RecordingError(f"{path}: codon {position} of run {run_id} is not a JSON"
                                     " object")
            if not _complete_minimal_codon(record, path, run_id, position, run["startTime"],
                                           stamp):
                uncheckpointed.append(record["codonId"])
    return list(dict.fromkeys(uncheckpointed))


def _complete_minimal_codon(record: dict[str, Any], path: Path, run_id: str, position: int,
                            start: Any, stamp: str) -> bool:
    """Complete one codon record (see :func:`_complete_minimal_state`); False when it ran an
    agent and has no end-of-codon checkpoint (its file changes cannot be replayed)."""
    codon_id = record.get("codonId")
    if not isinstance(codon_id, str) or not codon_id:
        raise RecordingError(f"{path}: codon {position} of run {run_id} has no codonId")
    status = record.setdefault("status", "completed")
    log = record.get("claudeLogPath")
    agent_started = isinstance(log, str) and bool(log)
    if not agent_started and status not in ("failed", "skipped"):
        raise RecordingError(f"{path}: codon {codon_id} (run {run_id}) has no claudeLogPath:"
                             " replay plays each codon's recorded log")
    during = "running" if agent_started else "preparing"
    record.setdefault("startTime", start)
    # The fields each status requires (the state model's), where the record has none.
    required: dict[str, dict[str, Any]] = {
        "completed": {"endTime": stamp, "finalCost": 0.0, "finalTokens": {},
                      "completionCheckpoint": _NO_CHECKPOINT},
        "failed": {"endTime": stamp, "failedDuring": during, "exitCode": 1,
                   "failureReason": {"type": "unknown", "retriable": False}},
        "skipped": {"endTime": stamp, "skippedDuring": during},
        "initializing": {"claudePid": 0},
        "running": {"claudePid": 0, "claudeSessionId": ""},
        "completing-sentinels": {"claudePid": 0, "claudeSessionId": ""},
    }
    for key, value in (required.get(status, {}) if isinstance(status, str) else {}).items():
        record.setdefault(key, value)
    checkpoint = {"completed": "completionCheckpoint", "failed": "errorCheckpoint",
                  "skipped": "skipCheckpoint"}.get(status)
    no_checkpoint = checkpoint is not None and record.get(checkpoint) in (None, _NO_CHECKPOINT)
    return not (agent_started and no_checkpoint)


def _read_meta(layout: Any, *, minimal: bool = False) -> tuple[dict[str, Any], Path]:
    """The raw ``execution-meta.json`` and the hank file it names.

    With ``minimal``, metadata the model refuses is used as it is, provided it names the hank.
    """
    from hankweave.api import ExecutionMetaError, load_execution_meta

    try:
        meta = load_execution_meta(layout.meta_file)
        raw = json.loads(layout.meta_file.read_text(encoding="utf-8"))
        hank_path = meta.hank_path
    except ExecutionMetaError as exc:
        raw = _raw_meta(layout.meta_file) if minimal else None
        if raw is None:
            raise RecordingError(f"{exc} (it names the hank to record)") from None
        given = raw.get("hankPath")
        hank_path = given if isinstance(given, str) else None
    if not hank_path:
        raise RecordingError(f"{layout.meta_file} does not name the hank file (hankPath)")
    hank_file = Path(hank_path)
    if not hank_file.is_file():
        raise RecordingError(f"the hank file {hank_file} named in {layout.meta_file} no longer"
                             " exists; a recording needs the hank it ran")
    return raw, hank_file


def _raw_meta(path: Path) -> dict[str, Any] | None:
    """``execution-meta.json`` as a JSON object, unchecked; None when it is not one."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def _backend_name(hank_file: Path, env: Mapping[str, str], cwd: Path) -> str:
    """The checkpoint backend, chosen as the runtime chooses it (settings, default ``git``)."""
    from hankweave.api import ConfigError, load_hank, resolve_settings

    try:
        hank = load_hank(hank_file)
    except ConfigError:
        hank = None  # only its overrides matter here; an unloadable hank has none
    try:
        resolved = resolve_settings(cwd=cwd, hank=hank, env=env, cli={})
    except ConfigError as exc:
        raise RecordingError(f"cannot tell which checkpoint backend holds the snapshots: {exc}"
                             " (or name it with --checkpoint-backend)") from None
    return resolved.settings.checkpoints.backend


def _skipped_name(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def _collect(source: Path, skip: set[Path], keep: Path | None = None,
             ) -> tuple[list[tuple[str, Path, os.stat_result]], list[str]]:
    """The files of a hank or data directory that go into a recording, and what is left out.

    Dotfiles and dot-directories (``.git``, ``.env``, ...), ``__pycache__``, earlier recordings
    and the paths in ``skip`` are left out silently; symlinks, special files, execution
    directories and files over :data:`MAX_HANK_FILE_BYTES` are left out and listed.  ``keep``
    (the hank file) is taken whatever its size.
    """
    files: list[tuple[str, Path, os.stat_result]] = []
    left_out: list[str] = []
    for directory, dirnames, filenames in os.walk(source):
        base = Path(directory)
        rel_dir = base.relative_to(source).as_posix()
        prefix = "" if rel_dir == "." else f"{rel_dir}/"
        kept = []
        for name in sorted(dirnames):
            path = base / name
            if _skipped_name(name) or Path(os.path.abspath(path)) in skip:
                continue
            if path.is_symlink() or (path / ".hankweave").is_dir():
                left_out.append(f"{prefix}{name}/")
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = base / name
            if (_skipped_name(name) or name.endswith(RECORDING_SUFFIX)
                    or Path(os.path.abspath(path)) in skip):
                continue  # an example's bundled recording, the archive being written
            info = path.lstat()
            too_large = info.st_size > MAX_HANK_FILE_BYTES and path != keep
            if not stat.S_ISREG(info.st_mode) or too_large:
                left_out.append(f"{prefix}{name}")
                continue
            files.append((f"{prefix}{name}", path, info))
    return files, left_out


def _copy_files(staging: _Staging, member_root: str, what: str,
                collected: tuple[list[tuple[str, Path, os.stat_result]], list[str]]) -> None:
    files, left_out = collected
    for rel, path, info in files:
        staging.write(f"{member_root}/{rel}", path.read_bytes(),
                      executable=bool(info.st_mode & 0o111))
    if left_out:
        shown = ", ".join(left_out[:10])
        more = f" and {len(left_out) - 10} more" if len(left_out) > 10 else ""
        staging.notes.append(f"left out of the {what} (links, special files, execution"
                             f" directories or files over {_size(MAX_HANK_FILE_BYTES)}):"
                             f" {shown}{more}")


def _stage_hank(staging: _Staging, hank_file: Path, skip: set[Path]) -> str:
    _copy_files(staging, HANK_DIR, "hank directory",
                _collect(hank_file.parent, skip, keep=hank_file))
    member = f"{HANK_DIR}/{hank_file.name}"
    if not (staging.root / member).is_file():
        raise RecordingError(f"the hank file {hank_file} cannot be recorded (a dotfile or not"
                             " a regular file)")
    return member


def _stage_data(staging: _Staging, layout: Any, meta: Mapping[str, Any],
                skip: set[Path]) -> str | None:
    """Copy the data source when it is small; None (with a note) when it is not recorded.

    The execution's own data link (or copy) is what its agents saw, so it is read first; the
    source named in the metadata is the fallback.
    """
    given = meta.get("readOnlySourceDataPath")
    named = Path(given) if isinstance(given, str) and given else None
    source = layout.data_link if layout.data_link.exists() else named
    if source is None or not source.exists():
        staging.notes.append(f"the data source {named.name if named else '(unknown)'} no"
                             " longer exists; the replay uses an empty data directory")
        return None
    if source.is_file():
        size = source.stat().st_size
        if size > MAX_DATA_BYTES:
            staging.notes.append(_data_too_large(named, size))
            return None
        member = f"{DATA_DIR}/{named.name if named else 'data'}"
        staging.write(member, source.read_bytes())
        return member
    collected = _collect(source, skip)
    size = sum(info.st_size for _, _, info in collected[0])
    if size > MAX_DATA_BYTES:
        staging.notes.append(_data_too_large(named, size))
        return None
    _copy_files(staging, DATA_DIR, "data source", collected)
    (staging.root / DATA_DIR).mkdir(exist_ok=True)  # an empty data source is still one
    return DATA_DIR


def _data_too_large(source: Path | None, size: int) -> str:
    # Names, not paths: a recording carries no path of the machine it was made on.
    return (f"the data source {source.name if source else ''} ({_size(size)}) is larger than"
            f" {_size(MAX_DATA_BYTES)} and was left out; the replay uses an empty data"
            " directory unless DATA is given")


def _size(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} bytes"


def _covered_records(state: HankweaveState) -> list[tuple[str, CodonExecution]]:
    """(run id, record) of the newest attempt of each codon in the execution thread, in the
    order they ran.

    The thread is the history the runtime itself continues from: a run rolled back or resumed
    after a crash contributes only what its continuation kept.  A retried codon keeps its
    newest attempt only: every attempt of a codon in one run writes the same log file, so
    earlier attempts' logs no longer exist.
    """
    from hankweave.api import analyze_execution_thread

    newest: dict[str, tuple[str, CodonExecution]] = {}
    for item in reversed(analyze_execution_thread(state).codons):  # oldest first
        newest.pop(item.codon.codon_id, None)  # re-inserted: dict order becomes run order
        newest[item.codon.codon_id] = (item.run_id, item.codon)
    return list(newest.values())


def _stage_codons(staging: _Staging, layout: Any, state: HankweaveState,
                  chosen: list[tuple[str, CodonExecution]], backend_name: str,
                  env: Mapping[str, str]) -> list[RecordedCodon]:
    from hankweave.api import (
        CheckpointError,
        CheckpointNotFoundError,
        checkpoint_patterns_through,
        codon_log_name,
        end_checkpoint,
    )

    codons: list[RecordedCodon] = []
    store: CheckpointStore | None = None
    try:
        for run_id, record in chosen:
            log_member = None
            source_log = _recorded_log(layout.path, getattr(record, "claude_log_path", None))
            if source_log is not None:
                log_member = f"{LOGS_DIR}/{run_id}/{codon_log_name(record.codon_id)}"
                if source_log.is_file():
                    staging.write(log_member, source_log.read_bytes())
                else:
                    staging.notes.append(f"the log of codon {record.codon_id} (run {run_id}) is"
                                         " missing from the execution directory")
            snapshot = end_checkpoint(record)
            if snapshot is not None and not (staging.root / SNAPSHOTS_DIR / snapshot).exists():
                if store is None:
                    store = _open_store(backend_name, layout.path, env)
                try:
                    _stage_snapshot(staging, store, snapshot)
                except CheckpointNotFoundError:
                    staging.notes.append(f"checkpoint {snapshot} of codon {record.codon_id} no"
                                         " longer exists (pruned?); its file changes are not"
                                         " replayed")
                    snapshot = None
                except CheckpointError as exc:
                    raise RecordingError(
                        f"cannot read checkpoint {snapshot} of codon {record.codon_id} with the"
                        f' "{backend_name}" checkpoint backend: {exc} (if the execution used'
                        " another backend, name it with --checkpoint-backend)") from None
            try:
                patterns = checkpoint_patterns_through(state.execution_plan, record.codon_id,
                                                       True)
            except (ValueError, LookupError):  # a record the recorded plan no longer holds
                patterns = []
            codons.append(RecordedCodon(codon_id=record.codon_id, run_id=run_id,
                                        status=record.status, log=log_member, snapshot=snapshot,
                                        checkpoint_patterns=patterns))
    finally:
        if store is not None:
            store.close()
    return codons


def _recorded_log(execution_dir: Path, recorded: str | None) -> Path | None:
    """Where a record's ``claudeLogPath`` is on this machine (it may be absolute, from another
    machine, or use Windows separators)."""
    if not recorded:
        return None
    text = recorded.replace("\\", "/")
    path = Path(text)
    if not path.is_absolute():
        return execution_dir / path
    if path.exists():
        return path
    marker = "/.hankweave/"
    if marker in text:  # an execution directory that has moved: re-root it here
        return execution_dir / ".hankweave" / text.rsplit(marker, 1)[1]
    return path


def _open_store(name: str, execution_dir: Path, env: Mapping[str, str]) -> CheckpointStore:
    from hankweave.api import CheckpointError, Registry, get_registry, make_plugin_manager

    registry = get_registry() if dict(env) == dict(os.environ) else Registry(
        make_plugin_manager(env=env))
    try:
        return registry.checkpoint_backend(name)(execution_dir)
    except CheckpointError as exc:
        raise RecordingError(f"cannot read the execution's checkpoints: {exc}") from None


def _stage_snapshot(staging: _Staging, store: CheckpointStore, checkpoint_id: str) -> None:
    member = f"{SNAPSHOTS_DIR}/{checkpoint_id}"
    root = staging.root / member
    for rel in store.materialize(checkpoint_id, root):  # redacted with every other file
        path = root / rel
        if path.is_symlink() and not (_link_stays_inside(rel, os.readlink(path))
                                      and _resolves_inside(path, root)):
            # Unpacking refuses links that leave their snapshot (by their text, or followed
            # through the others), so such a link could never be replayed; the note keeps the
            # loss visible (its target, a path of this machine, stays out).
            path.unlink()
            staging.notes.append(f"left out the symlink {rel} of checkpoint"
                                 f" {checkpoint_id}: it points outside the workspace")


def _link_stays_inside(rel: str, target: str) -> bool:
    """Whether a symlink at ``rel`` (relative to a root) pointing at ``target`` stays inside it."""
    if not target or target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", target):
        return False
    parts: list[str] = list(PurePosixPath(rel).parent.parts)
    for part in PurePosixPath(target.replace("\\", "/")).parts:
        if part == "..":
            if not parts:
                return False
            parts.pop()
        elif part != ".":
            parts.append(part)
    return True


def _neutral_meta(meta: Mapping[str, Any], hank_member: str, data_member: str | None) -> bytes:
    """``execution-meta.json`` with the recording machine's paths replaced by archive paths."""
    neutral = dict(meta)
    neutral.pop("readOnlySourceResolvedDataPath", None)
    neutral.pop("recording", None)  # a replayed execution's own copy: not in the archive
    neutral["readOnlySourceDataPath"] = data_member or ""
    neutral["hankPath"] = hank_member
    return (json.dumps(neutral, indent=2, ensure_ascii=False) + "\n").encode()


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


# ----- unpacking --------------------------------------------------------------------------------


MAX_BYTES_ENV = "HANKWEAVE_REPLAY_MAX_BYTES"
MAX_MEMBERS_ENV = "HANKWEAVE_REPLAY_MAX_MEMBERS"
MAX_RATIO_ENV = "HANKWEAVE_REPLAY_MAX_RATIO"
RATIO_FLOOR_BYTES = 1024 * 1024
"""The compression ratio is checked only once this much is unpacked: a small archive of JSON
can legitimately be 20x (or 200x) smaller than its content, and cannot fill a disk."""
_CHUNK = 64 * 1024
"""Members are unpacked in chunks of this size, each counted before it is written."""
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
          (b"\x28\xb5\x2f\xfd", "zstandard"), (b"\x5d\x00\x00", "lzma"),
          (b"PK\x03\x04", "zip"))


@dataclass(frozen=True)
class ArchiveLimits:
    """How much one recording archive may unpack to, checked while it streams, so a
    decompression bomb is refused before it fills the disk.  Each limit is raised with its
    environment variable (:meth:`from_env`)."""

    max_bytes: int = 2 * 1024 ** 3
    """Total unpacked bytes (the tar stream: headers and contents), ``HANKWEAVE_REPLAY_MAX_BYTES``."""
    max_members: int = 100_000
    """Members (files, directories, links), ``HANKWEAVE_REPLAY_MAX_MEMBERS``."""
    max_ratio: float = 200.0
    """Unpacked bytes per archive byte, once :data:`RATIO_FLOOR_BYTES` are unpacked,
    ``HANKWEAVE_REPLAY_MAX_RATIO``."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ArchiveLimits:
        """The defaults, with each limit its environment variable sets (a positive number)."""
        default = cls()
        return cls(max_bytes=int(_limit(env, MAX_BYTES_ENV, default.max_bytes)),
                   max_members=int(_limit(env, MAX_MEMBERS_ENV, default.max_members)),
                   max_ratio=_limit(env, MAX_RATIO_ENV, default.max_ratio, float))


def _limit(env: Mapping[str, str], name: str, default: float, parse: type[float] = int
           ) -> float:
    """The positive number ``name`` sets (``parse``: int or float), else ``default``."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = 0
    if not value > 0:
        raise RecordingError(f"{name}={raw!r} is not a positive"
                             f" {'whole number' if parse is int else 'number'}")
    return value


class _MeteredStream:
    """The decompressed bytes of an archive, counted as the tar reader takes them: a read
    that would pass :attr:`ArchiveLimits.max_bytes` or the ratio raises, so nothing past a
    limit ever reaches the disk."""

    def __init__(self, source: Any, name: str, packed: int, limits: ArchiveLimits) -> None:
        self._source = source
        self._name = name
        self._packed = max(packed, 1)
        self._limits = limits
        self.unpacked = 0

    def read(self, size: int = -1) -> bytes:
        # Bounded whatever is asked: tarfile's stream reader loops over short reads.
        data: bytes = self._source.read(_CHUNK if size is None or size < 0
                                        else min(size, _CHUNK))
        self.unpacked += len(data)
        limits = self._limits
        if self.unpacked > limits.max_bytes:
            raise RecordingError(
                f"refusing to unpack {self._name}: it unpacks to more than"
                f" {_size(limits.max_bytes)} ({MAX_BYTES_ENV}={limits.max_bytes}; raise it to"
                " open a recording this large); nothing of it was kept")
        if self.unpacked > RATIO_FLOOR_BYTES and \
                self.unpacked > limits.max_ratio * self._packed:
            raise RecordingError(
                f"refusing to unpack {self._name}: its compression ratio passes"
                f" {limits.max_ratio:g}x ({_size(self._packed)} unpacking to more than"
                f" {_size(self.unpacked)}; a decompression bomb?) ({MAX_RATIO_ENV}="
                f"{limits.max_ratio:g}; raise it to open this recording); nothing of it was"
                " kept")
        return data


def _compression(archive: Path) -> str:
    """What ``archive`` is compressed with, from its first bytes."""
    with open(archive, "rb") as handle:
        head = handle.read(512)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[257:262] == b"ustar":
        return "a plain tar (not compressed)"
    return "not a known archive format"


def unpack_recording(archive: Path, target: Path, *,
                     limits: ArchiveLimits | None = None) -> None:
    """Extract a recording archive into the new directory ``target``, refusing anything unsafe.

    Only what ``hankweave export`` writes is accepted: a gzip-compressed tar.  It is read as
    one stream, counted as it decompresses, within ``limits`` (default: from the environment,
    :meth:`ArchiveLimits.from_env`).  Refused (the whole archive, with a message naming the
    member): absolute names, names with ``..``, hard links, device files and FIFOs, symlinks
    outside ``snapshots/`` or resolving (through the links before them, and once all are
    unpacked) out of their snapshot, and members that would be written through or over a
    symlink.  A refused archive leaves nothing behind: ``target`` is removed.
    """
    archive = Path(archive)
    limits = ArchiveLimits.from_env(os.environ) if limits is None else limits
    damaged = (tarfile.TarError, EOFError, OSError, zlib.error)
    try:
        found = _compression(archive)
        packed = archive.stat().st_size
    except OSError as exc:
        raise RecordingError(f"cannot read {archive}: {exc.strerror or exc}") from None
    if found != "gzip":
        raise RecordingError(
            f"{archive.name} is not a recording archive: recordings are gzip-compressed tar"
            f" files (.hwrec.tar.gz, as hankweave export writes them), and this one is"
            f" {found if found.startswith(('a ', 'not ')) else found + '-compressed'}")
    target.mkdir(parents=True, exist_ok=False)
    try:
        with open(archive, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            stream = _MeteredStream(unzipped, archive.name, packed, limits)
            try:
                # Stream mode: one pass, no seeking back (which would unpack again).
                tar = tarfile.open(  # noqa: SIM115 - closed below; its errors differ
                    fileobj=cast("IO[bytes]", stream), mode="r|")
            except tarfile.ReadError as exc:
                raise RecordingError(f"not a recording archive (a .tar.gz): {exc}") from None
            with tar:
                for count, member in enumerate(tar, start=1):
                    if count > limits.max_members:
                        raise RecordingError(
                            f"refusing to unpack {archive.name}: it holds more than"
                            f" {limits.max_members} members ({MAX_MEMBERS_ENV}="
                            f"{limits.max_members}; raise it to open a recording this"
                            " large); nothing of it was kept")
                    _extract_member(tar, member, target)
        _check_snapshot_links(target)
    except BaseException as exc:
        shutil.rmtree(target, ignore_errors=True)
        if isinstance(exc, damaged) and not isinstance(exc, RecordingError):
            raise RecordingError(f"the archive is damaged: {exc}") from None
        raise


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    name = member.name

    def refuse(why: str) -> RecordingError:
        return RecordingError(f"refusing to unpack the archive: member {name!r} {why}")

    if "\x00" in name or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise refuse("has an absolute path")
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p != "."]
    if ".." in parts:
        raise refuse("climbs out of the archive with '..'")
    if not parts:
        return  # the archive's own root
    dest = target.joinpath(*parts)
    _check_parents(target, parts, refuse)
    if os.path.islink(dest):
        raise refuse("would replace a symlink written by an earlier member")
    if member.isdir():
        dest.mkdir(parents=True, exist_ok=True)
    elif member.isfile():
        dest.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        if source is None:
            raise refuse("has no content")
        with source, open(dest, "wb") as out:
            while chunk := source.read(_CHUNK):
                out.write(chunk)
        dest.chmod(0o755 if member.mode & 0o111 else 0o644)
    elif member.issym():
        if len(parts) < 3 or parts[0] != SNAPSHOTS_DIR:
            raise refuse("is a symlink outside snapshots/")
        if not _link_stays_inside("/".join(parts[2:]), member.linkname):
            raise refuse(f"is a symlink pointing outside its snapshot ({member.linkname!r})")
        dest.parent.mkdir(parents=True, exist_ok=True)
        # Followed through the links already unpacked (``q -> .`` then ``p -> q/q/../..``):
        # the text alone says nothing about where a chain of links lands.
        if not _resolves_inside(dest.parent / member.linkname, target / SNAPSHOTS_DIR / parts[1]):
            raise refuse(f"is a symlink that resolves outside its snapshot"
                         f" ({member.linkname!r}, through the links before it)")
        os.symlink(member.linkname, dest)
    elif member.islnk():
        raise refuse("is a hard link")
    else:
        raise refuse("is a device file or FIFO")


def _check_parents(target: Path, parts: list[str], refuse: Any) -> None:
    current = target
    for part in parts[:-1]:
        current = current / part
        if os.path.islink(current):
            raise refuse("would be written through a symlink")
        if os.path.lexists(current) and not current.is_dir():
            raise refuse("lies under a file")


def _resolves_inside(path: Path, area: Path) -> bool:
    """Whether ``path``, every symlink on it followed as the file system would, lands inside
    ``area`` (or is ``area`` itself)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(area))


def _check_snapshot_links(root: Path) -> None:
    """Refuse a recording (unpacked at ``root``) holding a symlink that, with every link of the
    recording in place, resolves out of its snapshot: a later link can redirect an earlier
    one, and an unpacked recording was never checked while it was unpacked."""
    snapshots = root / SNAPSHOTS_DIR
    if not snapshots.is_dir():
        return
    for snapshot in sorted(snapshots.iterdir()):
        if snapshot.is_symlink():
            raise RecordingError(f"refusing the recording: {SNAPSHOTS_DIR}/{snapshot.name}"
                                 " is a symlink")
        if not snapshot.is_dir():
            continue
        for directory, dirnames, filenames in os.walk(snapshot):
            for entry in sorted(dirnames + filenames):
                path = Path(directory, entry)
                if path.is_symlink() and not _resolves_inside(path, snapshot):
                    member = path.relative_to(root).as_posix()
                    raise RecordingError(
                        f"refusing the recording: member {member!r} is a symlink that resolves"
                        f" outside its snapshot ({os.readlink(path)!r}, through the links of"
                        " the recording)")


# ----- opening ----------------------------------------------------------------------------------


@dataclass
class _Playback:
    """One codon's recorded log, and where its replay stands."""

    codon_id: str
    log_member: str
    records: list[dict[str, Any]]
    final_result: int | None
    """Index of the ``result`` record that ends the last pass (see :func:`_last_pass_result`),
    before which the workspace effects happen; None when the log has no result."""
    snapshot: Path | None
    patterns: tuple[str, ...]
    cursor: int = 0
    """The next record to play.  A pass stops after a ``result`` record; the next pass of the
    same attempt (an extension) continues here, and a new attempt starts again at 0."""


@dataclass
class _Player:
    """Everything a bound :class:`ReplayHarness` plays from."""

    codons: dict[str, _Playback]
    agentless: frozenset[str]
    speed: str
    max_delay_ms: int

    def playback_for(self, codon_id: str) -> _Playback | None:
        from hankweave.api import base_codon_id

        found = self.codons.get(codon_id)
        if found is None and "#" in codon_id:
            base = self.codons.get(base_codon_id(codon_id))
            if base is not None:
                # A loop codon recorded under its base id: every iteration plays it afresh.
                found = self.codons.setdefault(codon_id, _Playback(
                    codon_id, base.log_member, base.records, base.final_result, base.snapshot,
                    base.patterns))
        return found


@dataclass
class ReplayRecording:
    """A recording opened for replay (see :meth:`ReplayHarness.open_recording`): what
    ``hankweave run --replay`` plays (the kernel's ``Playback``)."""

    root: Path
    """The unpacked recording: the source itself, or the temporary directory it was unpacked
    into.  The new execution keeps a copy of it, which a resume opens."""
    hank_path: Path
    """The recorded hank file (inside the recording)."""
    data_path: Path | None
    """The data source to link into the new execution (None: an empty one is used)."""
    harness: type[Harness]
    """The harness class, bound to this recording, that plays its codons."""
    logs: Mapping[str, Path] = field(default_factory=dict)
    """Recorded codon logs by runtime codon id."""
    warnings: list[str] = field(default_factory=list)
    """Things the user should know (torn lines, unknown records, a missing data snapshot)."""
    complete: bool = True
    """Whether the recorded execution had finished its plan."""
    reached: tuple[str, ...] = ()
    """The codon ids the recording has records of."""
    agentless: frozenset[str] = frozenset()
    """Codons whose recorded record ended before an agent started (no log is needed)."""
    manifest: RecordingManifest | None = None
    cleanup: Path | None = None
    """The temporary directory the recording was unpacked into, removed by :meth:`close`."""

    def missing_logs(self, codon_ids: Sequence[str]) -> list[str]:
        """The planned codons this recording cannot play.

        A codon needs a log unless its recorded record ended before an agent started.  When
        the recording stopped early (a failed or stopped run), codons planned after the last
        one it reached are not missing: the replay stops where the recording did.
        """
        from hankweave.api import base_codon_id

        def known(codon_id: str, names: Any) -> bool:
            return codon_id in names or base_codon_id(codon_id) in names

        last = len(codon_ids) - 1
        if not self.complete:
            reached = [i for i, cid in enumerate(codon_ids) if known(cid, self.reached)]
            last = reached[-1] if reached else -1
        return [cid for i, cid in enumerate(codon_ids) if i <= last
                and not known(cid, self.logs) and not known(cid, self.agentless)]

    def close(self) -> None:
        """Remove the temporary directory the recording was unpacked into (if any)."""
        if self.cleanup is not None:
            shutil.rmtree(self.cleanup, ignore_errors=True)
            self.cleanup = None


def _open_unpacked(root: Path, *, harness: type[ReplayHarness], speed: str,
                   max_delay_ms: int, cleanup: Path | None) -> ReplayRecording:
    from hankweave.api import LogReadReport, UnknownRecord, read_log

    # An unpacked recording (or an execution's kept copy) was not checked by unpack_recording.
    _check_snapshot_links(root)
    manifest = read_manifest(root)
    hank_path = root / manifest.hank
    if not hank_path.is_file():
        raise RecordingError(f"the recording's hank file {manifest.hank} is missing")
    data_path = root / manifest.data if manifest.data else None
    if data_path is not None and not data_path.exists():
        data_path = None
    warnings = [f"recording: {note}" for note in manifest.notes]
    playbacks: dict[str, _Playback] = {}
    logs: dict[str, Path] = {}
    agentless: set[str] = set()
    for codon in manifest.codons:
        if codon.status == "skipped":
            # A skip is a user's command, not something the agent did: it is not replayed.
            warnings.append(f"codon {codon.codon_id} was skipped in the recorded run; the"
                            " replay plays what its agent recorded and does not skip it")
        if codon.log is None:
            agentless.add(codon.codon_id)
            continue
        log_path = root / codon.log
        if not log_path.is_file():
            continue  # reported by missing_logs, before anything runs
        report = LogReadReport()
        # Unknown records are skipped, as the codon-log reader's contract says replay does.
        records = [record.to_dict() for record in read_log(log_path, report)
                   if not isinstance(record, UnknownRecord)]
        for problem in report.problems:
            warnings.append(f"codon {codon.codon_id} ({codon.log}): {problem}; skipped, the"
                            " valid records are replayed")
        if report.torn_tail:
            warnings.append(f"codon {codon.codon_id} ({codon.log}): torn last line"
                            f" ({report.torn_tail_bytes} bytes) ignored; the valid records are"
                            " replayed")
        results = [i for i, r in enumerate(records) if r.get("type") == "result"]
        if not results:
            warnings.append(f"codon {codon.codon_id} ({codon.log}): the recorded log ends"
                            " without a result record (the agent was cut off); on replay the"
                            " codon fails as it exited without a result message")
        snapshot = root / SNAPSHOTS_DIR / codon.snapshot if codon.snapshot else None
        if snapshot is not None and not snapshot.is_dir():
            warnings.append(f"codon {codon.codon_id}: snapshot {codon.snapshot} is missing from"
                            " the recording; its file changes are not replayed")
            snapshot = None
        playbacks[codon.codon_id] = _Playback(codon.codon_id, codon.log, records,
                                              _last_pass_result(records), snapshot,
                                              tuple(codon.checkpoint_patterns))
        logs[codon.codon_id] = log_path
    player = _Player(playbacks, frozenset(agentless), speed, max_delay_ms)
    bound = type(harness.__name__, (harness,), {"player": player,
                                                "__module__": harness.__module__})
    return ReplayRecording(
        root=root, hank_path=hank_path, data_path=data_path, harness=bound, logs=logs,
        warnings=warnings, complete=manifest.complete,
        reached=tuple(c.codon_id for c in manifest.codons), agentless=frozenset(agentless),
        manifest=manifest, cleanup=cleanup)


def _last_pass_result(records: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the ``result`` that ends the codon's last pass: the first result after
    which no conversation record (``assistant``, ``user``, a new ``system`` ``init``) follows.

    A pass ends at its result, so what a log holds after that result is never played: the real
    Claude CLI can write an ``error_during_execution`` result after a success.  A log that
    extends its session (an extension: more messages after a result) ends its last pass at a
    later result.  When the last pass ends without a result (the agent was cut off during an
    extension), it is the log's last result; None for a log without any.
    """
    final: int | None = None
    last_result: int | None = None
    for index, record in enumerate(records):
        kind = record.get("type")
        if kind == "result":
            last_result = index
            if final is None:
                final = index
        elif kind in ("assistant", "user") or (kind == "system"
                                                and record.get("subtype") == "init"):
            final = None
    return final if final is not None else last_result


# ----- the harness ------------------------------------------------------------------------------


class ReplayHarness(Harness):
    """Plays recorded codon logs, and the recorded workspace effects, instead of an agent.

    The class registered as ``replay`` holds no recording; :meth:`open_recording` returns a
    subclass bound to one, which the runtime uses for every codon of the replay.
    """

    name: ClassVar[str] = REPLAY_HARNESS
    package: ClassVar[str] = "hankweave-replay"
    player: ClassVar[_Player | None] = None

    @classmethod
    def open_recording(cls, source: Path, *, speed: str = "instant",
                       max_delay_ms: int | None = None) -> ReplayRecording:
        """Open an exported archive, an unpacked recording or an execution directory.

        An execution directory is staged into a temporary recording first (the export code),
        so both kinds of source replay the same way; an archive is unpacked safely (see
        :func:`unpack_recording`).  Raises :class:`RecordingError` (a ``ValueError``) with a
        clear message when ``source`` is not something replay can play.
        """
        if speed not in SPEEDS:
            raise RecordingError(f"unknown replay speed {speed!r} (use {' or '.join(SPEEDS)})")
        delay = DEFAULT_MAX_DELAY_MS if max_delay_ms is None else max(0, int(max_delay_ms))
        source = Path(source)
        if source.is_dir() and (source / MANIFEST_FILE).is_file():
            return _open_unpacked(source, harness=cls, speed=speed, max_delay_ms=delay,
                                  cleanup=None)
        if not source.exists():
            raise RecordingError(f"{source}: no such file or directory")
        if source.is_dir() and not (source / ".hankweave").is_dir():
            raise RecordingError(f"{source} is neither an execution directory (no .hankweave/)"
                                 f" nor an unpacked recording (no {MANIFEST_FILE})")
        scratch = Path(tempfile.mkdtemp(prefix="hankweave-replay-"))
        try:
            root = scratch / "recording"
            if source.is_dir():
                stage_recording(source, root, env=os.environ, cwd=Path.cwd(), minimal=True)
            else:
                unpack_recording(source, root)
            return _open_unpacked(root, harness=cls, speed=speed, max_delay_ms=delay,
                                  cleanup=scratch)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[dict[str, Any]]:
        """Stream the codon's recorded records; apply its workspace effects before the
        ``result`` that ends its last pass (or at the end of a log that has none).

        One call plays one pass, which ends at its ``result`` record; the next pass of the
        same attempt (an extension) continues after it.
        """
        player = type(self).player
        playback = player.playback_for(request.codon_id) if player is not None else None
        if player is None or playback is None:
            yield _no_recording(request.codon_id, player)
            return
        records = playback.records
        cursor = playback.cursor
        if not (0 < cursor < len(records) and records[cursor - 1].get("type") == "result"):
            # Only a pass that ended at a result is continued (an extension); anything else
            # (a retry, an attempt the runtime interrupted) plays the log from the start.
            playback.cursor = 0
        previous: dict[str, Any] | None = None
        while playback.cursor < len(records):
            index = playback.cursor
            record = records[index]
            if player.speed == "recorded" and previous is not None:
                await asyncio.sleep(_gap_ms(previous, record, player.max_delay_ms) / 1000)
            if index == playback.final_result:
                await _apply_effects(playback, request.work_dir)
            playback.cursor = index + 1
            previous = record
            yield dict(record)
            if record.get("type") == "result" and playback.cursor < len(records):
                return  # one pass ends at its result; an extension continues from here
        if playback.final_result is None:
            await _apply_effects(playback, request.work_dir)


def _no_recording(codon_id: str, player: _Player | None) -> dict[str, Any]:
    """The error result of a codon the recording cannot play (replay never goes live)."""
    from hankweave.api import base_codon_id, error_result

    if player is None:
        text = ("The replay harness only plays recordings: run with --replay SOURCE or"
                " hankweave replay SOURCE")
    elif codon_id in player.agentless or base_codon_id(codon_id) in player.agentless:
        text = (f"Replay: codon {codon_id} ended before its agent started in the recorded run,"
                " so the recording has no agent log to play")
    else:
        text = (f"Replay: the recording has no log for codon {codon_id} (the recorded run never"
                " reached it); replay never calls a live provider")
    return error_result(text)


def _gap_ms(previous: Mapping[str, Any], record: Mapping[str, Any], cap_ms: int) -> float:
    from hankweave.api import parse_iso

    try:
        gap = (parse_iso(record["timestamp"]) - parse_iso(previous["timestamp"]))
        ms = gap.total_seconds() * 1000
    except (KeyError, TypeError, ValueError):
        ms = UNTIMED_GAP_MS
    if ms < 0:
        ms = UNTIMED_GAP_MS
    return min(ms, cap_ms)


async def _apply_effects(playback: _Playback, work_dir: Path) -> None:
    if playback.snapshot is not None:
        await asyncio.to_thread(apply_snapshot, playback.snapshot, playback.patterns, work_dir)


# ----- workspace effects ------------------------------------------------------------------------


def apply_snapshot(snapshot: Path, patterns: Sequence[str], work_dir: Path) -> None:
    """Make the files of ``work_dir`` that ``patterns`` select exactly those of ``snapshot``.

    Every snapshot file is written (content, executable bit; a symlink as a symlink), then
    every other file the patterns select (``.gitignore`` honoured, the data link never) is
    deleted, with directories that deletion emptied.  Nothing is ever written or deleted through
    a symlinked directory, so the effects stay inside ``work_dir``.  Files the patterns do not
    select (the agent's scratch, rig copies no checkpoint covers) are left alone, as a
    checkpoint restore leaves them.
    """
    from hankweave.api import resolve_patterns

    work_dir = Path(work_dir)
    wanted = sorted(_snapshot_files(snapshot))
    links = [rel for rel in wanted if (snapshot / rel).is_symlink()]
    for rel in wanted:
        if rel not in links:
            _install(snapshot / rel, work_dir, rel)
    for rel in links:
        _install_link(os.readlink(snapshot / rel), work_dir, rel)
    # With every link in place: a later link can redirect an earlier one.
    for rel in links:
        _check_link(work_dir, rel, remove=True)
    keep = set(wanted)
    for rel in resolve_patterns(work_dir, patterns):
        if rel not in keep:
            _remove(work_dir, rel)


def _snapshot_files(root: Path) -> Iterator[str]:
    for directory, dirnames, filenames in os.walk(root):
        base = Path(directory)
        for name in dirnames:
            if (base / name).is_symlink():
                yield (base / name).relative_to(root).as_posix()
        for name in filenames:
            yield (base / name).relative_to(root).as_posix()


def _install_link(link: str, work_dir: Path, rel: str) -> None:
    """Make ``rel`` the symlink ``link``, unless it would resolve outside ``work_dir`` (the
    snapshot stays inside its own tree, but ``work_dir`` may hold links it does not)."""
    dest = _safe_parent(work_dir, rel) / PurePosixPath(rel).name
    if dest.is_symlink() and os.readlink(dest) == link:
        _check_link(work_dir, rel, remove=False)
        return
    if not _resolves_inside(dest.parent / link, work_dir):
        raise _escaping_link(rel, link)
    _clear(dest)
    os.symlink(link, dest)


def _check_link(work_dir: Path, rel: str, *, remove: bool) -> None:
    path = work_dir.joinpath(*PurePosixPath(rel).parts)
    if path.is_symlink() and not _resolves_inside(path, work_dir):
        link = os.readlink(path)
        if remove:
            path.unlink()
        raise _escaping_link(rel, link)


def _escaping_link(rel: str, link: str) -> RecordingError:
    return RecordingError(f"refusing to apply the recorded snapshot: the symlink {rel!r} ->"
                          f" {link!r} would resolve outside agentRoot")


def _install(source: Path, work_dir: Path, rel: str) -> None:
    dest = _safe_parent(work_dir, rel) / PurePosixPath(rel).name
    data = source.read_bytes()
    mode = 0o755 if source.stat().st_mode & 0o111 else 0o644
    if dest.is_file() and not dest.is_symlink():
        current = dest.stat()
        if stat.S_IMODE(current.st_mode) & 0o111 == mode & 0o111 and \
                current.st_size == len(data) and dest.read_bytes() == data:
            return  # already as recorded: leave it (and its mtime) alone
    _clear(dest)
    dest.write_bytes(data)
    dest.chmod(mode)


def _safe_parent(work_dir: Path, rel: str) -> Path:
    """The directory that will hold ``rel``, made of real directories under ``work_dir``:
    a symlink or file in the way (the recorded agent replaced it) is removed, never followed."""
    current = work_dir
    for part in PurePosixPath(rel).parent.parts:
        current = current / part
        if current.is_symlink() or (os.path.lexists(current) and not current.is_dir()):
            current.unlink()
        current.mkdir(exist_ok=True)
    return current


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _remove(work_dir: Path, rel: str) -> None:
    parent = work_dir
    for part in PurePosixPath(rel).parent.parts:
        parent = parent / part
        if parent.is_symlink() or not parent.is_dir():
            return  # never delete through a link
    target = parent / PurePosixPath(rel).name
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    while parent != work_dir:
        try:
            parent.rmdir()  # only when the deletion emptied it
        except OSError:
            break
        parent = parent.parent


# ----- command line (the command itself is in hankweave_replay_plugin) -------------------


def run_export_command(execution_dir: Path, output: Path | None, backend: str | None,
                       redact: bool = True) -> None:
    """What ``hankweave export`` does: write the recording and say where it is and what it
    redacted."""
    from hankweave.api import CLIError

    if not redact:
        click.echo("Warning: --no-redact: the recording will hold the execution's secrets"
                   " verbatim (env values, provider keys, tokens printed in logs); share it only"
                   " with people who may see them.", err=True)
    try:
        result = export_recording(execution_dir, output, backend=backend, redact=redact)
    except RecordingError as exc:
        raise CLIError(f"Cannot export {execution_dir}: {exc}") from None
    manifest = result.manifest
    snapshots = len({c.snapshot for c in manifest.codons if c.snapshot})
    click.echo(f"Wrote {result.path} ({result.size / 1024:.1f} KiB): {len(manifest.codons)}"
               f" codon(s), {snapshots} workspace snapshot(s)")
    if redact:
        click.echo(_redaction_summary(manifest))
    for note in manifest.notes:
        click.echo(f"  note: {note}")
    click.echo(f"Replay it offline:  hankweave replay {result.path}")


def _redaction_summary(manifest: RecordingManifest) -> str:
    """``Redacted 3 secrets: 1 env, 1 provider-key, 1 token``."""
    total = manifest.redactions
    kinds = ", ".join(f"{count} {kind}" for kind, count in manifest.redactions_by_kind.items())
    return f"Redacted {total} secret{'' if total == 1 else 's'}{f': {kinds}' if kinds else ''}"
