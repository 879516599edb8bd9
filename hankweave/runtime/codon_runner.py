"""One codon attempt: drive a harness, write its log, and turn its records into state and events.

The harness yields codon-log records; the runner writes each one to the codon log first (the
log is the record of what the agent did), then feeds it to the kernel parser and acts on what it
means: the session's first ``init`` moves the codon to ``running``, assistant messages count and
cost, tool results are matched with their tool uses, and the result sets the final cost.

Extensions (``exhaustWithPrompt``) resume the same session with the extension prompt, appending
to the same log, until a stop condition holds.  The runner can be interrupted (skip, stop, a
budget breach, an idle timeout); it then cancels the harness, which ends its agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hankweave.codonlog import (
    CodonLogParser,
    CodonLogWriter,
    ToolResultBlock,
    catalogue_price,
    final_cost_of,
)
from hankweave.harness import CodonRequest, Harness
from hankweave.models import ModelEntry
from hankweave.runtime.budget import CodonBudget
from hankweave.runtime.failures import classify_api_error_text
from hankweave.state.store import StateStore
from hankweave.state.transitions import (
    AssistantMessageCountData,
    AssistantMessageCountUpdated,
    CodonFinalCostData,
    CodonFinalCostSet,
    CodonMetadata,
    CodonTransitioned,
    CodonTransitionedData,
    CostsIncremented,
    CostsIncrementedData,
    ExtensionCountData,
    ExtensionCountUpdated,
)
from hankweave.state.types import BudgetExceededData, FailureReason, TokenUsage, last_record

log = logging.getLogger(__name__)

Interrupt = Literal["skip", "stop", "budget", "timeout", "idle"]
Emit = Callable[[str, dict[str, Any]], Any]
TOOL_RESULT_LIMIT = 2500


@dataclass
class AttemptSpec:
    """What one codon attempt runs."""

    run_id: str
    codon_id: str
    codon_name: str
    harness: type[Harness]
    model: ModelEntry
    prompt: str
    system_prompt: str | None
    work_dir: Path
    log_path: Path
    session_to_resume: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    extension_prompt: str | None = None
    max_extensions: int = 100
    idle_timeout_s: float | None = None


@dataclass
class AttemptOutcome:
    """How an attempt ended, as the completion logic needs it."""

    exit_code: int = 0
    result_received: bool = False
    success: bool = False
    failure_reason: FailureReason | None = None
    session_established: bool = False
    context_exceeded: bool = False
    extension_count: int = 0
    interrupted: Interrupt | None = None
    budget_exceeded: BudgetExceededData | None = None
    budget_message: str | None = None


class CodonRunner:
    """Runs one attempt of one codon (extensions included)."""

    def __init__(self, spec: AttemptSpec, *, store: StateStore, emit: Emit,
                 budget: CodonBudget | None = None) -> None:
        self.spec = spec
        self.store = store
        self.emit = emit
        self.budget = budget
        self._price = catalogue_price(spec.model)
        self.parser = CodonLogParser(price=self._price)
        self.outcome = AttemptOutcome()
        self._interrupt: Interrupt | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending_tools: dict[str, tuple[str, float]] = {}
        self._crash: BaseException | None = None
        self._awaiting_agent = False

    # -- control --

    def interrupt(self, kind: Interrupt) -> None:
        """Stop the agent: the attempt ends as soon as the harness is cancelled."""
        if self._interrupt is None:
            self._interrupt = kind
        # Cancel only while the attempt waits for the agent's next record.  Elsewhere the task
        # may be inside a state write, and a cancellation there would leave the state log ahead
        # of the in-memory state; the record loop sees the flag once the record in hand is done.
        task = self._task
        if (task is not None and self._awaiting_agent and not task.done()
                and task is not asyncio.current_task()):
            task.cancel()

    @property
    def interrupted(self) -> Interrupt | None:
        return self._interrupt

    # -- running --

    async def run(self) -> AttemptOutcome:
        spec = self.spec
        writer = CodonLogWriter(spec.log_path, append=False)
        try:
            prompt, session = spec.prompt, spec.session_to_resume
            while True:
                ended_cleanly = await self._one_pass(writer, prompt, session)
                if not ended_cleanly or not self._should_extend():
                    break
                self.outcome.extension_count += 1
                await self._extended()
                # The next pass resumes this session with the extension prompt; its evidence
                # starts afresh, the session stays established.
                self.parser.begin_extension()
                prompt = spec.extension_prompt or ""
                session = self.parser.session_id
        finally:
            writer.close()
        return self._finish()

    async def _one_pass(self, writer: CodonLogWriter, prompt: str, session: str | None) -> bool:
        spec = self.spec
        if self._interrupt is not None:
            return False  # interrupted between passes
        request = CodonRequest(prompt=prompt, system_prompt=spec.system_prompt, model=spec.model,
                               work_dir=spec.work_dir, session_id_to_resume=session,
                               env=dict(spec.env), codon_id=spec.codon_id, run_id=spec.run_id)
        try:
            records = spec.harness().run_codon(request)
        except Exception as exc:  # the harness could not start its agent (no SDK, no CLI, ...)
            log.exception("harness %s could not start", spec.harness.name)
            self._crash = exc
            return False
        stream = _with_idle_timeout(records, spec.idle_timeout_s)
        self._task = asyncio.current_task()
        try:
            while True:
                self._awaiting_agent = True
                try:
                    record = await anext(stream)
                except StopAsyncIteration:
                    break
                finally:
                    self._awaiting_agent = False
                if record is _IDLE:
                    self._idle_timeout(writer)
                    return False
                await self._handle(writer.write(record))
                if self._interrupt is not None:
                    return False
        except asyncio.CancelledError:
            if self._interrupt is None:
                raise  # cancelled from outside: let it propagate
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # our own interrupt: consumed here
            return False
        except Exception as exc:  # the harness itself broke
            log.exception("harness %s failed", spec.harness.name)
            self._crash = exc
            return False
        finally:
            self._task = None
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
            with contextlib.suppress(Exception):
                await records.aclose()  # type: ignore[attr-defined]
        return True

    def _should_extend(self) -> bool:
        spec = self.spec
        return bool(
            spec.extension_prompt
            and self.parser.success
            and not self.parser.context_exceeded
            and self._interrupt is None
            and self.outcome.extension_count < spec.max_extensions
            and self.parser.session_id
        )

    async def _extended(self) -> None:
        spec = self.spec
        count = self.outcome.extension_count
        await self.store.transition(ExtensionCountUpdated(data=ExtensionCountData(
            run_id=spec.run_id, codon_id=spec.codon_id, extension_count=count)))
        codon = self._record()
        tokens = getattr(codon, "current_tokens", None) or TokenUsage()
        self.emit("codon.extended", {
            "codonId": spec.codon_id, "codonName": spec.codon_name, "extensionNumber": count,
            "exhaustWithPrompt": spec.extension_prompt or "",
            # A number, as in the catalogue: the session's input + output tokens so far.
            "cumulativeTokens": tokens.input_tokens + tokens.output_tokens,
            "cumulativeCost": getattr(codon, "current_cost", None) or 0.0,
        })

    def _idle_timeout(self, writer: CodonLogWriter) -> None:
        ms = int((self.spec.idle_timeout_s or 0) * 1000)
        record = writer.write({"type": "result", "subtype": "error", "is_error": True,
                               "result": f"Idle timeout: no events received for {ms}ms"})
        self.parser.feed(record)
        self._interrupt = self._interrupt or "idle"

    # -- records --

    def _record(self) -> Any:
        run = self.store.state.run_by_id(self.spec.run_id)
        found = last_record(run, self.spec.codon_id) if run else None
        return found[1] if found else None

    async def _handle(self, record: dict[str, Any]) -> None:
        parsed = self.parser.feed(record)
        if parsed.kind == "init":
            await self._session_started()
        elif parsed.kind == "assistant":
            await self._assistant(parsed.blocks, parsed.usage)
            if parsed.synthetic_timeout:
                self.emit("error", {"message": "API Error: Request timed out.",
                                    "codon": self.spec.codon_id, "fatal": False,
                                    "severity": "codon"})
                self.interrupt("timeout")
        elif parsed.kind == "user":
            self._tool_results(parsed.blocks)
        elif parsed.kind == "result":
            await self._result(record, parsed.usage)

    async def _session_started(self) -> None:
        codon = self._record()
        if codon is None or codon.status != "initializing":
            return  # an extension's init: the session is already established
        spec = self.spec
        await self.store.transition(CodonTransitioned(data=CodonTransitionedData.model_validate({
            "runId": spec.run_id, "codonId": spec.codon_id, "from": "initializing",
            "to": "running", "metadata": CodonMetadata(claude_session_id=self.parser.session_id),
        })))
        self.outcome.session_established = True
        codon = self._record()
        self.emit("codon.started", {
            "codonId": spec.codon_id, "codonName": spec.codon_name,
            "sessionId": self.parser.session_id,
            "previousSessionId": spec.session_to_resume, "startTime": codon.start_time,
        })

    async def _assistant(self, blocks: tuple[dict[str, Any], ...],
                         usage: TokenUsage | None) -> None:
        spec = self.spec
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_use":
                tool_id = str(block.get("id", ""))
                self._pending_tools[tool_id] = (str(block.get("name", "")), time.monotonic())
                self.emit("assistant.action", {
                    "codonId": spec.codon_id, "action": "tool_use", "content": "",
                    "toolName": block.get("name"), "toolInput": block.get("input"),
                    "toolUseId": tool_id})
            elif kind in ("text", "thinking"):
                text = block.get("text") if kind == "text" else block.get("thinking")
                self.emit("assistant.action", {
                    "codonId": spec.codon_id,
                    "action": "message" if kind == "text" else "thinking",
                    "content": str(text or "")})
        codon = self._record()
        if codon is None or codon.status != "running":
            return
        await self.store.transition(AssistantMessageCountUpdated(data=AssistantMessageCountData(
            run_id=spec.run_id, codon_id=spec.codon_id,
            new_count=(codon.assistant_message_count or 0) + 1)))
        if usage is None:
            return
        # State records 0 for a model without a price (as the original); the parser keeps
        # the cost unknown for whoever reads the log.
        cost = self._price(usage) or 0.0
        await self.store.transition(CostsIncremented(data=CostsIncrementedData(
            run_id=spec.run_id, codon_id=spec.codon_id, cost_delta=cost, tokens_delta=usage)))
        self.emit("token.usage", {"codonId": spec.codon_id, **_token_dict(usage),
                                  "totalCost": cost, "modelId": spec.model.full_id})
        if self.budget is not None and self.budget.add_usage(cost, usage) is not None:
            self.interrupt("budget")

    def _tool_results(self, blocks: tuple[dict[str, Any], ...]) -> None:
        for block in blocks:
            if block.get("type") != "tool_result":
                continue
            tool_id = str(block.get("tool_use_id", ""))
            pending = self._pending_tools.pop(tool_id, None)
            if pending is None:
                log.debug("tool result %s has no matching tool use", tool_id)
                continue
            name, seen = pending
            result = ToolResultBlock.model_validate(block)
            text, is_error = result.text, result.failed
            self.emit("tool.result", {
                "codonId": self.spec.codon_id, "toolUseId": tool_id, "toolName": name,
                "result": text if len(text) <= TOOL_RESULT_LIMIT else text[:TOOL_RESULT_LIMIT]
                + "...",
                "truncated": len(text) > TOOL_RESULT_LIMIT, "originalLength": len(text),
                "executionTimeMs": int((time.monotonic() - seen) * 1000), "isError": is_error})

    async def _result(self, record: dict[str, Any], usage: TokenUsage | None) -> None:
        # Error results never set a final cost (the original's rule); success results
        # (disguised errors included) do.
        if record.get("subtype") != "success" or usage is None:
            return
        codon = self._record()
        if codon is None or codon.status != "running":
            return
        spec = self.spec
        final = final_cost_of(record)
        if final is None:
            final = self._price(usage) or codon.current_cost
        await self.store.transition(CodonFinalCostSet(data=CodonFinalCostData(
            run_id=spec.run_id, codon_id=spec.codon_id, final_cost=final, final_tokens=usage)))
        event: dict[str, Any] = {"codonId": spec.codon_id, **_token_dict(usage),
                                 "totalCost": final}
        if isinstance(record.get("modelUsage"), dict):
            event["modelUsage"] = record["modelUsage"]
        else:
            event["modelId"] = spec.model.full_id
        self.emit("token.usage", event)

    # -- the outcome --

    def _finish(self) -> AttemptOutcome:
        out, parser = self.outcome, self.parser
        out.result_received = parser.result_received
        out.success = parser.success
        out.context_exceeded = parser.context_exceeded
        out.interrupted = self._interrupt
        out.session_established = out.session_established or parser.session_id is not None
        if self.budget is not None and self.budget.exceeded is not None:
            out.budget_exceeded = self.budget.exceeded
            out.budget_message = self.budget.message
        text = parser.error_result_text
        if text:
            out.failure_reason = classify_api_error_text(
                text, session_established=out.session_established)
        elif parser.synthetic_timeout:
            out.failure_reason = FailureReason(type="timeout", retriable=True,
                                               message="API Error: Request timed out.")
        elif self._crash is not None:
            out.failure_reason = classify_api_error_text(
                f"{type(self._crash).__name__}: {self._crash}",
                session_established=out.session_established)
        crashed = self._crash is not None or (self._interrupt in ("timeout", "idle"))
        out.exit_code = 1 if crashed else 0
        return out


_IDLE = object()


async def _with_idle_timeout(records: AsyncIterator[dict[str, Any]],
                             timeout: float | None) -> AsyncIterator[Any]:
    """Yield the harness's records; yield :data:`_IDLE` once if none comes within ``timeout``."""
    iterator = records.__aiter__()
    while True:
        try:
            if timeout is None:
                record = await iterator.__anext__()
            else:
                record = await asyncio.wait_for(iterator.__anext__(), timeout)
        except StopAsyncIteration:
            return
        except TimeoutError:
            yield _IDLE
            return
        yield record


def _token_dict(usage: TokenUsage | None) -> dict[str, int]:
    usage = usage or TokenUsage()
    return {"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens,
            "cacheCreationTokens": usage.cache_creation_tokens,
            "cacheReadTokens": usage.cache_read_tokens}
