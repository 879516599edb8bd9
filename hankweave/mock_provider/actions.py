"""Harness-neutral steps: a rule's ``read``/``write``/``edit``/``run``/``ask`` sent as a call of
whichever tool the client offered for it.

The Claude Code CLI offers ``Write(file_path, content)``, the pi harness ``write(path,
content)``, another agent perhaps ``write_file(filename, text)``.  A step names what to do; the
mock finds the offered tool for it by name (case and an MCP prefix ignored) and fills its
parameters by role, so one script drives every harness.  A step the client has no tool for is
answered with a 400 that names the step and the tools offered: the run fails at once with the
reason, instead of the agent looping on calls it cannot run (docs/testing-hanks.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hankweave.mock_provider.script import (
    ActionName,
    ErrorReply,
    Reply,
    Step,
    ToolCall,
    Usage,
)


@dataclass(frozen=True)
class OfferedTool:
    """A tool in the request's ``tools`` list: its name and its parameters' names."""

    name: str
    parameters: tuple[str, ...]
    required: frozenset[str]


def offered_tools(body: Mapping[str, Any]) -> tuple[OfferedTool, ...]:
    """The tools of an Anthropic (``input_schema``) or OpenAI (``function.parameters``) body."""
    found: list[OfferedTool] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        spec: dict[str, Any] = function if isinstance(function, dict) else tool
        name = spec.get("name")
        schema = spec.get("input_schema", spec.get("parameters"))
        if not isinstance(name, str) or not isinstance(schema, dict):
            continue
        properties = schema.get("properties")
        required = schema.get("required")
        found.append(OfferedTool(
            name=name,
            parameters=tuple(properties) if isinstance(properties, dict) else (),
            required=frozenset(r for r in required if isinstance(r, str))
            if isinstance(required, list) else frozenset()))
    return tuple(found)


@dataclass(frozen=True)
class _Vocabulary:
    """How an action's tool is recognized: its possible names, and for each of its roles the
    possible parameter names (compared without case and underscores)."""

    what: str
    names: tuple[str, ...]
    roles: Mapping[str, tuple[str, ...]]
    optional: frozenset[str] = frozenset()


_PATH = ("file_path", "path", "filepath", "filename", "file")
_VOCABULARIES: dict[ActionName, _Vocabulary] = {
    "read": _Vocabulary("reads a file", ("read", "read_file", "readfile", "view", "cat"),
                        {"path": _PATH}),
    "write": _Vocabulary("writes a file",
                         ("write", "write_file", "writefile", "create_file", "createfile"),
                         {"path": _PATH, "content": ("content", "contents", "file_text", "text")}),
    "edit": _Vocabulary("edits a file",
                        ("edit", "edit_file", "editfile", "str_replace", "replace_in_file"),
                        {"path": _PATH,
                         "old": ("old_string", "old_text", "old_str", "old", "search"),
                         "new": ("new_string", "new_text", "new_str", "new", "replace")}),
    "run": _Vocabulary("runs a command",
                       ("bash", "shell", "run", "run_command", "execute", "exec", "terminal"),
                       {"command": ("command", "cmd", "script")}),
    "ask": _Vocabulary("asks a person", ("ask_human", "ask_user", "ask", "ask_question"),
                       {"question": ("question", "prompt"), "options": ("options", "choices")},
                       optional=frozenset({"options"})),
}

_MCP_PREFIX = re.compile(r"^mcp__[^_]+(?:_[^_]+)*__")


def _plain(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def find_tool(action: ActionName, tools: Sequence[OfferedTool]
              ) -> tuple[OfferedTool, dict[str, str]] | None:
    """The offered tool for ``action`` and its parameter for each role, or None."""
    vocabulary = _VOCABULARIES[action]
    by_name = {_plain(_MCP_PREFIX.sub("", tool.name)): tool for tool in reversed(tools)}
    for name in vocabulary.names:
        tool = by_name.get(_plain(name))
        if tool is None:
            continue
        parameters = {_plain(p): p for p in tool.parameters}
        chosen: dict[str, str] = {}
        for role, spellings in vocabulary.roles.items():
            match = next((parameters[_plain(s)] for s in spellings if _plain(s) in parameters),
                         None)
            if match is not None:
                chosen[role] = match
            elif role not in vocabulary.optional:
                break
        else:
            if tool.required <= set(chosen.values()):
                return tool, chosen
    return None


def step_moves(step: Step, tools: Sequence[OfferedTool]) -> list[tuple[ActionName, Step]]:
    """The requests a step takes: an ``edit`` reads its file first when the client can read
    (the Claude CLI refuses to edit a file it has not read), everything else one."""
    if step.action == "edit" and step.edit is not None and find_tool("read", tools):
        return [("read", Step(read=step.edit.path)), ("edit", step)]
    return [(step.action, step)]


def play(steps: Sequence[Step], tools: Sequence[OfferedTool], taken: int, label: str,
         usage: Usage | None = None) -> tuple[int, Reply]:
    """The reply to a request ``taken`` assistant replies after its prompt: the number of the
    step it plays (1-based) and the reply.  Past the last step, the turn ends with "Done."."""
    moves = [(number, move) for number, step in enumerate(steps, 1)
             for move in step_moves(step, tools)]
    if taken >= len(moves):
        return len(steps), Reply(text="Done.", usage=usage)
    number, (action, step) = moves[taken]
    if action == "answer":
        return number, Reply(text=step.answer, usage=step.usage or usage,
                             delay_ms=step.delay_ms)
    found = find_tool(action, tools)
    if found is None:
        return number, Reply(error=ErrorReply(kind="invalid_request", message=_no_tool(
            action, tools, f"{label} step {number}")))
    tool, roles = found
    call = ToolCall(name=tool.name, input={roles[role]: value for role, value
                                           in _values(action, step).items() if role in roles})
    return number, Reply(text=step.text, usage=step.usage or usage, delay_ms=step.delay_ms,
                         tool_calls=[call])


def _values(action: ActionName, step: Step) -> dict[str, Any]:
    if action == "read":
        return {"path": step.read}
    if action == "write" and step.write is not None:
        return {"path": step.write.path, "content": step.write.content}
    if action == "edit" and step.edit is not None:
        return {"path": step.edit.path, "old": step.edit.old, "new": step.edit.new}
    if action == "run":
        return {"command": step.run}
    assert step.ask is not None
    values: dict[str, Any] = {"question": step.ask.question}
    if step.ask.options is not None:
        values["options"] = step.ask.options
    return values


def _no_tool(action: ActionName, tools: Sequence[OfferedTool], where: str) -> str:
    vocabulary = _VOCABULARIES[action]
    offered = ", ".join(tool.name for tool in tools) or "none"
    roles = ", ".join(vocabulary.roles)
    return (f"hankweave mock provider: {where} is `{action}`, but the client offered no tool "
            f"that {vocabulary.what} (tools offered: {offered}). The mock understands a tool "
            f"named {' or '.join(vocabulary.names)} with parameters for {roles} "
            "(docs/testing-hanks.md).")


__all__ = ["OfferedTool", "find_tool", "offered_tools", "play", "step_moves"]
