"""Objects the runtime feeds events to: event sinks and sentinel triggers.

Both are registered by plugins (``register_event_sinks``, ``register_sentinel_triggers``) and
then called directly by the runtime, one event at a time, never through pluggy: the dispatcher
can then isolate a failing sink and keep the per-event cost to one method call.

An event here is the JSON object the journal stores (``type``, ``timestamp``, ``data``, ...),
as a read-only mapping.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar


class EventSink(abc.ABC):
    """Receives every event of an execution, in order, e.g. to forward or record it.

    Users enable sinks by :attr:`name`; the runtime creates each enabled sink once per runtime
    process with no arguments, so settings come from keyword arguments with defaults or from
    the environment.  A sink that raises is reported and detached; the run goes on.
    """

    name: ClassVar[str]
    """The name settings use to enable this sink; unique among installed sinks."""

    @abc.abstractmethod
    def handle(self, event: Mapping[str, Any]) -> None:
        """Process one event.  Called from the runtime's event loop thread: do not block long."""

    def close(self) -> None:  # noqa: B027 - optional, most sinks hold nothing to release
        """Flush and release resources; called once at shutdown, after the last event."""


class SentinelTrigger(abc.ABC):
    """Decides, event by event, when a sentinel fires.

    A trigger type is named by the ``type`` key of a sentinel's ``trigger`` configuration
    (the original has ``event`` and ``sequence``).  The runtime creates one instance per
    loaded sentinel and feeds it every event the sentinel may see.
    """

    name: ClassVar[str]
    """The ``trigger.type`` value this class implements; unique among installed triggers."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        """Keep the sentinel's ``trigger`` object (``type`` included).

        Subclasses validate it here and raise :class:`ValueError` naming the bad key, which
        the runtime reports as a sentinel load failure.
        """
        self.config = config

    @abc.abstractmethod
    def observe(self, event: Mapping[str, Any]) -> Sequence[Mapping[str, Any]] | None:
        """Take one event; return the batch of events that fires the sentinel now, or None.

        An ``event`` trigger returns ``[event]`` when the event matches; a ``sequence``
        trigger returns the events that completed its pattern.
        """
