"""The mock provider's script: ordered rules that decide each reply from the request.

A script is a JSON file (docs/testing-hanks.md)::

    {
      "rules": [
        {"name": "fix", "when": {"lastUserMessage": "Fix the typo"},
         "steps": [{"edit": {"path": "README.md", "old": "teh", "new": "the"}},
                   {"answer": "Fixed."}]},
        {"name": "plan", "when": {"lastUserMessage": "Write a plan"}, "times": 1,
         "reply": {"toolCalls": [{"name": "Write",
                                  "input": {"file_path": "plan.md", "content": "# Plan"}}]}},
        {"name": "done", "when": {"toolResult": {"regex": "(?i)created"}},
         "reply": {"text": "The plan is written."}}
      ],
      "default": {"text": "OK."}
    }

The first rule whose every condition holds answers.  ``steps`` are harness-neutral: each is
sent as a call of whichever matching tool the client offered (:mod:`.actions`).  A rule with ``times`` answers that many
requests, then no more.  Nothing else is kept between requests, so the extra calls real
clients make (subagents, retries, fallbacks) cannot put the script out of step.  A request no
rule matches gets ``default``, or, without one, an error reply that names the request.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from hankweave.config.errors import (
    ConfigValidationError,
    HankIssue,
    issues_from_validation_error,
    read_config_json,
)


class MockScriptError(ConfigValidationError):
    """A mock provider script is invalid; every problem names its rule and field."""

    kind = "mock provider script"


class _ScriptModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, alias_generator=to_camel,
                              populate_by_name=True, frozen=True)


class TextMatch(_ScriptModel):
    """A condition on a piece of the request's text: exactly one of the three."""

    contains: str | None = None
    regex: str | None = None
    equals: str | None = None

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        # A field validator, so the problem's path ends in ``.regex`` (docs/testing-hanks.md).
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"regex {value!r} does not compile: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        given = [k for k in ("contains", "regex", "equals") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of contains, regex, equals")
        return self

    def matches(self, text: str | None) -> bool:
        if text is None:
            return False
        if self.contains is not None:
            return self.contains in text
        if self.equals is not None:
            return text == self.equals
        assert self.regex is not None
        return re.search(self.regex, text) is not None


def _text_match(value: Any) -> Any:
    """A bare string means "contains"."""
    return {"contains": value} if isinstance(value, str) else value


class When(_ScriptModel):
    """Conditions on the request; all given ones must hold."""

    last_user_message: TextMatch | None = None
    """The text of the last user message that has text and no tool results (the prompt)."""
    system: TextMatch | None = None
    """The system prompt: Anthropic's ``system`` and any ``system`` messages among the
    messages (the Claude CLI sends its environment section as one), OpenAI's ``system`` and
    ``developer`` messages."""
    tool_result: TextMatch | None = None
    """The text of the last tool result in the conversation."""
    after_tool_result: bool | None = None
    """True: the last user message carries tool results (the client is answering the
    previous reply's tool calls); false: it carries none (a new prompt)."""
    model: TextMatch | None = None
    """The model name the client asked for."""
    stream: bool | None = None
    """True: only streamed requests; false: only whole ones (the Claude CLI repeats a
    request whose stream broke off as a whole one)."""
    turn: int | None = Field(default=None, ge=1)
    """1 for the first request of a conversation, 2 after one assistant reply, and so on."""
    first_request: bool | None = None
    """True: only the first request of a conversation (turn 1); false: only later ones."""
    protocol: Literal["anthropic", "openai"] | None = None

    @field_validator("last_user_message", "system", "tool_result", "model", mode="before")
    @classmethod
    def _bare_strings(cls, value: Any) -> Any:
        return _text_match(value)


class ToolCall(_ScriptModel):
    """One tool call of a reply."""

    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    """The call's id; generated (``toolu_mock_<n>`` / ``call_mock_<n>``) when omitted."""


class Usage(_ScriptModel):
    """Token counts reported with a reply."""

    input_tokens: int = Field(default=10, ge=0)
    output_tokens: int = Field(default=10, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)


ErrorKind = Literal["overloaded", "rate_limit", "invalid_request", "authentication",
                    "permission", "not_found", "context_length", "server"]


class ErrorReply(_ScriptModel):
    """An error answer, shaped as the provider would shape it."""

    kind: ErrorKind
    message: str | None = None
    """The error text (each kind has the provider's usual wording by default)."""
    status: int | None = Field(default=None, ge=400, le=599)
    """The HTTP status (each kind has the provider's usual one by default)."""
    retry_after: float | None = Field(default=None, ge=0)
    """Seconds, sent as a ``retry-after`` header."""


class Reply(_ScriptModel):
    """What the provider answers."""

    text: str | None = None
    thinking: str | None = None
    """A thinking block before the text (Anthropic only; OpenAI replies leave it out)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: Literal["end_turn", "tool_use", "max_tokens", "stop_sequence"] | None = None
    """Default: ``tool_use`` when the reply calls tools, else ``end_turn``."""
    usage: Usage | None = None
    """Default: the script's ``usage``."""
    error: ErrorReply | None = None
    delay_ms: int = Field(default=0, ge=0)
    """Wait this long before answering (time to first byte); a client that gives up first is
    logged as ``abandoned``."""
    chunk_delay_ms: int = Field(default=0, ge=0)
    """Wait this long between streamed chunks."""
    chunk_size: int = Field(default=24, ge=1)
    """Characters of text (or of a tool call's JSON input) per streamed delta."""
    hang: bool = False
    """Send the first event of a stream (nothing of a whole reply), then nothing more until
    the client gives up."""
    drop_after_events: int | None = Field(default=None, ge=0)
    """Streamed: close the connection after this many events."""

    @model_validator(mode="after")
    def _something_to_say(self) -> Self:
        if self.error is not None and (self.text or self.thinking or self.tool_calls):
            raise ValueError("an error reply has no text, thinking or toolCalls")
        if self.error is None and not (self.text or self.tool_calls or self.hang
                                       or self.drop_after_events is not None):
            raise ValueError("a reply needs text, toolCalls or an error")
        return self

    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if self.tool_calls else "end_turn"


class WriteAction(_ScriptModel):
    """Write ``content`` to the file at ``path`` (relative to the agent's workspace)."""

    path: str = Field(min_length=1)
    content: str


class EditAction(_ScriptModel):
    """Replace the text ``old`` (which must occur once) by ``new`` in the file at ``path``."""

    path: str = Field(min_length=1)
    old: str = Field(min_length=1)
    new: str


class AskAction(_ScriptModel):
    """Ask a person ``question`` (the harness's ``ask_human`` tool); ``options``: the allowed
    answers."""

    question: str = Field(min_length=1)
    options: list[str] | None = None


ActionName = Literal["read", "write", "edit", "run", "ask", "answer"]
ACTIONS: tuple[ActionName, ...] = ("read", "write", "edit", "run", "ask", "answer")


class Step(_ScriptModel):
    """One turn of a rule's ``steps``: a harness-neutral action, which the mock sends as a call
    of the matching tool the client offered (docs/testing-hanks.md), or ``answer``, the final
    text of the turn."""

    read: str | None = Field(default=None, min_length=1)
    """A file's path."""
    write: WriteAction | None = None
    edit: EditAction | None = None
    run: str | None = Field(default=None, min_length=1)
    """A command line."""
    ask: AskAction | None = None
    answer: str | None = Field(default=None, min_length=1)
    text: str | None = None
    """What the assistant says with a tool call."""
    usage: Usage | None = None
    """Default: the script's ``usage``."""
    delay_ms: int = Field(default=0, ge=0)
    """Wait this long before answering: a dry run paced like a model, to watch it live."""

    @field_validator("ask", mode="before")
    @classmethod
    def _bare_question(cls, value: Any) -> Any:
        return {"question": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_action(self) -> Self:
        given = [name for name in ACTIONS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(ACTIONS)}")
        if self.answer is not None and self.text is not None:
            raise ValueError("an answer is the text: leave out text")
        return self

    @property
    def action(self) -> ActionName:
        return next(name for name in ACTIONS if getattr(self, name) is not None)


class Rule(_ScriptModel):
    """A reply, or a sequence of steps, and the requests it answers."""

    name: str | None = None
    """Shown in the request log and in errors."""
    when: When = Field(default_factory=When)
    times: int | None = Field(default=None, ge=1)
    """How many requests the rule answers; omitted: every matching request."""
    reply: Reply | None = None
    steps: list[Step] | None = Field(default=None, min_length=1)
    """Played one per request of the conversation, counted from its last prompt: step 1
    answers the prompt, step 2 the result of step 1's tool call, and so on."""

    @model_validator(mode="after")
    def _reply_or_steps(self) -> Self:
        if (self.reply is None) == (self.steps is None):
            raise ValueError("give either reply or steps")
        return self


class MockScript(_ScriptModel):
    """A whole script."""

    rules: list[Rule] = Field(default_factory=list)
    default: Reply | None = None
    """The answer to a request no rule matches; omitted: an ``invalid_request`` error that
    names the request."""
    usage: Usage = Field(default_factory=Usage)
    """Usage reported by replies that give none."""

    def label(self, index: int) -> str:
        rule = self.rules[index]
        return f"rules[{index}]" + (f" ({rule.name})" if rule.name else "")


def parse_script(data: object, source: str = "script") -> MockScript:
    """Validate decoded JSON as a script; :class:`MockScriptError` lists every problem."""
    try:
        return MockScript.model_validate(data)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, MockScript)
        raise MockScriptError(source, [_name_rule(data, issue) for issue in issues]) from None


def load_script(path: Path) -> MockScript:
    """Read and validate the script file at ``path``."""
    data = read_config_json(path, what="Mock provider script", invalid=MockScriptError)
    return parse_script(data, source=str(path))


_RULE_PATH = re.compile(r"^rules\[(\d+)\]")


def _name_rule(data: object, issue: HankIssue) -> HankIssue:
    """Put the rule's name into an issue's path: ``rules[2] (plan).reply.text``."""
    match = _RULE_PATH.match(issue.path)
    rules = data.get("rules") if isinstance(data, dict) else None
    if match is None or not isinstance(rules, list):
        return issue
    rule = rules[int(match[1])] if int(match[1]) < len(rules) else None
    name = rule.get("name") if isinstance(rule, dict) else None
    if not isinstance(name, str) or not name:
        return issue
    return HankIssue(f"{match[0]} ({name}){issue.path[match.end():]}", issue.message)
