"""The life of one run: where it starts, how it ends, what it leaves, how the process exits.

A ``hankweave run`` records one run (more after rollbacks).  :class:`RunLifecycle` prepares the
checkpoint store, chooses where a new run continues the execution (fresh, or after the newest
finished codon of the thread), records the run's start and end, prunes checkpoints at the end
and turns the way the runtime stopped into the exit code.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from hankweave.exitcodes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, SIGNAL_EXIT_CODES
from hankweave.fsutil import parse_iso, private_dir, utc_now_iso
from hankweave.people import current_user
from hankweave.runtime.budget import spending_of, spent_by
from hankweave.runtime.context import RunContext
from hankweave.runtime.humans import WAITING_FOR_HUMAN
from hankweave.runtime.result import store_result
from hankweave.state.costs import codon_tokens
from hankweave.state.thread import ExecutionThread
from hankweave.state.transitions import (
    InitialCheckpointData,
    InitialCheckpointSet,
    RunCompleted,
    RunFailed,
    RunFailedData,
    RunInterrupted,
    RunRef,
    RunStarted,
    RunStartedData,
)
from hankweave.state.types import (
    STOPPED_RUN_STATUSES,
    CodonExecution,
    ContinuationSource,
    ContinuationStart,
    FreshStart,
    StartingConditions,
    end_checkpoint,
    is_live_run,
    is_terminal_status,
)

ALL_DONE = "all codons completed"
CODON_FAILURE = "codon failure"
CLIENT_REQUEST = "client request"
"""The shutdown reason of ``server.shutdown``: exit 0, as in the original (docs/websocket.md)."""


@dataclass(frozen=True)
class Shutdown:
    """Why the runtime is stopping, and whether it was escalated to a forced stop."""

    reason: str
    forced: bool = False


def new_run_id() -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return f"{int(time.time() * 1000)}-{''.join(secrets.choice(alphabet) for _ in range(5))}"


class RunLifecycle:
    """Starts, ends and sums up the runs of one runtime (see the module docstring)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    async def prepare_checkpoints(self) -> None:
        """Initialize the checkpoint store; record the initial checkpoint the first time."""
        initial = await self.ctx.checkpoints.initialize()
        if self.ctx.state.initial_checkpoint != initial:
            await self.ctx.transition(InitialCheckpointSet(data=InitialCheckpointData(sha=initial)))

    def resume_point(self, thread: ExecutionThread) -> StartingConditions:
        """Where a new run continues: after the newest finished codon of the thread, or fresh."""
        state = self.ctx.state
        for item in thread.codons:
            codon = item.codon
            sha = end_checkpoint(codon)
            if codon.status in ("completed", "skipped") and sha:
                return ContinuationStart(
                    source=ContinuationSource(run_id=item.run_id, after_codon=codon.codon_id,
                                              checkpoint_sha=sha),
                    reason="continue")
        newest = state.runs[0] if state.runs else None
        if newest is not None and not thread.codons and \
                isinstance(newest.starting_conditions, ContinuationStart):
            # An empty continuation (e.g. left by `hankweave rollback`): continue from it.
            return ContinuationStart(source=newest.starting_conditions.source, reason="continue")
        return FreshStart(initial_checkpoint_sha=state.initial_checkpoint)

    async def start_run(self, conditions: StartingConditions) -> str:
        """Record a new run (the plan is built afresh for a fresh start) and make it current.
        A run that continues one that did not complete (it waited for a person, crashed,
        failed, was cancelled or timed out) is ``resuming`` until its first codon starts."""
        ctx = self.ctx
        before = ctx.state.runs[0].status if ctx.state.runs else None
        run_id = new_run_id()
        folder = private_dir(ctx.layout.run_folder(run_id))  # codon logs: docs/state.md
        plan = None
        if conditions.type == "fresh" or not ctx.state.execution_plan:
            plan = ctx.plan_builder(ctx.hank)
        await ctx.transition(RunStarted(data=RunStartedData(
            run_id=run_id, run_folder=str(folder), git_branch=f"run-{run_id}",
            starting_conditions=conditions, server_pid=os.getpid(), execution_plan=plan,
            user=current_user(ctx.config.settings.user, ctx.config.env),
            resuming=before is not None and before != "completed")))
        ctx.bookkeeping.run_id = run_id
        ctx.owned.lock.update(run_id=run_id)
        return run_id

    async def end_run(self, *, failed: bool, interrupted: bool = False,
                      cancelled: bool = False) -> None:
        """Record the end of the current run, unless a codon of it is still finishing (its own
        completion ends the run) or it already ended.  ``interrupted``: it ends waiting for a
        person (``RunInterrupted``); ``cancelled``: a person stopped it.  A failed run whose
        time ceiling is reached ends ``timeout``."""
        ctx = self.ctx
        run = ctx.state.run_by_id(ctx.run_id or "")
        if run is None or not is_live_run(run.status):
            return
        if run.codons and not is_terminal_status(run.codons[-1].status):
            return
        self.report_budget()
        if interrupted:
            await ctx.transition(RunInterrupted(data=RunRef(run_id=run.run_id)))
        elif not failed:
            await ctx.transition(RunCompleted(data=RunRef(run_id=run.run_id)))
        else:
            outcome: Literal["cancelled", "timeout"] | None = (
                "cancelled" if cancelled else "timeout" if ctx.budget.out_of_time() else None)
            await ctx.transition(RunFailed(data=RunFailedData(run_id=run.run_id,
                                                              outcome=outcome)))

    async def finish(self, shutdown: Shutdown | None) -> None:
        """After the drive loop: end the run if it is still open, then prune checkpoints."""
        run = self.ctx.state.run_by_id(self.ctx.run_id or "")
        if run is not None and is_live_run(run.status):
            last = run.codons[-1] if run.codons else None
            if last is None or is_terminal_status(last.status):
                reason = shutdown.reason if shutdown else None
                # A client that shuts down a finished plan ends it as completed.
                done = reason == ALL_DONE or (reason == CLIENT_REQUEST and self.plan_finished())
                by_person = reason in SIGNAL_EXIT_CODES or reason == CLIENT_REQUEST
                await self.end_run(failed=not done, cancelled=by_person and not done)
        ended = self.ctx.state.run_by_id(self.ctx.run_id or "")
        if ended is not None:
            store_result(self.ctx, ended)
        await self.ctx.checkpoints.prune(self.ctx.state, self.ctx.config.settings.checkpoints.keep_last_per_run)

    def plan_finished(self) -> bool:
        thread = self.ctx.thread()
        return (bool(thread.codons) and not thread.failed and not thread.has_running_codon
                and thread.next_codon_id is None)

    def exit_code(self, shutdown: Shutdown | None) -> int:
        """The process exit code for the way the runtime stopped (docs/cli.md)."""
        if shutdown is None:
            return EXIT_FAILED
        if shutdown.forced:
            return EXIT_FAILED
        if shutdown.reason == ALL_DONE:
            run = self.ctx.state.run_by_id(self.ctx.run_id or "")
            return EXIT_FAILED if run is not None and (
                run.status in STOPPED_RUN_STATUSES or run.status == "crashed") else EXIT_OK
        if shutdown.reason == WAITING_FOR_HUMAN:
            return EXIT_INTERRUPTED
        if shutdown.reason in SIGNAL_EXIT_CODES:
            return SIGNAL_EXIT_CODES[shutdown.reason]
        return EXIT_OK if shutdown.reason == CLIENT_REQUEST else EXIT_FAILED

    # ----- the budget summary -----

    def report_budget(self) -> None:
        """``budget.summary`` at the end of a run that has limits (docs/behaviour.md §3.9).

        One row per plan entry this run started, with the limits of its newest attempt and
        what all its attempts of this run used.  The totals are what the ceiling is measured
        against: every run of the execution (a resumed run's ceiling is cumulative).
        """
        ctx = self.ctx
        budget = ctx.budget
        if not budget.has_limits:
            return
        ceiling = _present({"maxDollars": budget.ceiling_dollars,
                            "maxTimeSeconds": budget.ceiling_seconds})
        ctx.reporter.budget_summary(
            ceiling=ceiling, allocation=budget.allocation, rows=self._budget_rows(),
            totals=_present({"budgetDollars": budget.ceiling_dollars,
                             "actualDollars": spending_of(ctx.state).total,
                             "actualTimeSeconds": budget.elapsed()}))

    def _budget_rows(self) -> list[dict[str, Any]]:
        ctx = self.ctx
        run = ctx.state.run_by_id(ctx.run_id or "")
        attempts: dict[str, list[CodonExecution]] = {}
        for record in run.codons if run else ():
            attempts.setdefault(record.codon_id, []).append(record)
        rows = []
        for entry in ctx.state.execution_plan:
            records = attempts.get(entry.codon_id)
            if not records:
                continue
            limits = ctx.budget.limits.get(entry.codon_id)
            row: dict[str, Any] = {
                "codonId": entry.codon_id, "status": _row_status(records[-1]),
                "budget": _present({
                    "maxDollars": limits.dollars.value if limits and limits.dollars else None,
                    "maxTimeSeconds": limits.seconds.value if limits and limits.seconds else None,
                    "maxOutputTokens": limits.output_tokens if limits else None}),
                "actual": {"dollars": sum(spent_by(record) for record in records),
                           "timeSeconds": sum(_seconds(record) for record in records),
                           "outputTokens": sum(codon_tokens(record).output_tokens
                                               for record in records)}}
            if entry.loop_context:
                row["loopContext"] = entry.loop_context.model_dump(
                    by_alias=True, include={"loop_id", "iteration", "codon_index_in_loop"})
            rows.append(row)
        return rows


def _row_status(record: CodonExecution) -> str:
    """completed, exceeded (completed after a breach), failed, skipped, or running."""
    if not is_terminal_status(record.status):
        return "running"
    if record.status == "completed" and getattr(record, "budget_exceeded", None):
        return "exceeded"
    return record.status


def _seconds(record: CodonExecution) -> float:
    end = getattr(record, "end_time", None) or utc_now_iso()
    try:
        return max(0.0, (parse_iso(end) - parse_iso(record.start_time)).total_seconds())
    except ValueError:
        return 0.0


def _present(values: dict[str, Any]) -> dict[str, Any]:
    """The entries that have a value (absent on the wire rather than null)."""
    return {key: value for key, value in values.items() if value is not None}
