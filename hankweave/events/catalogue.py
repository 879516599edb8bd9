"""The event catalogue: every event type the runtime emits, its category and its payload model.

An event on the wire and in the journal is a :class:`ServerEvent` envelope::

    {"seq":12,"schemaVersion":1,"id":"1738760000123-k3j9x0a2b",
     "timestamp":"2026-02-05T10:00:00.123Z","type":"codon.started","data":{...}}

``id``, ``timestamp``, ``type`` and ``data`` are Hankweave 0.10.0's envelope; ``seq`` and
``schemaVersion`` are ours (see :data:`EVENT_SCHEMA_VERSION` and ``docs/events.md``).

The 36 original event types fall into four categories that decide routing: server-state and
agentic-backbone events are journaled, broadcast and routed to sentinels; sentinel events are
journaled and broadcast but never routed back to sentinels (that would loop); connection events
are never journaled and go to one client.  This runtime adds server-state events of its own:
``sink.failed``, ``budget.limits``, the two ``interruption.*`` events and ``run.crashed``.

Payload models are permissive (``extra="allow"``): a field a newer runtime adds survives a
round trip.  Field names are camelCase on the wire and snake_case in Python.  Emitters validate
against these models; readers of a journal do not (see :meth:`ServerEvent.typed_data`), so a
journal written by another version of the runtime always reads.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticSerializationError

from hankweave.fsutil import utc_now_iso
from hankweave.state.types import (
    BudgetExceededData,
    CheckpointType,
    CodonStatus,
    FailedDuring,
    FailureReason,
    LoopContext,
)

__all__ = [
    "AGENTIC_BACKBONE_EVENTS",
    "ALL_EVENT_TYPES",
    "CONNECTION_EVENTS",
    "EVENT_DATA_MODELS",
    "EVENT_SCHEMA_VERSION",
    "SENTINEL_EVENTS",
    "SERVER_STATE_EVENTS",
    "TRANSITION_TYPES",
    "ArchiveCompletedData",
    "ArchivePartialData",
    "AssistantActionData",
    "BudgetActual",
    "BudgetCeiling",
    "BudgetLimits",
    "BudgetLimitsData",
    "BudgetLoopContext",
    "BudgetResolvedLimits",
    "BudgetRow",
    "BudgetSummaryData",
    "BudgetTotals",
    "CheckpointListData",
    "CheckpointQueryInfo",
    "CodonCompletedData",
    "CodonExtendedData",
    "CodonSnapshot",
    "CodonStartSource",
    "CodonStartedData",
    "DirectoryFailure",
    "ErrorData",
    "EventCategory",
    "EventData",
    "EventDataError",
    "EventError",
    "FileNode",
    "FileUpdateSource",
    "FileUpdatedData",
    "FiletreeUpdatedData",
    "HistoryBatchData",
    "IncompleteCodonData",
    "InfoData",
    "InterruptionAnsweredData",
    "InterruptionCreatedData",
    "LoopIterationCompletedData",
    "Number",
    "PathFailure",
    "PongData",
    "ProcessExit",
    "ProcessExitError",
    "ProcessExitKilled",
    "ProcessExitSuccess",
    "PromptMetadata",
    "RecentFileAccess",
    "ResultingState",
    "RigOutputData",
    "RigSetupCompletedData",
    "RigSetupFailedData",
    "RollbackArchiveRestoreData",
    "RollbackCodonCheckpointData",
    "RollbackCompletedData",
    "RollbackProgressData",
    "RollbackRigCleanupData",
    "RollbackStartedData",
    "RunCrashedData",
    "SentinelErrorData",
    "SentinelLoadedData",
    "SentinelOutputData",
    "SentinelTokens",
    "SentinelTriggeredData",
    "SentinelUnloadedData",
    "ServerEvent",
    "ServerIdleData",
    "ServerReadyData",
    "SinkFailedData",
    "StateSnapshotData",
    "StateTransitionData",
    "TokenUsageData",
    "ToolResultData",
    "ToolUseSource",
    "TransitionRecord",
    "TransitionType",
    "UnknownEventTypeError",
    "category_of",
    "dump_event_data",
    "is_journaled",
    "make_event",
    "new_event_id",
    "routes_to_sentinels",
    "validate_event_data",
]

EVENT_SCHEMA_VERSION = 1
"""Version of our envelope and catalogue, written as ``schemaVersion`` on every event.

Raised when a payload changes incompatibly.  Not the original's ``eventSchemaVersion`` of its
``events.meta.json`` sidecar (2 = fingerprint-only ``file.updated``): both ``file.updated`` shapes
are valid under version 1 here."""


# ----- errors -----


class EventError(ValueError):
    """Base of the errors raised for an event that cannot be built or recorded."""


class UnknownEventTypeError(EventError):
    """An event type that is not in the catalogue."""

    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        super().__init__(
            f"unknown event type {event_type!r}: not in the event catalogue"
            " (see docs/events.md for the known types)"
        )


class EventDataError(EventError):
    """A payload that does not match its event type's data model."""

    def __init__(self, event_type: str, error: ValidationError) -> None:
        self.event_type = event_type
        self.errors = error.errors(include_url=False)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<data>'}: {e['msg']}" for e in self.errors
        )
        super().__init__(f"invalid data for event {event_type!r}: {problems}")


# ----- shared base and sub-schemas -----

Number: TypeAlias = int | float
"""A JSON number.  The union keeps an ``int`` an ``int``, so ``0`` is written ``0`` as the
original writes it, not ``0.0``, and a float duration is not refused by an ``int`` field."""


class EventData(BaseModel):
    """Base of every payload (and payload part): camelCase on the wire, unknown keys kept."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="allow",
        # NaN and infinity are not JSON; refuse them where the emitter can be named.
        allow_inf_nan=False,
        protected_namespaces=(),
        # Built on first use: importing the events package (every command does, through the
        # sink base classes) then costs little.
        defer_build=True,
    )


def _dump_foreign_model(value: Any) -> Any:
    """A model of another module (a state record, a transition) becomes its wire dict."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


class _AcceptsStateModels(EventData):
    """A part the runtime fills from a state object: accept the object itself, not only a dict."""

    @model_validator(mode="before")
    @classmethod
    def _from_model(cls, value: Any) -> Any:
        if isinstance(value, cls):
            return value
        return _dump_foreign_model(value)


class ProcessExitSuccess(EventData):
    type: Literal["success"]


class ProcessExitError(EventData):
    type: Literal["error"]
    code: int


class ProcessExitKilled(EventData):
    type: Literal["killed"]
    signal: str


ProcessExit: TypeAlias = Annotated[
    ProcessExitSuccess | ProcessExitError | ProcessExitKilled, Field(discriminator="type")
]


class FileNode(EventData):
    """One entry of a file tree; directories carry children, files a ``lastModified`` time."""

    name: str
    path: str
    is_directory: bool
    last_modified: str | None = None
    children: list[FileNode] = Field(default_factory=list)


class CodonSnapshot(_AcceptsStateModels):
    """A codon record inside ``state.snapshot``: in practice the whole state record.

    Only ``codonId``, ``status`` and ``startTime`` are required; everything else a state record
    carries (costs, checkpoints, sentinels, ...) is kept as is.
    """

    codon_id: str
    status: CodonStatus
    start_time: str
    codon_name: str | None = None
    end_time: str | None = None
    session_id: str | None = None
    previous_session_id: str | None = None
    claude_session_id: str | None = None
    token_usage: dict[str, Any] | None = None
    cost: Number | None = None
    duration: Number | None = None
    exit_status: ProcessExit | None = None
    failure_reason: FailureReason | None = None
    description: str | None = None
    final_cost: Number | None = None
    partial_cost: Number | None = None
    current_cost: Number | None = None
    completion_checkpoint: Any = None
    rig_setup_checkpoint: Any = None
    error_checkpoint: Any = None
    skip_checkpoint: Any = None


class CheckpointQueryInfo(EventData):
    codon_id: str
    codon_name: str
    checkpoint_type: CheckpointType
    sha: str
    status: str
    timestamp: str


class PathFailure(EventData):
    path: str
    error: str


# ----- the envelope -----


class ServerEvent(BaseModel):
    """The envelope of every event, as journaled and as sent to clients.

    ``seq`` is the event's position in its execution's journal (1, 2, 3, ... with no gaps);
    connection events, which are never journaled, have none, and neither do events journaled by
    the original runtime.  ``data`` is kept as the plain JSON object; :meth:`typed_data`
    validates it against the catalogue.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="allow",
    )

    # Declared first so a journal line starts with it: readers find a line's seq with a cheap
    # prefix match instead of parsing the line (see hankweave.events.journal).
    seq: int | None = None
    schema_version: int | None = None
    id: str
    timestamp: str
    type: str
    data: dict[str, Any]
    run_id: str | None = None
    """The run current when the event was made (ours: every event a run sends carries it, so
    ``journal --run`` finds them all); none outside a run, and on connection events."""

    @property
    def category(self) -> EventCategory:
        """The routing category of :attr:`type` (raises :class:`UnknownEventTypeError`)."""
        return category_of(self.type)

    def typed_data(self) -> BaseModel:
        """``data`` validated against the catalogue model of :attr:`type`."""
        return validate_event_data(self.type, self.data)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object of this event, camelCase, without the absent ``seq``/``schemaVersion``."""
        wire: dict[str, Any] = {}
        if self.seq is not None:
            wire["seq"] = self.seq
        if self.schema_version is not None:
            wire["schemaVersion"] = self.schema_version
        wire["id"] = self.id
        wire["timestamp"] = self.timestamp
        wire["type"] = self.type
        if self.run_id is not None:
            wire["runId"] = self.run_id
        wire["data"] = self.data
        if self.__pydantic_extra__:
            wire.update(self.__pydantic_extra__)
        return wire


# ----- connection events -----


class ServerReadyData(EventData):
    server_version: str
    execution_path: str
    agent_root_path: str
    data_path: str
    port: int
    proxy_port: int | None = None
    output_directory: str | None = None


class PongData(EventData):
    message: str
    timestamp: str
    client_id: str | None = None


class HistoryBatchData(EventData):
    events: list[ServerEvent]
    has_more: bool


class IncompleteCodonData(EventData):
    codon_id: str
    codon_name: str
    message: str


# ----- codon lifecycle -----


class PromptMetadata(EventData):
    """YAML frontmatter of a codon's prompt file."""

    name: str | None = None
    description: str | None = None
    tags: list[str] | None = None
    version: str | Number | None = None
    author: str | None = None


class CodonStartedData(EventData):
    codon_id: str
    codon_name: str
    codon_description: str | None = None
    session_id: str
    previous_session_id: str | None = None
    start_time: str
    prompt_metadata: PromptMetadata | None = None


class CodonCompletedData(EventData):
    codon_id: str
    success: bool
    cost: Number
    cost_complete: bool | None = None
    """Ours: ``false`` when some usage had no known price, so ``cost`` is a lower bound."""
    duration: Number
    exit_status: ProcessExit
    failure_reason: FailureReason | None = None
    failure_ignored: bool | None = None
    budget_exceeded: BudgetExceededData | None = None


class CodonExtendedData(EventData):
    codon_id: str
    codon_name: str
    extension_number: int = Field(ge=1)
    exhaust_with_prompt: str
    cumulative_tokens: int
    cumulative_cost: Number


class LoopIterationCompletedData(EventData):
    loop_id: str
    iteration: int = Field(ge=0)
    duration_ms: Number
    cost_usd: Number
    tokens_used: int
    is_final: bool
    termination_reason: (
        Literal["iteration_limit", "context_exceeded", "budget_exceeded", "sentinel_skip",
                "failure"] | None
    ) = None
    """``budget_exceeded`` is ours: a codon's or the loop's budget ended the loop."""


# ----- agent activity -----


class AssistantActionData(EventData):
    codon_id: str
    action: Literal["thinking", "message", "tool_use"]
    content: str
    tool_name: str | None = None
    tool_input: Any = None
    tool_use_id: str | None = None

    @model_validator(mode="after")
    def _tool_use_has_id(self) -> AssistantActionData:
        # The late original requires it; without it a tool.result cannot be paired with its call.
        if self.action == "tool_use" and not self.tool_use_id:
            raise ValueError("toolUseId is required when action is 'tool_use'")
        return self


class TokenUsageData(EventData):
    """Incremental (per-message deltas, ``totalCost`` = that message's cost, ``modelId``) or
    final (session totals, authoritative ``totalCost``, ``modelUsage`` when known)."""

    codon_id: str
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    total_cost: Number
    cost_complete: bool | None = None
    """Ours: ``false`` when the usage has no known price (``totalCost`` then counts none of it)."""
    model_id: str | None = None
    model_usage: dict[str, Any] | None = None


class ToolResultData(EventData):
    codon_id: str
    tool_use_id: str
    tool_name: str
    result: str
    truncated: bool
    original_length: int
    execution_time_ms: Number
    is_error: bool


class ToolUseSource(EventData):
    kind: Literal["tool_use"]
    tool_use_id: str


class CodonStartSource(EventData):
    kind: Literal["codon-start"]


FileUpdateSource: TypeAlias = Annotated[
    ToolUseSource | CodonStartSource, Field(discriminator="kind")
]


class FileUpdatedData(EventData):
    """Both shapes: the 0.10-era full ``content``, or the late fingerprint (``sha256``, ``bytes``,
    ``source``)."""

    path: str
    filename: str
    action: Literal["created", "modified", "deleted"]
    content: str | None = None
    sha256: str | None = None
    # `bytes` would shadow the builtin inside the class body.
    byte_count: int | None = Field(default=None, alias="bytes")
    source: FileUpdateSource | None = None

    @model_validator(mode="after")
    def _has_a_body_or_fingerprint(self) -> FileUpdatedData:
        if self.action != "deleted" and self.content is None and self.sha256 is None:
            raise ValueError("a created or modified file needs either content or sha256")
        return self


class FiletreeUpdatedData(EventData):
    tree: list[FileNode]


# ----- rig -----


class RigSetupCompletedData(EventData):
    codon_id: str
    rig_type: Literal["command", "commands"]
    command_count: int
    duration_ms: Number
    created_checkpoint: bool


class RigSetupFailedData(EventData):
    codon_id: str
    failure_type: Literal["command_failed", "timeout", "other"]
    exit_code: int | None = None
    command_index: int
    ignored: bool


class RigOutputData(EventData):
    codon_id: str
    stream: Literal["stdout", "stderr"]
    line: str
    command_index: int


# ----- server status -----


class ErrorData(EventData):
    message: str
    codon: str | None = None
    fatal: bool
    severity: Literal["fatal", "codon", "operation", "warning"] | None = None
    context: Any = None
    code: str | None = None


class InfoData(EventData):
    message: str
    details: list[Any] | None = None


class ServerIdleData(EventData):
    reason: Literal["startup", "codon-completed", "all-codons-completed", "rollback-completed"]
    message: str


class RecentFileAccess(EventData):
    """``{path, content, timestamp}`` (0.10-era) or ``{path, timestamp}`` (late, no body)."""

    path: str
    content: str | None = None
    timestamp: str


class StateSnapshotData(EventData):
    current_codon: CodonSnapshot | None = None
    completed_codons: list[CodonSnapshot]
    file_tree: list[FileNode]
    total_cost: Number
    total_time: Number
    recent_file_access: RecentFileAccess | None = None
    is_rolling_back: bool


TransitionType: TypeAlias = Literal[
    "RunStarted",
    "RunCompleted",
    "RunFailed",
    "RunInterrupted",
    "RunCrashed",
    "CodonStarted",
    "CodonTransitioned",
    "CostsUpdated",
    "CostsIncremented",
    "AssistantMessageCountUpdated",
    "ExtensionCountUpdated",
    "CheckpointCreated",
    "InitialCheckpointSet",
    "CodonFinalCostSet",
    "SentinelStatesUpdated",
    # Beyond the original 14: lazy loop expansion is a transition here, and so are the
    # harness reporting its agent process and the pauses for a human.
    "ExecutionPlanUpdated",
    "AgentProcessReported",
    "InterruptionCreated",
    "InterruptionAnswered",
]
TRANSITION_TYPES: tuple[str, ...] = get_args(TransitionType)
"""The transition types a ``state.transition`` event may carry (those of ``hankweave.state``)."""


class TransitionRecord(_AcceptsStateModels):
    """The raw transition as the state store recorded it (ours adds its ``timestamp``)."""

    type: TransitionType
    data: dict[str, Any]


class ResultingState(EventData):
    current_run_id: str | None
    run_count: int
    total_cost: Number
    current_run_cost: Number


class StateTransitionData(EventData):
    transition_type: TransitionType
    run_id: str | None = None
    codon_id: str | None = None
    transition: TransitionRecord
    resulting_state: ResultingState

    @model_validator(mode="after")
    def _types_agree(self) -> StateTransitionData:
        if self.transition.type != self.transition_type:
            raise ValueError(
                f"transitionType {self.transition_type!r} differs from the transition's type"
                f" {self.transition.type!r}"
            )
        return self


class CheckpointListData(EventData):
    run_id: str
    checkpoints: list[CheckpointQueryInfo]
    current_branch: str | None


class BudgetLimits(EventData):
    max_dollars: Number | None = None
    max_time_seconds: Number | None = None
    max_output_tokens: int | None = None


BudgetLoopContext: TypeAlias = LoopContext
"""A codon's place in its loop, as its state record has it."""


class BudgetActual(EventData):
    dollars: Number
    time_seconds: Number
    output_tokens: int


class BudgetRow(EventData):
    codon_id: str
    loop_context: BudgetLoopContext | None = None
    status: Literal["completed", "failed", "skipped", "exceeded", "running"]
    budget: BudgetLimits
    actual: BudgetActual


class BudgetTotals(EventData):
    budget_dollars: Number | None = None
    actual_dollars: Number
    actual_time_seconds: Number


class BudgetSummaryData(EventData):
    ceiling: BudgetLimits
    allocation: Literal["shared", "proportional", "proportional-strict"]
    rows: list[BudgetRow]
    totals: BudgetTotals


class BudgetCeiling(EventData):
    """The hank pool: the run's ceiling with the allocation of ``overrides.budget``."""

    max_dollars: Number | None = None
    max_time_seconds: Number | None = None
    allocation: Literal["shared", "proportional", "proportional-strict"] = "shared"
    shares: dict[str, Number] | None = None
    on_exceeded: Literal["complete", "fail", "ask"] | None = None


class BudgetResolvedLimits(EventData):
    """A codon's or a loop's resolved limits, each with the rule it came from."""

    max_dollars: Number | None = None
    dollars_source: str | None = None
    max_time_seconds: Number | None = None
    time_source: str | None = None
    max_output_tokens: int | None = None
    max_context_tokens: int | None = None
    on_exceeded: Literal["complete", "fail", "ask"] | None = None
    on_exceeded_source: str | None = None


class BudgetLimitsData(EventData):
    """Ours: the limits a codon attempt starts under (docs/events.md)."""

    codon_id: str
    loop_context: BudgetLoopContext | None = None
    ceiling: BudgetCeiling
    limits: BudgetResolvedLimits
    loop: BudgetResolvedLimits | None = None
    spent_dollars: Number
    """Spent against the ceiling when the codon started, earlier runs included."""
    elapsed_seconds: Number
    """Time the hank had run when the codon started, earlier runs included."""


class BudgetAskData(EventData):
    """A ceiling as a budget ask or warning names it."""

    scope: Literal["codon", "loop", "run"]
    loop_id: str | None = None
    currency: Literal["cost", "duration", "outputTokens", "contextTokens"]
    limit: Number
    used: Number
    source: str


class BudgetWarningData(BudgetAskData):
    """Ours: a ceiling is ``fraction`` used (``warnAt``, by default 80% and 95%)."""

    codon_id: str
    fraction: Number
    message: str


# ----- the LLM proxy (ours: docs/proxy.md) -----


class ProxyRequestData(EventData):
    """Ours: one agent request the LLM proxy handled (``--proxy``), as
    ``.hankweave/proxy/requests.jsonl`` records it (``hankweave.proxy.types.ProxyRecord``);
    never a header, a key or a body."""

    request_id: str
    codon_id: str | None = None
    upstream: str
    method: str
    path: str
    model: str | None = None
    streamed: bool
    status: int
    refused: str | None = None
    """Why the proxy answered itself: ``budget``, ``stopping``, ``middleware``."""
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None
    cost: Number | None = None
    ttfb_ms: Number | None = None
    duration_ms: Number
    held_ms: Number | None = None


# ----- interruptions (ours: docs/events.md) -----


class InterruptionCreatedData(EventData):
    """A pause for a human began: the ``interruptions`` record, as in ``state.json``."""

    interruption_id: str
    run_id: str
    codon_id: str
    kind: Literal["question", "approval", "tool-approval", "budget"]
    question: str
    options: list[str] | None = None
    deadline: str | None = None
    budget: BudgetAskData | None = None
    """A ``budget`` interruption's ceiling (answered with ``{"extend": amount}`` or
    ``reject``)."""


class InterruptionAnsweredData(EventData):
    interruption_id: str
    codon_id: str
    answer: Any
    answered_by: str


# ----- rollback and archive -----


class RollbackStartedData(EventData):
    from_run: str
    from_codon: str | None
    to_codon: str
    to_checkpoint: str
    checkpoint_type: CheckpointType
    codons_to_process: list[str]


class RollbackProgressData(EventData):
    current_step: int
    total_steps: int
    message: str


class RollbackCodonCheckpointData(EventData):
    codon_id: str
    codon_name: str
    checkpoint: str
    checkpoint_type: CheckpointType
    message: str


class DirectoryFailure(EventData):
    directory: str
    error: str


class RollbackRigCleanupData(EventData):
    codon_id: str
    codon_name: str
    directories: list[str]
    status: Literal["started", "completed", "failed", "partial"]
    # The reference does not say whether this is a count or the list of directories.
    successful_cleanups: int | list[str] | None = None
    failed_cleanups: list[DirectoryFailure] | None = None
    error: str | None = None


class RollbackCompletedData(EventData):
    from_run: str
    to_run: str
    checkpoint: str
    codon_id: str
    codon_name: str
    checkpoint_type: CheckpointType
    auto_restart: bool


class RollbackArchiveRestoreData(EventData):
    # Kept from the original: this carries the target checkpoint's SHA, not a codon id.
    codon_id: str
    restored_paths: list[str]
    failed_paths: list[PathFailure] | None = None
    status: Literal["completed", "partial", "failed"]


class ArchiveCompletedData(EventData):
    codon_id: str
    archived_paths: list[str]


class ArchivePartialData(EventData):
    codon_id: str
    archived_paths: list[str]
    failed_paths: list[PathFailure]


# ----- sentinels -----


class SentinelLoadedData(EventData):
    sentinel_id: str
    codon_id: str
    model: str
    # A string, not the original's two values: plugins register further trigger types.
    trigger_type: str
    execution_strategy: Literal["immediate", "debounce", "count", "timeWindow"]
    conversational: bool
    source: Literal["file", "inline"]
    source_path: str | None = None


class SentinelUnloadedData(EventData):
    sentinel_id: str
    codon_id: str
    reason: Literal["codon-complete", "fatal-error", "consecutive-failures", "shutdown"]
    error_type: Literal["template", "configuration", "corruption", "resource"] | None = None
    final_cost: Number
    llm_call_count: int


class SentinelErrorData(EventData):
    sentinel_id: str
    codon_id: str
    # "sentinel-failed" (beyond the original): a plugin kind's failure, which is no LLM call.
    error_type: Literal["llm-call-failed", "template-render-failed", "file-write-failed",
                        "sentinel-failed"]
    message: str
    retriable: bool
    # Kept from the original: a lifetime count of failed calls, not a consecutive one.
    consecutive_failure_count: int


class SentinelTokens(EventData):
    input: int
    output: int


class SentinelOutputData(EventData):
    sentinel_id: str
    codon_id: str
    trigger_number: int
    output_type: Literal["text", "structured"]
    content: str | dict[str, Any] | list[Any]
    cost: Number
    tokens: SentinelTokens
    event_count: int


class SentinelTriggeredData(EventData):
    sentinel_id: str
    codon_id: str
    trigger_number: int
    strategy: str
    event_count: int
    queue_size: int


# ----- beyond the original -----


class RunCrashedData(EventData):
    """A start found that an earlier run's runtime died while the run was ``running``.

    By the time it is emitted the crash repair is on disk: the run is ``crashed`` and its
    in-flight codon ``failed`` (docs/state.md).  One per crashed run, before the new run's
    ``RunStarted`` transition.
    """

    run_id: str
    detected_at: str
    codon_id: str | None = None
    """The codon in flight when the runtime died (now failed); absent when it died between
    codons."""
    codon_status: FailedDuring | None = None
    """The status that codon had then (its record's ``failedDuring``)."""
    ended_agent_pids: list[int]
    """Agent processes the dead run left running that this start ended (often none)."""
    next: Literal["resume", "rollback", "continue"]
    """What this start does: ``resume`` a run that waited for a person, ``rollback`` to the
    last successful codon and retry (the thread failed), or ``continue`` after the newest
    finished codon."""
    after_codon_id: str | None = None
    """The codon whose checkpoint the next run starts from (absent: from the start, or from
    the retried codon's rig setup)."""
    message: str
    """The whole account in one line, as ``hankweave run`` prints it."""


class SinkFailedData(EventData):
    """An event sink failed: it raised and was detached for the rest of the run
    (``disabled: true``), or it fell behind and lost its oldest queued events (``disabled:
    false``, ``dropped`` of them); either way the run went on."""

    sink: str
    error: str
    disabled: bool = True
    dropped: int | None = Field(default=None, ge=1)

    def model_post_init(self, context: Any, /) -> None:
        # Always part of the payload, even when the emitter relied on the default.
        self.model_fields_set.add("disabled")

    @model_validator(mode="after")
    def _a_warning_counts_its_losses(self) -> SinkFailedData:
        if not self.disabled and self.dropped is None:
            raise ValueError("a sink.failed that leaves the sink attached is the overflow"
                             " warning: it says how many events were dropped (dropped)")
        return self


# ----- categories -----

EventCategory: TypeAlias = Literal["server-state", "agentic-backbone", "sentinel", "connection"]

SERVER_STATE_EVENTS: frozenset[str] = frozenset(
    {
        "codon.started",
        "codon.completed",
        "codon.extended",
        "state.snapshot",
        "server.idle",
        "token.usage",
        "info",
        "error",
        "checkpoint.list",
        "rollback.started",
        "rollback.progress",
        "rollback.codonCheckpoint",
        "rollback.completed",
        "rollback.rigCleanup",
        "rollback.archiveRestore",
        "state.transition",
        "loop.iteration.completed",
        "archive.completed",
        "archive.partial",
        "budget.summary",
        "sink.failed",
        "budget.limits",
        "budget.warning",
        "proxy.request",
        "interruption.created",
        "interruption.answered",
        "run.crashed",
    }
)
"""The original's 20 server-state events plus ``sink.failed``, ``budget.limits``,
``budget.warning``, ``proxy.request``, the two ``interruption.*`` events and ``run.crashed``."""

AGENTIC_BACKBONE_EVENTS: frozenset[str] = frozenset(
    {
        "assistant.action",
        "tool.result",
        "file.updated",
        "filetree.updated",
        "rig.setup.completed",
        "rig.setup.failed",
        "rig.output",
    }
)

SENTINEL_EVENTS: frozenset[str] = frozenset(
    {
        "sentinel.loaded",
        "sentinel.unloaded",
        "sentinel.error",
        "sentinel.output",
        "sentinel.triggered",
    }
)

CONNECTION_EVENTS: frozenset[str] = frozenset(
    {"server.ready", "pong", "history.batch", "incomplete.codon"}
)

_CATEGORY: dict[str, EventCategory] = {
    **dict.fromkeys(SERVER_STATE_EVENTS, "server-state"),
    **dict.fromkeys(AGENTIC_BACKBONE_EVENTS, "agentic-backbone"),
    **dict.fromkeys(SENTINEL_EVENTS, "sentinel"),
    **dict.fromkeys(CONNECTION_EVENTS, "connection"),
}

ALL_EVENT_TYPES: frozenset[str] = frozenset(_CATEGORY)

EVENT_DATA_MODELS: dict[str, type[EventData]] = {
    "server.ready": ServerReadyData,
    "pong": PongData,
    "history.batch": HistoryBatchData,
    "incomplete.codon": IncompleteCodonData,
    "codon.started": CodonStartedData,
    "codon.completed": CodonCompletedData,
    "codon.extended": CodonExtendedData,
    "loop.iteration.completed": LoopIterationCompletedData,
    "assistant.action": AssistantActionData,
    "token.usage": TokenUsageData,
    "tool.result": ToolResultData,
    "file.updated": FileUpdatedData,
    "filetree.updated": FiletreeUpdatedData,
    "rig.setup.completed": RigSetupCompletedData,
    "rig.setup.failed": RigSetupFailedData,
    "rig.output": RigOutputData,
    "error": ErrorData,
    "info": InfoData,
    "server.idle": ServerIdleData,
    "state.snapshot": StateSnapshotData,
    "state.transition": StateTransitionData,
    "checkpoint.list": CheckpointListData,
    "budget.summary": BudgetSummaryData,
    "rollback.started": RollbackStartedData,
    "rollback.progress": RollbackProgressData,
    "rollback.codonCheckpoint": RollbackCodonCheckpointData,
    "rollback.rigCleanup": RollbackRigCleanupData,
    "rollback.completed": RollbackCompletedData,
    "rollback.archiveRestore": RollbackArchiveRestoreData,
    "archive.completed": ArchiveCompletedData,
    "archive.partial": ArchivePartialData,
    "sentinel.loaded": SentinelLoadedData,
    "sentinel.unloaded": SentinelUnloadedData,
    "sentinel.error": SentinelErrorData,
    "sentinel.output": SentinelOutputData,
    "sentinel.triggered": SentinelTriggeredData,
    "sink.failed": SinkFailedData,
    "budget.limits": BudgetLimitsData,
    "budget.warning": BudgetWarningData,
    "proxy.request": ProxyRequestData,
    "interruption.created": InterruptionCreatedData,
    "interruption.answered": InterruptionAnsweredData,
    "run.crashed": RunCrashedData,
}
"""Each event type's payload model (``serverEventDataSchemas`` in the original)."""

if set(EVENT_DATA_MODELS) != ALL_EVENT_TYPES:  # pragma: no cover - a catalogue edit gone wrong
    raise RuntimeError("EVENT_DATA_MODELS and the category sets disagree")


def category_of(event_type: str) -> EventCategory:
    """The routing category of an event type; :class:`UnknownEventTypeError` if unknown."""
    try:
        return _CATEGORY[event_type]
    except KeyError:
        raise UnknownEventTypeError(event_type) from None


def is_journaled(event_type: str) -> bool:
    """Whether events of this type go to the journal (every known type but connection events)."""
    category = _CATEGORY.get(event_type)
    return category is not None and category != "connection"


def routes_to_sentinels(event_type: str) -> bool:
    """Whether sentinels see this type: server-state and agentic-backbone events only.

    Sentinel events are excluded so a sentinel's own output cannot trigger sentinels.
    """
    category = _CATEGORY.get(event_type)
    return category == "server-state" or category == "agentic-backbone"


# ----- building events -----


def validate_event_data(event_type: str, data: Mapping[str, Any] | BaseModel) -> EventData:
    """Validate ``data`` against the model of ``event_type`` and return the model instance.

    ``data`` is a mapping (camelCase or snake_case keys) or an instance of the type's model,
    which is returned as is.

    Raises:
        UnknownEventTypeError: ``event_type`` is not in the catalogue.
        EventDataError: ``data`` does not fit; the message names the type and each bad field.
    """
    model = EVENT_DATA_MODELS.get(event_type)
    if model is None:
        raise UnknownEventTypeError(event_type)
    if isinstance(data, model):
        return data
    if isinstance(data, BaseModel):
        raise EventError(
            f"data for event {event_type!r} must be a mapping or a {model.__name__},"
            f" not a {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise EventDataError(event_type, exc) from None


def dump_event_data(data: BaseModel) -> dict[str, Any]:
    """A payload model as its wire dict: camelCase, and only the fields the emitter set.

    Unset optional fields are absent, as in the original, rather than ``null``.
    """
    return data.model_dump(mode="json", by_alias=True, exclude_unset=True)


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
# Not a secret; a private generator so seeding the global one (tests) cannot repeat ids.
_random = random.Random()


def new_event_id() -> str:
    """An event id as the original makes it: ``"<epoch ms>-<9 base-36 characters>"``."""
    n = _random.getrandbits(46)  # 36**9 > 2**46
    suffix = []
    for _ in range(9):
        n, digit = divmod(n, 36)
        suffix.append(_BASE36[digit])
    return f"{time.time_ns() // 1_000_000}-{''.join(suffix)}"


def make_event(
    event_type: str,
    data: Mapping[str, Any] | BaseModel,
    *,
    seq: int | None = None,
    run_id: str | None = None,
) -> ServerEvent:
    """Validate ``data`` and wrap it in a fresh envelope (new id, current time).

    ``seq`` is left to the caller: the :class:`~hankweave.events.bus.EventBus` numbers the events
    it journals and stamps them with the current ``run_id``.

    Raises:
        UnknownEventTypeError, EventDataError: as :func:`validate_event_data`.
        EventError: an open field holds something JSON cannot represent.
    """
    model = validate_event_data(event_type, data)
    try:
        payload = dump_event_data(model)
    except PydanticSerializationError as exc:
        # An open field (toolInput, context, ...) holding an object JSON cannot represent.
        raise EventError(f"data for event {event_type!r} is not JSON-serializable: {exc}") from None
    return ServerEvent(
        seq=seq,
        schema_version=EVENT_SCHEMA_VERSION,
        id=new_event_id(),
        timestamp=utc_now_iso(),
        type=event_type,
        data=payload,
        run_id=run_id,
    )
