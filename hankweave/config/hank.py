"""Models of the hank file (`hank.json`), the user-written plan of codons and loops.

The format is Hankweave 0.10.0's (docs/behaviour.md §1.1-§1.9): camelCase JSON names, unknown keys
rejected everywhere, and the same rules and error wording. Python attributes are snake_case; the
models validate and serialise by JSON name.

:func:`parse_hank` and :func:`load_hank` are the entry points. They report every problem in the
file at once, each at its JSON path (:class:`~hankweave.config.errors.HankValidationError`).
Checks that need the filesystem (symlinks, existence) and model resolution happen later, in
the reference preflight and model registry; here `model` is a plain non-empty string.
"""

from __future__ import annotations

import copy
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ModelWrapValidatorHandler,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import CoreSchema, ErrorDetails, PydanticCustomError, core_schema

from hankweave.config.errors import (
    HankIssue,
    HankValidationError,
    IgnoredKey,
    PathSegment,
    RuleViolation,
    format_path,
    issues_from_validation_error,
    raise_rule_violations,
    read_config_json,
    unrecognized_field_message,
    with_rule_issues,
)

HANK_SCHEMA_URL = "https://unpkg.com/hankweave@latest/schemas/hank.schema.json"
"""The `$schema` URL Hankweave writes into hank files for editor support."""

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

SHIM_IDLE_TIMEOUT_MAX_SECONDS = 1800

# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------

_VALUE_ERROR = "hank_value"


def _value_error(message: str) -> PydanticCustomError:
    # The message goes through the context, never the template: it may quote user input with braces.
    return PydanticCustomError(_VALUE_ERROR, "{message}", {"message": message})


class Check:
    """Validation metadata: `problem(value)` returns the error message, or `None` if fine.

    Used inside `Annotated` so a constraint reports the reference wording, while
    `json_schema` keywords (`minLength=1`) still describe it in the exported JSON schema.
    """

    def __init__(self, problem: Callable[[Any], str | None], **json_schema: Any) -> None:
        self.problem = problem
        self.json_schema = json_schema

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), **self.json_schema}

    def _validate(self, value: Any) -> Any:
        message = self.problem(value)
        if message is not None:
            raise _value_error(message)
        return value


def _non_empty(message: str) -> Check:
    return Check(lambda value: None if value else message, minLength=1)


class _NotNull:
    """Makes an optional field reject an explicit JSON `null`: absent means omitted, as in 0.10.0."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        present = [arg for arg in source.__args__ if arg is not type(None)]
        inner = present[0] if len(present) == 1 else Union[tuple(present)]  # noqa: UP007
        return core_schema.no_info_before_validator_function(
            _reject_null, handler.generate_schema(inner)
        )


def _reject_null(value: Any) -> Any:
    if value is None:
        raise _value_error("null is not allowed; omit the field instead")
    return value


_T = TypeVar("_T")
Opt = Annotated[_T | None, _NotNull()]
"""An optional field: may be omitted, must not be `null`."""

PositiveInt = Annotated[int, Field(gt=0)]
PositiveNumber = Annotated[float, Field(gt=0)]
ShimIdleTimeout = Annotated[
    int,
    Field(gt=0),
    Check(
        lambda value: (
            f"shimIdleTimeout must be at most {SHIM_IDLE_TIMEOUT_MAX_SECONDS} "
            f"({SHIM_IDLE_TIMEOUT_MAX_SECONDS // 60} minutes)"
            if value > SHIM_IDLE_TIMEOUT_MAX_SECONDS
            else None
        ),
        maximum=SHIM_IDLE_TIMEOUT_MAX_SECONDS,
    ),
]
ModelName = Annotated[str, _non_empty("Model cannot be empty")]
HarnessName = Annotated[str, _non_empty("Harness name cannot be empty")]
HarnessSections = dict[HarnessName, dict[str, Any]]
"""``harnesses``: each harness's own settings by harness name (``{"claude": {...}}``).  Only the
shape is checked here; each section is validated against its harness's ``Config`` model once
the installed harnesses are known (``hankweave validate`` and ``run``)."""

ContinuationMode = Literal["fresh", "continue-previous"]
OnFailure = Literal["abort", "retry", "ignore"]
OnExceeded = Literal["complete", "fail", "ask"]
AllocationMode = Literal["shared", "proportional", "proportional-strict"]
WarnFractions = Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(max_length=10)]


class StrictModel(BaseModel):
    """Base of every configuration model: strict JSON types, unknown keys rejected, camelCase."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )

    field_messages: ClassVar[dict[str, str]] = {}
    """JSON field name -> the message to give for any error located exactly at that field."""

    ignores_unknown_keys: ClassVar[bool] = False
    """Whether :func:`parse_hank` drops unknown keys here with a warning instead of failing."""

    @classmethod
    def json_field_names(cls) -> list[str]:
        """The JSON names of this model's fields, in declaration order."""
        return [field.alias or name for name, field in cls.model_fields.items()]

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        """The object's broken cross-field rules, checked on its raw JSON (by JSON names).

        Raw, so the rules can be checked even when some field of the object is invalid:
        :func:`parse_hank` then reports them beside the field errors.  Written defensively:
        any field may hold a value of the wrong type.
        """
        return []

    @model_validator(mode="wrap")
    @classmethod
    def _apply_rules(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        model = handler(data)
        if isinstance(data, Mapping):
            raise_rule_violations(cls.rule_violations(cls._by_json_name(data)))
        return model

    @classmethod
    def _by_json_name(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """`data` with Python field names (``prompt_text=``, when built in code) as JSON names."""
        fields = cls.model_fields
        if not any(key in fields and fields[key].alias not in (None, key) for key in data):
            return data
        return {
            (fields[key].alias or key) if key in fields else key: value
            for key, value in data.items()
        }


class LenientModel(StrictModel):
    """A nested object whose unknown keys :func:`parse_hank` ignores, with a warning.

    Hankweave 0.10.0's runtime strips unknown keys inside these objects (rig operations,
    commands, ``retryConfig``, ``terminateOn``, sentinel settings, ``meta``, ``requirements``)
    although its published schema rejects them, and real hanks rely on that.  The model itself
    still forbids them, so the exported JSON schema stays the published one.
    """

    ignores_unknown_keys: ClassVar[bool] = True


# --------------------------------------------------------------------------------------------
# Hank references (docs/behaviour.md §1.10, schema layer: R1 spelling and R2 containment, pure text)
# --------------------------------------------------------------------------------------------

RefSpellingProblem = Literal["absolute", "backslash", "invalid"]
_DRIVE_PREFIX = re.compile(r"^[A-Za-z]:")


def forbidden_ref_spelling(raw: str) -> RefSpellingProblem | None:
    """R1: why `raw` is not a portable relative `/`-separated path, or `None` if it is."""
    if raw.startswith("/") or _DRIVE_PREFIX.match(raw):
        return "absolute"
    if "\\" in raw:
        return "backslash"
    if "\0" in raw:
        return "invalid"
    return None


def escapes_base(raw: str) -> bool:
    """R2: whether `raw` climbs above its base directory, even if it would come back inside."""
    normalized = posixpath.normpath(raw)
    return normalized == ".." or normalized.startswith("../")


def ref_spelling_message(problem: RefSpellingProblem, raw: str) -> str:
    """The author-facing message for an R1 violation (worded as in Hankweave 0.10.0)."""
    if problem == "absolute":
        return (
            f'"{raw}" is an absolute or drive-qualified path; '
            "hank refs must be relative paths inside the hank directory"
        )
    if problem == "backslash":
        return f'"{raw}" contains a backslash; hank refs use "/" as the only path separator'
    return f'"{raw}" contains an invalid character (NUL)'


def hank_ref_problem(label: str, raw: str) -> str | None:
    """Schema-layer check of a hank-dir-anchored ref: the message for its first problem, if any."""
    if raw == "":
        return f"{label} cannot be an empty string; omit the field instead"
    problem = forbidden_ref_spelling(raw)
    if problem is not None:
        return ref_spelling_message(problem, raw)
    if escapes_base(raw):
        # The schema layer never resolves paths, so the "(<resolved>)" detail is left out.
        return f'"{raw}" resolves outside the hank directory; move the file into the hank directory'
    return None


# Fields whose reference label is not simply their JSON name.
_REF_LABELS = {"from_": "copy.from"}


class _HankRefCheck:
    """Validates one hank ref, naming its field in the empty-string message."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.with_info_after_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "minLength": 1}

    @staticmethod
    def _validate(raw: str, info: ValidationInfo) -> str:
        name = info.field_name or "reference"
        message = hank_ref_problem(_REF_LABELS.get(name, to_camel(name)), raw)
        if message is not None:
            raise _value_error(message)
        return raw


HankRef = Annotated[str, _HankRefCheck()]
"""A file reference: relative to the hank directory, inside it, `/`-separated."""


def path_or_paths(value: Any) -> str | None:
    """The tag of a one-path-or-many value (``"path"`` or ``"paths"``), for a discriminator."""
    if isinstance(value, str):
        return "path"
    if isinstance(value, list):
        return "paths"
    return None


HankRefs = Annotated[
    Union[Annotated[HankRef, Tag("path")], Annotated[list[HankRef], Tag("paths")]],  # noqa: UP007
    Discriminator(
        path_or_paths,
        custom_error_type=_VALUE_ERROR,
        custom_error_message="Input should be a path or an array of paths",
    ),
]
"""One hank ref or an array of them."""


def _archive_path_problem(path: str) -> str | None:
    if not path:
        return "Archive path cannot be empty"
    if ".." in path:
        return "Archive path cannot contain parent traversal (..)"
    if path.startswith("/"):
        return "Archive path must be relative, not absolute"
    return None


ArchivePath = Annotated[str, Check(_archive_path_problem, minLength=1)]
"""A glob relative to agentRoot, moved into rigArchive/ after success."""


# --------------------------------------------------------------------------------------------
# Rig setup and output files (docs/behaviour.md §1.4, docs/behaviour.md §1.5)
# --------------------------------------------------------------------------------------------


class CopySpec(LenientModel):
    """Source and target of a rig `copy` operation."""

    from_: HankRef = Field(alias="from")
    """Source file or directory, a hank ref."""
    to: Annotated[str, _non_empty("Target path cannot be empty")]
    """Full target path relative to agentRoot, including the final name; its parent must exist."""


class RigCopy(LenientModel):
    """Rig operation that copies a file or directory from the hank into agentRoot."""

    type: Literal["copy"]
    copy_: CopySpec = Field(alias="copy")
    allow_failure: bool = False
    """When true, a failure of this operation does not fail the codon."""


class RigCommandSpec(LenientModel):
    """A shell command run during rig setup."""

    run: Annotated[str, _non_empty("Command cannot be empty")]
    working_directory: Literal["project", "lastCopied"] = "project"
    """`project` is agentRoot; `lastCopied` is the target of this codon's last successful copy."""


class RigCommand(LenientModel):
    """Rig operation that runs a shell command with the codon's environment."""

    type: Literal["command"]
    command: RigCommandSpec
    allow_failure: bool = False
    """When true, a failure of this operation does not fail the codon."""


RigOperation = Annotated[RigCopy | RigCommand, Field(discriminator="type")]


class ShellCommandSpec(LenientModel):
    """A shell command run in agentRoot."""

    run: Annotated[str, _non_empty("Command cannot be empty")]
    working_directory: Literal["project"] = "project"


class BeforeCopyCommand(LenientModel):
    """A command run before an output group is copied out."""

    type: Literal["command"]
    command: ShellCommandSpec


class OutputFileGroup(StrictModel):
    """Files copied to the output directory after the codon succeeds."""

    copy_: Annotated[
        list[str],
        Check(lambda globs: None if globs else "The 'copy' array cannot be empty.", minItems=1),
    ] = Field(alias="copy")
    """Globs relative to agentRoot."""
    before_copy: Opt[list[BeforeCopyCommand]] = None
    """Commands run before this group is copied."""


# --------------------------------------------------------------------------------------------
# Sentinels (docs/behaviour.md §1.7: the codon-side wrapper; the sentinel config itself is validated elsewhere)
# --------------------------------------------------------------------------------------------


class SentinelOutputPaths(LenientModel):
    """Where a sentinel writes its log and last value."""

    log_file: Opt[str] = None
    last_value_file: Opt[str] = None


class SentinelWebsocketReporting(LenientModel):
    """Which sentinel events are reported over the WebSocket."""

    lifecycle: Opt[bool] = None
    errors: Opt[bool] = None
    outputs: Opt[bool] = None
    triggers: Opt[bool] = None


class CodonSentinelSettings(LenientModel):
    """Codon-specific settings of one sentinel."""

    fail_codon_if_not_loaded: Opt[bool] = None
    output_paths: Opt[SentinelOutputPaths] = None
    report_to_websocket: Opt[SentinelWebsocketReporting] = None


# Refs inside an inline sentinel config, which resolve from the hank directory.
_INLINE_SENTINEL_REFS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("systemPromptFile",), "systemPromptFile"),
    (("userPromptFile",), "userPromptFile"),
    (("structuredOutput", "schemaFile"), "structuredOutput.schemaFile"),
)


def _check_inline_sentinel_refs(config: dict[str, Any]) -> dict[str, Any]:
    violations: list[RuleViolation] = []
    for keys, label in _INLINE_SENTINEL_REFS:
        value: Any = config
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        entries: list[tuple[tuple[PathSegment, ...], Any]] = (
            [(keys, value)]
            if not isinstance(value, list)
            else [((*keys, index), item) for index, item in enumerate(value)]
        )
        for at, raw in entries:
            # Wrong types are the sentinel config schema's business, not this wrapper's.
            message = hank_ref_problem(label, raw) if isinstance(raw, str) else None
            if message is not None:
                violations.append(RuleViolation(at, message))
    raise_rule_violations(violations)
    return config


InlineSentinelConfig = Annotated[dict[str, Any], AfterValidator(_check_inline_sentinel_refs)]
"""A sentinel config written inline; only its file references are checked here."""


def _file_or_inline(value: Any) -> str | None:
    if isinstance(value, str):
        return "file"
    if isinstance(value, dict):
        return "inline"
    return None


class CodonSentinel(LenientModel):
    """One sentinel attached to a codon: its config (a file or inline) and codon settings."""

    sentinel_config: Annotated[
        Union[  # noqa: UP007
            Annotated[HankRef, Tag("file")], Annotated[InlineSentinelConfig, Tag("inline")]
        ],
        Discriminator(
            _file_or_inline,
            custom_error_type=_VALUE_ERROR,
            custom_error_message=(
                "sentinelConfig must be a path to a sentinel config file or an inline config object"
            ),
        ),
    ]
    """Path to a sentinel config JSON file (a hank ref), or the config itself."""
    settings: Opt[CodonSentinelSettings] = None


# --------------------------------------------------------------------------------------------
# Budgets (docs/behaviour.md §1.8)
# --------------------------------------------------------------------------------------------

_SHARES_SUM_TOLERANCE = 1e-9


class CodonBudget(StrictModel):
    """Limits of one codon."""

    max_dollars: Opt[PositiveNumber] = None
    max_time_seconds: Opt[PositiveNumber] = None
    max_output_tokens: Opt[PositiveInt] = None
    max_context_tokens: Opt[PositiveInt] = None
    """High-water mark of input+output tokens in one turn."""
    on_exceeded: Opt[OnExceeded] = None
    """`complete` ends the codon gracefully; `fail` fails it (its onFailure policy applies);
    `ask` pauses it for a person to extend the ceiling or reject (then as `complete`)."""


class ContainerBudget(StrictModel):
    """Budget of a container (the whole hank via `overrides.budget`, or a loop)."""

    max_dollars: Opt[PositiveNumber] = None
    max_time_seconds: Opt[PositiveNumber] = None
    allocation: AllocationMode = "shared"
    """`shared`: first come, first served. `proportional`: pre-allocated shares, unspent money
    flows back. `proportional-strict`: pre-allocated shares, unspent money is lost."""
    shares: Opt[dict[str, Annotated[float, Field(gt=0, le=1)]]] = None
    """Child id -> fraction of `maxDollars` in (0, 1]."""
    on_exceeded: Opt[OnExceeded] = None

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        violations: list[RuleViolation] = []
        shares, allocation = data.get("shares"), data.get("allocation", "shared")
        if shares is not None and allocation == "shared":
            violations.append(
                RuleViolation(
                    ("shares",),
                    "budget.shares requires allocation mode 'proportional' or "
                    "'proportional-strict'. Fix: Set budget.allocation to 'proportional' or "
                    "'proportional-strict'.",
                )
            )
        if allocation in ("proportional", "proportional-strict") and data.get("maxDollars") is None:
            violations.append(
                RuleViolation(
                    ("maxDollars",),
                    "Proportional allocation requires budget.maxDollars. "
                    "Fix: Set budget.maxDollars to a positive number.",
                )
            )
        # A small tolerance, so 0.1 + 0.2 + 0.7 is not rejected for floating-point rounding.
        if _share_total(shares) > 1.0 + _SHARES_SUM_TOLERANCE:
            violations.append(
                RuleViolation(
                    ("shares",),
                    "budget.shares values must sum to at most 1.0. "
                    "Fix: Reduce share fractions so their total does not exceed 100%.",
                )
            )
        return violations


def _share_total(shares: object) -> float:
    """The sum of the numeric share values (others are reported as field errors)."""
    if not isinstance(shares, dict):
        return 0.0
    return sum(
        value
        for value in shares.values()
        if isinstance(value, int | float) and not isinstance(value, bool)
    )


def _unknown_share_ids(shares: object, child_ids: Sequence[object]) -> str | None:
    """The message for `shares` keys that are not child ids, or `None` if all are."""
    if not isinstance(shares, dict):
        return None
    valid = list(dict.fromkeys(child_ids))
    unknown = [key for key in shares if key not in valid]
    if not unknown:
        return None
    return (
        f"budget.shares references unknown child IDs: {', '.join(map(str, unknown))}. "
        f"Valid IDs: {', '.join(map(str, valid))}"
    )


# --------------------------------------------------------------------------------------------
# Codons and loops (docs/behaviour.md §1.2, docs/behaviour.md §1.3, docs/behaviour.md §1.6)
# --------------------------------------------------------------------------------------------

FIELD_TYPO_MAP: dict[str, str] = {
    "systemPromptFile": "appendSystemPromptFile",
    "systemPromptText": "appendSystemPromptText",
    "systemPrompt": "appendSystemPromptFile or appendSystemPromptText",
    "prompt": "promptFile or promptText",
    "prompts": "promptFile",
    "promptFiles": "promptFile",
    "trackedFiles": "checkpointedFiles",
    "tracking": "checkpointedFiles",
    "tracked": "checkpointedFiles",
    "watchedFiles": "checkpointedFiles",
    "fileTracking": "checkpointedFiles",
    "rig": "rigSetup",
    "setup": "rigSetup",
    "preSetup": "rigSetup",
    "archiveRigs": "archiveOnSuccess",
    "rigTeardown": "archiveOnSuccess",
    "teardown": "archiveOnSuccess",
    "archive": "archiveOnSuccess",
    "cleanup": "archiveOnSuccess",
    "archiveRig": "archiveOnSuccess",
    "archiving": "archiveOnSuccess",
    "archives": "archiveOnSuccess",
    "environment": "env",
    "envVars": "env",
    "outputs": "outputFiles",
    "output": "outputFiles",
    "continuation": "continuationMode",
    "mode": "continuationMode",
    "costLimit": "budget.maxDollars",
    "maxBudget": "budget.maxDollars",
    "maxCost": "budget.maxDollars",
    "maxDollars": "budget.maxDollars",
    "maxDuration": "budget.maxTimeSeconds",
    "maxDurationSeconds": "budget.maxTimeSeconds",
    "maxTimeSeconds": "budget.maxTimeSeconds",
    "timeLimit": "budget.maxTimeSeconds",
    "maxTokens": "budget.maxOutputTokens",
    "maxOutputTokens": "budget.maxOutputTokens",
    "tokenLimit": "budget.maxOutputTokens",
}
"""Common wrong field names in codons and loops -> the field the author probably meant."""

CONTINUATION_MODE_MESSAGE = (
    "continuationMode must be either 'fresh' or 'continue-previous'. This controls whether to "
    "start a new conversation or continue from the previous codon. Fix: Add continuationMode "
    "field with either 'fresh' (new conversation) or 'continue-previous' (maintain context)."
)


def _names_a_field(model: type[BaseModel], dotted: str) -> bool:
    """Whether a dotted JSON path such as `budget.maxDollars` exists in `model`."""
    current: Any = model
    for part in dotted.split("."):
        if not (isinstance(current, type) and issubclass(current, StrictModel)):
            return False
        fields = {field.alias or name: field for name, field in current.model_fields.items()}
        if part not in fields:
            return False
        current = _optional_model(fields[part].annotation)
    return True


def _optional_model(annotation: Any) -> Any:
    for arg in getattr(annotation, "__args__", (annotation,)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


class _HankItemModel(StrictModel):
    """Shared behaviour of codons and loops: unknown keys get typo suggestions."""

    @classmethod
    def unknown_field_issues(cls, keys: Sequence[str]) -> list[tuple[str | None, str]]:
        """Suggest the intended field for common typos; otherwise list the valid fields."""
        issues: list[tuple[str | None, str]] = []
        for key in keys:
            suggestion = FIELD_TYPO_MAP.get(key)
            # Only suggest what this kind of item really has (loops have no outputFiles, ...).
            if suggestion and all(_names_a_field(cls, s) for s in suggestion.split(" or ")):
                issues.append((key, f'Unknown field "{key}". Did you mean "{suggestion}"?'))
            else:
                issues.append((key, unrecognized_field_message(key, cls.json_field_names())))
        return issues


class RetryConfig(LenientModel):
    """How a codon with `onFailure: "retry"` is retried."""

    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    delay_ms: Annotated[int, Field(ge=0, le=60_000)] = 1000
    """Delay before the first retry; later retries back off exponentially."""
    max_delay_ms: Annotated[int, Field(ge=0, le=600_000)] = 60_000
    """Upper bound of any single wait, including a provider's Retry-After."""


# --------------------------------------------------------------------------------------------
# Human in the loop (hankweave additions: docs/human-in-the-loop.md)
# --------------------------------------------------------------------------------------------

ApprovalWhen = Literal["before", "after"]
ApprovalAnswer = Literal["approve", "reject"]


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise _value_error(f"not a valid regular expression: {exc}") from None
    return value


Regex = Annotated[str, AfterValidator(_regex)]


class _Deadline(StrictModel):
    """A deadline after which the default answer applies when no human answered."""

    deadline_seconds: Opt[PositiveNumber] = None
    """Seconds after the interruption is created; requires `defaultAnswer`."""

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        if (data.get("deadlineSeconds") is None) != (data.get("defaultAnswer") is None):
            return [RuleViolation((), "deadlineSeconds and defaultAnswer go together: the"
                                      " default answer is what applies at the deadline. Fix:"
                                      " give both, or neither.")]
        return []


class ApprovalGate(_Deadline):
    """A person approves the codon before it starts, or its result before the plan goes on."""

    when: ApprovalWhen
    question: Opt[str] = None
    """What the person is asked (default: a sentence naming the codon)."""
    default_answer: Opt[ApprovalAnswer] = None


class ToolApprovalRule(_Deadline):
    """Ask a person before a tool call whose name and input match."""

    tool: Regex
    """Regular expression the whole tool name must match (`Bash`, `Write|Edit`)."""
    input: Opt[Regex] = None
    """Regular expression searched in every string of the tool's input (`rm |git push`);
    unset: every call of the tool."""
    default_answer: Opt[ApprovalAnswer] = None

    def matches(self, name: str, tool_input: Mapping[str, Any]) -> bool:
        if re.fullmatch(self.tool, name) is None:
            return False
        if self.input is None:
            return True
        pattern = re.compile(self.input)
        return any(pattern.search(text) for text in _strings(tool_input))


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


SandboxMode = Literal["auto", "required", "off"]
SandboxNetwork = Literal["none", "all"]


class SandboxSettings(StrictModel):
    """An OS sandbox (bubblewrap) for the agent's processes: the Claude CLI with all it starts,
    the pi harness's `bash` (a hankweave addition: docs/sandbox.md)."""

    mode: Opt[SandboxMode] = None
    """`auto` (the default): sandboxed where bubblewrap works, said once per execution, and
    unsandboxed with a warning where it does not; `required`: the run fails before any codon
    where it cannot sandbox; `off`."""
    network: Opt[SandboxNetwork] = None
    """`none` or `all`; unset: the harness's default (none for pi's `bash`; all for the Claude
    CLI, which talks to its provider from inside)."""


class AskHumanSettings(_Deadline):
    """How the agent's `ask_human` questions are handled in this codon."""

    enabled: bool = True
    """False: no person is asked; the agent is told to go on on its own judgement."""
    default_answer: Opt[str] = None


class Codon(_HankItemModel):
    """One sealed agent task."""

    field_messages: ClassVar[dict[str, str]] = {"continuationMode": CONTINUATION_MODE_MESSAGE}

    type: Literal["codon"] = "codon"
    id: Annotated[
        str,
        _non_empty(
            "Codon ID cannot be empty. This uniquely identifies your codon (e.g., 'codon-1', "
            "'analysis'). Fix: Add a unique id field."
        ),
    ]
    """Unique across all codons and loops of the hank."""
    name: Annotated[
        str,
        _non_empty(
            "Codon name cannot be empty. This is the human-readable name shown in the UI. "
            "Fix: Add a descriptive name field."
        ),
    ]
    prompt_file: Opt[HankRefs] = None
    """Prompt file(s); frontmatter is stripped and files are joined with a blank line."""
    prompt_text: Opt[str] = None
    """Inline prompt (`promptFile` wins when both are set)."""
    append_system_prompt_file: Opt[HankRefs] = None
    """System prompt file(s) appended after the global system prompt."""
    append_system_prompt_text: Opt[str] = None
    model: ModelName
    """Model name, resolved against the model registry when the hank is validated."""
    continuation_mode: ContinuationMode
    """`fresh` starts a new session; `continue-previous` continues the previous codon's."""
    rig_setup: Opt[list[RigOperation]] = None
    """Operations run before the agent starts."""
    description: Opt[str] = None
    checkpointed_files: Opt[list[str]] = None
    """Globs (relative to agentRoot, gitignore applied) watched and committed in checkpoints."""
    env: Opt[dict[str, str]] = None
    """Environment added to the agent, rig commands and beforeCopy commands."""
    output_files: Opt[list[OutputFileGroup]] = None
    sentinels: Opt[list[CodonSentinel]] = None
    archive_on_success: Opt[list[ArchivePath]] = None
    on_failure: Opt[OnFailure] = None
    """Unset means `abort`."""
    retry_config: Opt[RetryConfig] = None
    """Only allowed with `onFailure: "retry"`."""
    exhaust_with_prompt: Opt[str] = None
    """Enables extensions: sent after each completion until the context is exhausted."""
    max_extensions: PositiveInt = 100
    auto_compact: Opt[bool] = None
    """Let the harness compact the session at the context limit (unset means false)."""
    shim_idle_timeout: Opt[ShimIdleTimeout] = None
    """Seconds without an agent event before the session is aborted."""
    budget: Opt[CodonBudget] = None
    approval: Opt[ApprovalWhen | ApprovalGate] = None
    """A person's approval before the codon starts or after it completed (a hankweave
    addition: docs/human-in-the-loop.md)."""
    tool_approval: Opt[list[ToolApprovalRule]] = None
    """Tool calls a person approves first, added to the hank's `toolApproval` rules."""
    ask_human: Opt[bool | AskHumanSettings] = None
    """Whether the agent's `ask_human` questions reach a person (default: they do)."""
    sandbox: Opt[SandboxSettings] = None
    """This codon's sandbox, over the run's `sandbox` setting (a hankweave addition)."""

    def approval_gate(self) -> ApprovalGate | None:
        """The codon's gate, the short form (`"before"`) expanded."""
        if isinstance(self.approval, str):
            return ApprovalGate(when=self.approval)
        return self.approval

    def ask_human_settings(self) -> AskHumanSettings:
        if isinstance(self.ask_human, AskHumanSettings):
            return self.ask_human
        return AskHumanSettings(enabled=self.ask_human is not False)

    @field_validator("type", mode="before")
    @classmethod
    def _no_nested_loop(cls, value: Any) -> Any:
        # Top-level loops never reach this model, so a "loop" here is nested inside a loop.
        if value == "loop":
            raise _value_error('A loop cannot contain another loop; "codons" may only hold codons')
        return value

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        violations: list[RuleViolation] = []
        # An empty promptFile array gives no prompt at all, so it does not count as one.
        if not data.get("promptFile") and not data.get("promptText"):
            violations.append(
                RuleViolation(
                    (),
                    "Either promptFile or promptText must be provided. The prompt tells the agent "
                    "what to do in this codon. Fix: Add either promptFile (path to .md file) or "
                    "promptText (inline prompt string).",
                )
            )
        if (
            data.get("appendSystemPromptFile") is not None
            and data.get("appendSystemPromptText") is not None
        ):
            violations.append(
                RuleViolation(
                    (),
                    "Cannot specify both appendSystemPromptFile and appendSystemPromptText. Use one "
                    "or the other to add system-level instructions. Fix: Remove one of these fields.",
                )
            )
        if data.get("retryConfig") is not None and data.get("onFailure") != "retry":
            violations.append(
                RuleViolation(
                    ("retryConfig",),
                    "retryConfig can only be used when onFailure is 'retry'. Fix: Either set "
                    "onFailure to 'retry' or remove the retryConfig field.",
                )
            )
        return violations


class IterationLimit(LenientModel):
    """Stop a loop after a fixed number of iterations."""

    type: Literal["iterationLimit"]
    limit: Annotated[
        int, Check(lambda n: "Iteration limit must be at least 1" if n < 1 else None, minimum=1)
    ]


class ContextExceeded(LenientModel):
    """Stop a loop when one of its codons signals that the context window was exceeded."""

    type: Literal["contextExceeded"]


TerminateOn = Annotated[IterationLimit | ContextExceeded, Field(discriminator="type")]


class Loop(_HankItemModel):
    """Codons repeated until a termination condition; each runs as `<codonId>#<iteration>`."""

    type: Literal["loop"]
    id: Annotated[
        str,
        _non_empty(
            "Loop ID cannot be empty. This uniquely identifies your loop (e.g., "
            "'iterative-development'). Fix: Add a unique id field."
        ),
    ]
    name: Annotated[
        str,
        _non_empty(
            "Loop name cannot be empty. This is the human-readable name shown in the UI. "
            "Fix: Add a descriptive name field."
        ),
    ]
    description: Opt[str] = None
    terminate_on: TerminateOn
    codons: Annotated[
        list[Codon],
        Check(
            lambda codons: (
                None
                if codons
                else "Loop must contain at least one codon. Fix: Add codons to the loop."
            ),
            minItems=1,
        ),
    ]
    """Codons run in each iteration (no nested loops)."""
    budget: Opt[ContainerBudget] = None
    archive_on_success: Opt[list[ArchivePath]] = None
    """Archived once, when the loop ends."""

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        budget = data.get("budget")
        shares = budget.get("shares") if isinstance(budget, dict) else None
        message = _unknown_share_ids(shares, _raw_ids(data.get("codons")))
        return [] if message is None else [RuleViolation(("budget", "shares"), message)]


def _raw_ids(items: object) -> list[str]:
    """The string ids of the objects in a raw JSON array (anything else is skipped)."""
    if not isinstance(items, list):
        return []
    return [
        item["id"] for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)
    ]


_ITEM_ERROR = "hank_item_type"


def _item_kind(value: Any) -> str | None:
    # As in 0.10.0: only an explicit "loop" makes a loop; any other object is parsed as a codon.
    if isinstance(value, dict):
        return "loop" if value.get("type") == "loop" else "codon"
    if isinstance(value, Loop):
        return "loop"
    if isinstance(value, Codon):
        return "codon"
    return None


HankItem = Annotated[
    Union[Annotated[Codon, Tag("codon")], Annotated[Loop, Tag("loop")]],  # noqa: UP007
    Discriminator(
        _item_kind,
        custom_error_type=_ITEM_ERROR,
        custom_error_message="Item must be an object (codon or loop)",
    ),
]


# --------------------------------------------------------------------------------------------
# Root object (docs/behaviour.md §1.1, docs/behaviour.md §1.12 overrides)
# --------------------------------------------------------------------------------------------


class HankMeta(LenientModel):
    """Metadata for sharing and indexing."""

    name: Annotated[str, _non_empty("Hank name cannot be empty")]
    version: Annotated[str, _non_empty("Hank version cannot be empty")]
    description: Opt[str] = None
    author: Opt[str] = None


class SentinelSystemSettings(StrictModel):
    """Settings of the sentinel system (also used in `hankweave.json`)."""

    enable_persistence: Opt[bool] = None
    health_check_grace_period_ms: Opt[PositiveInt] = None
    wait_for_all_health_checks: Opt[bool] = None


class HankOverrides(StrictModel):
    """The hank author's runtime settings; they sit between `hankweave.json` and defaults."""

    model: Opt[ModelName] = None
    data_hash_time_limit: Opt[PositiveInt] = None
    """Milliseconds allowed for hashing the data directory."""
    sentinel: Opt[SentinelSystemSettings] = None
    shim_idle_timeout: Opt[ShimIdleTimeout] = None
    budget: Opt[ContainerBudget] = None
    """Budget of the whole hank; `shares` keys are top-level codon or loop ids."""
    harnesses: Opt[HarnessSections] = None
    """Settings of the harnesses this hank runs on (a hankweave addition)."""
    sandbox: Opt[SandboxSettings] = None
    """The sandbox of every codon's agent, unless a codon sets its own (docs/sandbox.md)."""


EnvVarName = Annotated[
    str,
    AfterValidator(str.strip),
    Check(lambda name: None if name else "Environment variable name cannot be empty"),
]


def _tool_problem(entry: str) -> str | None:
    from hankweave.config.tools import parse_tool_requirement

    try:
        parse_tool_requirement(entry)
    except ValueError as exc:
        return str(exc)
    return None


ToolName = Annotated[str, AfterValidator(str.strip), Check(_tool_problem)]


class HankRequirements(LenientModel):
    """What must be true before the hank can run."""

    env: Opt[list[EnvVarName]] = None
    """Variables that must be non-empty (`X` or `HANKWEAVE_X`)."""
    tools: Opt[list[ToolName]] = None
    """Programs that must be on the agents' `PATH`, optionally with versions (`"git>=2.30"`;
    :mod:`hankweave.config.tools`)."""


VALID_ROOT_FIELDS = (
    "$schema",
    "meta",
    "overrides",
    "requirements",
    "globalSystemPromptFile",
    "globalSystemPromptText",
    "hank",
)


_ITERATION_SUFFIX = re.compile(r"#\d+$")


def runtime_codon_id(codon_id: str, iteration: int) -> str:
    """The runtime id of a loop codon in one iteration: ``review`` + 3 → ``review#3``."""
    return f"{codon_id}#{iteration}"


def base_codon_id(runtime_id: str) -> str:
    """The config id behind a runtime id: ``review#3`` → ``review``; top-level ids unchanged."""
    return _ITERATION_SUFFIX.sub("", runtime_id)


@dataclass(frozen=True)
class CodonSite:
    """One codon configuration of a hank and where it stands (:meth:`HankFile.codon_sites`)."""

    codon: Codon
    at: tuple[PathSegment, ...]
    """Its JSON path as segments: ``("hank", 2)``, or ``("hank", 3, "codons", 0)`` in a loop."""
    loop: Loop | None
    """The loop it repeats in, if any."""

    @property
    def path(self) -> str:
        """The JSON path as text: ``hank[3].codons[0]``."""
        return format_path(self.at)


class HankFile(StrictModel):
    """A hank file: codons and loops in execution order, with optional settings."""

    schema_url: Opt[str] = Field(default=None, alias="$schema")
    """JSON schema URL for editor support."""
    meta: Opt[HankMeta] = None
    overrides: Opt[HankOverrides] = None
    requirements: Opt[HankRequirements] = None
    global_system_prompt_file: Opt[HankRefs] = None
    """System prompt file(s) for every codon, joined with a blank line."""
    global_system_prompt_text: Opt[str] = None
    tool_approval: Opt[list[ToolApprovalRule]] = None
    """Tool calls a person approves first, in every codon (a hankweave addition)."""
    hank: Annotated[
        list[HankItem],
        Check(lambda items: None if items else "At least one codon required", minItems=1),
    ]
    """Codons and loops in execution order."""

    def codon_sites(self) -> Iterator[CodonSite]:
        """Every codon configuration in file order, loop codons included, with where it is.

        The one walk over a hank's codons: everything that needs each codon uses it.
        """
        for index, item in enumerate(self.hank):
            if isinstance(item, Loop):
                for position, codon in enumerate(item.codons):
                    yield CodonSite(codon, ("hank", index, "codons", position), item)
            else:
                yield CodonSite(item, ("hank", index), None)

    def codon_configs(self) -> dict[str, Codon]:
        """Codon configurations by configured id (a loop codon by its base id)."""
        return {site.codon.id: site.codon for site in self.codon_sites()}

    @classmethod
    def unknown_field_issues(cls, keys: Sequence[str]) -> list[tuple[str | None, str]]:
        """All unknown root keys in one issue, pointing out codon fields placed at the root."""
        listed = ", ".join(keys)
        codon_fields = [key for key in keys if key in VALID_CODON_FIELDS]
        if codon_fields:
            hint = '", "'.join(codon_fields)
            message = (
                f'Unrecognized field(s) at hank root: {listed}. "{hint}" is a per-codon field '
                '— move it inside a codon in the "hank" array.'
            )
        else:
            message = (
                f"Unrecognized field(s) at hank root: {listed}. "
                f"Valid root fields are: {', '.join(VALID_ROOT_FIELDS)}."
            )
        return [(None, message)]

    _ignored_keys: list[HankIssue] = PrivateAttr(default_factory=list)

    @property
    def ignored_keys(self) -> list[HankIssue]:
        """Unknown keys :func:`parse_hank` dropped from nested objects: warnings, each at its path."""
        return list(self._ignored_keys)

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        violations: list[RuleViolation] = []
        if (
            data.get("globalSystemPromptFile") is not None
            and data.get("globalSystemPromptText") is not None
        ):
            violations.append(
                RuleViolation(
                    (), "Cannot specify both globalSystemPromptFile and globalSystemPromptText"
                )
            )
        overrides = data.get("overrides")
        budget = overrides.get("budget") if isinstance(overrides, dict) else None
        shares = budget.get("shares") if isinstance(budget, dict) else None
        if isinstance(data.get("hank"), list):
            message = _unknown_share_ids(shares, _raw_ids(data["hank"]))
            if message is not None:
                violations.append(RuleViolation(("overrides", "budget", "shares"), message))
        return violations


VALID_CODON_FIELDS: tuple[str, ...] = tuple(Codon.json_field_names())
VALID_LOOP_FIELDS: tuple[str, ...] = tuple(Loop.json_field_names())


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def _item_not_object(error: ErrorDetails, path: Sequence[PathSegment]) -> str:
    return f"Item at index {path[-1]} must be an object (codon or loop)"


def parse_hank(data: object, source: str = "hank.json") -> HankFile:
    """Validate decoded JSON as a hank file.

    Raises :class:`HankValidationError` listing every problem, each at its JSON path; `source`
    names the file in the message. Keys are matched by their JSON (camelCase) names only.

    An unknown key inside a nested object that Hankweave 0.10.0 is lenient about
    (:class:`LenientModel`) is dropped, with a warning in :attr:`HankFile.ignored_keys` (or in
    the error's ``warnings``); unknown keys of the root, codons, loops, budgets, overrides and
    output groups are errors (docs/behaviour.md §1.15).
    """
    ignored: list[IgnoredKey] = []
    try:
        hank = _validate(data)
    except ValidationError as exc:
        issues = _issues(exc, ignored)
        if issues:
            raise _invalid(source, issues, data, ignored) from None
        # Only ignorable keys failed: validate again without them.
        try:
            hank = _validate(without_keys(data, [key.at for key in ignored]))
        except ValidationError as again:
            raise _invalid(source, _issues(again, ignored), data, ignored) from None
    hank._ignored_keys = [key.issue() for key in ignored]
    return hank


def _validate(data: object) -> HankFile:
    return HankFile.model_validate(data, by_alias=True, by_name=False)


def _issues(exc: ValidationError, ignored: list[IgnoredKey]) -> list[HankIssue]:
    return issues_from_validation_error(
        exc, HankFile, overrides={_ITEM_ERROR: _item_not_object}, ignored=ignored
    )


def _invalid(
    source: str, issues: list[HankIssue], data: object, ignored: list[IgnoredKey]
) -> HankValidationError:
    unique = list(dict.fromkeys(ignored))
    return HankValidationError(source, with_rule_issues(HankFile, data, issues),
                               warnings=[key.issue() for key in unique])


def without_keys(data: object, paths: Sequence[tuple[PathSegment, ...]]) -> object:
    """A copy of `data` without the keys at `paths` (each path ends on the key)."""
    copied = copy.deepcopy(data)
    for path in paths:
        parent: Any = copied
        for segment in path[:-1]:
            parent = parent[segment]
        parent.pop(path[-1], None)
    return copied


def load_hank(path: Path) -> HankFile:
    """Read and validate the hank file at `path`.

    A missing or unreadable file raises :class:`~hankweave.config.errors.ConfigError`; invalid
    JSON or content raises :class:`HankValidationError` naming every problem.
    """
    data = read_config_json(path, what="Hank file", invalid=HankValidationError)
    return parse_hank(data, source=str(path))


class _HankJsonSchema(GenerateJsonSchema):
    """JSON schema output for authors: no generated titles, no `null` defaults."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        json_schema = super().default_schema(schema)
        if schema.get("default", ...) is None:
            json_schema.pop("default", None)
        return json_schema


def hank_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the hank file, with camelCase field names."""
    schema = HankFile.model_json_schema(by_alias=True, schema_generator=_HankJsonSchema)
    schema.pop("title", None)
    return {"$schema": JSON_SCHEMA_DIALECT, "title": "Hankweave hank file", **schema}
