"""The mock provider's harness-neutral steps: one script, each client's own tool vocabulary."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from hankweave.mock_provider.requests import ConversationView, RuleBook
from hankweave.mock_provider.script import MockScriptError, parse_script
from hankweave.mock_provider.server import MockProviderThread


def _schema(*names: str, required: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": "string"} for n in names},
            "required": list(names if required is None else required)}


# What the Claude Code CLI offers (Anthropic tools; the harness's ask_human is an MCP tool).
CLAUDE_TOOLS = [
    {"name": name, "input_schema": schema} for name, schema in [
        ("Bash", _schema("command", "timeout", "description", required=("command",))),
        ("Read", _schema("file_path", "offset", "limit", required=("file_path",))),
        ("Edit", _schema("file_path", "old_string", "new_string", "replace_all",
                         required=("file_path", "old_string", "new_string"))),
        ("Write", _schema("file_path", "content")),
        ("AskUserQuestion", _schema("questions")),
        ("mcp__hankweave__ask_human", _schema("question", "options", required=("question",))),
    ]]


def _function(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": schema}}


# What the pi harness offers (OpenAI functions).
PI_TOOLS = [
    _function("read", _schema("path", "offset", "limit", required=("path",))),
    _function("write", _schema("path", "content")),
    _function("edit", _schema("path", "old_text", "new_text")),
    _function("bash", _schema("command", "timeout", required=("command",))),
    _function("ask_human", _schema("question", "options", required=("question",))),
]

# Some other agent's function list.
OTHER_TOOLS = [
    _function("write_file", _schema("filename", "text")),
    _function("run_command", _schema("cmd")),
]

STEPS = [
    {"write": {"path": "notes/a.txt", "content": "alpha\n"}},
    {"edit": {"path": "notes/a.txt", "old": "alpha", "new": "beta"}, "text": "Fixing it."},
    {"run": "ls notes"},
    {"ask": {"question": "Ship it?", "options": ["yes", "no"]}},
    {"answer": "Done: notes/a.txt says beta."},
]
SCRIPT = {"rules": [{"name": "work", "when": {"lastUserMessage": "Do the work"},
                     "steps": STEPS}]}


def anthropic_request(tools: list[dict[str, Any]], replies: int,
                      prompt: str = "Do the work") -> dict[str, Any]:
    """A Claude-CLI-shaped conversation: the prompt, then ``replies`` tool calls answered."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>x</system-reminder>"},
        {"type": "text", "text": prompt}]}]
    for n in range(replies):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{n}", "name": "X", "input": {}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"},
            {"type": "text", "text": "<system-reminder>y</system-reminder>"}]})
    return {"model": "claude-haiku", "tools": tools, "messages": messages}


def openai_request(tools: list[dict[str, Any]], replies: int,
                   prompt: str = "Do the work") -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"},
                                      {"role": "user", "content": prompt}]
    for n in range(replies):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "x", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "ok"})
    return {"model": "gpt-mock", "tools": tools, "messages": messages}


def played(protocol: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | str:
    """The tool calls the rule answers ``body`` with, or its text."""
    choice = RuleBook(parse_script(SCRIPT)).choose(ConversationView.of(protocol, body))  # type: ignore[arg-type]
    reply = choice.reply
    assert reply is not None
    if reply.error is not None:
        return f"error: {reply.error.message}"
    if reply.tool_calls:
        return [(call.name, call.input) for call in reply.tool_calls]
    return reply.text or ""


def test_the_steps_are_claude_s_tools_for_the_claude_cli():
    turns = [played("anthropic", anthropic_request(CLAUDE_TOOLS, n)) for n in range(7)]
    assert turns == [
        [("Write", {"file_path": "notes/a.txt", "content": "alpha\n"})],
        # The CLI refuses to edit a file it has not read: an edit reads first.
        [("Read", {"file_path": "notes/a.txt"})],
        [("Edit", {"file_path": "notes/a.txt", "old_string": "alpha", "new_string": "beta"})],
        [("Bash", {"command": "ls notes"})],
        [("mcp__hankweave__ask_human", {"question": "Ship it?", "options": ["yes", "no"]})],
        "Done: notes/a.txt says beta.",
        "Done.",  # past the last step the turn ends
    ]


def test_the_same_steps_are_pi_s_tools_for_the_pi_harness():
    turns = [played("openai", openai_request(PI_TOOLS, n)) for n in range(6)]
    assert turns == [
        [("write", {"path": "notes/a.txt", "content": "alpha\n"})],
        [("read", {"path": "notes/a.txt"})],
        [("edit", {"path": "notes/a.txt", "old_text": "alpha", "new_text": "beta"})],
        [("bash", {"command": "ls notes"})],
        [("ask_human", {"question": "Ship it?", "options": ["yes", "no"]})],
        "Done: notes/a.txt says beta.",
    ]


def test_any_function_list_is_matched_by_name_and_parameter_names():
    assert played("openai", openai_request(OTHER_TOOLS, 0)) == [
        ("write_file", {"filename": "notes/a.txt", "text": "alpha\n"})]


def test_a_step_the_client_has_no_tool_for_is_a_400_that_says_why():
    # OTHER_TOOLS cannot read or edit: step 2 (an edit) has no tool.
    said = played("openai", openai_request(OTHER_TOOLS, 1))
    assert said == (
        "error: hankweave mock provider: rules[0] (work) step 2 is `edit`, but the client "
        "offered no tool that edits a file (tools offered: write_file, run_command). The mock "
        "understands a tool named edit or edit_file or editfile or str_replace or "
        "replace_in_file with parameters for path, old, new (docs/testing-hanks.md).")


def test_a_tool_whose_required_parameters_the_step_cannot_fill_is_not_used():
    tools = [_function("write", _schema("path", "content", "mode"))]  # mode: required, unknown
    said = played("openai", openai_request(tools, 0))
    assert isinstance(said, str) and said.startswith("error: ") and "`write`" in said


def test_a_new_prompt_starts_the_steps_again():
    # A later codon continuing the session: its prompt is the last one with no tool result.
    body = anthropic_request(CLAUDE_TOOLS, 3)
    body["messages"] += [{"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                         {"role": "user", "content": "Do the work again"}]
    assert played("anthropic", body) == [
        ("Write", {"file_path": "notes/a.txt", "content": "alpha\n"})]


@pytest.mark.parametrize(("step", "problem"), [
    ({"write": {"path": "a"}}, "rules[0] (work).steps[0].write.content: Field required"),
    ({"answer": "x", "run": "ls"}, "rules[0] (work).steps[0]: give exactly one of read, write, "
                                   "edit, run, ask, answer"),
    ({"text": "hm"}, "rules[0] (work).steps[0]: give exactly one of"),
    ({"answer": "x", "text": "y"}, "rules[0] (work).steps[0]: an answer is the text"),
])
def test_a_malformed_step_is_refused_at_its_path(step: dict[str, Any], problem: str):
    with pytest.raises(MockScriptError) as caught:
        parse_script({"rules": [{"name": "work", "steps": [step]}]})
    assert any(line.startswith(problem) for line in [str(issue) for issue in caught.value.errors])


def test_a_rule_gives_either_a_reply_or_steps():
    with pytest.raises(MockScriptError) as caught:
        parse_script({"rules": [{"name": "both", "reply": {"text": "x"},
                                 "steps": [{"answer": "y"}]}]})
    assert any(line.startswith("rules[0] (both): give either reply or steps")
               for line in [str(issue) for issue in caught.value.errors])


def test_the_400_reaches_the_client_and_the_log_names_each_step(tmp_path: Path):
    log = tmp_path / "requests.jsonl"
    with MockProviderThread(parse_script(SCRIPT), log_path=log) as mock:
        def post(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            request = urllib.request.Request(
                f"{mock.openai_base_url}/chat/completions", data=json.dumps(body).encode(),
                headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        status, answer = post(openai_request(PI_TOOLS, 0))
        assert status == 200
        call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
        assert (call["name"], json.loads(call["arguments"])) == (
            "write", {"path": "notes/a.txt", "content": "alpha\n"})
        status, answer = post(openai_request(OTHER_TOOLS, 1))
        assert status == 400
        assert "step 2 is `edit`" in answer["error"]["message"]
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["rule"], e["step"], e["status"]) for e in entries] == [
        ("rules[0] (work)", 1, 200), ("rules[0] (work)", 2, 400)]
