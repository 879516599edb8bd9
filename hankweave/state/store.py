"""The durable state store: one writer per execution directory.

Layout under ``<exec>/.hankweave/``:

``state.json``
    The folded state, in Hankweave 0.10.0's format.  Replaced atomically (temp file, fsync,
    rename, directory fsync); the previous version is kept as ``state.json.bak``.
``state.wal``
    An append-only transition log.  Its first line names the ``state.json`` it extends (by the
    SHA-256 of that file's bytes); every other line is one transition.

Why a log: the original rewrote the whole ``state.json`` on every transition, so a long loop's
per-transition cost grew with its history.  Here a transition costs one append (plus an fsync
for lifecycle transitions), whatever the history.  The log is folded into ``state.json`` a short
while after it starts to fill (``fold_interval``, longer when folds take long: at most a
fiftieth of the time goes to timed folds), when it grows as large as the state, and at
:meth:`StateStore.close`.  Readers (``hankweave inspect``) replay the log on top of
``state.json``, so they always see every acknowledged transition; when nothing runs,
``state.json`` alone is the complete record.

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
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from hankweave.faults import disk_write, kill_point
from hankweave.fsutil import (
    atomic_write_bytes,
    fsync_dir,
    last_line_start,
    pid_alive,
    utc_now_iso,
)
from hankweave.state.files import (  # re-exported
    BACKUP_FILE,
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

log = logging.getLogger(__name__)


WAL_VERSION = 1
ABSENT = "absent"  # the WAL base of an execution that has no state.json yet

LoadMethod = Literal["primary", "backup", "fresh", "new"]
Listener = Callable[[StateTransition, HankweaveState], None]


FOLD_TIME_SHARE = 50
"""Timed folds are spaced at least this many times their own duration apart."""


class PersistenceError(StateError):
    """The state could not be written; the transition was not applied."""


class StateStoreBusyError(StateError):
    """Another process (or another store in this process) is already writing this state."""


class StateLoadError(StateError):
    """The state could not be read at all (raised by strict readers such as ``inspect``)."""


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
    # Whether the in-memory state equals state.json + state.wal, so appending can continue.
    wal_appendable: bool = False
    state_digest: str = ABSENT
    state_size: int = 0


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


def _read_wal(path: Path, report: LoadReport) -> tuple[str | None, list[bytes]]:
    """Return the WAL's base digest and its complete transition lines."""
    data = _read(path)
    if not data:
        return None, []
    lines = data.split(b"\n")
    if lines[-1]:
        # A line without its newline was being written when the process died: never acknowledged.
        report.warnings.append(f"{path.name}: ignored a torn last line ({len(lines[-1])} bytes)")
    lines = lines[:-1]
    try:
        header = json.loads(lines[0]) if lines else {}
        base = header["base"]
    except (ValueError, KeyError, TypeError):
        report.warnings.append(f"{path.name}: unreadable header; its transitions were ignored")
        return None, []
    return base, lines[1:]


def _replay(state: HankweaveState, lines: list[bytes], report: LoadReport) -> HankweaveState:
    for number, line in enumerate(lines, start=2):
        try:
            state = apply_transition(state, parse_transition(line))
            report.wal_applied += 1
        except (ValidationError, ValueError, StateError) as exc:
            report.wal_skipped += 1
            report.warnings.append(f"{WAL_FILE} line {number}: skipped ({exc})")
    return state


def load_state(hankweave_dir: Path) -> tuple[HankweaveState, LoadReport]:
    """Load the state of an execution without writing anything.

    The recovery ladder: ``state.json``; else ``state.json.bak`` rebuilt forward with the log
    the last fold retired (``state.wal.prev``), which gives back what ``state.json`` held;
    else a fresh empty state (with a warning).  The transition log is replayed when it extends
    the state that was loaded.
    """
    hankweave_dir = Path(hankweave_dir)
    primary = hankweave_dir / STATE_FILE
    report = LoadReport(method="new")
    for leftover in sorted(hankweave_dir.glob(f"{STATE_FILE}.tmp*")):
        report.warnings.append(f"ignored leftover {leftover.name} (an interrupted write)")

    loaded = _parse_file(primary, report)
    if loaded is not None:
        report.method = "primary"
        state, raw = loaded
        report.state_digest = _digest(raw)
        report.state_size = len(raw)
    else:
        state = _fall_back(hankweave_dir, report)

    wal_path = hankweave_dir / WAL_FILE
    base, lines = _read_wal(wal_path, report)
    extended = False
    if report.method == "fresh":
        report.wal_appendable = False
        if lines:
            report.warnings.append(f"{WAL_FILE}: not replayed (its base state is unreadable)")
    elif base is not None and base == report.state_digest:
        state = _replay(state, lines, report)
        extended = True
        report.wal_appendable = report.method == "primary" or (
            report.method == "new" and not primary.exists()
        )
    elif not wal_path.exists():
        report.wal_appendable = report.method == "primary"
    else:
        # A log whose base is another file was already folded (or belongs to a lost version).
        if lines and report.method == "backup":
            report.warnings.append(f"{WAL_FILE}: does not extend {BACKUP_FILE}; not replayed")
        report.wal_appendable = False
    if report.method == "backup":
        # Only a chain that reaches the current log proves nothing after the backup is gone.
        report.data_loss = not extended
        report.warnings.append(
            f"{STATE_FILE} unusable; rebuilt what it held from its backup and the transition"
            " logs, nothing lost" if extended else
            f"{STATE_FILE} unusable; loaded {BACKUP_FILE}: what {STATE_FILE} held beyond it"
            " is lost")

    report.issues.extend(validate_state(state, hankweave_dir))
    return state, report


def _fall_back(hankweave_dir: Path, report: LoadReport) -> HankweaveState:
    """``state.json`` is missing or unreadable: its backup (or nothing), rebuilt forward with
    the log the last fold retired, which extends exactly that backup.

    Sets the report's method and ``state_digest``: the digest the rebuilt state has written
    out, so the current log is replayed on top when it extends what ``state.json`` held.
    """
    primary, backup = hankweave_dir / STATE_FILE, hankweave_dir / BACKUP_FILE
    loaded = _parse_file(backup, report)
    if loaded is None and backup.exists():
        report.method, report.data_loss = "fresh", True
        report.warnings.append(
            "Backup also corrupted, starting fresh: the state could not be loaded and an"
            " empty state is used in memory; nothing is written until the next change")
        return HankweaveState()
    state, raw = loaded if loaded is not None else (HankweaveState(), None)
    report.state_digest = _digest(raw)
    report.state_size = len(raw) if raw else 0
    if loaded is not None:
        report.method = "backup"
    base, lines = _read_wal(hankweave_dir / PREVIOUS_WAL_FILE, report)
    if base is not None and base == report.state_digest:
        state = _replay(state, lines, report)
        report.method = "backup"
        report.state_digest = _digest(dump_state(state))
    elif loaded is None and primary.exists():
        report.method, report.data_loss = "fresh", True
        report.warnings.append(
            f"{STATE_FILE} unusable and no backup: starting fresh; nothing is written until"
            " the next change")
    return state


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
    """

    def __init__(
        self,
        hankweave_dir: Path,
        state: HankweaveState,
        report: LoadReport,
        *,
        fold_interval: float = 2.0,
        fold_min_bytes: int = 1 << 20,
    ) -> None:
        self.dir = Path(hankweave_dir)
        self.report = report
        self.fold_interval = fold_interval
        self.fold_min_bytes = fold_min_bytes
        self._state = state
        self._listeners: list[Listener] = []
        self._lock = asyncio.Lock()
        self._wal_fd: int | None = None
        self._wal_bytes = 0
        self._state_size = report.state_size
        self._dirty = False
        self._fold_timer: asyncio.TimerHandle | None = None
        self._last_fold_seconds = 0.0
        self._closed = False
        self._writer_fd: int | None = _claim_writer(self.dir)
        if report.wal_appendable:
            self._open_wal(report.state_digest, create=False)

    @classmethod
    def open(cls, hankweave_dir: Path, **options: float) -> StateStore:
        """Load the state (recovery ladder and log replay) and become its writer."""
        hankweave_dir = Path(hankweave_dir)
        hankweave_dir.mkdir(parents=True, exist_ok=True)
        state, report = load_state(hankweave_dir)
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
                    await asyncio.to_thread(self._sync_wal)
                self._state = new_state
                self._after_write()
            self._publish(transition)
            if self._wal_bytes >= max(self.fold_min_bytes, self._state_size):
                await self._fold_locked()
            return self._state

    def transition_sync(self, transition: StateTransition) -> HankweaveState:
        """The same as :meth:`transition` for code that runs outside an event loop."""
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
        if self._wal_bytes >= max(self.fold_min_bytes, self._state_size):
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
        async with self._lock:
            await self._fold_locked()

    async def close(self) -> None:
        """Fold the log into ``state.json`` and release the files.  Idempotent."""
        if self._closed:
            return
        async with self._lock:
            if self._dirty or self._wal_bytes:
                await self._fold_locked()
            self._shutdown()

    def close_sync(self) -> None:
        if self._closed:
            return
        if self._dirty or self._wal_bytes:
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

    def _open_wal(self, base: str, *, create: bool) -> None:
        path = self.dir / WAL_FILE
        if create or not path.exists():
            header = json.dumps({"wal": WAL_VERSION, "base": base}).encode() + b"\n"
            atomic_write_bytes(path, header)
        self._wal_fd = os.open(path, os.O_RDWR | os.O_APPEND)
        self._wal_bytes = _cut_torn_tail(self._wal_fd)

    def _append(self, line: bytes) -> None:
        assert self._wal_fd is not None
        path = self.dir / WAL_FILE
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
        kill_point("state.append")

    def _sync_wal(self) -> None:
        assert self._wal_fd is not None
        try:
            os.fdatasync(self._wal_fd)
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
        if self._fold_timer is None:
            loop = asyncio.get_running_loop()
            self._fold_timer = loop.call_later(
                self._fold_delay(), lambda: loop.create_task(self._timed_fold())
            )

    def _fold_delay(self) -> float:
        """Seconds until a timed fold: ``fold_interval``, or longer once a fold takes long.

        A fold rewrites the whole state, so on a fixed timer a long history would make every
        transition pay more: folds are spaced so they take at most 1/``FOLD_TIME_SHARE`` of
        the run's time (a 40 ms fold waits at least 2 s, a 200 ms one 10 s).
        """
        return max(self.fold_interval, self._last_fold_seconds * FOLD_TIME_SHARE)

    async def _timed_fold(self) -> None:
        async with self._lock:
            self._fold_timer = None
            if self._dirty and not self._closed:
                await self._fold_locked()

    async def _fold_locked(self) -> None:
        if self._fold_timer is not None:
            self._fold_timer.cancel()
            self._fold_timer = None
        # The state is immutable, so serializing it off the event loop is safe.
        started = time.monotonic()
        await asyncio.to_thread(self._fold_sync, self._state)
        self._last_fold_seconds = time.monotonic() - started

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
            wal_tmp = self.dir / f"{WAL_FILE}.next"
            header = json.dumps({"wal": WAL_VERSION, "base": digest}).encode() + b"\n"
            atomic_write_bytes(wal_tmp, header)
            kill_point("state.fold")
            atomic_write_bytes(self.dir / STATE_FILE, data, backup=self.dir / BACKUP_FILE)
            kill_point("state.fold.swap")
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None
            # The retired log extends the state.json just backed up: kept, the two rebuild
            # what a damaged state.json held (load_state).
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.dir / WAL_FILE, self.dir / PREVIOUS_WAL_FILE)
            os.replace(wal_tmp, self.dir / WAL_FILE)
            fsync_dir(self.dir)
        except OSError as exc:
            raise PersistenceError(f"cannot write {self.dir / STATE_FILE}: {_reason(exc)}"
                                   ) from exc
        self._state_size = len(data)
        self._open_wal(digest, create=False)
        self._dirty = False

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
