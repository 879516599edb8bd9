"""The agent's work survives a person's answer, on both real harnesses.

A codon's rig copies a template to ``report/report.md``; the agent (the real Claude Code CLI,
or the pi agent on real litellm, both talking to the mock provider the run serves) writes over
it and asks ``ask_human`` (or the codon has an ``approval: after`` gate).  The run ends
interrupted; ``hankweave answer`` records the answer; ``hankweave run -e DIR`` resumes.  The
resume carries the interrupted attempt on (or goes past the approved codon): the rig does not
run again, so the agent's file is byte-identical afterwards, in ``agentRoot`` and in the
codon's completion checkpoint, and the journal shows one rig setup."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hankweave.registry import get_registry
from hankweave.testing.mock_provider import MockProviderLog
from integration.test_replay_quickstart import offline_env

TEMPLATE = "# Report\n\n(the template)\n"
WORK = "# Report\n\nWhat the agent wrote before it asked.\n"
REPORT = "report/report.md"
QUESTION = {"question": "Ship it?", "options": ["yes", "no"]}


@dataclass(frozen=True)
class Agent:
    model: str
    write: dict[str, Any]
    ask: str


AGENTS = {
    "claude": Agent("haiku", {"name": "Write", "input": {"file_path": REPORT, "content": WORK}},
                    "mcp__hankweave__ask_human"),
    "pi": Agent("gpt-5.2", {"name": "write", "input": {"path": REPORT, "content": WORK}},
                "ask_human"),
}


def script(agent: Agent, *, asks: bool) -> dict[str, Any]:
    written: dict[str, Any] = {"text": "Written; asking.", "toolCalls": [
        {"name": agent.ask, "input": QUESTION}]} if asks else {"text": "Written."}
    return {"rules": [
        # The Claude CLI is told the answer as its next user turn; pi gets it as the result of
        # the ask_human call it runs again.
        {"name": "answered-as-a-turn", "when": {"lastUserMessage": "They have answered"},
         "reply": {"text": "Shipping it."}},
        {"name": "answered-as-a-result",
         "when": {"afterToolResult": True, "toolResult": {"equals": "yes"}},
         "reply": {"text": "Shipping it."}},
        {"name": "ask", "when": {"afterToolResult": True,
                                 "toolResult": {"regex": "(?i)(created|wrote|written|success)"}},
         "reply": written},
        {"name": "write", "when": {"lastUserMessage": "Write the report",
                                   "afterToolResult": False},
         "reply": {"text": "Writing it.", "toolCalls": [agent.write]}},
    ], "default": {"text": "OK."}}


class Journey:
    def __init__(self, root: Path, agent: Agent, gate: str) -> None:
        self.root = root
        self.exec_dir = root / "exec"
        self.script = root / "script.json"
        self.script.write_text(json.dumps(script(agent, asks=gate == "question")))
        approval = {"approval": "after"} if gate == "after" else {}
        hank = root / "hank"
        (hank / "templates" / "report").mkdir(parents=True)
        (hank / "templates" / "report" / "report.md").write_text(TEMPLATE)
        (hank / "hank.json").write_text(json.dumps({"hank": [{
            "id": "draft", "name": "Draft", "model": agent.model, "continuationMode": "fresh",
            "promptText": "Write the report.", "checkpointedFiles": ["report/**"],
            "rigSetup": [{"type": "copy", "copy": {"from": "templates/report",
                                                   "to": "report"}}], **approval},
            {"id": "ship", "name": "Ship", "model": agent.model, "continuationMode": "fresh",
             "promptText": "Ship the report."}]}))
        (root / "data").mkdir()
        (root / "data" / "input.txt").write_text("input\n")
        self.env = {**offline_env(root / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def hankweave(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env=self.env, text=True, capture_output=True, timeout=240,
                              stdin=subprocess.DEVNULL)

    def run(self, *first: str) -> subprocess.CompletedProcess[str]:
        return self.hankweave("run", *first, "-e", str(self.exec_dir), "--headless",
                              "--mock-provider", str(self.script))

    def state(self) -> dict[str, Any]:
        return json.loads((self.exec_dir / ".hankweave" / "state.json").read_text())

    def events(self) -> list[dict[str, Any]]:
        path = self.exec_dir / ".hankweave" / "events" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("gate", ["question", "after"])
@pytest.mark.parametrize("harness", sorted(AGENTS))
def test_the_answer_resumes_the_agent_on_its_own_work(tmp_path: Path, harness: str,
                                                      gate: str) -> None:
    journey = Journey(tmp_path, AGENTS[harness], gate)

    asked = journey.run(str(tmp_path / "hank"), str(tmp_path / "data"))
    assert asked.returncode == 3, asked.stderr
    report = journey.exec_dir / "agentRoot" / REPORT
    assert report.read_text() == WORK
    [item] = journey.state()["interruptions"]
    assert item["kind"] == ("question" if gate == "question" else "approval")
    answered = journey.hankweave("answer", "-e", str(journey.exec_dir), item["id"],
                                 "yes" if gate == "question" else "--approve")
    assert answered.returncode == 0, answered.stderr

    resumed = journey.run()

    assert resumed.returncode == 0, resumed.stderr
    assert report.read_bytes() == WORK.encode()
    completed = {c["codonId"]: c for run in journey.state()["runs"] for c in run["codons"]
                 if c["status"] == "completed"}
    assert sorted(completed) == ["draft", "ship"]
    record = completed["draft"]
    store = get_registry().checkpoint_backend("git")(journey.exec_dir)
    try:
        store.materialize(record["completionCheckpoint"], tmp_path / "checkpoint")
    finally:
        store.close()
    assert (tmp_path / "checkpoint" / REPORT).read_bytes() == WORK.encode()
    assert [e["type"] for e in journey.events()].count("rig.setup.completed") == 1
    if gate == "question":  # the resumed agent was given the answer and finished on it
        requests = MockProviderLog(journey.exec_dir / ".hankweave" / "mock-provider" /
                                   "requests.jsonl").requests()
        answered_by = [request.rule or "" for request in requests]
        assert any(rule.startswith(("rules[0]", "rules[1]")) for rule in answered_by)
