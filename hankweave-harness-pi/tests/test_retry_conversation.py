"""Every attempt of a ``continue-previous`` codon starts from the conversation as it stood when
the codon it continues completed: real ``hankweave run`` processes, pi agents against the mock
provider each run serves on 127.0.0.1.

Codon ``b`` continues codon ``a``.  Its first attempt runs a tool, then ends while its next
request is with the model: the process is killed (``kill -9``), interrupted (Ctrl-C), or the
provider fails (and the codon is retried in the same run).  The retried attempt's first request
holds ``a``'s conversation and not one message of the attempt that ended (issue 33: the attempt
runs on a copy of ``a``'s session, ``SessionStore.fork``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from pi_helpers import PiProject

from hankweave.testing.mock_provider import LoggedRequest

MARK = "output-of-the-ended-attempt"
A_RULE = {"name": "a", "when": {"lastUserMessage": "Name a fruit"}, "reply": {"text": "Quince."}}
DONE_RULE = {"name": "b-done", "when": {"lastUserMessage": "Describe the fruit"},
             "reply": {"text": "Golden and fragrant."}}


def script(stuck: dict[str, Any]) -> dict[str, Any]:
    """``a`` names a fruit; ``b``'s first attempt looks with a tool, then its next request is
    answered by ``stuck`` (once); later requests of ``b`` are answered at once."""
    return {"rules": [
        A_RULE,
        {"name": "b-tool", "times": 1,
         "when": {"lastUserMessage": "Describe the fruit", "afterToolResult": False},
         "reply": {"text": "Looking first.", "toolCalls": [
             {"name": "bash", "id": "call_look", "input": {"command": f"echo {MARK}"}}]}},
        {"name": "b-stuck", "times": 1,
         "when": {"lastUserMessage": "Describe the fruit", "afterToolResult": True},
         "reply": stuck},
        DONE_RULE]}


def project_with(root: Path, stuck: dict[str, Any], **b: Any) -> PiProject:
    project = PiProject(root, script(stuck), durable=True)
    project.write_hank([
        {"id": "a", "name": "A", "model": "gpt-5.2", "continuationMode": "fresh",
         "promptText": "Name a fruit."},
        {"id": "b", "name": "B", "model": "gpt-5.2", "continuationMode": "continue-previous",
         "promptText": "Describe the fruit.", **b}])
    return project


def rule(logged: LoggedRequest) -> str:
    return (logged.rule or "").rpartition("(")[2].rstrip(")")


def wait_for_rule(project: PiProject, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(rule(logged) == name for logged in project.model_requests()):
            return
        time.sleep(0.05)
    raise AssertionError(f"no request answered by {name!r} within {timeout}s")


def assert_starts_from_a(project: PiProject, first: LoggedRequest) -> None:
    """``first`` (a retried attempt's first request) holds ``a``'s conversation and ``b``'s
    prompt once, and nothing of the attempt that ended."""
    assert rule(first) == "b-done"
    assert [(m["role"], m["content"]) for m in first.messages[1:]] == [
        ("user", "Name a fruit."), ("assistant", "Quince."), ("user", "Describe the fruit.")]
    text = first.conversation_text()
    assert MARK not in text and "Looking first." not in text
    (a,) = [c for run in project.state()["runs"] for c in run["codons"] if c["codonId"] == "a"]
    b = project.records()["b"]
    assert b["status"] == "completed"
    # The attempt ran on a copy of a's session.
    assert b["previousSessionId"] == a["claudeSessionId"]
    assert b["claudeSessionId"] != a["claudeSessionId"]


@pytest.mark.parametrize("ending", ["kill -9", "Ctrl-C"])
def test_a_retry_after_the_process_ended_mid_codon_starts_from_the_previous_codon(
        tmp_path: Path, ending: str) -> None:
    project = project_with(tmp_path, {"hang": True})
    process = project.start()
    try:
        wait_for_rule(project, "b-stuck")  # b's agent waits on the model, mid-conversation
        if ending == "kill -9":
            os.kill(process.pid, signal.SIGKILL)
        else:
            os.kill(process.pid, signal.SIGINT)  # it ends the run on its own
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == (-signal.SIGKILL if ending == "kill -9" else 130), output
    before = len(project.model_requests())
    project.script.write_text(json.dumps({"rules": [A_RULE, DONE_RULE]}))

    resumed = project.run()

    assert resumed.code == 0, resumed.stderr
    first = project.model_requests()[before]
    assert_starts_from_a(project, first)


def test_a_retry_after_a_provider_failure_mid_codon_starts_from_the_previous_codon(
        tmp_path: Path) -> None:
    project = project_with(tmp_path, {"error": {"kind": "server"}}, onFailure="retry",
                           retryConfig={"maxAttempts": 2, "delayMs": 0})

    done = project.run()

    assert done.code == 0, done.stderr
    requests = project.model_requests()
    assert [rule(r) for r in requests] == ["a", "b-tool", "b-stuck", "b-done"]
    assert_starts_from_a(project, requests[-1])
    failed, completed = [c for c in project.state()["runs"][0]["codons"] if c["codonId"] == "b"]
    assert failed["status"] == "failed"
    # Each attempt had a session of its own, both copied from a's.
    assert failed["claudeSessionId"] != completed["claudeSessionId"]
