"""A budget that asks, through the real CLI and both real harnesses on the mock provider.

The codon's $0.01 cap is ``onExceeded: "ask"``.  The agent writes a draft (a cheap turn),
then says it is done in a turn that reads 150,000 input tokens ($0.015 or more on either
model:
the cap is crossed; the Claude CLI reports a turn's input tokens as it starts, its output tokens
only at the end).  The run ends waiting for a person
(exit 3) with a ``budget`` interruption; ``hankweave answer --extend`` raises the cap, and the
pasted ``hankweave run -e DIR`` carries the same attempt on: its conversation goes on (the
request after the extension carries the draft's turns), the agent's file is as it left it and
the codon completes.  ``--reject`` instead ends the codon completed, with no further request.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hankweave.testing.mock_provider import MockProviderLog
from integration.test_replay_quickstart import offline_env

DRAFT = "The draft, written before the ceiling.\n"
FINAL = "The final text, written after the extension.\n"
MODELS = {"claude": ("haiku", "Write", "file_path"), "pi": ("gpt-5.2", "write", "path")}


def script(harness: str) -> dict[str, Any]:
    _, tool, path_key = MODELS[harness]
    return {"rules": [
        {"name": "finished", "when": {"afterToolResult": True,
                                      "lastUserMessage": "raised the budget limit"},
         "reply": {"text": "All done."}},
        {"name": "extended", "when": {"lastUserMessage": "raised the budget limit",
                                      "afterToolResult": False},
         "reply": {"text": "Finishing.", "toolCalls": [
             {"name": tool, "input": {path_key: "final.md", "content": FINAL}}]}},
        {"name": "done-with-draft", "when": {"afterToolResult": True},
         "reply": {"text": "Draft written; I would polish it next.",
                   "usage": {"inputTokens": 150000, "outputTokens": 10}}},
        {"name": "draft", "when": {"lastUserMessage": "Write the draft"},
         "reply": {"text": "Writing.", "toolCalls": [
             {"name": tool, "input": {path_key: "draft.md", "content": DRAFT}}]}},
    ], "default": {"text": "OK."}}


class Journey:
    def __init__(self, root: Path, harness: str) -> None:
        self.root, self.exec_dir = root, root / "exec"
        self.script = root / "script.json"
        self.script.write_text(json.dumps(script(harness)))
        model = MODELS[harness][0]
        hank = root / "hank"
        hank.mkdir()
        (hank / "hank.json").write_text(json.dumps({"hank": [
            {"id": "draft", "name": "Draft", "model": model, "continuationMode": "fresh",
             "promptText": "Write the draft.",
             "budget": {"maxDollars": 0.01, "onExceeded": "ask"}},
            {"id": "ship", "name": "Ship", "model": model, "continuationMode": "fresh",
             "promptText": "Ship it."}]}))
        (root / "data").mkdir()
        (root / "data" / "input.txt").write_text("input\n")
        self.env = {**offline_env(root / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def hankweave(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env=self.env, text=True, capture_output=True, timeout=240,
                              stdin=subprocess.DEVNULL)

    def start(self) -> subprocess.CompletedProcess[str]:
        return self.hankweave("run", str(self.root / "hank"), str(self.root / "data"), "-e",
                              str(self.exec_dir), "--headless", "--mock-provider",
                              str(self.script))

    def state(self) -> dict[str, Any]:
        return json.loads((self.exec_dir / ".hankweave" / "state.json").read_text())

    def requests(self) -> MockProviderLog:
        return MockProviderLog(self.exec_dir / ".hankweave" / "mock-provider" /
                               "requests.jsonl")


def pasted(output: str, starts: str) -> list[str]:
    """The command a person pastes: the printed line that starts with ``starts``."""
    line = next(line for line in output.splitlines() if starts in line)
    return shlex.split(line[line.index(starts):])[1:]


@pytest.mark.parametrize("harness", sorted(MODELS))
def test_an_extended_ceiling_carries_the_conversation_on(tmp_path: Path, harness: str) -> None:
    journey = Journey(tmp_path, harness)

    asked = journey.start()

    assert asked.returncode == 3, asked.stderr
    [item] = journey.state()["interruptions"]
    assert item["kind"] == "budget" and item["status"] == "pending"
    assert item["budget"]["currency"] == "cost" and item["budget"]["limit"] == 0.01
    assert item["question"].startswith("codon draft reached its $0.01 ceiling (codon cap);"
                                       " spent $")
    # The second turn crossed 80%, 95% and the cap at once: the ask says so, no warning.
    assert "budget: " not in asked.stderr
    assert (journey.exec_dir / "agentRoot" / "draft.md").read_text() == DRAFT
    hint = pasted(asked.stderr, "hankweave answer")
    assert hint[-2] == "--extend"  # half the ceiling again, ready to paste
    before = len(journey.requests().requests())

    answered = journey.hankweave(*hint[:-1], "5.00")
    assert answered.returncode == 0, answered.stderr
    resumed = journey.hankweave(*pasted(answered.stdout, "hankweave run"))

    assert resumed.returncode == 0, resumed.stderr
    state = journey.state()
    draft = state["runs"][0]["codons"][0]
    assert draft["codonId"] == "draft" and draft["status"] == "completed"
    assert "budgetExceeded" not in draft
    assert [c["codonId"] for c in state["runs"][0]["codons"]] == ["draft", "ship"]
    assert (journey.exec_dir / "agentRoot" / "draft.md").read_text() == DRAFT
    assert (journey.exec_dir / "agentRoot" / "final.md").read_text() == FINAL
    # The first request after the extension carries the conversation from before it.
    after = journey.requests().requests()[before]
    assert (after.rule or "").endswith("(extended)")
    # (the Claude CLI keeps the turns it finished: the draft's call and its result)
    conversation = json.dumps(after.messages)
    assert "Writing." in conversation and DRAFT.strip() in conversation
    report = journey.hankweave("inspect", "budget", "-e", str(journey.exec_dir), "--json")
    [ask] = json.loads(report.stdout)["asks"]
    assert (ask["decision"], ask["amount"], ask["answeredBy"][:4]) == ("extended", 5.0, "cli:")


def test_a_rejected_ceiling_ends_the_codon_without_asking_the_model_again(
        tmp_path: Path) -> None:
    journey = Journey(tmp_path, "claude")
    asked = journey.start()
    assert asked.returncode == 3, asked.stderr
    [item] = journey.state()["interruptions"]
    before = len(journey.requests().requests(rule="extended"))

    rejected = journey.hankweave("answer", "-e", str(journey.exec_dir), item["id"], "--reject")
    assert rejected.returncode == 0, rejected.stderr
    resumed = journey.hankweave("run", "-e", str(journey.exec_dir))

    assert resumed.returncode == 0, resumed.stderr
    draft = journey.state()["runs"][0]["codons"][0]
    assert draft["status"] == "completed"
    assert draft["budgetExceeded"]["currency"] == "cost"
    assert len(journey.requests().requests(rule="extended")) == before == 0
    assert not (journey.exec_dir / "agentRoot" / "final.md").exists()


def test_a_run_waiting_live_goes_on_when_the_answer_arrives(tmp_path: Path) -> None:
    """``--wait-for-answers``: ``hankweave answer --extend`` reaches the running runtime over
    its WebSocket, and the same attempt goes on in the same run."""
    import time

    journey = Journey(tmp_path, "pi")
    running = subprocess.Popen(
        [sys.executable, "-m", "hankweave", "run", str(tmp_path / "hank"), str(tmp_path / "data"),
         "-e", str(journey.exec_dir), "--headless", "--wait-for-answers", "--mock-provider",
         str(journey.script)], cwd=tmp_path, env=journey.env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        pending: list[dict[str, Any]] = []
        while not pending and time.monotonic() < deadline and running.poll() is None:
            time.sleep(0.2)
            path = journey.exec_dir / ".hankweave" / "state.json"
            if path.exists():
                pending = [item for item in journey.state().get("interruptions", [])
                           if item["status"] == "pending"]
        assert pending, running.stderr.read() if running.poll() is not None else "no ask"

        answered = journey.hankweave("answer", "-e", str(journey.exec_dir), pending[0]["id"],
                                     "--extend", "5")
        assert answered.returncode == 0, answered.stderr
        assert "sent to the running runtime" in answered.stdout
        _, stderr = running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()

    assert running.returncode == 0, stderr
    [run] = journey.state()["runs"]
    assert [(c["codonId"], c["status"]) for c in run["codons"]] == [("draft", "completed"),
                                                                     ("ship", "completed")]
    assert (journey.exec_dir / "agentRoot" / "final.md").read_text() == FINAL
