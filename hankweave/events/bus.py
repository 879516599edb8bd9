"""The event bus: the one place events are emitted, numbered, journaled and delivered.

``emit`` is synchronous and cheap (it runs for every assistant message): validate the payload
against the catalogue, wrap it in an envelope, give it the next ``seq``, append it to the
journal (the sink of record, written first), then hand it to each registered
:class:`~hankweave.events.sink.EventSink` and to in-process subscribers.

Failures are contained: a sink whose ``handle`` raises is detached for the rest of the run and
a ``sink.failed`` event records it; a subscriber that raises is logged and kept.  Only a
failure of the journal itself reaches the emitter, because then the event is not recorded.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from hankweave.events.catalogue import (
    CONNECTION_EVENTS,
    EventError,
    ServerEvent,
    make_event,
    validate_event_data,
)
from hankweave.events.journal import EventJournal
from hankweave.events.sink import EventSink
from hankweave.secrets import mask_url_credentials

__all__ = ["EventBus", "EventBusClosedError", "Subscriber"]

log = logging.getLogger("hankweave.events")

Subscriber = Callable[[ServerEvent], None]
"""An in-process listener (live terminal view, WebSocket broadcaster): called with each event."""

# A sink's error message goes into the journal; keep a runaway repr from bloating it.
_MAX_ERROR_CHARS = 2000


class EventBusClosedError(EventError):
    """An event emitted after :meth:`EventBus.close`."""


class EventBus:
    """Emits the events of one execution.

    Args:
        journal: where events are recorded, or ``None`` to keep nothing (tests, dry runs);
            numbering then starts at 1.  The bus closes it in :meth:`close`.
        sinks: the enabled sinks, fed in this order after the journal.

    Every event reaches every sink and subscriber in ``seq`` order, even when a sink or a
    subscriber emits an event itself: such an event is numbered and journaled at once and
    delivered after the one being delivered.  Emission is serialized by a lock, so emitting
    from several threads is safe; sinks must therefore not block on another emitting thread.
    """

    def __init__(self, journal: EventJournal | None, *, sinks: Iterable[EventSink] = ()) -> None:
        self._journal = journal
        self._sinks: list[EventSink] = list(sinks)
        self._disabled: list[EventSink] = []
        self._subscribers: list[Subscriber] = []
        # Re-entrant: a sink or subscriber may emit while its event is being delivered.
        self._lock = threading.RLock()
        self._last_seq = journal.last_seq if journal is not None else 0
        self._pending: deque[ServerEvent] = deque()
        self._delivering = False
        self._closed = False
        self.run_id_source: Callable[[], str | None] = lambda: None
        """The run current now (the runtime's ``currentRunId``): every event is stamped
        with it."""

    @property
    def journal(self) -> EventJournal | None:
        return self._journal

    @property
    def sinks(self) -> tuple[EventSink, ...]:
        """The sinks still attached (a sink that raised is no longer among them)."""
        return tuple(self._sinks)

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last event emitted (or found in the journal); 0 before any."""
        return self._last_seq

    def add_sink(self, sink: EventSink) -> None:
        """Attach a sink; it receives the events emitted from now on."""
        with self._lock:
            self._sinks.append(sink)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for each event from now on; return a function that stops it.

        Subscribers run after the sinks, in subscription order.  One that raises is logged and
        stays subscribed.  Unsubscribing twice is harmless.
        """
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def emit(self, event_type: str, data: Mapping[str, Any] | BaseModel) -> ServerEvent | None:
        """Emit one event and return it (with its ``seq``) once it is journaled and delivered.

        ``data`` is a mapping (camelCase or snake_case keys) or the type's payload model.

        A connection event (``server.ready``, ``pong``, ...) belongs to one client and the bus
        has none to send it to: it is validated, dropped with a log line, and ``None`` is
        returned, as the original does with such an event emitted without a target.

        Raises:
            UnknownEventTypeError: ``event_type`` is not in the catalogue.
            EventDataError: ``data`` does not fit the type; the message names each bad field.
            JournalError: the journal could not record the event (nothing was delivered).
            EventBusClosedError: the bus is closed.
        """
        if event_type in CONNECTION_EVENTS:
            validate_event_data(event_type, data)
            log.warning("dropped %r event: connection events need a target client", event_type)
            return None
        with self._lock:
            if self._closed:
                raise EventBusClosedError(f"event {event_type!r} emitted after the bus was closed")
            event = self._record(event_type, data)
            self._pending.append(event)
            if not self._delivering:
                self._deliver_pending()
        return event

    def close(self) -> None:
        """Close every sink (a failing ``close`` is logged and journaled), then the journal.

        Idempotent; emitting afterwards raises :class:`EventBusClosedError`.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            failures: list[tuple[EventSink, Exception]] = []
            for sink in self._sinks:
                try:
                    sink.close()
                except Exception as exc:
                    log.exception("event sink %r failed to close", _sink_name(sink))
                    failures.append((sink, exc))
            for sink in self._disabled:
                # Still given the chance to release what it holds; it already has its event.
                try:
                    sink.close()
                except Exception:
                    log.exception("detached event sink %r failed to close", _sink_name(sink))
            self._sinks = []
            try:
                for failed, error in failures:
                    # Recorded so the journal shows which sink may not have flushed everything.
                    event = self._record("sink.failed", _failure(failed, error))
                    self._notify_subscribers(event)
            finally:
                if self._journal is not None:
                    self._journal.close()

    # -- internals (called with the lock held) --

    def _record(self, event_type: str, data: Mapping[str, Any] | BaseModel) -> ServerEvent:
        """Build the event with the next seq and journal it; the seq is used only on success."""
        seq = self._last_seq + 1
        event = make_event(event_type, data, seq=seq, run_id=self.run_id_source())
        if self._journal is not None:
            self._journal.append(event)
        self._last_seq = seq
        return event

    def _deliver_pending(self) -> None:
        self._delivering = True
        try:
            while self._pending:
                event = self._pending.popleft()
                if self._sinks:
                    # One dict for all sinks: they receive the journaled JSON object, read-only.
                    wire = event.to_wire()
                    for sink in tuple(self._sinks):
                        try:
                            sink.handle(wire)
                        except Exception as exc:
                            self._detach(sink, exc)
                self._notify_subscribers(event)
        finally:
            self._delivering = False

    def _notify_subscribers(self, event: ServerEvent) -> None:
        for callback in tuple(self._subscribers):
            try:
                callback(event)
            except Exception:
                log.exception("event subscriber %r failed on %r; kept", callback, event.type)

    def _detach(self, sink: EventSink, exc: Exception) -> None:
        name = _sink_name(sink)
        log.error(
            "event sink %r raised and is detached for the rest of the run", name, exc_info=exc
        )
        self._sinks.remove(sink)
        self._disabled.append(sink)
        try:
            # Queued behind the current event, so the remaining sinks still see it in order.
            self._pending.append(self._record("sink.failed", _failure(sink, exc)))
        except EventError:
            log.exception("could not record the failure of event sink %r", name)


def _sink_name(sink: EventSink) -> str:
    label = getattr(sink, "label", None)
    return label if isinstance(label, str) and label else type(sink).__name__


def _failure(sink: EventSink, exc: Exception) -> dict[str, Any]:
    # A sink's error may quote its endpoint; the journal keeps no password from it.
    error = mask_url_credentials(f"{type(exc).__name__}: {exc}")
    if len(error) > _MAX_ERROR_CHARS:
        error = error[:_MAX_ERROR_CHARS] + "..."
    return {"sink": _sink_name(sink), "error": error, "disabled": True}
