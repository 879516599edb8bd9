"""What a start says about the runs it found crashed: one ``run.crashed`` event each.

The crash repair itself happens before the journal exists (:func:`hankweave.state.boot.
take_ownership` marks the run ``crashed`` and its in-flight codon ``failed``), so the runtime
reports it once its event bus is live, at the start of :meth:`Runtime.boot`, together with what
this start does about it.  The next step is decided here with the same rules boot then follows
(a run that waited for a person is resumed; a failed thread is rolled back to its last success;
otherwise the new run continues after the newest finished codon), so the event says what
happens, not a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hankweave.runtime.reporter import Reporter
from hankweave.runtime.rollback import last_success_target
from hankweave.state.reducer import CRASH_REASON
from hankweave.state.thread import ExecutionThread
from hankweave.state.types import (
    CodonExecution,
    ContinuationStart,
    HankweaveState,
    Run,
    StartingConditions,
)

NextStep = Literal["resume", "rollback", "continue"]


@dataclass(frozen=True)
class CrashFollowUp:
    """What this start does after finding crashed runs."""

    step: NextStep
    after_codon_id: str | None
    """The codon whose checkpoint the next run starts from, if any."""
    says: str
    """The step in words: ``rolling back to the last successful codon, a, and retrying b``."""


def in_flight_codon(run: Run) -> CodonExecution | None:
    """The codon the crash repair failed (it was unfinished when the runtime died), if any."""
    for codon in reversed(run.codons):
        if codon.status == "failed" and getattr(codon, "failure_reason", None) == CRASH_REASON:
            return codon
    return None


def follow_up(state: HankweaveState, thread: ExecutionThread, resumed: Run | None,
              resume_point: Callable[[ExecutionThread], StartingConditions]) -> CrashFollowUp:
    """The step :meth:`Runtime.boot` takes, in the order it decides it."""
    if resumed is not None:
        return CrashFollowUp("resume", None,
                             f"resuming run {resumed.run_id}, which waited for a person")
    if thread.failed:
        target = last_success_target(thread, state.initial_checkpoint)
        retried = thread.codons[0].codon.codon_id
        if target.checkpoint_type == "completed":
            return CrashFollowUp("rollback", target.codon_id,
                                 f"rolling back to the last successful codon, {target.codon_id},"
                                 f" and retrying codon {retried}")
        if target.checkpoint_type == "rig-setup":
            return CrashFollowUp("rollback", None, f"rolling back to the rig setup of codon"
                                                   f" {target.codon_id} and retrying it")
        return CrashFollowUp("rollback", None, "rolling back to the initial checkpoint and"
                                               f" retrying from codon {retried}")
    conditions = resume_point(thread)
    after = conditions.source.after_codon if isinstance(conditions, ContinuationStart) else None
    if after is None:
        return CrashFollowUp("continue", None, "starting again from the first codon")
    then = f", with codon {thread.next_codon_id}" if thread.next_codon_id else ""
    return CrashFollowUp("continue", after, f"continuing after codon {after}{then}")


def report_crashes(reporter: Reporter, state: HankweaveState, crashed_run_ids: Sequence[str],
                   ended_agents: Mapping[str, Sequence[int]], then: CrashFollowUp) -> None:
    """Emit ``run.crashed`` for each run this start found crashed, oldest first."""
    crashed = set(crashed_run_ids)
    for run in reversed(state.runs):  # state.runs is newest first
        if run.run_id not in crashed:
            continue
        run_id = run.run_id
        codon = in_flight_codon(run)
        status = getattr(codon, "failed_during", None) if codon is not None else None
        during = f" while codon {codon.codon_id} was {status}" if codon is not None else \
            " between codons"
        pids = list(ended_agents.get(run_id, ()))
        ended = "".join(f" Ended agent process {pid}, left running by crashed run {run_id}."
                        for pid in pids)
        reporter.run_crashed(
            run_id=run_id, detected_at=run.end_time or "",
            codon_id=codon.codon_id if codon is not None else None, codon_status=status,
            ended_agent_pids=pids, next_step=then.step, after_codon_id=then.after_codon_id,
            message=f"Run {run_id} had crashed{during}; it is marked crashed.{ended}"
                    f" Next: {then.says}.")
