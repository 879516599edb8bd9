"""What the rules look at in a request, read alike from both protocols' bodies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hankweave.mock_provider.actions import OfferedTool, offered_tools, play
from hankweave.mock_provider.script import MockScript, Reply, Rule, When

Protocol = Literal["anthropic", "openai"]


@dataclass(frozen=True)
class ConversationView:
    """A request as the script's conditions see it."""

    protocol: Protocol
    model: str
    stream: bool
    system: str | None
    last_user_message: str | None
    """The text of the last user message that has text and no tool results."""
    tool_result: str | None
    after_tool_result: bool
    """The last user message carries tool results."""
    turn: int
    """1 + the number of assistant messages in the request."""
    replies_since_prompt: int = 0
    """Assistant messages after the last prompt (the last user message without tool results):
    which of a rule's ``steps`` is due."""
    tools: tuple[OfferedTool, ...] = ()

    @classmethod
    def of(cls, protocol: Protocol, body: Mapping[str, Any]) -> ConversationView:
        messages = body.get("messages")
        messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
        reader = _anthropic if protocol == "anthropic" else _openai
        system, user, tool = reader(body, messages)
        return cls(protocol=protocol, model=str(body.get("model", "")),
                   stream=body.get("stream") is True, system=system, last_user_message=user,
                   tool_result=tool, after_tool_result=_after_tool_result(protocol, messages),
                   turn=1 + sum(1 for m in messages if m.get("role") == "assistant"),
                   replies_since_prompt=_replies_since_prompt(protocol, messages),
                   tools=offered_tools(body))

    def satisfies(self, when: When) -> bool:
        texts = ((when.last_user_message, self.last_user_message), (when.system, self.system),
                 (when.tool_result, self.tool_result), (when.model, self.model))
        if any(match is not None and not match.matches(text) for match, text in texts):
            return False
        if when.turn is not None and when.turn != self.turn:
            return False
        if when.after_tool_result is not None and when.after_tool_result != self.after_tool_result:
            return False
        if when.stream is not None and when.stream != self.stream:
            return False
        if when.first_request is not None and when.first_request != (self.turn == 1):
            return False
        return when.protocol is None or when.protocol == self.protocol


def _text_of(content: Any, *, kinds: tuple[str, ...] = ("text",)) -> str | None:
    """The text of a message's content: a string, or the text of its blocks of ``kinds``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = [block.get("text", "") for block in content
             if isinstance(block, dict) and block.get("type") in kinds
             and isinstance(block.get("text"), str)]
    return "\n".join(parts) if parts else None


def _after_tool_result(protocol: Protocol, messages: list[dict[str, Any]]) -> bool:
    """Whether the last message from the user's side carries tool results: OpenAI's
    ``tool`` messages, Anthropic's ``tool_result`` blocks.  ``system`` messages after it (the
    Claude CLI's environment section) do not count."""
    for message in reversed(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if protocol == "openai":
            return role == "tool"
        return role == "user" and _has_tool_results(message)
    return False


def _replies_since_prompt(protocol: Protocol, messages: list[dict[str, Any]]) -> int:
    replies = 0
    for message in reversed(messages):
        role = message.get("role")
        if role == "assistant":
            replies += 1
        elif role == "user" and not (protocol == "anthropic" and _has_tool_results(message)):
            break
    return replies


def _has_tool_results(message: Mapping[str, Any]) -> bool:
    blocks = message.get("content")
    return isinstance(blocks, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in blocks)


def _anthropic(body: Mapping[str, Any], messages: list[dict[str, Any]]
               ) -> tuple[str | None, str | None, str | None]:
    # The Claude CLI sends part of its system prompt as ``system`` messages.
    systems = [text for text in [_text_of(body.get("system"))]
               + [_text_of(m.get("content")) for m in messages if m.get("role") == "system"]
               if text is not None]
    system = "\n".join(systems) if systems else None
    user = tool = None
    for message in messages:
        if message.get("role") != "user":
            continue
        text = _text_of(message.get("content"))
        if text is not None and not _has_tool_results(message):
            # Text beside tool results is the client's (the CLI's reminders), not a prompt.
            user = text
        blocks = message.get("content")
        for block in blocks if isinstance(blocks, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                tool = _text_of(block.get("content")) or ""
    return system, user, tool


def _openai(body: Mapping[str, Any], messages: list[dict[str, Any]]
            ) -> tuple[str | None, str | None, str | None]:
    systems = [_text_of(m.get("content")) or "" for m in messages
               if m.get("role") in ("system", "developer")]
    user = tool = None
    for message in messages:
        if message.get("role") == "user":
            user = _text_of(message.get("content")) or user
        elif message.get("role") == "tool":
            tool = _text_of(message.get("content")) or ""
    return ("\n".join(systems) if systems else None), user, tool


@dataclass(frozen=True)
class Choice:
    """Which rule answers a request (None: the default), its reply (None: no rule and no
    default), and for a rule of steps, the step's number."""

    index: int | None
    reply: Reply | None
    step: int | None = None


class RuleBook:
    """Picks each request's reply: the first matching rule that has answers left."""

    def __init__(self, script: MockScript) -> None:
        self.script = script
        self._answered = [0] * len(script.rules)

    def choose(self, view: ConversationView) -> Choice:
        """The rule that answers, or the default."""
        for index, rule in enumerate(self.script.rules):
            if self._exhausted(index, rule) or not view.satisfies(rule.when):
                continue
            self._answered[index] += 1
            if rule.steps is None:
                return Choice(index, rule.reply)
            step, reply = play(rule.steps, view.tools, view.replies_since_prompt,
                               self.script.label(index))
            return Choice(index, reply, step)
        return Choice(None, self.script.default)

    def _exhausted(self, index: int, rule: Rule) -> bool:
        return rule.times is not None and self._answered[index] >= rule.times
