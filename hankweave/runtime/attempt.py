"""One attempt of one codon, from its rig setup to its outcome.

:class:`CodonAttempt` takes a codon of the plan through the state machine in the current run:

* ``preparing``: the rig setup runs and a ``rig-setup`` checkpoint is made;
* ``starting``: the session to continue is found (``continue-previous``), the harness is chosen
  and the prompts are built;
* ``initializing`` → ``running``: the :class:`~hankweave.runtime.codon_runner.CodonRunner`
  drives the harness, under the codon's budget and idle timeout;
* the outcome: :func:`~hankweave.runtime.completion.complete` decides the final status, makes
  the end checkpoint and does what follows a success.

What can stop it early (a failed rig, no session to continue, a stop while preparing) ends the
record ``failed`` with the status it failed during.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hankweave.checkpoints import CheckpointError, CheckpointKind
from hankweave.config.hank import Codon
from hankweave.config.settings import effective_sandbox, effective_shim_idle_timeout
from hankweave.harness import CodonRequest
from hankweave.processes import AGENT_MARKER_ENV, agent_marker
from hankweave.runtime.budget import CodonBudget, carried_usage
from hankweave.runtime.codon_runner import AttemptOutcome, AttemptSpec, CodonRunner, Interrupt
from hankweave.runtime.completion import CodonResult, Ending, record_end, settle
from hankweave.runtime.context import RunContext, elapsed_ms
from hankweave.runtime.failures import FORCE_STOPPED, INTERRUPTED
from hankweave.runtime.file_events import FileTracker
from hankweave.runtime.notices import GivenWarnings
from hankweave.runtime.planner import checkpoint_patterns_through
from hankweave.sandbox import Sandbox, bubblewrap_problem
from hankweave.state.thread import find_continuation_session_id
from hankweave.state.transitions import CodonStarted, CodonStartedData
from hankweave.state.types import BudgetExceededData, FailureReason, Interruption, LoopContext
from hankweave.workspace import DATA_LINK

if TYPE_CHECKING:
    from hankweave.runtime.rig import RigResult
    from hankweave.runtime.services import RunServices

StopReason = Callable[[], str | None]
"""Why the runtime is shutting down (None while it is not)."""


class CodonAttempt:
    """Runs one attempt of ``codon_id`` in the current run (see the module docstring)."""

    def __init__(self, ctx: RunContext, services: RunServices, codon_id: str, *,
                 skip_rig: bool = False, stop_reason: StopReason, number: int = 1) -> None:
        self.ctx = ctx
        self.services = services
        self.codon_id = codon_id
        self.skip_rig = skip_rig
        self.number = number
        """Which attempt of the codon's failure policy this is (1, then 2 for the first
        retry); recorded in the codon's record so it survives a restart."""
        self.codon: Codon = ctx.codon_config(codon_id)
        self.entry = ctx.plan_entry(codon_id)
        self.force_stop_reason: str | None = None
        """Why a client force-stopped this attempt (it is then neither retried nor fatal)."""
        self._stop_reason = stop_reason
        self._runner: CodonRunner | None = None
        self._rig: asyncio.Future[RigResult] | None = None
        self._rig_interrupt: Interrupt | None = None
        """Set when a skip or a stop cancelled the rig setup (its command is killed)."""
        self._started = time.monotonic()
        self._resuming = False
        self._continues = False
        """This attempt carries on the one a person interrupted (HumanLoop.
        continues_interrupted_attempt): no rig setup, the interrupted session resumed."""

    # ----- control -----

    @property
    def agent_running(self) -> bool:
        """Whether the harness is driving the agent now (what skip and force stop act on)."""
        return self._runner is not None

    @property
    def rig_running(self) -> bool:
        """Whether the rig setup runs now (a skip or a stop ends its command at once)."""
        return self._rig is not None and not self._rig.done()

    def interrupt(self, kind: Interrupt) -> None:
        """Stop the agent, or the rig setup, if one runs; a stop between them is seen at the
        next step."""
        if self._runner is not None:
            self._runner.interrupt(kind)
        elif self.rig_running and self._rig_interrupt is None:
            assert self._rig is not None
            self._rig_interrupt = kind
            self._rig.cancel()  # the rig's command group is killed (runtime.rig)

    def force_stop(self, reason: str) -> None:
        self.force_stop_reason = reason
        self.interrupt("stop")

    def interrupted_reason(self) -> FailureReason:
        """The failure of an attempt stopped by a shutdown or a client."""
        stopping = self._stop_reason()
        if stopping is None and self.force_stop_reason is not None:
            return FailureReason(type="unknown", retriable=True,
                                 message=f"{FORCE_STOPPED}{self.force_stop_reason}")
        return FailureReason(type="unknown", retriable=True, message=f"{INTERRUPTED}{stopping}")

    # ----- running -----

    async def run(self) -> CodonResult:
        ctx, codon, codon_id = self.ctx, self.codon, self.codon_id
        # Asked before this attempt's record exists: only a run's first attempt of the codon
        # can carry on the interrupted one.
        self._continues = (ctx.config.humans
                           and self.services.humans.continues_interrupted_attempt(codon_id))
        await self._record_start()

        rig_sha: str | None = None
        if codon.rig_setup is not None and self._continues:
            ctx.reporter.info(f"Rig setup of codon '{codon.name}' not run again: this attempt"
                              " carries on the interrupted one, whose workspace is kept")
        elif codon.rig_setup is not None and not self.skip_rig:
            failure = await self._rig_setup()
            if self._rig_interrupt == "skip":
                return await self._complete(AttemptOutcome(interrupted="skip"))
            if self._rig_interrupt is not None:
                return await self._fail_early("preparing", self.interrupted_reason())
            if failure is not None:
                return await self._fail_early("preparing", failure)
            rig_sha = await self.checkpoint("rig-setup")
            if rig_sha is None:
                return await self._fail_early("preparing", FailureReason(
                    type="unknown", retriable=False, message="Rig-setup checkpoint failed"))
        await ctx.move(codon_id, "starting", checkpoint_sha=rig_sha)
        failure = await self.services.sentinels.load(codon_id, codon)
        if failure is not None:
            return await self._fail_early("starting", failure)

        rejected = self.services.humans.budget_rejected(codon_id) if self._continues else None
        if rejected is not None:
            return await self._end_rejected(rejected)
        session = self._resumed_session()
        if session is not None:
            ctx.reporter.info(f"Resuming session {session} of codon {codon_id} with the"
                              " answers it waited for")
        elif codon.continuation_mode == "continue-previous":
            session = find_continuation_session_id(ctx.thread(), codon_id, ctx.state)
            if session is None:
                return await self._fail_early("starting", FailureReason(
                    type="unknown", retriable=False,
                    message=f"Codon {codon_id} requires continuation from previous codon but no"
                            " valid session found"))
            ctx.reporter.info(f"Continuing from previous session: {session}")

        try:
            spec = self._spec(session, resuming=self._resuming)
        except Exception as exc:  # a prompt that cannot be built, a model with no harness
            return await self._fail_early("starting", FailureReason(
                type="unknown", retriable=False, message=str(exc)))
        if self._stop_reason() is not None:  # stopped while preparing: no agent starts
            return await self._fail_early("starting", self.interrupted_reason())

        # The agent runs in this process until the harness reports a process of its own.
        await ctx.move(codon_id, "initializing", claude_pid=os.getpid(),
                       claude_log_path=str(spec.log_path.relative_to(ctx.layout.path)),
                       previous_session_id=session)
        outcome = await self._drive(spec)
        if outcome.interrupted == "skip":
            await self.services.humans.withdraw_budget_asks(codon_id)
        return await self._complete(outcome)

    async def _end_rejected(self, rejected: Interruption) -> CodonResult:
        """The interrupted attempt reached an ``ask`` ceiling and a person rejected raising
        it: it ends as the breach ends an attempt (completed, its work kept), no agent runs."""
        ask = rejected.budget
        self.ctx.budget.track(self.ctx.state.execution_plan, self.codon_id)  # its onExceeded
        self.ctx.reporter.info(f"Codon {self.codon_id}: {rejected.answered_by} declined to"
                               f" raise the budget limit ({rejected.question})")
        ctx = self.ctx
        log_path = ctx.layout.codon_log_path(ctx.run_id or "", self.codon_id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()  # no agent ran: its log is empty
        await ctx.move(self.codon_id, "initializing", claude_pid=os.getpid(),
                       claude_log_path=str(log_path.relative_to(ctx.layout.path)))
        exceeded = BudgetExceededData(currency=ask.currency, limit=ask.limit, used=ask.used) \
            if ask is not None else None
        return await self._complete(AttemptOutcome(
            budget_exceeded=exceeded, result_received=True,
            budget_message=f"{rejected.question.removesuffix('; extend by?')}; not extended"))

    async def skip_unstarted(self) -> CodonResult:
        """Record the codon skipped before anything ran (a person rejected its start)."""
        await self._record_start()
        return await self._complete(AttemptOutcome(interrupted="skip"))

    async def _complete(self, outcome: AttemptOutcome) -> CodonResult:
        """Settle the final status, make the end checkpoint, record the end (runtime.completion)."""
        ending = Ending(codon_id=self.codon_id, codon=self.codon, entry=self.entry,
                        started=self._started, interrupted_reason=self.interrupted_reason())
        settled = await settle(self.ctx, self.services, ending, outcome)
        sha = await self.checkpoint(settled.checkpoint_kind)
        return await record_end(self.ctx, self.services, ending, outcome, settled, sha)

    async def _record_start(self) -> None:
        """The attempt's record (``CodonStarted``, status ``preparing``)."""
        context = self.entry.loop_context
        loop_context = (LoopContext.model_validate(context.model_dump(
            include={"loop_id", "iteration", "codon_index_in_loop"})) if context else None)
        await self.ctx.transition(CodonStarted(data=CodonStartedData(
            run_id=self.ctx.run_id or "", codon_id=self.codon_id, loop_context=loop_context,
            attempt=self.number if self.number > 1 else None)))
        self._started = time.monotonic()

    async def _drive(self, spec: AttemptSpec) -> AttemptOutcome:
        ctx = self.ctx
        carried = carried_usage(self.services.humans.interrupted_records(self.codon_id),
                                ctx.state.interruptions) if self._continues else None
        budget = ctx.budget.track(ctx.state.execution_plan, self.codon_id, carried)
        if budget.limits.on_exceeded == "ask" and ctx.config.policy is None:
            spec.ask_budget = functools.partial(self.services.humans.ask_budget, self.codon_id)
        self._report_limits(budget)
        patterns = checkpoint_patterns_through(ctx.state.execution_plan, self.codon_id,
                                               include_self=True)
        files = FileTracker(ctx.layout.agent_root, patterns, ctx.reporter.emit, self.codon_id)
        runner = CodonRunner(spec, store=ctx.store, reporter=ctx.reporter, budget=budget,
                             given_warnings=GivenWarnings(ctx.layout.given_warnings_file),
                             files=files)
        self._runner = runner
        if self._stop_reason() is not None:  # a stop that came during the last state write
            runner.interrupt("stop")
        watchdog = asyncio.create_task(_watch_time(runner, budget))
        gate = ctx.config.proxy
        if gate is not None:
            gate.attach(runner)
        try:
            return await runner.run()
        finally:
            watchdog.cancel()
            if gate is not None:
                gate.detach(runner)
            self._runner = None

    def _report_limits(self, budget: CodonBudget) -> None:
        """``budget.limits``: what this attempt may spend and why, when anything limits it."""
        ctx, limits, run_budget = self.ctx, budget.limits, self.ctx.budget
        plan = run_budget.plan(ctx.state.execution_plan)
        loop_id = plan.pooled_loop_of(self.entry)
        loop = plan.resolve_loop(loop_id, run_budget.progress()) if loop_id else None
        ceiling = run_budget.pool
        if not (limits.any or loop or ceiling.max_dollars or ceiling.max_seconds):
            return
        context = self.entry.loop_context
        ctx.reporter.budget_limits(
            codon_id=self.codon_id,
            loop_context=context.model_dump(by_alias=True, include={
                "loop_id", "iteration", "codon_index_in_loop"}) if context else None,
            ceiling=ceiling.to_json(), limits=limits.to_json(ids=False),
            loop=loop.to_json(ids=False) if loop else None,
            spent=run_budget.total_spent(), elapsed=run_budget.elapsed())

    def _resumed_session(self) -> str | None:
        """The interrupted attempt's session this attempt resumes, if it resumes one and its
        harness can (otherwise the agent starts afresh, and its questions asked again get the
        recorded answers at once)."""
        ctx = self.ctx
        self._resuming = False
        if ctx.config.policy is not None or not self._continues \
                or not self.services.humans.carried(self.codon_id):
            return None
        session = self.services.humans.resumed_session(self.codon_id)
        try:
            harness = ctx.select_harness(ctx.registry.resolve_model(self.codon.model))
        except Exception:  # reported when the spec is built
            return None
        self._resuming = session is not None and harness.supports_resume
        return session if self._resuming else None

    def _spec(self, session: str | None, *, resuming: bool = False) -> AttemptSpec:
        """What the runner runs: the harness, its settings, the request and where logs go."""
        ctx, codon, codon_id = self.ctx, self.codon, self.codon_id
        model = ctx.registry.resolve_model(codon.model)
        harness = ctx.select_harness(model)
        needs_resume = session is not None or codon.exhaust_with_prompt is not None
        if needs_resume and not harness.supports_resume:
            raise ValueError(f"Codon {codon_id} continues an agent session"
                             f" ({'continue-previous' if session else 'exhaustWithPrompt'}), but"
                             f" harness {harness.name!r} cannot resume sessions")
        run_id = ctx.run_id or ""
        # Every process of the agent carries the marker, so none outlives the attempt or a
        # crash of this runtime (hankweave.processes).
        marker = {AGENT_MARKER_ENV: agent_marker(run_id, codon_id)}
        request = CodonRequest(
            prompt=(self.services.humans.resume_prompt(codon_id) if resuming
                    else ctx.prompts.user(codon)),
            resumes_interruption=resuming, system_prompt=ctx.prompts.system(codon), model=model,
            work_dir=ctx.layout.agent_root, session_id_to_resume=session,
            fork_session=session is not None,
            env={**ctx.prompts.env(codon), **marker},
            env_overlay={**ctx.prompts.env_overlay(codon), **marker},
            auto_compact=codon.auto_compact is True,
            codon_id=codon_id, run_id=run_id, codon_name=codon.name,
            sandbox=self._sandbox())
        return AttemptSpec(
            request=request, harness=harness,
            harness_config=ctx.config.harness_configs.get(harness.name),
            log_path=ctx.layout.codon_log_path(run_id, codon_id),
            stderr_path=ctx.layout.codon_stderr_path(run_id, codon_id),
            state_dir=ctx.layout.harness_state_dir(harness.name),
            extension_prompt=(ctx.prompts.extension(codon.exhaust_with_prompt)
                              if codon.exhaust_with_prompt else None),
            max_extensions=codon.max_extensions,
            idle_timeout_s=effective_shim_idle_timeout(
                codon, ctx.config.settings.shim_idle_timeout, harness.default_idle_timeout_s),
            policy=ctx.config.policy or self.services.humans)

    def _sandbox(self) -> Sandbox | None:
        """The codon's sandbox (docs/sandbox.md): None when it is off, or when bubblewrap does
        not work here (``auto``: the run said so once; ``required`` was refused at launch)."""
        setting = effective_sandbox(self.codon, self.ctx.config.settings.sandbox)
        if setting.mode == "off" or bubblewrap_problem() is not None:
            return None
        layout = self.ctx.layout
        data = layout.agent_root / DATA_LINK
        return Sandbox.for_execution(
            layout.path, layout.agent_root, home=Path.home(),
            data=Path(os.path.realpath(data)) if data.exists() else None,
            network=None if setting.network is None else setting.network == "all")

    # ----- rig setup and checkpoints -----

    async def _rig_setup(self) -> FailureReason | None:
        from hankweave.runtime.rig import run_rig

        ctx, codon, codon_id = self.ctx, self.codon, self.codon_id
        reporter = ctx.reporter
        ops = codon.rig_setup or []
        reporter.info(f"Rig setup started for codon '{codon.name}': {len(ops)} operation(s)")
        started = time.monotonic()
        # Rig commands copy and unpack whole trees (often keeping old timestamps): the
        # checkpoint after them scans rather than follow the watcher (docs/checkpoints.md).
        ctx.checkpoints.distrust_changes()
        self._rig = asyncio.ensure_future(run_rig(
            ops, agent_root=ctx.layout.agent_root, hank_dir=ctx.hank_dir,
            env=ctx.prompts.env(codon), ignore_failures=ctx.config.settings.ignore_rig_failures,
            timeout_s=ctx.config.rig_timeout_s,
            on_output=lambda index, stream, line: reporter.rig_output(
                codon_id, index, stream, line),
            on_operation=lambda index, total, description: reporter.info(
                f"Rig operation {index + 1}/{total}: {description}"),
            on_failure=lambda failure: reporter.rig_failed(codon_id, failure),
            commands=ctx.config.commands,
            on_notice=lambda line: reporter.info(f"[REPLAY] codon {codon_id}: {line}")))
        try:
            result = await self._rig
        except asyncio.CancelledError:
            if self._rig_interrupt is None:
                raise  # the attempt itself is cancelled
            reporter.info(f"Rig setup of codon '{codon.name}' interrupted"
                          f" ({self._rig_interrupt}); its command was ended")
            return None
        finally:
            self._rig = None
        duration = elapsed_ms(started)
        reporter.rig_completed(codon_id, commands=len(ops), duration_ms=duration,
                               created_checkpoint=result.failed is None)
        if result.failed is None:
            reporter.info(f"Rig setup completed for codon '{codon.name}' ({duration}ms)")
            return None
        failed = result.failed
        reporter.error(f"Rig setup failed: {failed.message}", codon=codon_id, fatal=True,
                       severity="codon")
        return FailureReason(type="unknown", retriable=True,
                             message=f"Rig setup failed at {failed.op_type} operation:"
                                     f" {failed.message}")

    async def checkpoint(self, kind: CheckpointKind) -> str | None:
        """Checkpoint the work tree through this codon's patterns; None (reported) on failure."""

        ctx = self.ctx
        patterns = checkpoint_patterns_through(ctx.state.execution_plan, self.codon_id, True)
        try:
            made = await ctx.checkpoints.create(
                kind=kind, run_id=ctx.run_id or "", codon_id=self.codon_id,
                codon_name=self.codon.name, patterns=patterns,
                duration_ms=elapsed_ms(self._started))
        except CheckpointError as exc:
            ctx.reporter.error(f"Checkpoint ({kind}) failed: {exc}", codon=self.codon_id,
                               severity="codon")
            return None
        return made.id

    async def _fail_early(self, during: Literal["preparing", "starting"],
                          reason: FailureReason) -> CodonResult:
        """End the record ``failed`` before any agent ran (exit code 1, no cost)."""
        await self.ctx.move(self.codon_id, "failed", exit_code=1, failure_reason=reason,
                            failed_during=during)
        self.ctx.reporter.codon_completed(
            codon_id=self.codon_id, success=False, cost=0.0, duration_ms=0, exit_code=1,
            failure_reason=reason, failure_ignored=self.codon.on_failure == "ignore")
        await self.services.sentinels.finish_codon(stopping=self._stop_reason() is not None)
        return CodonResult(self.codon_id, "failed", reason)


async def _watch_time(runner: CodonRunner, budget: CodonBudget) -> None:
    """Interrupt the runner once the codon's time budget (its own, its loop's or the run's) is
    spent, and warn as it is used: it wakes at the deadline, and at least every second, so the
    agent is stopped within a second of the limit.  A breach a person answers by raising the
    limit is watched again; the watch ends with the attempt."""
    while (left := budget.seconds_left()) is not None:
        await asyncio.sleep(1.0 if budget.breach is not None else min(1.0, max(0.0, left)))
        runner.report_warnings()
        if budget.breach is None and budget.check() is not None:
            runner.interrupt("budget")
