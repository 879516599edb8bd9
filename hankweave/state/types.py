"""The persisted state of an execution: the shapes of Hankweave 0.10.0's ``state.json``.

Field names on disk are camelCase exactly as the original writes them; Python code uses the
snake_case attributes.  Unknown fields found in a file are kept (``extra="allow"``) so that a
state written by a newer or older runtime round-trips without losing anything.

Optional fields are *absent* on disk rather than ``null``; the two fields whose ``null`` carries
meaning (``currentRunId`` and a continuation's ``afterCodon``) are always written.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.alias_generators import to_camel

RunId: TypeAlias = str
CodonId: TypeAlias = str
SessionId: TypeAlias = str

CodonStatus: TypeAlias = Literal[
    "preparing",
    "starting",
    "initializing",
    "running",
    "completing-sentinels",
    "completed",
    "failed",
    "skipped",
]
RunStatus: TypeAlias = Literal["running", "resuming", "completed", "failed", "cancelled",
                                "timeout", "crashed", "interrupted"]
"""The original's four, and Agency's (ours): ``interrupted``, the run ended waiting for a human
(docs/human-in-the-loop.md); ``cancelled``, a person stopped it (Ctrl-C, SIGTERM, a client's
shutdown); ``timeout``, its time ceiling ended it; ``resuming``, a run that continues one
that did not complete, until its first codon starts (docs/state.md)."""
LIVE_RUN_STATUSES: frozenset[str] = frozenset({"running", "resuming"})
"""A run with one of these has not ended: at most one run is live."""
STOPPED_RUN_STATUSES: frozenset[str] = frozenset({"failed", "cancelled", "timeout"})
"""A run that ended before its plan did, of its own accord or a person's: resumed alike."""


def is_live_run(status: str) -> bool:
    """Whether a run with ``status`` has not ended (``running`` or ``resuming``)."""
    return status in LIVE_RUN_STATUSES
CheckpointType: TypeAlias = Literal["rig-setup", "completed", "error", "skipped"]

CODON_STATUSES: tuple[str, ...] = (
    "preparing",
    "starting",
    "initializing",
    "running",
    "completing-sentinels",
    "completed",
    "failed",
    "skipped",
)
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "skipped"})


def is_terminal_status(status: str) -> bool:
    """True for the three outcomes a codon record can never leave."""
    return status in TERMINAL_STATUSES


class StateModel(BaseModel):
    """Base for every persisted shape: camelCase on disk, unknown fields preserved."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        serialize_by_alias=True,
    )


class TokenUsage(StateModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_tokens=self.cache_creation_tokens + other.cache_creation_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
        )


ZERO_TOKENS = TokenUsage()

FailureType: TypeAlias = Literal[
    "timeout", "rate-limit", "api-error", "sentinel-load-failure", "turn-limit", "unknown"
]
"""``turn-limit`` is ours: the agent reached its harness's turn limit (the original reports it
as an ``api-error``, "API error in result")."""


class FailureReason(StateModel):
    type: FailureType
    retriable: bool
    message: str | None = None
    sentinel_refs: list[str] | None = None
    retry_after_ms: float | None = None


class BudgetExceededData(StateModel):
    currency: str
    limit: float
    used: float


class SentinelState(StateModel):
    id: str
    model: str
    loaded_at: str
    unloaded_at: str | None = None
    llm_call_count: int = 0
    failed_llm_calls: int = Field(default=0, alias="failedLLMCalls")
    last_llm_call_at: str | None = None
    total_triggers: int = 0
    total_cost: float = 0.0
    status: Literal["active", "unloaded"] = "active"
    unload_reason: str | None = None


class LoadedSentinels(StateModel):
    """Sentinels of a codon that has not finished yet."""

    loaded: list[SentinelState]
    total_cost: float = 0.0


class ExecutedSentinels(StateModel):
    """Sentinels of a finished codon: ``loaded`` is renamed ``executed`` on every terminal state."""

    executed: list[SentinelState]
    total_cost: float = 0.0


class LoopContext(StateModel):
    loop_id: CodonId
    iteration: int
    codon_index_in_loop: int


class LoopBudget(StateModel):
    max_dollars: float | None = None
    max_time_seconds: float | None = None
    allocation: str | None = None
    shares: dict[str, float] | None = None
    on_exceeded: Literal["complete", "fail", "ask"] | None = None


class PlanLoopContext(LoopContext):
    """Loop context of a plan entry, which also carries the loop's own budget."""

    loop_budget: LoopBudget | None = None


class CheckpointInfo(StateModel):
    """A checkpoint of a codon, as confirmed by the checkpoint store."""

    type: CheckpointType
    sha: str
    message: str
    timestamp: str
    branch: str


# ----- codon execution records: a union discriminated on ``status`` -----


class _CodonBase(StateModel):
    codon_id: CodonId
    start_time: str
    loop_context: LoopContext | None = None
    # hankweave's extension (docs/state.md): which attempt of the codon's failure policy this
    # record is, 2 for the first retry; absent on a first attempt.  It outlives the process, so
    # a run resumed after a kill continues the codon's retries instead of starting them over.
    attempt: int | None = None


class PreparingCodon(_CodonBase):
    status: Literal["preparing"] = "preparing"
    # Set when the rig-setup checkpoint is reported before the codon moves on to starting.
    rig_setup_checkpoint: str | None = None


class StartingCodon(_CodonBase):
    status: Literal["starting"] = "starting"
    rig_setup_checkpoint: str | None = None
    sentinels: LoadedSentinels | None = None


class InitializingCodon(_CodonBase):
    status: Literal["initializing"] = "initializing"
    rig_setup_checkpoint: str | None = None
    claude_pid: int
    claude_log_path: str
    previous_session_id: SessionId | None = None
    sentinels: LoadedSentinels | None = None


class RunningCodon(_CodonBase):
    status: Literal["running"] = "running"
    rig_setup_checkpoint: str | None = None
    claude_pid: int
    claude_log_path: str
    claude_session_id: SessionId
    previous_session_id: SessionId | None = None
    current_cost: float = 0.0
    current_tokens: TokenUsage = Field(default_factory=TokenUsage)
    cost_complete: bool | None = None
    """``false`` when some usage had no known price: the cost is then a lower bound.  Absent
    when every token is priced (beyond the original, which counted such usage as $0)."""
    assistant_message_count: int = 0
    assistant_turn_count: int | None = None
    """Distinct assistant messages (by message id); ``assistantMessageCount`` counts log lines,
    as the original does.  None in records written before the field existed."""
    extension_count: int = 0
    sentinels: LoadedSentinels | None = None


class CompletingSentinelsCodon(RunningCodon):
    status: Literal["completing-sentinels"] = "completing-sentinels"  # type: ignore[assignment]


class CompletedCodon(_CodonBase):
    status: Literal["completed"] = "completed"
    # Fields carried over from the running record (the original spreads them in).
    claude_pid: int | None = None
    claude_log_path: str | None = None
    # Absent only on the initializing -> completed path (clean exit without a session id).
    claude_session_id: SessionId | None = None
    previous_session_id: SessionId | None = None
    current_cost: float | None = None
    current_tokens: TokenUsage | None = None
    assistant_message_count: int | None = None
    assistant_turn_count: int | None = None
    extension_count: int | None = None
    end_time: str
    exit_code: Literal[0] = 0
    final_cost: float
    final_tokens: TokenUsage
    cost_complete: bool | None = None
    """As on the running record: ``false`` when ``finalCost`` is a lower bound."""
    result_message_received: bool = False
    rig_setup_checkpoint: str | None = None
    completion_checkpoint: str
    sentinels: ExecutedSentinels | None = None
    budget_exceeded: BudgetExceededData | None = None


FailedDuring: TypeAlias = Literal[
    "preparing", "starting", "initializing", "running", "completing-sentinels"
]


# FailedCodon and SkippedCodon share most fields but stay two declarations: pydantic writes a
# base class's fields before a subclass's, and the keys of state.json follow the original's
# order, in which each record's own fields (``failedDuring``, ``exitCode``, ``errorCheckpoint``;
# ``skippedDuring``, ``skipCheckpoint``) sit between the shared ones.  A shared base would
# reorder the keys of every failed or skipped record (a kept format, docs/state.md).
class FailedCodon(_CodonBase):
    status: Literal["failed"] = "failed"
    end_time: str
    failed_during: FailedDuring
    claude_pid: int | None = None
    claude_session_id: SessionId | None = None
    claude_log_path: str | None = None
    previous_session_id: SessionId | None = None
    exit_code: int
    failure_reason: FailureReason
    partial_cost: float = 0.0
    partial_tokens: TokenUsage = Field(default_factory=TokenUsage)
    cost_complete: bool | None = None
    assistant_message_count: int | None = None
    assistant_turn_count: int | None = None
    extension_count: int | None = None
    rig_setup_checkpoint: str | None = None
    error_checkpoint: str | None = None
    sentinels: ExecutedSentinels | None = None


# The original's type omits "completing-sentinels" although its transition map allows the
# skip edge from that status; we accept it so the edge is usable (see docs/differences.md).
SkippedDuring: TypeAlias = Literal[
    "preparing", "starting", "initializing", "running", "completing-sentinels"
]


class SkippedCodon(_CodonBase):
    status: Literal["skipped"] = "skipped"
    end_time: str
    skipped_during: SkippedDuring
    claude_pid: int | None = None
    claude_session_id: SessionId | None = None
    claude_log_path: str | None = None
    previous_session_id: SessionId | None = None
    partial_cost: float = 0.0
    partial_tokens: TokenUsage = Field(default_factory=TokenUsage)
    cost_complete: bool | None = None
    assistant_message_count: int | None = None
    assistant_turn_count: int | None = None
    extension_count: int | None = None
    rig_setup_checkpoint: str | None = None
    skip_checkpoint: str | None = None
    sentinels: ExecutedSentinels | None = None


CodonExecution: TypeAlias = Annotated[
    PreparingCodon
    | StartingCodon
    | InitializingCodon
    | RunningCodon
    | CompletingSentinelsCodon
    | CompletedCodon
    | FailedCodon
    | SkippedCodon,
    Field(discriminator="status"),
]

CODON_CLASSES: dict[str, type[_CodonBase]] = {
    "preparing": PreparingCodon,
    "starting": StartingCodon,
    "initializing": InitializingCodon,
    "running": RunningCodon,
    "completing-sentinels": CompletingSentinelsCodon,
    "completed": CompletedCodon,
    "failed": FailedCodon,
    "skipped": SkippedCodon,
}


# ----- runs -----


class FreshStart(StateModel):
    type: Literal["fresh"] = "fresh"
    initial_checkpoint_sha: str | None = None


class ContinuationSource(StateModel):
    run_id: RunId
    # null means "from the beginning of that run"; written explicitly, never omitted.
    after_codon: CodonId | None
    checkpoint_sha: str

    @model_serializer(mode="wrap")
    def _keep_null_after_codon(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if "afterCodon" not in data and "after_codon" not in data:
            key = "afterCodon" if info.by_alias is not False else "after_codon"
            data = {k: v for k, v in data.items()}
            data[key] = None
        return data


class ContinuationStart(StateModel):
    type: Literal["continuation"] = "continuation"
    source: ContinuationSource
    reason: Literal["retry", "rollback", "continue", "resume"] | None = None
    """``resume`` is ours: the run resumes one that ended waiting for a human."""
    resumed_run_id: RunId | None = None
    """Ours, with ``reason: "resume"``: the run this one resumes (the answers it carries come
    from that run and those it resumed in turn)."""


StartingConditions: TypeAlias = Annotated[
    FreshStart | ContinuationStart, Field(discriminator="type")
]


class Run(StateModel):
    run_id: RunId
    run_folder: str
    git_branch: str
    starting_conditions: StartingConditions
    codons: list[CodonExecution] = Field(default_factory=list)
    status: RunStatus = "running"
    start_time: str
    server_pid: int
    end_time: str | None = None
    user: str | None = None
    """Ours (Agency's attribution): who started the run; None in state written before it."""


# ----- the execution plan -----


class PlanCodon(StateModel):
    """A codon configuration as resolved into the plan (its ``model`` is the resolved model info).

    Kept permissive: the plan is a persisted copy of configuration, written by the runtime.
    """

    id: CodonId
    type: str = "codon"
    name: str | None = None
    continuation_mode: str | None = None
    model: Any = None


class ExecutionCodonEntry(StateModel):
    codon: PlanCodon
    codon_id: CodonId
    loop_context: PlanLoopContext | None = None


# ----- interruptions (a hankweave extension: human-in-the-loop pauses) -----


InterruptionKind: TypeAlias = Literal["question", "approval", "tool-approval", "budget"]
"""What waits for a human: the agent's ``ask_human`` question, a codon's approval gate, a
tool call an approval rule holds, or a budget ceiling with ``onExceeded: "ask"``."""

BudgetScope: TypeAlias = Literal["codon", "loop", "run"]
"""Whose ceiling a budget ask is about: the codon's own cap (or its allocation in a pool), its
loop's budget, or the run's ceiling."""


class BudgetAsk(StateModel):
    """The ceiling a ``budget`` interruption asks to raise, as it stood when it was reached."""

    scope: BudgetScope
    loop_id: str | None = None
    """The loop whose budget was reached (``scope`` ``loop``)."""
    currency: Literal["cost", "duration", "outputTokens", "contextTokens"]
    limit: float
    """The ceiling reached: dollars, seconds or tokens."""
    used: float
    source: str
    """Where the ceiling came from, as ``budget.limits`` names it (``codon cap``, ...)."""


class Interruption(StateModel):
    """One pause for a human, from its creation to its answer (docs/state.md, "Interruptions").

    Kept in ``state.json``'s ``interruptions`` list, which the original's readers ignore.
    """

    id: str
    run_id: RunId
    codon_id: CodonId
    kind: InterruptionKind
    question: str
    options: list[str] | None = None
    """The allowed answers (an approval's are ``approve`` and ``reject``); None: free text."""
    gate: Literal["before", "after"] | None = None
    """An approval gate: before the codon starts, or after it completed."""
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    session_id: SessionId | None = None
    """The agent session the answer resumes."""
    budget: BudgetAsk | None = None
    """A ``budget`` interruption's ceiling; its answer is ``{"extend": amount}`` or
    ``reject``."""
    created_at: str
    deadline: str | None = None
    """When the default answer applies, if no human answered before (ISO 8601)."""
    default_answer: Any = None
    status: Literal["pending", "answered"] = "pending"
    answer: Any = None
    """The answer: one of the options, free text, or a JSON value."""
    answered_at: str | None = None
    answered_by: str | None = None
    """Who answered: ``cli:<user>``, ``websocket:<client>``, or ``deadline`` (the default)."""


class HankweaveState(StateModel):
    """The root of ``state.json``: runs newest first, the current run pointer and the plan."""

    runs: list[Run] = Field(default_factory=list)
    current_run_id: RunId | None = None
    initial_checkpoint: str | None = None
    execution_plan: list[ExecutionCodonEntry] = Field(default_factory=list)
    interruptions: list[Interruption] = Field(default_factory=list)
    """Beyond the original: every pause for a human, oldest first (absent while empty)."""

    @model_serializer(mode="wrap")
    def _keep_null_current_run(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        key = "currentRunId" if info.by_alias is not False else "current_run_id"
        if key not in data:
            # Rebuild to keep the original key order: runs, currentRunId, ...
            ordered: dict[str, Any] = {}
            for k, v in data.items():
                ordered[k] = v
                if k in ("runs",):
                    ordered[key] = None
            if key not in ordered:
                ordered[key] = None
            data = ordered
        if not data.get("interruptions"):
            data.pop("interruptions", None)  # an execution without any reads as the original's
        return data

    def interruption(self, interruption_id: str) -> Interruption | None:
        for item in self.interruptions:
            if item.id == interruption_id:
                return item
        return None

    def run_by_id(self, run_id: RunId) -> Run | None:
        for run in self.runs:
            if run.run_id == run_id:
                return run
        return None

    @property
    def current_run(self) -> Run | None:
        return self.run_by_id(self.current_run_id) if self.current_run_id else None


def last_record(run: Run, codon_id: CodonId) -> tuple[int, CodonExecution] | None:
    """The latest attempt of ``codon_id`` in ``run``: retries append records, the last one counts."""
    codons = run.codons
    for index in range(len(codons) - 1, -1, -1):
        if codons[index].codon_id == codon_id:
            return index, codons[index]
    return None


class _PlanPositions:
    """The position of each codon id in the newest plan asked about, kept as the plan changes.

    A plan is an immutable list of the state it belongs to, and the reducer builds a changed
    plan from slices of the old one, so the entries before the change are the same objects at
    the same positions: only those after it are indexed again.  A long loop's plan has
    thousands of entries and is looked up several times per codon.  The mapping returned is
    the cache itself, valid until the next call; one thread asks (the runtime's event loop).
    """

    def __init__(self) -> None:
        self._plan: Sequence[ExecutionCodonEntry] = []
        self._positions: dict[CodonId, int] = {}

    def __call__(self, plan: Sequence[ExecutionCodonEntry]) -> Mapping[CodonId, int]:
        if plan is self._plan:
            return self._positions
        same = list(map(operator.is_, self._plan, plan))
        kept = same.index(False) if False in same else len(same)
        positions = self._positions
        for entry in self._plan[kept:]:
            if positions.get(entry.codon_id, -1) >= kept:
                del positions[entry.codon_id]
        for position in range(kept, len(plan)):
            positions.setdefault(plan[position].codon_id, position)  # the first entry wins
        self._plan = plan
        return positions


plan_positions = _PlanPositions()
"""``plan_positions(plan)``: each codon id's first position in ``plan``."""


def changed_positions(old: list[CodonExecution], new: list[CodonExecution]) -> list[int]:
    """The positions of ``new`` whose record is not the one ``old`` had there (appended ones
    too), in order.

    Records are immutable and the reducer replaces the ones it changes, so this is what changed
    between two states of a run.  A record equal to the one it replaced may count as unchanged,
    which is the same for anything derived from it.  Usually only the last shared record
    changed: one list comparison in C (identical objects compare at once) tells, so a run of
    thousands of records costs microseconds.
    """
    shared = min(len(old), len(new))
    appended = list(range(shared, len(new)))
    if shared == 0:
        return appended
    if old[:shared - 1] == new[:shared - 1]:
        return ([shared - 1] if old[shared - 1] is not new[shared - 1] else []) + appended
    same = list(map(operator.is_, old, new))
    changed: list[int] = []
    position = -1
    while True:
        try:
            position = same.index(False, position + 1)
        except ValueError:
            break
        changed.append(position)
    return changed + appended


NO_CHECKPOINT = "none"
"""``completionCheckpoint`` of a codon that completed before it had a checkpoint (the original's
placeholder, kept for its readers): no checkpoint to restore."""

_TERMINAL_CHECKPOINT_FIELDS: dict[str, tuple[CheckpointType, str]] = {
    "completed": ("completed", "completion_checkpoint"),
    "failed": ("error", "error_checkpoint"),
    "skipped": ("skipped", "skip_checkpoint"),
}


def record_checkpoints(record: CodonExecution) -> list[tuple[CheckpointType, str]]:
    """The checkpoints a codon record refers to, newest first: the one its terminal status
    made (completed, error or skipped), then its rig-setup one.  Placeholders are left out."""
    found: list[tuple[CheckpointType, str]] = []
    terminal = _TERMINAL_CHECKPOINT_FIELDS.get(record.status)
    if terminal is not None:
        sha = getattr(record, terminal[1], None)
        if sha and sha != NO_CHECKPOINT:
            found.append((terminal[0], sha))
    rig = getattr(record, "rig_setup_checkpoint", None)
    if rig:
        found.append(("rig-setup", rig))
    return found


def end_checkpoint(record: CodonExecution) -> str | None:
    """The checkpoint where a finished record left the workspace (its terminal one), if any."""
    found = record_checkpoints(record)
    return found[0][1] if found and found[0][0] != "rig-setup" else None


def referenced_checkpoint_ids(state: HankweaveState) -> frozenset[str]:
    """Every checkpoint the state refers to, the initial one included: what pruning keeps."""
    ids = {sha for run in state.runs for record in run.codons
           for _, sha in record_checkpoints(record)}
    if state.initial_checkpoint:
        ids.add(state.initial_checkpoint)
    return frozenset(ids)


def dump_state(state: HankweaveState, *, indent: int | None = 2) -> bytes:
    """Serialize a state exactly as ``state.json`` is written (camelCase, optional fields omitted)."""
    return state.model_dump_json(by_alias=True, exclude_none=True, indent=indent).encode()


def parse_state(data: bytes | str) -> HankweaveState:
    """Parse ``state.json`` bytes; raises ``pydantic.ValidationError`` on a bad shape."""
    return HankweaveState.model_validate_json(data)
