"""Before anything is created: a Claude codon without credentials fails ``validate`` and
``run``, naming the variable; the mock provider needs none; a refused key at run time is a
permanent failure, not retried (issue 36)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from claude_helpers import HankProject, codon, haiku, offline_env

from hankweave.api import CodonRequest
from hankweave.testing import run_attempt
from hankweave.testing.mock_provider import start_mock_provider
from hankweave_harness_claude import ClaudeConfig, ClaudeHarness

HELLO = {"rules": [{"name": "hello", "when": {"lastUserMessage": "Say hello"},
                    "reply": {"text": "Hello!"}}]}


@pytest.fixture
def keyless(project: HankProject) -> HankProject:
    """No key in the environment and an empty home: no stored ``claude /login`` either."""
    home = project.root / "user-home"
    home.mkdir()
    project.env["HOME"] = str(home)
    project.write([codon("hello", promptText="Say hello."),
                   codon("again", promptText="Say hello again.")], HELLO)
    return project


def hankweave(project: HankProject, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hankweave", *args],
                          env={**project.process_env(), **(env or {})}, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=120,
                          check=False)


def test_validate_without_a_key_fails_naming_the_variable(keyless: HankProject) -> None:
    done = hankweave(keyless, "validate", str(keyless.hank_dir), str(keyless.root / "data"))

    assert done.returncode == 2, done.stdout + done.stderr
    assert "The hank is valid" not in done.stdout
    assert "hank[0].model" in done.stderr
    assert "ANTHROPIC_API_KEY" in done.stderr
    assert "HANKWEAVE_ANTHROPIC_API_KEY" in done.stderr
    assert "(and 1 more codon on it)" in done.stderr  # reported once, not once per codon


def test_validate_offline_and_a_passthrough_key_pass(keyless: HankProject) -> None:
    args = ("validate", str(keyless.hank_dir), str(keyless.root / "data"))

    offline = hankweave(keyless, *args, "--offline")
    passthrough = hankweave(keyless, *args, env={"HANKWEAVE_ANTHROPIC_API_KEY": "sk-ant-x"})

    assert offline.returncode == 0, offline.stderr
    assert passthrough.returncode == 0, passthrough.stderr


def test_run_without_a_key_creates_no_execution_and_sends_no_request(
        keyless: HankProject, tmp_path: Path) -> None:
    log = tmp_path / "mock-requests.jsonl"
    with start_mock_provider(HELLO, log_path=log) as provider:
        # The CLI would reach the mock, but without a key it could only say "Not logged in".
        done = hankweave(keyless, "run", str(keyless.hank_dir), str(keyless.root / "data"),
                         "-e", str(keyless.execution), "--headless",
                         env={"ANTHROPIC_BASE_URL": provider.base_url})

    assert done.returncode == 2, done.stdout + done.stderr
    assert "ANTHROPIC_API_KEY" in done.stderr
    assert not keyless.execution.exists()
    assert not log.exists() or not log.read_text().strip()


def test_the_mock_provider_needs_no_key(keyless: HankProject) -> None:
    result = keyless.run()

    assert result.code == 0, result.stderr
    assert [status for _, status in result.statuses()] == ["completed", "completed"]


def test_a_refused_key_at_run_time_is_permanent_and_not_retried(
        keyless: HankProject) -> None:
    refused = {"rules": [{"name": "refused", "reply": {"error": {"kind": "authentication"}}}]}
    keyless.write([codon("hello", promptText="Say hello.", onFailure="retry",
                         retryConfig={"maxAttempts": 3, "delayMs": 0})], refused)

    result = keyless.run()

    assert result.code != 0
    attempts = [c for c in result.state()["runs"][0]["codons"] if c["codonId"] == "hello"]
    assert len(attempts) == 1, attempts
    reason = attempts[0]["failureReason"]
    assert reason["retriable"] is False, reason
    assert "auth" in reason["message"].lower(), reason


def test_not_logged_in_at_run_time_is_a_permanent_failure(tmp_path: Path) -> None:
    # What a codon met before the preflight existed (and still may, if a login expires): the
    # real CLI, no key, no stored login, answers "Not logged in · Please run /login".
    home = tmp_path / "home"
    home.mkdir()
    request = CodonRequest(prompt="Say hello.", system_prompt=None, model=haiku(),
                           work_dir=tmp_path / "agentRoot", env=offline_env({}, HOME=str(home)),
                           codon_id="hello", run_id="run")
    request.work_dir.mkdir()
    config = ClaudeConfig(config_dir=str(tmp_path / "claude-config"))

    run = asyncio.run(run_attempt(ClaudeHarness, request, tmp_path / "exec", config=config))

    reason = run.outcome.failure_reason
    assert not run.outcome.success and reason is not None
    assert "not logged in" in (reason.message or "").lower(), reason
    assert reason.retriable is False, reason
