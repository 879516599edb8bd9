"""Single attempts through the kernel's runner (``hankweave.testing.run_attempt``): the real CLI
against the mock provider, no hank."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from claude_helpers import haiku, offline_env

from hankweave.api import AGENT_MARKER_ENV, CodonRequest
from hankweave.testing import RecordingPolicy, run_attempt
from hankweave.testing.mock_provider import MockProviderLog, scripted_mock
from hankweave_harness_claude import ClaudeConfig, ClaudeHarness

SCRIPT = {"rules": [
    {"name": "write", "when": {"lastUserMessage": "Write notes", "turn": 1},
     "reply": {"toolCalls": [{"name": "Write", "input": {"file_path": "notes.md",
                                                          "content": "hello\n"}}]}},
    {"name": "denied", "when": {"toolResult": {"regex": "not allowed here"}},
     "reply": {"text": "Understood, I did not write it."}},
    {"name": "done", "when": {"toolResult": {"regex": "(?i)created"}},
     "reply": {"text": "Written."}},
    {"name": "loop", "when": {"lastUserMessage": "Loop forever"},
     "reply": {"toolCalls": [{"name": "Bash", "input": {"command": "true"}}]}},
    {"name": "loop-more", "when": {"toolResult": {"regex": ".*"}},
     "reply": {"toolCalls": [{"name": "Bash", "input": {"command": "true"}}]}},
]}


mock = scripted_mock(SCRIPT)


def request(tmp_path: Path, mock_env: dict[str, str], prompt: str) -> CodonRequest:
    work = tmp_path / "agentRoot"
    work.mkdir(parents=True, exist_ok=True)
    marker = {AGENT_MARKER_ENV: f"attempts/{tmp_path.name}"}
    return CodonRequest(prompt=prompt, system_prompt="Answer briefly.", model=haiku(),
                        work_dir=work, env=offline_env(mock_env, **marker),
                        env_overlay={**mock_env, **marker}, codon_id="c", run_id="r")


def attempt(req: CodonRequest, root: Path, **options: Any) -> Any:
    return asyncio.run(run_attempt(ClaudeHarness, req, root / "exec", **options))


def test_a_tool_the_policy_denies_is_not_run_and_the_agent_is_told_why(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    policy = RecordingPolicy(deny={"Write": "Writing is not allowed here."})
    run = attempt(request(tmp_path, mock[0], "Write notes.md."), tmp_path, policy=policy)

    assert run.outcome.success, run.outcome
    assert [name for name, _ in policy.tool_calls] == ["Write"]
    assert policy.tool_calls[0][1]["file_path"].endswith("notes.md")  # the CLI makes it absolute
    assert not (tmp_path / "agentRoot" / "notes.md").exists()
    results = [data for kind, data in run.events if kind == "tool.result"]
    assert results and results[0]["isError"] is True
    assert "Writing is not allowed here." in results[0]["result"]


def test_an_allowed_tool_runs_and_the_system_prompt_is_appended(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    policy = RecordingPolicy()
    run = attempt(request(tmp_path, mock[0], "Write notes.md."), tmp_path, policy=policy)

    assert run.outcome.success, run.outcome
    assert (tmp_path / "agentRoot" / "notes.md").read_text() == "hello\n"
    assert [name for name, _ in policy.tool_calls] == ["Write"]
    first = next(r for r in MockProviderLog(mock[1]).requests() if r.rule
                 and r.rule.endswith("(write)"))
    system = str(first.body.get("system"))
    assert "Answer briefly." in system and "Claude Code" in system  # the preset, appended to


def test_max_turns_ends_the_pass_with_a_failure(tmp_path: Path,
                                                mock: tuple[dict[str, str], Path]) -> None:
    run = attempt(request(tmp_path, mock[0], "Loop forever."), tmp_path,
                  config=ClaudeConfig(max_turns=2))

    assert not run.outcome.success
    reason = run.outcome.failure_reason
    assert reason is not None and (reason.type, reason.retriable) == ("turn-limit", False), reason
    assert "turn limit" in reason.message and "harnesses.claude.maxTurns" in reason.message


def test_a_cli_that_cannot_start_is_a_permanent_local_failure(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    run = attempt(request(tmp_path, mock[0], "Write notes.md."), tmp_path,
                  config=ClaudeConfig(cli_path=str(tmp_path / "no-such-claude")))

    reason = run.outcome.failure_reason
    assert reason is not None and reason.retriable is False, reason
    assert "no-such-claude" in reason.message


def test_a_cli_that_dies_before_its_session_is_a_permanent_local_failure(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    broken = tmp_path / "claude-broken"
    broken.write_text("#!/bin/sh\necho 'claude: cannot start: no config' >&2\nexit 2\n")
    broken.chmod(0o755)
    run = attempt(request(tmp_path, mock[0], "Write notes.md."), tmp_path,
                  config=ClaudeConfig(cli_path=str(broken)))

    reason = run.outcome.failure_reason
    assert reason is not None and reason.retriable is False, reason
    assert "exit" in reason.message and "cannot start: no config" in reason.message
    stderr = tmp_path / "exec/.hankweave/runs/r/c-stderr.log"
    assert "cannot start: no config" in stderr.read_text()


def test_the_cli_pid_is_reported_and_recorded(tmp_path: Path,
                                              mock: tuple[dict[str, str], Path]) -> None:
    run = attempt(request(tmp_path, mock[0], "Write notes.md."), tmp_path)
    assert run.outcome.success
    # The record names the CLI's process, not the runtime hosting the harness.
    assert run.record.claude_pid not in (None, os.getpid())
