"""How a codon attempt ends: its final status, its end checkpoint, and what follows a success.

The final status follows the original's priority order (docs/behaviour.md §3.6): a force stop
or shutdown fails the codon, a skip skips it, a budget breach completes it (or fails it under
``onExceeded: "fail"``; under ``"ask"`` a breach ends an attempt only when a person rejected
raising the limit, and then completes it), a clean exit with a success result completes it, an exceeded context
completes it where that is acceptable, anything else fails it.  After a success the outputs are
copied and ``archiveOnSuccess`` runs; after a success or a skip the plan grows (loops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from hankweave.faults import kill_point
from hankweave.fsutil import parse_iso
from hankweave.runtime.codon_runner import AttemptOutcome
from hankweave.runtime.context import RunContext, elapsed_ms
from hankweave.runtime.failures import WAITING_FOR_PERSON, synthesize_missing_failure_reason
from hankweave.state.costs import codon_cost, codon_cost_complete, codon_tokens
from hankweave.state.reducer import plan_splice
from hankweave.state.transitions import ExecutionPlanData, ExecutionPlanUpdated
from hankweave.state.types import (
    NO_CHECKPOINT,
    ExecutionCodonEntry,
    FailureReason,
    is_terminal_status,
    plan_positions,
)

if TYPE_CHECKING:
    from hankweave.config.hank import Codon
    from hankweave.runtime.services import RunServices

Status = Literal["completed", "failed", "skipped"]
_CHECKPOINT_KIND: dict[str, Literal["completed", "error", "skipped"]] = {
    "completed": "completed", "failed": "error", "skipped": "skipped"}


@dataclass
class CodonResult:
    """How one codon attempt ended."""

    codon_id: str
    status: Status
    failure_reason: FailureReason | None = None
    checkpoint: str | None = None
    ends_run: bool = False
    """The run cannot go on after this codon (a failed output copy)."""


@dataclass(frozen=True)
class Ending:
    """What the attempt that ends tells its completion (its codon, and why it was stopped)."""

    codon_id: str
    codon: Codon
    entry: ExecutionCodonEntry
    started: float
    """When the attempt started (``time.monotonic()``)."""
    interrupted_reason: FailureReason
    """The failure of the attempt if a shutdown or a client stopped it."""


@dataclass(frozen=True)
class Settled:
    """The final status :func:`settle` decided; the attempt makes its end checkpoint of
    :attr:`checkpoint_kind` and hands the sha to :func:`record_end`."""

    status: Status
    reason: FailureReason | None
    note: str | None
    during: str
    """The record's status when the attempt ended (``failed_during``, ``skipped_during``)."""
    stopping: bool
    """A stop or an interruption ended the attempt (sentinels are not drained)."""

    @property
    def checkpoint_kind(self) -> Literal["completed", "error", "skipped"]:
        return _CHECKPOINT_KIND[self.status]


async def settle(ctx: RunContext, services: RunServices, ending: Ending,
                 outcome: AttemptOutcome) -> Settled:
    """Decide the final status and let the sentinels finish what the codon's events triggered;
    the attempt then makes its end checkpoint."""
    record = ctx.current(ending.codon_id)
    status, reason, note = _final_status(ctx, services, ending, outcome)
    during = record.status
    stopping = outcome.interrupted in ("stop", "human")
    sentinels = services.sentinels
    if sentinels.loaded and not stopping:
        # The first drain (docs/sentinels.md): what the codon's events triggered finishes
        # before its final transition, while the record says so.
        if record.status == "running":
            await ctx.move(ending.codon_id, "completing-sentinels")
        await sentinels.drain()
        await sentinels.record_states()
    return Settled(status, reason, note, during, stopping)


async def record_end(ctx: RunContext, services: RunServices, ending: Ending,
                     outcome: AttemptOutcome, settled: Settled, sha: str | None) -> CodonResult:
    """Record how the attempt ended (its end checkpoint ``sha``), report it, and do what its
    outcome calls for."""
    codon_id, status, reason = ending.codon_id, settled.status, settled.reason
    if sha is None and status == "completed":
        status, reason = "failed", FailureReason(type="unknown", retriable=False,
                                                 message="Checkpoint creation failed")
    if settled.note:
        ctx.reporter.info(settled.note)
    metadata = _end_metadata(status, reason, settled.during, outcome, sha)
    await ctx.move(codon_id, status, **metadata)
    kill_point("codon.recorded")  # test-only (docs/crash-testing.md)
    _report_completion(ctx, ending, status, reason, outcome)
    await services.sentinels.finish_codon(stopping=settled.stopping)
    report_snapshot(ctx)
    if status == "completed" and not await _after_success(ctx, ending, sha):
        return CodonResult(codon_id, status, reason, sha, ends_run=True)
    if status in ("completed", "skipped"):
        await expand_plan(ctx, codon_id, status, outcome.context_exceeded,
                          outcome.budget_exceeded is not None)
    return CodonResult(codon_id, status, reason, sha)


def _end_metadata(status: Status, reason: FailureReason | None, during: str,
                  outcome: AttemptOutcome, sha: str | None) -> dict[str, Any]:
    """The final transition's metadata."""
    metadata: dict[str, Any] = {
        "exit_code": outcome.exit_code, "checkpoint_sha": sha,
        "result_message_received": outcome.result_received,
        "context_exceeded": outcome.context_exceeded,
        "extension_count": outcome.extension_count,
    }
    if status == "completed":
        metadata["budget_exceeded"] = outcome.budget_exceeded
        if during == "initializing" and not sha:
            metadata["checkpoint_sha"] = NO_CHECKPOINT
    elif status == "failed":
        metadata.update(exit_code=outcome.exit_code or 1, failure_reason=reason,
                        failed_during=during)
    else:
        metadata["skipped_during"] = during
    return metadata


def _report_completion(ctx: RunContext, ending: Ending, status: Status,
                       reason: FailureReason | None, outcome: AttemptOutcome) -> None:
    """``codon.completed``; its cost includes what the codon's failed attempts cost before."""
    codon_id = ending.codon_id
    final = ctx.current(codon_id)
    cost = codon_cost(final)
    ctx.budget.record(codon_id, getattr(final, "final_cost", None)
                      or getattr(final, "partial_cost", 0.0) or 0.0)
    retry_costs = ctx.bookkeeping.retry_costs
    reported = 0.0 if status == "skipped" else cost + retry_costs.pop(codon_id, 0.0)
    if status == "failed":
        retry_costs[codon_id] = retry_costs.get(codon_id, 0.0) + cost
    ctx.reporter.codon_completed(
        codon_id=codon_id, success=status == "completed", cost=reported,
        duration_ms=elapsed_ms(ending.started), exit_code=outcome.exit_code or 1,
        failure_reason=reason if status == "failed" else None,
        failure_ignored=status == "failed" and ending.codon.on_failure == "ignore",
        budget_exceeded=outcome.budget_exceeded, cost_complete=codon_cost_complete(final))


def _final_status(ctx: RunContext, services: RunServices, ending: Ending,
                  outcome: AttemptOutcome) -> tuple[Status, FailureReason | None, str | None]:
    """The status, the failure reason and a note for the user, in the original's order."""
    from hankweave.runtime.planner import is_context_exceeded_acceptable

    if outcome.interrupted == "stop":
        return "failed", ending.interrupted_reason, None
    if outcome.interrupted == "human":
        waiting = ", ".join(services.humans.stopped_for)
        return "failed", FailureReason(type="unknown", retriable=True,
                                       message=f"{WAITING_FOR_PERSON}{waiting}"), None
    if outcome.interrupted == "skip":
        return "skipped", None, None
    if outcome.budget_exceeded is not None:
        on_exceeded = ctx.budget.on_exceeded_of(ending.codon_id)  # codon, loop, hank
        note = outcome.budget_message or "budget exceeded"
        if on_exceeded == "fail":
            return "failed", FailureReason(type="unknown", retriable=False,
                                           message=f"Budget exceeded: {note}"), (
                f"Codon failed (budget limit reached: {note})")
        return "completed", None, f"Codon completed (budget limit reached: {note})"
    if outcome.exit_code == 0 and outcome.success:
        return "completed", None, None
    if outcome.context_exceeded and is_context_exceeded_acceptable(ctx.hank, ending.entry):
        return "completed", None, ("Codon completed successfully due to context exceeded"
                                   " (loop termination condition met)")
    reason = outcome.failure_reason or synthesize_missing_failure_reason(
        outcome.exit_code, outcome.session_established)
    return "failed", reason, None


async def _after_success(ctx: RunContext, ending: Ending, sha: str | None) -> bool:
    """Copy the outputs and archive; False when a failed copy ends the run (docs/behaviour.md §3.6)."""
    codon, codon_id = ending.codon, ending.codon_id
    from hankweave.runtime.outputs import copy_codon_outputs

    if not await copy_codon_outputs(ctx, codon_id):
        return False
    if codon.archive_on_success:
        from hankweave.runtime.archive import ArchiveManifest, archive_on_success

        archived = archive_on_success(
            codon.archive_on_success, agent_root=ctx.layout.agent_root,
            execution_dir=ctx.layout.path, codon_id=codon_id,
            loop_context=ending.entry.loop_context, checkpoint_sha=sha or "orphan",
            manifest=ArchiveManifest.load(ctx.layout.archive_manifest))
        ctx.reporter.archived(codon_id, archived.archived,
                              [(failure.path, failure.error) for failure in archived.failed])
    return True


async def expand_plan(ctx: RunContext, codon_id: str,
                      outcome: Literal["completed", "skipped", "failed-ignored"],
                      context_exceeded: bool, budget_exceeded: bool) -> None:
    """Grow the plan after ``codon_id`` (the next loop iteration) and report a finished
    iteration."""
    from hankweave.runtime.planner import expand_after

    loop_breach = ctx.budget.loop_breach(ctx.state.execution_plan, codon_id)
    if loop_breach is not None:
        ctx.reporter.info(f"Loop budget reached ({loop_breach.message}); the loop ends")
    expansion = expand_after(ctx.state.execution_plan, ctx.hank, codon_id, outcome=outcome,
                             context_exceeded=context_exceeded,
                             budget_exceeded=budget_exceeded or loop_breach is not None)
    position, remove, entries = plan_splice(ctx.state.execution_plan, expansion.plan)
    if remove or entries:
        await ctx.transition(ExecutionPlanUpdated(data=ExecutionPlanData(
            position=position, remove=remove, entries=entries)))
    found = plan_positions(ctx.state.execution_plan).get(codon_id)
    entry = ctx.state.execution_plan[found] if found is not None else None
    if expansion.iteration_completed and entry is not None and entry.loop_context:
        loop_id, iteration = entry.loop_context.loop_id, entry.loop_context.iteration
        duration_ms, cost, tokens = _iteration_totals(ctx, loop_id, iteration)
        ctx.reporter.loop_iteration_completed(
            loop_id=loop_id, iteration=iteration, duration_ms=duration_ms, cost=cost,
            tokens=tokens, is_final=expansion.is_final,
            termination_reason=expansion.termination_reason)


def _iteration_totals(ctx: RunContext, loop_id: str, iteration: int) -> tuple[int, float, int]:
    """Duration (ms), cost and input+output tokens of one loop iteration's finished records
    in the thread (failed retry attempts included: their time and money were spent)."""
    duration_ms, cost, tokens = 0, 0.0, 0
    for item in ctx.thread().iteration_codons(loop_id, iteration):
        record = item.codon
        if not is_terminal_status(record.status):
            continue
        end = getattr(record, "end_time", None)
        if end:
            elapsed = parse_iso(end) - parse_iso(record.start_time)
            duration_ms += int(elapsed.total_seconds() * 1000)
        cost += codon_cost(record)
        used = codon_tokens(record)
        tokens += used.input_tokens + used.output_tokens
    return duration_ms, cost, tokens


def report_snapshot(ctx: RunContext) -> None:
    """``state.snapshot`` of the thread as it is now."""
    ctx.reporter.snapshot(ctx.thread(), ctx.reporter.costs.total(ctx.state), ctx.elapsed_ms())
