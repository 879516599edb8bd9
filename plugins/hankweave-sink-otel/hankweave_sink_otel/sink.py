"""The ``otel`` event sink: hankweave's events as OpenTelemetry traces and metrics over OTLP.

Enable it in ``hankweave.json``::

    {"events": {"sinks": [{"name": "otel", "config": {"endpoint": "http://127.0.0.1:4318"}}]}}

Without ``endpoint`` (and the rest), the standard variables decide: ``OTEL_EXPORTER_OTLP_ENDPOINT``
(and its ``_TRACES_``/``_METRICS_`` forms), ``OTEL_EXPORTER_OTLP_PROTOCOL``, ``…_HEADERS``,
``…_TIMEOUT``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``; ``OTEL_SDK_DISABLED=true``
turns the sink into a no-op.  The events become spans as :mod:`hankweave_sink_otel.tracing`
describes; export happens on threads of its own with bounded queues, so an unreachable
collector never slows or fails a run (what it drops is counted and reported once).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from hankweave.api import EventSink, SinkConfig


class OtelSink(EventSink):
    name: ClassVar[str] = "otel"

    class Config(SinkConfig):
        endpoint: str | None = None
        """The collector's base URL (``http://host:4318`` for HTTP, ``host:4317`` for gRPC);
        default: the ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variables, then the SDK's default."""
        protocol: Literal["http/protobuf", "grpc"] | None = None
        """Default: ``OTEL_EXPORTER_OTLP_PROTOCOL``, then ``http/protobuf``.  gRPC needs the
        ``grpc`` extra (``pip install 'hankweave-sink-otel[grpc]'``)."""
        headers: dict[str, str] = Field(default_factory=dict)
        """Sent with every export (an API key); when given, instead of
        ``OTEL_EXPORTER_OTLP_HEADERS``."""
        service_name: str | None = None
        """``service.name`` of the resource (default: ``OTEL_SERVICE_NAME``, then
        ``hankweave``)."""
        timeout_s: float = Field(default=5.0, gt=0, le=120)
        """How long one export may take, retries included."""
        max_queued_spans: int = Field(default=4096, ge=16)
        """Finished spans waiting for export at most; more are dropped and counted."""
        metrics: bool = True
        """Also export cost and token counters per model."""
        metrics_interval_s: float = Field(default=15.0, gt=0)
        """How often the metrics are exported (and once more at the end of the run)."""
        close_timeout_s: float = Field(default=3.0, gt=0, le=60)
        """How long the end of a run waits for the last exports before giving them up."""

    config: Config
    flush_timeout_s: float = 10.0

    def __init__(self, config: SinkConfig | None = None, *, span_exporter: Any = None,
                 metric_reader: Any = None) -> None:
        """``span_exporter`` and ``metric_reader`` replace the OTLP ones (tests pass the SDK's
        in-memory exporter and reader)."""
        super().__init__(config)
        self._disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        self._tracing: Any = None
        self._dropped_at_close = 0
        if not self._disabled:
            from hankweave_sink_otel.tracing import Tracing

            self._tracing = Tracing(self.config, span_exporter=span_exporter,
                                    metric_reader=metric_reader)

    def handle(self, event: Mapping[str, Any]) -> None:
        if self._tracing is not None:
            self._tracing.handle(event)

    def close(self) -> None:
        tracing, self._tracing = self._tracing, None
        if tracing is not None:
            tracing.close()
            self._dropped_at_close = tracing.dropped_spans

    @property
    def dropped_spans(self) -> int:
        """Spans that could not be exported (a full queue, an unreachable collector)."""
        if self._tracing is not None:
            return int(self._tracing.dropped_spans)
        return self._dropped_at_close
