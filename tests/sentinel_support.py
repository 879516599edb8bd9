"""Helpers for the sentinel runtime tests: sentinel configs, a mock-provider project, reading
what the sentinels asked the mock.

Every sentinel prompt starts with its tag, ``[<id>]``, and the mock's script answers each tag
with its own rule, so the request log tells the sentinels apart (``SentinelRun.prompts``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.events.catalogue import routes_to_sentinels
from hankweave.registry import get_registry
from hankweave.testing.mock_provider import LoggedRequest, MockProviderLog
from tests.runtime_harness import Outcome, Project

HTTP_AGENT_PLUGINS = "tests.http_agent,hankweave.testing.memory_checkpoints"
SENTINEL_EVENTS = ("sentinel.loaded", "sentinel.triggered", "sentinel.output", "sentinel.error",
                   "sentinel.unloaded")


def sentinel(sentinel_id: str, prompt: str, *, on: Iterable[str] = ("codon.started",),
             conditions: list[dict[str, Any]] | None = None,
             execution: dict[str, Any] | None = None, model: str = "openai/gpt-5-mini",
             **fields: Any) -> dict[str, Any]:
    """An inline config with an event trigger; ``prompt`` is the user prompt after the tag."""
    trigger: dict[str, Any] = {"type": "event", "on": list(on)}
    if conditions is not None:
        trigger["conditions"] = conditions
    return {"id": sentinel_id, "name": f"Sentinel {sentinel_id}", "trigger": trigger,
            "execution": execution or {"strategy": "immediate"}, "model": model,
            "userPromptText": f"[{sentinel_id}] {prompt}", **fields}


def sequence(sentinel_id: str, prompt: str, *, interest: list[str],
             pattern: list[dict[str, Any]], consecutive: bool | None = None,
             **fields: Any) -> dict[str, Any]:
    """An inline config with a sequence trigger."""
    config = sentinel(sentinel_id, prompt, **fields)
    config["trigger"] = {"type": "sequence", "interestFilter": {"on": interest},
                         "pattern": pattern}
    if consecutive is not None:
        config["trigger"]["options"] = {"consecutive": consecutive}
    return config


def entry(config: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """A codon's ``sentinels`` entry (``settings`` in camelCase)."""
    return {"sentinelConfig": config, **({"settings": settings} if settings else {})}


def answer(tag: str, reply: dict[str, Any], *, contains: str | None = None,
           **when: Any) -> dict[str, Any]:
    """A mock rule answering the requests whose last user message contains ``[tag]`` (and
    ``contains``, when given)."""
    needle = f"[{tag}]" + (f" {contains}" if contains else "")
    return {"name": tag, "when": {"lastUserMessage": needle, **when}, "reply": reply}


def text(content: str, tokens_in: int = 100, tokens_out: int = 10) -> dict[str, Any]:
    return {"text": content, "usage": {"inputTokens": tokens_in, "outputTokens": tokens_out}}


def price(model: str, tokens_in: int, tokens_out: int) -> float:
    """The catalogue's price of a call, in dollars."""
    cost = get_registry().resolve_model(model).cost
    assert cost is not None, model
    return (tokens_in * cost.input + tokens_out * cost.output) / 1_000_000


def mock_project(root: Path) -> Project:
    project = Project(root)
    project.env["HANKWEAVE_PLUGIN_MODULES"] = HTTP_AGENT_PLUGINS
    return project


@dataclass
class SentinelRun:
    """A finished run against the mock and its request log."""

    project: Project
    outcome: Outcome

    @property
    def log(self) -> MockProviderLog:
        return MockProviderLog(self.project.hankweave_dir / "mock-provider" / "requests.jsonl")

    def requests(self, tag: str) -> list[LoggedRequest]:
        """The requests of the sentinel tagged ``[tag]``, in the order they were answered."""
        return [r for r in self.log.requests() if f"[{tag}]" in (user_text(r) or "")]

    def prompts(self, tag: str) -> list[str]:
        """The rendered user prompts the sentinel ``tag`` sent, without the tag."""
        return [(user_text(r) or "").removeprefix(f"[{tag}]").strip()
                for r in self.requests(tag)]

    def events(self, event_type: str, sentinel_id: str | None = None) -> list[dict[str, Any]]:
        return [data for data in self.outcome.of_type(event_type)
                if sentinel_id is None or data.get("sentinelId") == sentinel_id]

    def index(self, predicate: Any) -> int:
        """The position in the run's events of the first event ``predicate(event)`` holds for."""
        for position, event in enumerate(self.outcome.events):
            if predicate(event):
                return position
        raise AssertionError("no such event")

    def transition_index(self, codon_id: str, to: str) -> int:
        def is_it(event: Mapping[str, Any]) -> bool:
            data = event["data"]
            return (event["type"] == "state.transition"
                    and data.get("transitionType") == "CodonTransitioned"
                    and data.get("codonId") == codon_id
                    and data["transition"]["data"]["to"] == to)
        return self.index(is_it)

    def observed(self, sentinel_id: str) -> list[dict[str, Any]]:
        """The events a ``*`` sentinel sees: those routed to sentinels between its load and its
        unload, but the ``SentinelStatesUpdated`` transitions."""
        start = self.index(lambda e: e["type"] == "sentinel.loaded"
                           and e["data"]["sentinelId"] == sentinel_id)
        end = self.index(lambda e: e["type"] == "sentinel.unloaded"
                         and e["data"]["sentinelId"] == sentinel_id)
        return [event for event in self.outcome.events[start:end]
                if routes_to_sentinels(event["type"])
                and event["data"].get("transitionType") != "SentinelStatesUpdated"]


def user_text(request: LoggedRequest) -> str | None:
    """The text of the request's last user message."""
    users = [m for m in request.messages if m.get("role") == "user"]
    if not users:
        return None
    content = users[-1].get("content")
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or []
                     if isinstance(block, dict) and block.get("type") == "text")


def run_with_mock(project: Project, rules: list[dict[str, Any]]) -> SentinelRun:
    script = project.root / "script.json"
    script.write_text(json.dumps({"rules": rules}))
    return SentinelRun(project, project.run(mock_provider=str(script)))
