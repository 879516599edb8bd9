"""Regenerate this example execution directory's state with the real reducer and store.

The scenario is a kill-and-resume of a three-codon hank: the first run completes ``outline``,
is killed while ``draft`` runs (the next start marks it crashed), and a continuation run after
``outline`` completes ``draft`` and ``review``.  Timestamps, pids and SHAs are fixed so the file
is reproducible.

Usage: python examples/execution-demo/make_state.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hankweave.state.store import StateStore
from hankweave.state.transitions import (
    AssistantMessageCountData,
    AssistantMessageCountUpdated,
    CodonFinalCostData,
    CodonFinalCostSet,
    CodonMetadata,
    CodonStarted,
    CodonStartedData,
    CodonTransitioned,
    CodonTransitionedData,
    CostsIncremented,
    CostsIncrementedData,
    RunCompleted,
    RunCrashed,
    RunCrashedData,
    RunRef,
    RunStarted,
    RunStartedData,
    StateTransition,
)
from hankweave.state.types import (
    ContinuationSource,
    ContinuationStart,
    ExecutionCodonEntry,
    FreshStart,
    PlanCodon,
    TokenUsage,
)

HERE = Path(__file__).parent
HW = HERE / ".hankweave"
FIRST, SECOND = "1788337916070-aqhfn", "1788338002113-k2m9p"
PLAN = [
    ExecutionCodonEntry(codon_id=cid, codon=PlanCodon(
        id=cid, name=name, continuation_mode=mode,
        model={"providerId": "anthropic", "modelId": "claude-haiku-4-5"}))
    for cid, name, mode in [("outline", "Outline the report", "fresh"),
                            ("draft", "Draft the report", "continue-previous"),
                            ("review", "Review and fix", "fresh")]
]
OUTLINE_SESSION = "83b52eaa-5147-4130-aef4-818c9c663c77"
_clock = iter(range(10_000))


def at() -> str:
    tick = next(_clock)
    return f"2026-09-02T08:{31 + tick // 60:02d}:{tick % 60:02d}.000Z"


def stamp(transition: StateTransition) -> StateTransition:
    transition.timestamp = at()
    return transition


def move(run: str, codon: str, frm: str, to: str, **meta: object) -> StateTransition:
    return stamp(CodonTransitioned(data=CodonTransitionedData.model_validate(
        {"runId": run, "codonId": codon, "from": frm, "to": to,
         "metadata": CodonMetadata(**meta)})))


def work(run: str, codon: str, session: str, cost: float, messages: int,
         finish: bool = True, resumes: str | None = None) -> list[StateTransition]:
    steps: list[StateTransition] = [
        stamp(CodonStarted(data=CodonStartedData(run_id=run, codon_id=codon))),
        move(run, codon, "preparing", "starting"),
        move(run, codon, "starting", "initializing", claude_pid=952404,
             claude_log_path=f".hankweave/runs/{run}/{codon}-claude.log",
             previous_session_id=resumes),
        move(run, codon, "initializing", "running", claude_session_id=session),
    ]
    for n in range(1, messages + 1):
        steps.append(stamp(CostsIncremented(data=CostsIncrementedData(
            run_id=run, codon_id=codon, cost_delta=cost / messages,
            tokens_delta=TokenUsage(input_tokens=9, output_tokens=210, cache_read_tokens=18000)))))
        steps.append(stamp(AssistantMessageCountUpdated(data=AssistantMessageCountData(
            run_id=run, codon_id=codon, new_count=n))))
    if finish:
        steps.append(stamp(CodonFinalCostSet(data=CodonFinalCostData(
            run_id=run, codon_id=codon, final_cost=cost,
            final_tokens=TokenUsage(input_tokens=9 * messages, output_tokens=210 * messages,
                                    cache_creation_tokens=683,
                                    cache_read_tokens=18000 * messages)))))
        steps.append(move(run, codon, "running", "completed", result_message_received=True,
                          checkpoint_sha=f"{codon[:4].encode().hex():0<40}"))
    return steps


def transitions() -> list[StateTransition]:
    first = RunStarted(data=RunStartedData(
        run_id=FIRST, run_folder=f"/executions/demo/.hankweave/runs/{FIRST}",
        git_branch=f"run-{FIRST}", starting_conditions=FreshStart(), server_pid=52624,
        execution_plan=PLAN))
    second = RunStarted(data=RunStartedData(
        run_id=SECOND, run_folder=f"/executions/demo/.hankweave/runs/{SECOND}",
        git_branch=f"run-{SECOND}",
        starting_conditions=ContinuationStart(
            source=ContinuationSource(run_id=FIRST, after_codon="outline",
                                      checkpoint_sha=f"{b'outl'.hex():0<40}"),
            reason="continue"),
        server_pid=52901))
    return [
        stamp(first),
        *work(FIRST, "outline", OUTLINE_SESSION, 0.0105, 3),
        *work(FIRST, "draft", "1f0c7d2e-0b5a-4d8e-9a51-3c2b8f6a7e10", 0.0042, 2, finish=False,
             resumes=OUTLINE_SESSION),
        stamp(RunCrashed(data=RunCrashedData(run_id=FIRST, detected_at="2026-09-02T08:40:00.000Z",
                                             last_codon_status="running"))),
        stamp(second),
        *work(SECOND, "draft", "5d6e7f80-1a2b-4c3d-8e9f-0a1b2c3d4e5f", 0.0213, 4,
             resumes=OUTLINE_SESSION),
        *work(SECOND, "review", "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d", 0.0087, 2),
        stamp(RunCompleted(data=RunRef(run_id=SECOND))),
    ]


def main() -> None:
    shutil.rmtree(HW, ignore_errors=True)
    store = StateStore.open(HW)
    for transition in transitions():
        store.transition_sync(transition)
    store.close_sync()
    for leftover in ("state.wal", "state.json.bak"):
        (HW / leftover).unlink(missing_ok=True)
    print(f"wrote {HW / 'state.json'}")


if __name__ == "__main__":
    main()
