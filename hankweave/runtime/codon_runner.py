"""One codon attempt's agent: drive a harness, write its log, turn its records into state and events.

The harness yields codon-log records; the runner writes each one to the codon log first (the
log is the record of what the agent did), then feeds it to the kernel parser and acts on what it
means: the session's first ``init`` moves the codon to ``running``, assistant messages count and
cost, tool results are matched with their tool uses, and the result sets the final cost.

One harness instance serves the whole attempt: extensions (``exhaustWithPrompt``) call it again
to resume the same session with the extension prompt, appending to the same log, until a stop
condition holds; then its ``aclose()`` runs, bounded by the harness's ``close_timeout_s``, after
which every process it reported is killed.  The runner can be interrupted (skip, stop, a budget
breach, an idle timeout); it then cancels the harness's iteration, which ends its agent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from hankweave.codonlog import (
    TURN_LIMIT_SUBTYPE,
    CodonLogParser,
    CodonLogWriter,
    LogModel,
    ParsedRecord,
    ToolResultBlock,
    catalogue_price,
    error_result,
    final_cost_of,
)
from hankweave.faults import kill_point
from hankweave.harness import (
    AgentStartError,
    AttemptContext,
    AttemptPolicy,
    CodonLogRecord,
    CodonRequest,
    Harness,
    HarnessConfig,
)
from hankweave.processes import AGENT_MARKER_ENV, end_processes_now, marked_processes
from hankweave.proxy.types import Refusal
from hankweave.runtime.allocation import Breach
from hankweave.runtime.budget import CodonBudget, ceiling_name, describe_amount
from hankweave.runtime.failures import classify_api_error_text, turn_limit_failure
from hankweave.runtime.file_events import FileTracker
from hankweave.runtime.notices import GivenWarnings
from hankweave.runtime.reporter import Reporter
from hankweave.state.costs import codon_cost_complete
from hankweave.state.store import StateStore
from hankweave.state.transitions import (
    AgentProcessData,
    AgentProcessReported,
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

Interrupt = Literal["skip", "stop", "budget", "timeout", "idle", "human"]
"""``human``: an interruption ends the attempt to wait for a person (runtime.humans)."""
BudgetDecision: TypeAlias = float | Literal["reject", "wait"]
"""A person's answer at an ``ask`` ceiling: the amount granted, a rejection, or ``wait``:
the run stops to wait for the answer (it resumes this attempt later)."""
AskBudget: TypeAlias = Callable[[Breach], Awaitable[BudgetDecision]]
BUDGET_EXTENDED_PROMPT = (
    "A person raised the budget limit you reached (the {ceiling}) by {amount}. Continue your"
    " task from where you stopped.")
TOOL_RESULT_LIMIT = 2500
MAX_REFUSALS = 5
"""Refused requests an agent may make past a ceiling before it is stopped."""
REFUSAL_GRACE_S = 10.0
"""How long an agent whose request the LLM proxy refused at a ceiling has to end its turn."""
BUSY_IDLE_TIMEOUT_S = 300.0
"""The idle limit while the harness says its agent is busy (``AttemptContext.busy()``), when
that is longer than the idle timeout: the original pi watchdog's ``max(idle, 300 s)``."""
TIMEOUT_RESULT_GRACE_S = 2.0
"""After the CLI's synthetic "Request timed out" message, how long to keep reading for the
``result`` that carries the session's real cost (the original drains the log for up to two
parse intervals of 1 s after the agent exits)."""


@dataclass
class AttemptSpec:
    """What one codon attempt runs: the first pass's request and what the attempt needs."""

    request: CodonRequest
    harness: type[Harness]
    log_path: Path
    stderr_path: Path
    state_dir: Path
    harness_config: HarnessConfig | None = None
    """The validated ``harnesses.<name>`` settings (None: the harness's defaults)."""
    extension_prompt: str | None = None
    max_extensions: int = 100
    idle_timeout_s: float | None = None
    policy: AttemptPolicy = dataclasses.field(default_factory=AttemptPolicy)
    ask_budget: AskBudget | None = None
    """Asks a person at a ceiling whose ``onExceeded`` is ``ask`` (None: no ceiling asks)."""


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
    """Runs the agent of one attempt of one codon (extensions included)."""

    def __init__(self, spec: AttemptSpec, *, store: StateStore, reporter: Reporter,
                 budget: CodonBudget | None = None,
                 given_warnings: GivenWarnings | None = None,
                 files: FileTracker | None = None) -> None:
        self.spec = spec
        self.given_warnings = given_warnings
        self.files = files
        """Reports the files the agent writes (``file.updated``); None: nothing is."""
        self.store = store
        self.reporter = reporter
        self.budget = budget
        self._price = catalogue_price(spec.request.model)
        self.parser = CodonLogParser(price=self._price)
        self.outcome = AttemptOutcome()
        self._interrupt: Interrupt | None = None
        self._stop_signal: asyncio.Future[None] | None = None
        self._pending_tools: dict[str, tuple[str, float]] = {}
        self._crash: BaseException | None = None
        self._warned_unpriced = False
        self._timeout_deadline: float | None = None
        """Set by a synthetic timeout: the loop time until which its result is awaited."""
        self._context: AttemptContext | None = None
        self._asking = False
        """A person is being asked at a ceiling (runtime.humans.HumanLoop.ask_budget)."""
        self._deciding: asyncio.Future[str | None] | None = None
        """The person's decision at the current breach, shared by the requests the LLM proxy
        holds and the pass that ends at it: one breach is one question."""
        self._ask_stop: asyncio.Future[None] | None = None
        self.proxied = False
        """The agent's requests go through the LLM proxy, which holds a ceiling between two
        messages: past it, the agent is not stopped at once; its next request is refused (the
        agent ends its turn at the provider error), or waits for the person at a ceiling that
        asks.  Tool calls the crossing message made still run."""
        self._refusals = 0
        self._refusal_grace: asyncio.TimerHandle | None = None
        self._closing = False
        self._before_pass: tuple[float | None, TokenUsage] | None = None
        """The codon's cost (None: unknown) and tokens when the current extension pass began:
        a result's totals cover its own pass, so an extension's are added to these."""

    @property
    def codon_id(self) -> str:
        return self.spec.request.codon_id

    # -- control --

    def interrupt(self, kind: Interrupt) -> None:
        """Stop the agent: the attempt stops waiting for it at once, and its iteration is
        cancelled (the harness then ends its agent, within ``close_timeout_s``).  A stop or a
        skip overrides a budget breach (it may be waiting for a person's answer)."""
        if self._interrupt is None or (self._interrupt == "budget" and kind in ("stop", "skip")):
            self._interrupt = kind
        # Only the wait for the agent's next record is woken; a state write in progress is
        # never cancelled, and the record loop sees the flag once the record in hand is done.
        for stop in (self._stop_signal, self._ask_stop):
            if stop is not None and not stop.done():
                stop.set_result(None)

    # -- running --

    def _warn(self, message: str) -> None:
        """A harness's warning (``AttemptContext.warn``): an ``error`` event of severity
        ``warning``, once per execution."""
        if self.given_warnings is None or self.given_warnings.first_time(message):
            self.reporter.error(message, codon=self.codon_id, severity="warning")

    async def run(self) -> AttemptOutcome:
        spec = self.spec
        writer = CodonLogWriter(spec.log_path, append=False)
        context = AttemptContext(
            request=spec.request, log_path=spec.log_path, stderr_path=spec.stderr_path,
            state_dir=spec.state_dir, on_process=self._process_reported, policy=spec.policy,
            idle_timeout_s=spec.idle_timeout_s,
            on_warning=self._warn)
        self._context = context
        harness: Harness | None = None
        try:
            # Without a settings section a harness is built with no arguments (its defaults).
            harness = spec.harness(spec.harness_config) if spec.harness_config is not None \
                else spec.harness()
            request = spec.request
            while True:
                ended = await self._one_pass(harness, context, writer, request)
                if self._unasked_breach():
                    self._interrupt = "budget"  # the proxy held no request: ask now
                if self._interrupt == "budget" and (granted := await self._decide()):
                    # As a resume after the person answered: calls the cut message made are
                    # run (a harness that keeps them), else the agent is told and goes on.
                    request = self._next_pass(granted, extension=False,
                                              resumes_interruption=True)
                    continue
                if not (ended and self._should_extend()):
                    break
                self.outcome.extension_count += 1
                await self._extended()
                request = self._next_pass(spec.extension_prompt or "", extension=True)
        except Exception as exc:  # the harness could not be built (a broken config or plugin)
            log.exception("harness %s could not start", spec.harness.name)
            self._crash = exc
        finally:
            self._closing = True
            if self._refusal_grace is not None:
                self._refusal_grace.cancel()
            if harness is not None:
                await self._bounded(harness.aclose(), "aclose()", context)
                # Closed, it should have ended what it started: nothing outlives the attempt,
                # neither a reported process nor one that carries the attempt's marker (looked
                # for when the agent ran in processes of its own: a scan of every process).
                _kill(context.reported_pids, f"harness {spec.harness.name} left it running")
                marker = spec.request.env.get(AGENT_MARKER_ENV)
                if marker and context.reported_pids:
                    _kill(tuple(marked_processes(marker)),
                          f"the agent of {self.codon_id} left it running")
            context.stderr.close()
            writer.close()
        await self._count_unreported()
        return self._finish()

    async def _one_pass(self, harness: Harness, context: AttemptContext,
                        writer: CodonLogWriter, request: CodonRequest) -> bool:
        """One call of the harness; True when it ended by itself, without a failure."""
        if self._interrupt is not None:
            return False  # interrupted between passes
        records = harness.run_codon(request, context)
        iterator = records.__aiter__()
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                pending = self._next_record(iterator)
                record = await self._wait_for(pending)
                if record is _END:
                    break
                if record is _IDLE:
                    self._idle_timeout(writer)
                    return False
                if record is _STOPPED:
                    return False
                pending = None
                await self._handle(record, writer.write(record))
                kill_point("harness.message")  # test-only (docs/crash-testing.md)
                if self._interrupt is not None:
                    return False
        except Exception as exc:  # the harness itself broke
            pending = None
            if self.parser.success:
                # The session already succeeded (a known SDK quirk raises after its result):
                # the codon keeps its success; the error is only reported.
                log.warning("harness %s raised after its success result: %s",
                            self.spec.harness.name, exc)
                self.reporter.error(
                    f"The agent reported an error after its result, ignored: "
                    f"{type(exc).__name__}: {exc}", codon=self.codon_id, severity="warning")
                return True
            log.exception("harness %s failed", self.spec.harness.name)
            self._crash = exc
            return False
        finally:
            await self._close_iteration(records, pending, context)
        return True

    def _next_record(self, iterator: AsyncIterator[CodonLogRecord]) -> asyncio.Future[Any]:
        """The harness's next record (or :data:`_END`), fetched in a task of its own so that
        an interrupt or the idle timeout can stop waiting for it at once."""
        async def fetch() -> Any:
            try:
                return await iterator.__anext__()
            except StopAsyncIteration:
                return _END

        return asyncio.ensure_future(fetch())

    async def _wait_for(self, pending: asyncio.Future[Any]) -> Any:
        """The record ``pending`` brings, or :data:`_STOPPED` / :data:`_IDLE` when an interrupt
        or the idle timeout comes first (``pending`` is then cancelled)."""
        loop = asyncio.get_running_loop()
        self._stop_signal = stop = loop.create_future()
        if self._interrupt is not None:
            stop.set_result(None)
        wait = self.spec.idle_timeout_s
        if self._timeout_deadline is not None:
            left = max(0.0, self._timeout_deadline - loop.time())
            wait = left if wait is None else min(wait, left)
        began = loop.time()
        try:
            while True:
                done, _ = await asyncio.wait({pending, stop}, timeout=wait,
                                             return_when=asyncio.FIRST_COMPLETED)
                if done or wait is None or self._timeout_deadline is not None:
                    break
                if self._asking or (self._context is not None
                                    and self._context.waiting_for_human):
                    began = loop.time()  # a person takes their time: no idle limit meanwhile
                    continue
                # Idle for the limit, but the agent says it is busy (a tool runs): the
                # original's busy limit applies.
                busy_left = self._busy_limit() - (loop.time() - began)
                if busy_left <= 0:
                    break
                wait = busy_left
        except asyncio.CancelledError:
            pending.cancel()
            raise
        finally:
            self._stop_signal = None
        if pending in done:
            return pending.result()  # what the harness raised propagates from here
        pending.cancel()
        if not stop.done() and self._timeout_deadline is not None \
                and loop.time() >= self._timeout_deadline:
            self.interrupt("timeout")  # no result came after the timeout: stop waiting
        return _STOPPED if stop.done() else _IDLE

    def _busy_limit(self) -> float:
        """How long a busy agent may go without a record (0 when it is not busy)."""
        context = self._context
        if context is None or not context.busy_now or self.spec.idle_timeout_s is None:
            return 0.0
        return max(self.spec.idle_timeout_s, BUSY_IDLE_TIMEOUT_S)

    def _timed_out(self) -> None:
        """The CLI said the request timed out: the session is over, but its ``result`` (with
        the real cost) usually follows; read on for a short while to take it."""
        if self._timeout_deadline is None:
            self._timeout_deadline = asyncio.get_running_loop().time() + TIMEOUT_RESULT_GRACE_S

    async def _close_iteration(self, records: Any, pending: asyncio.Future[Any] | None,
                               context: AttemptContext) -> None:
        """Let the harness end its iteration (cancelled, or left at a record), within its
        ``close_timeout_s``; past that, kill what it reported."""
        harness = self.spec.harness
        if pending is not None and not pending.done():
            done, _ = await asyncio.wait({pending}, timeout=harness.close_timeout_s)
            if not done:
                log.warning("harness %s did not stop within %.1fs; killing its processes",
                            harness.name, harness.close_timeout_s)
                pending.add_done_callback(_consume)
                _kill(context.reported_pids, f"harness {harness.name} ignored the stop")
                return
        if pending is not None:
            _consume(pending)
        aclose = getattr(records, "aclose", None)
        if aclose is not None:
            await self._bounded(aclose(), "closing its iteration", context)

    async def _bounded(self, closing: Any, what: str, context: AttemptContext) -> None:
        """Await a harness's cleanup for at most ``close_timeout_s``; past that (or if it
        fails), kill every process the harness reported, so none outlives the attempt."""
        harness = self.spec.harness
        try:
            await asyncio.wait_for(closing, harness.close_timeout_s)
            return
        except TimeoutError:
            log.warning("harness %s: %s took longer than %.1fs; killing its processes",
                        harness.name, what, harness.close_timeout_s)
        except Exception as exc:
            log.warning("harness %s: %s failed: %s", harness.name, what, exc)
        _kill(context.reported_pids, f"harness {harness.name} overran {what}")

    def _next_pass(self, prompt: str, *, extension: bool,
                   resumes_interruption: bool = False) -> CodonRequest:
        """A pass that resumes this attempt's session with ``prompt``: its evidence starts
        afresh, the session stays established (without a session yet, the first request
        starts again)."""
        self._before_pass = self._codon_totals()
        self.parser.begin_extension()
        if self.parser.session_id is None:
            return self.spec.request
        return dataclasses.replace(self.spec.request, prompt=prompt,
                                   session_id_to_resume=self.parser.session_id,
                                   extension=extension, fork_session=False,
                                   resumes_interruption=resumes_interruption)

    # -- the LLM proxy's questions (hankweave.runtime.metering.ProxyGate) --

    async def admit_request(self) -> Refusal | None:
        """Whether the agent's next request may go: refused past a ceiling (the attempt
        stops at it), held at a ceiling that asks until the person decides."""
        self.proxied = True
        budget = self.budget
        if budget is not None and budget.breach is None and self._interrupt is None:
            budget.check()  # a time limit reached between two messages
        breach = budget.breach if budget is not None else None
        if budget is None or breach is None:
            if self._interrupt is not None:
                return Refusal("stopping", f"codon {self.codon_id} is stopping")
            return None
        if self.spec.ask_budget is not None and self._interrupt is None:
            if await self._decide() is not None:
                return None  # raised: the request goes on, the agent never knew
            if self._interrupt not in (None, "budget"):  # stopped, skipped, left to wait
                return Refusal("stopping", f"codon {self.codon_id} is stopping")
        self._refused()
        # What the attempt has used by now (requests in flight at the breach have added to it).
        return Refusal("budget", dataclasses.replace(
            breach, used=budget.used(breach.currency)).message)

    def _refused(self) -> None:
        """A request was refused at a ceiling: the agent should end its turn at the error
        (the Claude CLI tries twice more first).  One that keeps asking, or is still at it
        after :data:`REFUSAL_GRACE_S`, is stopped."""
        self._refusals += 1
        if self._refusals > MAX_REFUSALS:
            self.interrupt("budget")
        elif self._refusal_grace is None and not self._closing:
            self._refusal_grace = asyncio.get_running_loop().call_later(
                REFUSAL_GRACE_S, self.interrupt, "budget")

    def metered(self, usage: TokenUsage, cost: float | None) -> float | None:
        """Account one answer the proxy passed on, at ``cost`` (its model's catalogue price;
        None: the codon's model's); return the cost counted."""
        if cost is None:
            cost = self._price(usage)
        if self.budget is not None:
            self.budget.add_metered(cost or 0.0, usage)  # a breach holds the next request
            self.report_warnings()
        return cost

    async def _count_unreported(self) -> None:
        """Count what the proxy measured beyond what the agent reported (an answer cut or
        refused mid-stream, a side request the agent keeps to itself): the record's cost and
        tokens become the larger of the two, so the state, every later ceiling and a resume
        see what was really spent."""
        budget = self.budget
        codon = self._record()
        if budget is None or budget.metered.tokens is None or codon is None \
                or codon.status != "running":
            return
        recorded = codon.current_tokens or TokenUsage()
        measured = budget.metered.tokens
        extra_cost = budget.metered.dollars - codon.current_cost
        extra = TokenUsage(**{
            name: max(0, getattr(measured, name) - getattr(recorded, name))
            for name in ("input_tokens", "output_tokens", "cache_read_tokens",
                         "cache_creation_tokens")})
        if extra_cost <= 1e-9 and extra == TokenUsage():
            return
        request = self.spec.request
        await self.store.transition(CostsIncremented(data=CostsIncrementedData(
            run_id=request.run_id, codon_id=request.codon_id,
            cost_delta=max(0.0, extra_cost), tokens_delta=extra)))
        if extra_cost > 1e-9:
            more = describe_amount("cost", extra_cost)
            self.reporter.info(
                f"Codon {self.codon_id}: the LLM proxy measured {more} more than its agent"
                " reported (an answer cut off or refused, a side request); it is counted in"
                " the codon's cost")

    def _unasked_breach(self) -> bool:
        """The pass ended by itself past a ceiling that asks, with no request held there
        (the agent's last answer crossed it)."""
        return (self.proxied and self._interrupt is None and self.budget is not None
                and self.budget.breach is not None and self.spec.ask_budget is not None)

    def _decide(self) -> asyncio.Future[str | None]:
        """The person's decision at the current breach (see :meth:`_ask_budget`), asked once
        however many requests wait for it."""
        if self._deciding is None:
            self._deciding = asyncio.ensure_future(self._ask_budget())
            self._deciding.add_done_callback(self._decided)
        return asyncio.shield(self._deciding)

    def _decided(self, decision: asyncio.Future[str | None]) -> None:
        # A raised ceiling can be reached again, and then asks again; a refusal is final.
        if not decision.cancelled() and decision.exception() is None \
                and decision.result() is not None:
            self._deciding = None

    async def _ask_budget(self) -> str | None:
        """At a breached ``ask`` ceiling, what a person decides: the prompt that tells the
        agent of the extension when they raised it (the attempt goes on), None when they
        rejected it
        (the breach ends the attempt) or the run stops to wait for them (``human``).  The
        time spent waiting for them is not counted against any time limit."""
        budget, ask = self.budget, self.spec.ask_budget
        breach = budget.breach if budget is not None else None
        if budget is None or breach is None or ask is None:
            return None
        loop = asyncio.get_running_loop()
        began = loop.time()
        self._ask_stop = stop = loop.create_future()
        if self._interrupt not in (None, "budget"):
            stop.set_result(None)
        limit, used = budget.ceiling_of(breach)  # as the person knows the ceiling
        asking = asyncio.ensure_future(ask(dataclasses.replace(breach, limit=limit, used=used)))
        self._asking = True  # time waiting is no use of a time limit: no warnings meanwhile
        try:
            await asyncio.wait({asking, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._ask_stop = None
            self._asking = False
            budget.pause(loop.time() - began)
        if not asking.done():  # a stop or a skip came first; the ask stays pending in state
            asking.cancel()
            return None
        decision = asking.result()
        if decision == "wait":
            self._interrupt = None
            self.interrupt("human")  # a pass the proxy holds ends too
            return None
        if decision == "reject" or self._interrupt not in (None, "budget"):
            return None
        budget.extend()  # the person's grant is recorded: HumanLoop.ask_budget
        self._interrupt = None
        return BUDGET_EXTENDED_PROMPT.format(
            ceiling=ceiling_name(breach.currency, limit),
            amount=describe_amount(breach.currency, float(decision)))

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
        request = self.spec.request
        count = self.outcome.extension_count
        await self.store.transition(ExtensionCountUpdated(data=ExtensionCountData(
            run_id=request.run_id, codon_id=request.codon_id, extension_count=count)))
        codon = self._record()
        tokens = getattr(codon, "current_tokens", None) or TokenUsage()
        self.reporter.codon_extended(
            codon_id=request.codon_id, codon_name=request.codon_name, number=count,
            prompt=self.spec.extension_prompt or "",
            # A number, as in the catalogue: the session's input + output tokens so far.
            cumulative_tokens=tokens.input_tokens + tokens.output_tokens,
            cumulative_cost=getattr(codon, "current_cost", None) or 0.0)

    def _idle_timeout(self, writer: CodonLogWriter) -> None:
        ms = int((self.spec.idle_timeout_s or 0) * 1000)
        record = writer.write(error_result(f"Idle timeout: no events received for {ms}ms",
                                           session_id=self.parser.session_id))
        self.parser.feed(record)
        self._interrupt = self._interrupt or "idle"

    async def _process_reported(self, pid: int) -> None:
        request = self.spec.request
        await self.store.transition(AgentProcessReported(data=AgentProcessData(
            run_id=request.run_id, codon_id=request.codon_id, pid=pid)))

    # -- records --

    def _record(self) -> Any:
        request = self.spec.request
        run = self.store.state.run_by_id(request.run_id)
        found = last_record(run, request.codon_id) if run else None
        return found[1] if found else None

    async def _handle(self, record: CodonLogRecord, line: dict[str, Any]) -> None:
        """Act on one record, as yielded (a model is not validated again) and as written."""
        parsed = self.parser.feed(record if isinstance(record, LogModel) else line, raw=line)
        if parsed.kind == "init":
            await self._session_started()
        elif parsed.kind == "assistant":
            await self._assistant(parsed)
            if parsed.synthetic_timeout:
                self.reporter.error("API Error: Request timed out.", codon=self.codon_id,
                                    severity="codon")
                self._timed_out()
        elif parsed.kind == "user":
            self._tool_results(parsed.blocks)
        elif parsed.kind == "result" and parsed.ignored_result:
            self.reporter.error(f"The agent reported an error after its result, ignored:"
                                f" {parsed.error_text}", codon=self.codon_id, severity="warning")
        elif parsed.kind == "result":
            await self._result(line, parsed.usage)
            if self.parser.synthetic_timeout:
                self.interrupt("timeout")  # the session's real cost is in: stop waiting

    async def _session_started(self) -> None:
        codon = self._record()
        if codon is None or codon.status != "initializing":
            return  # an extension's init: the session is already established
        request = self.spec.request
        await self.store.transition(CodonTransitioned(data=CodonTransitionedData.model_validate({
            "runId": request.run_id, "codonId": request.codon_id, "from": "initializing",
            "to": "running", "metadata": CodonMetadata(claude_session_id=self.parser.session_id),
        })))
        self.outcome.session_established = True
        self.reporter.codon_started(
            codon_id=request.codon_id, codon_name=request.codon_name,
            session_id=self.parser.session_id or "",
            previous_session_id=request.session_id_to_resume,
            start_time=self._record().start_time)
        if self.files is not None:
            self.files.codon_started()

    async def _assistant(self, parsed: ParsedRecord) -> None:
        request = self.spec.request
        now = time.monotonic()
        for block in parsed.blocks:
            if block.get("type") == "tool_use":
                tool_id, name = str(block.get("id", "")), str(block.get("name", ""))
                self._pending_tools[tool_id] = (name, now)
                tool_input = block.get("input")
                if self.files is not None and isinstance(tool_input, Mapping):
                    self.files.tool_used(tool_id, name, tool_input)
        self.reporter.assistant_blocks(request.codon_id, parsed.blocks)
        codon = self._record()
        if codon is None or codon.status != "running":
            return
        # Every assistant line counts, as in the original's state.json; a message the CLI
        # writes as several frames is one turn.
        turns = (codon.assistant_turn_count or 0) + (1 if parsed.new_message else 0)
        await self.store.transition(AssistantMessageCountUpdated(
            data=AssistantMessageCountData(
                run_id=request.run_id, codon_id=request.codon_id,
                new_count=(codon.assistant_message_count or 0) + 1, new_turn_count=turns)))
        usage = parsed.usage_delta
        if usage is None or usage == TokenUsage():
            return
        cost = parsed.cost_delta  # None: the model has no price; never counted as 0
        if cost is None:
            self._warn_unpriced()
        await self.store.transition(CostsIncremented(data=CostsIncrementedData(
            run_id=request.run_id, codon_id=request.codon_id, cost_delta=cost,
            tokens_delta=usage)))
        self.reporter.token_usage(codon_id=request.codon_id, usage=usage, cost=cost,
                                  model_id=request.model.full_id)
        if self.budget is not None:
            breached = self.budget.add_usage(cost or 0.0, usage) is not None
            self.report_warnings()
            if breached and not self.proxied:  # through the proxy, its next request is held
                self.interrupt("budget")

    def report_warnings(self) -> None:
        """``budget.warning`` for each ceiling fraction reached since the last call."""
        if self.budget is None or self._asking:
            return
        for warning in self.budget.warnings():
            self.reporter.budget_warning(self.codon_id, warning)

    def _warn_unpriced(self) -> None:
        if not self._warned_unpriced:
            self._warned_unpriced = True
            self.reporter.error(
                f"Model {self.spec.request.model.full_id} has no price in the model catalogue:"
                " this codon's cost is unknown (recorded as such, not as $0), and dollar"
                " budgets cannot count it", codon=self.codon_id, severity="warning")

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
            self.reporter.tool_result(
                codon_id=self.codon_id, tool_use_id=tool_id, tool_name=name, text=result.text,
                limit=TOOL_RESULT_LIMIT, elapsed_ms=int((time.monotonic() - seen) * 1000),
                is_error=result.failed)
            if self.files is not None:
                self.files.tool_finished(tool_id, result.failed)

    async def _result(self, record: Mapping[str, Any], usage: TokenUsage | None) -> None:
        # Error results never set a final cost (the original's rule); success results
        # (disguised errors included) do, with their usage or, without one, their cost alone.
        final = final_cost_of(record)
        if record.get("subtype") != "success" or (usage is None and final is None):
            return
        codon = self._record()
        if codon is None or codon.status != "running":
            return
        request = self.spec.request
        # The result's own total, else the price of its usage, else the running sum if that
        # is complete: an unknown cost stays unknown.  The result's totals cover its pass; an
        # extension's are added to what the earlier passes of the attempt spent.
        if final is None and usage is not None:
            final = self._price(usage)
        before = self._before_pass
        if before is not None and final is not None:
            final = None if before[0] is None else before[0] + final
        if before is not None and usage is not None:
            usage = before[1] + usage
        if final is None and codon_cost_complete(codon):
            final = codon.current_cost
        if usage is None:
            usage = codon.current_tokens  # the cost is the result's; the tokens the messages'

        await self.store.transition(CodonFinalCostSet(data=CodonFinalCostData(
            run_id=request.run_id, codon_id=request.codon_id, final_cost=final,
            final_tokens=usage)))
        model_usage = record.get("modelUsage")
        self.reporter.token_usage(
            codon_id=request.codon_id, usage=usage, cost=final, model_id=request.model.full_id,
            model_usage=model_usage if isinstance(model_usage, Mapping) else None)

    def _codon_totals(self) -> tuple[float | None, TokenUsage]:
        codon = self._record()
        tokens = getattr(codon, "current_tokens", None) or TokenUsage()
        cost = codon.current_cost if codon is not None and codon_cost_complete(codon) else None
        return cost, tokens

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
        result = parser.result
        if result is not None and result.subtype == TURN_LIMIT_SUBTYPE:
            out.failure_reason = turn_limit_failure(result.num_turns, self.spec.harness.name)
        elif parser.synthetic_timeout:
            # Whatever the result after it says (a disguised success), this is a timeout.
            out.failure_reason = FailureReason(type="timeout", retriable=True,
                                               message="API Error: Request timed out.")
        elif text:
            out.failure_reason = classify_api_error_text(
                text, session_established=out.session_established)
        elif isinstance(self._crash, AgentStartError):
            out.failure_reason = FailureReason(
                type="api-error", retriable=False,
                message=f"Local setup/process error (no session established): {self._crash}")
        elif self._crash is not None:
            out.failure_reason = classify_api_error_text(
                f"{type(self._crash).__name__}: {self._crash}",
                session_established=out.session_established)
        crashed = self._crash is not None or self._interrupt in ("timeout", "idle") \
            or parser.synthetic_timeout
        out.exit_code = 1 if crashed else 0
        return out


def _kill(pids: tuple[int, ...], why: str) -> None:
    """SIGKILL each of ``pids`` still running (never this process)."""
    for pid in end_processes_now(pids):
        log.warning("%s: killed agent process %d", why, pid)


_END = object()
"""The harness's iteration ended."""
_IDLE = object()
"""No record came within the idle timeout."""
_STOPPED = object()
"""An interrupt came before the next record."""


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve a finished fetch's outcome, so an abandoned one logs no "never retrieved"."""
    if future.done() and not future.cancelled():
        error = future.exception()
        if error is not None:
            log.debug("a cancelled harness iteration ended with %r", error)
