"""Sentinel config files and inline configs: the strict models and their loading.

A sentinel config is Hankweave 0.10.0's format (``sentinel.schema.ts``): camelCase JSON names,
unknown keys at the top level rejected, each problem reported at its JSON path.  Like the
original (whose nested objects drop unknown keys), an unknown key *inside* a nested object is
ignored with a warning (:class:`~hankweave.config.hank.LenientModel`), so a config the original
accepts loads here, and one it rejects (``output.format: "json"``, a misspelt condition path)
is rejected.

:func:`parse_sentinel_config` validates one decoded config; :class:`SentinelConfigLoader` loads
the configs a codon attaches (``sentinels: [{sentinelConfig, settings?}]``): file configs are
resolved from the hank directory under the strict ref rules and cached by absolute path, and
every failure becomes a :class:`SentinelLoadError` (fatal when ``failCodonIfNotLoaded``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    PlainValidator,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, ErrorDetails, PydanticCustomError, core_schema

from hankweave.config.errors import (
    ConfigError,
    ConfigValidationError,
    HankIssue,
    IgnoredKey,
    PathSegment,
    RuleViolation,
    format_path,
    issues_from_validation_error,
    read_config_json,
    with_rule_issues,
)
from hankweave.config.hank import (
    Check,
    CodonSentinel,
    CodonSentinelSettings,
    LenientModel,
    Opt,
    SentinelOutputPaths,
    SentinelWebsocketReporting,
    StrictModel,
    forbidden_ref_spelling,
    path_or_paths,
    ref_spelling_message,
    without_keys,
)
from hankweave.config.refs import RefSite, ref_policy_problem
from hankweave.sentinel import SentinelKind, SentinelOptions, SentinelTrigger, TriggerConfig
from hankweave.sentinels.conditions import (
    WILDCARD,
    condition_holds,
    known_event_type,
    observable,
    path_in_payload,
    payload_fields,
)

SENTINEL_ID_PATTERN = re.compile(r"^[a-z0-9-]+$")
DEFAULT_JOIN_STRING = "\n---\n"
DEFAULT_MAX_CONSECUTIVE_FAILURES = 3

DEBOUNCE_MAX_MS = 300_000
COUNT_MAX_THRESHOLD = 1000
TIME_WINDOW_MAX_MS = 3_600_000
MAX_TURNS_LIMIT = 100
MAX_TOKENS_LIMIT = 100_000

_VALUE_ERROR = "sentinel_value"


def _value_error(message: str) -> PydanticCustomError:
    # The message goes through the context: it may quote user input with braces.
    return PydanticCustomError(_VALUE_ERROR, "{message}", {"message": message})


def _is_number(value: object) -> bool:
    # bool is an int in Python, not a number in JSON; NaN and infinities are not JSON.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _json_value(accepts: Callable[[object], bool], expected: str) -> PlainValidator:
    """One validator for a union of JSON scalars, so a wrong value gets one message, not one
    per member (and ``1`` stays an ``int``: ``1`` and ``1.0`` are the same number anyway)."""

    def validate(value: Any) -> Any:
        if accepts(value):
            return value
        raise _value_error(f"Input should be {expected}")

    return PlainValidator(validate)


Number = Annotated[int | float, _json_value(_is_number, "a number")]
Scalar = Annotated[
    str | int | float | bool | None,
    _json_value(lambda v: v is None or isinstance(v, str | bool) or _is_number(v),
                "a string, number, boolean or null"),
]
StringOrNumber = Annotated[
    str | int | float, _json_value(lambda v: isinstance(v, str) or _is_number(v),
                                   "a string or a number"),
]


def _not_empty(what: str) -> Check:
    return Check(lambda value: None if value else f"{what} cannot be empty", minLength=1)


def _bounded(low: int, high: int) -> Any:
    return Field(ge=low, le=high)


# --------------------------------------------------------------------------------------------
# Field types
# --------------------------------------------------------------------------------------------


class _PortableRefCheck:
    """A file named by a sentinel config: portable spelling only (R1).

    A file config's refs resolve from its own directory, whose place in the hank the schema
    cannot know, so containment (R2) and symlinks (R3) are checked when the config loads.
    """

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.with_info_after_validator_function(self._validate, handler(source))

    @staticmethod
    def _validate(raw: str, info: ValidationInfo) -> str:
        if raw == "":
            label = to_camel(info.field_name or "reference")
            raise _value_error(f"{label} cannot be an empty string; omit the field instead")
        problem = forbidden_ref_spelling(raw)
        if problem is not None:
            raise _value_error(ref_spelling_message(problem, raw))
        return raw


SentinelFileRef = Annotated[str, _PortableRefCheck()]


SentinelFileRefs = Annotated[
    Union[  # noqa: UP007 - tagged members need the Union spelling
        Annotated[SentinelFileRef, Tag("path")], Annotated[list[SentinelFileRef], Tag("paths")]
    ],
    Discriminator(
        path_or_paths,
        custom_error_type=_VALUE_ERROR,
        custom_error_message="Input should be a path or an array of paths",
    ),
]
"""A prompt file value: one path or an array of paths (contents joined with blank lines)."""


def _event_type_problem(name: str) -> str | None:
    if known_event_type(name):
        return None
    return f'Invalid event type "{name}" (an event type of the catalogue, or "*")'


EventTypeName = Annotated[str, Check(_event_type_problem)]
"""An event type a trigger lists, or ``*``."""

ConditionPath = Annotated[str, _not_empty("Condition path")]


# --------------------------------------------------------------------------------------------
# Conditions and triggers
# --------------------------------------------------------------------------------------------


class EqualityCondition(LenientModel):
    """``equals``/``notEquals``: strict equality (``===``) with a scalar."""

    operator: Literal["equals", "notEquals"]
    path: ConditionPath
    """Dotted into the event's ``data``."""
    value: Scalar


class MembershipCondition(LenientModel):
    """``in``/``notIn``: the value is one of a non-empty list of strings or numbers."""

    operator: Literal["in", "notIn"]
    path: ConditionPath
    value: Annotated[list[StringOrNumber], Field(min_length=1)]


class ContainsCondition(LenientModel):
    """``contains``: a substring of a string, or an element of an array."""

    operator: Literal["contains"]
    path: ConditionPath
    value: str


class MatchesCondition(LenientModel):
    """``matches``: a JavaScript regular expression test (an invalid pattern never matches)."""

    operator: Literal["matches"]
    path: ConditionPath
    value: str


class NumericCondition(LenientModel):
    """``greaterThan``/``lessThan``: numbers only."""

    operator: Literal["greaterThan", "lessThan"]
    path: ConditionPath
    value: Number


Condition = Annotated[
    EqualityCondition | MembershipCondition | ContainsCondition | MatchesCondition
    | NumericCondition,
    Field(discriminator="operator"),
]


def _raw_path_conditions(conditions: object) -> Iterator[tuple[int, str]]:
    """`(index, path)` of each condition in raw JSON whose path is a non-empty string."""
    for index, condition in enumerate(conditions if isinstance(conditions, list) else []):
        path = condition.get("path") if isinstance(condition, dict) else None
        if isinstance(path, str) and path:
            yield index, path


def _unknown_path_message(path: str, event_types: Sequence[str]) -> str:
    if len(event_types) == 1:
        fields = ", ".join(payload_fields(event_types[0]))
        return (
            f'Invalid path "{path}" for event type "{event_types[0]}" '
            f"(its data has: {fields})"
        )
    listed = ", ".join(event_types)
    return f'Path "{path}" is not valid for any of the specified event types ({listed})'


def _path_violations(conditions: object, event_types: Sequence[str]) -> list[RuleViolation]:
    """Every condition whose path no listed event type's payload has.

    Skipped when the list holds ``*`` (any payload) or no known type (that is reported on the
    type itself).
    """
    if WILDCARD in event_types:
        return []
    known = [name for name in event_types if known_event_type(name)]
    if not known:
        return []
    return [
        RuleViolation(("conditions", index, "path"), _unknown_path_message(path, known))
        for index, path in _raw_path_conditions(conditions)
        if not any(path_in_payload(name, path) for name in known)
    ]


def _event_types(raw: object) -> list[str]:
    return [name for name in raw if isinstance(name, str)] if isinstance(raw, list) else []


# The built-in trigger types' models are their classes' ``Config`` (``SentinelTrigger.Config``),
# validated as members of :data:`Trigger` with the rest of the sentinel config.  (Their
# docstrings are the published JSON schema's descriptions.)
class EventTrigger(LenientModel, TriggerConfig):
    """Fires on each event whose type is listed (or any, with ``*``) and whose data satisfies
    every condition; each matching event is its own batch."""

    type: Literal["event"]
    on: Annotated[list[EventTypeName], Field(min_length=1)]
    conditions: Opt[list[Condition]] = None

    def accepts(self, event_type: str, data: Mapping[str, Any]) -> bool:
        """Whether an event of `event_type` with payload `data` matches this trigger."""
        if WILDCARD not in self.on and event_type not in self.on:
            return False
        return all(condition_holds(condition, data) for condition in self.conditions or ())

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        return _path_violations(data.get("conditions"), _event_types(data.get("on")))


class InterestFilter(LenientModel):
    """Which events a sequence trigger records; the pattern is checked on the last type listed."""

    on: Annotated[list[EventTypeName], Field(min_length=1)]


class PatternStep(LenientModel):
    """One step of a sequence pattern: an event type (or ``*``) and its conditions."""

    type: EventTypeName
    conditions: Opt[list[Condition]] = None

    def accepts(self, event_type: str, data: Mapping[str, Any]) -> bool:
        """Whether an event of `event_type` with payload `data` matches this step."""
        if self.type not in (WILDCARD, event_type):
            return False
        return all(condition_holds(condition, data) for condition in self.conditions or ())

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        step_type = data.get("type")
        if not isinstance(step_type, str):
            return []
        return _path_violations(data.get("conditions"), [step_type])


class SequenceOptions(LenientModel):
    consecutive: Opt[bool] = None
    """Whether the pattern must match the tail of the window step by step (default true)."""


class SequenceTrigger(LenientModel, TriggerConfig):
    """Fires when recorded events match the pattern, in order; the matched events are the batch."""

    type: Literal["sequence"]
    interest_filter: InterestFilter
    pattern: Annotated[list[PatternStep], Field(min_length=1)]
    options: Opt[SequenceOptions] = None

    @property
    def consecutive(self) -> bool:
        """Whether matching is consecutive (the default) rather than in order with gaps."""
        return self.options is None or self.options.consecutive is not False


BUILTIN_TRIGGER_TYPES = ("event", "sequence")
"""The trigger types the config format defines (their models are members of :data:`Trigger`);
``hankweave.default_plugins.sentinels`` registers their classes."""
DEFAULT_KIND = "llm"
"""The kind of a config that names none: an LLM call (``hankweave.sentinels.llm``, registered
by ``hankweave.default_plugins.sentinels``)."""


def _choices(names: Sequence[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


# Its own settings are validated by the plugin class's ``Config`` when the sentinel loads
# (:class:`SentinelConfigLoader`); the docstring is the published JSON schema's description.
class PluginTrigger(StrictModel):
    """A trigger type a plugin registered (``register_sentinel_triggers``): its own settings
    are checked by the plugin's class when the sentinel loads."""

    model_config = StrictModel.model_config | {"extra": "allow"}

    type: str

    @field_validator("type")
    @classmethod
    def _registered(cls, value: str, info: ValidationInfo) -> str:
        known = (info.context or {}).get("trigger_types", ())
        if value not in known:
            names = _choices([*BUILTIN_TRIGGER_TYPES, *sorted(known)])
            raise _value_error(f'"type" must be one of {names}, not {value!r}')
        return value

    def settings(self) -> dict[str, Any]:
        """The trigger object as written (``type`` included), for the plugin class's ``Config``."""
        return {"type": self.type, **(self.model_extra or {})}


def _trigger_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if not isinstance(kind, str):
        return None
    return kind if kind in BUILTIN_TRIGGER_TYPES else "plugin"


Trigger = Annotated[
    Union[  # noqa: UP007 - tagged members need the Union spelling
        Annotated[EventTrigger, Tag("event")],
        Annotated[SequenceTrigger, Tag("sequence")],
        Annotated[PluginTrigger, Tag("plugin")],
    ],
    Discriminator(_trigger_tag),
]


# --------------------------------------------------------------------------------------------
# Execution strategies
# --------------------------------------------------------------------------------------------


class ImmediateExecution(LenientModel):
    """Each trigger is processed at once."""

    strategy: Literal["immediate"]


class DebounceExecution(LenientModel):
    """Matches are collected until `milliseconds` pass without one."""

    strategy: Literal["debounce"]
    milliseconds: Annotated[int, _bounded(1, DEBOUNCE_MAX_MS)]


class CountExecution(LenientModel):
    """Matches are collected and processed `threshold` at a time."""

    strategy: Literal["count"]
    threshold: Annotated[int, _bounded(1, COUNT_MAX_THRESHOLD)]


class TimeWindowExecution(LenientModel):
    """Whatever matched is processed every `milliseconds` (nothing when nothing matched)."""

    strategy: Literal["timeWindow"]
    milliseconds: Annotated[int, _bounded(1, TIME_WINDOW_MAX_MS)]


Execution = Annotated[
    ImmediateExecution | DebounceExecution | CountExecution | TimeWindowExecution,
    Field(discriminator="strategy"),
]


# --------------------------------------------------------------------------------------------
# Conversation, errors, LLM parameters, outputs
# --------------------------------------------------------------------------------------------


class MaxTurnsTrimming(LenientModel):
    """Keep at most `max_turns` user/assistant pairs, dropping the oldest."""

    type: Literal["maxTurns"]
    max_turns: Annotated[int, _bounded(1, MAX_TURNS_LIMIT)]


class MaxTokensTrimming(LenientModel):
    """Drop the oldest messages until the history is under `max_tokens`."""

    type: Literal["maxTokens"]
    max_tokens: Annotated[int, _bounded(1, MAX_TOKENS_LIMIT)]


TrimmingStrategy = Annotated[MaxTurnsTrimming | MaxTokensTrimming, Field(discriminator="type")]


class Conversational(LenientModel):
    """A sentinel that keeps its conversation across triggers (needs a system prompt)."""

    trimming_strategy: TrimmingStrategy
    continue_on_error: Opt[bool] = None


class ErrorHandling(LenientModel):
    max_consecutive_failures: Opt[Annotated[int, Field(ge=1)]] = None
    """Failed calls in a row before a non-conversational sentinel is unloaded (default 3)."""
    unload_on_fatal_error: Opt[bool] = None
    """Accepted and documented as defaulting to true; the original never reads it."""


class LlmParams(LenientModel):
    temperature: Opt[Annotated[float, Field(ge=0, le=2)]] = None
    max_output_tokens: Opt[Annotated[int, _bounded(1, 100_000)]] = None
    max_retries: Opt[Annotated[int, _bounded(0, 5)]] = None
    provider_options: Opt[dict[str, dict[str, Any]]] = None
    """Passed through to the provider: ``{<provider>: {<option>: <value>}}``."""


@dataclass(frozen=True)
class ResolvedLlmParams:
    """The parameters of every call: the config's, over the sentinel defaults."""

    temperature: float = 0
    max_output_tokens: int = 8192
    max_retries: int = 2
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class StructuredOutput(LenientModel):
    """Structured output: an object or array with a Zod schema, or one of `enum_values`."""

    output: Literal["object", "array", "enum"]
    schema_str: Opt[str] = None
    """Zod schema source, e.g. ``z.object({...})``."""
    schema_file: Opt[SentinelFileRef] = None
    """A file holding the Zod schema source, relative to the config's directory."""
    enum_values: Opt[Annotated[list[str], Field(min_length=1)]] = None
    schema_name: Opt[str] = None
    schema_description: Opt[str] = None

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        # The original tests these fields for truthiness, so "" counts as absent.
        mode = data.get("output")
        given = [key for key in ("schemaStr", "schemaFile") if data.get(key)]
        has_enum = bool(data.get("enumValues"))
        if mode == "enum":
            found = [RuleViolation((key,), f'{key} is not allowed with output "enum"')
                     for key in given]
            if not has_enum:
                found.append(RuleViolation((), 'output "enum" requires enumValues'))
            return found
        if mode not in ("object", "array"):
            return []
        found = []
        if len(given) != 1:
            which = "both" if given else "neither"
            found.append(RuleViolation(
                (), f'output "{mode}" requires exactly one of schemaStr or schemaFile '
                    f"(got {which})"))
        if "enumValues" in data:
            found.append(RuleViolation(
                ("enumValues",), 'enumValues is only allowed with output "enum"'))
        return found


class SentinelOutput(LenientModel):
    """Accepted for compatibility; outputs come from the codon's ``settings.outputPaths``."""

    format: Opt[Literal["text", "jsonl"]] = None
    file: Opt[str] = None
    last_value_file: Opt[str] = None


# --------------------------------------------------------------------------------------------
# The config
# --------------------------------------------------------------------------------------------


def _id_problem(value: str) -> str | None:
    if not value:
        return "Sentinel id cannot be empty"
    if not SENTINEL_ID_PATTERN.match(value):
        return "ID must contain only lowercase letters, numbers, and hyphens"
    return None


SentinelId = Annotated[str, Check(_id_problem, pattern=SENTINEL_ID_PATTERN.pattern)]


class SentinelConfig(StrictModel):
    """One sentinel: what triggers it, how triggers are batched, its prompts and its model."""

    id: SentinelId
    name: Annotated[str, _not_empty("Sentinel name")]
    description: Opt[str] = None
    trigger: Trigger
    execution: Execution
    system_prompt_file: Opt[SentinelFileRefs] = None
    system_prompt_text: Opt[str] = None
    """Appended after the system prompt files' contents."""
    user_prompt_file: Opt[SentinelFileRefs] = None
    user_prompt_text: Opt[str] = None
    conversational: Opt[Conversational] = None
    error_handling: Opt[ErrorHandling] = None
    llm_params: Opt[LlmParams] = None
    model: Opt[Annotated[str, _not_empty("Model")]] = None
    """A full model id, ``<provider>/<model>``; required by the ``llm`` kind."""
    kind: Opt[Annotated[str, Check(lambda value: None if value else "Kind cannot be empty")]] = None
    """What runs when the sentinel fires (a hankweave addition): ``llm`` (the default) or a
    kind a plugin registered (``register_sentinel_kinds``)."""
    options: Opt[dict[str, Any]] = None
    """The kind's own settings (a hankweave addition), checked by the kind's ``Options``."""
    structured_output: Opt[StructuredOutput] = None
    join_string: Opt[str] = None
    """Separator of text log entries, with the escapes ``\\n \\t \\r \\\\``; text output only."""
    report_to_websocket: Opt[SentinelWebsocketReporting] = None
    output: Opt[SentinelOutput] = None

    _warnings: list[HankIssue] = PrivateAttr(default_factory=list)

    @field_validator("kind")
    @classmethod
    def _installed_kind(cls, value: str | None, info: ValidationInfo) -> str | None:
        known = (info.context or {}).get("sentinel_kinds", ())
        if value is not None and value != DEFAULT_KIND and value not in known:
            names = _choices([DEFAULT_KIND, *sorted(set(known) - {DEFAULT_KIND})])
            raise _value_error(f"Unknown sentinel kind {value!r} (installed: {names}; a"
                               " plugin adds kinds with register_sentinel_kinds)")
        return value

    @property
    def kind_name(self) -> str:
        """The kind that runs this sentinel (``llm`` when the config names none)."""
        return self.kind or DEFAULT_KIND

    @property
    def warnings(self) -> list[HankIssue]:
        """Ignored unknown keys and trigger entries that can never match, each at its path."""
        return list(self._warnings)

    @property
    def max_consecutive_failures(self) -> int:
        handling = self.error_handling
        if handling is None or handling.max_consecutive_failures is None:
            return DEFAULT_MAX_CONSECUTIVE_FAILURES
        return handling.max_consecutive_failures

    @property
    def resolved_llm_params(self) -> ResolvedLlmParams:
        """The LLM call parameters, with the sentinel defaults for those not given."""
        given = self.llm_params or LlmParams()
        defaults = ResolvedLlmParams()
        return ResolvedLlmParams(
            temperature=defaults.temperature if given.temperature is None else given.temperature,
            max_output_tokens=given.max_output_tokens or defaults.max_output_tokens,
            max_retries=defaults.max_retries if given.max_retries is None else given.max_retries,
            provider_options=given.provider_options or {},
        )

    @property
    def join_separator(self) -> str:
        """`join_string` with its escapes decoded (default ``"\\n---\\n"``)."""
        if self.join_string is None:
            return DEFAULT_JOIN_STRING
        return decode_join_escapes(self.join_string)

    def file_refs(self) -> Iterator[tuple[tuple[PathSegment, ...], str]]:
        """Each file the config names: its JSON path in the config and the path as written."""
        values: list[tuple[tuple[PathSegment, ...], object]] = [
            (("systemPromptFile",), self.system_prompt_file),
            (("userPromptFile",), self.user_prompt_file),
            (("structuredOutput", "schemaFile"),
             self.structured_output.schema_file if self.structured_output else None),
        ]
        for at, value in values:
            if isinstance(value, str):
                yield at, value
            elif isinstance(value, list):
                for index, raw in enumerate(value):
                    yield (*at, index), raw

    @classmethod
    def rule_violations(cls, data: Mapping[str, Any]) -> list[RuleViolation]:
        # Presence as the original tests it: truthiness ("" is absent, [] is present).
        found: list[RuleViolation] = []
        llm = data.get("kind") in (None, DEFAULT_KIND)
        if llm and "model" not in data:
            found.append(RuleViolation(("model",), "Field required"))
        if llm and not (_given(data, "userPromptFile") or data.get("userPromptText")):
            found.append(RuleViolation((), (
                "Each sentinel must have at least one of `userPromptFile` or `userPromptText` "
                "defined.")))
        has_system = _given(data, "systemPromptFile") or data.get("systemPromptText")
        if data.get("conversational") and not has_system:
            found.append(RuleViolation(("conversational",), (
                "Conversational sentinels require a system prompt "
                "(systemPromptFile or systemPromptText).")))
        if data.get("joinString") and data.get("structuredOutput"):
            found.append(RuleViolation(("joinString",), (
                "joinString is only valid for text output, not structured output")))
        output = data.get("output")
        if data.get("structuredOutput") and isinstance(output, dict) and output.get("format"):
            found.append(RuleViolation(("output", "format"), (
                "output.format cannot be combined with structuredOutput; "
                "the structured output format is determined by the schema")))
        return found


def _given(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key)
    return isinstance(value, list) or bool(value)


_JOIN_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def decode_join_escapes(text: str) -> str:
    """Decode ``\\n \\t \\r \\\\`` in one left-to-right pass; other backslashes stay as written."""
    return re.sub(r"\\([ntr\\])", lambda match: _JOIN_ESCAPES[match.group(1)], text)


class SentinelConfigValidationError(ConfigValidationError):
    """A sentinel config (a file or inline) is invalid."""

    kind = "sentinel config"


def parse_sentinel_config(
    data: object, source: str, *, trigger_types: Sequence[str] = (),
    kinds: Sequence[str] = (),
) -> SentinelConfig:
    """Validate decoded JSON as a sentinel config.

    `trigger_types` and `kinds` are the names plugins registered beyond the built-in ones;
    a config naming another is invalid.

    Raises :class:`SentinelConfigValidationError` listing every problem, each at its JSON path
    inside the config; `source` names the config in the message.  Unknown keys in nested
    objects are dropped, with a warning in :attr:`SentinelConfig.warnings`.
    """
    ignored: list[IgnoredKey] = []
    context = {"trigger_types": tuple(trigger_types), "sentinel_kinds": tuple(kinds)}
    try:
        config = _validate(data, context)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, SentinelConfig, ignored=ignored)
        if issues:
            raise _invalid(source, issues, data, ignored) from None
        try:
            config = _validate(without_keys(data, [key.at for key in ignored]), context)
        except ValidationError as again:
            issues = issues_from_validation_error(again, SentinelConfig, ignored=ignored)
            raise _invalid(source, issues, data, ignored) from None
    config._warnings = [key.issue() for key in dict.fromkeys(ignored)]
    config._warnings.extend(unobservable_trigger_entries(config))
    return config


def _validate(data: object, context: dict[str, Any]) -> SentinelConfig:
    return SentinelConfig.model_validate(data, by_alias=True, by_name=False, context=context)


def _invalid(
    source: str, issues: list[HankIssue], data: object, ignored: list[IgnoredKey]
) -> SentinelConfigValidationError:
    warnings = [key.issue() for key in dict.fromkeys(ignored)]
    return SentinelConfigValidationError(source, with_rule_issues(SentinelConfig, data, issues),
                                         warnings=warnings)


def unobservable_trigger_entries(config: SentinelConfig) -> list[HankIssue]:
    """Warnings for listed event types sentinels never receive (sentinel and connection events)."""
    trigger = config.trigger
    listed: list[tuple[tuple[PathSegment, ...], str]]
    if isinstance(trigger, EventTrigger):
        listed = [(("trigger", "on", i), name) for i, name in enumerate(trigger.on)]
    elif isinstance(trigger, PluginTrigger):
        listed = []
    else:
        listed = [(("trigger", "interestFilter", "on", i), name)
                  for i, name in enumerate(trigger.interest_filter.on)]
        listed += [(("trigger", "pattern", i, "type"), step.type)
                   for i, step in enumerate(trigger.pattern)]
    return [
        HankIssue(format_path(at), (
            f'"{name}" events are never routed to sentinels (only server-state and '
            "agentic-backbone events are), so this entry never matches"))
        for at, name in listed
        if name != WILDCARD and not observable(name)
    ]


# --------------------------------------------------------------------------------------------
# Loading the sentinels of a codon (``sentinel-config-loader.ts``)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedSentinelConfig:
    """A validated config with what its codon entry says about it."""

    config: SentinelConfig
    source: Literal["file", "inline"]
    config_directory: Path
    """Where the config's own file refs resolve from: the file's directory, or the hank
    directory for an inline config."""
    source_path: Path | None = None
    """The config file, for a file config."""
    settings: CodonSentinelSettings | None = None
    kind: type[SentinelKind] | None = None
    """The class that runs it (None until a loader with the installed kinds resolved it)."""
    options: SentinelOptions | None = None
    """The config's ``options``, validated by the kind's ``Options``."""
    trigger_class: type[SentinelTrigger] | None = None
    """A plugin trigger type's class; None for the built-in ``event`` and ``sequence``."""
    trigger_config: TriggerConfig | None = None
    """A plugin trigger's ``trigger`` object, validated by its class's ``Config``: what the
    runtime builds the class with."""

    @property
    def fail_codon_if_not_loaded(self) -> bool:
        return bool(self.settings and self.settings.fail_codon_if_not_loaded)

    @property
    def output_paths(self) -> SentinelOutputPaths | None:
        """Where outputs go, from the codon entry (the config's ``output`` is not used)."""
        return self.settings.output_paths if self.settings else None

    @property
    def report_to_websocket(self) -> SentinelWebsocketReporting:
        """The config's reporting switches with the codon entry's merged over them."""
        own = self.config.report_to_websocket or SentinelWebsocketReporting()
        codon = self.settings.report_to_websocket if self.settings else None
        if codon is None:
            return own
        return own.model_copy(update=codon.model_dump(exclude_none=True, by_alias=False))


@dataclass(frozen=True)
class SentinelLoadError:
    """A sentinel that could not be loaded: ``{ref, error, fatal}`` as in the original."""

    ref: str
    """The config path as written, or ``inline:<id>`` (``inline:unknown`` without an id)."""
    error: str
    """What is wrong and where: the config file or entry, and each problem's JSON path."""
    fatal: bool
    """The entry's ``failCodonIfNotLoaded``: this failure fails the codon."""


@dataclass(frozen=True)
class SentinelLoadResult:
    configs: list[LoadedSentinelConfig]
    errors: list[SentinelLoadError]

    @property
    def fatal_errors(self) -> list[SentinelLoadError]:
        return [error for error in self.errors if error.fatal]

    @property
    def failed_refs(self) -> list[str]:
        """The refs of the fatal failures: ``failureReason.sentinelRefs`` when the codon fails."""
        return [error.ref for error in self.fatal_errors]


class _LoadFailure(Exception):
    """One entry failed; the message is the user-facing error."""


def _plugin_trigger_config(cls: type[SentinelTrigger], trigger: PluginTrigger) -> TriggerConfig:
    """`trigger` validated by the class's ``Config``; the class is built once with it, so its
    constructor's own checks run when the config loads, not first at the codon's start."""
    where = f"trigger ({trigger.type})"
    try:
        config = cls.Config.model_validate(trigger.settings())
    except ValidationError as exc:
        raise _LoadFailure(f"{where}: {_trigger_problems(exc, cls.Config)}") from None
    try:
        cls(config)
    except ValueError as exc:
        raise _LoadFailure(f"{where}: {exc}") from None
    return config


def _raised_text(error: ErrorDetails, _at: Sequence[PathSegment]) -> str:
    return str(error.get("ctx", {}).get("error", error["msg"]))


def _trigger_problems(exc: ValidationError, model: type[TriggerConfig]) -> str:
    """What is wrong with a plugin trigger's object, as its load failure says it.

    A ``ValueError`` the trigger's own validators raise is shown as its text, as one its
    constructor raises always was (the contract asks it to name the key); pydantic's findings
    (an unknown key, a wrong type) are shown at their key.
    """
    raised = {_raised_text(error, ()) for error in exc.errors() if error["type"] == "value_error"}
    issues = issues_from_validation_error(exc, model, overrides={"value_error": _raised_text})
    return "; ".join(issue.message if issue.message in raised else str(issue) for issue in issues)


class SentinelConfigLoader:
    """Loads the sentinel configs of codons, caching file configs by absolute path.

    One loader serves a whole run, so a config file shared by several codons is read and
    validated once.  A failure is never cached: a fixed file loads at the next codon.

    `triggers` and `kinds` are the trigger types and sentinel kinds installed plugins
    registered (``Registry.sentinel_triggers()``/``sentinel_kinds()``); the kernel's own
    (:func:`hankweave.registry.builtin_registry`) are always known and cannot be replaced.
    Besides the schema, a config must then run: its kind's options valid, its plugin trigger's
    object valid for the class's ``Config`` and accepted by its constructor, and the kind's own
    checks passed (for the LLM kind: prompt files readable, templates that compile, a
    structured-output schema in the supported subset).
    """

    def __init__(self, *, triggers: Mapping[str, type[SentinelTrigger]] | None = None,
                 kinds: Mapping[str, type[SentinelKind]] | None = None) -> None:
        from hankweave.registry import builtin_registry

        builtin = builtin_registry()
        self._cache: dict[Path, SentinelConfig] = {}
        self._triggers = {name: cls for name, cls in (triggers or {}).items()
                          if name not in BUILTIN_TRIGGER_TYPES}
        own_kinds = builtin.sentinel_kinds(include_builtin=True)
        self._kinds: dict[str, type[SentinelKind]] = {
            **{name: cls for name, cls in (kinds or {}).items() if name not in own_kinds},
            **own_kinds}

    def load(
        self, entries: Sequence[CodonSentinel], hank_dir: Path, *, codon_id: str | None = None
    ) -> SentinelLoadResult:
        """Load and validate each entry's config; collect every failure instead of raising.

        `hank_dir` is where file refs resolve from; `codon_id` only names the codon in
        messages.  A sentinel id used twice in one codon fails the second entry.
        """
        hank_dir = Path(os.path.abspath(hank_dir))
        configs: list[LoadedSentinelConfig] = []
        errors: list[SentinelLoadError] = []
        seen: set[str] = set()
        for position, entry in enumerate(entries):
            fatal = bool(entry.settings and entry.settings.fail_codon_if_not_loaded)
            try:
                loaded = self._runnable(self._load_entry(entry, position, hank_dir, codon_id))
                if loaded.config.id in seen:
                    where = f" in codon {codon_id}" if codon_id else ""
                    raise _LoadFailure(f"Duplicate sentinel ID '{loaded.config.id}'{where}")
            except (_LoadFailure, ConfigError) as exc:
                errors.append(SentinelLoadError(entry_ref(entry), str(exc), fatal))
                continue
            seen.add(loaded.config.id)
            configs.append(loaded)
        return SentinelLoadResult(configs, errors)

    def clear(self) -> None:
        """Forget cached file configs (their files changed)."""
        self._cache.clear()

    def _parse(self, data: object, source: str) -> SentinelConfig:
        return parse_sentinel_config(data, source, trigger_types=tuple(self._triggers),
                                     kinds=tuple(self._kinds))

    def _runnable(self, loaded: LoadedSentinelConfig) -> LoadedSentinelConfig:
        """Resolve the kind, its options and a plugin trigger; run the kind's own checks."""
        config = loaded.config
        where = str(loaded.source_path) if loaded.source_path else f"inline:{config.id}"
        kind = self._kinds[config.kind_name]
        try:
            options = kind.Options.model_validate(config.options or {})
        except ValidationError as exc:
            issues = issues_from_validation_error(exc, kind.Options)
            raise SentinelConfigValidationError(where, [
                HankIssue(f"options.{issue.path}" if issue.path else "options", issue.message)
                for issue in issues]) from None
        trigger_class, trigger_config = None, None
        if isinstance(config.trigger, PluginTrigger):
            trigger_class = self._triggers[config.trigger.type]
            trigger_config = _plugin_trigger_config(trigger_class, config.trigger)
        try:
            kind.check(config, loaded.config_directory)
        except ValueError as exc:
            raise _LoadFailure(str(exc)) from None
        return dataclasses.replace(loaded, kind=kind, options=options,
                                   trigger_class=trigger_class, trigger_config=trigger_config)

    def _load_entry(
        self, entry: CodonSentinel, position: int, hank_dir: Path, codon_id: str | None
    ) -> LoadedSentinelConfig:
        raw = entry.sentinel_config
        if isinstance(raw, str):
            return self._load_file(raw, hank_dir, entry.settings)
        where = f"sentinels[{position}].sentinelConfig (inline)"
        source = f'codon "{codon_id}" {where}' if codon_id else where
        config = self._parse(raw, source)
        _check_own_refs(config, hank_dir, base="", origin=None, source=source)
        return LoadedSentinelConfig(config, "inline", hank_dir, None, entry.settings)

    def _load_file(
        self, raw: str, hank_dir: Path, settings: CodonSentinelSettings | None
    ) -> LoadedSentinelConfig:
        site = RefSite(("sentinelConfig",), raw, "sentinelConfig", "sentinel-config")
        problem = ref_policy_problem(site, hank_dir)
        if problem is not None:
            raise _LoadFailure(f"sentinelConfig: {problem}")
        path = site.resolve(hank_dir)
        config = self._cache.get(path)
        if config is None:
            data = read_config_json(
                path, what="Sentinel config", invalid=SentinelConfigValidationError)
            config = self._parse(data, str(path))
            _check_own_refs(config, hank_dir, base=posixpath.dirname(site.relative),
                            origin=site.relative, source=str(path))
            self._cache[path] = config
        return LoadedSentinelConfig(config, "file", path.parent, path, settings)


def _check_own_refs(
    config: SentinelConfig, hank_dir: Path, *, base: str, origin: str | None, source: str
) -> None:
    """The config's own file refs must stay inside the hank directory and cross no symlink."""
    issues = []
    for at, raw in config.file_refs():
        site = RefSite(at, raw, str(at[-1]), "sentinel-file", base, origin)
        problem = ref_policy_problem(site, hank_dir)
        if problem is not None:
            issues.append(HankIssue(format_path(at), problem))
    if issues:
        raise SentinelConfigValidationError(source, issues)


def entry_ref(entry: CodonSentinel) -> str:
    """How messages name an entry's config: its path as written, or ``inline:<id>``."""
    raw = entry.sentinel_config
    if isinstance(raw, str):
        return raw
    sentinel_id = raw.get("id")
    return f"inline:{sentinel_id if isinstance(sentinel_id, str) and sentinel_id else 'unknown'}"


def load_sentinel_configs(
    entries: Sequence[CodonSentinel],
    hank_dir: Path,
    *,
    codon_id: str | None = None,
    loader: SentinelConfigLoader | None = None,
) -> SentinelLoadResult:
    """Load the configs of one codon's sentinel entries (see :meth:`SentinelConfigLoader.load`).

    Pass the run's `loader` to share its cache; without one, nothing is cached.
    """
    return (loader or SentinelConfigLoader()).load(entries, hank_dir, codon_id=codon_id)


__all__ = [
    "BUILTIN_TRIGGER_TYPES",
    "DEFAULT_JOIN_STRING",
    "DEFAULT_KIND",
    "Condition",
    "ContainsCondition",
    "Conversational",
    "CountExecution",
    "DebounceExecution",
    "EqualityCondition",
    "ErrorHandling",
    "EventTrigger",
    "Execution",
    "ImmediateExecution",
    "InterestFilter",
    "LlmParams",
    "LoadedSentinelConfig",
    "MatchesCondition",
    "MaxTokensTrimming",
    "MaxTurnsTrimming",
    "MembershipCondition",
    "NumericCondition",
    "PatternStep",
    "PluginTrigger",
    "ResolvedLlmParams",
    "SentinelConfig",
    "SentinelConfigLoader",
    "SentinelConfigValidationError",
    "SentinelLoadError",
    "SentinelLoadResult",
    "SentinelOutput",
    "SequenceOptions",
    "SequenceTrigger",
    "StructuredOutput",
    "TimeWindowExecution",
    "Trigger",
    "TrimmingStrategy",
    "decode_join_escapes",
    "entry_ref",
    "load_sentinel_configs",
    "parse_sentinel_config",
    "unobservable_trigger_entries",
]

