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
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from hankweave.faults import disk_write, kill_point
from hankweave.fsutil import (
    PRIVATE_FILE_MODE,
    atomic_write_bytes,
    fsync_dir,
    last_line_start,
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
from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import (
    RunCrashed,
    RunCrashedData,
    StateError,
    StateTransition,
    is_lifecycle,
    parse_transition,
)
from hankweave.state.types import HankweaveState, dump_state, parse_state
from hankweave.state.validation import ValidationIssue, validate_state
from hankweave.state.wal import (
    FoldMarker,
    Segment,
    chain,
    header,
    new_segment_id,
    read_segment,
    replace_state_file,
)

log = logging.getLogger(__name__)


ABSENT = "absent"  # the WAL base of an execution that has no state.json yet

LoadMethod = Literal["primary", "backup", "fresh", "new"]
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
SYNC_INLINE_MAX_S = 0.0005
"""A log ``fdatasync`` that takes less than this on average is done on the event loop."""
SYNC_SLOW_S = 0.002


class PersistenceError(StateError):
    """The state could not be written; the transition was not applied."""


class StateStoreBusyError(StateError):
    """Another process (or another store in this process) is already writing this state."""


class StateLoadError(StateError):
    """The state could not be read at all (raised by strict readers such as ``inspect``)."""


class StateUnreadableError(StateLoadError):
    """``state.json`` and its backup are both unreadable (or ``state.json`` is and there is no
    backup): a runtime refuses to start rather than run every codon again from nothing.

    Raised by :meth:`StateStore.open` with ``refuse_unreadable`` before anything is written;
    ``problems`` are the loader's one-line findings, naming each file.
    """

    def __init__(self, hankweave_dir: Path, problems: list[str]) -> None:
        self.hankweave_dir = Path(hankweave_dir)
        self.problems = problems
        super().__init__("; ".join(problems) or f"{hankweave_dir / STATE_FILE}: unreadable")


def _digest(data: bytes | None) -> str:
    return ABSENT if data is None else hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass
class LoadReport:
    """What loading found: where the state came from and everything worth telling the user."""

    method: LoadMethod
    issues: list[ValidationIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    wal_applied: int = 0
    wal_skipped: int = 0
    data_loss: bool = False
    # Whether the in-memory state equals state.json + the log, so appending can continue.
    wal_appendable: bool = False
    state_digest: str = ABSENT
    state_size: int = 0
    segment: Segment | None = None
    """``state.wal`` as read, when appending continues it."""
    folding: Segment | None = None
    """``state.wal.folding`` when it was replayed: a background fold that did not finish."""


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


# ----- reading -----


def _parse_file(path: Path, report: LoadReport) -> tuple[HankweaveState, bytes] | None:
    data = _read(path)
    if data is None:
        return None
    try:
        return parse_state(data), data
    except (ValidationError, ValueError) as exc:
        report.issues.append(
            ValidationIssue("error", "corrupted_data", f"{path}: not a valid state: {_why(exc)}")
        )
        return None


def _why(exc: Exception) -> str:
    """Where a state file goes wrong, in one line."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


def _segments(hankweave_dir: Path, report: LoadReport, *names: str) -> list[Segment | None]:
    """The log segments named, read; torn last lines and unreadable headers are reported."""
    found = []
    for name in names:
        segment = read_segment(hankweave_dir / name)
        if segment is not None and segment.torn_bytes:
            # A line without its newline was being written when the process died: never
            # acknowledged.
            report.warnings.append(f"{name}: ignored a torn last line ({segment.torn_bytes}"
                                   " bytes)")
        if segment is not None and segment.unreadable:
            report.warnings.append(f"{name}: unreadable header; its transitions were ignored")
        found.append(segment)
    return found


def _replay(state: HankweaveState, segments: list[Segment], report: LoadReport) -> HankweaveState:
    for segment in segments:
        for number, line in enumerate(segment.lines, start=2):
            try:
                state = apply_transition(state, parse_transition(line))
                report.wal_applied += 1
            except (ValidationError, ValueError, StateError) as exc:
                report.wal_skipped += 1
                report.warnings.append(f"{segment.name} line {number}: skipped ({exc})")
    return state


def load_state(hankweave_dir: Path) -> tuple[HankweaveState, LoadReport]:
    """Load the state of an execution without writing anything.

    The files are read as one snapshot: if a fold replaced ``state.json`` or moved a log
    segment while they were being read, they are read again (a live writer's fold takes
    moments, so this settles at once).
    """
    hankweave_dir = Path(hankweave_dir)
    with heap.collections_paused():
        for _ in range(SNAPSHOT_ATTEMPTS - 1):
            before = _stamps(hankweave_dir)
            loaded = _load_once(hankweave_dir)
            if _stamps(hankweave_dir) == before:
                return loaded
        return _load_once(hankweave_dir)


SNAPSHOT_ATTEMPTS = 20
_FOLD_MOVED_FILES = (STATE_FILE, FOLDING_WAL_FILE, FOLD_MARKER_FILE, PREVIOUS_WAL_FILE,
                     BACKUP_FILE)


def _stamps(hankweave_dir: Path) -> list[tuple[int, int, int] | None]:
    """What identifies the files a fold replaces or moves (``state.wal`` only grows, except
    when a rotation starts a new one: its inode tells)."""
    stamps: list[tuple[int, int, int] | None] = []
    for name in (*_FOLD_MOVED_FILES, WAL_FILE):
        try:
            found = os.stat(hankweave_dir / name)
        except OSError:
            stamps.append(None)
            continue
        grows = name == WAL_FILE
        stamps.append((found.st_ino, 0 if grows else found.st_size,
                       0 if grows else found.st_mtime_ns))
    return stamps


def _load_once(hankweave_dir: Path) -> tuple[HankweaveState, LoadReport]:
    """The recovery ladder: ``state.json``; else ``state.json.bak`` rebuilt forward with the log
    the last fold retired (``state.wal.prev``), which gives back what ``state.json`` held;
    else a fresh empty state (with a warning).  The log segments that extend the state loaded
    are replayed on it (:func:`hankweave.state.wal.chain`): those of a fold still under way
    included.
    """
    hankweave_dir = Path(hankweave_dir)
    primary = hankweave_dir / STATE_FILE
    report = LoadReport(method="new")
    for leftover in sorted(hankweave_dir.glob(f"{STATE_FILE}.tmp*")):
        report.warnings.append(f"ignored leftover {leftover.name} (an interrupted write)")
    marker = FoldMarker.read(hankweave_dir / FOLD_MARKER_FILE)
    folding, current = _segments(hankweave_dir, report, FOLDING_WAL_FILE, WAL_FILE)

    loaded = _parse_file(primary, report)
    replayed: list[Segment] = []
    if loaded is not None:
        report.method = "primary"
        state, raw = loaded
        report.state_digest = _digest(raw)
        report.state_size = len(raw)
    else:
        state, replayed = _fall_back(hankweave_dir, report, marker, folding, current)

    if report.method == "fresh":
        report.wal_appendable = False
        if current is not None and current.lines:
            report.warnings.append(f"{WAL_FILE}: not replayed (its base state is unreadable)")
    else:
        if current is None or current not in replayed:
            rest = [s for s in (folding, current) if s is not None and s not in replayed]
            more = chain(report.state_digest, rest, marker)
            state = _replay(state, more, report)
            replayed += more
        if current is not None and current in replayed:
            report.wal_appendable = report.method == "primary" or (
                report.method == "new" and not primary.exists())
        elif current is None:
            report.wal_appendable = report.method == "primary" and folding is None
        elif current.lines and report.method == "backup":
            # A log whose base is another file was already folded (or belongs to a lost version).
            report.warnings.append(f"{WAL_FILE}: does not extend {BACKUP_FILE}; not replayed")
        report.segment = current if report.wal_appendable else None
        report.folding = folding if folding is not None and folding in replayed else None
    if report.method == "backup":
        # Only a chain that reaches the current log proves nothing after the backup is gone.
        extended = current is not None and current in replayed
        report.data_loss = not extended
        report.warnings.append(
            f"{STATE_FILE} unusable; rebuilt what it held from its backup and the transition"
            " logs, nothing lost" if extended else
            f"{STATE_FILE} unusable; loaded {BACKUP_FILE}: what {STATE_FILE} held beyond it"
            " is lost")

    report.issues.extend(validate_state(state, hankweave_dir))
    return state, report


def _fall_back(hankweave_dir: Path, report: LoadReport, marker: FoldMarker | None,
               folding: Segment | None, current: Segment | None,
               ) -> tuple[HankweaveState, list[Segment]]:
    """``state.json`` is missing or unreadable: its backup (or nothing), rebuilt forward with
    the logs that extend it (the one the last fold retired, and those after it).

    Sets the report's method and ``state_digest``: the digest the rebuilt state has written
    out, so a log whose header names the lost ``state.json`` is replayed on top too.
    """
    primary, backup = hankweave_dir / STATE_FILE, hankweave_dir / BACKUP_FILE
    loaded = _parse_file(backup, report)
    if loaded is None and backup.exists():
        report.method, report.data_loss = "fresh", True
        report.warnings.append(
            "Backup also corrupted, starting fresh: the state could not be loaded and an"
            " empty state is used in memory; nothing is written until the next change")
        return HankweaveState(), []
    state, raw = loaded if loaded is not None else (HankweaveState(), None)
    report.state_digest = _digest(raw)
    report.state_size = len(raw) if raw else 0
    if loaded is not None:
        report.method = "backup"
    (previous,) = _segments(hankweave_dir, report, PREVIOUS_WAL_FILE)
    replayed = chain(report.state_digest, [previous, folding, current], marker)
    if replayed:
        state = _replay(state, replayed, report)
        report.method = "backup"
        report.state_digest = _digest(dump_state(state))
    elif loaded is None and primary.exists():
        report.method, report.data_loss = "fresh", True
        report.warnings.append(
            f"{STATE_FILE} unusable and no backup: starting fresh; nothing is written until"
            " the next change")
    return state, replayed


def read_state_strict(hankweave_dir: Path) -> tuple[HankweaveState, LoadReport]:
    """Load for tools that must not guess: a missing or unreadable ``state.json`` is an error."""
    hankweave_dir = Path(hankweave_dir)
    primary = hankweave_dir / STATE_FILE
    if not primary.exists() and not (hankweave_dir / WAL_FILE).exists():
        raise StateLoadError(f"{primary}: no such file (is this an execution directory?)")
    state, report = load_state(hankweave_dir)
    if report.method == "fresh":
        problems = [i.message for i in report.issues if i.type == "corrupted_data"]
        raise StateLoadError(problems[0] if problems else f"{primary}: unreadable")
    return state, report


# ----- writing -----


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
        self._wal_path = self.dir / WAL_FILE  # (a path joined per transition costs ~10 us)
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
        self._wal_fd: int | None = None
        self._wal_bytes = 0
        self._segment_id: str | None = None
        self._folding: str | None = report.folding.id if report.folding is not None else None
        self._fold_task: asyncio.Task[None] | None = None
        self._fold_failed_at: float | None = None
        self._dir_unsynced = False
        self._sync_seconds = SYNC_INLINE_MAX_S * 2  # measured in a thread until known fast
        self._state_size = report.state_size
        self._dirty = False
        self._fold_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._holds_heap = False
        self._writer_fd: int | None = _claim_writer(self.dir)
        if report.wal_appendable:
            self._continue_log(report.segment)
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
                if self._wal_fd is None:
                    await asyncio.to_thread(self._fold_sync, self._state)
                self._append(line)
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
            if self._wal_fd is None:
                self._fold_sync(self._state)
            self._append(line)
            if is_lifecycle(transition):
                self._sync_wal()
            self._state = new_state
            self._dirty = True
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
            if run.status != "running" or run.run_id in skip_run_ids:
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
        if self._closed:
            return
        async with self._quiet():
            if self._dirty or self._wal_bytes or self._folding is not None:
                await self._fold_locked()
            self._shutdown()

    @contextlib.asynccontextmanager
    async def _quiet(self) -> AsyncIterator[None]:
        """Hold the lock with no background fold running (one that started while the lock
        was awaited is waited for too)."""
        while True:
            await self._settle()
            await self._lock.acquire()
            if self._fold_task is None:
                break
            self._lock.release()
        try:
            yield
        finally:
            self._lock.release()

    def close_sync(self) -> None:
        if self._closed:
            return
        if self._dirty or self._wal_bytes or self._folding is not None:
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

    # -- internals --

    def _check_open(self) -> None:
        if self._closed:
            raise PersistenceError("the state store is closed")

    def _prepare(self, transition: StateTransition) -> tuple[HankweaveState, bytes]:
        new_state = apply_transition(self._state, transition)
        if new_state is self._state:
            return new_state, b""
        return new_state, transition.model_dump_json(exclude_none=True).encode() + b"\n"

    def _continue_log(self, segment: Segment | None) -> None:
        """Append to ``state.wal`` as loaded, or start it on the state loaded."""
        path = self.dir / WAL_FILE
        if segment is None:
            self._segment_id = new_segment_id()
            atomic_write_bytes(path, header(self._segment_id, base=self.report.state_digest),
                               mode=PRIVATE_FILE_MODE)
        else:
            self._segment_id = segment.id
        self._wal_fd = os.open(path, os.O_RDWR | os.O_APPEND)
        self._wal_bytes = _cut_torn_tail(self._wal_fd)

    def _retire_stale_folding(self) -> None:
        """A background fold that finished just before its writer died leaves its segment, now
        in ``state.json``: retire it as that fold would have."""
        stale = self.dir / FOLDING_WAL_FILE
        if self._folding is None and stale.exists():
            marker = FoldMarker.read(self.dir / FOLD_MARKER_FILE)
            folded = read_segment(stale)
            if (marker is not None and folded is not None and marker.segment == folded.id
                    and marker.state == self.report.state_digest):
                os.replace(stale, self.dir / PREVIOUS_WAL_FILE)

    def _append(self, line: bytes) -> None:
        assert self._wal_fd is not None
        path = self._wal_path
        try:
            disk_write(path)
            written = os.write(self._wal_fd, line)
            if written != len(line):
                raise OSError(f"short write to {WAL_FILE} ({written} of {len(line)} bytes)")
        except OSError as exc:
            # Take back a partial line: the next append would glue onto it and be lost.
            with contextlib.suppress(OSError):
                os.ftruncate(self._wal_fd, self._wal_bytes)
            raise PersistenceError(f"cannot append to {path}: {_reason(exc)}") from exc
        self._wal_bytes += len(line)
        self.appended_bytes += len(line)
        kill_point("state.append")

    async def _sync_wal_async(self) -> None:
        """``fdatasync`` the log: here when this disk syncs faster than a hand-off to a thread
        costs (a thread that must be woken takes longer than a fast disk's sync), in a thread
        when it is slow, so a slow disk never stalls the event loop."""
        if self._sync_seconds > SYNC_INLINE_MAX_S:
            await asyncio.to_thread(self._sync_wal)
        else:
            self._sync_wal()

    def _sync_wal(self) -> None:
        assert self._wal_fd is not None
        try:
            started = time.perf_counter()
            os.fdatasync(self._wal_fd)
            took = time.perf_counter() - started
            # A moving average of the sync alone; one slow sync sends the next ones to a thread.
            self._sync_seconds = max(0.8 * self._sync_seconds + 0.2 * took,
                                     took if took > SYNC_SLOW_S else 0.0)
            if self._dir_unsynced:  # a rotation renamed the log: its entry must last too
                fsync_dir(self.dir)
                self._dir_unsynced = False
        except OSError as exc:
            raise PersistenceError(f"cannot fsync {self.dir / WAL_FILE}: {exc}") from exc

    def _publish(self, transition: StateTransition) -> None:
        for listener in list(self._listeners):
            try:
                listener(transition, self._state)
            except Exception:  # a listener must never break the writer
                log.exception("state listener %r failed", listener)

    def _after_write(self) -> None:
        self._dirty = True
        if self._fold_timer is None and self._inline():
            # A small state is cheap to rewrite: state.json alone stays nearly current.
            loop = asyncio.get_running_loop()
            self._fold_timer = loop.call_later(
                self.fold_interval, lambda: loop.create_task(self._timed_fold())
            )

    def _keep_collections_short(self, *, opening: bool = False) -> None:
        """A large state stays out of the garbage collector's full collections while this
        store is open (:mod:`hankweave.state.heap`): one would otherwise pause a transition for
        as long as it takes to visit every record."""
        if not self._holds_heap and self._state_size > self.inline_fold_max_bytes:
            heap.hold(collect_now=opening)
            self._holds_heap = True

    def _inline(self) -> bool:
        """Whether folds are done here: a small state, or background folds turned off."""
        return not self.background_folds or self._state_size <= self.inline_fold_max_bytes

    def _fold_due(self) -> bool:
        """The log is large relative to the state: replaying it would cost readers more than a
        fold costs (``FOLD_LOG_SHARE`` of the state's bytes, at least ``fold_min_bytes``)."""
        return self._wal_bytes >= max(self.fold_min_bytes,
                                      int(self._state_size * FOLD_LOG_SHARE))

    async def _fold_now(self) -> None:
        """A fold that is due (the lock is held)."""
        if self._fold_task is not None:
            return  # one at a time; the log keeps growing meanwhile
        if self._inline() or self._segment_id is None:
            # (A log of the first format has no id to follow: fold it here, once.)
            await self._fold_locked()
            return
        failed = self._fold_failed_at
        if failed is not None and time.monotonic() - failed < FOLD_RETRY_S:
            return
        if self._folding is None:
            self._rotate()
        self._fold_task = asyncio.get_running_loop().create_task(self._fold_in_background())

    async def _timed_fold(self) -> None:
        async with self._lock:
            self._fold_timer = None
            if self._dirty and not self._closed and self._fold_task is None and self._inline():
                await self._fold_locked()

    async def _fold_locked(self) -> None:
        """Fold here (the lock is held and no background fold runs)."""
        if self._fold_timer is not None:
            self._fold_timer.cancel()
            self._fold_timer = None
        # The state is immutable, so serializing it off the event loop is safe.
        await asyncio.to_thread(self._fold_sync, self._state)

    async def _settle(self) -> None:
        """Wait for the background fold under way, if any, to end."""
        task = self._fold_task
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    # -- the background fold --

    def _rotate(self) -> None:
        """Start a new ``state.wal`` that follows the current one, which becomes
        ``state.wal.folding``.  Nothing is fsync'd here: the next lifecycle transition's
        ``fdatasync`` syncs the new log and the directory together."""
        assert self._wal_fd is not None and self._segment_id is not None
        following = new_segment_id()
        try:
            next_path = self.dir / NEXT_WAL_FILE
            disk_write(next_path)
            with os.fdopen(open_private(next_path, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
                handle.write(header(following, follows=self._segment_id))
            kill_point("state.rotate")
            os.replace(self.dir / WAL_FILE, self.dir / FOLDING_WAL_FILE)
            kill_point("state.rotate.swap")
            os.replace(next_path, self.dir / WAL_FILE)
            fd = os.open(self.dir / WAL_FILE, os.O_RDWR | os.O_APPEND)
        except OSError as exc:
            raise PersistenceError(f"cannot rotate {self.dir / WAL_FILE}: {_reason(exc)}"
                                   ) from exc
        os.close(self._wal_fd)
        self._wal_fd, self._wal_bytes = fd, os.fstat(fd).st_size
        self._folding, self._segment_id = self._segment_id, following
        self._dir_unsynced = True

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
            if done and not self._closed:
                self._retire_folding()
        except OSError as exc:
            done, error = False, str(exc)
        finally:
            self._fold_task = None
        if done:
            self._fold_failed_at = None
        else:
            self._fold_failed_at = time.monotonic()
            log.warning("state: a background fold failed (%s); the logs are kept and it is"
                        " tried again", error or "no reason given")

    def _retire_folding(self) -> None:
        os.replace(self.dir / FOLDING_WAL_FILE, self.dir / PREVIOUS_WAL_FILE)
        self._folding = None
        self._state_size = (self.dir / STATE_FILE).stat().st_size
        self.folds += 1
        self.folded_bytes += self._state_size
        self._keep_collections_short()

    # -- the fold here --

    def _quarantine_unreadable(self) -> None:
        """Move unreadable state files aside before the first write: nothing recorded is lost."""
        if self.report.method not in ("backup", "fresh"):
            return
        stamp = time.strftime("%Y%m%dT%H%M%S")
        names = [STATE_FILE] if self.report.method == "backup" else [STATE_FILE, BACKUP_FILE]
        for name in [*names, WAL_FILE]:
            path = self.dir / name
            if path.exists():
                os.replace(path, path.with_name(f"{name}.corrupt-{stamp}"))
                log.warning("state: kept unreadable %s as %s.corrupt-%s", name, name, stamp)
        fsync_dir(self.dir)
        self.report.method = "primary"

    def _fold_sync(self, state: HankweaveState) -> None:
        try:
            self._quarantine_unreadable()
            data = dump_state(state)
            digest = _digest(data)
            # The new log is ready before state.json changes; a crash in between leaves a log
            # whose base matches no file, which loading recognises as already folded.
            following = new_segment_id()
            next_path = self.dir / NEXT_WAL_FILE
            atomic_write_bytes(next_path, header(following, base=digest), mode=PRIVATE_FILE_MODE)
            kill_point("state.fold")
            replace_state_file(self.dir, data)
            kill_point("state.fold.swap")
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None
            self._retire_all()
            os.replace(next_path, self.dir / WAL_FILE)
            fsync_dir(self.dir)
        except OSError as exc:
            raise PersistenceError(f"cannot write {self.dir / STATE_FILE}: {_reason(exc)}"
                                   ) from exc
        self._state_size = len(data)
        self.folds += 1
        self.folded_bytes += len(data)
        self._keep_collections_short()
        self._folding, self._dir_unsynced = None, False
        self._continue_log(read_segment(self.dir / WAL_FILE))
        self._dirty = False

    def _retire_all(self) -> None:
        """Keep the logs just folded as ``state.wal.prev``: they extend the ``state.json.bak``
        just made, so the two rebuild what a damaged ``state.json`` held (load_state)."""
        current, folding = self.dir / WAL_FILE, self.dir / FOLDING_WAL_FILE
        if self._folding is None or not folding.exists():
            with contextlib.suppress(FileNotFoundError):
                os.replace(current, self.dir / PREVIOUS_WAL_FILE)
            return
        # A background fold that did not finish: both segments, as one, in the order written.
        first, rest = read_segment(folding), read_segment(current)
        assert first is not None and first.id is not None
        lines = [*first.lines, *(rest.lines if rest is not None else [])]
        head = header(first.id, base=first.base) if first.base is not None else header(
            first.id, follows=first.follows)
        atomic_write_bytes(self.dir / PREVIOUS_WAL_FILE,
                           head + b"".join(line + b"\n" for line in lines),
                           mode=PRIVATE_FILE_MODE)
        os.unlink(folding)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(current)

    def _shutdown(self) -> None:
        if self._fold_timer is not None:
            self._fold_timer.cancel()
            self._fold_timer = None
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        if self._writer_fd is not None:
            os.close(self._writer_fd)  # releases the writer flock
            self._writer_fd = None
        if self._holds_heap:
            heap.release()
            self._holds_heap = False
        self._closed = True


def _cut_torn_tail(fd: int) -> int:
    """Cut a last line that lacks its newline (the process died writing it, so it was never
    acknowledged) and return the size left: the next append must start a line of its own."""
    size = os.fstat(fd).st_size
    keep = last_line_start(fd, size)
    if keep < size:
        os.ftruncate(fd, keep)
    return keep


def _reason(exc: OSError) -> str:
    """An OS error in words, without the path the message around it already names."""
    return exc.strerror or str(exc)


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
