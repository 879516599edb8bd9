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

The fake exercises the whole harness contract: ``"process": true`` starts a real child process
(an idle ``sleep``) and reports it with ``report_process``, so cancellation and ``aclose()`` are
proven to leave none behind; ``"tools"`` makes tool calls that go through ``authorize_tool``
(a denied call gets the denial as its error result); ``"askHuman"`` asks ``ask_human``;
``"raiseAfterResult"`` raises after the success result, as a known SDK bug does.  A pass with
``request.fork_session`` continues under a new session id made from the resumed one
(``<resumed>-fork-<hex>``), unless the attempt scripts its ``sessionId``.  Its settings
(``harnesses.fake``) are :class:`FakeHarness.Config`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from hankweave.codonlog import (
    LogLine,
    assistant_text,
    assistant_tool_use,
    compact_boundary_record,
    init_record,
    result_record,
    tool_result_record,
)
from hankweave.config.hank import base_codon_id
from hankweave.fsutil import atomic_write_bytes
from hankweave.harness import AttemptContext, CodonRequest, Harness, HarnessConfig
from hankweave.hookspecs import hookimpl
from hankweave.models import ModelCost, ModelEntry, ProviderEntry
from hankweave.state.types import TokenUsage

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

    def tokens(self, times: int = 1) -> TokenUsage:
        return TokenUsage(input_tokens=self.input_tokens * times,
                          output_tokens=self.output_tokens * times,
                          cache_creation_tokens=self.cache_creation_input_tokens * times,
                          cache_read_tokens=self.cache_read_input_tokens * times)


class FakeToolCall(_Model):
    """A tool call the fake agent makes (asked of ``authorize_tool`` first)."""

    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    result: str = "ok"


class FakeAttempt(_Model):
    """One scripted attempt of a codon."""

    session_id: str | None = None
    messages: int = Field(1, ge=0)
    text: str = "Working on it."
    usage: FakeUsage | None = Field(default_factory=FakeUsage)
    write_files: dict[str, str] = Field(default_factory=dict)
    delete_files: list[str] = Field(default_factory=list)
    cost: float | None = None
    result: Literal["success", "error", "disguised-error", "max-turns", "none"] = "success"
    """``max-turns``: the ``error_max_turns`` result an agent writes at its turn limit."""
    error_text: str = "API Error: 500 internal server error"
    raise_error: str | None = None
    delay_ms: int = 0
    hang: bool = False
    context_exceeded: bool = False
    process: bool = False
    """Start a real (idle) child process and report it, as a CLI-driving harness would."""
    tools: list[FakeToolCall] = Field(default_factory=list)
    ask_human: str | None = None
    """A question for ``ask_human``; the reply becomes the tool result."""
    ask_options: list[str] | None = None
    """The answers ``ask_human`` allows (None: free text)."""
    parallel: bool = False
    """Make the tool calls and the question together, as parallel tool calls: all are asked
    of the kernel at once, and their results follow."""
    raise_after_result: str | None = None
    """Raise this error after the success result (an SDK bug the runtime must shrug off)."""
    stderr: str | None = None
    """Text the agent writes to its stderr (the attempt's stderr file)."""
    warn: str | None = None
    """A warning the harness gives the user (``AttemptContext.warn``) as the attempt starts."""


class FakeScript(_Model):
    codons: dict[str, FakeAttempt | list[FakeAttempt]] = Field(default_factory=dict)
    default: FakeAttempt = Field(default_factory=lambda: FakeAttempt.model_validate({}))

    def attempts_for(self, codon_id: str) -> list[FakeAttempt]:
        script = self.codons.get(codon_id) or self.codons.get(base_codon_id(codon_id))
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

    class Config(HarnessConfig):
        tools: list[str] = Field(default_factory=lambda: ["Read", "Write", "Bash"])
        """The tool names the fake's ``init`` record lists."""
        session_prefix: str = "fake"
        """How the fake names sessions it makes up: ``<prefix>-<codon>-<pid>``."""

    config: Config

    def __init__(self, config: HarnessConfig | None = None) -> None:
        super().__init__(config)
        self._children: list[subprocess.Popen[bytes]] = []

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[LogLine]:
        attempt = _next_attempt(request.codon_id)
        session = attempt.session_id or _resumed(request) or (
            f"{self.config.session_prefix}-{request.codon_id.replace('#', '-')}-{os.getpid()}")
        if attempt.process:
            await self._start_process(context)
        if attempt.stderr:
            context.stderr.write(attempt.stderr)
        if attempt.warn:
            context.warn(attempt.warn)
        yield init_record(session, cwd=request.work_dir, tools=self.config.tools,
                          model=request.model.model_id)
        if attempt.raise_error:
            raise RuntimeError(attempt.raise_error)
        usage = attempt.usage.tokens() if attempt.usage is not None else None
        for number in range(attempt.messages):
            await _pause(attempt.delay_ms)
            yield assistant_text(f"{attempt.text} ({number + 1}/{attempt.messages})",
                                 model=FAKE_MODEL.model_id, usage=usage,
                                 message_id=f"msg_fake{number}")
        for index, (path, content) in enumerate(sorted(attempt.write_files.items())):
            tool_id = f"toolu_fake{index}"
            # As an agent does: the call is logged, then the tool runs, then its result.
            yield assistant_tool_use("Write", {"file_path": path, "content": content},
                                     tool_use_id=tool_id, model=FAKE_MODEL.model_id, usage=usage,
                                     message_id=f"msg_fakewrite{index}")
            target = request.work_dir / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            yield tool_result_record(tool_id, f"File written: {path}")
        async for record in self._tool_calls(attempt, context, usage):
            yield record
        for path in attempt.delete_files:
            (request.work_dir / path).unlink(missing_ok=True)
        if attempt.context_exceeded:
            yield compact_boundary_record(session)
        if attempt.hang:
            await asyncio.Event().wait()  # until cancelled
        if attempt.result == "none":
            return
        yield _result(attempt, session)
        if attempt.raise_after_result:
            raise RuntimeError(attempt.raise_after_result)

    async def _tool_calls(self, attempt: FakeAttempt, context: AttemptContext,
                          usage: TokenUsage | None) -> AsyncIterator[LogLine]:
        """The scripted tool calls and question, each decided by the kernel's policies."""
        calls: list[tuple[str, dict[str, Any], str]] = [
            (call.name, call.input, call.result) for call in attempt.tools]
        if attempt.ask_human is not None:
            question: dict[str, Any] = {"question": attempt.ask_human}
            if attempt.ask_options:
                question["options"] = attempt.ask_options
            calls.append(("ask_human", question, ""))
        for index, (name, tool_input, _) in enumerate(calls):
            yield assistant_tool_use(name, tool_input, tool_use_id=f"toolu_fakecall{index}",
                                     model=FAKE_MODEL.model_id, usage=usage,
                                     message_id=f"msg_fakecall{index}")
            if not attempt.parallel:
                yield await _call_tool(context, index, *calls[index])
        if attempt.parallel:
            for record in await asyncio.gather(*(
                    _call_tool(context, index, *call) for index, call in enumerate(calls))):
                yield record

    async def _start_process(self, context: AttemptContext) -> None:
        child = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=context.stderr.fileno())
        self._children.append(child)
        try:
            await context.report_process(child.pid)
        except BaseException:
            self._stop_children()
            raise

    def _stop_children(self) -> None:
        for child in self._children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self._children.clear()

    async def aclose(self) -> None:
        if self._children:
            await asyncio.to_thread(self._stop_children)


FORK_MARK = "-fork-"


def _resumed(request: CodonRequest) -> str | None:
    """The session a pass continues: the one to resume, or for a fork a new id made from it
    (``<resumed>-fork-<hex>``; a fork of a fork replaces the mark, so ids stay short)."""
    resumed = request.session_id_to_resume
    if not resumed or not request.fork_session:
        return resumed
    return f"{resumed.partition(FORK_MARK)[0]}{FORK_MARK}{uuid.uuid4().hex[:8]}"


async def _call_tool(context: AttemptContext, index: int, name: str,
                     tool_input: Mapping[str, Any], result: str) -> LogLine:
    """One scripted call, decided by the kernel: its tool result record."""
    tool_id = f"toolu_fakecall{index}"
    if name == "ask_human":
        reply = await context.ask_human(str(tool_input["question"]), tool_input.get("options"))
        return tool_result_record(tool_id, reply.answer if reply.answer is not None
                                  else reply.message, is_error=not reply.available)
    decision = await context.authorize_tool(name, tool_input)
    return tool_result_record(tool_id, result if decision.allowed else decision.message,
                              is_error=not decision.allowed)


def _result(attempt: FakeAttempt, session: str) -> LogLine:
    usage = attempt.usage or FakeUsage()
    messages = attempt.messages + len(attempt.write_files) + len(attempt.tools) + (
        attempt.ask_human is not None)
    success = attempt.result == "success"
    if attempt.result == "max-turns":
        return result_record(session_id=session, success=False, subtype="error_max_turns",
                             usage=usage.tokens(messages), total_cost_usd=attempt.cost,
                             num_turns=messages, duration_ms=attempt.delay_ms * messages)
    return result_record(
        session_id=session, success=attempt.result != "error",
        is_error=not success, text="Done." if success else attempt.error_text,
        usage=usage.tokens(messages), total_cost_usd=attempt.cost, num_turns=messages,
        duration_ms=attempt.delay_ms * messages)


async def _pause(ms: int) -> None:
    if ms:
        await asyncio.sleep(ms / 1000)


def _next_attempt(codon_id: str) -> FakeAttempt:
    script, counter = _load_script()
    attempts = script.attempts_for(codon_id)
    if len(attempts) == 1:
        return attempts[0]  # every attempt plays the same: nothing to count
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
