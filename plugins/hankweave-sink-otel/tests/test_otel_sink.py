"""The ``otel`` sink: span structure and attributes (the SDK's in-memory exporter fed a real
run's journal and made-up sentinel events), the wire path to a real OTLP/HTTP receiver (a
run, a resumed run, a replay), an unreachable collector, and the sink contract."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hankweave_sink_otel.sink import OtelSink
from hankweave_sink_otel.tracing import run_ids
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from otel_helpers import ROOT, GrpcReceiver, Project, Receiver

from hankweave.testing import EventSinkContract

TOOLS = [{"name": "Read", "input": {"file_path": "in.md"}, "result": "text"},
         {"name": "Bash", "input": {"command": "false"}, "result": "exit 1"}]
RETRY = {"onFailure": "retry", "retryConfig": {"maxAttempts": 3, "delayMs": 0}}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver()
    try:
        yield started
    finally:
        started.close()


def events_of(execution: Path) -> list[dict[str, Any]]:
    journal = execution / ".hankweave" / "events" / "events.jsonl"
    return [json.loads(line) for line in journal.open()]


def fed(events: list[dict[str, Any]]) -> tuple[list[Any], Any]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    sink = OtelSink(OtelSink.Config(), span_exporter=exporter, metric_reader=reader)
    for event in events:
        sink.handle(event)
    metrics = reader.get_metrics_data()
    sink.close()
    return list(exporter.get_finished_spans()), metrics


# ----- structure -----


def test_a_run_is_a_trace_of_codon_attempts_and_tool_calls(tmp_path: Path) -> None:
    project = Project(tmp_path, sink=None)
    project.write({"first": [{"result": "error", "errorText": "API Error: 529 overloaded"},
                             {"messages": 2, "tools": TOOLS, "cost": 0.02}],
                   "second": {"messages": 1, "cost": 0.01}}, **RETRY)
    done = project.run()
    assert done.returncode == 0, done.stderr
    spans, metrics = fed(events_of(tmp_path / "exec"))

    (run,) = [s for s in spans if s.name == "hankweave.run"]
    run_id = run.attributes["hankweave.run.id"]
    assert (run.context.trace_id, run.context.span_id) == run_ids(run_id)
    assert run.parent is None and run.attributes["hankweave.execution.path"] == str(
        tmp_path / "exec")
    assert run.attributes["hankweave.cost.usd"] == pytest.approx(0.03, rel=0.01)
    codons = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert [(s.name, s.attributes["hankweave.codon.attempt"]) for s in codons] == [
        ("invoke_agent first", 1), ("invoke_agent first", 2), ("invoke_agent second", 1)]
    assert all(s.parent.span_id == run.context.span_id for s in codons)
    failed, first, _ = codons
    assert failed.status.status_code is StatusCode.ERROR and "529" in failed.status.description
    attributes = first.attributes
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.request.model"] == "fake"
    assert attributes["gen_ai.system"] == "fake"
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["hankweave.cost.usd"] == pytest.approx(0.02)
    assert attributes["gen_ai.conversation.id"]
    assert len(attributes["hankweave.checkpoint.sha"]) == 40
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert [s.name for s in tools] == ["execute_tool Read", "execute_tool Bash"]
    assert all(s.parent.span_id == first.context.span_id for s in tools)
    assert tools[0].attributes["gen_ai.tool.name"] == "Read"
    assert all(s.start_time <= s.end_time for s in spans)
    assert first.start_time <= tools[0].start_time and tools[-1].end_time <= first.end_time

    points = {(m.name, tuple(sorted(p.attributes.items()))): p.value
              for rm in metrics.resource_metrics for sm in rm.scope_metrics
              for m in sm.metrics for p in m.data.data_points}
    cost = points[("hankweave.cost", (("gen_ai.response.model", "scripted"),
                                      ("gen_ai.system", "fake")))]
    assert cost == pytest.approx(0.03, rel=0.01)
    assert any(name == "hankweave.tokens" and ("gen_ai.token.type", "output") in labels
               for name, labels in points)


def test_sentinel_calls_are_spans_of_their_codon() -> None:
    codon_started = {"type": "state.transition", "timestamp": "2026-12-01T10:00:00.000Z",
                     "data": {"transitionType": "CodonStarted", "transition": {
                         "type": "CodonStarted", "data": {"runId": "r-1", "codonId": "a"}}}}

    def sentinel(kind: str, at: str, **data: Any) -> dict[str, Any]:
        return {"type": kind, "timestamp": at, "data": {"sentinelId": "critic", "codonId": "a",
                                                         **data}}
    events = [codon_started,
              sentinel("sentinel.triggered", "2026-12-01T10:00:01.000Z", triggerNumber=1,
                       strategy="immediate", eventCount=3, queueSize=0),
              sentinel("sentinel.output", "2026-12-01T10:00:02.500Z", triggerNumber=1,
                       outputType="text", content="fine", cost=0.004,
                       tokens={"input": 100, "output": 20}, eventCount=3),
              sentinel("sentinel.triggered", "2026-12-01T10:00:03.000Z", triggerNumber=2,
                       strategy="immediate", eventCount=1, queueSize=0),
              sentinel("sentinel.error", "2026-12-01T10:00:03.400Z",
                       errorType="llm-call-failed", message="rate limited", retriable=True,
                       consecutiveFailureCount=1),
              {"type": "codon.completed", "timestamp": "2026-12-01T10:00:04.000Z",
               "data": {"codonId": "a", "success": True, "cost": 0.001, "duration": 4000,
                        "exitStatus": {"type": "success"}}}]
    spans, _ = fed(events)
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (codon,) = by_name["invoke_agent a"]
    ok, failed = sorted(by_name["sentinel critic"], key=lambda s: s.start_time)
    assert ok.parent.span_id == codon.context.span_id == failed.parent.span_id
    assert ok.attributes["hankweave.cost.usd"] == 0.004
    assert ok.attributes["gen_ai.usage.input_tokens"] == 100
    assert (ok.end_time - ok.start_time) == 1_500_000_000
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "llm-call-failed"
    # The codon's run started elsewhere: its parent is the run's derived root span.
    assert (codon.context.trace_id, codon.parent.span_id) == run_ids("r-1")


def test_a_crashed_run_is_a_failed_root_span_its_exported_codons_find() -> None:
    # What the next start's sink sees first: its report of the crash (docs/events.md).
    crashed = {"type": "run.crashed", "timestamp": "2026-12-01T10:05:00.000Z",
               "data": {"runId": "r-1", "detectedAt": "2026-12-01T10:05:00.000Z",
                        "codonId": "a", "codonStatus": "running", "endedAgentPids": [],
                        "next": "rollback", "message": "Run r-1 had crashed"}}
    spans, _ = fed([crashed])

    (run,) = [s for s in spans if s.name == "hankweave.run"]
    assert (run.context.trace_id, run.context.span_id) == run_ids("r-1")
    assert run.attributes["hankweave.run.status"] == "crashed"
    assert run.status.status_code is StatusCode.ERROR


# ----- the wire -----


def test_a_run_reaches_a_real_otlp_receiver(tmp_path: Path, receiver: Receiver) -> None:
    project = Project(tmp_path, sink={"endpoint": receiver.url, "serviceName": "notes-bot",
                                      "metricsIntervalS": 60})
    project.write({"a": {"messages": 1, "tools": TOOLS[:1], "cost": 0.01},
                   "b": {"messages": 1, "cost": 0.02}})
    done = project.run()
    assert done.returncode == 0, done.stderr
    names = sorted(span["name"] for span in receiver.got.spans)
    assert names == ["execute_tool Read", "hankweave.run", "invoke_agent a", "invoke_agent b"]
    assert receiver.got.resources[0]["service.name"] == "notes-bot"
    (run,) = [s for s in receiver.got.spans if s["name"] == "hankweave.run"]
    assert all(s["trace_id"] == run["trace_id"] for s in receiver.got.spans)
    assert run["attributes"]["hankweave.cost.usd"] == pytest.approx(0.03)
    codon = next(s for s in receiver.got.spans if s["name"] == "invoke_agent a")
    assert codon["parent"] == run["span_id"]
    assert codon["attributes"]["gen_ai.usage.output_tokens"] > 0
    metrics = {metric["name"] for metric in receiver.got.metrics}
    assert {"hankweave.cost", "hankweave.tokens"} <= metrics  # the final export at the end


def test_a_run_reaches_a_real_otlp_grpc_receiver(tmp_path: Path) -> None:
    if os.environ.get("HANKWEAVE_OTEL_GRPC_REQUIRED") != "1":  # the tox env requires it
        pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc",
                            reason="the grpc extra is not installed")
    receiver = GrpcReceiver()
    try:
        project = Project(tmp_path, sink={"endpoint": receiver.url, "protocol": "grpc",
                                          "metricsIntervalS": 60})
        project.write({"a": {"messages": 1, "tools": TOOLS[:1], "cost": 0.01}})
        done = project.run()
        assert done.returncode == 0, done.stderr
        names = sorted(span["name"] for span in receiver.got.spans)
        assert names == ["execute_tool Read", "hankweave.run", "invoke_agent a"]
        assert receiver.got.resources[0]["service.name"] == "hankweave"
        assert {"hankweave.cost", "hankweave.tokens"} <= {m["name"] for m in
                                                          receiver.got.metrics}
    finally:
        receiver.close()


def test_a_resumed_run_links_to_the_run_it_continues(tmp_path: Path,
                                                     receiver: Receiver) -> None:
    project = Project(tmp_path, sink={"endpoint": receiver.url, "metrics": False})
    project.write({"a": {"messages": 1}, "b": [{"result": "error"}, {"messages": 1}]})
    assert project.run().returncode == 1  # b fails: the run fails
    assert project.run().returncode == 0  # the resume completes it
    runs = sorted((s for s in receiver.got.spans if s["name"] == "hankweave.run"),
                  key=lambda s: s["start"])
    assert len(runs) == 2 and runs[0]["status"] == 2  # ERROR
    first, second = runs
    assert second["attributes"]["hankweave.run.start"] == "continuation"
    assert second["links"] == [{"trace_id": first["trace_id"], "span_id": first["span_id"],
                                "attributes": {"hankweave.link": "continues",
                                               "hankweave.run.id": first["attributes"][
                                                   "hankweave.run.id"]}}]


def test_a_replay_is_traced_too(tmp_path: Path, receiver: Receiver) -> None:
    project = Project(tmp_path, sink={"endpoint": receiver.url, "metrics": False})
    done = project.hankweave("replay", str(ROOT / "examples" / "quickstart" /
                                           "recording.hwrec.tar.gz"))
    assert done.returncode == 0, done.stderr
    names = [span["name"] for span in receiver.got.spans]
    assert names.count("hankweave.run") == 1
    assert {"invoke_agent triage", "invoke_agent draft", "invoke_agent proofread#0",
            "invoke_agent proofread#1"} <= set(names)
    models = {s["attributes"].get("gen_ai.response.model") for s in receiver.got.spans
              if s["name"].startswith("invoke_agent")}
    assert models == {"claude-haiku-5-5"}


def test_an_unreachable_collector_neither_slows_nor_fails_a_run(tmp_path: Path) -> None:
    baseline = Project(tmp_path / "without", sink=None)
    dead = Project(tmp_path / "dead", sink={"endpoint": f"http://127.0.0.1:{closed_port()}",
                                            "timeoutS": 2, "closeTimeoutS": 1})
    codons = {f"c{i}": {"messages": 2, "delayMs": 50} for i in range(4)}
    timings = {}
    for project in (baseline, dead):
        project.write(codons)
        start = time.monotonic()
        done = project.run()
        timings[project] = time.monotonic() - start
        assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "otel sink" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: otel sink: ")
    assert "span(s) were not exported" in warnings[0]
    assert "Traceback" not in done.stderr + done.stdout
    server_log = (dead.root / "exec" / ".hankweave" / "logs" / "server.log").read_text()
    assert server_log.count("otel sink: dropping spans") == 1  # the first drop, once
    # The end of the run waits for the collector at most closeTimeoutS (1 s) per exporter; the
    # bound has room for two runs' times to differ on a loaded machine (CI runs two tox envs at
    # once), and stays below the sink's 10 s flush timeout.
    assert timings[dead] < timings[baseline] + 7.0


def test_the_collectors_credentials_appear_in_no_output(tmp_path: Path) -> None:
    """Issue 34 item 6: an endpoint's userinfo (``http://user:secret@host``) is a credential;
    the drop warnings name the collector with it masked, on stderr, in ``server.log`` and in
    the journal alike."""
    secret = "s3cret-collector-pass"
    project = Project(tmp_path, sink={
        "endpoint": f"http://tracer:{secret}@127.0.0.1:{closed_port()}", "timeoutS": 1,
        "closeTimeoutS": 1})
    project.write({"a": {"messages": 2, "delayMs": 50}})
    done = project.run()
    assert done.returncode == 0, done.stderr
    hankweave = project.root / "exec" / ".hankweave"
    server_log = (hankweave / "logs" / "server.log").read_text()
    assert "otel sink: dropping spans" in server_log  # the collector was named...
    assert "tracer:***@127.0.0.1" in server_log + done.stderr  # ...with its password masked
    outputs = {"stdout": done.stdout, "stderr": done.stderr, "server.log": server_log,
               "journal": (hankweave / "events" / "events.jsonl").read_text()}
    for name, text in outputs.items():
        assert secret not in text, name


# ----- the contract, and imports -----


class TestOtelSinkContract(EventSinkContract):
    sink_class = OtelSink

    def config(self, tmp_path: Path) -> dict[str, Any]:
        return {"endpoint": f"http://127.0.0.1:{closed_port()}", "timeoutS": 0.5,
                "closeTimeoutS": 0.5, "metrics": False}


def test_hankweave_help_does_not_import_opentelemetry() -> None:
    probe = ("import sys\nfrom click.testing import CliRunner\nfrom hankweave.cli import cli\n"
             "CliRunner().invoke(cli, ['--help'])\n"
             "print([m for m in sys.modules if m.startswith('opentelemetry')])")
    env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "sink-otel"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
