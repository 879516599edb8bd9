"""Small builders for ``HankweaveState`` scenarios, so tests read like the history they describe.

Two styles:

* record and run builders (``completed("a")``, ``fresh_run("r1", ...)``, ``make_state(...)``) make
  the persisted models directly, for states the runtime could leave behind (including crashed or
  hand-edited ones the reducer would never produce);
* :class:`Scenario` drives the real reducer, transition by transition, for states exactly as the
  runtime writes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import (
    AssistantMessageCountData,
    AssistantMessageCountUpdated,
    CodonMetadata,
    CodonStarted,
    CodonStartedData,
    CodonTransitioned,
    CodonTransitionedData,
    CostsUpdated,
    CostsUpdatedData,
    RunCompleted,
    RunCrashed,
    RunCrashedData,
    RunFailed,
    RunFailedData,
    RunRef,
    RunStarted,
    RunStartedData,
    StateTransition,
)
from hankweave.state.types import (
    CodonExecution,
    CompletedCodon,
    CompletingSentinelsCodon,
    ContinuationSource,
    ContinuationStart,
    ExecutedSentinels,
    ExecutionCodonEntry,
    FailedCodon,
    FailureReason,
    FreshStart,
    HankweaveState,
    InitializingCodon,
    LoadedSentinels,
    PlanCodon,
    PreparingCodon,
    Run,
    RunningCodon,
    SkippedCodon,
    StartingCodon,
    TokenUsage,
    dump_state,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ts(seconds: int) -> str:
    """A deterministic ISO timestamp ``seconds`` after 2026-01-01T00:00:00Z."""
    moment = T0 + timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tokens(inp: int = 0, out: int = 0, cache_read: int = 0, cache_write: int = 0) -> TokenUsage:
    return TokenUsage(
        input_tokens=inp,
        output_tokens=out,
        cache_read_tokens=cache_read,
        cache_creation_tokens=cache_write,
    )


def plan(*codon_ids: str, continue_previous: Iterable[str] = ()) -> list[ExecutionCodonEntry]:
    """An execution plan of plain codons; ids in ``continue_previous`` resume the previous session."""
    resuming = set(continue_previous)
    return [
        ExecutionCodonEntry(
            codon_id=codon_id,
            codon=PlanCodon(
                id=codon_id,
                continuation_mode="continue-previous" if codon_id in resuming else "fresh",
            ),
        )
        for codon_id in codon_ids
    ]


# ----- codon records -----


def completed(
    codon_id: str,
    *,
    cost: float = 0.0,
    used: TokenUsage | None = None,
    sha: str | None = None,
    rig: str | None = None,
    session: str | None = "session",
    previous_session: str | None = None,
    sentinel_cost: float | None = None,
) -> CompletedCodon:
    return CompletedCodon(
        codon_id=codon_id,
        start_time=ts(0),
        end_time=ts(1),
        final_cost=cost,
        final_tokens=used or TokenUsage(),
        completion_checkpoint=sha or f"done-{codon_id}",
        rig_setup_checkpoint=rig,
        claude_session_id=session,
        previous_session_id=previous_session,
        sentinels=_sentinels(sentinel_cost),
    )


def failed(
    codon_id: str,
    *,
    cost: float = 0.0,
    used: TokenUsage | None = None,
    rig: str | None = None,
    error_sha: str | None = None,
    session: str | None = None,
    message: str = "agent exited with an error",
) -> FailedCodon:
    return FailedCodon(
        codon_id=codon_id,
        start_time=ts(0),
        end_time=ts(1),
        failed_during="running",
        exit_code=1,
        failure_reason=FailureReason(type="api-error", retriable=False, message=message),
        partial_cost=cost,
        partial_tokens=used or TokenUsage(),
        rig_setup_checkpoint=rig,
        error_checkpoint=error_sha,
        claude_session_id=session,
    )


def skipped(
    codon_id: str,
    *,
    cost: float = 0.0,
    used: TokenUsage | None = None,
    messages: int | None = None,
    session: str | None = "session",
    sha: str | None = None,
) -> SkippedCodon:
    return SkippedCodon(
        codon_id=codon_id,
        start_time=ts(0),
        end_time=ts(1),
        skipped_during="running",
        partial_cost=cost,
        partial_tokens=used or TokenUsage(),
        assistant_message_count=messages,
        claude_session_id=session,
        skip_checkpoint=sha,
    )


def running(
    codon_id: str,
    *,
    cost: float = 0.0,
    used: TokenUsage | None = None,
    completing_sentinels: bool = False,
    sentinel_cost: float | None = None,
) -> RunningCodon:
    cls = CompletingSentinelsCodon if completing_sentinels else RunningCodon
    return cls(
        codon_id=codon_id,
        start_time=ts(0),
        claude_pid=4242,
        claude_log_path=f".hankweave/runs/r/{codon_id}-claude.log",
        claude_session_id="session",
        current_cost=cost,
        current_tokens=used or TokenUsage(),
        sentinels=None
        if sentinel_cost is None
        else LoadedSentinels(loaded=[], total_cost=sentinel_cost),
    )


def pending(codon_id: str, status: str = "preparing", *, rig: str | None = None) -> CodonExecution:
    """A record that has not reached ``running``: preparing, starting or initializing."""
    if status == "preparing":
        return PreparingCodon(codon_id=codon_id, start_time=ts(0), rig_setup_checkpoint=rig)
    if status == "starting":
        return StartingCodon(codon_id=codon_id, start_time=ts(0), rig_setup_checkpoint=rig)
    if status == "initializing":
        return InitializingCodon(
            codon_id=codon_id,
            start_time=ts(0),
            rig_setup_checkpoint=rig,
            claude_pid=4242,
            claude_log_path=f".hankweave/runs/r/{codon_id}-claude.log",
        )
    raise ValueError(f"not a pending status: {status}")


def _sentinels(total: float | None) -> ExecutedSentinels | None:
    return None if total is None else ExecutedSentinels(executed=[], total_cost=total)


# ----- runs and states -----


def fresh_run(run_id: str, *codons: CodonExecution, status: str = "completed") -> Run:
    return _run(run_id, list(codons), status, FreshStart())


def continuation_run(
    run_id: str,
    *codons: CodonExecution,
    parent: str,
    after: str | None,
    sha: str = "restored-sha",
    status: str = "completed",
    reason: str | None = "continue",
) -> Run:
    start = ContinuationStart(
        source=ContinuationSource(run_id=parent, after_codon=after, checkpoint_sha=sha),
        reason=reason,
    )
    return _run(run_id, list(codons), status, start)


def _run(run_id: str, codons: list[CodonExecution], status: str, start: object) -> Run:
    return Run(
        run_id=run_id,
        run_folder=f"/exec/.hankweave/runs/{run_id}",
        git_branch=f"run-{run_id}",
        starting_conditions=start,
        codons=codons,
        status=status,
        start_time=ts(0),
        end_time=None if status == "running" else ts(100),
        server_pid=4242,
    )


def make_state(
    *runs: Run,
    plan_entries: list[ExecutionCodonEntry] | None = None,
    current_run_id: str | None = None,
) -> HankweaveState:
    """A state with ``runs`` given newest first; the running run (if any) is the current one."""
    if current_run_id is None:
        current_run_id = next((run.run_id for run in runs if run.status == "running"), None)
    return HankweaveState(
        runs=list(runs), current_run_id=current_run_id, execution_plan=plan_entries or []
    )


def write_state(exec_dir: Path, state: HankweaveState) -> Path:
    """Write ``state`` as ``<exec_dir>/.hankweave/state.json`` the way the runtime does."""
    path = exec_dir / ".hankweave" / "state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(dump_state(state))
    return path


# ----- reducer-driven scenarios -----


class Scenario:
    """Build a state through the real reducer: ``Scenario(plan("a", "b")).start_run("r1")...``."""

    def __init__(self, plan_entries: list[ExecutionCodonEntry] | None = None) -> None:
        self.plan = plan_entries or []
        self.state = HankweaveState()
        self.transitions: list[StateTransition] = []
        self._clock = 0

    def apply(self, transition: StateTransition) -> Scenario:
        self.state = apply_transition(self.state, transition)
        self.transitions.append(transition)
        return self

    def _now(self) -> str:
        self._clock += 1
        return ts(self._clock)

    # -- runs --

    def start_run(
        self,
        run_id: str,
        *,
        parent: str | None = None,
        after: str | None = None,
        sha: str = "restored-sha",
        reason: str | None = "continue",
    ) -> Scenario:
        start: FreshStart | ContinuationStart
        if parent is None:
            start = FreshStart()
        else:
            start = ContinuationStart(
                source=ContinuationSource(run_id=parent, after_codon=after, checkpoint_sha=sha),
                reason=reason,
            )
        data = RunStartedData(
            run_id=run_id,
            run_folder=f"/exec/.hankweave/runs/{run_id}",
            git_branch=f"run-{run_id}",
            starting_conditions=start,
            server_pid=4242,
            execution_plan=self.plan if parent is None else None,
        )
        return self.apply(RunStarted(timestamp=self._now(), data=data))

    def end_run(self, run_id: str, status: str = "completed") -> Scenario:
        now = self._now()
        if status == "completed":
            return self.apply(RunCompleted(timestamp=now, data=RunRef(run_id=run_id)))
        if status == "failed":
            return self.apply(RunFailed(timestamp=now, data=RunFailedData(run_id=run_id)))
        return self.apply(
            RunCrashed(timestamp=now, data=RunCrashedData(run_id=run_id, detected_at=now))
        )

    # -- codons --

    def _status(self, run_id: str, codon_id: str) -> str:
        run = self.state.run_by_id(run_id)
        assert run is not None
        return next(c.status for c in reversed(run.codons) if c.codon_id == codon_id)

    def _move(
        self, run_id: str, codon_id: str, to: str, metadata: CodonMetadata | None = None
    ) -> Scenario:
        data = CodonTransitionedData(
            run_id=run_id,
            codon_id=codon_id,
            from_=self._status(run_id, codon_id),
            to=to,
            metadata=metadata,
        )
        return self.apply(CodonTransitioned(timestamp=self._now(), data=data))

    def start_codon(self, run_id: str, codon_id: str, *, rig: str | None = None) -> Scenario:
        """Start a codon and bring it to ``running`` with no cost yet."""
        self.apply(
            CodonStarted(
                timestamp=self._now(), data=CodonStartedData(run_id=run_id, codon_id=codon_id)
            )
        )
        self._move(run_id, codon_id, "starting", CodonMetadata(checkpoint_sha=rig))
        self._move(
            run_id,
            codon_id,
            "initializing",
            CodonMetadata(claude_pid=4242, claude_log_path=f"runs/{run_id}/{codon_id}-claude.log"),
        )
        return self._move(
            run_id, codon_id, "running", CodonMetadata(claude_session_id=f"sess-{codon_id}")
        )

    def spend(
        self, run_id: str, codon_id: str, cost: float, used: TokenUsage | None = None
    ) -> Scenario:
        data = CostsUpdatedData(
            run_id=run_id, codon_id=codon_id, cost=cost, tokens=used or TokenUsage()
        )
        return self.apply(CostsUpdated(timestamp=self._now(), data=data))

    def complete(
        self,
        run_id: str,
        codon_id: str,
        *,
        cost: float = 0.0,
        used: TokenUsage | None = None,
        sha: str | None = None,
        rig: str | None = None,
    ) -> Scenario:
        """Run a codon from start to completion at ``cost``."""
        self.start_codon(run_id, codon_id, rig=rig)
        self.spend(run_id, codon_id, cost, used)
        return self.finish(run_id, codon_id, sha=sha)

    def finish(self, run_id: str, codon_id: str, *, sha: str | None = None) -> Scenario:
        """Complete a running codon with what it has spent so far."""
        return self._move(
            run_id, codon_id, "completed", CodonMetadata(checkpoint_sha=sha or f"done-{codon_id}")
        )

    def fail(
        self,
        run_id: str,
        codon_id: str,
        *,
        cost: float = 0.0,
        used: TokenUsage | None = None,
        message: str = "agent exited with an error",
    ) -> Scenario:
        """Run a codon from start to failure after spending ``cost``."""
        self.start_codon(run_id, codon_id)
        self.spend(run_id, codon_id, cost, used)
        return self.abort(run_id, codon_id, message=message)

    def abort(
        self, run_id: str, codon_id: str, *, message: str = "agent exited with an error"
    ) -> Scenario:
        """Fail a running codon, non-retriably."""
        reason = FailureReason(type="api-error", retriable=False, message=message)
        return self._move(
            run_id,
            codon_id,
            "failed",
            CodonMetadata(exit_code=1, failure_reason=reason, failed_during="running"),
        )

    def skip(self, run_id: str, codon_id: str, *, cost: float = 0.0, messages: int = 0) -> Scenario:
        self.start_codon(run_id, codon_id)
        self.spend(run_id, codon_id, cost)
        self.apply(
            AssistantMessageCountUpdated(
                timestamp=self._now(),
                data=AssistantMessageCountData(
                    run_id=run_id, codon_id=codon_id, new_count=messages
                ),
            )
        )
        return self._move(run_id, codon_id, "skipped", CodonMetadata(skipped_during="running"))

    def write(self, exec_dir: Path) -> Path:
        return write_state(exec_dir, self.state)
