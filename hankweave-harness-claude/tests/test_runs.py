"""Codons through ``hankweave run --mock-provider``: the real Claude Code CLI, the runtime in its
own process, the scripted mock provider on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from claude_helpers import (
    HankProject,
    RunResult,
    cli_processes,
    codon,
    codon_status,
    kill_group,
    wait_until,
)

from hankweave.api import get_registry

HELLO = {"rules": [{"name": "hello", "when": {"lastUserMessage": "Say hello"},
                    "reply": {"text": "Hello!", "usage": {"inputTokens": 1000,
                                                           "outputTokens": 50}}}]}

WRITE = {"rules": [
    {"name": "write", "when": {"lastUserMessage": "Write the findings", "turn": 1},
     "reply": {"text": "Writing them.", "usage": {"inputTokens": 900, "outputTokens": 40},
               "toolCalls": [{"name": "Write", "input": {
                   "file_path": "findings.md", "content": "# Findings\n\n3 apples, 5 pears\n"}}]}},
    {"name": "written", "when": {"toolResult": {"regex": "(?i)(created|wrote|success)"}},
     "reply": {"text": "Done: findings.md.", "usage": {"inputTokens": 1000,
                                                       "outputTokens": 10}}}]}


def test_a_hello_codon_records_its_session_cost_tokens_and_result(project: HankProject) -> None:
    project.write([codon("hello", promptText="Say hello.")], HELLO)
    # The user's ~/.claude and the system temp folder are shared with every other process on
    # the machine (CI runs another tox env beside this one): the run gets a home of its own, and
    # a temp folder of its own (short, as /tmp is, so the CLI's socket paths fit as they would),
    # all of which is checked, and of /tmp only what the CLI itself would put there whatever
    # TMPDIR says is.
    home = project.root / "user"
    home.mkdir()
    project.env["HOME"] = str(home)
    home_claude = home / ".claude"
    system_temp = Path(tempfile.gettempdir())
    own_temp = Path(tempfile.mkdtemp(prefix="hw-t-", dir=system_temp))
    project.env["TMPDIR"] = str(own_temp)
    # Where the CLI puts its sockets when XDG_RUNTIME_DIR is too long (and leaves them): shared
    # by every CLI of this user, so it is compared, not removed.
    fallback = system_temp / f"cc-socks-{os.getuid()}"

    def cli_temp() -> set[str]:
        return {name for name in os.listdir(system_temp)
                if "claude" in name.lower() or name.startswith("cc-")} | {
                    f"{fallback.name}/{name}" for name in
                    (os.listdir(fallback) if fallback.is_dir() else [])}

    temp_before = cli_temp()

    try:
        result = project.run()
        own_left = sorted(os.listdir(own_temp))
    finally:
        shutil.rmtree(own_temp, ignore_errors=True)

    assert result.code == 0, result.stderr
    record = result.records()["hello"]
    assert record["status"] == "completed"
    assert record["claudeSessionId"]
    assert record["assistantMessageCount"] == 1
    assert record["finalTokens"]["inputTokens"] == 1000
    assert record["finalTokens"]["outputTokens"] == 50
    # The CLI's own cost: haiku's prices, the CLI's table.
    price = get_registry().resolve_model("haiku").cost
    assert price is not None
    assert record["finalCost"] == pytest.approx((1000 * price.input + 50 * price.output) / 1e6)
    log = (project.execution / record["claudeLogPath"]).read_text().splitlines()
    assert '"type":"result"' in log[-1] and '"subtype":"success"' in log[-1]
    assert '"result":"Hello!"' in log[-1]
    # The request went to the mock, with the dummy key, and nothing was left elsewhere.
    (request,) = project.model_requests()
    assert request["rule"].endswith("(hello)")
    assert own_left == []
    assert cli_temp() - temp_before == set()
    assert not home_claude.exists()
    assert not list((project.execution / ".hankweave/harnesses/claude/t").iterdir())


def test_a_written_file_is_in_the_completion_checkpoint(project: HankProject) -> None:
    project.write([codon("survey", promptText="Write the findings.",
                         checkpointedFiles=["findings.md"])], WRITE)

    result = project.run()

    assert result.code == 0, result.stderr
    record = result.records()["survey"]
    assert record["status"] == "completed"
    assert (project.execution / "agentRoot/findings.md").read_text().startswith("# Findings")
    sha = completion_checkpoint(project)
    backend = get_registry().checkpoint_backend("git")(project.execution)
    target = project.root / "checkpoint"
    backend.materialize(sha, target)
    assert (target / "findings.md").read_text() == "# Findings\n\n3 apples, 5 pears\n"
    events = result_events(project)
    (tool,) = [e["data"] for e in events if e["type"] == "tool.result"]
    assert tool["toolName"] == "Write" and tool["isError"] is False, tool
    assert tool["result"].startswith("File created successfully")


def completion_checkpoint(project: HankProject) -> str:
    from hankweave.api import end_checkpoint, load_state

    state, _ = load_state(project.execution / ".hankweave")
    sha = end_checkpoint(state.runs[0].codons[-1])
    assert sha is not None
    return sha


def result_events(project: HankProject) -> list[dict]:
    import json

    path = project.execution / ".hankweave/events/events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_continue_previous_carries_the_first_codons_conversation(project: HankProject) -> None:
    script = {"rules": [
        {"name": "first", "when": {"lastUserMessage": "Name a fruit"},
         "reply": {"text": "Quince, the golden one.",
                   "usage": {"inputTokens": 1000, "outputTokens": 50}}},
        {"name": "second", "when": {"lastUserMessage": "Repeat the fruit"},
         "reply": {"text": "Quince.", "usage": {"inputTokens": 3000, "outputTokens": 20}}}]}
    project.write([codon("first", promptText="Name a fruit."),
                   codon("second", promptText="Repeat the fruit.",
                         continuationMode="continue-previous")], script)

    result = project.run()

    assert result.code == 0, result.stderr
    records = result.records()
    # The second codon continued a fork of the first's session: a session id of its own.
    assert records["second"]["previousSessionId"] == records["first"]["claudeSessionId"]
    assert records["second"]["claudeSessionId"] != records["first"]["claudeSessionId"]
    second = next(r for r in project.model_requests() if r["rule"].endswith("(second)"))
    text = str(second["request"]["messages"])
    assert "Name a fruit." in text and "Quince, the golden one." in text
    # The CLI reports the fork's whole cost, the first codon's included; each codon is charged
    # its own share.
    price = get_registry().resolve_model("haiku").cost
    assert price is not None
    assert records["first"]["finalCost"] == pytest.approx((1000 * price.input
                                                          + 50 * price.output) / 1e6)
    assert records["second"]["finalCost"] == pytest.approx((3000 * price.input
                                                           + 20 * price.output) / 1e6)
    state_total = sum(r["finalCost"] for r in records.values())
    log = (project.execution / records["second"]["claudeLogPath"]).read_text().splitlines()
    result = json.loads(log[-1])
    assert result["session_total_cost_usd"] == pytest.approx(state_total)


def test_extensions_resume_the_session_with_the_exhaust_prompt(project: HankProject) -> None:
    script = {"rules": [
        {"name": "start", "when": {"lastUserMessage": "Begin the list"},
         "reply": {"text": "1. apples"}},
        {"name": "more", "when": {"lastUserMessage": "Keep going"},
         "reply": {"text": "another item"}}]}
    project.write([codon("grow", promptText="Begin the list.", exhaustWithPrompt="Keep going.",
                         maxExtensions=2)], script)

    result = project.run()

    assert result.code == 0, result.stderr
    record = result.records()["grow"]
    assert record["status"] == "completed"
    assert record["extensionCount"] == 2
    rules = [r["rule"] for r in project.model_requests()]
    assert [r.split(" ")[-1] for r in rules] == ["(start)", "(more)", "(more)"]
    last = project.model_requests()[-1]
    assert "Begin the list." in str(last["request"]["messages"])  # the same session
    log = (project.execution / record["claudeLogPath"]).read_text()
    assert log.count('"type":"result"') == 3
    # Three passes of one session: their costs and tokens add up.
    results = [json.loads(line) for line in log.splitlines() if '"type":"result"' in line]
    assert record["finalCost"] == pytest.approx(results[-1]["session_total_cost_usd"])
    assert record["finalCost"] == pytest.approx(sum(r["total_cost_usd"] for r in results))
    assert record["finalTokens"]["inputTokens"] == sum(r["usage"]["input_tokens"]
                                                        for r in results)


@pytest.mark.parametrize(("kind", "retriable", "words"), [
    ("server", True, "server"),
    ("invalid_request", False, "invalid request"),
    ("authentication", False, "auth"),
])
def test_provider_errors_become_classified_failures(project: HankProject, kind: str,
                                                    retriable: bool, words: str) -> None:
    script = {"rules": [{"name": "fail", "when": {"lastUserMessage": "Say hello"},
                         "reply": {"error": {"kind": kind}}}]}
    project.write([codon("hello", promptText="Say hello.")], script)

    result = project.run()

    assert result.code != 0
    record = result.records()["hello"]
    assert record["status"] == "failed"
    reason = record["failureReason"]
    assert reason["retriable"] is retriable, reason
    assert words in reason["message"].lower(), reason


def test_a_hanging_stream_is_an_idle_timeout(project: HankProject) -> None:
    script = {"rules": [{"name": "hang", "when": {"lastUserMessage": "Say hello"},
                         "reply": {"hang": True}}]}
    project.write([codon("hello", promptText="Say hello.", shimIdleTimeout=3)], script)

    started = time.monotonic()
    result = project.run()
    elapsed = time.monotonic() - started

    assert result.code != 0
    record = result.records()["hello"]
    assert record["status"] == "failed"
    assert record["failureReason"]["type"] == "timeout"
    assert record["failureReason"]["retriable"] is True
    assert "Idle timeout: no events received for 3000ms" in record["failureReason"]["message"]
    assert elapsed < 3 + 15, elapsed


HANG = {"rules": [{"name": "after", "when": {"lastUserMessage": "Then stop"},
                   "reply": {"text": "Stopped."}},
                  {"name": "hang", "when": {"lastUserMessage": "Say hello"},
                   "reply": {"hang": True}}]}


def start_hanging(project: HankProject) -> tuple[subprocess.Popen[str], int]:
    """A run whose codon's CLI waits on the mock forever: the process and the CLI's pid."""
    project.write([codon("hello", promptText="Say hello.", shimIdleTimeout=600),
                   codon("after", promptText="Then stop.")], HANG)
    process = project.start()
    wait_until(lambda: codon_status(project.execution, "hello") == "running", 60,
               "the codon to run")
    wait_until(lambda: bool(new_clis(project)), 30, "the CLI")
    (pid,) = new_clis(project)
    return process, pid


def new_clis(project: HankProject) -> list[int]:
    marker_root = str(project.execution)
    return [pid for pid in cli_processes() if marker_root in _cwd(pid)]


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def test_skip_ends_the_cli_and_the_codon_is_skipped(project: HankProject) -> None:
    process, cli = start_hanging(project)
    try:
        began = time.monotonic()
        ctl = subprocess.run([sys.executable, "-m", "hankweave", "ctl", "-e",
                              str(project.execution), "skip"], env=project.process_env(),
                             capture_output=True, text=True, timeout=60, check=False)
        assert ctl.returncode == 0, ctl.stderr
        # Well before the codon's 600 s idle timeout (a bound loose enough for a loaded
        # machine: CI runs another tox env beside this one).
        wait_until(lambda: not _running(cli), 60, "the CLI to end")
        assert time.monotonic() - began < 120
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            kill_group(process)
    states = RunResult(0, "", "", project.execution).statuses()
    assert states == [("hello", "skipped"), ("after", "completed")], states
    assert not new_clis(project)


def _running(pid: int) -> bool:
    from hankweave.api import process_running

    return process_running(pid)


def test_kill_9_mid_codon_then_resume_ends_the_cli_of_the_dead_run(project: HankProject) -> None:
    process, cli = start_hanging(project)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    time.sleep(0.5)
    assert _running(cli), "the CLI outlives its killed host (what resume must clean up)"

    # The resumed run finds the CLI of the crashed run by its pid and marker, and ends it.
    project.write_script({"rules": [
        {"name": "hello", "when": {"lastUserMessage": "Say hello"}, "reply": {"text": "Hello!"}},
        {"name": "after", "when": {"lastUserMessage": "Then stop"},
         "reply": {"text": "Stopped."}}]})
    result = project.run()

    assert not _running(cli), result.stderr
    assert result.code == 0, result.stderr
    assert f"Ended agent process {cli}" in result.stderr
    assert not new_clis(project)
