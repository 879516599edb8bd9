"""State transitions: the codon state machine, its metadata guards and the transition events.

State never changes by direct mutation.  A caller builds one of the transition models below and
hands it to the store, which checks it against :data:`CODON_TRANSITIONS` and the metadata guards
(through the reducer) before anything is written.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, TypeAdapter
from pydantic.alias_generators import to_camel

from hankweave.fsutil import utc_now_iso
from hankweave.state.types import (
    BudgetExceededData,
    CheckpointType,
    CodonId,
    CodonStatus,
    ExecutionCodonEntry,
    FailureReason,
    Interruption,
    LoopContext,
    RunId,
    SentinelState,
    SessionId,
    StartingConditions,
    StateModel,
    TokenUsage,
)

CODON_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "preparing": ("starting", "failed", "skipped"),
    "starting": ("initializing", "failed", "skipped"),
    "initializing": ("running", "completed", "failed", "skipped"),
    "running": ("completing-sentinels", "completed", "failed", "skipped"),
    "completing-sentinels": ("completed", "failed", "skipped"),
    "completed": (),
    "failed": (),
    "skipped": (),
}
"""Legal status changes of a codon record (``CodonTransitions`` in the original)."""


class StateError(Exception):
    """Base of every error raised while changing state."""


class InvalidTransitionError(StateError):
    """A transition that the state machine or the current state does not allow."""


class MetadataValidationError(StateError):
    """A ``CodonTransitioned`` whose metadata lacks what its target status requires."""


# ----- metadata guards -----

_NON_TERMINAL = ("preparing", "starting", "initializing", "running", "completing-sentinels")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require(to: str, metadata: CodonMetadata | None, checks: dict[str, Any]) -> None:
    missing = []
    for key, ok in checks.items():
        value = getattr(metadata, key, None) if metadata is not None else None
        if value is None or not ok(value):
            missing.append(key)
    if missing:
        given = metadata.model_dump(mode="json", exclude_none=True) if metadata else "none"
        raise MetadataValidationError(
            f"transition to {to!r} requires metadata {', '.join(map(to_camel, missing))}"
            f" (got {given})"
        )


def validate_transition_metadata(to: str, metadata: CodonMetadata | None) -> None:
    """Check the metadata a target status requires; raise :class:`MetadataValidationError`."""
    if to == "initializing":
        _require(
            to,
            metadata,
            {"claude_pid": _is_number, "claude_log_path": lambda v: isinstance(v, str)},
        )
    elif to == "running":
        _require(to, metadata, {"claude_session_id": lambda v: isinstance(v, str) and v != ""})
    elif to == "completed":
        _require(to, metadata, {"checkpoint_sha": lambda v: isinstance(v, str) and v != ""})
    elif to == "failed":
        _require(
            to,
            metadata,
            {
                "exit_code": _is_number,
                "failure_reason": lambda v: isinstance(v, FailureReason),
                "failed_during": lambda v: v in _NON_TERMINAL,
            },
        )
    elif to == "skipped":
        _require(to, metadata, {"skipped_during": lambda v: v in _NON_TERMINAL})


def check_codon_transition(from_status: str, to_status: str) -> None:
    """Raise :class:`InvalidTransitionError` unless ``from_status -> to_status`` is in the map."""
    if to_status not in CODON_TRANSITIONS.get(from_status, ()):
        allowed = ", ".join(CODON_TRANSITIONS.get(from_status, ())) or "none (terminal)"
        raise InvalidTransitionError(
            f"invalid codon transition {from_status} -> {to_status}; allowed from"
            f" {from_status}: {allowed}"
        )


# ----- transition events -----


class _TransitionBase(StateModel):
    # When the transition happened.  Part of the record so the reducer stays pure and a
    # replayed transition log reproduces the same timestamps.
    timestamp: str = Field(default_factory=utc_now_iso)


class RunStartedData(StateModel):
    run_id: RunId
    run_folder: str
    git_branch: str
    starting_conditions: StartingConditions
    server_pid: int
    user: str | None = None
    """Ours (Agency's attribution): who started the run (``run --user``, ``$HANKWEAVE_USER``,
    the login name)."""
    resuming: bool = False
    """Ours: the run continues one that did not complete; it is ``resuming`` until its first
    codon starts."""
    # Beyond the original: a fresh run carries its plan, so the plan rebuild is part of the
    # transition instead of a side effect of the state manager.
    execution_plan: list[ExecutionCodonEntry] | None = None


class RunStarted(_TransitionBase):
    type: Literal["RunStarted"] = "RunStarted"
    data: RunStartedData


class RunRef(StateModel):
    run_id: RunId


class RunCompleted(_TransitionBase):
    type: Literal["RunCompleted"] = "RunCompleted"
    data: RunRef


class RunFailedData(RunRef):
    outcome: Literal["cancelled", "timeout"] | None = None
    """Ours (Agency's statuses): the run's status when it is not plain ``failed``: a person
    stopped it, or its time ceiling ended it."""


class RunFailed(_TransitionBase):
    type: Literal["RunFailed"] = "RunFailed"
    data: RunFailedData


class RunInterrupted(_TransitionBase):
    """Ours: the run ended waiting for a human (docs/human-in-the-loop.md)."""

    type: Literal["RunInterrupted"] = "RunInterrupted"
    data: RunRef


class RunCrashedData(StateModel):
    run_id: RunId
    detected_at: str
    last_codon_status: str = "unknown"


class RunCrashed(_TransitionBase):
    type: Literal["RunCrashed"] = "RunCrashed"
    data: RunCrashedData


class CodonStartedData(StateModel):
    run_id: RunId
    codon_id: CodonId
    loop_context: LoopContext | None = None
    attempt: int | None = None
    """The attempt number when this record is a retry (2 for the first); None otherwise."""


class CodonStarted(_TransitionBase):
    type: Literal["CodonStarted"] = "CodonStarted"
    data: CodonStartedData


class CodonMetadata(StateModel):
    claude_pid: int | None = None
    claude_log_path: str | None = None
    previous_session_id: SessionId | None = None
    claude_session_id: SessionId | None = None
    exit_code: int | None = None
    failure_reason: FailureReason | None = None
    failed_during: str | None = None
    skipped_during: str | None = None
    result_message_received: bool | None = None
    sentinel_count: int | None = None
    sentinel_ids: list[str] | None = None
    checkpoint_sha: str | None = None
    checkpoint_branch: str | None = None
    context_exceeded: bool | None = None
    extension_count: int | None = None
    budget_exceeded: BudgetExceededData | None = None


class CodonTransitionedData(StateModel):
    run_id: RunId
    codon_id: CodonId
    from_: CodonStatus = Field(alias="from")
    to: CodonStatus
    metadata: CodonMetadata | None = None


class CodonTransitioned(_TransitionBase):
    type: Literal["CodonTransitioned"] = "CodonTransitioned"
    data: CodonTransitionedData


class CostsUpdatedData(StateModel):
    run_id: RunId
    codon_id: CodonId
    cost: float
    tokens: TokenUsage


class CostsUpdated(_TransitionBase):
    type: Literal["CostsUpdated"] = "CostsUpdated"
    data: CostsUpdatedData


class CostsIncrementedData(StateModel):
    run_id: RunId
    codon_id: CodonId
    cost_delta: float | None
    """None when the usage has no known price: the tokens count, the cost stays unknown (the
    record is marked ``costComplete: false``) rather than counted as 0."""
    tokens_delta: TokenUsage


class CostsIncremented(_TransitionBase):
    type: Literal["CostsIncremented"] = "CostsIncremented"
    data: CostsIncrementedData


class AssistantMessageCountData(StateModel):
    run_id: RunId
    codon_id: CodonId
    new_count: int
    """Assistant lines of the codon log so far, as the original counts them (a message the CLI
    writes as several frames counts once per frame)."""
    new_turn_count: int | None = None
    """Distinct assistant messages (by message id) so far; None in journals before it existed."""


class AssistantMessageCountUpdated(_TransitionBase):
    type: Literal["AssistantMessageCountUpdated"] = "AssistantMessageCountUpdated"
    data: AssistantMessageCountData


class ExtensionCountData(StateModel):
    run_id: RunId
    codon_id: CodonId
    extension_count: int


class ExtensionCountUpdated(_TransitionBase):
    type: Literal["ExtensionCountUpdated"] = "ExtensionCountUpdated"
    data: ExtensionCountData


class CheckpointCreatedData(StateModel):
    run_id: RunId
    codon_id: CodonId
    checkpoint_type: CheckpointType
    sha: str
    branch: str


class CheckpointCreated(_TransitionBase):
    type: Literal["CheckpointCreated"] = "CheckpointCreated"
    data: CheckpointCreatedData


class InitialCheckpointData(StateModel):
    sha: str


class InitialCheckpointSet(_TransitionBase):
    type: Literal["InitialCheckpointSet"] = "InitialCheckpointSet"
    data: InitialCheckpointData


class CodonFinalCostData(StateModel):
    run_id: RunId
    codon_id: CodonId
    final_cost: float | None
    """The session's total cost; None when neither the result nor the price list knows it (the
    running sum stays, marked incomplete)."""
    final_tokens: TokenUsage


class CodonFinalCostSet(_TransitionBase):
    type: Literal["CodonFinalCostSet"] = "CodonFinalCostSet"
    data: CodonFinalCostData


class AgentProcessData(StateModel):
    run_id: RunId
    codon_id: CodonId
    pid: int = Field(gt=0)


class AgentProcessReported(_TransitionBase):
    """Beyond the original: the harness started its agent process (a CLI, say), so the record's
    ``claudePid`` names that process instead of the runtime that hosts the harness.

    A lifecycle transition: it is on disk before the harness goes on, so whoever finds the run
    crashed knows which process may still be running.
    """

    type: Literal["AgentProcessReported"] = "AgentProcessReported"
    data: AgentProcessData


class SentinelStatesData(StateModel):
    run_id: RunId
    codon_id: CodonId
    sentinel_states: list[SentinelState]
    total_cost: float


class SentinelStatesUpdated(_TransitionBase):
    type: Literal["SentinelStatesUpdated"] = "SentinelStatesUpdated"
    data: SentinelStatesData


class ExecutionPlanData(StateModel):
    """A splice of the plan: ``plan[position:position + remove] = entries``.

    A splice rather than the whole plan, so that a loop's thousandth iteration writes a few
    entries to the log, not a thousand.
    """

    position: int = Field(ge=0)
    remove: int = Field(default=0, ge=0)
    entries: list[ExecutionCodonEntry] = Field(default_factory=list)


class ExecutionPlanUpdated(_TransitionBase):
    """Beyond the original's 14: lazy loop expansion changes the persisted plan.

    The original mutated the plan outside its transition queue; here it is a transition like
    any other, so it is ordered, durable and replayable.
    """

    type: Literal["ExecutionPlanUpdated"] = "ExecutionPlanUpdated"
    data: ExecutionPlanData


class InterruptionCreatedData(StateModel):
    interruption: Interruption


class InterruptionCreated(_TransitionBase):
    """Beyond the original: a pause for a human begins (its record, pending)."""

    type: Literal["InterruptionCreated"] = "InterruptionCreated"
    data: InterruptionCreatedData


class InterruptionAnsweredData(StateModel):
    interruption_id: str
    answer: Any
    answered_by: str
    answered_at: str = Field(default_factory=utc_now_iso)


class InterruptionAnswered(_TransitionBase):
    """Beyond the original: a pending interruption gets its answer (once)."""

    type: Literal["InterruptionAnswered"] = "InterruptionAnswered"
    data: InterruptionAnsweredData


StateTransition: TypeAlias = Annotated[
    RunStarted
    | RunCompleted
    | RunFailed
    | RunInterrupted
    | RunCrashed
    | CodonStarted
    | CodonTransitioned
    | CostsUpdated
    | CostsIncremented
    | AssistantMessageCountUpdated
    | ExtensionCountUpdated
    | CheckpointCreated
    | InitialCheckpointSet
    | CodonFinalCostSet
    | SentinelStatesUpdated
    | ExecutionPlanUpdated
    | AgentProcessReported
    | InterruptionCreated
    | InterruptionAnswered,
    Field(discriminator="type"),
]

TRANSITION_ADAPTER: TypeAdapter[StateTransition] = TypeAdapter(StateTransition)

HIGH_FREQUENCY_TYPES: frozenset[str] = frozenset(
    {
        "CostsIncremented",
        "CostsUpdated",
        "AssistantMessageCountUpdated",
        "ExtensionCountUpdated",
        "SentinelStatesUpdated",
    }
)
"""Transitions that arrive many times per codon.  They are made durable against a killed
process without an fsync; every other transition is a lifecycle transition and is fsync'd."""


def is_lifecycle(transition: StateTransition) -> bool:
    return transition.type not in HIGH_FREQUENCY_TYPES


def parse_transition(data: bytes | str | dict[str, Any]) -> StateTransition:
    """Parse one transition from JSON text or a dict (the shape the store logs)."""
    if isinstance(data, dict):
        return TRANSITION_ADAPTER.validate_python(data)
    return TRANSITION_ADAPTER.validate_json(data)
