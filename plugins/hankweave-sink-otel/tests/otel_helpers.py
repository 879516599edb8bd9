"""Helpers for the OpenTelemetry sink's tests: a real OTLP/HTTP receiver on 127.0.0.1 that
decodes what it is sent (the protobuf payloads of the OTLP trace and metrics services), and
hank projects on the fake agent run by real ``hankweave`` processes."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Received:
    spans: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class Receiver:
    """An OTLP/HTTP collector: ``/v1/traces`` and ``/v1/metrics``, decoded into :attr:`got`."""

    def __init__(self) -> None:
        self.got = Received()
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest.FromString(body)
                    with got.lock:
                        for resource_spans in request.resource_spans:
                            got.resources.append(_attributes(resource_spans.resource.attributes))
                            for scope in resource_spans.scope_spans:
                                got.spans.extend(_span(span) for span in scope.spans)
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest.FromString(body)
                    with got.lock:
                        for resource_metrics in metrics.resource_metrics:
                            for scope in resource_metrics.scope_metrics:
                                got.metrics.extend(_metric(metric) for metric in scope.metrics)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _span(span: Any) -> dict[str, Any]:
    return {"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
            "parent": span.parent_span_id.hex() or None,
            "attributes": _attributes(span.attributes),
            "status": span.status.code, "status_message": span.status.message,
            "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
            "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                       "attributes": _attributes(link.attributes)} for link in span.links],
            "events": [event.name for event in span.events]}


def _metric(metric: Any) -> dict[str, Any]:
    kind = metric.WhichOneof("data")
    points = getattr(metric, kind).data_points if kind else []
    return {"name": metric.name, "unit": metric.unit,
            "points": [{"attributes": _attributes(p.attributes),
                        "value": p.as_double if p.WhichOneof("value") == "as_double"
                        else p.as_int} for p in points]}


class Project:
    """A hank on the fake agent, its data and a ``hankweave.json`` enabling the otel sink."""

    def __init__(self, root: Path, sink: dict[str, Any] | None) -> None:
        self.root = root
        self.hank = root / "hank"
        self.data = root / "data"
        for folder in (self.hank, self.data):
            folder.mkdir(parents=True)
        (self.data / "input.txt").write_text("input\n")
        if sink is not None:
            (root / "hankweave.json").write_text(json.dumps(
                {"events": {"sinks": [{"name": "otel", "config": sink}]}}))
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith(("HANKWEAVE_", "OTEL_"))}
        self.env.update({
            "HOME": str(root), "HANKWEAVE_HOME": str(root / "home"),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
            "HANKWEAVE_LOAD_PLUGINS": "checkpoint-git,sink-otel,replay",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "git",
            "HANKWEAVE_STRICT_PLUGINS": "1",
            "HANKWEAVE_FAKE_SCRIPT": str(self.hank / "script.json"),
        })

    def write(self, codons: dict[str, Any], **settings: Any) -> None:
        items = [{"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
                  "continuationMode": "fresh", "promptText": f"Do {codon_id}.", **settings}
                 for codon_id in codons]
        (self.hank / "hank.json").write_text(json.dumps({"hank": items}))
        (self.hank / "script.json").write_text(json.dumps({"codons": codons}))

    def hankweave(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.hankweave("run", str(self.hank), str(self.data), "-e",
                              str(self.root / "exec"), "--headless", "--yes", *extra)


class GrpcReceiver:
    """An OTLP/gRPC collector on 127.0.0.1: the trace and metrics services, decoded into
    :attr:`got` as :class:`Receiver` does."""

    def __init__(self) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        self.got = Received()
        got = self.got

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                with got.lock:
                    for resource_spans in request.resource_spans:
                        got.resources.append(_attributes(resource_spans.resource.attributes))
                        for scope in resource_spans.scope_spans:
                            got.spans.extend(_span(span) for span in scope.spans)
                return ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                with got.lock:
                    for resource_metrics in request.resource_metrics:
                        for scope in resource_metrics.scope_metrics:
                            got.metrics.extend(_metric(metric) for metric in scope.metrics)
                return ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.url = f"http://127.0.0.1:{port}"
        self.server.start()

    def close(self) -> None:
        self.server.stop(grace=None)
