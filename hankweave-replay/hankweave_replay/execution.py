"""Reading the execution a recording is made of: its lock, metadata, state, checkpoint backend
and the codon records the recording covers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave_replay.format import STATE_FILE, RecordingError
from hankweave_replay.minimal import read_minimal_state

if TYPE_CHECKING:
    from hankweave.api import CodonExecution, ExecutionLayout, HankweaveState


def refuse_live_runtime(hankweave_dir: Path) -> None:
    """Refuse an execution a running hankweave runtime holds (its files are still changing)."""
    from hankweave.api import LockCorruptError, live_runtime_lock

    try:
        holder = live_runtime_lock(hankweave_dir)
    except LockCorruptError as exc:
        raise RecordingError(str(exc)) from None
    if holder is not None:
        raise RecordingError(
            f"{hankweave_dir.parent} is in use by a running hankweave runtime"
            f" ({holder.describe()}); export it after the run has ended")


def read_state(hankweave_dir: Path, *, minimal: bool = False, created_at: Any = None,
               ) -> tuple[HankweaveState, list[str]]:
    """The execution's state, strictly read, and notes for the recording's manifest.

    With ``minimal``, a ``state.json`` the state model refuses is read again as a minimal
    recorded state (:func:`~hankweave_replay.minimal.complete_minimal_state`), its timestamps
    ``created_at``.
    """
    from hankweave.api import StateLoadError, read_state_strict

    notes: list[str] = []
    try:
        state, _ = read_state_strict(hankweave_dir)
    except StateLoadError as exc:
        if not minimal:
            raise RecordingError(str(exc)) from None
        state, notes = read_minimal_state(hankweave_dir / STATE_FILE, str(exc), created_at)
    if not state.runs:
        raise RecordingError(f"{hankweave_dir.parent} has no runs yet: there is nothing to"
                             " record")
    return state, notes


def read_meta(layout: ExecutionLayout, *, minimal: bool = False) -> tuple[dict[str, Any], Path]:
    """The raw ``execution-meta.json`` and the hank file it names.

    With ``minimal``, metadata the model refuses is used as it is, provided it names the hank.
    """
    from hankweave.api import ExecutionMetaError, load_execution_meta

    try:
        meta = load_execution_meta(layout.meta_file)
        raw = json.loads(layout.meta_file.read_text(encoding="utf-8"))
        hank_path = meta.hank_path
    except ExecutionMetaError as exc:
        unchecked = _raw_meta(layout.meta_file) if minimal else None
        if unchecked is None:
            raise RecordingError(f"{exc} (it names the hank to record)") from None
        raw = unchecked
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


def backend_name(hank_file: Path, env: Mapping[str, str], cwd: Path) -> str:
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


def covered_records(state: HankweaveState) -> list[tuple[str, CodonExecution]]:
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


def recorded_log(execution_dir: Path, recorded: str | None) -> Path | None:
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
