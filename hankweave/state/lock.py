"""One runtime per execution directory: ``<exec>/.hankweave/runtime.lock`` with a heartbeat.

The lock file records who runs the execution directory::

    {"pid": 4242, "lockId": "<uuid4>", "runId": "...", "startTime": "...",
     "lastHeartbeat": "...", "port": 51234, "proxyPort": null, "token": "...",
     "host": "worker-3"}

``host`` (ours) names the machine: on a filesystem shared by several machines (Celery workers),
a lock written on another host cannot be judged by its pid, only by its heartbeat.

A runtime :meth:`RuntimeLock.acquire`\\ s it at boot, refreshes ``lastHeartbeat`` every
:data:`HEARTBEAT_INTERVAL_S` seconds, and removes it at shutdown. A lock whose process is gone, or
whose heartbeat is older than :data:`STALE_AFTER_S` seconds, is stale and is reclaimed by the next
runtime, which then marks the reclaimed run crashed.

Every check-then-write on the lock file happens under an ``flock`` on the sibling guard file
``runtime.lock.acquire``, so two runtimes starting at once cannot both win, and a runtime whose
heartbeat stalled cannot overwrite the lock a successor just took. The kernel drops the ``flock``
when its holder dies, so a crash never leaves the guard held. The guard file itself stays in
place: unlinking it would let two processes lock two different inodes.

Each lock carries a fresh ``lockId``. Before rewriting the file, the holder checks that the file on
disk still carries its id; if not, a successor took over and the holder is *fenced*
(:class:`LockLostError`) and must stop.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import inspect
import json
import logging
import os
import secrets
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hankweave.fsutil import (
    atomic_write_bytes,
    fsync_dir,
    parse_iso,
    private_dir,
    process_running,
    utc_now_iso,
)
from hankweave.state.files import LOCK_FILE_NAME  # re-exported

__all__ = [
    "HEARTBEAT_INTERVAL_S",
    "LOCK_FILE_NAME",
    "STALE_AFTER_S",
    "AcquireResult",
    "LockCorruptError",
    "LockError",
    "LockHeldError",
    "LockInfo",
    "LockLostError",
    "RuntimeLock",
    "heartbeat_forever",
    "live_runtime_lock",
    "lock_is_live",
    "lock_path",
    "read_lock",
    "refuse_if_held",
    "this_host",
]

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S: Final = 30.0
"""How often a running runtime rewrites ``lastHeartbeat``."""

STALE_AFTER_S: Final = 120.0
"""A heartbeat older than this marks the lock stale, even if its pid is alive."""


GUARD_SUFFIX: Final = ".acquire"
LOCK_FILE_MODE: Final = 0o600

# lockIds written by this process. A lock carrying our own pid is ours only if we wrote it;
# otherwise it was left by an earlier process whose pid the OS has handed to us again.
_WRITTEN_BY_THIS_PROCESS: set[str] = set()


class LockError(Exception):
    """Base class for runtime-lock failures. Messages are one paragraph, fit for the user."""


class LockHeldError(LockError):
    """Another live runtime holds the lock."""

    def __init__(self, message: str, *, path: Path, holder: LockInfo) -> None:
        super().__init__(message)
        self.path = path
        self.holder = holder


class LockCorruptError(LockError):
    """The lock file exists but cannot be read or parsed; it is never overwritten silently."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class LockLostError(LockError):
    """Our lock file is gone or now carries another ``lockId``: a successor took over (fencing)."""

    def __init__(self, message: str, *, path: Path, found: LockInfo | None) -> None:
        super().__init__(message)
        self.path = path
        self.found = found


class LockInfo(BaseModel):
    """The content of ``runtime.lock``.

    Locks we write always carry every field except possibly ``runId``, ``port`` and ``proxyPort``.
    When reading, older shapes are accepted: a legacy lock is a bare pid (only ``pid`` is set) and
    the journal-diet maintenance lock has only ``pid`` and ``lastHeartbeat``; missing fields are
    ``None``, meaning unknown.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int = Field(gt=0, strict=True)
    lockId: str | None = None
    runId: str | None = None
    startTime: str | None = None
    lastHeartbeat: str | None = None
    port: int | None = None
    proxyPort: int | None = None
    # The WebSocket control token. Kept out of repr so it cannot leak into logs.
    token: str | None = Field(default=None, repr=False)
    host: str | None = None
    """The machine the runtime runs on (None in locks written before it was recorded)."""

    @property
    def on_this_host(self) -> bool:
        """Whether the lock was written on this machine (a lock without a host counts as
        local, as the original's locks are)."""
        return self.host is None or self.host == this_host()

    @field_validator("startTime", "lastHeartbeat")
    @classmethod
    def _iso_timestamp(cls, value: str | None) -> str | None:
        if value is not None:
            parse_iso(value)
        return value

    def heartbeat_age_s(self, now: datetime | None = None) -> float | None:
        """Seconds since ``lastHeartbeat`` (negative if it is in the future), or ``None`` if unknown."""
        if self.lastHeartbeat is None:
            return None
        now = now or datetime.now(UTC)
        return (now - parse_iso(self.lastHeartbeat)).total_seconds()

    def describe(self) -> str:
        """A short human description: ``pid 4242, started <time>, run <runId>``."""
        parts = [f"pid {self.pid}"]
        parts.append(f"started {self.startTime}" if self.startTime else "start time unknown")
        if self.runId:
            parts.append(f"run {self.runId}")
        return ", ".join(parts)

    @classmethod
    def parse(cls, text: str) -> LockInfo:
        """Parse the text of a lock file, in any of its historical shapes.

        Raises:
            ValueError: the text is not a lock (the message says why).
        """
        stripped = text.strip()
        if not stripped:
            raise ValueError("the file is empty")
        try:
            raw: Any = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        if isinstance(raw, str) and raw.strip().isdigit():
            raw = {"pid": int(raw.strip())}
        elif isinstance(raw, int) and not isinstance(raw, bool):
            raw = {"pid": raw}
        if not isinstance(raw, dict):
            raise ValueError(f"expected a JSON object or a bare pid, found {type(raw).__name__}")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ValueError(problems) from None

    def to_json_bytes(self) -> bytes:
        """The on-disk serialization (camelCase keys, newline-terminated)."""
        return self.model_dump_json().encode() + b"\n"


@dataclass(frozen=True)
class AcquireResult:
    """What :meth:`RuntimeLock.acquire` found and wrote.

    Attributes:
        lock: the lock now on disk, ours.
        reclaimed: the lock that was replaced because it was stale, or ``None`` if there was none.
            The caller marks ``reclaimed.runId`` crashed.
        reclaim_reason: why it was stale (``"process not running"``, ``"heartbeat stale"``,
            ``"recycled pid"``), or ``None``.
    """

    lock: LockInfo
    reclaimed: LockInfo | None = None
    reclaim_reason: str | None = None

    @property
    def reclaimed_stale(self) -> bool:
        """Whether a stale lock was reclaimed."""
        return self.reclaimed is not None

    @property
    def reclaimed_run_id(self) -> str | None:
        """The ``runId`` of the reclaimed lock, if it had one: the run that crashed."""
        return self.reclaimed.runId if self.reclaimed is not None else None


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Final = _Unset()


def lock_path(hankweave_dir: Path) -> Path:
    """The lock file of the execution whose state directory is ``hankweave_dir``."""
    return Path(hankweave_dir) / LOCK_FILE_NAME


def _read(path: Path) -> LockInfo | None:
    """Read and parse a lock file; ``None`` if absent. Raises LockCorruptError, or OSError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise LockCorruptError(_corrupt_message(path, "it is a directory"), path=path) from None
    try:
        return LockInfo.parse(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise LockCorruptError(_corrupt_message(path, str(exc)), path=path) from None


def _corrupt_message(path: Path, reason: str) -> str:
    return (
        f"Cannot read the runtime lock at {path}: {reason}. Refusing to start, because another "
        "hankweave runtime may be using this execution directory. If none is, delete the file "
        "and start again."
    )


def read_lock(hankweave_dir: Path) -> LockInfo | None:
    """Read ``<hankweave_dir>/runtime.lock`` without taking or changing anything.

    Returns:
        The lock, or ``None`` if there is no lock file.

    Raises:
        LockCorruptError: the file exists but is not a lock.
    """
    return _read(lock_path(hankweave_dir))


class RuntimeLock:
    """The lock of one execution directory, as held (or wanted) by this runtime.

    Typical use::

        lock = RuntimeLock(exec_dir / ".hankweave")
        result = lock.acquire(run_id=None)       # LockHeldError / LockCorruptError refuse the boot
        if result.reclaimed_run_id: ...          # mark that run crashed
        task = asyncio.create_task(heartbeat_forever(lock, on_lost=start_fenced_shutdown))
        lock.update(run_id=run_id)               # on every new run
        lock.update(port=51234)                  # once the server is bound
        ...
        task.cancel(); lock.release()

    A synchronous caller without an event loop calls :meth:`heartbeat_if_due` from its own loop.
    """

    def __init__(
        self,
        hankweave_dir: Path,
        *,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        stale_after_s: float = STALE_AFTER_S,
        guard_timeout_s: float = 10.0,
    ) -> None:
        """Describe the lock of one execution; nothing is read or written until :meth:`acquire`.

        Args:
            hankweave_dir: the execution's ``.hankweave`` directory (created by :meth:`acquire`).
            heartbeat_interval_s: how often the heartbeat helpers refresh the lock.
            stale_after_s: heartbeat age after which another process's lock is reclaimed.
            guard_timeout_s: how long to wait for the guard file before giving up (it is
                normally held for a few milliseconds).
        """
        self.hankweave_dir = Path(hankweave_dir)
        self.path = lock_path(self.hankweave_dir)
        self.guard_path = self.path.with_name(self.path.name + GUARD_SUFFIX)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.stale_after_s = stale_after_s
        self.guard_timeout_s = guard_timeout_s
        self._info: LockInfo | None = None
        self._lost = False
        self._last_beat = 0.0  # time.monotonic() of the last successful write

    def __repr__(self) -> str:
        state = "lost" if self._lost else ("held" if self._info else "not held")
        return f"RuntimeLock({str(self.path)!r}, {state})"

    @property
    def held(self) -> bool:
        """Whether we hold the lock, as far as we know (not acquired, released or fenced)."""
        return self._info is not None and not self._lost

    @property
    def info(self) -> LockInfo | None:
        """The lock as we last wrote it, or ``None`` if not held."""
        return self._info if self.held else None

    @property
    def token(self) -> str | None:
        """The control token generated at acquire, or ``None`` if not held."""
        return self._info.token if self.held and self._info else None

    # -- acquisition --------------------------------------------------------------------------

    def acquire(self, run_id: str | None = None) -> AcquireResult:
        """Take the lock, reclaiming a stale one.

        Raises:
            LockHeldError: a live runtime holds the lock (including this process, or this very
                object, if it already holds it).
            LockCorruptError: the lock file exists but cannot be parsed.
            LockError: the guard could not be taken within ``guard_timeout_s``.
        """
        private_dir(self.hankweave_dir, tighten=True)
        with self._guard():
            existing = _read(self.path)
            reason = None if existing is None else self._stale_reason(existing)
            if existing is not None and reason is None:
                raise LockHeldError(self._held_message(existing), path=self.path, holder=existing)
            now = utc_now_iso()
            info = LockInfo(
                pid=os.getpid(),
                lockId=str(uuid.uuid4()),
                runId=run_id,
                startTime=now,
                lastHeartbeat=now,
                token=secrets.token_urlsafe(32),
                host=this_host(),
            )
            self._write(info)
            self._lost = False
        if existing is not None:
            log.warning("Reclaimed a stale runtime lock (%s): %s", reason, existing.describe())
        return AcquireResult(lock=info, reclaimed=existing, reclaim_reason=reason)

    def _stale_reason(self, lock: LockInfo) -> str | None:
        """Why ``lock`` may be reclaimed, or ``None`` if its holder must be presumed alive."""
        age = lock.heartbeat_age_s()
        stale = age is not None and age > self.stale_after_s
        if not lock.on_this_host:
            # Its pid means nothing here: only the heartbeat tells whether it still runs.
            return "heartbeat stale (another host)" if stale or age is None else None
        if lock.pid == os.getpid():
            if lock.lockId is not None and lock.lockId in _WRITTEN_BY_THIS_PROCESS:
                return None
            # An earlier process had our pid. A fresh or unknown heartbeat is too close to call.
            return "recycled pid" if stale else None
        if not process_running(lock.pid):  # gone, or a zombie nobody reaped yet
            return "process not running"
        if stale:
            return "heartbeat stale"
        return None

    def _held_message(self, holder: LockInfo) -> str:
        if holder.pid == os.getpid():
            who = "this process"
            if holder.lockId is not None and holder.lockId in _WRITTEN_BY_THIS_PROCESS:
                who = "this process (the lock is already acquired)"
            return (
                f"Execution directory is in use by another hankweave runtime in {who} "
                f"({holder.describe()}); release that lock first."
            )
        return (
            f"Execution directory is in use by another hankweave runtime ({holder.describe()}); "
            "stop it first or wait for it to exit."
        )

    # -- while held ---------------------------------------------------------------------------

    def update(
        self,
        *,
        run_id: str | _Unset | None = _UNSET,
        port: int | _Unset | None = _UNSET,
        proxy_port: int | _Unset | None = _UNSET,
    ) -> LockInfo:
        """Rewrite the lock with new fields, keeping ``lockId``, and refresh the heartbeat.

        Only the arguments given change; pass ``None`` to clear a field.

        Raises:
            LockLostError: the file on disk is no longer ours (we are fenced).
        """
        changes: dict[str, Any] = {}
        if not isinstance(run_id, _Unset):
            changes["runId"] = run_id
        if not isinstance(port, _Unset):
            changes["port"] = port
        if not isinstance(proxy_port, _Unset):
            changes["proxyPort"] = proxy_port
        return self._rewrite(changes)

    def heartbeat(self) -> LockInfo:
        """Refresh ``lastHeartbeat`` after checking the file on disk still carries our ``lockId``.

        Raises:
            LockLostError: the file is gone or carries another id; we are fenced and must shut
                down without touching the execution further.
            OSError: the file could not be read for another reason; nothing was refreshed and
                we are not fenced, so the caller may simply try again later.
        """
        return self._rewrite({})

    def heartbeat_if_due(self) -> bool:
        """Heartbeat if ``heartbeat_interval_s`` has passed since the last write.

        For synchronous callers without an event loop or a thread: call it from any loop that
        runs at least every interval. Returns whether a heartbeat was written.

        Raises:
            LockLostError, OSError: as :meth:`heartbeat`.
        """
        if time.monotonic() - self._last_beat < self.heartbeat_interval_s:
            return False
        self.heartbeat()
        return True

    def _rewrite(self, changes: dict[str, Any]) -> LockInfo:
        mine = self._require_held()
        with self._guard():
            self._check_still_ours(mine)
            info = mine.model_copy(update={**changes, "lastHeartbeat": utc_now_iso()})
            self._write(info)
        return info

    def release(self) -> bool:
        """Remove the lock file if it still carries our ``lockId``.

        Safe to call when not held, after fencing, or twice. Never removes another runtime's lock.

        Returns:
            Whether the file was removed.
        """
        mine = self._info
        self._info = None
        if mine is None or self._lost:
            return False
        with self._guard():
            try:
                on_disk = _read(self.path)
            except (LockCorruptError, OSError) as exc:
                log.warning("Not removing runtime lock %s: %s", self.path, exc)
                return False
            if on_disk is None or on_disk.lockId != mine.lockId:
                return False
            self.path.unlink()
            fsync_dir(self.hankweave_dir)
        return True

    # -- internals ----------------------------------------------------------------------------

    def _require_held(self) -> LockInfo:
        if self._lost:
            raise LockLostError(
                f"The runtime lock at {self.path} was taken over by another runtime.",
                path=self.path,
                found=None,
            )
        if self._info is None:
            raise RuntimeError(f"{self!r}: acquire() the lock before using it")
        return self._info

    def _check_still_ours(self, mine: LockInfo) -> None:
        try:
            on_disk = _read(self.path)
        except LockCorruptError:
            # We only ever write complete locks, so unreadable content was written by someone else.
            what = "was overwritten with unreadable content"
            on_disk = None
        else:
            if on_disk is not None and on_disk.lockId == mine.lockId:
                return
            what = "was removed" if on_disk is None else f"now belongs to {on_disk.describe()}"
        self._lost = True
        raise LockLostError(
            f"The runtime lock at {self.path} {what}; another runtime has taken over this "
            "execution directory, so this one must stop.",
            path=self.path,
            found=on_disk,
        )

    def _write(self, info: LockInfo) -> None:
        if info.lockId is not None:
            _WRITTEN_BY_THIS_PROCESS.add(info.lockId)
        atomic_write_bytes(self.path, info.to_json_bytes(), mode=LOCK_FILE_MODE)
        self._info = info
        self._last_beat = time.monotonic()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Hold an exclusive ``flock`` on ``runtime.lock.acquire`` (released if we die)."""
        fd = os.open(self.guard_path, os.O_RDWR | os.O_CREAT, LOCK_FILE_MODE)
        try:
            deadline = time.monotonic() + self.guard_timeout_s
            delay = 0.001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                if time.monotonic() >= deadline:
                    raise LockError(
                        f"Timed out after {self.guard_timeout_s:g}s waiting for {self.guard_path}; "
                        "another process keeps it locked."
                    )
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            yield
        finally:
            # Closing the descriptor drops the flock.
            os.close(fd)


OnLost = Callable[[LockLostError], Awaitable[None] | None]


def lock_is_live(lock: LockInfo) -> bool:
    """Whether the runtime that wrote ``lock`` is presumably still running: its process exists
    and its heartbeat is not older than :data:`STALE_AFTER_S` (a lock without a heartbeat
    counts as live while its process exists).  A lock of another host is judged by its
    heartbeat alone."""
    age = lock.heartbeat_age_s()
    if not lock.on_this_host:
        return age is not None and age <= STALE_AFTER_S
    if not process_running(lock.pid):  # a zombie (killed, not yet reaped) holds nothing
        return False
    return age is None or age <= STALE_AFTER_S


def this_host() -> str:
    """This machine's name, as locks record it (``HANKWEAVE_HOST`` overrides it, for machines
    whose hostnames are not unique, and for tests)."""
    return os.environ.get("HANKWEAVE_HOST") or socket.gethostname()


def live_runtime_lock(hankweave_dir: Path) -> LockInfo | None:
    """The lock of a runtime that is still running on this execution, or ``None``.

    For readers that must not act while a runtime owns the directory (cleanup, export, journal
    following); it takes no lock itself.

    Raises:
        LockCorruptError: the lock file exists but cannot be read; nobody can tell whether a
            runtime holds the directory.
    """
    lock = read_lock(hankweave_dir)
    return lock if lock is not None and lock_is_live(lock) else None


def refuse_if_held(hankweave_dir: Path) -> None:
    """Raise what :meth:`RuntimeLock.acquire` would raise if a live runtime holds the lock,
    taking and writing nothing (for commands that refuse, rather than act, on a held directory).

    Raises:
        LockHeldError: a live runtime holds the lock (the message a second ``run`` gets).
        LockCorruptError: the lock file exists but cannot be read.
    """
    lock = RuntimeLock(hankweave_dir)
    holder = _read(lock.path)
    if holder is not None and lock._stale_reason(holder) is None:
        raise LockHeldError(lock._held_message(holder), path=lock.path, holder=holder)


async def heartbeat_forever(
    lock: RuntimeLock,
    interval: float | None = None,
    *,
    on_lost: OnLost | None = None,
) -> None:
    """Refresh ``lock`` every ``interval`` seconds (default ``lock.heartbeat_interval_s``).

    Runs until cancelled, or until the lock is lost: then ``on_lost`` (sync or async) is called
    once with the :class:`LockLostError` and the coroutine returns. A read error other than a
    missing file is logged and retried at the next interval, neither refreshing nor fencing.
    Run it as a task and cancel the task at shutdown, before :meth:`RuntimeLock.release`.
    """
    period = lock.heartbeat_interval_s if interval is None else interval
    while True:
        await asyncio.sleep(period)
        try:
            # Synchronous on purpose: the write takes milliseconds and the guard is never held long.
            lock.heartbeat()
        except LockLostError as exc:
            log.error("%s", exc)
            if on_lost is not None:
                outcome = on_lost(exc)
                if inspect.isawaitable(outcome):
                    await outcome
            return
        except OSError as exc:
            log.warning("Runtime lock heartbeat skipped: %s", exc)
