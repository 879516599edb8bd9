"""The LLM proxy (``--proxy``) through the real CLI and both real harnesses on the mock.

The codon's $0.01 cap is crossed by its second answer (150,000 input tokens), which also asks
for a tool call.  Through the proxy the agent is not stopped at that answer: its tool call
runs, and its next request is refused in the provider's own shape, which the Claude CLI and
litellm report as a provider error; the codon ends at its ceiling.  At a ceiling that asks,
the next request instead waits in the proxy while a person is asked; raised, it goes on and
the agent never knows.  A proxy that goes down mid-run stops the run with a clear message
and the command that resumes it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hankweave.testing.mock_provider import MockProviderLog
from integration.test_replay_quickstart import offline_env

MODELS = {"claude": ("haiku", "Write", "file_path"), "pi": ("gpt-5.2", "write", "path")}
CROSSING = {"inputTokens": 150000, "outputTokens": 10}


def script(harness: str) -> dict[str, Any]:
    _, tool, path_key = MODELS[harness]

    def write(name: str) -> list[dict[str, Any]]:
        return [{"name": tool, "input": {path_key: name, "content": f"{name}\n"}}]

    return {"rules": [
        {"name": "draft", "when": {"lastUserMessage": "Write the draft", "turn": 1},
         "reply": {"text": "Writing.", "toolCalls": write("draft.md")}},
        {"name": "crossing", "when": {"lastUserMessage": "Write the draft", "turn": 2},
         "reply": {"text": "Noting.", "toolCalls": write("notes.md"), "usage": CROSSING}},
        {"name": "final", "when": {"lastUserMessage": "Write the draft", "turn": 3},
         "reply": {"text": "Finishing.", "toolCalls": write("final.md")}},
        {"name": "done", "when": {"lastUserMessage": "Write the draft"},
         "reply": {"text": "All done."}},
    ], "default": {"text": "OK."}}


class Journey:
    def __init__(self, root: Path, harness: str, on_exceeded: str) -> None:
        self.root, self.exec_dir = root, root / "exec"
        self.script = root / "script.json"
        self.script.write_text(json.dumps(script(harness)))
        model = MODELS[harness][0]
        hank = root / "hank"
        hank.mkdir()
        (hank / "hank.json").write_text(json.dumps({"hank": [
            {"id": "draft", "name": "Draft", "model": model, "continuationMode": "fresh",
             "promptText": "Write the draft.",
             "budget": {"maxDollars": 0.01, "onExceeded": on_exceeded}},
            {"id": "ship", "name": "Ship", "model": model, "continuationMode": "fresh",
             "promptText": "Ship it."}]}))
        (root / "data").mkdir()
        (root / "data" / "input.txt").write_text("input\n")
        self.env = {**offline_env(root / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def command(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "hankweave", "run", str(self.root / "hank"),
                str(self.root / "data"), "-e", str(self.exec_dir), "--headless",
                "--mock-provider", str(self.script), "--proxy", *extra]

    def hankweave(self, *args: str, env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env=env or self.env, text=True, capture_output=True,
                              timeout=240, stdin=subprocess.DEVNULL)

    def state(self) -> dict[str, Any]:
        return json.loads((self.exec_dir / ".hankweave" / "state.json").read_text())

    def mock_requests(self) -> MockProviderLog:
        return MockProviderLog(self.exec_dir / ".hankweave" / "mock-provider" /
                               "requests.jsonl")

    def proxied(self) -> list[dict[str, Any]]:
        path = self.exec_dir / ".hankweave" / "proxy" / "requests.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def workspace(self, name: str) -> Path:
        return self.exec_dir / "agentRoot" / name


def draft_log(journey: Journey) -> str:
    [path] = (journey.exec_dir / ".hankweave" / "runs").glob("*/draft-claude.log")
    return path.read_text()


@pytest.mark.parametrize("harness", sorted(MODELS))
def test_past_the_ceiling_the_agents_next_request_is_refused_as_a_provider_error(
        tmp_path: Path, harness: str) -> None:
    journey = Journey(tmp_path, harness, "complete")

    ran = subprocess.run(journey.command(), cwd=tmp_path, env=journey.env, text=True,
                         capture_output=True, timeout=240, stdin=subprocess.DEVNULL)

    assert ran.returncode == 0, ran.stderr
    draft, ship = journey.state()["runs"][0]["codons"]
    assert (draft["codonId"], draft["status"]) == ("draft", "completed")
    assert draft["budgetExceeded"]["currency"] == "cost"
    assert ship["status"] == "completed"  # the codon's cap, not the run's
    # The crossing answer's tool call ran; the request after it never reached the provider.
    assert journey.workspace("notes.md").read_text() == "notes.md\n"
    assert not journey.workspace("final.md").exists()
    assert [r.rule for r in journey.mock_requests().requests()][:2] == [
        "rules[0] (draft)", "rules[1] (crossing)"]
    assert not journey.mock_requests().requests(rule="final")
    # (the Claude CLI tries a refused request twice more before it gives up)
    refused = [r for r in journey.proxied() if r.get("refused")]
    assert {(r["refused"], r["status"], r["codonId"]) for r in refused} == {
        ("budget", 400, "draft")}
    # The agent saw the refusal as its provider's error, in its own words.
    assert "the request was not sent" in draft_log(journey)
    events = [json.loads(line) for line in
              (journey.exec_dir / ".hankweave" / "events" / "events.jsonl").read_text()
              .splitlines()]
    proxied = [e["data"] for e in events if e["type"] == "proxy.request"]
    assert len(proxied) == len(journey.proxied())
    assert {e["codonId"] for e in proxied} == {"draft", "ship"}
    for line in (journey.exec_dir / ".hankweave" / "proxy" / "requests.jsonl").read_text(
            ).splitlines():
        assert "hankweave-mock-key" not in line  # the key the agent sent


def test_at_a_ceiling_that_asks_the_request_waits_for_the_person(tmp_path: Path) -> None:
    """``--wait-for-answers``: the agent's next request waits in the proxy; ``hankweave answer
    --extend`` raises the ceiling and the same request goes on, so the agent is never told."""
    journey = Journey(tmp_path, "pi", "ask")
    running = subprocess.Popen(journey.command("--wait-for-answers"), cwd=tmp_path,
                               env=journey.env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        pending = wait_for_ask(journey, running)
        assert where_the_proxy_is(journey) == 200
        # The request that would cross the ceiling again has not reached the provider.
        assert not journey.mock_requests().requests(rule="final")
        assert journey.workspace("notes.md").exists()
        answered = journey.hankweave("answer", "-e", str(journey.exec_dir), pending["id"],
                                     "--extend", "5")
        assert answered.returncode == 0, answered.stderr
        _, stderr = running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()

    assert running.returncode == 0, stderr
    [run] = journey.state()["runs"]
    assert [(c["codonId"], c["status"]) for c in run["codons"]] == [("draft", "completed"),
                                                                     ("ship", "completed")]
    assert journey.workspace("final.md").read_text() == "final.md\n"
    # One conversation, uninterrupted: nobody told the agent anything.
    assert not any("raised the budget limit" in json.dumps(r.messages)
                   for r in journey.mock_requests().requests())
    held = [r for r in journey.proxied() if r.get("heldMs")]
    assert len(held) == 1 and held[0]["status"] == 200 and held[0]["codonId"] == "draft"


def where_the_proxy_is(journey: Journey) -> int:
    """The proxy's port as ``runtime.lock`` and ``server.ready`` give it, and what its
    ``/health`` answers."""
    import asyncio
    import urllib.request

    from hankweave.api import ControlClient, server_address

    lock = json.loads((journey.exec_dir / ".hankweave" / "runtime.lock").read_text())
    port = lock["proxyPort"]

    async def ready() -> dict[str, Any]:
        address = server_address(journey.exec_dir)
        client = await ControlClient.connect(address.url, mode="readonly")
        try:
            async for message in client.messages():
                if message["type"] == "server.ready":
                    return dict(message["data"])
        finally:
            await client.close()
        raise AssertionError("no server.ready")

    assert asyncio.run(ready())["proxyPort"] == port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
        assert json.loads(answer.read())["status"] == "ok"
        return int(answer.status)


def wait_for_ask(journey: Journey, running: subprocess.Popen[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    state = journey.exec_dir / ".hankweave" / "state.json"
    while time.monotonic() < deadline and running.poll() is None:
        time.sleep(0.2)
        if state.exists():
            for item in journey.state().get("interruptions", []):
                if item["status"] == "pending":
                    return dict(item)
    raise AssertionError(running.communicate()[1] if running.poll() is not None else "no ask")


def test_a_proxy_that_goes_down_stops_the_run_with_the_command_that_resumes_it(
        tmp_path: Path) -> None:
    journey = Journey(tmp_path, "claude", "complete")
    env = {**journey.env, "HANKWEAVE_TEST_PROXY_DOWN_AT": "2"}

    ran = subprocess.run(journey.command(), cwd=tmp_path, env=env, text=True,
                         capture_output=True, timeout=240, stdin=subprocess.DEVNULL)

    assert ran.returncode == 1, ran.stderr
    assert "Traceback" not in ran.stderr
    assert "The LLM proxy at http://127.0.0.1:" in ran.stderr
    assert "stopped answering" in ran.stderr
    events = [json.loads(line) for line in
              (journey.exec_dir / ".hankweave" / "events" / "events.jsonl").read_text()
              .splitlines()]
    assert [e["data"]["code"] for e in events
            if e["type"] == "error" and e["data"].get("code") == "proxy-down"] == ["proxy-down"]
    assert journey.state()["runs"][0]["status"] != "completed"
    # The printed command resumes it (the proxy recorded with the execution comes along).
    before = len(journey.proxied())
    line = next(line for line in ran.stderr.splitlines() if "hankweave run -e" in line)
    resume = shlex.split(line[line.index("hankweave run -e"):])[1:]
    resumed = journey.hankweave(*resume)
    assert resumed.returncode == 0, resumed.stderr
    assert journey.state()["runs"][0]["status"] == "completed"
    assert len(journey.proxied()) > before
