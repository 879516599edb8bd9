"""Helpers of the webhook sink's tests: a real HTTP receiver on 127.0.0.1 that records what it
is sent and answers as a test scripts it, a closed port, events shaped as the journal's, and
hank projects on the fake agent run by real ``hankweave`` processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SECRET = "whsec-test-9f8e7d6c5b4a"


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps every POST it gets (:attr:`requests`).

    ``statuses`` are answered in order, one per request (the last one repeats; default 200),
    with ``headers`` (e.g. ``Retry-After``); while :attr:`hold` is cleared, requests wait for it
    before they are answered."""

    def __init__(self, statuses: list[int] | None = None,
                 headers: dict[str, str] | None = None, delay_s: float = 0.0) -> None:
        self.requests: list[Request] = []
        self.arrived = 0
        """Requests read, answered or not (held)."""
        self.statuses = list(statuses or [200])
        self.hold = threading.Event()
        self.hold.set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.arrived += 1
                receiver.hold.wait(30)
                if delay_s:
                    time.sleep(delay_s)
                with receiver._lock:
                    receiver.requests.append(Request(self.path, dict(self.headers), body))
                    status = (receiver.statuses.pop(0) if len(receiver.statuses) > 1
                              else receiver.statuses[0])
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if 300 <= status < 400:
                    self.send_header("Location", "http://127.0.0.1:1/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/B000/s3cretpath"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Request]:
        """The requests once there are ``count`` (or what came within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.01)
        return list(self.requests)

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----- events as the journal has them -----

RUN = "1796524034910-7o6bc"


def event(kind: str, data: dict[str, Any], *, seq: int, run_id: str | None = RUN,
          at: str = "2026-12-06T02:27:14.929Z") -> dict[str, Any]:
    made: dict[str, Any] = {"seq": seq, "schemaVersion": 1, "id": f"1796524034929-ev{seq:05d}",
                            "timestamp": at, "type": kind, "data": data}
    if run_id is not None:
        made["runId"] = run_id
    return made


def transition(kind: str, data: dict[str, Any], *, seq: int, cost: float = 0.0,
               current: str | None = RUN) -> dict[str, Any]:
    return event("state.transition", {
        "transitionType": kind, "runId": RUN, "transition": {"type": kind, "data": data},
        "resultingState": {"currentRunId": current, "runCount": 1, "totalCost": cost,
                           "currentRunCost": cost}}, seq=seq)


def run_started(execution: Path, seq: int = 1) -> dict[str, Any]:
    return transition("RunStarted", {
        "runId": RUN, "runFolder": str(execution / ".hankweave" / "runs" / RUN),
        "gitBranch": f"run-{RUN}", "startingConditions": {"type": "fresh"},
        "serverPid": os.getpid()}, seq=seq)


def approval_asked(seq: int = 2, interruption: str = "int-1796524034928-e4qbi"
                   ) -> dict[str, Any]:
    return event("interruption.created", {
        "interruptionId": interruption, "runId": RUN, "codonId": "publish",
        "kind": "approval", "question": "Approve starting codon publish (Publish)?",
        "options": ["approve", "reject"]}, seq=seq)


def budget_asked(seq: int = 2) -> dict[str, Any]:
    return event("interruption.created", {
        "interruptionId": "int-1796524034930-bud01", "runId": RUN, "codonId": "draft",
        "kind": "budget", "question": "Raise the ceiling of codon draft?",
        "budget": {"scope": "codon", "currency": "cost", "limit": 2.0, "used": 2.03,
                   "source": "codon cap"}}, seq=seq)


def run_interrupted(seq: int = 3) -> dict[str, Any]:
    return transition("RunInterrupted", {"runId": RUN}, seq=seq, current=None)


# ----- real hankweave processes -----

ROOT = Path(__file__).resolve().parents[3]


class Project:
    """A hank on the fake agent (in-memory checkpoints), its data, and a ``hankweave.json``
    enabling the webhook sink with ``sink`` as its config."""

    def __init__(self, root: Path, sink: dict[str, Any] | None,
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.hank = root / "hank"
        self.data = root / "data"
        self.execution = root / "exec"
        for folder in (self.hank, self.data):
            folder.mkdir(parents=True)
        (self.data / "input.txt").write_text("input\n")
        if sink is not None:
            (root / "hankweave.json").write_text(json.dumps(
                {"events": {"sinks": [{"name": "webhook", "config": sink}]}}))
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith("HANKWEAVE_") and "proxy" not in key.lower()}
        self.env.update({
            "HOME": str(root), "HANKWEAVE_HOME": str(root / "home"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness,"
                                        "hankweave.testing.memory_checkpoints",
            "HANKWEAVE_LOAD_PLUGINS": "sink-webhook",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
            "HANKWEAVE_STRICT_PLUGINS": "1",
            "HANKWEAVE_FAKE_SCRIPT": str(self.hank / "script.json"),
            **(env or {}),
        })

    def write(self, codons: dict[str, dict[str, Any]]) -> None:
        """``codons``: id -> the codon's own keys (``approval``...) and its ``script``."""
        items = [{"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
                  "continuationMode": "fresh", "promptText": f"Do {codon_id}.",
                  **{key: value for key, value in spec.items() if key != "script"}}
                 for codon_id, spec in codons.items()]
        (self.hank / "hank.json").write_text(json.dumps({"hank": items}))
        (self.hank / "script.json").write_text(json.dumps(
            {"codons": {codon_id: spec.get("script", {"messages": 1})
                        for codon_id, spec in codons.items()}}))

    def run(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hankweave", "run", str(self.hank), str(self.data), "-e",
             str(self.execution), "--headless", "--yes", *extra],
            cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL)

    def journal(self) -> list[dict[str, Any]]:
        path = self.execution / ".hankweave" / "events" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

