"""Running the scripted mock provider in tests, and reading its request log.

For pytest, ``pytest_plugins = ["hankweave.testing.pytest_plugin"]`` gives the
``mock_provider`` fixture; elsewhere :func:`start_mock_provider` does the same::

    with start_mock_provider({"rules": [...]}, log_path=tmp / "requests.jsonl") as mock:
        client = anthropic.Anthropic(base_url=mock.base_url, api_key="x")
        ...
    log = MockProviderLog(tmp / "requests.jsonl")
    first, second = log.requests(protocol="anthropic")
    assert "Write a plan" in second.conversation_text()
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.mock_provider.script import MockScript, load_script, parse_script
from hankweave.mock_provider.server import MockProviderThread


def as_script(script: MockScript | Mapping[str, Any] | Path | str) -> MockScript:
    """A script given as a model, decoded JSON, or the path of a script file."""
    if isinstance(script, MockScript):
        return script
    if isinstance(script, Path | str):
        return load_script(Path(script))
    return parse_script(dict(script))


def start_mock_provider(script: MockScript | Mapping[str, Any] | Path | str, *,
                        log_path: Path | None = None, port: int = 0) -> MockProviderThread:
    """A mock provider in a background thread: use it as a context manager, which starts it
    and gives the running :class:`~hankweave.mock_provider.server.MockProvider`."""
    return MockProviderThread(as_script(script), port=port, log_path=log_path)


def scripted_mock(script: MockScript | Mapping[str, Any] | Path | str) -> Any:
    """A module-scoped pytest fixture that serves ``script`` and yields ``(client_env,
    log_path)``: the clients' environment (base URLs, dummy keys) and the request log::

        mock = scripted_mock(SCRIPT)

        def test_it(mock):
            env, log = mock
    """
    import pytest

    @pytest.fixture(scope="module")
    def mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
        log = tmp_path_factory.mktemp("mock") / "requests.jsonl"
        with start_mock_provider(script, log_path=log) as provider:
            yield provider.client_env(), log

    return mock


@dataclass(frozen=True)
class LoggedRequest:
    """One line of the request log."""

    entry: Mapping[str, Any]

    @property
    def protocol(self) -> str | None:
        return self.entry.get("protocol")

    @property
    def rule(self) -> str | None:
        """The rule that answered (``rules[0] (plan)``, ``default``), or None."""
        return self.entry.get("rule")

    @property
    def status(self) -> int | None:
        return self.entry.get("status")

    @property
    def body(self) -> Mapping[str, Any]:
        return self.entry.get("request") or {}

    @property
    def model(self) -> str | None:
        return self.entry.get("model")

    @property
    def step(self) -> int | None:
        """The step of a rule of ``steps`` that answered (1-based), or None."""
        return self.entry.get("step")

    @property
    def tool_calls(self) -> list[str]:
        """The names of the tools the reply called, in order."""
        reply = self.entry.get("reply") or {}
        return [call["name"] for call in reply.get("toolCalls") or ()]

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        messages = self.body.get("messages")
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    def conversation_text(self) -> str:
        """Every piece of text in the request's messages (and system prompt), in order:
        what to search to tell whether a conversation was carried over."""
        return "\n".join(_texts({"system": self.body.get("system"), "messages": self.messages}))


INIT_DRY_RUN_REPORT = """\
# Report

## Summary

A busy week at the harbour, cut short by Thursday's gale: the best catch of the month came on \
Wednesday, and the storm damage was small.

## Findings

- Between 4 and 14 boats went out each day it was open; the harbour closed on Thursday for a \
gale.
- Wednesday had the best catch of the month, about 2.1 tonnes.
- Two moorings dragged on the north wall and the ice machine failed for three and a half hours.
- Fuel cost 4% more than the week before.

## Revisions

- Checked every finding against the harbour log.
- Checked every finding against the harbour log.
"""
"""``report/report.md`` after ``hankweave init``'s hank ran on its ``dry-run.json``, on any
harness: the survey, the summary, then two polishes."""

INIT_DRY_RUN_STEPS = [("survey", 1), ("survey", 2), ("survey", 2), ("survey", 3),
                      ("summarize", 1), ("summarize", 1), ("summarize", 2),
                      *[("polish", 1), ("polish", 1), ("polish", 2)] * 2]
"""Each model request of that run: the rule and step that answered it (an ``edit`` step takes
two requests, its read and the edit)."""


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in ("text", "content", "system", "messages", "thinking") or isinstance(
                    item, list | dict):
                yield from _texts(item)


class MockProviderLog:
    """The mock provider's JSONL request log, read for assertions."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[LoggedRequest]:
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8")
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            # The line being written now (or cut by a kill -9): not an entry yet.
            lines.pop()
        return [LoggedRequest(json.loads(line)) for line in lines if line.strip()]

    def requests(self, *, protocol: str | None = None, rule: str | None = None,
                 path: str | None = None) -> list[LoggedRequest]:
        """The logged model requests (``/v1/messages``, ``/v1/chat/completions``), filtered;
        ``rule`` matches a rule's label or name (``plan`` finds ``rules[0] (plan)``)."""
        paths = (path,) if path else MODEL_PATHS
        return [request for request in self.entries()
                if request.entry.get("path") in paths
                and (protocol is None or request.protocol == protocol)
                and (rule is None or _answered_by(request, rule))]


MODEL_PATHS = ("/v1/messages", "/v1/chat/completions")


def _answered_by(request: LoggedRequest, rule: str) -> bool:
    return request.rule == rule or (request.rule or "").endswith(f"({rule})")
