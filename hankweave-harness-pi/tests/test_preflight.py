"""Before anything is created: a pi codon without its provider's key fails ``validate`` and
``run``, naming the variable; the mock provider needs none; a refused key at run time is a
permanent failure, not retried (issue 36)."""

from __future__ import annotations

import os
from pathlib import Path

from pi_helpers import PiProject

from hankweave.testing.mock_provider import MockProviderLog, start_mock_provider

HELLO = {"rules": [{"name": "hello", "reply": {"text": "Hello!"}}]}


def keyless(root: Path, script: dict[str, object] = HELLO, **codon: object) -> PiProject:
    """Two codons on OpenAI's gpt-5.2 and no provider key anywhere (PiProject's processes get
    only ``PATH`` of this environment)."""
    project = PiProject(root, script)
    if os.environ.get("PYTHONPATH"):  # a checkout whose packages are not the installed ones
        project.env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    project.write_hank([
        {"id": "a", "name": "A", "model": "gpt-5.2", "continuationMode": "fresh",
         "promptText": "Say hello.", **codon},
        {"id": "b", "name": "B", "model": "gpt-5.2", "continuationMode": "fresh",
         "promptText": "Say hello again."}])
    return project


def test_validate_without_a_key_fails_naming_the_variable(tmp_path: Path) -> None:
    project = keyless(tmp_path)

    done = project.hankweave("validate", str(project.hank_dir), str(project.data))
    offline = project.hankweave("validate", str(project.hank_dir), str(project.data),
                                "--offline")

    assert done.code == 2, done.stdout + done.stderr
    assert "hank[0].model" in done.stderr
    assert "OPENAI_API_KEY" in done.stderr and "HANKWEAVE_OPENAI_API_KEY" in done.stderr
    assert offline.code == 0, offline.stderr


def test_a_key_in_the_codon_env_is_enough(tmp_path: Path) -> None:
    project = keyless(tmp_path)
    project.write_hank([{"id": "a", "name": "A", "model": "gpt-5.2", "continuationMode": "fresh",
                         "promptText": "Say hello.", "env": {"OPENAI_API_KEY": "sk-codon"}}])

    done = project.hankweave("validate", str(project.hank_dir), str(project.data))

    assert done.code == 0, done.stderr


def test_run_without_a_key_creates_no_execution_and_sends_no_request(tmp_path: Path) -> None:
    project = keyless(tmp_path)
    log = tmp_path / "mock-requests.jsonl"
    with start_mock_provider(HELLO, log_path=log) as provider:
        # litellm would reach the mock; only the key is missing.
        project.env["OPENAI_BASE_URL"] = f"{provider.base_url}/v1"
        done = project.hankweave("run", str(project.hank_dir), str(project.data),
                                 "-e", str(project.exec_dir), "--headless")

    assert done.code == 2, done.stdout + done.stderr
    assert "OPENAI_API_KEY" in done.stderr
    assert not project.exec_dir.exists()
    assert not log.exists() or not MockProviderLog(log).requests()


def test_the_mock_provider_needs_no_key(tmp_path: Path) -> None:
    project = keyless(tmp_path)

    done = project.run()

    assert done.code == 0, done.stderr
    assert [record["status"] for record in project.records().values()] == ["completed"] * 2


def test_a_refused_key_at_run_time_is_permanent_and_not_retried(tmp_path: Path) -> None:
    refused = {"rules": [{"name": "refused", "reply": {"error": {"kind": "authentication"}}}]}
    project = keyless(tmp_path, refused, onFailure="retry",
                      retryConfig={"maxAttempts": 3, "delayMs": 0})

    done = project.run()

    assert done.code != 0
    attempts = [c for c in project.state()["runs"][0]["codons"] if c["codonId"] == "a"]
    assert len(attempts) == 1, attempts
    reason = attempts[0]["failureReason"]
    assert reason["retriable"] is False, reason
    assert "auth" in reason["message"].lower(), reason
