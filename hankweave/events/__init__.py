"""Events: what the runtime reports, and the objects that consume the event stream.

* :mod:`hankweave.events.catalogue`: the envelope, the event types, their categories and
  payload models;
* :mod:`hankweave.events.reading`: :func:`parse_event`, the typed event every reader reads;
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
_EXPORTS: dict[str, tuple[str, ...]] = {
    "bus": ("EventBus", "EventBusClosedError", "Subscriber"),
    "catalogue": ("AGENTIC_BACKBONE_EVENTS", "ALL_EVENT_TYPES", "CONNECTION_EVENTS",
                  "EVENT_DATA_MODELS", "EVENT_SCHEMA_VERSION", "SENTINEL_EVENTS",
                  "SERVER_STATE_EVENTS", "EventCategory", "EventData", "EventDataError",
                  "EventError", "ServerEvent", "UnknownEventTypeError", "category_of",
                  "is_journaled", "make_event", "routes_to_sentinels", "validate_event_data"),
    "delivery": ("QueuedSink", "SinkFlushError"),
    "journal": ("CorruptLine", "EventJournal", "JournalBusyError", "JournalError",
                "JournalReadReport", "follow_journal", "journal_path", "read_journal"),
    "reading": ("Event", "EventReadError", "parse_event", "read_transition"),
    "sink": ("EventSink", "SinkConfig"),
}
"""Each public name, by the module that defines it."""

__getattr__ = lazy_exports(globals(), {name: f"hankweave.events.{module}"
                                          for module, names in _EXPORTS.items()
                                          for name in names})
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
