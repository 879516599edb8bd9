"""Test-only fault injection: kill points and disk faults (docs/crash-testing.md).

The crash-injection suite (``tests/crash/``) must kill the runtime at exact moments (between
a state log append and its fsync, between two files of an output copy) and make the disk fail
mid-run.  The runtime marks those moments with :func:`kill_point` and its own file writes with
:func:`disk_write`; both do nothing unless an environment variable names them:

``HANKWEAVE_TEST_KILL_AT=<point>[@N]``
    The process sends itself SIGKILL when it reaches ``<point>`` for the Nth time (default 1),
    after writing ``hankweave: kill point <point>@N reached`` to stderr.
``HANKWEAVE_TEST_DISK_FAULT=<ERRNO>:<point>[@N]``
    From the Nth time ``<point>`` is reached on, every write the kernel makes fails with
    ``OSError(<ERRNO>)`` (``ENOSPC`` for a full disk, ``EROFS`` for a read-only one), as a full
    disk stays full.

``HANKWEAVE_TEST_PROXY_DOWN_AT=<N>``
    The LLM proxy stops listening when its Nth request arrives, and cuts that request: how
    a test makes the proxy go down in the middle of a run (:func:`proxy_down_at`).

``HANKWEAVE_TEST_FAULT_TRACE=<file>``
    Every point reached is appended to ``<file>``, one name a line: how a test finds the
    points a run reaches, and how often.

Counts are per process.  Both are for tests only: never set them in production.  Unset, a
point costs a dictionary lookup or two (the state store passes two on every transition).
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from functools import lru_cache

__all__ = ["DISK_FAULT_ENV", "KILL_AT_ENV", "KILL_POINTS", "PROXY_DOWN_ENV", "TRACE_ENV",
           "disk_write", "kill_point", "proxy_down_at"]

KILL_AT_ENV = "HANKWEAVE_TEST_KILL_AT"
DISK_FAULT_ENV = "HANKWEAVE_TEST_DISK_FAULT"
TRACE_ENV = "HANKWEAVE_TEST_FAULT_TRACE"
PROXY_DOWN_ENV = "HANKWEAVE_TEST_PROXY_DOWN_AT"

KILL_POINTS: dict[str, str] = {
    "rig.command": "a rig command runs (its first line of output arrived)",
    "harness.message": "between two records of the agent (after one is recorded)",
    "checkpoint.commit": "inside a checkpoint backend's commit, between its writes",
    "checkpoint.restore": "inside a checkpoint backend's restore, part of the files restored",
    "rollback.restored": "a rollback restored its checkpoint; its runs are not yet recorded",
    "state.append": "a transition is in the state log, not yet fsync'd nor acknowledged",
    "state.fold": "a fold wrote its new log and is about to replace state.json",
    "state.fold.swap": "a fold replaced state.json but not yet the log",
    "state.rotate": "a background fold's next log is written, the current one not yet rotated",
    "state.rotate.swap": "the current log is state.wal.folding; the next not yet state.wal",
    "state.fold.marker": "a background fold's process wrote state.fold, not yet state.json",
    "state.fold.replaced": "a background fold's process replaced state.json; the writer has"
                           " not yet retired the folded log",
    "replace.<file>": "an atomic write of <file> (e.g. state.json) wrote its temp file, "
                      "before the rename",
    "codon.recorded": "a codon is recorded finished; its output copy and the loop's next"
                      " iteration are still to come",
    "outputs.copy": "an output copy, after each copied file",
    "retry.wait": "a failed attempt's retry waits its delay (the failure is recorded)",
    "sentinel.output": "a sentinel's finding is in its output file; its cost is not yet"
                       " recorded",
    "diet.bodies": "a journal diet stored its file bodies; the compressed journal is not yet"
                   " written",
    "diet.promoted": "a journal diet's compressed journal is in place; its manifest is not yet",
    "diet.unlinking": "a journal diet is complete beside the original, which is not yet removed",
    "restore.linked": "a journal restore linked events.jsonl; its temp file is not yet removed",
}
"""Every point the kernel and the bundled checkpoint backends mark, and where it is."""

# os.environ encodes the key and decodes the value of every lookup (about 3 us); its own
# dictionary of encoded names answers "is it set at all?" at a fraction of that, and follows
# every change made through os.environ (a test's monkeypatch.setenv included).
_ENVIRON_DATA = getattr(os.environ, "_data", None)
_ENCODE_KEY = getattr(os.environ, "encodekey", None)
_ENCODED: dict[str, object] = {}


def _env(name: str) -> str | None:
    if _ENVIRON_DATA is not None and _ENCODE_KEY is not None:
        key = _ENCODED.get(name)
        if key is None:
            key = _ENCODED[name] = _ENCODE_KEY(name)
        if key not in _ENVIRON_DATA:
            return None
    return os.environ.get(name)


_lock = threading.Lock()
_reached: dict[str, int] = {}
_failing: list[OSError] = []  # the disk fault, once it has begun


def kill_point(name: str) -> None:
    """SIGKILL this process here if ``HANKWEAVE_TEST_KILL_AT`` names this point (and count)."""
    kill_at = _env(KILL_AT_ENV)
    fault = _env(DISK_FAULT_ENV)
    trace = _env(TRACE_ENV)
    if not kill_at and not fault and not trace:
        return
    count = _reach(name)
    if trace:
        _trace(trace, name)
    if kill_at and _target(kill_at) == (name, count):
        os.write(2, f"hankweave: kill point {name}@{count} reached\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)
    if fault:
        _maybe_begin_fault(fault, name, count)


def proxy_down_at() -> int | None:
    """The request at which the LLM proxy goes down (``HANKWEAVE_TEST_PROXY_DOWN_AT``)."""
    value = _env(PROXY_DOWN_ENV)
    return int(value) if value and value.isdigit() else None


def disk_write(path: object) -> None:
    """Raise the injected disk fault before the kernel writes ``path``, once it has begun.

    Each call is also the point ``disk.write``, so a fault can begin at the Nth write.
    """
    fault = _env(DISK_FAULT_ENV)
    if not fault:
        return
    _maybe_begin_fault(fault, "disk.write", _reach("disk.write"))
    if _failing:
        code = _failing[0].errno or errno.EIO
        raise OSError(code, os.strerror(code), str(path))


def _reach(name: str) -> int:
    with _lock:
        _reached[name] = count = _reached.get(name, 0) + 1
    return count


def _trace(path: str, name: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
    finally:
        os.close(fd)


def _maybe_begin_fault(spec: str, name: str, count: int) -> None:
    code, point = _fault(spec)
    if not _failing and point[0] == name and count >= point[1]:
        _failing.append(OSError(code, os.strerror(code)))


@lru_cache(maxsize=8)
def _target(spec: str) -> tuple[str, int]:
    """``point@N`` as ``(point, N)``."""
    name, _, number = spec.strip().rpartition("@")
    if not name or not number.isdigit():
        return spec.strip(), 1
    return name, int(number)


@lru_cache(maxsize=8)
def _fault(spec: str) -> tuple[int, tuple[str, int]]:
    """``ENOSPC:point@N`` as ``(errno, (point, N))``."""
    name, _, point = spec.partition(":")
    code = getattr(errno, name.strip().upper(), None)
    if not isinstance(code, int):
        raise ValueError(f"{DISK_FAULT_ENV}={spec!r}: {name!r} is not an errno name")
    return code, _target(point)


def reset() -> None:
    """Forget counts and an injected fault (for tests that run the kernel in-process)."""
    with _lock:
        _reached.clear()
        _failing.clear()
