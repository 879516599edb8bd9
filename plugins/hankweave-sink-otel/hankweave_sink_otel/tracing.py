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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from hankweave.api import (
    CodonFinalCostSet,
    CodonStarted,
    CodonTransitioned,
    ContinuationStart,
    CostsIncremented,
    EventReadError,
    ExecutionPlanUpdated,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunInterrupted,
    RunStarted,
    __version__,
    mask_url_credentials,
    parse_event,
    read_transition,
)

if TYPE_CHECKING:
    from hankweave.api import (
        AssistantActionData,
        CodonCompletedData,
        CodonExtendedData,
        CodonStartedData,
        CodonTransitionedData,
        ExecutionCodonEntry,
        RunCrashedData,
        RunStartedData,
        SentinelErrorData,
        SentinelOutputData,
        SentinelTriggeredData,
        StateTransitionData,
        TokenUsage,
        TokenUsageData,
        ToolResultData,
    )

RUN_ENDS = {"RunCompleted": StatusCode.OK, "RunFailed": StatusCode.ERROR,
            "RunInterrupted": StatusCode.UNSET}


def run_ids(run_id: str) -> tuple[int, int]:
    """The trace id and root span id of run ``run_id``: the same in every process."""
    digest = hashlib.sha256(f"hankweave-run:{run_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def nanos(timestamp: str | None) -> int | None:
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


TOKEN_TYPES = {"input": "input_tokens", "output": "output_tokens",
               "cache_read": "cache_read_tokens", "cache_creation": "cache_creation_tokens"}
"""The token counts of a codon attempt, by ``gen_ai.token.type``, and their
:class:`~hankweave.api.TokenUsage` fields."""


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
        if event.get("type") not in _TRACED or event.get("data") is None:
            # Not parsed: nothing to trace.  Its time still counts (what is open at the end
            # ends then).
            self.last_time = nanos(event.get("timestamp")) or self.last_time
            return
        try:
            parsed = parse_event(event)
        except EventReadError:
            return
        at = nanos(parsed.timestamp)
        self.last_time = at or self.last_time
        if parsed.type == "state.transition":
            self._transition(parsed.data, parsed.timestamp, at)  # type: ignore[arg-type]
            return
        _HANDLERS[parsed.type](self, parsed.data, at)

    def _transition(self, data: StateTransitionData, timestamp: str | None,
                    at: int | None) -> None:
        match read_transition(data.transition, at=timestamp):
            case RunStarted(data=body):
                self._run_started(body, at)
            case RunCompleted() | RunFailed() | RunInterrupted() as ended:
                self._run_ended(ended.type, ended.data.run_id, at)
            case RunCrashed(data=crashed):
                self._run_crashed(crashed.run_id, crashed.detected_at, at)
            case ExecutionPlanUpdated(data=splice):
                self._plan(splice.entries)
            case CodonStarted(data=started):
                self._codon_started(started.codon_id, started.run_id, at)
            case CodonTransitioned(data=moved):
                self._codon_transitioned(moved)
            case CostsIncremented(data=costs):
                self._costs(costs.codon_id, costs.cost_delta, costs.tokens_delta)
            case CodonFinalCostSet(data=final):
                self._final_cost(final.codon_id, final.final_cost, final.final_tokens)

    # ----- runs -----

    def _run_started(self, body: RunStartedData, at: int | None) -> None:
        self._end_open(at)
        run_id = str(body.run_id or "")
        if body.run_folder:
            self.execution = str(Path(body.run_folder).parent.parent.parent)
        self._plan(body.execution_plan)
        start = body.starting_conditions
        attributes: dict[str, Any] = {"hankweave.run.id": run_id,
                                      "hankweave.run.start": str(start.type if start else "fresh")}
        if self.execution:
            attributes["hankweave.execution.path"] = self.execution
        links = []
        source = start.source if isinstance(start, ContinuationStart) else None
        if isinstance(start, ContinuationStart) and source is not None and source.run_id:
            continued = str(source.run_id)
            attributes["hankweave.run.continues"] = continued
            if start.reason:
                attributes["hankweave.run.reason"] = str(start.reason)
            if source.checkpoint_sha:
                attributes["hankweave.checkpoint.sha"] = str(source.checkpoint_sha)
            links.append(Link(_context(*run_ids(continued)),
                              {"hankweave.link": "continues", "hankweave.run.id": continued}))
        with self.ids.choosing(*run_ids(run_id)):
            self.run_span = self.tracer.start_span(
                "hankweave.run", context=trace.set_span_in_context(trace.INVALID_SPAN),
                kind=SpanKind.INTERNAL, attributes=attributes, links=links, start_time=at)
        self.run_id, self.run_cost = run_id, 0.0

    def _run_ended(self, kind: str, run_id: str | None, at: int | None) -> None:
        if self.run_span is None or run_id not in (None, self.run_id):
            return
        self._end_children(at)
        self.run_span.set_attribute("hankweave.cost.usd", round(self.run_cost, 10))
        self.run_span.set_attribute("hankweave.run.status", kind.removeprefix("Run").lower())
        if RUN_ENDS[kind] is StatusCode.ERROR:
            self.run_span.set_status(Status(StatusCode.ERROR, "the run failed"))
        self.run_span.end(end_time=at)
        self.run_span = None

    def _crash_reported(self, data: RunCrashedData, at: int | None) -> None:
        self._run_crashed(data.run_id, data.detected_at, at)

    def _run_crashed(self, run_id: str | None, detected_at: str | None, at: int | None) -> None:
        """A run that died without ending its span: its root span, made here with its own
        ids, so the codon spans it did export have their parent."""
        run_id = str(run_id or "")
        if not run_id or run_id == self.run_id:
            return
        with self.ids.choosing(*run_ids(run_id)):
            span = self.tracer.start_span(
                "hankweave.run", context=trace.set_span_in_context(trace.INVALID_SPAN),
                attributes={"hankweave.run.id": run_id, "hankweave.run.status": "crashed",
                            **({"hankweave.execution.path": self.execution}
                               if self.execution else {})},
                start_time=nanos(detected_at) or at)
        span.set_status(Status(StatusCode.ERROR, "the run crashed (detected when the next run"
                                                 " started)"))
        span.end(end_time=nanos(detected_at) or at)

    def _plan(self, entries: list[ExecutionCodonEntry] | None) -> None:
        for entry in entries or []:
            model = entry.codon.model if entry.codon else None
            if isinstance(model, Mapping):  # the resolved model's record, untyped in the plan
                model = model.get("id") or model.get("model")
            if isinstance(model, str) and entry.codon_id:
                self.models[str(entry.codon_id)] = model

    # ----- codon attempts -----

    def _run_context(self) -> Any:
        if self.run_span is not None:
            return trace.set_span_in_context(self.run_span)
        if self.run_id:
            return trace.set_span_in_context(trace.NonRecordingSpan(_context(
                *run_ids(self.run_id))))
        return None

    def _codon_started(self, codon_id: str | None, run_id: str | None, at: int | None) -> None:
        codon_id = str(codon_id or "")
        if run_id and self.run_id is None:
            self.run_id = str(run_id)
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

    def _codon_transitioned(self, body: CodonTransitionedData) -> None:
        attempt = self.attempts.get(str(body.codon_id or ""))
        metadata = body.metadata
        if attempt is None or metadata is None:
            return
        if metadata.checkpoint_sha:
            name = ("hankweave.checkpoint.rig_setup_sha" if body.to == "starting"
                    else "hankweave.checkpoint.sha")
            attempt.span.set_attribute(name, metadata.checkpoint_sha)
        if metadata.claude_session_id:
            attempt.span.set_attribute("gen_ai.conversation.id", str(metadata.claude_session_id))

    def _costs(self, codon_id: str | None, delta: float | None,
               tokens: TokenUsage | None) -> None:
        attempt = self.attempts.get(str(codon_id or ""))
        if attempt is None or attempt.final:
            return
        if delta is not None:
            attempt.cost += delta
        if tokens is not None:
            for name, field_name in TOKEN_TYPES.items():
                value = getattr(tokens, field_name)
                if isinstance(value, int):
                    attempt.tokens[name] += value

    def _final_cost(self, codon_id: str | None, cost: float | None,
                    tokens: TokenUsage | None) -> None:
        attempt = self.attempts.get(str(codon_id or ""))
        if attempt is None:
            return
        if cost is not None:
            attempt.cost = float(cost)
        if tokens is not None:
            attempt.tokens = {name: int(getattr(tokens, field_name) or 0)
                              for name, field_name in TOKEN_TYPES.items()}
        attempt.final = True

    def codon_started(self, data: CodonStartedData, at: int | None) -> None:
        attempt = self.attempts.get(str(data.codon_id or ""))
        if attempt is None:
            return
        if data.codon_name:
            attempt.span.set_attribute("hankweave.codon.name", str(data.codon_name))
        if data.session_id:
            attempt.span.set_attribute("gen_ai.conversation.id", str(data.session_id))

    def token_usage(self, data: TokenUsageData, at: int | None) -> None:
        attempt = self.attempts.get(str(data.codon_id or ""))
        model = data.model_id
        if attempt is None or not isinstance(model, str) or not model:
            return
        system, _, name = model.partition("/")
        attempt.system, attempt.response_model = (system, name) if name else ("unknown", model)
        attempt.span.set_attribute("gen_ai.system", attempt.system)
        attempt.span.set_attribute("gen_ai.response.model", attempt.response_model)
        if attempt.model is None:
            attempt.model = attempt.response_model
            attempt.span.set_attribute("gen_ai.request.model", attempt.model)

    def codon_extended(self, data: CodonExtendedData, at: int | None) -> None:
        attempt = self.attempts.get(str(data.codon_id or ""))
        if attempt is not None:
            attempt.span.add_event("hankweave.codon.extended", {
                "hankweave.codon.extension": int(data.extension_number or 0),
                "hankweave.cost.usd": float(data.cumulative_cost or 0.0)}, timestamp=at)

    def codon_completed(self, data: CodonCompletedData, at: int | None) -> None:
        attempt = self.attempts.pop(str(data.codon_id or ""), None)
        if attempt is None:
            return
        span = attempt.span
        if not data.success:
            reason = data.failure_reason
            message = reason.message if reason is not None else None
            span.set_status(Status(StatusCode.ERROR, str(message or "the codon failed")))
            if reason is not None and reason.type:
                span.set_attribute("error.type", str(reason.type))
        if data.budget_exceeded:
            span.set_attribute("hankweave.budget.exceeded", True)
        if data.cost is not None and not attempt.final:
            attempt.cost = float(data.cost)
        if data.cost_complete is False:
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

    def assistant_action(self, data: AssistantActionData, at: int | None) -> None:
        if data.action != "tool_use" or not data.tool_use_id:
            return
        codon_id = str(data.codon_id or "")
        attempt = self.attempts.get(codon_id)
        context = trace.set_span_in_context(attempt.span) if attempt else self._run_context()
        name = str(data.tool_name or "tool")
        self.tools[str(data.tool_use_id)] = (codon_id, self.tracer.start_span(
            f"execute_tool {name}", context=context, kind=SpanKind.INTERNAL, start_time=at,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                        "gen_ai.tool.call.id": str(data.tool_use_id),
                        "hankweave.codon.id": codon_id}))

    def tool_result(self, data: ToolResultData, at: int | None) -> None:
        found = self.tools.pop(str(data.tool_use_id or ""), None)
        if found is None:
            return
        span = found[1]
        if data.execution_time_ms is not None:
            span.set_attribute("hankweave.tool.execution_ms", data.execution_time_ms)
        if data.is_error:
            span.set_status(Status(StatusCode.ERROR, str(data.result or "")[:300]))
            span.set_attribute("error.type", "tool_error")
        span.end(end_time=at)

    def sentinel_triggered(self, data: SentinelTriggeredData, at: int | None) -> None:
        sentinel, codon_id = str(data.sentinel_id or ""), str(data.codon_id or "")
        attempt = self.attempts.get(codon_id)
        context = trace.set_span_in_context(attempt.span) if attempt else self._run_context()
        number = int(data.trigger_number or 0)
        self.sentinels[(sentinel, number)] = self.tracer.start_span(
            f"sentinel {sentinel}", context=context, kind=SpanKind.INTERNAL, start_time=at,
            attributes={"gen_ai.operation.name": "chat", "hankweave.sentinel.id": sentinel,
                        "hankweave.sentinel.trigger": number, "hankweave.codon.id": codon_id,
                        "hankweave.sentinel.events": int(data.event_count or 0)})

    def sentinel_output(self, data: SentinelOutputData, at: int | None) -> None:
        key = (str(data.sentinel_id or ""), int(data.trigger_number or 0))
        span = self.sentinels.pop(key, None)
        if span is None:
            return
        tokens = data.tokens
        span.set_attribute("hankweave.cost.usd", float(data.cost or 0.0))
        span.set_attribute("gen_ai.usage.input_tokens", int(tokens.input or 0) if tokens else 0)
        span.set_attribute("gen_ai.usage.output_tokens", int(tokens.output or 0) if tokens else 0)
        span.set_attribute("hankweave.sentinel.output_type", str(data.output_type or ""))
        span.end(end_time=at)

    def sentinel_error(self, data: SentinelErrorData, at: int | None) -> None:
        sentinel = str(data.sentinel_id or "")
        open_keys = sorted(key for key in self.sentinels if key[0] == sentinel)
        if not open_keys:
            return
        span = self.sentinels.pop(open_keys[0])
        span.set_status(Status(StatusCode.ERROR, str(data.message or "")[:300]))
        span.set_attribute("error.type", str(data.error_type or "sentinel_error"))
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


_HANDLERS: dict[str, Callable[[Tracing, Any, int | None], None]] = {
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
    "run.crashed": Tracing._crash_reported,
}


_TRACED = frozenset({"state.transition", *_HANDLERS})
"""The event types that become spans; the others are not parsed."""


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
