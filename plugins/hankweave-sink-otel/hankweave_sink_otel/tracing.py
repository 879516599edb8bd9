"""hankweave's events as OpenTelemetry spans and metrics.

* a **run** is a trace: its root span ``hankweave.run`` (``RunStarted`` to ``RunCompleted``,
  ``…Failed``, ``…Interrupted``); a continuation run links to the run it continues.  The ids of a
  run's trace and root span are derived from its run id, so spans made by another process (the
  run that resumes a crashed one, a replay) still find their parent and their links;
* a **codon attempt** is a child span ``invoke_agent <codon>`` (``CodonStarted`` to
  ``codon.completed``): each retry is a span of its own (``hankweave.codon.attempt``), each
  extension a span event; the GenAI attributes (``gen_ai.operation.name``, ``gen_ai.system``,
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``/``output_tokens``,
  ``gen_ai.conversation.id``) and ours (cost in USD, checkpoint shas, failure);
* a **tool call** is a child span of its codon, ``execute_tool <name>`` (the ``tool_use``
  action to its ``tool.result``), an error when the tool failed;
* a **sentinel call** is a child span of its codon, ``sentinel <id>`` (``sentinel.triggered``
  to its ``sentinel.output`` or ``sentinel.error``), with its cost and tokens.

Span times are the events' timestamps, so a replay shows the recorded run's shape.  Metrics:
``hankweave.cost`` (USD) and ``hankweave.tokens`` (by ``gen_ai.token.type``), both per model
(``gen_ai.system``, ``gen_ai.response.model``), recorded as each codon attempt ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from hankweave.api import __version__, mask_url_credentials

RUN_ENDS = {"RunCompleted": StatusCode.OK, "RunFailed": StatusCode.ERROR,
            "RunInterrupted": StatusCode.UNSET}


def run_ids(run_id: str) -> tuple[int, int]:
    """The trace id and root span id of run ``run_id``: the same in every process."""
    digest = hashlib.sha256(f"hankweave-run:{run_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def nanos(timestamp: Any) -> int | None:
    if not isinstance(timestamp, str):
        return None
    try:
        return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None


class ChosenIds(IdGenerator):
    """Random ids, except while :meth:`choosing` (a run's root span gets its derived ids)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._chosen = threading.local()

    @contextlib.contextmanager
    def choosing(self, trace_id: int, span_id: int) -> Iterator[None]:
        self._chosen.ids = (trace_id, span_id)
        try:
            yield
        finally:
            self._chosen.ids = None

    def generate_trace_id(self) -> int:
        ids = getattr(self._chosen, "ids", None)
        return ids[0] if ids else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        ids = getattr(self._chosen, "ids", None)
        return ids[1] if ids else self._random.generate_span_id()


TOKEN_TYPES = {"input": "inputTokens", "output": "outputTokens",
               "cache_read": "cacheReadTokens", "cache_creation": "cacheCreationTokens"}
"""The token counts of a codon attempt, by ``gen_ai.token.type``, and their event keys."""


@dataclass
class Attempt:
    span: Any
    codon_id: str
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_TYPES, 0))
    cost: float = 0.0
    final: bool = False
    model: str | None = None
    """The model the plan asked for."""
    response_model: str | None = None
    """The model that answered (from the usage records), without its provider."""
    system: str | None = None


class Tracing:
    """Turns events into spans, one event at a time (the sink's worker thread)."""

    def __init__(self, config: Any, *, span_exporter: Any = None, metric_reader: Any = None,
                 ) -> None:
        from hankweave_sink_otel.export import BoundedExport

        attributes: dict[str, Any] = {"service.version": __version__}
        if config.service_name:
            attributes["service.name"] = config.service_name
        resource = Resource.create(attributes)
        if "service.name" not in attributes and str(resource.attributes.get(
                "service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "hankweave"}))
        exporter, where = span_exporter, "in memory"
        if exporter is None:
            exporter, where = _span_exporter(config)
        self.ids = ChosenIds()
        self.provider = TracerProvider(resource=resource, id_generator=self.ids,
                                       shutdown_on_exit=False)
        self.export = BoundedExport(exporter, capacity=config.max_queued_spans, where=where)
        self.provider.add_span_processor(self.export)
        self.tracer = self.provider.get_tracer("hankweave", __version__)
        self.meters = _Meters(config, resource, metric_reader)
        self.close_timeout_s = float(config.close_timeout_s)
        self.execution: str | None = None
        self.run_id: str | None = None
        self.run_span: Any = None
        self.run_cost = 0.0
        self.models: dict[str, str] = {}
        self.attempts: dict[str, Attempt] = {}
        self.attempt_numbers: dict[tuple[str, str], int] = {}
        self.tools: dict[str, Any] = {}
        self.sentinels: dict[tuple[str, int], Any] = {}
        self.last_time: int | None = None

    @property
    def dropped_spans(self) -> int:
        return self.export.dropped

    # ----- events -----

    def handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        data = event.get("data")
        if not isinstance(data, Mapping):
            return
        at = nanos(event.get("timestamp"))
        self.last_time = at or self.last_time
        if kind == "state.transition":
            self._transition(data, at)
            return
        handler = _HANDLERS.get(str(kind))
        if handler is not None:
            handler(self, data, at)

    def _transition(self, data: Mapping[str, Any], at: int | None) -> None:
        change = data.get("transition")
        if not isinstance(change, Mapping):
            return
        kind, body = change.get("type"), change.get("data")
        if not isinstance(body, Mapping):
            body = {}
        if kind == "RunStarted":
            self._run_started(body, at)
        elif kind in RUN_ENDS:
            self._run_ended(str(kind), body, at)
        elif kind == "RunCrashed":
            self._run_crashed(body, at)
        elif kind in ("ExecutionPlanUpdated",):
            self._plan(body.get("entries"))
        elif kind == "CodonStarted":
            self._codon_started(body, at)
        elif kind == "CodonTransitioned":
            self._codon_transitioned(body)
        elif kind == "CostsIncremented":
            self._costs(body)
        elif kind == "CodonFinalCostSet":
            self._final_cost(body)

    # ----- runs -----

    def _run_started(self, body: Mapping[str, Any], at: int | None) -> None:
        self._end_open(at)
        run_id = str(body.get("runId") or "")
        folder = body.get("runFolder")
        if isinstance(folder, str) and folder:
            self.execution = str(Path(folder).parent.parent.parent)
        self._plan(body.get("executionPlan"))
        conditions = body.get("startingConditions") or {}
        attributes: dict[str, Any] = {"hankweave.run.id": run_id,
                                      "hankweave.run.start": str(conditions.get("type", "fresh"))}
        if self.execution:
            attributes["hankweave.execution.path"] = self.execution
        links = []
        source = conditions.get("source") if isinstance(conditions, Mapping) else None
        if isinstance(source, Mapping) and source.get("runId"):
            continued = str(source["runId"])
            attributes["hankweave.run.continues"] = continued
            if conditions.get("reason"):
                attributes["hankweave.run.reason"] = str(conditions["reason"])
            if source.get("checkpointSha"):
                attributes["hankweave.checkpoint.sha"] = str(source["checkpointSha"])
            links.append(Link(_context(*run_ids(continued)),
                              {"hankweave.link": "continues", "hankweave.run.id": continued}))
        with self.ids.choosing(*run_ids(run_id)):
            self.run_span = self.tracer.start_span(
                "hankweave.run", context=trace.set_span_in_context(trace.INVALID_SPAN),
                kind=SpanKind.INTERNAL, attributes=attributes, links=links, start_time=at)
        self.run_id, self.run_cost = run_id, 0.0

    def _run_ended(self, kind: str, body: Mapping[str, Any], at: int | None) -> None:
        if self.run_span is None or body.get("runId") not in (None, self.run_id):
            return
        self._end_children(at)
        self.run_span.set_attribute("hankweave.cost.usd", round(self.run_cost, 10))
        self.run_span.set_attribute("hankweave.run.status", kind.removeprefix("Run").lower())
        if RUN_ENDS[kind] is StatusCode.ERROR:
            self.run_span.set_status(Status(StatusCode.ERROR, "the run failed"))
        self.run_span.end(end_time=at)
        self.run_span = None

    def _run_crashed(self, body: Mapping[str, Any], at: int | None) -> None:
        """A run that died without ending its span: its root span, made here with its own
        ids, so the codon spans it did export have their parent."""
        run_id = str(body.get("runId") or "")
        if not run_id or run_id == self.run_id:
            return
        with self.ids.choosing(*run_ids(run_id)):
            span = self.tracer.start_span(
                "hankweave.run", context=trace.set_span_in_context(trace.INVALID_SPAN),
                attributes={"hankweave.run.id": run_id, "hankweave.run.status": "crashed",
                            **({"hankweave.execution.path": self.execution}
                               if self.execution else {})},
                start_time=nanos(body.get("detectedAt")) or at)
        span.set_status(Status(StatusCode.ERROR, "the run crashed (detected when the next run"
                                                 " started)"))
        span.end(end_time=nanos(body.get("detectedAt")) or at)

    def _plan(self, entries: Any) -> None:
        for entry in entries if isinstance(entries, list) else []:
            codon = entry.get("codon") if isinstance(entry, Mapping) else None
            model = codon.get("model") if isinstance(codon, Mapping) else None
            if isinstance(model, Mapping):
                model = model.get("id") or model.get("model")
            if isinstance(model, str) and entry.get("codonId"):
                self.models[str(entry["codonId"])] = model

    # ----- codon attempts -----

    def _run_context(self) -> Any:
        if self.run_span is not None:
            return trace.set_span_in_context(self.run_span)
        if self.run_id:
            return trace.set_span_in_context(trace.NonRecordingSpan(_context(
                *run_ids(self.run_id))))
        return None

    def _codon_started(self, body: Mapping[str, Any], at: int | None) -> None:
        codon_id = str(body.get("codonId") or "")
        if body.get("runId") and self.run_id is None:
            self.run_id = str(body["runId"])
        previous = self.attempts.pop(codon_id, None)
        if previous is not None:
            self._end_attempt(previous, at, incomplete=True)
        key = (self.run_id or "", codon_id)
        number = self.attempt_numbers[key] = self.attempt_numbers.get(key, 0) + 1
        model = self.models.get(codon_id)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": codon_id,
            "hankweave.codon.id": codon_id, "hankweave.codon.attempt": number,
            "hankweave.run.id": self.run_id or ""}
        if model:
            attributes["gen_ai.request.model"] = model
        span = self.tracer.start_span(f"invoke_agent {codon_id}", context=self._run_context(),
                                      kind=SpanKind.INTERNAL, attributes=attributes,
                                      start_time=at)
        self.attempts[codon_id] = Attempt(span=span, codon_id=codon_id, model=model)

    def _codon_transitioned(self, body: Mapping[str, Any]) -> None:
        attempt = self.attempts.get(str(body.get("codonId") or ""))
        metadata = body.get("metadata")
        if attempt is None or not isinstance(metadata, Mapping):
            return
        sha = metadata.get("checkpointSha")
        if isinstance(sha, str) and sha:
            name = ("hankweave.checkpoint.rig_setup_sha" if body.get("to") == "starting"
                    else "hankweave.checkpoint.sha")
            attempt.span.set_attribute(name, sha)
        if metadata.get("claudeSessionId"):
            attempt.span.set_attribute("gen_ai.conversation.id",
                                       str(metadata["claudeSessionId"]))

    def _costs(self, body: Mapping[str, Any]) -> None:
        attempt = self.attempts.get(str(body.get("codonId") or ""))
        delta = body.get("costDelta")
        if isinstance(delta, int | float) and attempt is not None and not attempt.final:
            attempt.cost += delta
        tokens = body.get("tokensDelta")
        if attempt is not None and not attempt.final and isinstance(tokens, Mapping):
            for name, key in TOKEN_TYPES.items():
                value = tokens.get(key)
                if isinstance(value, int):
                    attempt.tokens[name] += value

    def _final_cost(self, body: Mapping[str, Any]) -> None:
        attempt = self.attempts.get(str(body.get("codonId") or ""))
        if attempt is None:
            return
        cost, tokens = body.get("finalCost"), body.get("finalTokens")
        if isinstance(cost, int | float):
            attempt.cost = float(cost)
        if isinstance(tokens, Mapping):
            attempt.tokens = {name: int(tokens.get(key) or 0)
                              for name, key in TOKEN_TYPES.items()}
        attempt.final = True

    def codon_started(self, data: Mapping[str, Any], at: int | None) -> None:
        attempt = self.attempts.get(str(data.get("codonId") or ""))
        if attempt is None:
            return
        if data.get("codonName"):
            attempt.span.set_attribute("hankweave.codon.name", str(data["codonName"]))
        if data.get("sessionId"):
            attempt.span.set_attribute("gen_ai.conversation.id", str(data["sessionId"]))

    def token_usage(self, data: Mapping[str, Any], at: int | None) -> None:
        attempt = self.attempts.get(str(data.get("codonId") or ""))
        model = data.get("modelId")
        if attempt is None or not isinstance(model, str) or not model:
            return
        system, _, name = model.partition("/")
        attempt.system, attempt.response_model = (system, name) if name else ("unknown", model)
        attempt.span.set_attribute("gen_ai.system", attempt.system)
        attempt.span.set_attribute("gen_ai.response.model", attempt.response_model)
        if attempt.model is None:
            attempt.model = attempt.response_model
            attempt.span.set_attribute("gen_ai.request.model", attempt.model)

    def codon_extended(self, data: Mapping[str, Any], at: int | None) -> None:
        attempt = self.attempts.get(str(data.get("codonId") or ""))
        if attempt is not None:
            attempt.span.add_event("hankweave.codon.extended", {
                "hankweave.codon.extension": int(data.get("extensionNumber") or 0),
                "hankweave.cost.usd": float(data.get("cumulativeCost") or 0.0)}, timestamp=at)

    def codon_completed(self, data: Mapping[str, Any], at: int | None) -> None:
        attempt = self.attempts.pop(str(data.get("codonId") or ""), None)
        if attempt is None:
            return
        span = attempt.span
        if not data.get("success"):
            reason = data.get("failureReason")
            message = reason.get("message") if isinstance(reason, Mapping) else None
            span.set_status(Status(StatusCode.ERROR, str(message or "the codon failed")))
            if isinstance(reason, Mapping) and reason.get("type"):
                span.set_attribute("error.type", str(reason["type"]))
        if data.get("budgetExceeded"):
            span.set_attribute("hankweave.budget.exceeded", True)
        if isinstance(data.get("cost"), int | float) and not attempt.final:
            attempt.cost = float(data["cost"])
        if data.get("costComplete") is False:
            span.set_attribute("hankweave.cost.complete", False)
        self._end_attempt(attempt, at)

    def _end_attempt(self, attempt: Attempt, at: int | None, *, incomplete: bool = False) -> None:
        self._end_children(at, attempt.codon_id)
        span = attempt.span
        span.set_attribute("hankweave.cost.usd", round(attempt.cost, 10))
        span.set_attribute("gen_ai.usage.input_tokens", attempt.tokens["input"])
        span.set_attribute("gen_ai.usage.output_tokens", attempt.tokens["output"])
        span.set_attribute("hankweave.usage.cache_read_tokens", attempt.tokens["cache_read"])
        span.set_attribute("hankweave.usage.cache_creation_tokens",
                           attempt.tokens["cache_creation"])
        if incomplete:
            span.set_attribute("hankweave.incomplete", True)
        span.end(end_time=at)
        self.run_cost += attempt.cost
        self.meters.record(attempt)

    # ----- tools and sentinels -----

    def assistant_action(self, data: Mapping[str, Any], at: int | None) -> None:
        if data.get("action") != "tool_use" or not data.get("toolUseId"):
            return
        attempt = self.attempts.get(str(data.get("codonId") or ""))
        context = trace.set_span_in_context(attempt.span) if attempt else self._run_context()
        name = str(data.get("toolName") or "tool")
        self.tools[str(data["toolUseId"])] = (str(data.get("codonId") or ""), self.tracer.start_span(
            f"execute_tool {name}", context=context, kind=SpanKind.INTERNAL, start_time=at,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                        "gen_ai.tool.call.id": str(data["toolUseId"]),
                        "hankweave.codon.id": str(data.get("codonId") or "")}))

    def tool_result(self, data: Mapping[str, Any], at: int | None) -> None:
        found = self.tools.pop(str(data.get("toolUseId") or ""), None)
        if found is None:
            return
        span = found[1]
        if isinstance(data.get("executionTimeMs"), int | float):
            span.set_attribute("hankweave.tool.execution_ms", data["executionTimeMs"])
        if data.get("isError"):
            span.set_status(Status(StatusCode.ERROR, str(data.get("result") or "")[:300]))
            span.set_attribute("error.type", "tool_error")
        span.end(end_time=at)

    def sentinel_triggered(self, data: Mapping[str, Any], at: int | None) -> None:
        sentinel, codon_id = str(data.get("sentinelId") or ""), str(data.get("codonId") or "")
        attempt = self.attempts.get(codon_id)
        context = trace.set_span_in_context(attempt.span) if attempt else self._run_context()
        number = int(data.get("triggerNumber") or 0)
        self.sentinels[(sentinel, number)] = self.tracer.start_span(
            f"sentinel {sentinel}", context=context, kind=SpanKind.INTERNAL, start_time=at,
            attributes={"gen_ai.operation.name": "chat", "hankweave.sentinel.id": sentinel,
                        "hankweave.sentinel.trigger": number, "hankweave.codon.id": codon_id,
                        "hankweave.sentinel.events": int(data.get("eventCount") or 0)})

    def sentinel_output(self, data: Mapping[str, Any], at: int | None) -> None:
        key = (str(data.get("sentinelId") or ""), int(data.get("triggerNumber") or 0))
        span = self.sentinels.pop(key, None)
        if span is None:
            return
        tokens = data.get("tokens")
        tokens = tokens if isinstance(tokens, Mapping) else {}
        span.set_attribute("hankweave.cost.usd", float(data.get("cost") or 0.0))
        span.set_attribute("gen_ai.usage.input_tokens", int(tokens.get("input") or 0))
        span.set_attribute("gen_ai.usage.output_tokens", int(tokens.get("output") or 0))
        span.set_attribute("hankweave.sentinel.output_type", str(data.get("outputType") or ""))
        span.end(end_time=at)

    def sentinel_error(self, data: Mapping[str, Any], at: int | None) -> None:
        sentinel = str(data.get("sentinelId") or "")
        open_keys = sorted(key for key in self.sentinels if key[0] == sentinel)
        if not open_keys:
            return
        span = self.sentinels.pop(open_keys[0])
        span.set_status(Status(StatusCode.ERROR, str(data.get("message") or "")[:300]))
        span.set_attribute("error.type", str(data.get("errorType") or "sentinel_error"))
        span.end(end_time=at)

    # ----- the end -----

    def _end_children(self, at: int | None, codon_id: str | None = None) -> None:
        """End the tool and sentinel spans still open (of ``codon_id``, or all)."""
        for tool_id, (owner, span) in list(self.tools.items()):
            if codon_id is None or owner == codon_id:
                span.set_attribute("hankweave.incomplete", True)
                span.end(end_time=at)
                del self.tools[tool_id]
        for key, span in list(self.sentinels.items()):
            if codon_id is None or span.attributes.get("hankweave.codon.id") == codon_id:
                span.set_attribute("hankweave.incomplete", True)
                span.end(end_time=at)
                del self.sentinels[key]

    def _end_open(self, at: int | None) -> None:
        for attempt in list(self.attempts.values()):
            self._end_attempt(attempt, at, incomplete=True)
        self.attempts.clear()
        self._end_children(at)
        if self.run_span is not None:
            self.run_span.set_attribute("hankweave.cost.usd", round(self.run_cost, 10))
            self.run_span.set_attribute("hankweave.incomplete", True)
            self.run_span.end(end_time=at)
            self.run_span = None

    def close(self) -> None:
        """End what is still open (a run stopped mid-codon), then export with bounded waits."""
        self._end_open(self.last_time)
        self.export.shutdown(self.close_timeout_s)
        self.meters.close(self.close_timeout_s)


_HANDLERS = {
    "codon.started": Tracing.codon_started,
    "token.usage": Tracing.token_usage,
    "codon.extended": Tracing.codon_extended,
    "codon.completed": Tracing.codon_completed,
    "assistant.action": Tracing.assistant_action,
    "tool.result": Tracing.tool_result,
    "sentinel.triggered": Tracing.sentinel_triggered,
    "sentinel.output": Tracing.sentinel_output,
    "sentinel.error": Tracing.sentinel_error,
    # The start that finds a crash reports it (the RunCrashed transition is made before the
    # runtime's event bus exists, so it is never an event).
    "run.crashed": Tracing._run_crashed,
}


def _context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _span_exporter(config: Any) -> tuple[Any, str]:
    exporter = _otlp_exporter(config, "traces")
    where = str(getattr(exporter, "_endpoint", None) or config.endpoint or "default")
    return exporter, mask_url_credentials(where)  # named in warnings: its password is not


def _otlp_exporter(config: Any, signal: str) -> Any:
    """The OTLP exporter of ``signal`` (``traces`` or ``metrics``) the settings ask for; what
    they leave out, the SDK takes from the ``OTEL_EXPORTER_OTLP_*`` variables."""
    import importlib
    import os

    protocol = (config.protocol or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    kwargs: dict[str, Any] = {"timeout": config.timeout_s}
    if config.headers:
        kwargs["headers"] = dict(config.headers)
    transport = "grpc" if protocol == "grpc" else "http"
    module = f"opentelemetry.exporter.otlp.proto.{transport}.{signal.rstrip('s')}_exporter"
    try:
        exporters = importlib.import_module(module)
    except ImportError:
        raise ValueError("otel sink: protocol grpc needs the grpc extra (pip install"
                         " 'hankweave-sink-otel[grpc]')") from None
    if config.endpoint:
        kwargs["endpoint"] = (config.endpoint if transport == "grpc"
                              else f"{config.endpoint.rstrip('/')}/v1/{signal}")
    name = "OTLPSpanExporter" if signal == "traces" else "OTLPMetricExporter"
    return getattr(exporters, name)(**kwargs)


class _Meters:
    """``hankweave.cost`` and ``hankweave.tokens`` per model, recorded per codon attempt."""

    def __init__(self, config: Any, resource: Resource, reader: Any) -> None:
        self.provider: Any = None
        if not config.metrics:
            return
        from opentelemetry.sdk.metrics import MeterProvider

        if reader is None:
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            reader = PeriodicExportingMetricReader(
                _otlp_exporter(config, "metrics"), export_interval_millis=config.metrics_interval_s * 1000,
                export_timeout_millis=config.timeout_s * 1000)
        self.provider = MeterProvider(resource=resource, metric_readers=[reader],
                                      shutdown_on_exit=False)
        meter = self.provider.get_meter("hankweave", __version__)
        self.cost = meter.create_counter("hankweave.cost", unit="USD",
                                         description="What the codons' agents cost")
        self.tokens = meter.create_counter("hankweave.tokens", unit="{token}",
                                           description="Tokens the codons' agents used")

    def record(self, attempt: Attempt) -> None:
        if self.provider is None:
            return
        labels = {"gen_ai.system": attempt.system or "unknown",
                  "gen_ai.response.model": attempt.response_model or attempt.model or "unknown"}
        self.cost.add(attempt.cost, labels)
        for kind, count in attempt.tokens.items():
            if count:
                self.tokens.add(count, {**labels, "gen_ai.token.type": kind})

    def close(self, timeout_s: float) -> None:
        if self.provider is None:
            return
        done = threading.Thread(target=self.provider.shutdown,
                                kwargs={"timeout_millis": timeout_s * 1000}, daemon=True)
        done.start()
        done.join(timeout_s + 0.5)  # an unreachable collector: the run does not wait longer
