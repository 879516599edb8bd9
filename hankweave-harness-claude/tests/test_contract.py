"""The Claude harness passes the kernel's harness contract, with the real Claude Code CLI
against the scripted mock provider."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from claude_helpers import BUNDLED_CLI, haiku, offline_env

from hankweave.api import AGENT_MARKER_ENV, CodonRequest, ModelEntry
from hankweave.testing import Arranged, HarnessContract
from hankweave.testing.harness import Scenario
from hankweave.testing.mock_provider import start_mock_provider
from hankweave_harness_claude import ClaudeConfig, ClaudeHarness

SCRIPT = {"rules": [
    {"name": "hang", "when": {"lastUserMessage": "[hang]"}, "reply": {"hang": True}},
    {"name": "hello", "when": {"lastUserMessage": "notes.md"},
     "reply": {"text": "Hello noted.", "usage": {"inputTokens": 120, "outputTokens": 12}}},
]}


@pytest.fixture(scope="module")
def mock_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    log = tmp_path_factory.mktemp("mock") / "requests.jsonl"
    with start_mock_provider(SCRIPT, log_path=log) as provider:
        yield provider.client_env()


class TestClaudeHarness(HarnessContract):
    harness_class = ClaudeHarness
    model: ClassVar[ModelEntry] = haiku()
    # SIGTERM, the CLI's exit, the SDK's disconnect: well under the 6.5 s the SDK's own
    # cancellation takes.
    cancel_within_s = 6.0
    credentials = {"ANTHROPIC_API_KEY": "sk-ant-test"}

    @pytest.fixture(autouse=True)
    def _offline(self, mock_env: dict[str, str], tmp_path: Path) -> None:
        self.mock_env = mock_env
        # One config folder for the whole test, so the resume scenario finds the first
        # session's transcript (each play has an execution directory of its own).
        self.config_dir = tmp_path / "claude-config"

    def arrange(self, scenario: Scenario, request: CodonRequest) -> Arranged:
        marker = {AGENT_MARKER_ENV: f"contract/{scenario}"}
        prompt = "[hang] wait." if scenario == "hang" else request.prompt
        request = dataclasses.replace(
            request, prompt=prompt, env=offline_env(self.mock_env, **marker),
            env_overlay={**self.mock_env, **marker})
        config = ClaudeConfig(config_dir=str(self.config_dir))
        if scenario == "error-after-success":
            # The CLI exits with an error after its session's success result.
            config = ClaudeConfig(config_dir=str(self.config_dir),
                                  cli_path=str(failing_cli(request.work_dir.parent)))
        return Arranged(ClaudeHarness, request, config)


def failing_cli(folder: Path) -> Path:
    """A Claude Code CLI that exits 3 after the real one has finished."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "claude-exits-3"
    path.write_text(f'#!/bin/sh\n"{BUNDLED_CLI}" "$@"\nexit 3\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_bundled_cli_is_there() -> None:
    assert BUNDLED_CLI.is_file() and os.access(BUNDLED_CLI, os.X_OK)
