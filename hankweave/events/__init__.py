"""Events: what the runtime reports, and the objects that consume the event stream.

* :mod:`hankweave.events.catalogue`: the envelope, the event types, their categories and
  payload models;
* :mod:`hankweave.events.journal`: ``events.jsonl``, its writer and its readers;
* :mod:`hankweave.events.bus`: :class:`EventBus`, which numbers, journals and delivers events;
* :mod:`hankweave.events.sink`: the base class event sink plugins implement (the sentinel
  contract is :mod:`hankweave.sentinel`);
* :mod:`hankweave.events.delivery`: :class:`QueuedSink`, which feeds a sink off the runtime's
  path through a bounded queue.
"""

from __future__ import annotations

from hankweave.lazy import lazy_exports

# Re-exports resolve lazily: the CLI imports this package on every start (plugin base classes
# live here), and the catalogue's models are not needed for --help.
_EXPORTS: dict[str, str] = {
    "AGENTIC_BACKBONE_EVENTS": "catalogue",
    "ALL_EVENT_TYPES": "catalogue",
    "CONNECTION_EVENTS": "catalogue",
    "CorruptLine": "journal",
    "EVENT_DATA_MODELS": "catalogue",
    "EVENT_SCHEMA_VERSION": "catalogue",
    "EventBus": "bus",
    "EventBusClosedError": "bus",
    "EventCategory": "catalogue",
    "EventData": "catalogue",
    "EventDataError": "catalogue",
    "EventError": "catalogue",
    "EventJournal": "journal",
    "EventSink": "sink",
    "JournalBusyError": "journal",
    "JournalError": "journal",
    "JournalReadReport": "journal",
    "QueuedSink": "delivery",
    "SENTINEL_EVENTS": "catalogue",
    "SERVER_STATE_EVENTS": "catalogue",
    "SinkConfig": "sink",
    "SinkFlushError": "delivery",
    "ServerEvent": "catalogue",
    "Subscriber": "bus",
    "UnknownEventTypeError": "catalogue",
    "category_of": "catalogue",
    "follow_journal": "journal",
    "is_journaled": "catalogue",
    "journal_path": "journal",
    "make_event": "catalogue",
    "read_journal": "journal",
    "routes_to_sentinels": "catalogue",
    "validate_event_data": "catalogue",
}


__getattr__ = lazy_exports(globals(), {name: f"hankweave.events.{module}"
                                          for name, module in _EXPORTS.items()})

__all__ = [
    "AGENTIC_BACKBONE_EVENTS",
    "ALL_EVENT_TYPES",
    "CONNECTION_EVENTS",
    "EVENT_DATA_MODELS",
    "EVENT_SCHEMA_VERSION",
    "SENTINEL_EVENTS",
    "SERVER_STATE_EVENTS",
    "CorruptLine",
    "EventBus",
    "EventBusClosedError",
    "EventCategory",
    "EventData",
    "EventDataError",
    "EventError",
    "EventJournal",
    "EventSink",
    "JournalBusyError",
    "JournalError",
    "JournalReadReport",
    "QueuedSink",
    "ServerEvent",
    "SinkConfig",
    "SinkFlushError",
    "Subscriber",
    "UnknownEventTypeError",
    "category_of",
    "follow_journal",
    "is_journaled",
    "journal_path",
    "make_event",
    "read_journal",
    "routes_to_sentinels",
    "validate_event_data",
]
