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

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SinkConfig(BaseModel):
    """Base of a sink's settings model (:attr:`EventSink.Config`): strict (an unknown key is an
    error naming its JSON path), immutable, camelCase in ``events.sinks[].config``."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
        use_attribute_docstrings=True, defer_build=True)


class EventSink(abc.ABC):
    """Receives every event of an execution, in order, e.g. to forward or record it.

    Users enable a sink by :attr:`name` in ``events.sinks`` (``hankweave.json``), with its
    settings under ``config``, validated by :attr:`Config`.  The runtime builds each enabled
    sink once per ``hankweave run``, before the execution directory is touched, as
    ``SinkClass(config)``, and feeds it from a worker thread of its own through a bounded
    queue (``docs/events.md``, "Sinks"), so a slow sink never holds up a codon.  A sink that
    raises is reported and detached; the run goes on.
    """

    name: ClassVar[str]
    """The name settings use to enable this sink; unique among installed sinks."""

    Config: ClassVar[type[SinkConfig]] = SinkConfig
    """The strict model of this sink's ``config`` (default: takes no settings)."""

    queue_capacity: int = 10_000
    """Events waiting for this sink at most; when full, the oldest are dropped (and reported
    with a ``sink.failed`` warning) rather than the runtime waiting."""

    flush_timeout_s: float = 10.0
    """How long shutdown waits for this sink to take the events still queued for it."""

    def __init__(self, config: SinkConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @property
    def label(self) -> str:
        """How messages name this sink (its registered :attr:`name`)."""
        return getattr(self, "name", None) or type(self).__name__

    @abc.abstractmethod
    def handle(self, event: Mapping[str, Any]) -> None:
        """Process one event: called in order, one at a time, from the sink's worker thread.
        Do not change ``event``, and do not emit events from here."""

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
