"""The orchestrator: runs a hank's plan codon by codon, durably.

One :class:`Runtime` owns one execution directory for the life of a ``hankweave run``.  It is
built from parts, each in its own module:

* :mod:`~hankweave.runtime.context`: what every part shares (the hank, the layout, the state),
  as frozen data, with the run's bookkeeping in one named place;
* :mod:`~hankweave.runtime.services`: the human loop and the sentinels, which act on the run;
* :mod:`~hankweave.runtime.lifecycle`: where a run starts, how it ends, the exit code;
* :mod:`~hankweave.runtime.control`: the phase and the live-control commands;
* :mod:`~hankweave.runtime.attempt` and :mod:`~hankweave.runtime.completion`: one codon attempt;
* :mod:`~hankweave.runtime.rollback`: rollback targets and restores;
* :mod:`~hankweave.runtime.reporter`: every event, as a catalogue payload.

:meth:`Runtime.boot` decides how this start continues the execution (fresh, a continuation, or
a recovery that first rolls back); :meth:`Runtime.drive` runs codons until the plan is done, a
failure stops it, or a shutdown; :meth:`Runtime.finish` ends the run.  :attr:`Runtime.commands`
(:mod:`~hankweave.runtime.commands`) is what the CLI and the WebSocket server call; it refuses
what the original refuses by raising :class:`RuntimeCommandError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hankweave.checkpoints import CheckpointStore
from hankweave.config.hank import HankFile
from hankweave.execution.layout import ExecutionLayout
from hankweave.faults import kill_point
from hankweave.registry import Registry
from hankweave.runtime.attempt import CodonAttempt
from hankweave.runtime.budget import RunBudget
from hankweave.runtime.checkpointing import KnownCheckpoints
from hankweave.runtime.commands import RunCommands, RuntimeCommands
from hankweave.runtime.completion import CodonResult, expand_plan
from hankweave.runtime.context import RunContext, RuntimeConfig
from hankweave.runtime.control import LiveControl, Phase, StartRequest
from hankweave.runtime.crashes import follow_up, report_crashes
from hankweave.runtime.errors import RuntimeCommandError
from hankweave.runtime.failures import (
    compute_retry_delay_ms,
    resolve_failure_action,
    resumed_attempt,
)
from hankweave.runtime.humans import WAITING_FOR_HUMAN, HumanLoop, resume_conditions
from hankweave.runtime.interrupted import finish_interrupted_completion
from hankweave.runtime.lifecycle import (
    ALL_DONE,
    CLIENT_REQUEST,
    CODON_FAILURE,
    RunLifecycle,
    new_run_id,
)
from hankweave.runtime.prompts import PromptBuilder
from hankweave.runtime.reporter import Reporter
from hankweave.runtime.rollback import (
    CheckpointListing,
    Rollbacks,
    RollbackTarget,
    rollback_offline,
)
from hankweave.runtime.sentinels import SentinelManager
from hankweave.runtime.services import RunServices
from hankweave.state.boot import OwnedExecution
from hankweave.state.interruptions import resumable_run, resume_chain
from hankweave.state.thread import ExecutionThread
from hankweave.state.types import ExecutionCodonEntry, HankweaveState, Run

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_RETRY_DELAY_MS = 1000
DEFAULT_MAX_RETRY_DELAY_MS = 60000


class Runtime:
    """Runs one execution directory's hank.  See the module docstring."""

    def __init__(
        self,
        *,
        hank: HankFile,
        hank_dir: Path,
        execution_dir: Path,
        owned: OwnedExecution,
        checkpoints: CheckpointStore,
        registry: Registry,
        emit: Callable[[str, Any], Any],
        config: RuntimeConfig,
        budget: RunBudget,
        prompt_builder: PromptBuilder,
        plan_builder: Callable[[HankFile], list[ExecutionCodonEntry]],
    ) -> None:
        self.emit = emit
        self.owned = owned
        self.reporter = Reporter(emit)
        self.ctx = RunContext(
            hank=hank, hank_dir=hank_dir, layout=ExecutionLayout(execution_dir), owned=owned,
            checkpoints=KnownCheckpoints(checkpoints, change_hints=config.settings.checkpoints.change_hints),
            registry=registry, reporter=self.reporter, config=config, budget=budget,
            prompts=prompt_builder, plan_builder=plan_builder)
        self.lifecycle = RunLifecycle(self.ctx)
        sentinels = SentinelManager(self.ctx)
        self.control = LiveControl(self.ctx, self.lifecycle, sentinels)
        self.services = RunServices(
            humans=HumanLoop(self.ctx, wait=config.wait_for_answers,
                             stop_attempt=self.control.interrupt_for_human,
                             shutdown=self.control.stopped),
            sentinels=sentinels)
        self.rollbacks = Rollbacks(self.ctx, self.lifecycle, self.control)
        self.commands: RuntimeCommands = RunCommands(self.ctx, self.control, self.rollbacks,
                                                     self.services.humans)
        """What the server and the CLI's signal handlers ask of this runtime."""
        owned.store.add_listener(self.reporter.transition)

    # ----- what it runs -----

    @property
    def state(self) -> HankweaveState:
        return self.ctx.state

    @property
    def run_id(self) -> str | None:
        """The run this runtime records, once booted."""
        return self.ctx.run_id

    @property
    def config(self) -> RuntimeConfig:
        return self.ctx.config

    @property
    def budget(self) -> RunBudget:
        return self.ctx.budget

    @property
    def checkpoints(self) -> CheckpointStore:
        """The execution's checkpoint store."""
        return self.ctx.checkpoints.store

    @property
    def execution_dir(self) -> Path:
        return self.ctx.layout.path

    @property
    def agent_root(self) -> Path:
        return self.ctx.layout.agent_root

    # ----- boot, drive, finish -----

    async def boot(self) -> None:
        """Prepare checkpoints and choose how this start continues the execution."""
        await self.lifecycle.prepare_checkpoints()
        thread = self.ctx.thread()
        resumed = resumable_run(self.state) if self.config.humans else None
        if self.owned.crashed_run_ids:  # repaired before the journal existed: said here
            report_crashes(self.reporter, self.state, self.owned.crashed_run_ids,
                           self.owned.ended_agents,
                           follow_up(self.state, thread, resumed, self.lifecycle.resume_point))
        if resumed is not None:
            if not await self._resume(resumed, thread):
                return
        elif thread.failed:
            await self.rollbacks.recover(thread, announce=not self.owned.crashed_run_ids)
        else:
            await self.lifecycle.start_run(self.lifecycle.resume_point(thread))
        if not await finish_interrupted_completion(self.ctx):  # what a crash cut short
            await self.lifecycle.end_run(failed=True)
            await self.control.shutdown(CODON_FAILURE)

    async def _resume(self, resumed: Run, thread: ExecutionThread) -> bool:
        """Start a run that resumes ``resumed`` (it waited for a person); False when answers
        are still missing and the runtime does not wait for them (it stops at once)."""
        humans = self.services.humans
        await humans.apply_due_defaults()
        chain = set(resume_chain(self.state, resumed.run_id))
        waiting = [item for item in humans.waiting() if item.run_id in chain]
        if waiting and not self.config.wait_for_answers:
            for item in waiting:
                self.reporter.info(f"Still waiting for a person to answer {item.id}:"
                                   f" {item.question}")
            await self.control.shutdown(WAITING_FOR_HUMAN)
            return False
        self.reporter.info(f"Resuming run {resumed.run_id}, which waited for a person")
        await self.lifecycle.start_run(resume_conditions(self.state, thread, resumed))
        return True

    async def _stop_waiting(self) -> None:
        """End the run ``interrupted`` (unless it is shutting down for another reason)."""
        if not self.control.shutting_down:
            await self.control.shutdown(WAITING_FOR_HUMAN)

    async def _gate_after(self) -> bool:
        """The ``approval: after`` gate of the thread's newest codon, if it completed; False
        when the run stops (waiting for a person, or the result was rejected)."""
        if not self.config.humans:
            return True
        thread = self.ctx.thread()
        newest = thread.codons[0].codon if thread.codons else None
        if newest is None or newest.status != "completed":
            return True
        try:
            outcome = await self.services.humans.gate(newest.codon_id, "after")
        except RuntimeCommandError:  # the hank no longer has that codon
            return True
        if outcome == "stop":
            await self._stop_waiting()
            return False
        if outcome == "reject":
            # Rolling back to the codon before it makes the next run redo it.
            before = next((tc.codon.codon_id for tc in thread.codons[1:]
                           if tc.codon.status == "completed"), None)
            redo = (f"roll back to redo it (`hankweave rollback -e"
                    f" {shlex.quote(str(self.execution_dir))} --to {shlex.quote(before)}`)"
                    if before else "start a new execution with -n to redo it")
            self.reporter.error(
                f"A person rejected the result of codon {newest.codon_id}; the run stops."
                f" To go on, {redo}, or run again to be asked again",
                codon=newest.codon_id, severity="codon")
            await self.lifecycle.end_run(failed=True)
            await self.control.shutdown(CODON_FAILURE)
            return False
        return True

    async def drive(self) -> int:
        """Run codons until the plan is done, a failure stops the run, or a shutdown."""
        control = self.control
        try:
            request: StartRequest | None = None
            if not self.config.settings.autostart:
                request = await control.wait_for_start("startup", "Waiting for a start command")
            while not control.shutting_down:
                if not await self._gate_after():
                    break
                codon_id, skip_rig = control.next_codon(request)
                if codon_id is None:
                    await control.shutdown(ALL_DONE)
                    break
                if self.budget.exhausted() and not self._carries_on_a_budget_ask(codon_id):
                    self.reporter.info(f"Run budget exhausted; stopping before {codon_id}")
                    await self.lifecycle.end_run(failed=True)
                    await control.shutdown(CODON_FAILURE)
                    break
                parked = await self._run_with_policy(codon_id, skip_rig=skip_rig)
                request = await self._after_codon(parked)
        except asyncio.CancelledError:
            await control.shutdown("SIGINT")
        return self.lifecycle.exit_code(control.shutdown_request)

    def _carries_on_a_budget_ask(self, codon_id: str) -> bool:
        """Whether ``codon_id``'s next attempt carries on one a person answered at a budget
        ceiling: it starts even when the run's money looks spent (a rejection then ends it
        at once, completed; an extension too small for what was spent asks again)."""
        humans = self.services.humans
        return self.config.humans and humans.continues_interrupted_attempt(codon_id) and any(
            item.kind == "budget" for item in humans.carried(codon_id))

    async def _after_codon(self, parked: str | None) -> StartRequest | None:
        """Wait for a client's decision when the codon parked the run, or after every codon
        without autostart; otherwise go straight on."""
        if self.control.shutting_down:
            return None
        if parked is not None:
            return await self.control.wait_for_start("codon-completed", parked)
        if not self.config.settings.autostart:
            return await self.control.wait_for_start(
                "codon-completed", "Codon finished; waiting for the next start command")
        return None

    async def finish(self) -> None:
        """After :meth:`drive`: end the run if it is still open, prune, release everything."""
        async with self.control.command_lock:  # a rollback in progress finishes first
            await self.lifecycle.finish(self.control.shutdown_request)

    # ----- one codon, under its failure policy -----

    async def _run_with_policy(self, codon_id: str, *, skip_rig: bool = False) -> str | None:
        """Run a codon and apply its failure policy (docs/behaviour.md §3.7).

        Returns why the run is parked waiting for a command (a client force-stopped the codon,
        or it failed retriably in an attended run), or None when the drive loop goes on.
        """
        control = self.control
        humans = self.services.humans
        gate = await humans.gate(codon_id, "before") if self.config.humans else "go"
        if gate == "stop":
            await self._stop_waiting()
            return None
        if gate == "reject":
            self.reporter.info(f"A person rejected starting codon {codon_id}; it is skipped")
            attempt = CodonAttempt(self.ctx, self.services, codon_id, stop_reason=lambda: control.shutdown_reason)
            await attempt.skip_unstarted()
            return None
        number = self._first_attempt(codon_id)
        while True:
            attempt = CodonAttempt(self.ctx, self.services, codon_id, skip_rig=skip_rig, number=number,
                                   stop_reason=lambda: control.shutdown_reason)
            result = await self._attempt(attempt)
            if humans.stopping:
                await self._stop_waiting()
                return None
            if result.ends_run:
                await self.lifecycle.end_run(failed=True)
                await control.shutdown(CODON_FAILURE)
                return None
            if attempt.force_stop_reason is not None and result.status == "failed" \
                    and not control.shutting_down:
                # Neither retried nor fatal: the client that stopped it decides what is next.
                return f"Codon {codon_id} was force stopped; waiting for a command"
            if result.status != "failed" or control.shutting_down:
                return None
            action = await self._failure_action(attempt, result)
            if action == "retry":
                if control.shutting_down:
                    return None  # stopped during the wait: the failed attempt stands
                skip_rig = False
                number += 1
                continue
            if action == "continue":
                self.reporter.info(f"Codon {codon_id} failed, continuing (onFailure=ignore)")
                await expand_plan(self.ctx, codon_id, "failed-ignored", False, False)
                return None
            if action == "stay-active":
                # An attended run keeps its server up so a person can retry the codon.
                return (f"Codon {codon_id} failed with a retriable error; retry it with"
                        f" `hankweave ctl -e {shlex.quote(str(self.execution_dir))} start"
                        f" {shlex.quote(codon_id)}`, roll back,"
                        " or stop with Ctrl-C")
            await self.lifecycle.end_run(failed=True)
            await control.shutdown(CODON_FAILURE)
            return None

    async def _attempt(self, attempt: CodonAttempt) -> CodonResult:
        self.control.attempt = attempt
        self.control.enter(Phase.RUNNING_CODON)
        try:
            return await attempt.run()
        finally:
            self.control.attempt = None
            self.control.enter(Phase.BETWEEN_CODONS)

    def _max_attempts(self, codon_id: str) -> int:
        retry = self.ctx.codon_config(codon_id).retry_config
        return retry.max_attempts if retry and retry.max_attempts else DEFAULT_MAX_ATTEMPTS

    def _first_attempt(self, codon_id: str) -> int:
        """1, or where a killed run left the codon's retries (they are counted in state)."""
        return resumed_attempt(self.state, codon_id, self.run_id,
                               on_failure=self.ctx.codon_config(codon_id).on_failure,
                               max_attempts=self._max_attempts(codon_id))

    async def _failure_action(self, attempt: CodonAttempt, result: CodonResult) -> str:
        """What the failure policy does with a failed attempt; a retry waits its delay here
        (a shutdown ends the wait at once)."""
        codon_id, codon = attempt.codon_id, attempt.codon
        retries_made = attempt.number - 1
        retry = codon.retry_config
        max_attempts = self._max_attempts(codon_id)
        action = resolve_failure_action(codon.on_failure or "abort", result.failure_reason,
                                        retries_made, max_attempts,
                                        headless=self.config.settings.headless)
        if action != "retry":
            return action
        delay = compute_retry_delay_ms(
            retry.delay_ms if retry and retry.delay_ms is not None else DEFAULT_RETRY_DELAY_MS,
            retries_made,
            result.failure_reason.retry_after_ms if result.failure_reason else None,
            retry.max_delay_ms if retry and retry.max_delay_ms is not None
            else DEFAULT_MAX_RETRY_DELAY_MS)
        self.reporter.info(f"Retrying codon {codon_id} (attempt {attempt.number + 1}/"
                           f"{max_attempts + 1})")
        kill_point("retry.wait")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.control.stopped.wait(), delay / 1000)
        return action


__all__ = [
    "ALL_DONE",
    "CLIENT_REQUEST",
    "CheckpointListing",
    "PromptBuilder",
    "RollbackTarget",
    "Runtime",
    "RuntimeCommandError",
    "RuntimeConfig",
    "new_run_id",
    "rollback_offline",
]
