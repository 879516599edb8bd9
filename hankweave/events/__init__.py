"""Events: what the runtime reports, and the objects that consume the event stream.

* :mod:`hankweave.events.catalogue`: the envelope, the event types, their categories and
  payload models;
* :mod:`hankweave.events.journal`: ``events.jsonl``, its writer and its readers;
* :mod:`hankweave.events.bus`: :class:`EventBus`, which numbers, journals and delivers events;
* :mod:`hankweave.events.sink`: the base classes plugins implement (sinks, sentinel triggers).
"""

from hankweave.events.bus import EventBus, EventBusClosedError, Subscriber
from hankweave.events.catalogue import (
    AGENTIC_BACKBONE_EVENTS,
    ALL_EVENT_TYPES,
    CONNECTION_EVENTS,
    EVENT_DATA_MODELS,
    EVENT_SCHEMA_VERSION,
    SENTINEL_EVENTS,
    SERVER_STATE_EVENTS,
    EventCategory,
    EventData,
    EventDataError,
    EventError,
    ServerEvent,
    UnknownEventTypeError,
    category_of,
    is_journaled,
    make_event,
    routes_to_sentinels,
    validate_event_data,
)
from hankweave.events.journal import (
    CorruptLine,
    EventJournal,
    JournalBusyError,
    JournalError,
    JournalReadReport,
    follow_journal,
    journal_path,
    read_journal,
)
from hankweave.events.sink import EventSink, SentinelTrigger

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
    "SentinelTrigger",
    "ServerEvent",
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
