"""Events: what the runtime reports, and the objects that consume the event stream."""

from hankweave.events.sink import EventSink, SentinelTrigger

__all__ = ["EventSink", "SentinelTrigger"]
