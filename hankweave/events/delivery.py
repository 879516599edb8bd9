"""Sink delivery off the runtime's path: a bounded queue and a worker thread per sink.

The bus hands every event to each sink synchronously, on the thread that emits (the runtime's
event loop).  For the sinks users enable, :class:`QueuedSink` makes that hand-off cost one
append to a bounded queue: a worker thread of the sink's own takes events from the queue, in
order, and calls the real sink.  So a slow sink (a network exporter, a full disk) never holds
up a codon.

The overflow policy, documented in ``docs/events.md``:

* when the queue is full, the **oldest** queued event is dropped to make room; the runtime never
  waits.  The first drop after the queue last had room emits a ``sink.failed`` warning
  (``disabled: false``, ``dropped``: events lost so far); the journal keeps every event anyway;
* when the sink raises, it is detached as before: the next event hands the error to the bus,
  which records ``sink.failed`` (``disabled: true``) and stops feeding it;
* at shutdown the queue is flushed: the worker gets ``flush_timeout_s`` to deliver what is left,
  then the sink is closed.  Events it could not take in time, and drops not yet reported, make
  the close fail, which the bus records as a ``sink.failed`` event.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from hankweave.events.sink import EventSink

log = logging.getLogger("hankweave.events")

Report = Callable[[str, Mapping[str, Any]], Any]
"""The bus's ``emit``, for the overflow warning."""


class SinkFlushError(Exception):
    """A queued sink lost events: dropped on overflow, or not delivered before shutdown."""


class QueuedSink(EventSink):
    """Feeds ``sink`` from a worker thread through a bounded queue (see the module docstring)."""

    name = "queued"

    def __init__(self, sink: EventSink, *, report: Report, capacity: int | None = None,
                 flush_timeout_s: float | None = None) -> None:
        super().__init__()
        self.sink = sink
        self.capacity = capacity or sink.queue_capacity
        self.flush_timeout_s = sink.flush_timeout_s if flush_timeout_s is None \
            else flush_timeout_s
        self._report = report
        self._queue: deque[Mapping[str, Any]] = deque()
        self._ready = threading.Condition()
        self._closing = False
        self._failure: BaseException | None = None
        self._dropped = 0
        self._unreported = 0
        self._warned = False  # a warning went out since the queue last had room
        self._worker = threading.Thread(target=self._deliver, daemon=True,
                                        name=f"hankweave-sink-{sink.label}")
        self._worker.start()

    @property
    def label(self) -> str:
        return self.sink.label

    @property
    def dropped(self) -> int:
        """Events dropped on overflow so far."""
        return self._dropped

    @property
    def failure(self) -> BaseException | None:
        """What the sink raised, once it did (it is then fed no more)."""
        return self._failure

    def handle(self, event: Mapping[str, Any]) -> None:
        """Queue ``event`` without waiting; raise what the sink raised earlier, so the bus
        detaches it."""
        if self._failure is not None:
            raise self._failure
        warn = False
        with self._ready:
            if len(self._queue) >= self.capacity:
                self._queue.popleft()
                self._dropped += 1
                self._unreported += 1
                warn, self._warned = not self._warned, True
            self._queue.append(event)
            self._ready.notify()
        if warn:
            self._warn_overflow()

    def close(self) -> None:
        """Flush the queue (within ``flush_timeout_s``), then close the sink."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._worker.join(self.flush_timeout_s)
        if self._worker.is_alive():
            left = len(self._queue)
            raise SinkFlushError(f"did not take {left} queued event(s) within"
                                 f" {self.flush_timeout_s:g}s; it was not closed")
        self.sink.close()
        if self._failure is not None:
            raise self._failure  # raised after its last event: recorded as the close's failure
        if self._unreported:
            raise SinkFlushError(f"dropped {self._dropped} event(s) in all: its queue of"
                                 f" {self.capacity} was full")

    def _warn_overflow(self) -> None:
        count, self._unreported = self._unreported, 0
        # Emitted from within the bus's delivery: it is journaled at once, delivered next.
        self._report("sink.failed", {
            "sink": self.label, "disabled": False, "dropped": self._dropped,
            "error": f"falling behind: its queue of {self.capacity} events is full; dropped"
                     f" the oldest {count} (the journal has every event)"})

    def _deliver(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                if not self._queue:
                    return  # closing, and everything delivered
                event = self._queue.popleft()
                if len(self._queue) < self.capacity // 2:
                    self._warned = False  # room again: the next overflow is news
            if self._failure is not None:
                continue  # detached: drain without delivering
            try:
                self.sink.handle(event)
            except Exception as exc:
                log.error("event sink %r raised and is detached", self.label, exc_info=exc)
                self._failure = exc
