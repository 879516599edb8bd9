"""From the message to the answer (issue 42): a run with the ``webhook`` sink reaches a ceiling
that asks; the receiver on 127.0.0.1 gets a signed message whose links go to this dashboard;
a person opens the "extend" link and confirms; the pasted resume command carries the codon on
to its end, and the answer is recorded as ``webhook-link``."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import hankweave_sink_webhook as webhook
import pytest
from dashboard_helpers import WAIT_S, Project, wait_for
from hankweave_dashboard.app import Settings, create_app
from starlette.testclient import TestClient

from hankweave.api import ExecutionLayout, link_key

SECRET = "journey-secret"


class Receiver:
    """Keeps every POST (headers and body)."""

    def __init__(self) -> None:
        received: list[tuple[dict[str, str], bytes]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def messages(self) -> list[dict[str, Any]]:
        """The bodies whose signature verifies (every one must)."""
        found = []
        for headers, body in self.received:
            assert webhook.verify_signature(SECRET, headers.get("X-Hankweave-Timestamp"), body,
                                            headers.get("X-Hankweave-Signature"))
            found.append(json.loads(body))
        return found


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.server.shutdown()


def test_an_extend_link_from_the_message_answers_and_the_pasted_resume_finishes(
        project: Project, receiver: Receiver, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "config" / "link-key"
    monkeypatch.setenv("HANKWEAVE_LINK_KEY_FILE", str(key_file))
    project.env.update({"HANKWEAVE_LINK_KEY_FILE": str(key_file), "JOURNEY_SECRET": SECRET,
                        "HANKWEAVE_LOAD_PLUGINS": "checkpoint-git,dashboard,sink-webhook"})
    (project.root / "hankweave.json").write_text(json.dumps({"events": {"sinks": [{
        "name": "webhook", "config": {"urls": [receiver.url], "secretEnv": "JOURNEY_SECRET",
                                      "dashboardUrl": "http://testserver"}}]}}))

    execution = project.budget_ask("journey")

    asked = wait_for("the message about the ceiling", lambda: [
        m for m in receiver.messages() if m["event"] == "interruption.created"])[0]
    assert asked["data"]["kind"] == "budget" and asked["execution"] == str(execution.resolve())
    extend = next(link for link in asked["links"] if link["action"] == "extend")
    assert extend["label"] == "extend by $1.00"
    base, token = extend["url"].split("#", 1)
    assert base == "http://testserver/act"
    assert link_key(key_file)  # the run made the key the dashboard checks with

    app = create_app(Settings(roots=[project.executions], control_key="the-key",
                              allowed_hosts=["testserver"]))
    with TestClient(app) as client:
        assert client.get("/act").status_code == 200  # the page; it answers nothing
        done = client.post("/api/act", content=json.dumps({"token": token}),
                           headers={"Content-Type": "application/json"})
        assert done.status_code == 200, done.text
        again = client.post("/api/act", content=json.dumps({"token": token}),
                            headers={"Content-Type": "application/json"})
        assert again.status_code == 409, again.text
    result = done.json()
    assert result["answer"] == {"extend": 1.0} and not result["forwarded"]
    command = shlex.split(result["resume"]["command"])
    assert command[:2] == ["hankweave", "run"]

    script = project.root / "journey-hank" / "script.json"
    resumed = subprocess.run(
        [sys.executable, "-m", "hankweave", *command[1:], "--headless"], cwd=project.root,
        env={**project.env, "HANKWEAVE_FAKE_SCRIPT": str(script)}, capture_output=True,
        text=True, timeout=WAIT_S * 2, stdin=subprocess.DEVNULL)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert project.codon_status(execution, "draft") == "completed"
    [item] = project.state(execution).interruptions
    assert (item.answer, item.answered_by) == ({"extend": 1.0}, "webhook-link")
    ended = wait_for("the resumed run's end", lambda: [
        m for m in receiver.messages() if m["event"] == "run.ended"
        and m["data"]["status"] == "completed"])
    assert ended
    layout = ExecutionLayout(execution)
    for written in (layout.server_log, layout.events_file, execution.with_suffix(".log")):
        assert token not in written.read_text(), written  # the link lives in the message only
