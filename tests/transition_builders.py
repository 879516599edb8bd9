"""Short constructors for state transitions, so tests read like the scenario they describe."""

from __future__ import annotations

import os
from typing import Any

from hankweave.state.transitions import (
    AssistantMessageCountData,
    AssistantMessageCountUpdated,
    CheckpointCreated,
    CheckpointCreatedData,
    CodonFinalCostData,
    CodonFinalCostSet,
    CodonMetadata,
    CodonStarted,
    CodonStartedData,
    CodonTransitioned,
    CodonTransitionedData,
    CostsIncremented,
    CostsIncrementedData,
    CostsUpdated,
    CostsUpdatedData,
    ExtensionCountData,
    ExtensionCountUpdated,
    RunCompleted,
    RunCrashed,
    RunCrashedData,
    RunFailed,
    RunFailedData,
    RunInterrupted,
    RunRef,
    RunStarted,
    RunStartedData,
    SentinelStatesData,
    SentinelStatesUpdated,
)
from hankweave.state.types import (
    ContinuationSource,
    ContinuationStart,
    FailureReason,
    FreshStart,
    SentinelState,
    TokenUsage,
)

RUN = "run-1"
METADATA_FOR = {
    "starting": {},
    "initializing": {"claude_pid": 900001, "claude_log_path": ".hankweave/runs/r/c-claude.log"},
    "running": {"claude_session_id": "session-1"},
    "completing-sentinels": {},
    "completed": {"checkpoint_sha": "c" * 40, "result_message_received": True},
    "failed": {
        "exit_code": 1,
        "failure_reason": FailureReason(type="api-error", retriable=True, message="boom"),
        "failed_during": "running",
    },
    "skipped": {"skipped_during": "running"},
}


def run_started(run_id: str = RUN, *, after: str | None = None, continuation_of: str | None = None,
                sha: str = "s" * 40, pid: int | None = None) -> RunStarted:
    conditions: Any = FreshStart()
    if continuation_of is not None:
        conditions = ContinuationStart(
            source=ContinuationSource(run_id=continuation_of, after_codon=after, checkpoint_sha=sha),
            reason="continue",
        )
    return RunStarted(data=RunStartedData(
        run_id=run_id, run_folder=f"/exec/.hankweave/runs/{run_id}", git_branch=f"run-{run_id}",
        starting_conditions=conditions, server_pid=os.getpid() if pid is None else pid))


def run_completed(run_id: str = RUN) -> RunCompleted:
    return RunCompleted(data=RunRef(run_id=run_id))


def run_failed(run_id: str = RUN) -> RunFailed:
    return RunFailed(data=RunFailedData(run_id=run_id))


def run_interrupted(run_id: str = RUN) -> RunInterrupted:
    return RunInterrupted(data=RunRef(run_id=run_id))


def run_crashed(run_id: str = RUN) -> RunCrashed:
    return RunCrashed(data=RunCrashedData(run_id=run_id, detected_at="2026-01-01T00:00:00.000Z"))


def codon_started(codon: str, run_id: str = RUN) -> CodonStarted:
    return CodonStarted(data=CodonStartedData(run_id=run_id, codon_id=codon))


def moved(codon: str, frm: str, to: str, run_id: str = RUN, **metadata: Any) -> CodonTransitioned:
    """A CodonTransitioned with the metadata its target needs, overridable by keyword."""
    meta = {**METADATA_FOR.get(to, {}), **metadata}
    return CodonTransitioned(data=CodonTransitionedData.model_validate(
        {"runId": run_id, "codonId": codon, "from": frm, "to": to,
         "metadata": CodonMetadata(**meta)}))


def bare_move(codon: str, frm: str, to: str, run_id: str = RUN,
              metadata: CodonMetadata | None = None) -> CodonTransitioned:
    return CodonTransitioned(data=CodonTransitionedData.model_validate(
        {"runId": run_id, "codonId": codon, "from": frm, "to": to, "metadata": metadata}))


def costs(codon: str, delta: float, input_tokens: int = 10, run_id: str = RUN) -> CostsIncremented:
    return CostsIncremented(data=CostsIncrementedData(
        run_id=run_id, codon_id=codon, cost_delta=delta,
        tokens_delta=TokenUsage(input_tokens=input_tokens, output_tokens=1)))


def costs_set(codon: str, cost: float, run_id: str = RUN) -> CostsUpdated:
    return CostsUpdated(data=CostsUpdatedData(run_id=run_id, codon_id=codon, cost=cost,
                                              tokens=TokenUsage(input_tokens=7)))


def final_cost(codon: str, cost: float, run_id: str = RUN) -> CodonFinalCostSet:
    return CodonFinalCostSet(data=CodonFinalCostData(
        run_id=run_id, codon_id=codon, final_cost=cost, final_tokens=TokenUsage(output_tokens=99)))


def messages(codon: str, count: int, run_id: str = RUN) -> AssistantMessageCountUpdated:
    return AssistantMessageCountUpdated(data=AssistantMessageCountData(
        run_id=run_id, codon_id=codon, new_count=count))


def extensions(codon: str, count: int, run_id: str = RUN) -> ExtensionCountUpdated:
    return ExtensionCountUpdated(data=ExtensionCountData(
        run_id=run_id, codon_id=codon, extension_count=count))


def checkpoint(codon: str, kind: str, sha: str, run_id: str = RUN) -> CheckpointCreated:
    return CheckpointCreated(data=CheckpointCreatedData(
        run_id=run_id, codon_id=codon, checkpoint_type=kind, sha=sha, branch=f"run-{run_id}"))


def sentinels(codon: str, cost: float = 0.25, run_id: str = RUN) -> SentinelStatesUpdated:
    state = SentinelState(id="quality", model="anthropic/claude-haiku-4-5",
                          loaded_at="2026-01-01T00:00:00.000Z", llm_call_count=1,
                          total_triggers=2, total_cost=cost)
    return SentinelStatesUpdated(data=SentinelStatesData(
        run_id=run_id, codon_id=codon, sentinel_states=[state], total_cost=cost))


PATH_TO = {
    "preparing": [],
    "starting": ["starting"],
    "initializing": ["starting", "initializing"],
    "running": ["starting", "initializing", "running"],
    "completing-sentinels": ["starting", "initializing", "running", "completing-sentinels"],
}


def lifecycle_to(codon: str, status: str, run_id: str = RUN) -> list[Any]:
    """The transitions that take a fresh record of ``codon`` from preparing to ``status``."""
    out: list[Any] = [codon_started(codon, run_id)]
    current = "preparing"
    for nxt in PATH_TO[status]:
        out.append(moved(codon, current, nxt, run_id))
        current = nxt
    return out
