"""Every attempt of a ``continue-previous`` codon starts from the conversation as it stood when
the codon it continues completed: ``hankweave run`` processes, the real Claude Code CLI against
the mock provider each run serves on 127.0.0.1.

Codon ``b`` continues codon ``a``.  Its first attempt runs a tool, then ends while its next
request is with the model: the process is killed (``kill -9``), interrupted (Ctrl-C), or the
codon's idle timeout fires (and the codon is retried in the same run).  The retried attempt's
first request holds ``a``'s conversation and not one message of the attempt that ended (issue
33: every attempt forks ``a``'s session, ``--fork-session``).
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from claude_helpers import HankProject, codon, wait_until

from hankweave.api import get_registry
from hankweave.testing.mock_provider import LoggedRequest, MockProviderLog

MARK = "output-of-the-ended-attempt"
A_RULE = {"name": "a", "when": {"lastUserMessage": "Name a fruit"},
          "reply": {"text": "Quince.", "usage": {"inputTokens": 1000, "outputTokens": 50}}}
DONE_RULE = {"name": "b-done", "when": {"lastUserMessage": "Describe the fruit"},
             "reply": {"text": "Golden and fragrant.",
                       "usage": {"inputTokens": 3000, "outputTokens": 20}}}
SCRIPT = {"rules": [
    A_RULE,
    # b's first attempt looks with a tool; its next request then hangs (once).
    {"name": "b-tool", "times": 1,
     "when": {"lastUserMessage": "Describe the fruit", "afterToolResult": False},
     "reply": {"text": "Looking first.", "toolCalls": [
         {"name": "Bash", "input": {"command": f"echo {MARK}"}}]}},
    {"name": "b-stuck", "times": 1,
     "when": {"lastUserMessage": "Describe the fruit", "afterToolResult": True},
     "reply": {"hang": True}},
    DONE_RULE]}


def write(project: HankProject, **b: Any) -> None:
    project.write([codon("a", promptText="Name a fruit."),
                   codon("b", promptText="Describe the fruit.",
                         continuationMode="continue-previous", **b)], SCRIPT)


def requests(project: HankProject) -> list[LoggedRequest]:
    """The model requests the mock answered, over every run (none before it starts)."""
    log = project.execution / ".hankweave" / "mock-provider" / "requests.jsonl"
    return MockProviderLog(log).requests(path="/v1/messages")


def rule(logged: LoggedRequest) -> str:
    return (logged.rule or "").rpartition("(")[2].rstrip(")")


def assert_starts_from_a(project: HankProject, first: LoggedRequest) -> None:
    """``first`` (a retried attempt's first request) holds ``a``'s conversation and ``b``'s
    prompt once, and nothing of the attempt that ended."""
    assert rule(first) == "b-done"
    text = first.conversation_text()
    assert "Name a fruit." in text and "Quince." in text
    assert text.count("Describe the fruit.") == 1
    assert MARK not in text and "Looking first." not in text
    assert not [block for message in first.messages for block in message["content"]
                if isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result")]
    runs = json.loads((project.execution / ".hankweave" / "state.json").read_text())["runs"]
    (a,) = [c for run in runs for c in run["codons"] if c["codonId"] == "a"]
    b = [c for c in runs[0]["codons"] if c["codonId"] == "b"][-1]
    assert b["status"] == "completed"
    assert b["previousSessionId"] == a["claudeSessionId"]  # a fork of a's session
    assert b["claudeSessionId"] != a["claudeSessionId"]
    # The fork's CLI total includes a's cost: the attempt is charged its own request only.
    price = get_registry().resolve_model("haiku").cost
    assert price is not None
    assert b["finalCost"] == pytest.approx((3000 * price.input + 20 * price.output) / 1e6)


@pytest.mark.parametrize("ending", ["kill -9", "Ctrl-C"])
def test_a_retry_after_the_process_ended_mid_codon_starts_from_the_previous_codon(
        project: HankProject, ending: str) -> None:
    write(project)
    process = project.start()
    try:
        # b's agent waits on the model, mid-conversation.
        wait_until(lambda: any(rule(r) == "b-stuck" for r in requests(project)), 90,
                   "b's second request")
        os.kill(process.pid, signal.SIGKILL if ending == "kill -9" else signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == (-signal.SIGKILL if ending == "kill -9" else 130), output
    # A stop a person asked for is not an error of the SDK's (issue 37, item 2).
    assert "Fatal error" not in output and "exited with code" not in output, output
    before = len(requests(project))
    project.write_script({"rules": [A_RULE, DONE_RULE]})

    resumed = project.run()  # `run -e` (the CLI a killed run left is ended first)

    assert resumed.code == 0, resumed.stderr
    assert_starts_from_a(project, requests(project)[before])


def test_a_retry_after_an_idle_timeout_starts_from_the_previous_codon(
        project: HankProject) -> None:
    write(project, shimIdleTimeout=3, onFailure="retry",
          retryConfig={"maxAttempts": 2, "delayMs": 0})

    done = project.run()

    assert done.code == 0, done.stderr
    logged = requests(project)
    assert [rule(r) for r in logged] == ["a", "b-tool", "b-stuck", "b-done"]
    assert_starts_from_a(project, logged[-1])
    timed_out, _ = [c for c in done.state()["runs"][0]["codons"] if c["codonId"] == "b"]
    assert timed_out["failureReason"]["type"] == "timeout"
