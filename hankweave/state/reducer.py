"""The pure state reducer: ``apply_transition(state, transition) -> state``.

The reducer never mutates its input.  It copies only the path it changes (the state, one run,
one codon record), so a cost update on a long history costs the same as on a short one apart
from one list copy.

Deliberate differences from the original (see ``docs/differences.md``):

* every codon-targeted transition acts on the **last** record of that codon id in the run
  (retries append records; the original sometimes picked the first, stale one);
* terminal records are immutable: late cost, message-count or sentinel updates are ignored, and
  a terminal checkpoint field is only filled in when it is still empty;
* an unknown run, a second running run, a second non-terminal codon in a run or a change to a
  finished run are refused with :class:`InvalidTransitionError` instead of being ignored;
* ``RunCrashed`` clears ``currentRunId`` when it names the crashed run.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from pydantic import BaseModel

from hankweave.state.transitions import (
    AgentProcessReported,
    AssistantMessageCountUpdated,
    CheckpointCreated,
    CodonFinalCostSet,
    CodonMetadata,
    CodonStarted,
    CodonTransitioned,
    CodonTransitionedData,
    CostsIncremented,
    CostsUpdated,
    ExecutionPlanUpdated,
    ExtensionCountUpdated,
    InitialCheckpointSet,
    InterruptionAnswered,
    InterruptionCreated,
    InvalidTransitionError,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunInterrupted,
    RunStarted,
    SentinelStatesUpdated,
    StateTransition,
    check_codon_transition,
    validate_transition_metadata,
)
from hankweave.state.types import (
    CODON_CLASSES,
    CodonExecution,
    ExecutedSentinels,
    FailureReason,
    HankweaveState,
    LoadedSentinels,
    PreparingCodon,
    Run,
    TokenUsage,
    is_live_run,
    is_terminal_status,
    last_record,
)

Model = TypeVar("Model", bound=BaseModel)


def _evolve(model: Model, update: dict[str, Any]) -> Model:
    """``model.model_copy(update=update)``, at a third of its cost: the reducer copies a model
    or three on every transition, so this is most of what a cost update costs.  The same
    attributes as pydantic's own ``__copy__`` (a shallow copy, fields set, extra fields; the
    state's models have no private attributes): tests/test_reducer.py compares the two."""
    cls = type(model)
    new = cls.__new__(cls)
    values = model.__dict__.copy()
    extra = model.__pydantic_extra__
    if extra is not None:
        extra = extra.copy()
        fields = cls.__pydantic_fields__
        for name, value in update.items():
            if name in fields:
                values[name] = value
            else:
                extra[name] = value
    else:
        values.update(update)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_extra__", extra)
    object.__setattr__(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    object.__setattr__(new, "__pydantic_private__", None)
    return new


CRASH_REASON = FailureReason(type="unknown", retriable=False, message="Server crashed")

_LIVE_SENTINEL_STATUSES = frozenset({"starting", "initializing", "running", "completing-sentinels"})
_TERMINAL_CHECKPOINT_FIELD = {
    "completed": ("completed", "completion_checkpoint"),
    "error": ("failed", "error_checkpoint"),
    "skipped": ("skipped", "skip_checkpoint"),
}


def apply_transition(state: HankweaveState, transition: StateTransition) -> HankweaveState:
    """Return the state after ``transition``; raise if the transition is not allowed.

    Returns ``state`` itself (the same object) when the transition legitimately changes nothing,
    for example a cost update that arrives after its codon finished.
    """
    handler = _HANDLERS[transition.type]
    return handler(state, transition)


# ----- copy-on-write helpers -----


def _replace_at(items: list[Any], index: int, value: Any) -> list[Any]:
    copied = items.copy()
    copied[index] = value
    return copied


def _run_index(state: HankweaveState, run_id: str) -> int:
    runs = state.runs
    # The current run is almost always the newest one.
    if runs and runs[0].run_id == run_id:
        return 0
    for index, run in enumerate(runs):
        if run.run_id == run_id:
            return index
    raise InvalidTransitionError(f"unknown run {run_id!r}")


def _with_run(state: HankweaveState, index: int, run: Run) -> HankweaveState:
    return _evolve(state, {"runs": _replace_at(state.runs, index, run)})


def _with_codon(
    state: HankweaveState, run_index: int, codon_index: int, codon: CodonExecution
) -> HankweaveState:
    run = state.runs[run_index]
    new_run = _evolve(run, {"codons": _replace_at(run.codons, codon_index, codon)})
    return _with_run(state, run_index, new_run)


def _target(
    state: HankweaveState, run_id: str, codon_id: str
) -> tuple[int, int, CodonExecution]:
    run_index = _run_index(state, run_id)
    found = last_record(state.runs[run_index], codon_id)
    if found is None:
        raise InvalidTransitionError(f"codon {codon_id!r} has no record in run {run_id!r}")
    return run_index, found[0], found[1]


def _fields(codon: CodonExecution) -> dict[str, Any]:
    """The record's set fields (and preserved unknown fields), by Python name."""
    data = {k: v for k, v in codon.__dict__.items() if v is not None}
    if codon.model_extra:
        data.update(codon.model_extra)
    return data


def _become(status: str, fields: dict[str, Any]) -> CodonExecution:
    fields = {k: v for k, v in fields.items() if v is not None}
    fields["status"] = status
    return CODON_CLASSES[status].model_validate(fields)  # type: ignore[return-value]


def _executed(sentinels: LoadedSentinels | None) -> ExecutedSentinels | None:
    if sentinels is None:
        return None
    if isinstance(sentinels, ExecutedSentinels):
        return sentinels
    return ExecutedSentinels(executed=sentinels.loaded, total_cost=sentinels.total_cost)


def _ensure_run_open(run: Run) -> None:
    if not is_live_run(run.status):
        raise InvalidTransitionError(f"run {run.run_id!r} is {run.status}; it cannot change")


# ----- run lifecycle -----


def _run_started(state: HankweaveState, t: RunStarted) -> HankweaveState:
    data = t.data
    for run in state.runs:
        if run.run_id == data.run_id:
            raise InvalidTransitionError(f"run {data.run_id!r} already exists")
        if is_live_run(run.status):
            raise InvalidTransitionError(
                f"run {run.run_id!r} is still {run.status}; end it before starting"
                f" {data.run_id!r}"
            )
    run = Run(
        run_id=data.run_id,
        run_folder=data.run_folder,
        git_branch=data.git_branch,
        starting_conditions=data.starting_conditions,
        codons=[],
        status="resuming" if data.resuming else "running",
        start_time=t.timestamp,
        server_pid=data.server_pid,
        user=data.user,
    )
    update: dict[str, Any] = {"runs": [run, *state.runs], "current_run_id": data.run_id}
    if data.execution_plan is not None:
        update["execution_plan"] = data.execution_plan
    return _evolve(state, update)


RunEnd = RunCompleted | RunFailed | RunInterrupted


def _run_ended(status: str) -> Callable[[HankweaveState, RunEnd], HankweaveState]:
    def reduce(state: HankweaveState, t: RunEnd) -> HankweaveState:
        index = _run_index(state, t.data.run_id)
        run = state.runs[index]
        _ensure_run_open(run)
        ended = getattr(t.data, "outcome", None) or status
        new_state = _with_run(
            state, index, _evolve(run, {"status": ended, "end_time": t.timestamp})
        )
        if state.current_run_id == run.run_id:
            new_state = _evolve(new_state, {"current_run_id": None})
        return new_state

    return reduce


def _run_crashed(state: HankweaveState, t: RunCrashed) -> HankweaveState:
    index = _run_index(state, t.data.run_id)
    run = state.runs[index]
    _ensure_run_open(run)
    codons = list(run.codons)
    for position, codon in enumerate(codons):
        if not is_terminal_status(codon.status):
            codons[position] = _fail(
                codon,
                end_time=t.data.detected_at,
                exit_code=-1,
                failure_reason=CRASH_REASON,
                metadata=None,
            )
    new_run = _evolve(run, {"status": "crashed", "end_time": t.data.detected_at,
                            "codons": codons})
    new_state = _with_run(state, index, new_run)
    if state.current_run_id == run.run_id:
        new_state = _evolve(new_state, {"current_run_id": None})
    return new_state


# ----- codon lifecycle -----


def _codon_started(state: HankweaveState, t: CodonStarted) -> HankweaveState:
    index = _run_index(state, t.data.run_id)
    run = state.runs[index]
    _ensure_run_open(run)
    # Records are only appended when none is in flight, so only the last can be non-terminal.
    if run.codons and not is_terminal_status(run.codons[-1].status):
        busy = run.codons[-1]
        raise InvalidTransitionError(
            f"codon {busy.codon_id!r} is still {busy.status} in run {run.run_id!r};"
            f" cannot start {t.data.codon_id!r}"
        )
    record = PreparingCodon(
        codon_id=t.data.codon_id, start_time=t.timestamp, loop_context=t.data.loop_context,
        attempt=t.data.attempt,
    )
    # A resuming run is running once its first codon starts.
    new_run = _evolve(run, {"codons": [*run.codons, record], "status": "running"})
    return _with_run(state, index, new_run)


def _fail(
    codon: CodonExecution,
    *,
    end_time: str,
    exit_code: int,
    failure_reason: FailureReason,
    metadata: CodonMetadata | None,
    failed_during: str | None = None,
) -> CodonExecution:
    fields = _fields(codon)
    partial_cost = fields.pop("current_cost", 0.0)
    partial_tokens = fields.pop("current_tokens", None) or TokenUsage()
    fields.update(
        end_time=end_time,
        failed_during=failed_during or codon.status,
        exit_code=exit_code,
        failure_reason=failure_reason,
        partial_cost=partial_cost,
        partial_tokens=partial_tokens,
        sentinels=_executed(fields.get("sentinels")),
    )
    if metadata is not None and metadata.checkpoint_sha:
        fields["error_checkpoint"] = metadata.checkpoint_sha
    return _become("failed", fields)


def _codon_transitioned(state: HankweaveState, t: CodonTransitioned) -> HankweaveState:
    data = t.data
    run_index, codon_index, codon = _target(state, data.run_id, data.codon_id)
    _check_codon_move(codon, data)
    meta = data.metadata or CodonMetadata()
    new = _CODON_MOVES[data.to](codon, _fields(codon), meta, t.timestamp)
    return _with_codon(state, run_index, codon_index, new)


def _check_codon_move(codon: CodonExecution, data: CodonTransitionedData) -> None:
    """The record is where the transition says it starts, the edge is allowed, and the
    metadata carries what the target status needs."""
    if codon.status != data.from_:
        raise InvalidTransitionError(
            f"codon {data.codon_id!r} is {codon.status}, not {data.from_}"
        )
    check_codon_transition(data.from_, data.to)
    validate_transition_metadata(data.to, data.metadata)


# One step per target status: the record the codon becomes, from its current record (``codon``),
# that record's fields (``fields``, a copy each step may change), the transition's metadata and
# its timestamp.
CodonMove: TypeAlias = Callable[
    [CodonExecution, dict[str, Any], CodonMetadata, str], CodonExecution
]


def _to_starting(codon: CodonExecution, fields: dict[str, Any], meta: CodonMetadata,
                 timestamp: str) -> CodonExecution:
    if meta.checkpoint_sha:
        fields["rig_setup_checkpoint"] = meta.checkpoint_sha
    return _become("starting", fields)


def _to_initializing(codon: CodonExecution, fields: dict[str, Any], meta: CodonMetadata,
                     timestamp: str) -> CodonExecution:
    fields.update(claude_pid=meta.claude_pid, claude_log_path=meta.claude_log_path)
    if meta.previous_session_id:
        fields["previous_session_id"] = meta.previous_session_id
    return _become("initializing", fields)


def _to_running(codon: CodonExecution, fields: dict[str, Any], meta: CodonMetadata,
                timestamp: str) -> CodonExecution:
    fields.update(
        claude_session_id=meta.claude_session_id,
        current_cost=0.0,
        current_tokens=TokenUsage(),
        assistant_message_count=0,
        assistant_turn_count=0,
        extension_count=0,
    )
    return _become("running", fields)


def _to_completing_sentinels(codon: CodonExecution, fields: dict[str, Any],
                             meta: CodonMetadata, timestamp: str) -> CodonExecution:
    return _become("completing-sentinels", fields)


def _to_completed(codon: CodonExecution, fields: dict[str, Any], meta: CodonMetadata,
                  timestamp: str) -> CodonExecution:
    fields.update(
        end_time=timestamp,
        exit_code=0,
        final_cost=fields.get("current_cost", 0.0),
        final_tokens=fields.get("current_tokens") or TokenUsage(),
        result_message_received=bool(meta.result_message_received),
        completion_checkpoint=meta.checkpoint_sha,
        sentinels=_executed(fields.get("sentinels")),
        extension_count=(
            meta.extension_count
            if meta.extension_count is not None
            else fields.get("extension_count", 0)
        ),
    )
    if meta.budget_exceeded is not None:
        fields["budget_exceeded"] = meta.budget_exceeded
    return _become("completed", fields)


def _to_failed(codon: CodonExecution, fields: dict[str, Any], meta: CodonMetadata,
               timestamp: str) -> CodonExecution:
    new = _fail(
        codon,
        end_time=timestamp,
        exit_code=meta.exit_code,  # type: ignore[arg-type]  # guarded by the metadata check
        failure_reason=meta.failure_reason,  # type: ignore[arg-type]
        metadata=meta,
        failed_during=meta.failed_during,
    )
    if meta.extension_count is not None:
        new = _evolve(new, {"extension_count": meta.extension_count})
    return new


def _to_skipped(codon: CodonExecution, fields: dict[str, Any], meta: CodonMetadata,
                timestamp: str) -> CodonExecution:
    fields.update(
        end_time=timestamp,
        skipped_during=meta.skipped_during,
        partial_cost=fields.pop("current_cost", 0.0),
        # The original's type comment says zeros; its reducer copies what was used.
        partial_tokens=fields.pop("current_tokens", None) or TokenUsage(),
        sentinels=_executed(fields.get("sentinels")),
    )
    if meta.checkpoint_sha:
        fields["skip_checkpoint"] = meta.checkpoint_sha
    return _become("skipped", fields)


_CODON_MOVES: dict[str, CodonMove] = {
    "starting": _to_starting,
    "initializing": _to_initializing,
    "running": _to_running,
    "completing-sentinels": _to_completing_sentinels,
    "completed": _to_completed,
    "failed": _to_failed,
    "skipped": _to_skipped,
}


# ----- high-frequency updates (only while the codon is running) -----


def _update_running(
    state: HankweaveState, run_id: str, codon_id: str, change: Callable[[Any], dict[str, Any]]
) -> HankweaveState:
    run_index, codon_index, codon = _target(state, run_id, codon_id)
    if codon.status != "running":
        return state
    return _with_codon(state, run_index, codon_index, _evolve(codon, change(codon)))


def _costs_updated(state: HankweaveState, t: CostsUpdated) -> HankweaveState:
    return _update_running(
        state,
        t.data.run_id,
        t.data.codon_id,
        lambda c: {"current_cost": t.data.cost, "current_tokens": t.data.tokens},
    )


def _costs_incremented(state: HankweaveState, t: CostsIncremented) -> HankweaveState:
    delta = t.data.cost_delta

    def change(c: Any) -> dict[str, Any]:
        update: dict[str, Any] = {"current_tokens": c.current_tokens + t.data.tokens_delta}
        if delta is None:
            update["cost_complete"] = False  # unknown, never counted as 0
        else:
            update["current_cost"] = c.current_cost + delta
        return update

    return _update_running(state, t.data.run_id, t.data.codon_id, change)


def _final_cost_set(state: HankweaveState, t: CodonFinalCostSet) -> HankweaveState:
    # The result message's totals are authoritative: they replace, not add to, the running sums.
    final = t.data.final_cost

    def change(c: Any) -> dict[str, Any]:
        if final is None:
            return {"current_tokens": t.data.final_tokens, "cost_complete": False}
        return {"current_cost": final, "current_tokens": t.data.final_tokens,
                "cost_complete": None}

    return _update_running(state, t.data.run_id, t.data.codon_id, change)


def _agent_process(state: HankweaveState, t: AgentProcessReported) -> HankweaveState:
    run_index, codon_index, codon = _target(state, t.data.run_id, t.data.codon_id)
    if codon.status not in ("initializing", "running", "completing-sentinels"):
        return state  # the attempt already ended; its record keeps the pid it had
    return _with_codon(state, run_index, codon_index,
                       _evolve(codon, {"claude_pid": t.data.pid}))


def _message_count(state: HankweaveState, t: AssistantMessageCountUpdated) -> HankweaveState:
    update: dict[str, Any] = {"assistant_message_count": t.data.new_count}
    if t.data.new_turn_count is not None:
        update["assistant_turn_count"] = t.data.new_turn_count
    return _update_running(state, t.data.run_id, t.data.codon_id, lambda c: update)


def _extension_count(state: HankweaveState, t: ExtensionCountUpdated) -> HankweaveState:
    return _update_running(
        state, t.data.run_id, t.data.codon_id, lambda c: {"extension_count": t.data.extension_count}
    )


def _sentinels_updated(state: HankweaveState, t: SentinelStatesUpdated) -> HankweaveState:
    run_index, codon_index, codon = _target(state, t.data.run_id, t.data.codon_id)
    sentinels: LoadedSentinels | ExecutedSentinels
    if codon.status in _LIVE_SENTINEL_STATUSES:
        sentinels = LoadedSentinels(loaded=t.data.sentinel_states, total_cost=t.data.total_cost)
    elif is_terminal_status(codon.status):
        # The drain after codon.completed and the unload happen after the final transition;
        # the original drops this update (docs/differences.md), we keep what they cost.
        sentinels = ExecutedSentinels(executed=t.data.sentinel_states,
                                      total_cost=t.data.total_cost)
    else:
        return state
    return _with_codon(
        state, run_index, codon_index, _evolve(codon, {"sentinels": sentinels})
    )


# ----- checkpoints and plan -----


def _checkpoint_created(state: HankweaveState, t: CheckpointCreated) -> HankweaveState:
    run_index, codon_index, codon = _target(state, t.data.run_id, t.data.codon_id)
    kind = t.data.checkpoint_type
    if kind == "rig-setup":
        if codon.status not in ("preparing", "starting"):
            return state
        update = {"rig_setup_checkpoint": t.data.sha}
    else:
        status, field = _TERMINAL_CHECKPOINT_FIELD[kind]
        # Terminal records are immutable: only an empty checkpoint field may be filled in.
        if codon.status != status or getattr(codon, field, None):
            return state
        update = {field: t.data.sha}
    return _with_codon(state, run_index, codon_index, _evolve(codon, update))


def _initial_checkpoint(state: HankweaveState, t: InitialCheckpointSet) -> HankweaveState:
    return _evolve(state, {"initial_checkpoint": t.data.sha})


def _plan_updated(state: HankweaveState, t: ExecutionPlanUpdated) -> HankweaveState:
    splice = t.data
    plan = state.execution_plan
    if splice.position + splice.remove > len(plan):
        raise InvalidTransitionError(
            f"plan splice at {splice.position} removing {splice.remove} entries is outside a"
            f" plan of {len(plan)} entries")
    new_plan = [*plan[:splice.position], *splice.entries, *plan[splice.position + splice.remove:]]
    return _evolve(state, {"execution_plan": new_plan})


def plan_splice(old: list[Any], new: list[Any]) -> tuple[int, int, list[Any]]:
    """The smallest ``(position, remove, entries)`` that turns plan ``old`` into ``new``."""
    # Entries the two plans share are the same objects (a new plan is built from slices of the
    # old one): skip them in C, then compare ids from the first that differs.
    same = list(map(operator.is_, old, new))
    start = same.index(False) if False in same else len(same)
    while start < min(len(old), len(new)) and old[start].codon_id == new[start].codon_id:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and \
            old[end_old - 1].codon_id == new[end_new - 1].codon_id:
        end_old -= 1
        end_new -= 1
    return start, end_old - start, new[start:end_new]


# ----- interruptions -----


def _interruption_created(state: HankweaveState, t: InterruptionCreated) -> HankweaveState:
    item = t.data.interruption
    if state.interruption(item.id) is not None:
        raise InvalidTransitionError(f"interruption {item.id!r} already exists")
    if item.gate == "before":
        _run_index(state, item.run_id)  # its codon has not started: the run must exist
    else:
        _target(state, item.run_id, item.codon_id)  # the codon it pauses has a record
    pending = _evolve(item, {"status": "pending", "answer": None,
                             "answered_at": None, "answered_by": None})
    return _evolve(state, {"interruptions": [*state.interruptions, pending]})


def _interruption_answered(state: HankweaveState, t: InterruptionAnswered) -> HankweaveState:
    data = t.data
    item = state.interruption(data.interruption_id)
    if item is None:
        raise InvalidTransitionError(f"no interruption {data.interruption_id!r}")
    if item.status != "pending":
        raise InvalidTransitionError(
            f"interruption {item.id!r} was already answered ({item.answered_by},"
            f" {item.answered_at})")
    answered = _evolve(item, {"status": "answered", "answer": data.answer,
                              "answered_at": data.answered_at,
                              "answered_by": data.answered_by})
    return _evolve(state, {"interruptions": [
        answered if other.id == item.id else other for other in state.interruptions]})


_HANDLERS: dict[str, Callable[[HankweaveState, Any], HankweaveState]] = {
    "RunStarted": _run_started,
    "RunCompleted": _run_ended("completed"),
    "RunFailed": _run_ended("failed"),
    "RunInterrupted": _run_ended("interrupted"),
    "RunCrashed": _run_crashed,
    "CodonStarted": _codon_started,
    "CodonTransitioned": _codon_transitioned,
    "CostsUpdated": _costs_updated,
    "CostsIncremented": _costs_incremented,
    "AssistantMessageCountUpdated": _message_count,
    "ExtensionCountUpdated": _extension_count,
    "CheckpointCreated": _checkpoint_created,
    "InitialCheckpointSet": _initial_checkpoint,
    "CodonFinalCostSet": _final_cost_set,
    "SentinelStatesUpdated": _sentinels_updated,
    "ExecutionPlanUpdated": _plan_updated,
    "AgentProcessReported": _agent_process,
    "InterruptionCreated": _interruption_created,
    "InterruptionAnswered": _interruption_answered,
}
