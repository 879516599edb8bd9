"""Finishing, at start, what a crash cut short after a codon was recorded finished.

A codon's completion goes on after its ``completed`` (or ``skipped``) transition: the outputs
are copied and the plan grows by the loop's next iteration (docs/behaviour.md §3.6).  The
record says the codon is done, so it never runs again; a runtime killed in between would leave
the outputs half copied and the loop cut short.  When the next runtime boots, it does both
again for the newest finished codon of the thread: growing the plan is idempotent, and the
copy is redone unless it is recorded finished, keeping what the interrupted copy wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from hankweave.runtime.completion import expand_plan
from hankweave.runtime.errors import RuntimeCommandError
from hankweave.runtime.outputs import copy_codon_outputs, last_finished_copy
from hankweave.runtime.planner import PlanError, expand_after
from hankweave.state.types import is_terminal_status

if TYPE_CHECKING:
    from hankweave.runtime.context import RunContext
    from hankweave.state.thread import ThreadCodon


async def finish_interrupted_completion(ctx: RunContext) -> bool:
    """Copy the outputs and grow the plan after the thread's newest finished codon where a
    crash stopped them.  Returns False when the copy fails (reported; the run ends)."""
    newest = next((item for item in ctx.thread().codons
                   if is_terminal_status(item.codon.status)), None)
    if newest is None or newest.codon.status not in ("completed", "skipped"):
        return True
    try:
        ctx.codon_config(newest.codon.codon_id)
    except RuntimeCommandError:  # the hank no longer has that codon
        return True
    if newest.codon.status == "completed" and not await _finish_copy(ctx, newest):
        return False
    await _finish_expansion(ctx, newest)
    return True


async def _finish_copy(ctx: RunContext, newest: ThreadCodon) -> bool:
    codon_id = newest.codon.codon_id
    if not ctx.codon_config(codon_id).output_files or ctx.config.settings.output_directory is None:
        return True
    run = ctx.state.run_by_id(newest.run_id)
    if run is None or newest.codon_index_in_run != len(run.codons) - 1:
        return True  # codons ran after it (a rollback came back to it): its copy was done
    if last_finished_copy(ctx.layout.output_copy_marker) == (newest.run_id, codon_id):
        return True
    ctx.reporter.info(f"Finishing the output copy of codon {codon_id}, which did not finish")
    return await copy_codon_outputs(ctx, codon_id, run_id=newest.run_id, resume=True)


async def _finish_expansion(ctx: RunContext, newest: ThreadCodon) -> None:
    record = newest.codon
    status: Literal["completed", "skipped"] = (
        "completed" if record.status == "completed" else "skipped")
    # The record does not keep whether the context was exceeded: taken as not.
    budget_exceeded = getattr(record, "budget_exceeded", None) is not None
    try:
        expansion = expand_after(ctx.state.execution_plan, ctx.hank, record.codon_id,
                                 outcome=status, context_exceeded=False,
                                 budget_exceeded=budget_exceeded)
    except PlanError:  # not in the plan (an older hank's codon): nothing to grow
        return
    if expansion.plan != ctx.state.execution_plan:  # else done before the crash: no event twice
        await expand_plan(ctx, record.codon_id, status, False, budget_exceeded)
