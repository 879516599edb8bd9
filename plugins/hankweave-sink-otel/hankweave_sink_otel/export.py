"""Span export off the runtime's path: a bounded queue and one thread of its own.

The SDK's batch processor also drops spans when its queue is full, but it does not count them
and its shutdown waits for the exporter; here a finished span is queued (or counted as dropped
when the queue is full), a thread exports batches, a failed export counts its spans as dropped,
and shutdown waits at most its timeout: an unreachable collector costs the run nothing.  The
first drop is logged once (the execution's ``server.log``), and the total when the sink closes,
there and as one ``warning:`` line on stderr.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from hankweave.api import mask_url_credentials

log = logging.getLogger("hankweave.sink.otel")

BATCH = 512
INTERVAL_S = 1.0


class BoundedExport(SpanProcessor):
    def __init__(self, exporter: SpanExporter, *, capacity: int, where: str) -> None:
        self._exporter = exporter
        self._queue: deque[ReadableSpan] = deque()
        self._capacity = capacity
        self._where = where
        self._lock = threading.Condition()
        self._stopping = False
        self._busy = False
        self._inflight = 0
        self._abandoned = False
        self.dropped = 0
        self.exported = 0
        self._reported = False
        self._thread = threading.Thread(target=self._loop, name="hankweave-otel-export",
                                        daemon=True)
        self._thread.start()

    # ----- SpanProcessor -----

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            if len(self._queue) >= self._capacity:
                self._drop(1, "its export queue is full")
                return
            self._queue.append(span)
            if len(self._queue) >= BATCH:
                self._lock.notify()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self._lock:
            self._lock.notify()
            return self._lock.wait_for(lambda: not self._queue and not self._busy,
                                       timeout_millis / 1000)

    def shutdown(self, timeout_s: float = 3.0) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify()
        self._thread.join(timeout_s)
        with self._lock:
            if self._thread.is_alive():  # an export still waits on the collector: give up
                self._abandoned = True
                self._drop(len(self._queue) + self._inflight,
                           "the run ended before they were exported")
                self._queue.clear()
        if not self._thread.is_alive():
            self._exporter.shutdown()
        if self.dropped:
            summary = (f"otel sink: {self.dropped} span(s) were not exported to {self._where}"
                       f" ({self.exported} exported); is the collector running?")
            log.warning("%s", summary)
            print(f"warning: {summary}", file=sys.stderr)  # once, where the user looks

    # ----- the export thread -----

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._stopping or len(self._queue) >= BATCH,
                                    INTERVAL_S)
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
                if not batch:
                    self._lock.notify_all()
                    if self._stopping:
                        return
                    continue
                self._busy = True
                self._inflight = len(batch)
            try:
                result = self._exporter.export(batch)
            except Exception as exc:  # an exporter bug must not end the thread
                log.debug("otel export raised: %s", mask_url_credentials(str(exc)))
                result = SpanExportResult.FAILURE
            with self._lock:
                self._busy = False
                self._inflight = 0
                if self._abandoned:
                    return
                if result is SpanExportResult.SUCCESS:
                    self.exported += len(batch)
                else:
                    self._drop(len(batch), "the collector did not take them")
                self._lock.notify_all()

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        if not self._reported:
            self._reported = True
            log.warning("otel sink: dropping spans (%s; collector %s); the run goes on and"
                        " the total is reported at its end", why, self._where)
