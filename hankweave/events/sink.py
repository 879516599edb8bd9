"""The event sink contract: plugin classes that receive every event of an execution.

Sinks are registered by plugins (``register_event_sinks``) and then called directly by the
runtime, never through pluggy: the dispatcher can then isolate a failing one and keep the
per-event cost to one method call.  (Sentinel triggers and kinds, the other consumers of the
event stream, have their contract in :mod:`hankweave.sentinel`.)

An event here is the JSON object the journal stores (``type``, ``timestamp``, ``data``, ...),
as a read-only mapping.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from hankweave.plugin_config import PluginConfig


class SinkConfig(PluginConfig):
    """Base of a sink's settings model (:attr:`EventSink.Config`): strict (an unknown key is an
    error naming its JSON path), immutable, camelCase in ``events.sinks[].config``."""


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
    def handle(self, event: Mapping[str, object]) -> None:
        """Process one event: called in order, one at a time, from the sink's worker thread.
        Do not change ``event``, and do not emit events from here."""

    def bind(self, execution_dir: Path) -> None:  # noqa: B027 - optional
        """Told the execution directory (absolute) once, before the first event: a sink that
        names the execution (a webhook message) or writes beside it keeps it."""

    def close(self) -> None:  # noqa: B027 - optional, most sinks hold nothing to release
        """Flush and release resources; called once at shutdown, after the last event."""


__all__ = ["EventSink", "SinkConfig"]
