"""``FakeHarness``: a real harness plugin whose agent is a script, for testing without a provider.

It is registered like any harness (``register_harnesses``) together with a ``fake`` provider and
the model ``fake/scripted`` (alias ``fake``), so a hank whose codons use ``"model": "fake"`` runs
through the whole runtime: real codon logs, state, checkpoints and events.

The script is JSON (or a :class:`FakeScript`), keyed by codon id (runtime id first, then the
base id of a loop codon); each value is one attempt or a list of attempts, used in order (the
last one repeats).  Each harness call (a retry, an extension pass) takes the next attempt.
Attempts are counted per runtime id, so every iteration of a loop codon keyed by its base id
starts again at the first attempt; key ``work#1`` to script one iteration::

    {"codons": {
        "write": {"messages": 3, "writeFiles": {"out.md": "hello"}, "cost": 0.02},
        "flaky": [{"result": "error", "errorText": "API Error: 529 overloaded"},
                  {"messages": 1}],
        "slow": {"hang": true}},
     "default": {"messages": 1}}

Load it with ``HANKWEAVE_FAKE_SCRIPT=/path/script.json HANKWEAVE_PLUGIN_MODULES=
hankweave.testing.fake_harness``.  Attempts are counted in ``<script>.attempts.json`` so a
restarted process continues with the next attempt.

With ``HANKWEAVE_FAKE_ALL=1`` the fake harness also claims every other model (``select_harness``),
so a hank written for a real model (``haiku``) runs unchanged with fake agents, and its costs are
computed with that model's catalogue prices.  This is how the bundled example recordings are made.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from hankweave.fsutil import atomic_write_bytes
from hankweave.harness import CodonRequest, Harness
from hankweave.hookspecs import hookimpl
from hankweave.models import ModelCost, ModelEntry, ProviderEntry

SCRIPT_ENV = "HANKWEAVE_FAKE_SCRIPT"
CLAIM_ALL_ENV = "HANKWEAVE_FAKE_ALL"
"""Set to ``1`` to run every codon with the fake harness, whatever its model."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class FakeUsage(_Model):
    input_tokens: int = 10
    output_tokens: int = 20
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class FakeAttempt(_Model):
    """One scripted attempt of a codon."""

    session_id: str | None = None
    messages: int = Field(1, ge=0)
    text: str = "Working on it."
    usage: FakeUsage | None = Field(default_factory=FakeUsage)
    write_files: dict[str, str] = Field(default_factory=dict)
    delete_files: list[str] = Field(default_factory=list)
    cost: float | None = None
    result: Literal["success", "error", "disguised-error", "none"] = "success"
    error_text: str = "API Error: 500 internal server error"
    raise_error: str | None = None
    delay_ms: int = 0
    hang: bool = False
    context_exceeded: bool = False


class FakeScript(_Model):
    codons: dict[str, FakeAttempt | list[FakeAttempt]] = Field(default_factory=dict)
    default: FakeAttempt = Field(default_factory=FakeAttempt)

    def attempts_for(self, codon_id: str) -> list[FakeAttempt]:
        script = self.codons.get(codon_id) or self.codons.get(codon_id.split("#", 1)[0])
        if script is None:
            return [self.default]
        return script if isinstance(script, list) else [script]


FAKE_MODEL = ModelEntry(provider_id="fake", model_id="scripted", name="Fake scripted model",
                        aliases=("fake",), context_limit=200_000, output_limit=64_000,
                        cost=ModelCost(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25))


class FakeHarness(Harness):
    """Plays a :class:`FakeScript` as if an agent were working."""

    name: ClassVar[str] = "fake"
    package: ClassVar[str] = "hankweave"
    script: ClassVar[FakeScript | None] = None
    """Set by tests in-process; otherwise the script comes from ``HANKWEAVE_FAKE_SCRIPT``."""

    async def run_codon(self, request: CodonRequest) -> AsyncIterator[dict[str, Any]]:
        attempt = _next_attempt(request.codon_id)
        session = attempt.session_id or request.session_id_to_resume or (
            f"fake-{request.codon_id.replace('#', '-')}-{os.getpid()}")
        yield {"type": "system", "subtype": "init", "session_id": session,
               "cwd": str(request.work_dir), "tools": ["Read", "Write", "Bash"],
               "model": request.model.model_id, "permissionMode": "bypassPermissions",
               "apiKeySource": "none"}
        if attempt.raise_error:
            raise RuntimeError(attempt.raise_error)
        for number in range(attempt.messages):
            await _pause(attempt.delay_ms)
            yield _assistant(f"{attempt.text} ({number + 1}/{attempt.messages})",
                             attempt.usage, number)
        for index, (path, content) in enumerate(sorted(attempt.write_files.items())):
            target = request.work_dir / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            tool_id = f"toolu_fake{index}"
            yield _assistant(None, attempt.usage, index, tool={
                "type": "tool_use", "id": tool_id, "name": "Write",
                "input": {"file_path": path, "content": content}})
            yield {"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tool_id,
                 "content": f"File written: {path}"}]}}
        for path in attempt.delete_files:
            (request.work_dir / path).unlink(missing_ok=True)
        if attempt.context_exceeded:
            yield {"type": "system", "subtype": "compact_boundary", "session_id": session,
                   "compact_metadata": {"trigger": "auto"}}
        if attempt.hang:
            await asyncio.Event().wait()  # until cancelled
        if attempt.result == "none":
            return
        yield _result(attempt, session)


def _assistant(text: str | None, usage: FakeUsage | None, number: int,
               tool: dict[str, Any] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [tool] if tool else [{"type": "text", "text": text}]
    message: dict[str, Any] = {"id": f"msg_fake{number}", "type": "message", "role": "assistant",
                               "model": FAKE_MODEL.model_id, "content": content,
                               "stop_reason": "tool_use" if tool else "end_turn"}
    if usage is not None:
        message["usage"] = usage.model_dump()
    return {"type": "assistant", "message": message}


def _result(attempt: FakeAttempt, session: str) -> dict[str, Any]:
    usage = attempt.usage or FakeUsage()
    messages = attempt.messages + len(attempt.write_files)
    total = {k: v * messages for k, v in usage.model_dump().items()}
    record: dict[str, Any] = {"type": "result", "session_id": session, "num_turns": messages,
                              "duration_ms": attempt.delay_ms * messages, "usage": total}
    if attempt.result == "success":
        record.update(subtype="success", is_error=False, result="Done.")
    elif attempt.result == "disguised-error":
        record.update(subtype="success", is_error=True, result=attempt.error_text)
    else:
        record.update(subtype="error", is_error=True, result=attempt.error_text)
    if attempt.cost is not None:
        record["total_cost_usd"] = attempt.cost
    return record


async def _pause(ms: int) -> None:
    if ms:
        await asyncio.sleep(ms / 1000)


def _next_attempt(codon_id: str) -> FakeAttempt:
    script, counter = _load_script()
    attempts = script.attempts_for(codon_id)
    counts = (json.loads(counter.read_text()) if counter is not None and counter.exists()
              else _MEMORY_COUNTS)
    number = counts.get(codon_id, 0)
    counts[codon_id] = number + 1
    if counter is not None:
        atomic_write_bytes(counter, json.dumps(counts).encode())
    return attempts[min(number, len(attempts) - 1)]


_MEMORY_COUNTS: dict[str, int] = {}


def _load_script() -> tuple[FakeScript, Path | None]:
    if FakeHarness.script is not None:
        return FakeHarness.script, None
    path = os.environ.get(SCRIPT_ENV)
    if not path:
        return FakeScript(), None
    script_path = Path(path)
    script = FakeScript.model_validate_json(script_path.read_bytes())
    return script, script_path.with_name(script_path.name + ".attempts.json")


def use_script(script: FakeScript | dict[str, Any] | None) -> None:
    """Set (or clear) the in-process script, and forget attempt counts."""
    FakeHarness.script = (FakeScript.model_validate(script) if isinstance(script, dict)
                          else script)
    _MEMORY_COUNTS.clear()


@hookimpl
def register_harnesses(register: Any) -> None:
    register(FakeHarness)


@hookimpl
def select_harness(harnesses: Mapping[str, type[Harness]]) -> str | None:
    """Claim every model while ``HANKWEAVE_FAKE_ALL=1``; otherwise leave routing alone."""
    # Read at selection time, not import time: tests flip it per run in one process.
    if os.environ.get(CLAIM_ALL_ENV, "").strip() == "1" and FakeHarness.name in harnesses:
        return FakeHarness.name
    return None


@hookimpl
def register_models(register: Any) -> None:
    register(FAKE_MODEL)
    register(ProviderEntry(provider_id="fake", harness="fake", package="hankweave"))
