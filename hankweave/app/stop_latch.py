"""SIGTERM that arrives before the runtime can act on it.

Once a run's event loop handles SIGTERM, the runtime turns it into a clean, resumable stop
(exit 143).  Before that, while a launch prepares the execution and takes ownership of it, the
default action would end the process on the spot: harmless for ``hankweave run`` (nothing is
acknowledged yet), but a process that outlives the launch (an executor's worker process, which
runs one execution after another) would die with its own bookkeeping unwritten.

A :class:`StopLatch` holds the signal instead.  ``launch`` checks it at each step before the
loop takes over and stops cleanly at the first one after the signal arrived; an executor wraps
its whole task in one, so a stop that lands before or after the launch is held too.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

LATCHED = (signal.SIGTERM,)
"""SIGINT is left alone: Ctrl-C during a slow start interrupts it as a user expects."""

_active: list[StopLatch] = []


class StopLatch:
    """While entered (in the main thread), SIGTERM is recorded in :attr:`pending` instead of
    ending the process.  Nested latches share the outermost one."""

    def __init__(self) -> None:
        self.pending: str | None = None
        self._previous: dict[int, Any] = {}
        self._armed = False

    def __enter__(self) -> StopLatch:
        if _active:
            return _active[0]
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.getsignal(signum) for signum in LATCHED}
            self.arm()
        _active.append(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not _active or _active[0] is not self:
            return  # a nested use: the outermost latch stays
        _active.clear()
        if self._armed:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
            self._armed = False

    def arm(self) -> None:
        """(Re)install the handler: an event loop that handled the signal meanwhile resets it
        to the default when it lets go."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in LATCHED:
            signal.signal(signum, self._hold)
        self._armed = True

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        if self.pending is None:
            self.pending = signal.Signals(signum).name


def latched_stop() -> str | None:
    """The signal held by the active latch, if one arrived (None without a latch)."""
    return _active[0].pending if _active else None


def rearm_latch() -> None:
    """Hold signals again after an event loop stopped handling them."""
    if _active:
        _active[0].arm()
