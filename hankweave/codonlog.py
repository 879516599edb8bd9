"""Codon logs: one JSONL file per codon attempt, in the Claude Agent SDK message shape.

Every harness yields records of this shape and the runtime writes them through
:class:`CodonLogWriter`; everything the runtime learns about a session (its id, the assistant
messages, their usage and cost, the result, errors, a context overflow) comes from
:class:`CodonLogParser`, live while the codon runs (:meth:`CodonLogParser.feed`) and after the
fact from the file (:func:`summarize_log`).  Replay reads the same files (:func:`read_log`).

The file is ``.hankweave/runs/<runId>/<codonId>-claude.log`` with ``#`` in the codon id replaced
by ``-`` (:func:`hankweave.execution.layout.codon_log_name`), whatever the harness.  One line is
one record; the writer stamps each with an ISO ``timestamp``.  Record kinds, one pydantic model
each (:data:`LogRecord`, a union discriminated by ``type`` and, for ``system``, ``subtype``):

* ``system``: :class:`InitRecord` (``init``, carries ``session_id``),
  :class:`CompactBoundaryRecord` (``compact_boundary``, a context compaction),
  :class:`HookResponseRecord`, :class:`StatusRecord`, and :class:`SystemRecord` for any other
  subtype;
* :class:`AssistantRecord`: ``message.content`` blocks (text, thinking, tool_use, or a plain
  string) and ``message.usage``;
* :class:`UserRecord`: ``tool_result`` blocks;
* :class:`ResultRecord`: the final summary (``subtype``, ``is_error``, ``total_cost_usd``,
  ``usage``, ``num_turns``, ``duration_ms``, ``result``).

Models keep every field they do not declare (``extra="allow"``) and write keys back in the
order they were read, so a record survives a parse and dump unchanged.  A JSON object that is
not one of these (an unknown ``type``, or a known type with the wrong shape) becomes an
:class:`UnknownRecord`: kept, counted and reported, never an exception.  ``docs/codon-log.md``
describes the format with examples.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    TypeAdapter,
    ValidationError,
    model_serializer,
    model_validator,
)

from hankweave.faults import disk_write
from hankweave.fsutil import last_line_start, open_private, private_dir, utc_now_iso, write_fully
from hankweave.state.types import TokenUsage

if TYPE_CHECKING:
    from hankweave.models import ModelEntry

__all__ = [
    "SYNTHETIC_MODEL",
    "SYNTHETIC_TERMINATED_TEXT",
    "SYNTHETIC_TIMEOUT_TEXT",
    "TURN_LIMIT_SUBTYPE",
    "AnyRecord",
    "AssistantMessage",
    "AssistantRecord",
    "CodonLogParser",
    "CodonLogWriter",
    "CompactBoundaryRecord",
    "CompactMetadata",
    "ContentBlock",
    "ContextSignal",
    "HookResponseRecord",
    "InitRecord",
    "LogLine",
    "LogModel",
    "LogProblem",
    "LogReadReport",
    "LogRecord",
    "LogSummary",
    "MessageFacts",
    "OtherBlock",
    "ParsedRecord",
    "Price",
    "RecordKind",
    "ResultRecord",
    "StatusRecord",
    "SystemRecord",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "UnknownRecord",
    "Usage",
    "UserMessage",
    "UserRecord",
    "assistant_record",
    "assistant_text",
    "assistant_tool_use",
    "catalogue_price",
    "compact_boundary_record",
    "error_result",
    "final_cost_of",
    "init_record",
    "new_message_id",
    "new_tool_use_id",
    "parse_record",
    "read_log",
    "result_record",
    "summarize_log",
    "text_block",
    "thinking_block",
    "tool_result_record",
    "tool_use_block",
    "usage_from",
    "usage_json",
]

log = logging.getLogger(__name__)

SYNTHETIC_MODEL = "<synthetic>"
"""``message.model`` of an assistant message the Claude CLI made up itself (an API error)."""
SYNTHETIC_TIMEOUT_TEXT = "API Error: Request timed out."
"""The text of the CLI's synthetic message for a request timeout: the codon fails, retriable."""
SYNTHETIC_TERMINATED_TEXT = "API Error: terminated"
"""The text of the CLI's synthetic message when the provider cut the stream off."""

# "API Error: Claude's response exceeded the 32000 output token maximum. ..."
_OUTPUT_MAX = re.compile(r"exceeded the .{0,40}output token maximum", re.IGNORECASE)
# Provider texts for an input larger than the context window: Anthropic ("prompt is too long",
# "input length and `max_tokens` exceed context limit"), OpenAI (the code
# context_length_exceeded, "maximum context length"), Google ("input token count ... exceeds
# the maximum"), litellm's ContextWindowExceededError.
_INPUT_OVERFLOW = re.compile(
    r"prompt is too long|context_length_exceeded|maximum context length"
    r"|exceeds? (?:the )?context (?:limit|window)|context ?window ?exceeded"
    r"|input token count.{0,40}exceeds the maximum",
    re.IGNORECASE,
)

Number: TypeAlias = int | float
"""A JSON number.  The union keeps an ``int`` an ``int`` and a float a float, so a record is
written back exactly as it was read."""

Price: TypeAlias = Callable[[TokenUsage], float | None]
"""The USD price of some token usage, or None when the price is unknown."""

RecordKind = Literal["init", "system", "compact", "assistant", "user", "result", "unknown"]

ContextSignal = Literal["api-terminated", "output-token-maximum", "input-overflow",
                        "auto-compaction"]
"""Why a session is taken to have exceeded its context (reference ``isContextExceeded``):

* ``api-terminated``: a synthetic assistant message whose only block is ``API Error: terminated``;
* ``output-token-maximum``: "exceeded the … output token maximum", in a synthetic (or
  ``API Error:``) assistant message or in an error result;
* ``input-overflow``: an error result with the provider's prompt-too-long text;
* ``auto-compaction``: a ``system``/``compact_boundary`` record with trigger ``auto``.
"""


# ----- models -----


class LogModel(BaseModel):
    """Base of every codon-log model: unknown fields kept, keys written in the order read."""

    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        protected_namespaces=(),
        # Built on first use, so importing this module stays cheap for commands that never
        # read a log.
        defer_build=True,
    )

    _key_order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_key_order(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        if isinstance(data, Mapping) and isinstance(model, LogModel):
            model._key_order = tuple(data)
        return model

    @model_serializer(mode="wrap")
    def _in_key_order(self, handler: Any) -> Any:
        # Declared fields would otherwise come first and extras last; keeping the order read
        # makes a parse-and-dump give back the very line the harness wrote.
        out = handler(self)
        if not self._key_order or not isinstance(out, dict):
            return out
        ordered = {key: out[key] for key in self._key_order if key in out}
        ordered.update((key, value) for key, value in out.items() if key not in ordered)
        return ordered

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON data: the fields it was given (or set), wire names, extras kept."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _tag_of(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)


class Usage(LogModel):
    """``message.usage`` or ``result.usage``: token counts (other fields, such as the
    ``cache_creation`` breakdown or ``service_tier``, are kept as extras)."""

    input_tokens: Number | None = None
    output_tokens: Number | None = None
    cache_creation_input_tokens: Number | None = None
    cache_read_input_tokens: Number | None = None

    def tokens(self) -> TokenUsage | None:
        """The counts as :class:`TokenUsage` (cache tokens included), or None if it has none."""
        return usage_from(self.model_dump(exclude_unset=True))


class TextBlock(LogModel):
    type: Literal["text"]
    text: str = ""


class ThinkingBlock(LogModel):
    type: Literal["thinking"]
    thinking: str = ""


class ToolUseBlock(LogModel):
    type: Literal["tool_use"]
    id: str
    """``toolu_…`` (Claude) or ``call_…`` (OpenAI-style ids the pi harness keeps)."""
    name: str
    input: Any = None


class OtherBlock(LogModel):
    """Any other content block (``image``, ``redacted_thinking``, ``server_tool_use``, …)."""

    type: str


def _block_tag(value: Any) -> str | None:
    kind = _tag_of(value, "type")
    if not isinstance(kind, str):
        return None
    return kind if kind in ("text", "thinking", "tool_use", "tool_result") else "other"


def _item_tag(value: Any) -> str | None:
    tag = _block_tag(value)
    return tag if tag in (None, "text") else "other"


ToolResultItem = Annotated[
    Annotated[TextBlock, Tag("text")] | Annotated[OtherBlock, Tag("other")],
    Discriminator(_item_tag),
]
"""One item of a tool result's list content: text, or anything else (an image)."""


class ToolResultBlock(LogModel):
    """A tool's result, in a ``user`` message.  ``content`` is a string, a list of content items
    (text items carry the text), or an object (the pi harness writes ``{is_error, error}``)."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultItem] | dict[str, Any] | None = None
    is_error: bool | None = None

    @property
    def text(self) -> str:
        """The result as text: a string as is, list text items joined by ``\\n``, an object
        pretty-printed as JSON (the original runtime's rule)."""
        content = self.content
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(item.text for item in content if isinstance(item, TextBlock))
        if isinstance(content, dict):
            return json.dumps(content, indent=2)
        return ""

    @property
    def failed(self) -> bool:
        """True when the block or its object content says ``is_error``."""
        return bool(self.is_error) or (
            isinstance(self.content, dict) and bool(self.content.get("is_error")))


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(_block_tag),
]
"""One block of a message's content, chosen by its ``type``."""


def _as_blocks(content: str | list[Any] | None) -> list[Any]:
    if isinstance(content, str):
        return [TextBlock(type="text", text=content)]
    return list(content or [])


class AssistantMessage(LogModel):
    """``assistant.message``: the provider's message (Anthropic Messages API shape)."""

    id: str | None = None
    role: str | None = None
    model: str | None = None
    content: str | list[ContentBlock] | None = None
    usage: Usage | None = None
    stop_reason: str | None = None

    @property
    def blocks(self) -> list[TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock
                            | OtherBlock]:
        """The content as blocks; a plain string is one text block."""
        return _as_blocks(self.content)

    @property
    def texts(self) -> list[str]:
        return [block.text for block in self.blocks if isinstance(block, TextBlock)]

    @property
    def synthetic(self) -> bool:
        """Made up by the Claude CLI (an API error it reports as a message), not the model."""
        return self.model == SYNTHETIC_MODEL


class UserMessage(LogModel):
    """``user.message``: tool results (or, rarely, plain user text)."""

    role: str | None = None
    content: str | list[ContentBlock] | None = None

    @property
    def blocks(self) -> list[TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock
                            | OtherBlock]:
        return _as_blocks(self.content)

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        return [block for block in self.blocks if isinstance(block, ToolResultBlock)]


class _Record(LogModel):
    timestamp: str | None = None
    """ISO time the runtime wrote the line; replay paces by it."""
    session_id: str | None = None


class SystemRecord(_Record):
    """A ``system`` record whose subtype has no model of its own."""

    type: Literal["system"]
    subtype: str | None = None


class InitRecord(SystemRecord):
    """``system``/``init``: the session is established (the codon moves to ``running``)."""

    subtype: Literal["init"]
    session_id: str = Field(min_length=1)
    cwd: str | None = None
    tools: list[str] | None = None
    mcp_servers: list[Any] | None = None
    model: str | None = None
    permission_mode: str | None = Field(default=None, alias="permissionMode")
    api_key_source: str | None = Field(default=None, alias="apiKeySource")


class CompactMetadata(LogModel):
    trigger: str | None = None
    """``auto`` (the context filled up) or ``manual``."""
    pre_tokens: Number | None = None
    post_tokens: Number | None = None


class CompactBoundaryRecord(SystemRecord):
    """``system``/``compact_boundary``: the conversation was compacted."""

    subtype: Literal["compact_boundary"]
    compact_metadata: CompactMetadata | None = None

    @property
    def automatic(self) -> bool:
        """An automatic compaction: the context was exceeded."""
        return self.compact_metadata is not None and self.compact_metadata.trigger == "auto"


class HookResponseRecord(SystemRecord):
    """``system``/``hook_response``: output of a Claude Code hook."""

    subtype: Literal["hook_response"]
    hook_name: str | None = None
    hook_event: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    exit_code: Number | None = None


class StatusRecord(SystemRecord):
    """``system``/``status``: a status change of the agent (e.g. ``compacting``)."""

    subtype: Literal["status"]
    status: str | None = None


class AssistantRecord(_Record):
    type: Literal["assistant"]
    message: AssistantMessage
    parent_tool_use_id: str | None = None


class UserRecord(_Record):
    type: Literal["user"]
    message: UserMessage
    parent_tool_use_id: str | None = None


class ResultRecord(_Record):
    """The terminal summary of one harness pass (a session, or one extension of it)."""

    type: Literal["result"]
    subtype: str
    """``success`` or an error subtype (``error``, ``error_max_turns``, …)."""
    is_error: bool = False
    duration_ms: Number | None = None
    duration_api_ms: Number | None = None
    num_turns: Number | None = None
    result: str | None = None
    """The final text; ``""`` for SDK errors, the error text for most others."""
    total_cost_usd: Number | None = None
    usage: Usage | None = None
    model_usage: dict[str, Any] | None = Field(default=None, alias="modelUsage")
    errors: list[Any] | None = None

    @property
    def succeeded(self) -> bool:
        """Subtype ``success`` and not ``is_error``."""
        return self.subtype == "success" and not self.is_error

    @property
    def disguised_error(self) -> bool:
        """Subtype ``success`` with ``is_error: true``: an error, though it sets a final cost."""
        return self.subtype == "success" and self.is_error

    @property
    def error_text(self) -> str | None:
        """The error text of an error (or disguised-error) result; None for a success."""
        if self.succeeded:
            return None
        # ``result`` holds the text; some writers put it in ``error`` instead (kept as extra).
        for value in (self.result, (self.model_extra or {}).get("error")):
            if isinstance(value, str) and value.strip():
                return value
        if self.errors:
            return "; ".join(str(error) for error in self.errors)
        return f"error result ({self.subtype}) without a message"

    @property
    def final_cost(self) -> float | None:
        return final_cost_of(self)


def _record_tag(value: Any) -> str | None:
    kind = _tag_of(value, "type")
    if kind == "system":
        subtype = _tag_of(value, "subtype")
        return f"system/{subtype}" if subtype in _SYSTEM_SUBTYPES else "system"
    return kind if kind in _RECORD_TYPES else None


_SYSTEM_SUBTYPES = ("init", "compact_boundary", "hook_response", "status")
_RECORD_TYPES = ("system", "assistant", "user", "result")

LogRecord = Annotated[
    Annotated[InitRecord, Tag("system/init")]
    | Annotated[CompactBoundaryRecord, Tag("system/compact_boundary")]
    | Annotated[HookResponseRecord, Tag("system/hook_response")]
    | Annotated[StatusRecord, Tag("system/status")]
    | Annotated[SystemRecord, Tag("system")]
    | Annotated[AssistantRecord, Tag("assistant")]
    | Annotated[UserRecord, Tag("user")]
    | Annotated[ResultRecord, Tag("result")],
    Discriminator(_record_tag),
]
"""One codon-log line, chosen by ``type`` (and ``subtype`` for ``system``)."""

AnyRecord: TypeAlias = (InitRecord | CompactBoundaryRecord | HookResponseRecord | StatusRecord
                        | SystemRecord | AssistantRecord | UserRecord | ResultRecord)


@dataclass(frozen=True)
class UnknownRecord:
    """A JSON object that is not a codon-log record this module knows: kept as read.

    Either its ``type`` is unknown (a newer SDK, another tool) or it has a known type but not
    its shape (``invalid``).  Replay warns and skips it; the parser counts it.
    """

    record: dict[str, Any]
    reason: str

    @property
    def type(self) -> Any:
        return self.record.get("type")

    @property
    def invalid(self) -> bool:
        """A known type whose fields do not fit (rather than an unknown type)."""
        return self.type in _RECORD_TYPES

    def to_dict(self) -> dict[str, Any]:
        return dict(self.record)


@functools.cache
def _record_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(LogRecord)


def parse_record(obj: Mapping[str, Any]) -> AnyRecord | UnknownRecord:
    """The typed record for one JSON object; an :class:`UnknownRecord` (never an exception)
    when its type is unknown or its fields do not fit the type."""
    data = dict(obj)
    kind = data.get("type")
    if kind not in _RECORD_TYPES:
        return UnknownRecord(data, f"unknown record type {kind!r}")
    try:
        return _record_adapter().validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'][1:]) or '<record>'}: {error['msg']}"
            for error in exc.errors()[:3])
        return UnknownRecord(data, f"invalid {kind!r} record: {problems}")


# ----- building records (what a harness yields) -----
#
# Harnesses build their records with these rather than by hand, so every harness writes the
# shapes the parser, replay and the original's readers expect.  Each returns the record as JSON
# data (a :data:`LogLine`), typed by its parameters; the runtime writes it (stamped with a
# ``timestamp``) and validates it once, when it parses it.

LogLine: TypeAlias = dict[str, Any]
"""One codon-log record as JSON data, as a builder makes it and the log holds it."""


def new_message_id() -> str:
    """A provider-style assistant message id (``msg_…``)."""
    return f"msg_{secrets.token_hex(12)}"


def new_tool_use_id() -> str:
    """A provider-style tool-use id (``toolu_…``)."""
    return f"toolu_{secrets.token_hex(12)}"


def usage_json(tokens: TokenUsage) -> dict[str, int]:
    """``usage`` in the SDK's shape for a :class:`TokenUsage`."""
    return {"input_tokens": tokens.input_tokens, "output_tokens": tokens.output_tokens,
            "cache_creation_input_tokens": tokens.cache_creation_tokens,
            "cache_read_input_tokens": tokens.cache_read_tokens}


def init_record(session_id: str, *, cwd: str | os.PathLike[str] | None = None,
                tools: Sequence[str] = (), model: str | None = None,
                permission_mode: str = "bypassPermissions", api_key_source: str = "none",
                **extra: Any) -> LogLine:
    """``system``/``init``: the session is established (the codon moves to ``running``)."""
    if not session_id:
        raise ValueError("init_record: the session id cannot be empty")
    record: LogLine = {"type": "system", "subtype": "init", "session_id": session_id}
    if cwd is not None:
        record["cwd"] = os.fspath(cwd)
    record.update(tools=list(tools), mcp_servers=[])
    if model is not None:
        record["model"] = model
    record.update(permissionMode=permission_mode, apiKeySource=api_key_source, **extra)
    return record


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def thinking_block(thinking: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": thinking}


def tool_use_block(name: str, tool_input: Any, *, tool_use_id: str | None = None
                   ) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id or new_tool_use_id(), "name": name,
            "input": tool_input}


def assistant_record(content: Sequence[Mapping[str, Any]], *, model: str | None = None,
                     usage: TokenUsage | None = None, message_id: str | None = None,
                     stop_reason: str | None = None, session_id: str | None = None) -> LogLine:
    """An ``assistant`` message with these content blocks (made with :func:`text_block`,
    :func:`thinking_block`, :func:`tool_use_block`); ``usage`` None means the provider
    reported none (the parser then counts the message's cost as unknown, not zero)."""
    message: dict[str, Any] = {"id": message_id or new_message_id(), "type": "message",
                               "role": "assistant"}
    if model is not None:
        message["model"] = model
    message["content"] = [dict(block) for block in content]
    if stop_reason is not None:
        message["stop_reason"] = stop_reason
    if usage is not None:
        message["usage"] = usage_json(usage)
    record: LogLine = {"type": "assistant", "message": message}
    if session_id is not None:
        record["session_id"] = session_id
    return record


def assistant_text(text: str, **fields: Any) -> LogLine:
    """An ``assistant`` message of one text block (``stop_reason`` ``end_turn``)."""
    fields.setdefault("stop_reason", "end_turn")
    return assistant_record([text_block(text)], **fields)


def assistant_tool_use(name: str, tool_input: Any, *, tool_use_id: str | None = None,
                       **fields: Any) -> LogLine:
    """An ``assistant`` message of one ``tool_use`` block (``stop_reason`` ``tool_use``)."""
    fields.setdefault("stop_reason", "tool_use")
    return assistant_record([tool_use_block(name, tool_input, tool_use_id=tool_use_id)],
                            **fields)


def tool_result_record(tool_use_id: str, content: str | Sequence[Mapping[str, Any]], *,
                       is_error: bool = False) -> LogLine:
    """A ``user`` message carrying one tool's result (text, or a list of content items)."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id,
                             "content": content if isinstance(content, str)
                             else [dict(item) for item in content]}
    if is_error:
        block["is_error"] = True
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def compact_boundary_record(session_id: str, *, trigger: Literal["auto", "manual"] = "auto",
                            pre_tokens: int | None = None) -> LogLine:
    """``system``/``compact_boundary``: the conversation was compacted (``auto``: the context
    filled up, which counts as context exceeded)."""
    metadata: dict[str, Any] = {"trigger": trigger}
    if pre_tokens is not None:
        metadata["pre_tokens"] = pre_tokens
    return {"type": "system", "subtype": "compact_boundary", "session_id": session_id,
            "compact_metadata": metadata}


TURN_LIMIT_SUBTYPE = "error_max_turns"
"""The ``result`` subtype of a pass that ended at the agent's turn limit (the Claude CLI's
``--max-turns``; a harness with a turn limit of its own writes the same)."""


def result_record(*, session_id: str | None = None, success: bool = True, text: str = "",
                  usage: TokenUsage | None = None, total_cost_usd: float | None = None,
                  num_turns: int = 0, duration_ms: int = 0, is_error: bool | None = None,
                  subtype: str | None = None, **extra: Any) -> LogLine:
    """The ``result`` that ends a pass.

    A success has subtype ``success``; a failure subtype ``error`` (or ``subtype``) and
    ``is_error``, with ``text`` the error message.  ``is_error=True`` on a success makes the
    "disguised error" some SDK paths write.  ``total_cost_usd`` None means the harness does not
    know the cost (the runtime then prices ``usage`` itself).
    """
    record: LogLine = {
        "type": "result", "subtype": subtype or ("success" if success else "error"),
        "is_error": (not success) if is_error is None else is_error,
        "duration_ms": duration_ms, "duration_api_ms": duration_ms, "num_turns": num_turns,
        "result": text}
    if session_id is not None:
        record["session_id"] = session_id
    if total_cost_usd is not None:
        record["total_cost_usd"] = total_cost_usd
    if usage is not None:
        record["usage"] = usage_json(usage)
    record.update(extra)
    return record


def error_result(text: str, *, session_id: str | None = None, **fields: Any) -> LogLine:
    """An error ``result`` carrying ``text`` (what the failure is classified from)."""
    return result_record(session_id=session_id, success=False, text=text, **fields)


# ----- usage and cost -----


def usage_from(raw: Mapping[str, Any] | Usage | None) -> TokenUsage | None:
    """The token usage of an SDK ``usage`` object, or None when the record carries none.

    A usage object without any of the four counts is no usage: it is reported as unknown, not
    as zero tokens.  A missing count next to present ones is 0 (providers omit cache counts).
    """
    if isinstance(raw, Usage):
        raw = raw.model_dump(exclude_unset=True)
    if not isinstance(raw, Mapping):
        return None
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
            "cache_read_input_tokens")
    counts = {key: raw.get(key) for key in keys}
    numbers = {key: int(value) for key, value in counts.items()
               if isinstance(value, int | float) and not isinstance(value, bool)}
    if not numbers:
        return None
    return TokenUsage(
        input_tokens=numbers.get("input_tokens", 0),
        output_tokens=numbers.get("output_tokens", 0),
        cache_creation_tokens=numbers.get("cache_creation_input_tokens", 0),
        cache_read_tokens=numbers.get("cache_read_input_tokens", 0),
    )


def final_cost_of(record: Mapping[str, Any] | ResultRecord) -> float | None:
    """A result's ``total_cost_usd``, or None when it has none.

    Whether it counts is the caller's rule: only success results (disguised errors included)
    set a final cost; an error result's ``total_cost_usd`` is ignored.
    """
    value = record.total_cost_usd if isinstance(record, ResultRecord) else record.get(
        "total_cost_usd")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def catalogue_price(model: ModelEntry) -> Price:
    """The :data:`Price` of a catalogue model: its prices per million tokens times the usage,
    cache reads and writes included; None for every usage when the catalogue has no price."""
    cost = model.cost

    def price(usage: TokenUsage) -> float | None:
        if cost is None:
            return None
        return (usage.input_tokens * cost.input + usage.output_tokens * cost.output
                + usage.cache_read_tokens * cost.cache_read
                + usage.cache_creation_tokens * cost.cache_write) / 1_000_000

    return price


# ----- the parser -----


@dataclass(frozen=True)
class ParsedRecord:
    """What one log record means to the runtime."""

    kind: RecordKind
    record: dict[str, Any]
    """The record as JSON data (what the log holds)."""
    typed: AnyRecord | UnknownRecord
    """The record's model."""
    session_id: str | None = None
    usage: TokenUsage | None = None
    """Assistant or result usage; None when the record carries none (unknown, not zero)."""
    cost: float | None = None
    """An assistant message's price (its usage priced by the parser's price), None when unknown."""
    blocks: tuple[dict[str, Any], ...] = ()
    """Assistant or user content blocks as JSON data (a plain string is one text block)."""
    synthetic_timeout: bool = False
    context_signal: ContextSignal | None = None
    error_text: str | None = None
    """An error (or disguised-error) result's text."""
    new_message: bool = False
    """An assistant record that starts a message (its ``message.id`` not seen before, or no
    id); later frames of the same message (the Claude CLI writes one per content block) are
    not new."""
    usage_delta: TokenUsage | None = None
    """What an assistant record adds to its message's usage (a later frame carries the usage
    so far, so only its growth counts); None when nothing is known."""
    cost_delta: float | None = None
    """The price of :attr:`usage_delta`; None when unknown."""
    ignored_result: bool = False
    """A result after the pass's success result (the success stands; the SDK error after it
    is only reported)."""

    @property
    def context_exceeded(self) -> bool:
        return self.context_signal is not None

    @property
    def output_tokens_exceeded(self) -> bool:
        return self.context_signal == "output-token-maximum"


@dataclass(frozen=True)
class MessageFacts:
    """One assistant message as the parser counted it."""

    index: int
    """0 for the session's first assistant message."""
    message_id: str | None
    model: str | None
    usage: TokenUsage | None
    """None when the message carried no usage."""
    cost: float | None
    """None when its usage or its price is unknown."""
    timestamp: str | None


@dataclass(frozen=True)
class LogSummary:
    """A snapshot of what a parser derived (comparable: live and after the fact agree)."""

    session_id: str | None
    records: int
    assistant_messages: int
    messages_without_usage: int
    usage_complete: bool
    tokens: TokenUsage
    tokens_complete: bool
    cost: float | None
    cost_complete: bool
    result_received: bool
    success: bool
    error_text: str | None
    synthetic_timeout: bool
    context_exceeded: bool
    output_tokens_exceeded: bool
    context_signals: tuple[ContextSignal, ...]
    unknown_records: int


class CodonLogParser:
    """Derives a session's facts from its records, one record at a time.

    Feed it every record in order, live (:meth:`feed` per harness record) or from a file
    (:func:`summarize_log`); both give the same facts.

    Cost and tokens follow the runtime's state rules: each assistant message with usage adds
    its usage (and ``price(usage)``).  A message is one ``message.id``: the Claude CLI writes
    one ``assistant`` frame per content block, each with the message's usage so far, so a
    later frame adds only what its usage grew by, and the message is counted once.  A result
    with subtype ``success`` (a disguised error included) and usage replaces the totals with
    its own, its ``total_cost_usd`` being the authoritative cost (else the price of its usage,
    else the running sum).  Error results never set a final cost, and a result after the
    pass's success changes nothing (:attr:`ParsedRecord.ignored_result`).  Missing usage is
    never taken as zero: it is counted (:attr:`messages_without_usage`) and leaves
    :attr:`total_cost` None or incomplete.
    """

    def __init__(self, *, price: Price | None = None) -> None:
        self.price = price
        """Prices a message's usage; None (no prices known) leaves costs unknown unless a
        success result states one."""
        self.session_id: str | None = None
        """From the first ``init`` record: the session is established."""
        self.records = 0
        self.assistant_messages = 0
        self.messages: list[MessageFacts] = []
        self.usage_total = TokenUsage()
        """The sum of every assistant message's usage (results not counted)."""
        self.messages_without_usage = 0
        self.result: ResultRecord | None = None
        """The latest result of the current pass (:meth:`begin_extension` clears it)."""
        self.results = 0
        self.error_texts: list[str] = []
        """The text of every error (and disguised-error) result, in order."""
        self.synthetic_timeout = False
        self.context_signals: list[ContextSignal] = []
        """Each context-exceeded pattern seen, once, in the order first seen."""
        self.unknown: list[UnknownRecord] = []
        self._cost: float | None = None
        # Messages since the last authoritative total whose cost (or usage) is unknown.
        self._cost_gaps: set[int] = set()
        self._tokens = TokenUsage()
        self._token_gaps: set[int] = set()
        self._by_id: dict[str, int] = {}  # message id -> index in :attr:`messages`
        self._warned_types: set[str] = set()

    def feed(self, record: Mapping[str, Any] | LogModel | UnknownRecord, *,
             raw: dict[str, Any] | None = None) -> ParsedRecord:
        """Take the next record (JSON data or a model) into account and say what it means.

        ``raw`` is the record as JSON data when the caller has it already (the line the writer
        wrote for a model), so a typed record is neither dumped nor validated again.
        """
        if isinstance(record, UnknownRecord):
            typed: AnyRecord | UnknownRecord = record
            raw = raw if raw is not None else record.to_dict()
        elif isinstance(record, AnyRecord):
            if raw is not None and record.timestamp is None:
                record.timestamp = raw.get("timestamp")  # as the writer stamped the line
            raw, typed = (raw if raw is not None else record.to_dict()), record
        elif isinstance(record, LogModel):
            raw = record.to_dict()
            typed = parse_record(raw)
        else:
            raw = dict(record)
            typed = parse_record(raw)
        self.records += 1
        if isinstance(typed, InitRecord):
            if self.session_id is None:
                self.session_id = typed.session_id
            return ParsedRecord("init", raw, typed, session_id=typed.session_id)
        if isinstance(typed, CompactBoundaryRecord):
            signal: ContextSignal | None = "auto-compaction" if typed.automatic else None
            self._signal(signal)
            return ParsedRecord("compact", raw, typed, session_id=typed.session_id,
                                context_signal=signal)
        if isinstance(typed, SystemRecord):
            return ParsedRecord("system", raw, typed, session_id=typed.session_id)
        if isinstance(typed, AssistantRecord):
            return self._assistant(typed, raw)
        if isinstance(typed, UserRecord):
            return ParsedRecord("user", raw, typed, session_id=typed.session_id,
                                blocks=_raw_blocks(raw))
        if isinstance(typed, ResultRecord):
            return self._result(typed, raw)
        return self._unknown(typed, raw)

    def begin_extension(self) -> None:
        """Start a new pass of the same session (an extension): the previous pass's result no
        longer decides success or failure.  Counts, costs and signals carry on."""
        self.result = None

    def _signal(self, signal: ContextSignal | None) -> None:
        if signal is not None and signal not in self.context_signals:
            self.context_signals.append(signal)

    def _assistant(self, typed: AssistantRecord, raw: dict[str, Any]) -> ParsedRecord:
        message = typed.message
        texts = message.texts
        timeout = SYNTHETIC_TIMEOUT_TEXT in texts
        signal: ContextSignal | None = None
        if message.synthetic and len(message.blocks) == 1 and texts == [
                SYNTHETIC_TERMINATED_TEXT]:
            signal = "api-terminated"
        elif any(_OUTPUT_MAX.search(text) and (message.synthetic or text.startswith("API Error"))
                 for text in texts):
            # Only the CLI's own error message counts: an agent may well write these words.
            signal = "output-token-maximum"
        usage = message.usage.tokens() if message.usage is not None else None
        cost = self.price(usage) if usage is not None and self.price is not None else None
        index = self._by_id.get(message.id) if message.id else None
        if index is None:
            new, usage_delta, cost_delta = True, usage, cost
            self._new_message(typed, usage, cost)
        else:
            new = False
            usage_delta, cost_delta = self._grow_message(index, usage)
        if usage_delta is not None:
            self.usage_total = self.usage_total + usage_delta
            self._tokens = self._tokens + usage_delta
        if cost_delta is not None:
            self._cost = (self._cost or 0.0) + cost_delta
        self.synthetic_timeout = self.synthetic_timeout or timeout
        self._signal(signal)
        return ParsedRecord("assistant", raw, typed, session_id=typed.session_id, usage=usage,
                            cost=cost, blocks=_raw_blocks(raw), synthetic_timeout=timeout,
                            context_signal=signal, new_message=new, usage_delta=usage_delta,
                            cost_delta=cost_delta)

    def _new_message(self, typed: AssistantRecord, usage: TokenUsage | None,
                     cost: float | None) -> None:
        message, index = typed.message, len(self.messages)
        self.messages.append(MessageFacts(
            index=self.assistant_messages, message_id=message.id, model=message.model,
            usage=usage, cost=cost, timestamp=typed.timestamp))
        if message.id:
            self._by_id[message.id] = index
        self.assistant_messages += 1
        if usage is None:
            self.messages_without_usage += 1
            self._token_gaps.add(index)
        if cost is None:
            self._cost_gaps.add(index)

    def _grow_message(self, index: int, usage: TokenUsage | None
                      ) -> tuple[TokenUsage | None, float | None]:
        """Another frame of message ``index``: its usage is the largest seen (the CLI repeats
        the message's usage so far on every frame); return what that adds, and its price."""
        facts = self.messages[index]
        if usage is None:
            return None, None
        before = facts.usage
        grown = usage if before is None else _largest(before, usage)
        cost = self.price(grown) if self.price is not None else None
        self.messages[index] = dataclasses.replace(facts, usage=grown, cost=cost)
        if before is None:
            self.messages_without_usage -= 1
            self._token_gaps.discard(index)
        delta = grown if before is None else _difference(grown, before)
        if cost is None:
            return delta, None
        self._cost_gaps.discard(index)
        return delta, cost - (facts.cost or 0.0)

    def _result(self, typed: ResultRecord, raw: dict[str, Any]) -> ParsedRecord:
        self.results += 1
        if self.result is not None and self.result.succeeded:
            # The SDK can write an error result after the session's success (for example
            # "only prompt commands are supported in streaming mode"): the success stands.
            text = typed.error_text
            if text is not None:
                self.error_texts.append(text)
            return ParsedRecord("result", raw, typed, session_id=typed.session_id,
                                error_text=text, ignored_result=True)
        self.result = typed
        text = typed.error_text
        signal: ContextSignal | None = None
        if text is not None:
            self.error_texts.append(text)
            if _OUTPUT_MAX.search(text):
                signal = "output-token-maximum"
            elif _INPUT_OVERFLOW.search(text):
                signal = "input-overflow"
        self._signal(signal)
        usage = typed.usage.tokens() if typed.usage is not None else None
        if typed.subtype == "success":
            self._settle(typed, usage)
        return ParsedRecord("result", raw, typed, session_id=typed.session_id, usage=usage,
                            context_signal=signal, error_text=text)

    def _settle(self, result: ResultRecord, usage: TokenUsage | None) -> None:
        # The result's totals replace the running sums (as CodonFinalCostSet does in state); a
        # result with a cost but no usage (the original's own fixtures) settles the cost only.
        if usage is not None:
            self._tokens = usage
            self._token_gaps.clear()
        final = result.final_cost
        if final is None and self.price is not None and usage is not None:
            final = self.price(usage)
        if final is not None:
            self._cost = final
            self._cost_gaps.clear()

    def _unknown(self, typed: UnknownRecord, raw: dict[str, Any]) -> ParsedRecord:
        self.unknown.append(typed)
        key = str(typed.type)
        if key not in self._warned_types:
            self._warned_types.add(key)
            log.warning("codon log: skipped a record: %s", typed.reason)
        return ParsedRecord("unknown", raw, typed)

    # -- derived facts --

    @property
    def result_received(self) -> bool:
        """False for a truncated log (or a pass still running): no ``result`` yet."""
        return self.result is not None

    @property
    def success(self) -> bool:
        """The result has subtype ``success`` and is not a disguised error."""
        return self.result is not None and self.result.succeeded

    @property
    def error_result_text(self) -> str | None:
        """The current pass's error-result text, or None."""
        return self.result.error_text if self.result is not None else None

    @property
    def usage_complete(self) -> bool:
        """Every assistant message carried usage."""
        return self.messages_without_usage == 0

    @property
    def tokens(self) -> TokenUsage:
        """Tokens used, as state counts them (the latest success result's usage plus the
        messages after it); a lower bound unless :attr:`tokens_complete`."""
        return self._tokens

    @property
    def tokens_complete(self) -> bool:
        return not self._token_gaps

    @property
    def total_cost(self) -> float | None:
        """USD cost, as state counts it; None when no usage or price is known at all.  A lower
        bound unless :attr:`cost_complete`."""
        return self._cost

    @property
    def cost_complete(self) -> bool:
        """The cost covers every message (priced, or settled by a success result)."""
        return self._cost is not None and not self._cost_gaps

    @property
    def context_exceeded(self) -> bool:
        """Any context-exceeded pattern was seen (reference ``isContextExceeded``; running out
        of output tokens counts, as in the original)."""
        return bool(self.context_signals)

    @property
    def output_tokens_exceeded(self) -> bool:
        """The agent's response hit the output-token maximum."""
        return "output-token-maximum" in self.context_signals

    @property
    def unknown_records(self) -> int:
        return len(self.unknown)

    def summary(self) -> LogSummary:
        return LogSummary(
            session_id=self.session_id, records=self.records,
            assistant_messages=self.assistant_messages,
            messages_without_usage=self.messages_without_usage,
            usage_complete=self.usage_complete, tokens=self.tokens,
            tokens_complete=self.tokens_complete, cost=self.total_cost,
            cost_complete=self.cost_complete, result_received=self.result_received,
            success=self.success, error_text=self.error_result_text,
            synthetic_timeout=self.synthetic_timeout, context_exceeded=self.context_exceeded,
            output_tokens_exceeded=self.output_tokens_exceeded,
            context_signals=tuple(self.context_signals), unknown_records=self.unknown_records)


def _largest(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    return TokenUsage(input_tokens=max(a.input_tokens, b.input_tokens),
                      output_tokens=max(a.output_tokens, b.output_tokens),
                      cache_creation_tokens=max(a.cache_creation_tokens, b.cache_creation_tokens),
                      cache_read_tokens=max(a.cache_read_tokens, b.cache_read_tokens))


def _difference(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    """``a - b`` for usage ``a`` that is at least ``b`` in every count."""
    return TokenUsage(input_tokens=a.input_tokens - b.input_tokens,
                      output_tokens=a.output_tokens - b.output_tokens,
                      cache_creation_tokens=a.cache_creation_tokens - b.cache_creation_tokens,
                      cache_read_tokens=a.cache_read_tokens - b.cache_read_tokens)


def _raw_blocks(record: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    message = record.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return ({"type": "text", "text": content},)
    if isinstance(content, list):
        return tuple(block for block in content if isinstance(block, dict))
    return ()


# ----- files -----


class CodonLogWriter:
    """Appends records to a codon log, one JSON line each, one ``write(2)`` per line, so a
    record survives a killed process as soon as :meth:`write` returns.

    ``append=True`` continues an existing log (an extension in a new process, replay); a torn
    last line left by a killed writer is removed first so the next record does not glue onto
    it (a complete last line that only lacks its newline is terminated instead).
    """

    def __init__(self, path: Path, *, append: bool = False) -> None:
        self.path = Path(path)
        private_dir(self.path.parent)
        # Appending reads the tail back to repair it, hence read-write.  0600: the log holds
        # the agent's output, and tool results may hold anything (docs/state.md, "File modes").
        flags = os.O_RDWR | os.O_APPEND if append else os.O_WRONLY | os.O_TRUNC
        self._fd: int | None = open_private(self.path, flags)
        if append:
            try:
                _repair_tail(self._fd, self.path)
            except BaseException:
                self.close()
                raise

    def write(self, record: Mapping[str, Any] | LogModel | UnknownRecord) -> dict[str, Any]:
        """Write one record (stamped with ``timestamp`` if it has none) and return it."""
        if self._fd is None:
            raise ValueError(f"codon log {self.path} is closed")
        line = record.to_dict() if isinstance(record, LogModel | UnknownRecord) else dict(record)
        line.setdefault("timestamp", utc_now_iso())
        data = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        disk_write(self.path)
        write_fully(self._fd, data.encode())
        return line

    def flush(self) -> None:
        """Make the lines written so far durable (fsync)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def __enter__(self) -> CodonLogWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()



def _repair_tail(fd: int, path: Path) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = last_line_start(fd, size)
    if _json_object(os.pread(fd, size - start, start)) is not None:
        write_fully(fd, b"\n")
        log.warning("%s: terminated a last line that lacked its newline", path)
        return
    os.ftruncate(fd, start)
    log.warning("%s: removed a torn last line (%d bytes) left by an interrupted write", path,
                size - start)


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


ProblemKind = Literal["not-json", "not-an-object", "unknown-type", "invalid-record"]


@dataclass(frozen=True)
class LogProblem:
    """A line :func:`read_log` could not take as a record, or took as an unknown one."""

    line_number: int
    """1-based, counting every line of the file."""
    kind: ProblemKind
    reason: str

    def __str__(self) -> str:
        return f"line {self.line_number}: {self.reason}"


@dataclass
class LogReadReport:
    """What :func:`read_log` found besides records; complete once the iteration is finished."""

    path: Path | None = None
    records: int = 0
    """Records yielded, unknown records included."""
    torn_tail: bool = False
    """The last line has no newline and is not a whole JSON object: a write in progress, or
    one torn by a killed process.  It is not yielded."""
    torn_tail_bytes: int = 0
    problems: list[LogProblem] = field(default_factory=list)

    @property
    def invalid_lines(self) -> list[int]:
        """Lines skipped because they are not JSON objects."""
        return [p.line_number for p in self.problems if p.kind in ("not-json", "not-an-object")]

    @property
    def unknown_lines(self) -> list[int]:
        """Lines yielded as :class:`UnknownRecord` (unknown type, or a known type misshapen)."""
        return [p.line_number for p in self.problems
                if p.kind in ("unknown-type", "invalid-record")]

    @property
    def unknown_records(self) -> int:
        return len(self.unknown_lines)

    @property
    def clean(self) -> bool:
        """Every line was a known record and the file ends with a whole line."""
        return not self.problems and not self.torn_tail

    def warnings(self) -> list[str]:
        """One human-readable line per problem, for replay and ``inspect``."""
        where = f"{self.path}: " if self.path is not None else ""
        lines = [f"{where}{problem}" for problem in self.problems]
        if self.torn_tail:
            lines.append(f"{where}torn last line ({self.torn_tail_bytes} bytes) ignored")
        return lines


def read_log(path: Path, report: LogReadReport | None = None,
             ) -> Iterator[AnyRecord | UnknownRecord]:
    """The records of a codon log, in order, never failing on its content.

    Lines that are not JSON objects are skipped and a torn last line is ignored; objects that
    are not known records are yielded as :class:`UnknownRecord`.  All of it is noted in
    ``report`` (pass one to see it).  The file is read line by line, so a large log costs
    little memory.
    """
    report = report if report is not None else LogReadReport()
    report.path = Path(path)
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                # The last line, unterminated: a whole object is a record whose newline is
                # missing; anything else is a torn write.
                obj = _json_object(line) if line.strip() else None
                if obj is None:
                    if line.strip():
                        report.torn_tail, report.torn_tail_bytes = True, len(line)
                    return
            elif not line.strip():
                continue
            else:
                try:
                    value = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    report.problems.append(LogProblem(number, "not-json", f"not JSON ({exc})"))
                    continue
                if not isinstance(value, dict):
                    report.problems.append(LogProblem(
                        number, "not-an-object", f"a JSON {type(value).__name__}, not an object"))
                    continue
                obj = value
            record = parse_record(obj)
            if isinstance(record, UnknownRecord):
                report.problems.append(LogProblem(
                    number, "invalid-record" if record.invalid else "unknown-type",
                    record.reason))
            report.records += 1
            yield record


def summarize_log(path: Path, *, price: Price | None = None,
                  ) -> tuple[CodonLogParser, LogReadReport]:
    """Parse a whole codon log after the fact: the same facts the live parser derived.

    A truncated log (a killed codon) is recognisable by ``parser.result_received`` being False.
    """
    parser = CodonLogParser(price=price)
    report = LogReadReport()
    for record in read_log(path, report):
        parser.feed(record)
    return parser, report
