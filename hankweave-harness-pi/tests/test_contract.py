"""The pi harness passes the kernel's harness contract, with real litellm against the mock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from pi_helpers import model, offline_env

from hankweave.api import AGENT_MARKER_ENV, CodonRequest, ModelEntry
from hankweave.testing import Arranged, HarnessContract
from hankweave.testing.harness import Scenario
from hankweave.testing.mock_provider import start_mock_provider
from hankweave_harness_pi import PiConfig, PiHarness

SCRIPT = {"rules": [
    {"name": "hang", "when": {"lastUserMessage": "[hang]"}, "reply": {"hang": True}},
    {"name": "hello", "when": {"lastUserMessage": "notes.md"},
     "reply": {"text": "Hello noted.", "usage": {"inputTokens": 120, "outputTokens": 12}}},
]}


@pytest.fixture(scope="module")
def mock_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with start_mock_provider(SCRIPT, log_path=tmp_path_factory.mktemp("m") / "log.jsonl") as m:
        yield m.client_env()


class TestPiHarness(HarnessContract):
    harness_class = PiHarness
    model: ClassVar[ModelEntry] = model("gpt-5.2")
    cancel_within_s = 2.0  # in-process: cancelling the request is immediate
    credentials = {"OPENAI_API_KEY": "sk-test"}

    @pytest.fixture(autouse=True)
    def _offline(self, mock_env: dict[str, str], tmp_path: Path) -> None:
        self.mock_env = mock_env
        # One sessions folder for the test: the resume scenario plays in a second directory.
        self.sessions = tmp_path / "sessions"

    def arrange(self, scenario: Scenario, request: CodonRequest) -> Arranged:
        if scenario == "error-after-success":
            pytest.skip("the pi agent reports every failure in its result; it never raises"
                        " after one")
        marker = {AGENT_MARKER_ENV: f"pi-contract/{scenario}"}
        prompt = "[hang] wait." if scenario == "hang" else request.prompt
        request = dataclasses.replace(
            request, prompt=prompt, env=offline_env(self.mock_env, **marker),
            env_overlay={**self.mock_env, **marker})
        return Arranged(PiHarness, request, PiConfig(sessions_dir=str(self.sessions)))
