"""The durable state store: one writer per execution directory.

Layout under ``<exec>/.hankweave/``:

``state.json``
    The folded state, in Hankweave 0.10.0's format.  Replaced atomically (temp file, fsync,
    rename, directory fsync); the previous version is kept as ``state.json.bak``.
``state.wal``
    An append-only transition log.  Its first line names the ``state.json`` it extends (by the
    SHA-256 of that file's bytes), or the log segment it follows; every other line is one
    transition.  ``state.wal.folding`` and ``state.fold`` exist around a background fold.

Why a log: the original rewrote the whole ``state.json`` on every transition, so a long loop's
per-transition cost grew with its history.  Here a transition costs one append (plus an fsync
for lifecycle transitions), whatever the history.  The log is folded into ``state.json`` when it
holds ``FOLD_LOG_SHARE`` of the state's bytes, and at :meth:`StateStore.close`; a large state is
folded in the background, by another process, while transitions go on (:mod:`hankweave.state.wal`
describes the files, :mod:`hankweave.state.fold` the fold).  Readers (``hankweave inspect``)
replay the log on top of ``state.json``, so they always see every acknowledged transition; when
nothing runs, ``state.json`` alone is the complete record.

Durability: an ``await store.transition(t)`` returns after the transition is in the log.  A
high-frequency update (costs, message counts, sentinel counters) is written with ``write(2)``,
which survives a killed process; a lifecycle transition is also fsync'd, which survives a
machine crash.

The store in three rooms: LOADING (:mod:`hankweave.state.loading`: the files read into a state,
the recovery ladder), WRITING (:mod:`hankweave.state.writing`: the one way ``state.json`` is
rewritten), FOLDING (:mod:`hankweave.state.fold`: transitions applied, the background fold and
its :class:`~hankweave.state.fold.FoldPhase`).  This module is the writer that joins them: it
appends to the log, and decides when and where a fold happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hankweave.faults import disk_write, kill_point
from hankweave.fsutil import (
    PRIVATE_FILE_MODE,
    atomic_write_bytes,
    fsync_dir,
    open_private,
    pid_alive,
    private_dir,
    utc_now_iso,
)
from hankweave.state import heap
from hankweave.state.files import (  # re-exported
    BACKUP_FILE,
    FOLD_MARKER_FILE,
    FOLDING_WAL_FILE,
    NEXT_WAL_FILE,
    PREVIOUS_WAL_FILE,
    STATE_FILE,
    WAL_FILE,
)
from hankweave.state.fold import FoldPhase
from hankweave.state.loading import (  # re-exported: readers import them from here
    ABSENT,
    LoadMethod,
    LoadReport,
    StateLoadError,
    StateUnreadableError,
    digest,
    load_state,
    read_state_strict,
)
from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import (
    RunCrashed,
    RunCrashedData,
    StateError,
    StateTransition,
    is_lifecycle,
)
from hankweave.state.types import HankweaveState, dump_state, is_live_run
from hankweave.state.wal import FoldMarker, header, new_segment_id, read_segment
from hankweave.state.writing import (  # PersistenceError re-exported
    SYNC_INLINE_MAX_S,
    OpenLog,
    PersistenceError,
    quarantine_unreadable,
    reason,
    replace_state_file,
    retire_folded_logs,
)

__all__ = [
    "ABSENT",
    "BACKUP_FILE",
    "FOLDING_WAL_FILE",
    "FOLD_LOG_SHARE",
    "FOLD_MARKER_FILE",
    "FOLD_MIN_BYTES",
    "INLINE_FOLD_MAX_BYTES",
    "NEXT_WAL_FILE",
    "PREVIOUS_WAL_FILE",
    "STATE_FILE",
    "WAL_FILE",
    "LoadMethod",
    "LoadReport",
    "PersistenceError",
    "RecoveryResult",
    "StateLoadError",
    "StateStore",
    "StateStoreBusyError",
    "StateUnreadableError",
    "load_state",
    "read_state_strict",
]

log = logging.getLogger(__name__)

Listener = Callable[[StateTransition, HankweaveState], None]


INLINE_FOLD_MAX_BYTES = 256 * 1024
"""States up to this size are folded in the writer's process (a few milliseconds); larger ones
in the background, by another process."""
FOLD_MIN_BYTES = 64 * 1024
FOLD_LOG_SHARE = 0.02
"""A fold is due when the log holds this share of the state's bytes (at least
``FOLD_MIN_BYTES``): readers then replay at most about that much."""
FOLD_RETRY_S = 5.0
"""How long after a failed background fold the next one is tried."""


class StateStoreBusyError(StateError):
    """Another process (or another store in this process) is already writing this state."""


@dataclass
class RecoveryResult:
    success: bool
    method: Literal["primary", "backup", "fresh"]
    data_loss: bool
    message: str

    def to_json(self) -> dict[str, object]:
        return {
            "success": self.success,
            "method": self.method,
            "dataLoss": self.data_loss,
            "message": self.message,
        }


@dataclass
class FoldProgress:
    """What the writer knows of its folds: the one here (``dirty``, ``timer``) and the one in
    the background (``phase``, ``segment``, ``task``, ``failed_at``)."""

    state_size: int
    """The bytes of ``state.json`` as last written: whether folds are done here, and when one
    is due, follow from it."""
    dirty: bool = False
    """Transitions were logged since ``state.json`` was last written here."""
    timer: asyncio.TimerHandle | None = None
    """A fold here is scheduled (a small state: ``state.json`` alone stays nearly current)."""
    phase: FoldPhase = FoldPhase.IDLE
    segment: str | None = None
    """The id of ``state.wal.folding`` while the phase is not ``IDLE``."""
    task: asyncio.Task[None] | None = None
    """The task that waits for the fold's process: set exactly while ``RUNNING``."""
    failed_at: float | None = None
    """When the last background fold failed (None once one succeeds)."""

    def rotated(self, segment: str) -> None:
        self.phase, self.segment = FoldPhase.WAITING, segment

    def started(self, task: asyncio.Task[None]) -> None:
        self.phase, self.task = FoldPhase.RUNNING, task

    def folded(self) -> None:
        """``state.wal.folding`` is in ``state.json`` and retired."""
        self.segment = None
        if self.task is None:
            self.phase = FoldPhase.IDLE

    def ended(self) -> None:
        """The background fold's task is over (its segment retired, or still waiting)."""
        self.task = None
        self.phase = FoldPhase.IDLE if self.segment is None else FoldPhase.WAITING

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@dataclass
class WriterHold:
    """What an open writer holds, released at close (or when the process dies)."""

    writer_fd: int | None
    """The exclusive ``flock`` on the ``.hankweave`` directory."""
    heap: bool = False
    """Whether it keeps full garbage collections off (:mod:`hankweave.state.heap`)."""
    closed: bool = False


class StateStore:
    """The single writer of an execution's state.

    Usage::

        store = StateStore.open(exec_dir / ".hankweave")
        await store.transition(RunStarted(...))
        ...
        await store.close()

    Transitions are applied strictly in the order their ``transition()`` calls began.  Listeners
    registered with :meth:`add_listener` run after the transition is durable.

    Folds: a small state (up to :data:`INLINE_FOLD_MAX_BYTES`) is folded here, which takes a
    few milliseconds.  A larger one is folded in the background: the log is rotated at the
    fold point (``state.wal`` becomes ``state.wal.folding``; a new ``state.wal`` follows it,
    and transitions go on being appended there at once), and another process writes
    ``state.json`` from ``state.json`` plus the rotated segment (``python -m
    hankweave.state.fold``).  Serialising a big state holds Python's GIL for its whole
    duration, so a thread would stall the event loop as long; another process does not.
    """

    def __init__(
        self,
        hankweave_dir: Path,
        state: HankweaveState,
        report: LoadReport,
        *,
        fold_interval: float = 2.0,
        fold_min_bytes: int = FOLD_MIN_BYTES,
        background_folds: bool = True,
        inline_fold_max_bytes: int = INLINE_FOLD_MAX_BYTES,
    ) -> None:
        self.dir = Path(hankweave_dir)
        self.report = report
        self.fold_interval = fold_interval
        self.fold_min_bytes = fold_min_bytes
        self.background_folds = background_folds
        self.inline_fold_max_bytes = inline_fold_max_bytes
        self.folds = 0
        """Folds written so far (here and in the background): for benchmarks and tests."""
        self.folded_bytes = 0
        """Bytes of ``state.json`` those folds wrote."""
        self.appended_bytes = 0
        """Bytes of transitions appended to the log."""
        self._state = state
        self._listeners: list[Listener] = []
        self._lock = asyncio.Lock()
        self._log = OpenLog(self.dir / WAL_FILE)  # (a path joined per transition costs ~10 us)
        self._fold = FoldProgress(report.state_size)
        if report.folding is not None and report.folding.id is not None:
            self._fold.rotated(report.folding.id)  # a fold that did not finish: folded next
        self._hold = WriterHold(_claim_writer(self.dir))
        if report.wal_appendable:
            self._log.continue_on(report.segment, report.state_digest)
        self._retire_stale_folding()
        self._keep_collections_short(opening=True)

    @classmethod
    def open(cls, hankweave_dir: Path, *, refuse_unreadable: bool = False,
             **options: float) -> StateStore:
        """Load the state (recovery ladder and log replay) and become its writer.

        With ``refuse_unreadable``, a state the ladder cannot load at all (method ``fresh``)
        raises :class:`StateUnreadableError` before anything is written: the writer's log
        header would otherwise start a new history over the damaged one.
        """
        hankweave_dir = Path(hankweave_dir)
        private_dir(hankweave_dir, tighten=True)  # an older execution's too: env values, output
        _wait_for_orphan_fold(hankweave_dir)
        state, report = load_state(hankweave_dir)
        if refuse_unreadable and report.method == "fresh":
            raise StateUnreadableError(hankweave_dir, [
                issue.message for issue in report.issues if issue.type == "corrupted_data"])
        for warning in report.warnings:
            log.warning("state: %s", warning)
        return cls(hankweave_dir, state, report, **options)  # type: ignore[arg-type]

    @property
    def state(self) -> HankweaveState:
        """The current state, including every transition whose ``transition()`` returned."""
        return self._state

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(transition, state)`` after each transition is durable."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    # -- transitions --

    async def transition(self, transition: StateTransition) -> HankweaveState:
        """Apply ``transition`` and return once it is durable.

        Raises :class:`~hankweave.state.transitions.InvalidTransitionError` or
        :class:`~hankweave.state.transitions.MetadataValidationError` (nothing is written), or
        :class:`PersistenceError` when the log cannot be written (the state is unchanged).
        """
        async with self._lock:
            self._check_open()
            new_state, line = self._prepare(transition)
            if new_state is not self._state:
                if self._log.fd is None:
                    await asyncio.to_thread(self._fold_sync, self._state)
                self._log.append(line)
                self.appended_bytes += len(line)
                if is_lifecycle(transition):
                    await self._sync_wal_async()
                self._state = new_state
                self._after_write()
            self._publish(transition)
            if self._fold_due():
                await self._fold_now()
            return self._state

    def transition_sync(self, transition: StateTransition) -> HankweaveState:
        """The same as :meth:`transition` for code that runs outside an event loop (every fold
        is then done here)."""
        self._check_open()
        new_state, line = self._prepare(transition)
        if new_state is not self._state:
            if self._log.fd is None:
                self._fold_sync(self._state)
            self._log.append(line)
            self.appended_bytes += len(line)
            if is_lifecycle(transition):
                self._sync_wal()
            self._state = new_state
            self._fold.dirty = True
        self._publish(transition)
        if self._fold_due():
            self._fold_sync(self._state)
        return self._state

    async def detect_crashed_runs(
        self, *, alive: Callable[[int], bool] = pid_alive, skip_run_ids: frozenset[str] = frozenset()
    ) -> list[str]:
        """Mark crashed every ``running`` run whose server process is gone.

        A run that carries this process's own pid is also crashed: this store was just opened,
        so such a run belongs to an earlier process that happened to have the same pid.
        """
        crashed = []
        for run in self._state.runs:
            if not is_live_run(run.status) or run.run_id in skip_run_ids:
                continue
            if run.server_pid == os.getpid() or not alive(run.server_pid):
                last = run.codons[-1].status if run.codons else "unknown"
                await self.transition(
                    RunCrashed(
                        data=RunCrashedData(
                            run_id=run.run_id, detected_at=utc_now_iso(), last_codon_status=last
                        )
                    )
                )
                crashed.append(run.run_id)
        return crashed

    # -- folding and shutdown --

    async def fold(self) -> None:
        """Write the current state to ``state.json`` now and start an empty log."""
        async with self._quiet():
            await self._fold_locked()

    async def close(self) -> None:
        """Fold the log into ``state.json`` and release the files.  Idempotent."""
        if self._hold.closed:
            return
        async with self._quiet():
            if self._fold.dirty or self._log.size or self._fold.phase is not FoldPhase.IDLE:
                await self._fold_locked()
            self._shutdown()

    @contextlib.asynccontextmanager
    async def _quiet(self) -> AsyncIterator[None]:
        """Hold the lock with no background fold running (one that started while the lock
        was awaited is waited for too)."""
        while True:
            await self._settle()
            await self._lock.acquire()
            if self._fold.phase is not FoldPhase.RUNNING:
                break
            self._lock.release()
        try:
            yield
        finally:
            self._lock.release()

    def close_sync(self) -> None:
        if self._hold.closed:
            return
        if self._fold.dirty or self._log.size or self._fold.phase is not FoldPhase.IDLE:
            self._fold_sync(self._state)
        self._shutdown()

    def recover(self) -> RecoveryResult:
        """Make what was loaded the state on disk now, and say what that cost.

        The explicit last resort of the original: after the ladder ran, write its result
        immediately (a fresh state included) instead of waiting for the next transition.
        """
        method = self.report.method
        if method == "new":
            method = "primary"
        self._fold_sync(self._state)
        messages = {
            "primary": "State loaded from state.json",
            "backup": "State restored from state.json.bak",
            "fresh": "Started with fresh state",
        }
        return RecoveryResult(True, method, self.report.data_loss, messages[method])

    # What the fold tests and benchmarks watch (tests/test_store_folds.py,
    # tests/test_state_heap.py, benchmarks/state_latency.py), read-only.

    @property
    def _fold_task(self) -> asyncio.Task[None] | None:
        return self._fold.task

    @property
    def _fold_failed_at(self) -> float | None:
        return self._fold.failed_at

    @property
    def _state_size(self) -> int:
        return self._fold.state_size

    @property
    def _wal_bytes(self) -> int:
        return self._log.size

    # -- internals --

    def _check_open(self) -> None:
        if self._hold.closed:
            raise PersistenceError("the state store is closed")

    def _prepare(self, transition: StateTransition) -> tuple[HankweaveState, bytes]:
        new_state = apply_transition(self._state, transition)
        if new_state is self._state:
            return new_state, b""
        return new_state, transition.model_dump_json(exclude_none=True).encode() + b"\n"

    def _retire_stale_folding(self) -> None:
        """A background fold that finished just before its writer died leaves its segment, now
        in ``state.json``: retire it as that fold would have."""
        stale = self.dir / FOLDING_WAL_FILE
        if self._fold.phase is FoldPhase.IDLE and stale.exists():
            marker = FoldMarker.read(self.dir / FOLD_MARKER_FILE)
            folded = read_segment(stale)
            if (marker is not None and folded is not None and marker.segment == folded.id
                    and marker.state == self.report.state_digest):
                os.replace(stale, self.dir / PREVIOUS_WAL_FILE)

    async def _sync_wal_async(self) -> None:
        """``fdatasync`` the log: here when this disk syncs faster than a hand-off to a thread
        costs (a thread that must be woken takes longer than a fast disk's sync), in a thread
        when it is slow, so a slow disk never stalls the event loop."""
        if self._log.sync_seconds > SYNC_INLINE_MAX_S:
            await asyncio.to_thread(self._sync_wal)
        else:
            self._sync_wal()

    def _sync_wal(self) -> None:
        """The log's ``fdatasync``: a lifecycle transition is durable when this returns (the
        one step the runtime-control tests slow down, tests/test_runtime_control.py)."""
        self._log.sync()

    def _publish(self, transition: StateTransition) -> None:
        for listener in list(self._listeners):
            try:
                listener(transition, self._state)
            except Exception:  # a listener must never break the writer
                log.exception("state listener %r failed", listener)

    def _after_write(self) -> None:
        self._fold.dirty = True
        if self._fold.timer is None and self._inline():
            # A small state is cheap to rewrite: state.json alone stays nearly current.
            loop = asyncio.get_running_loop()
            self._fold.timer = loop.call_later(
                self.fold_interval, lambda: loop.create_task(self._timed_fold())
            )

    def _keep_collections_short(self, *, opening: bool = False) -> None:
        """A large state stays out of the garbage collector's full collections while this
        store is open (:mod:`hankweave.state.heap`): one would otherwise pause a transition for
        as long as it takes to visit every record."""
        if not self._hold.heap and self._fold.state_size > self.inline_fold_max_bytes:
            heap.hold(collect_now=opening)
            self._hold.heap = True

    def _inline(self) -> bool:
        """Whether folds are done here: a small state, or background folds turned off."""
        return not self.background_folds or self._fold.state_size <= self.inline_fold_max_bytes

    def _fold_due(self) -> bool:
        """The log is large relative to the state: replaying it would cost readers more than a
        fold costs (``FOLD_LOG_SHARE`` of the state's bytes, at least ``fold_min_bytes``)."""
        return self._log.size >= max(self.fold_min_bytes,
                                      int(self._fold.state_size * FOLD_LOG_SHARE))

    async def _fold_now(self) -> None:
        """A fold that is due (the lock is held)."""
        if self._fold.phase is FoldPhase.RUNNING:
            return  # one at a time; the log keeps growing meanwhile
        if self._inline() or self._log.segment_id is None:
            # (A log of the first format has no id to follow: fold it here, once.)
            await self._fold_locked()
            return
        failed = self._fold.failed_at
        if failed is not None and time.monotonic() - failed < FOLD_RETRY_S:
            return
        if self._fold.phase is FoldPhase.IDLE:
            self._rotate()
        self._fold.started(asyncio.get_running_loop().create_task(self._fold_in_background()))

    async def _timed_fold(self) -> None:
        async with self._lock:
            self._fold.timer = None
            if (self._fold.dirty and not self._hold.closed
                    and self._fold.phase is not FoldPhase.RUNNING and self._inline()):
                await self._fold_locked()

    async def _fold_locked(self) -> None:
        """Fold here (the lock is held and no background fold runs)."""
        self._fold.cancel_timer()
        # The state is immutable, so serializing it off the event loop is safe.
        await asyncio.to_thread(self._fold_sync, self._state)

    async def _settle(self) -> None:
        """Wait for the background fold under way, if any, to end."""
        task = self._fold.task
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    # -- the background fold --

    def _rotate(self) -> None:
        """Start a new ``state.wal`` that follows the current one, which becomes
        ``state.wal.folding``.  Nothing is fsync'd here: the next lifecycle transition's
        ``fdatasync`` syncs the new log and the directory together."""
        assert self._log.fd is not None and self._log.segment_id is not None
        following = new_segment_id()
        try:
            next_path = self.dir / NEXT_WAL_FILE
            disk_write(next_path)
            with os.fdopen(open_private(next_path, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
                handle.write(header(following, follows=self._log.segment_id))
            kill_point("state.rotate")
            os.replace(self.dir / WAL_FILE, self.dir / FOLDING_WAL_FILE)
            kill_point("state.rotate.swap")
            os.replace(next_path, self.dir / WAL_FILE)
            fd = os.open(self.dir / WAL_FILE, os.O_RDWR | os.O_APPEND)
        except OSError as exc:
            raise PersistenceError(f"cannot rotate {self.dir / WAL_FILE}: {reason(exc)}"
                                   ) from exc
        os.close(self._log.fd)
        self._log.fd, self._log.size = fd, os.fstat(fd).st_size
        self._fold.rotated(self._log.segment_id)
        self._log.segment_id = following
        self._log.dir_unsynced = True

    async def _fold_in_background(self) -> None:
        """Fold ``state.wal.folding`` into ``state.json`` in another process, then retire it.
        A failed fold (a full disk) leaves both as they were and is tried again later."""
        error = ""
        try:
            # The child holds a lock on the segment while it folds (inherited, so it outlives
            # this process): a writer that opens the store after a crash waits for it.
            held = os.open(self.dir / FOLDING_WAL_FILE, os.O_RDONLY)
            try:
                fcntl.flock(held, fcntl.LOCK_EX)
                child = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "hankweave.state.fold", str(self.dir), str(held),
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE, pass_fds=(held,))
            finally:
                os.close(held)
            _, err = await child.communicate()
            error = err.decode(errors="replace").strip()
            done = child.returncode == 0
        except OSError as exc:
            done, error = False, str(exc)
        try:
            if done and not self._hold.closed:
                self._retire_folding()
        except OSError as exc:
            done, error = False, str(exc)
        finally:
            self._fold.ended()
        if done:
            self._fold.failed_at = None
        else:
            self._fold.failed_at = time.monotonic()
            log.warning("state: a background fold failed (%s); the logs are kept and it is"
                        " tried again", error or "no reason given")

    def _retire_folding(self) -> None:
        os.replace(self.dir / FOLDING_WAL_FILE, self.dir / PREVIOUS_WAL_FILE)
        self._fold.folded()
        self._fold.state_size = (self.dir / STATE_FILE).stat().st_size
        self.folds += 1
        self.folded_bytes += self._fold.state_size
        self._keep_collections_short()

    # -- the fold here --

    def _quarantine_unreadable(self) -> None:
        """Before the first write over a state the ladder could not load from ``state.json``,
        keep the unreadable files aside (:func:`hankweave.state.writing.quarantine_unreadable`)."""
        if self.report.method not in ("backup", "fresh"):
            return
        quarantine_unreadable(self.dir, backup_unreadable=self.report.method == "fresh")
        self.report.method = "primary"

    def _fold_sync(self, state: HankweaveState) -> None:
        """Write ``state`` to ``state.json`` here, with a new log that extends it (the logs it
        folds in kept as ``state.wal.prev``).  Every fold in this process comes here."""
        try:
            self._quarantine_unreadable()
            data = dump_state(state)
            folded = digest(data)
            # The new log is ready before state.json changes; a crash in between leaves a log
            # whose base matches no file, which loading recognises as already folded.
            following = new_segment_id()
            next_path = self.dir / NEXT_WAL_FILE
            atomic_write_bytes(next_path, header(following, base=folded), mode=PRIVATE_FILE_MODE)
            kill_point("state.fold")
            replace_state_file(self.dir, data)
            kill_point("state.fold.swap")
            self._log.close()
            retire_folded_logs(self.dir, folding=self._fold.segment is not None)
            os.replace(next_path, self.dir / WAL_FILE)
            fsync_dir(self.dir)
        except OSError as exc:
            raise PersistenceError(f"cannot write {self.dir / STATE_FILE}: {reason(exc)}"
                                   ) from exc
        self._fold.state_size = len(data)
        self.folds += 1
        self.folded_bytes += len(data)
        self._keep_collections_short()
        self._fold.folded()
        self._log.dir_unsynced = False
        self._log.continue_on(read_segment(self.dir / WAL_FILE), self.report.state_digest)
        self._fold.dirty = False

    def _shutdown(self) -> None:
        self._fold.cancel_timer()
        self._log.close()
        if self._hold.writer_fd is not None:
            os.close(self._hold.writer_fd)  # releases the writer flock
            self._hold.writer_fd = None
        if self._hold.heap:
            heap.release()
            self._hold.heap = False
        self._hold.closed = True


ORPHAN_FOLD_WAIT_S = 120.0


def _wait_for_orphan_fold(hankweave_dir: Path) -> None:
    """A background fold whose writer died may still be writing ``state.json``: wait for it
    to end (it holds a lock on ``state.wal.folding`` while it runs) before loading."""
    try:
        fd = os.open(hankweave_dir / FOLDING_WAL_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        deadline = time.monotonic() + ORPHAN_FOLD_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StateStoreBusyError(
                        f"{hankweave_dir / FOLDING_WAL_FILE} is still being folded by a process"
                        " of an earlier writer; try again when it ends") from None
                time.sleep(0.02)
    finally:
        os.close(fd)


def _claim_writer(hankweave_dir: Path) -> int:
    """Hold an exclusive ``flock`` on the ``.hankweave`` directory while this store writes.

    The kernel releases it when the process dies, so a crash never leaves it held.
    """
    fd = os.open(hankweave_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateStoreBusyError(
            f"{hankweave_dir / STATE_FILE} is already being written by another state store"
            " (another hankweave runtime on this execution directory?)"
        ) from None
    return fd
