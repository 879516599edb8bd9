"""The plugin: registers the ``otel`` event sink.  OpenTelemetry is imported only when a run
enables the sink, so ``hankweave --help`` stays fast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hankweave.api import hookimpl


@hookimpl
def register_event_sinks(register: Callable[[Any], None]) -> None:
    from hankweave_sink_otel.sink import OtelSink

    register(OtelSink)
