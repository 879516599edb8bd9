"""Taking ownership of an execution's state: the lock, the store, and crash repair.

This is the first thing a runtime does on an execution directory, and the only sanctioned way
to get a writable :class:`~hankweave.state.store.StateStore` for one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hankweave.fsutil import fsync_dir, process_running, utc_now_iso
from hankweave.state.files import (
    BACKUP_FILE,
    FOLD_MARKER_FILE,
    FOLDING_WAL_FILE,
    NEXT_WAL_FILE,
    PREVIOUS_WAL_FILE,
    STATE_FILE,
    WAL_FILE,
)
from hankweave.state.lock import AcquireResult, RuntimeLock
from hankweave.state.store import StateStore, StateUnreadableError
from hankweave.state.transitions import RunCrashed, RunCrashedData
from hankweave.state.types import is_live_run


@dataclass
class OwnedExecution:
    """A locked execution directory and its writable state."""

    lock: RuntimeLock
    store: StateStore
    acquired: AcquireResult
    crashed_run_ids: list[str] = field(default_factory=list)
    ended_agents: dict[str, list[int]] = field(default_factory=dict)
    """Per crashed run, the agent processes it left running that were ended."""
    damaged_dir: Path | None = None
    """With ``start_fresh``: where the unreadable state files were moved (kept, not deleted)."""

    async def release(self) -> None:
        """Fold the state into ``state.json`` and give the directory up."""
        try:
            await self.store.close()
        finally:
            self.lock.release()


async def take_ownership(
    hankweave_dir: Path, *, alive: Callable[[int], bool] = process_running,
    start_fresh: bool = False,
) -> OwnedExecution:
    """Lock the execution directory, open its state and repair what a crash left.

    A stale lock (dead process or heartbeat older than two minutes) is reclaimed and the run it
    names is marked crashed even when a process with its pid still exists: the heartbeat proves
    that process is not this run's runtime.  Then every other ``running`` run whose server
    process is gone is marked crashed too.

    The agent processes a crashed run left running (the Claude CLI keeps going after its host
    is killed) are ended next, before anything resumes (:mod:`hankweave.processes`).

    A state that cannot be loaded at all (``state.json`` and its backup unreadable) is
    refused with :class:`~hankweave.state.store.StateUnreadableError` before anything is
    written, so no completed codon is run (and paid for) again by accident; with
    ``start_fresh`` the damaged files are moved to ``damaged-<timestamp>/`` and the state
    starts empty (the journal, checkpoints and ``agentRoot`` are kept).

    Raises :class:`~hankweave.state.lock.LockHeldError` when a live runtime holds the directory.
    """
    hankweave_dir = Path(hankweave_dir)
    lock = RuntimeLock(hankweave_dir)
    acquired = lock.acquire()
    damaged: Path | None = None
    try:
        try:
            store = StateStore.open(hankweave_dir, refuse_unreadable=True)
        except StateUnreadableError:
            if not start_fresh:
                raise
            damaged = set_damaged_state_aside(hankweave_dir)
            store = StateStore.open(hankweave_dir, refuse_unreadable=True)
    except BaseException:
        lock.release()
        raise
    owned = OwnedExecution(lock=lock, store=store, acquired=acquired, damaged_dir=damaged)
    try:
        stale_run = store.state.run_by_id(acquired.reclaimed_run_id or "")
        if stale_run is not None and is_live_run(stale_run.status):
            await store.transition(RunCrashed(data=RunCrashedData(
                run_id=stale_run.run_id, detected_at=utc_now_iso(), last_codon_status="unknown")))
            owned.crashed_run_ids.append(stale_run.run_id)
        owned.crashed_run_ids += await store.detect_crashed_runs(alive=alive)
        await _end_agents_left_running(owned)
    except BaseException:
        await owned.release()
        raise
    return owned


async def _end_agents_left_running(owned: OwnedExecution) -> None:
    from hankweave.processes import end_agents_of_crashed_run

    for run_id in owned.crashed_run_ids:
        run = owned.store.state.run_by_id(run_id)
        if run is None:
            continue
        # An in-process agent records the runtime's own pid: nothing of its own to end.
        pids = {getattr(codon, "claude_pid", None) for codon in run.codons}
        recorded = [pid for pid in pids if isinstance(pid, int) and pid != run.server_pid]
        ended = await end_agents_of_crashed_run(run_id, recorded)
        if ended:
            owned.ended_agents[run_id] = ended


DAMAGED_STATE_FILES = (STATE_FILE, BACKUP_FILE, WAL_FILE, PREVIOUS_WAL_FILE, FOLDING_WAL_FILE,
                       NEXT_WAL_FILE, FOLD_MARKER_FILE)
"""What ``--start-fresh`` moves aside: every file the state is loaded from."""


def set_damaged_state_aside(hankweave_dir: Path) -> Path:
    """Move the state files (and leftover ``state.json.tmp*``) into a new
    ``damaged-<timestamp>/`` folder of ``hankweave_dir``, keeping them; return that folder.

    Called under the runtime lock, after :class:`StateUnreadableError`.
    """
    stamp = utc_now_iso().replace(":", "-").replace(".", "-")[:19]
    folder = hankweave_dir / f"damaged-{stamp}"
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = hankweave_dir / f"damaged-{stamp}-{suffix}"
    folder.mkdir(mode=0o700)
    names = [*DAMAGED_STATE_FILES, *(p.name for p in hankweave_dir.glob(f"{STATE_FILE}.tmp*"))]
    for name in names:
        source = hankweave_dir / name
        if source.exists():
            source.rename(folder / name)
    fsync_dir(folder)
    fsync_dir(hankweave_dir)
    return folder
