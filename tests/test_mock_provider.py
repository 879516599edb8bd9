"""The scripted mock provider: its script format, how rules match, both wire protocols as a raw
HTTP client sees them, its failure modes, its request log and its ``serve`` command.

Only aiohttp is needed (the kernel env); the real clients are exercised in
``tests/provider_clients``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from hankweave.cli.mock_provider_cmd import mock_provider_group
from hankweave.mock_provider.requests import ConversationView, RuleBook
from hankweave.mock_provider.script import (
    MockScript,
    MockScriptError,
    load_script,
    parse_script,
)
from hankweave.mock_provider.server import MockProvider
from hankweave.testing.mock_provider import MockProviderLog, start_mock_provider

pytest_plugins = ["hankweave.testing.pytest_plugin"]

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 10.0
"""The client's total timeout where nothing is meant to hang (generous: the machine is noisy)."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """A raw HTTP answer."""

    status: int
    headers: Mapping[str, str]  # case-insensitive (aiohttp's CIMultiDict)
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[tuple[str | None, Any]]:
        return parse_sse(self.body)


def parse_sse(raw: bytes) -> list[tuple[str | None, Any]]:
    """Server-sent events as (event name, decoded data); ``[DONE]`` stays a string."""
    events: list[tuple[str | None, Any]] = []
    for frame in raw.decode().split("\n\n"):
        if not frame.strip():
            continue
        name = None
        data: list[str] = []
        for line in frame.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data.append(line[len("data: "):])
        payload = "\n".join(data)
        events.append((name, payload if payload == "[DONE]" else json.loads(payload)))
    return events


async def _request(method: str, url: str, body: Any = None,
                   headers: Mapping[str, str] | None = None,
                   timeout: aiohttp.ClientTimeout | None = None, raw: bytes | None = None
                   ) -> Answer:
    timeout = timeout or aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.request(
            method, url, json=body if raw is None else None, data=raw,
            headers=dict(headers or {})) as response:
        return Answer(response.status, response.headers.copy(), await response.read())


def call(method: str, url: str, body: Any = None, **kwargs: Any) -> Answer:
    return asyncio.run(_request(method, url, body, **kwargs))


def anthropic_body(text: str = "hello", *, stream: bool = False, model: str = "claude-mock",
                   **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 256, "stream": stream,
            "messages": [{"role": "user", "content": text}], **extra}


def openai_body(text: str = "hello", *, stream: bool = False, model: str = "gpt-mock",
                **extra: Any) -> dict[str, Any]:
    return {"model": model, "stream": stream,
            "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """``mock = serve(script)``: a running provider logging to ``tmp_path/requests.jsonl``."""
    running = []

    def start(script: Mapping[str, Any], **kwargs: Any) -> MockProvider:
        kwargs.setdefault("log_path", tmp_path / "requests.jsonl")
        thread = start_mock_provider(script, **kwargs)
        running.append(thread)
        return thread.start()

    yield start
    for thread in running:
        thread.stop()


def messages_url(mock: MockProvider) -> str:
    return f"{mock.base_url}/v1/messages"


def chat_url(mock: MockProvider) -> str:
    return f"{mock.openai_base_url}/chat/completions"


# --------------------------------------------------------------------------------------------
# the script
# --------------------------------------------------------------------------------------------


def script_problems(data: object) -> list[str]:
    with pytest.raises(MockScriptError) as caught:
        parse_script(data)
    return [str(issue) for issue in caught.value.errors]


def test_a_malformed_rule_is_named_with_its_field():
    problems = script_problems({"rules": [
        {"name": "greet", "reply": {"text": "hi"}},
        {"name": "plan", "reply": {"toolCalls": [{"name": "", "input": {}}]}},
    ]})
    assert len(problems) == 1
    assert problems[0].startswith("rules[1] (plan).reply.toolCalls[0].name: ")


def test_an_unnamed_rule_is_named_by_its_index():
    (problem,) = script_problems({"rules": [{"reply": {"text": "hi", "delayMs": -1}}]})
    assert problem.startswith("rules[0].reply.delayMs: ")


def test_a_regex_that_does_not_compile_is_refused_at_its_field():
    (problem,) = script_problems({"rules": [
        {"name": "done", "when": {"toolResult": {"regex": "(unclosed"}},
         "reply": {"text": "ok"}}]})
    assert problem.startswith("rules[0] (done).when.toolResult.regex: ")
    assert "does not compile" in problem


def test_a_reply_with_neither_text_nor_tool_calls_is_refused():
    (problem,) = script_problems({"rules": [{"name": "empty", "reply": {"usage": {}}}]})
    assert problem.startswith("rules[0] (empty).reply: ")
    assert "needs text, toolCalls or an error" in problem


def test_an_error_reply_with_text_is_refused():
    (problem,) = script_problems({"rules": [
        {"name": "both", "reply": {"text": "hi", "error": {"kind": "server"}}}]})
    assert problem.startswith("rules[0] (both).reply: ")


def test_unknown_keys_are_refused_with_the_valid_ones():
    problems = script_problems({"rules": [
        {"name": "typo", "reply": {"txt": "hi", "text": "hi"}}], "defualt": {"text": "x"}})
    assert any(p.startswith('rules[0] (typo).reply.txt: Unrecognized field "txt"')
               and "toolCalls" in p for p in problems)
    assert any(p.startswith("defualt: ") and "default" in p for p in problems)


def test_a_text_condition_takes_exactly_one_kind():
    (problem,) = script_problems({"rules": [
        {"name": "two", "when": {"system": {"contains": "a", "equals": "b"}},
         "reply": {"text": "hi"}}]})
    assert problem.startswith("rules[0] (two).when.system: ")
    assert "exactly one of contains, regex, equals" in problem


def test_an_unknown_error_kind_is_refused():
    (problem,) = script_problems({"rules": [{"reply": {"error": {"kind": "teapot"}}}]})
    assert problem.startswith("rules[0].reply.error.kind: ")
    assert "rate_limit" in problem


def test_every_problem_of_a_script_is_reported_at_once():
    problems = script_problems({"rules": [
        {"name": "a", "when": {"turn": 0}, "reply": {"text": "hi"}},
        {"name": "b", "times": 0, "reply": {"text": "hi"}},
    ], "default": {}})
    assert [p.split(":")[0] for p in problems] == [
        "rules[0] (a).when.turn", "rules[1] (b).times", "default"]


def test_a_bare_string_condition_means_contains():
    script = parse_script({"rules": [{"when": {"lastUserMessage": "plan"},
                                      "reply": {"text": "hi"}}]})
    match = script.rules[0].when.last_user_message
    assert match is not None and match.contains == "plan"


def test_a_script_file_that_is_not_json_names_the_file_and_line(tmp_path: Path):
    path = tmp_path / "script.json"
    path.write_text('{"rules": [\n  {"reply": }\n]}')
    with pytest.raises(MockScriptError) as caught:
        load_script(path)
    assert str(path) in str(caught.value)
    assert "line 2" in str(caught.value)


def test_the_worked_example_script_is_valid():
    script = load_script(REPO / "examples/mock-provider/script.json")
    assert [rule.name for rule in script.rules] == [
        "survey", "survey-done", "overloaded-once", "polish"]


# --------------------------------------------------------------------------------------------
# rule matching
# --------------------------------------------------------------------------------------------


def chosen(script: Mapping[str, Any], protocol: str, body: Mapping[str, Any]) -> str | None:
    """The name of the rule that answers ``body`` (``"default"``, or None: nothing answers)."""
    parsed = parse_script(script)
    choice = RuleBook(parsed).choose(ConversationView.of(protocol, body))  # type: ignore[arg-type]
    if choice.index is not None:
        return parsed.rules[choice.index].name
    return "default" if choice.reply is not None else None


def rule(name: str, **when: Any) -> dict[str, Any]:
    return {"name": name, "when": when, "reply": {"text": name}}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def anthropic_turns(*messages: dict[str, Any], system: Any = None,
                    model: str = "claude-mock") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": list(messages)}
    if system is not None:
        body["system"] = system
    return body


@pytest.mark.parametrize(("condition", "text", "matches"), [
    ("Write a plan", "Please Write a plan now", True),
    ("Write a plan", "please write a plan", False),
    ({"contains": "plan"}, "a plan", True),
    ({"regex": r"(?i)^write\s+a\s+plan$"}, "WRITE  a plan", True),
    ({"regex": r"^plan"}, "a plan", False),
    ({"equals": "plan"}, "plan", True),
    ({"equals": "plan"}, "plan.", False),
])
def test_the_last_user_message_condition(condition: Any, text: str, matches: bool):
    script = {"rules": [rule("hit", lastUserMessage=condition)]}
    assert chosen(script, "anthropic", anthropic_turns(user(text))) == ("hit" if matches else None)
    assert chosen(script, "openai", {"model": "m", "messages": [user(text)]}) == (
        "hit" if matches else None)


def test_the_last_user_message_is_the_last_one_with_text_not_a_tool_result():
    script = {"rules": [rule("first", lastUserMessage={"equals": "Survey the data"})]}
    body = anthropic_turns(
        user([{"type": "text", "text": "Survey the data"}]),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                           "input": {}}]},
        user([{"type": "tool_result", "tool_use_id": "t1", "content": "3 apples"}]))
    assert chosen(script, "anthropic", body) == "first"
    later = {"rules": [rule("later", lastUserMessage={"equals": "Now polish"})]}
    body["messages"].append({"role": "assistant", "content": "Done."})
    body["messages"].append(user("Now polish"))
    assert chosen(later, "anthropic", body) == "later"


def test_the_system_condition_reads_both_protocols_system_prompts():
    script = {"rules": [rule("coder", system="You are a coder")]}
    assert chosen(script, "anthropic",
                  anthropic_turns(user("hi"), system="You are a coder.")) == "coder"
    assert chosen(script, "anthropic", anthropic_turns(user("hi"), system=[
        {"type": "text", "text": "You are a coder.", "cache_control": {"type": "ephemeral"}}]
    )) == "coder"
    assert chosen(script, "openai", {"model": "m", "messages": [
        {"role": "system", "content": "You are a coder."}, user("hi")]}) == "coder"
    assert chosen(script, "openai", {"model": "m", "messages": [
        {"role": "developer", "content": "You are a coder."}, user("hi")]}) == "coder"
    assert chosen(script, "anthropic", anthropic_turns(user("You are a coder"))) is None


def test_the_tool_result_condition_reads_the_last_tool_result():
    script = {"rules": [rule("done", toolResult={"regex": "(?i)created"})]}
    call_turn = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Write", "input": {}}]}
    as_string = anthropic_turns(user("go"), call_turn, user([
        {"type": "tool_result", "tool_use_id": "t1", "content": "File Created"}]))
    as_blocks = anthropic_turns(user("go"), call_turn, user([
        {"type": "tool_result", "tool_use_id": "t1",
         "content": [{"type": "text", "text": "file created successfully"}]}]))
    assert chosen(script, "anthropic", as_string) == "done"
    assert chosen(script, "anthropic", as_blocks) == "done"
    openai_tool = {"model": "m", "messages": [
        user("go"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "Write", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "created plan.md"}]}
    assert chosen(script, "openai", openai_tool) == "done"
    assert chosen(script, "anthropic", anthropic_turns(user("created"))) is None


def test_the_system_condition_also_reads_system_messages_among_the_messages():
    """The Claude CLI sends its environment section as a ``system`` message after the
    prompt, and marks a subagent's requests in its ``system`` blocks."""
    script = {"rules": [rule("sub", system="cc_is_subagent=true"),
                        rule("here", system="Primary working directory: /work")]}
    cli_body = anthropic_turns(
        user([{"type": "text", "text": "<system-reminder>\nAttribution\n</system-reminder>\n"},
              {"type": "text", "text": "Say hello"}]),
        {"role": "system", "content": [
            {"type": "text", "text": "# Environment\n - Primary working directory: /work"}]},
        system=[{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332;"},
                {"type": "text", "text": "You are a Claude agent."}])
    assert chosen(script, "anthropic", cli_body) == "here"
    cli_body["system"][0]["text"] += " cc_is_subagent=true;"
    assert chosen(script, "anthropic", cli_body) == "sub"
    view = ConversationView.of("anthropic", cli_body)
    assert view.system is not None and view.system.endswith("directory: /work")
    assert view.last_user_message is not None and view.last_user_message.endswith("Say hello")


def test_the_after_tool_result_condition_tells_a_tool_answer_from_a_new_prompt():
    script = {"rules": [rule("answer", afterToolResult=True),
                        rule("prompt", afterToolResult=False)]}
    call_turn = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Write", "input": {}}]}
    result = user([{"type": "tool_result", "tool_use_id": "t1", "content": "File created"}])
    environment = {"role": "system", "content": "# Environment"}
    assert chosen(script, "anthropic", anthropic_turns(user("go"), environment)) == "prompt"
    assert chosen(script, "anthropic", anthropic_turns(user("go"), call_turn, result)) == "answer"
    assert chosen(script, "anthropic",
                  anthropic_turns(user("go"), call_turn, result, environment)) == "answer"
    # A new prompt after a finished tool round trip: the old tool result is still the last
    # one (toolResult matches it), but the request answers no tool call.
    later = anthropic_turns(user("go"), call_turn, result,
                            {"role": "assistant", "content": "Done."}, user("Now polish"))
    assert chosen(script, "anthropic", later) == "prompt"
    assert ConversationView.of("anthropic", later).tool_result == "File created"
    openai_call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "Write", "arguments": "{}"}}]}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "created"}
    assert chosen(script, "openai", {"model": "m", "messages": [
        user("go"), openai_call, tool]}) == "answer"
    assert chosen(script, "openai", {"model": "m", "messages": [
        user("go"), openai_call, tool, {"role": "assistant", "content": "ok"},
        user("more")]}) == "prompt"
    assert chosen(script, "anthropic", {"model": "m", "messages": []}) == "prompt"


def test_the_stream_condition():
    script = {"rules": [rule("streamed", stream=True), rule("whole", stream=False)]}
    assert chosen(script, "anthropic", {**anthropic_turns(user("a")), "stream": True}) == "streamed"
    assert chosen(script, "anthropic", anthropic_turns(user("a"))) == "whole"
    assert chosen(script, "openai", {"model": "m", "stream": True,
                                     "messages": [user("a")]}) == "streamed"


def test_a_cli_write_round_trip_script_answers_each_request_once():
    """The Write round trip the Claude CLI makes (docs/testing-hanks.md): the prompt, then the
    tool result; a later prompt in the same session is neither."""
    script = {"rules": [
        {"name": "write", "when": {"lastUserMessage": "Create hello.txt",
                                   "afterToolResult": False},
         "reply": {"toolCalls": [{"name": "Write", "input": {"file_path": "hello.txt",
                                                             "content": "hi\n"}}]}},
        {"name": "done", "when": {"afterToolResult": True, "toolResult": "File created"},
         "reply": {"text": "Done."}}]}
    prompt = user([{"type": "text", "text": "<system-reminder>\nx\n</system-reminder>\n"},
                   {"type": "text", "text": "Create hello.txt please"}])
    environment = {"role": "system", "content": [{"type": "text", "text": "# Environment"}]}
    call_turn = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Write", "input": {}}]}
    result = user([{"tool_use_id": "t1", "type": "tool_result",
                    "content": "File created successfully at: hello.txt"}])
    assert chosen(script, "anthropic", anthropic_turns(prompt, environment)) == "write"
    assert chosen(script, "anthropic",
                  anthropic_turns(prompt, environment, call_turn, result)) == "done"
    assert chosen(script, "anthropic", anthropic_turns(
        prompt, environment, call_turn, result, {"role": "assistant", "content": "Done."},
        user("Create hello.txt again"))) == "write"


def test_the_model_condition():
    script = {"rules": [rule("opus", model={"regex": "opus"}), rule("other")]}
    assert chosen(script, "anthropic", anthropic_turns(user("hi"), model="claude-opus-4")) == "opus"
    assert chosen(script, "anthropic", anthropic_turns(user("hi"), model="claude-haiku")) == "other"


def test_the_turn_and_first_request_conditions():
    script = {"rules": [rule("third", turn=3), rule("first", firstRequest=True),
                        rule("later", firstRequest=False)]}
    first = anthropic_turns(user("a"))
    second = anthropic_turns(user("a"), {"role": "assistant", "content": "b"}, user("c"))
    third = anthropic_turns(*second["messages"], {"role": "assistant", "content": "d"}, user("e"))
    assert chosen(script, "anthropic", first) == "first"
    assert chosen(script, "anthropic", second) == "later"
    assert chosen(script, "anthropic", third) == "third"


def test_the_protocol_condition():
    script = {"rules": [rule("a", protocol="anthropic"), rule("o", protocol="openai")]}
    assert chosen(script, "anthropic", anthropic_turns(user("hi"))) == "a"
    assert chosen(script, "openai", {"model": "m", "messages": [user("hi")]}) == "o"


def test_all_conditions_of_a_rule_must_hold():
    script = {"rules": [rule("both", lastUserMessage="plan", protocol="openai")]}
    assert chosen(script, "anthropic", anthropic_turns(user("plan"))) is None
    assert chosen(script, "openai", {"model": "m", "messages": [user("plan")]}) == "both"


def test_a_rule_with_times_answers_that_often_then_falls_through():
    book = RuleBook(parse_script({"rules": [
        {"name": "fail-once", "times": 1, "reply": {"error": {"kind": "overloaded"}}},
        {"name": "twice", "times": 2, "reply": {"text": "ok"}}],
        "default": {"text": "fallback"}}))
    view = ConversationView.of("anthropic", anthropic_turns(user("hi")))
    answers = [book.choose(view) for _ in range(4)]
    assert [answer.index for answer in answers] == [0, 1, 1, None]
    assert answers[3].reply is not None and answers[3].reply.text == "fallback"


def test_a_request_no_rule_matches_gets_the_default():
    script = {"rules": [rule("plan", lastUserMessage="plan")], "default": {"text": "OK."}}
    assert chosen(script, "anthropic", anthropic_turns(user("something else"))) == "default"


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_without_a_default_an_unmatched_request_is_a_provider_shaped_400(serve, protocol):
    mock = serve({"rules": [rule("plan", lastUserMessage="plan")]})
    if protocol == "anthropic":
        answer = call("POST", messages_url(mock), anthropic_body("Tell me a joke"))
        error = answer.json()
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
    else:
        answer = call("POST", chat_url(mock), openai_body("Tell me a joke"))
        error = answer.json()
        assert error["error"]["type"] == "invalid_request_error"
    assert answer.status == 400
    message = error["error"]["message"]
    assert "no rule matches" in message
    assert "'Tell me a joke'" in message
    assert protocol in message


def test_the_unmatched_error_quotes_the_prompt_not_the_cli_system_reminders(serve):
    mock = serve({"rules": []})
    body = anthropic_body()
    body["messages"] = [user([
        {"type": "text", "text": "<system-reminder>\nAttribution for git commits "
                                 + "and pull requests " * 10 + "\n</system-reminder>\n"},
        {"type": "text", "text": "Tell me a joke"}])]
    message = call("POST", messages_url(mock), body).json()["error"]["message"]
    assert "last user message 'Tell me a joke'" in message


# --------------------------------------------------------------------------------------------
# the Anthropic Messages wire format
# --------------------------------------------------------------------------------------------

LONG_INPUT = {"file_path": "plan.md", "content": "# Plan\n\n" + "- a step of the plan\n" * 6}
FULL_REPLY = {"thinking": "Let me think about the plan.", "text": "I'll write the plan.",
              "toolCalls": [{"name": "Write", "input": LONG_INPUT, "id": "toolu_fixed"}],
              "chunkSize": 16,
              "usage": {"inputTokens": 1200, "outputTokens": 57, "cacheReadTokens": 300,
                        "cacheWriteTokens": 40}}


def test_anthropic_stream_sends_the_documented_event_sequence(serve):
    mock = serve({"rules": [{"reply": FULL_REPLY}]})
    answer = call("POST", messages_url(mock), anthropic_body(stream=True))
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    events = answer.events()
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert [(data["index"], data["content_block"]["type"]) for name, data in events
            if name == "content_block_start"] == [(0, "thinking"), (1, "text"), (2, "tool_use")]
    assert [data["index"] for name, data in events if name == "content_block_stop"] == [0, 1, 2]
    start = events[0][1]["message"]
    assert start["role"] == "assistant" and start["model"] == "claude-mock"
    assert start["content"] == [] and start["stop_reason"] is None


def _deltas(events: list[tuple[str | None, Any]], index: int) -> list[dict[str, Any]]:
    return [data["delta"] for name, data in events
            if name == "content_block_delta" and data["index"] == index]


def test_anthropic_stream_splits_thinking_text_and_tool_input_into_deltas(serve):
    mock = serve({"rules": [{"reply": FULL_REPLY}]})
    events = call("POST", messages_url(mock), anthropic_body(stream=True)).events()
    thinking = _deltas(events, 0)
    assert "".join(d["thinking"] for d in thinking if d["type"] == "thinking_delta") == \
        FULL_REPLY["thinking"]
    assert thinking[-1]["type"] == "signature_delta"
    text = _deltas(events, 1)
    assert {d["type"] for d in text} == {"text_delta"}
    assert "".join(d["text"] for d in text) == FULL_REPLY["text"]
    tool = _deltas(events, 2)
    assert {d["type"] for d in tool} == {"input_json_delta"}
    assert len(tool) > 2  # the JSON is longer than chunkSize
    assert all(len(d["partial_json"]) <= 16 for d in tool)
    assert json.loads("".join(d["partial_json"] for d in tool)) == LONG_INPUT
    tool_start = next(data["content_block"] for name, data in events
                      if name == "content_block_start" and data["index"] == 2)
    assert tool_start == {"type": "tool_use", "id": "toolu_fixed", "name": "Write", "input": {}}


def test_anthropic_stream_ends_with_stop_reason_and_usage_including_cache_tokens(serve):
    mock = serve({"rules": [{"reply": FULL_REPLY}]})
    events = call("POST", messages_url(mock), anthropic_body(stream=True)).events()
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {"input_tokens": 1200, "output_tokens": 57,
                              "cache_read_input_tokens": 300, "cache_creation_input_tokens": 40}
    assert events[0][1]["message"]["usage"]["cache_read_input_tokens"] == 300


def test_anthropic_tool_call_ids_are_generated_and_distinct(serve):
    mock = serve({"rules": [{"reply": {"toolCalls": [{"name": "A"}, {"name": "B"}]}}]})
    content = call("POST", messages_url(mock), anthropic_body()).json()["content"]
    ids = [block["id"] for block in content]
    assert all(i.startswith("toolu_") for i in ids) and len(set(ids)) == 2
    assert [block["input"] for block in content] == [{}, {}]


def test_anthropic_whole_reply_is_one_message(serve):
    mock = serve({"rules": [{"reply": FULL_REPLY}]})
    answer = call("POST", messages_url(mock), anthropic_body())
    assert answer.status == 200
    message = answer.json()
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg_")
    assert message["model"] == "claude-mock"
    assert [block["type"] for block in message["content"]] == ["thinking", "text", "tool_use"]
    assert message["content"][1]["text"] == FULL_REPLY["text"]
    assert message["content"][2]["input"] == LONG_INPUT
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["cache_creation_input_tokens"] == 40


def test_an_explicit_stop_reason_is_sent(serve):
    mock = serve({"rules": [{"reply": {"text": "cut", "stopReason": "max_tokens"}}]})
    assert call("POST", messages_url(mock), anthropic_body()).json()["stop_reason"] == \
        "max_tokens"
    finish = call("POST", chat_url(mock), openai_body()).json()["choices"][0]["finish_reason"]
    assert finish == "length"


def test_the_claude_cli_beta_query_and_headers_are_tolerated(serve):
    mock = serve({"rules": [{"reply": {"text": "hi"}}]})
    answer = call("POST", f"{messages_url(mock)}?beta=true", anthropic_body(stream=True),
                  headers={"anthropic-beta": "claude-code-20250219,oauth-2025-04-20,"
                                             "interleaved-thinking-2025-05-14",
                           "anthropic-version": "2023-06-01", "x-api-key": "whatever"})
    assert answer.status == 200
    assert answer.events()[-1][0] == "message_stop"


def test_count_tokens_answers_a_count(serve):
    mock = serve({"rules": []})
    answer = call("POST", f"{messages_url(mock)}/count_tokens?beta=true",
                  anthropic_body("x" * 400))
    assert answer.status == 200
    assert answer.json()["input_tokens"] > 0


def test_head_api_hello_answers_200(serve):
    mock = serve({"rules": []})
    assert call("HEAD", f"{mock.base_url}/api/hello").status == 200


def test_side_requests_are_logged_with_method_query_and_headers(serve, tmp_path: Path):
    mock = serve({"rules": [], "default": {"text": "hi"}})
    headers = {"anthropic-beta": "claude-code-20250219", "user-agent": "claude-cli/2.1.332",
               "x-api-key": "secret-key", "authorization": "Bearer secret-token"}
    call("POST", f"{messages_url(mock)}?beta=true", anthropic_body(stream=True),
         headers=headers)
    call("POST", f"{messages_url(mock)}/count_tokens?beta=true",
         anthropic_body(model="claude-haiku"), headers=headers)
    call("HEAD", f"{mock.base_url}/api/hello", headers=headers)
    call("GET", f"{mock.base_url}/v1/nothing?x=1", headers=headers)
    lines = [json.loads(line) for line in
             (tmp_path / "requests.jsonl").read_text().splitlines()]
    messages, count, *_ = lines
    assert [(line["method"], line["path"], line.get("query"), line["status"])
            for line in lines] == [
        ("POST", "/v1/messages", "beta=true", 200),
        ("POST", "/v1/messages/count_tokens", "beta=true", 200),
        ("HEAD", "/api/hello", None, 200),
        ("GET", "/v1/nothing", "x=1", 404)]
    assert messages["headers"]["anthropic-beta"] == "claude-code-20250219"
    assert messages["headers"]["user-agent"] == "claude-cli/2.1.332"
    assert count["model"] == "claude-haiku" and count["request"]["messages"]
    assert all(line["auth"] == "other" for line in lines)
    assert "secret" not in (tmp_path / "requests.jsonl").read_text()
    assert not {"x-api-key", "authorization"} & {
        name for line in lines for name in line["headers"]}


def test_an_unknown_route_is_a_404_that_names_it(serve):
    mock = serve({"rules": []})
    answer = call("POST", f"{mock.base_url}/v1/complete", {})
    assert answer.status == 404
    assert "/v1/complete" in answer.json()["error"]["message"]


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]"])
def test_a_body_that_is_not_a_json_object_is_a_400(serve, raw: bytes):
    mock = serve({"rules": [], "default": {"text": "hi"}})
    answer = call("POST", messages_url(mock), raw=raw,
                  headers={"content-type": "application/json"})
    assert answer.status == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"


# --------------------------------------------------------------------------------------------
# the OpenAI Chat Completions wire format
# --------------------------------------------------------------------------------------------

OPENAI_REPLY = {"text": "Writing it.", "thinking": "not sent to OpenAI clients",
                "toolCalls": [{"name": "Write", "input": LONG_INPUT},
                              {"name": "Read", "input": {"file_path": "a.md"}}],
                "chunkSize": 16, "usage": {"inputTokens": 1200, "outputTokens": 57,
                                           "cacheReadTokens": 300}}


def _chunks(answer: Answer) -> list[Any]:
    events = answer.events()
    assert all(name is None for name, _ in events)  # OpenAI sends bare data: lines
    assert events[-1][1] == "[DONE]"
    return [data for _, data in events[:-1]]


def test_openai_stream_sends_text_and_tool_call_deltas_then_done(serve):
    mock = serve({"rules": [{"reply": OPENAI_REPLY}]})
    answer = call("POST", chat_url(mock), openai_body(stream=True))
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    chunks = _chunks(answer)
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "gpt-mock"
               for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "Writing it."
    calls: dict[int, dict[str, str]] = {}
    for delta in deltas:
        for piece in delta.get("tool_calls", []):
            built = calls.setdefault(piece["index"], {"id": "", "name": "", "arguments": ""})
            built["id"] += piece.get("id", "")
            built["name"] += piece.get("function", {}).get("name", "")
            built["arguments"] += piece.get("function", {}).get("arguments", "")
    assert [calls[i]["name"] for i in sorted(calls)] == ["Write", "Read"]
    assert all(calls[i]["id"].startswith("call_") for i in calls)
    assert json.loads(calls[0]["arguments"]) == LONG_INPUT
    assert json.loads(calls[1]["arguments"]) == {"file_path": "a.md"}
    argument_pieces = [p for d in deltas for p in d.get("tool_calls", [])
                       if p["index"] == 0 and p.get("function", {}).get("arguments")]
    assert len(argument_pieces) > 2
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all("usage" not in c for c in chunks)  # not asked for
    assert "not sent" not in answer.body.decode()


def test_openai_stream_sends_the_usage_chunk_only_when_asked(serve):
    mock = serve({"rules": [{"reply": OPENAI_REPLY}]})
    answer = call("POST", chat_url(mock), openai_body(
        stream=True, stream_options={"include_usage": True}))
    chunks = _chunks(answer)
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 1500, "completion_tokens": 57,
                                   "total_tokens": 1557,
                                   "prompt_tokens_details": {"cached_tokens": 300}}
    no_usage = _chunks(call("POST", chat_url(mock), openai_body(
        stream=True, stream_options={"include_usage": False})))
    assert all("usage" not in c for c in no_usage)


def test_openai_whole_reply_is_one_completion(serve):
    mock = serve({"rules": [{"reply": OPENAI_REPLY}]})
    answer = call("POST", chat_url(mock), openai_body())
    assert answer.status == 200
    completion = answer.json()
    assert completion["object"] == "chat.completion" and completion["model"] == "gpt-mock"
    (choice,) = completion["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "Writing it."
    calls = choice["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["Write", "Read"]
    assert json.loads(calls[0]["function"]["arguments"]) == LONG_INPUT
    assert completion["usage"]["prompt_tokens"] == 1500


def test_openai_text_reply_stops_with_stop(serve):
    mock = serve({"rules": [{"reply": {"text": "hi"}}]})
    choice = call("POST", chat_url(mock), openai_body()).json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]


def test_openai_models_lists_the_scripts_model_names(serve):
    mock = serve({"rules": [{"when": {"model": {"equals": "gpt-4o"}}, "reply": {"text": "a"}},
                            {"when": {"model": "claude"}, "reply": {"text": "b"}}]})
    answer = call("GET", f"{mock.openai_base_url}/models")
    assert answer.status == 200
    listing = answer.json()
    assert listing["object"] == "list"
    assert {m["id"] for m in listing["data"]} == {"gpt-4o", "mock"}


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------

ERROR_CASES = [
    # kind, Anthropic status and type, OpenAI status, type and code
    ("overloaded", 529, "overloaded_error", 503, "server_error", None),
    ("rate_limit", 429, "rate_limit_error", 429, "requests", "rate_limit_exceeded"),
    ("invalid_request", 400, "invalid_request_error", 400, "invalid_request_error", None),
    ("authentication", 401, "authentication_error", 401, "invalid_request_error",
     "invalid_api_key"),
    ("permission", 403, "permission_error", 403, "invalid_request_error", "permission_denied"),
    ("not_found", 404, "not_found_error", 404, "invalid_request_error", "model_not_found"),
    ("context_length", 400, "invalid_request_error", 400, "invalid_request_error",
     "context_length_exceeded"),
    ("server", 500, "api_error", 500, "server_error", None),
]


@pytest.mark.parametrize(("kind", "a_status", "a_type", "o_status", "o_type", "o_code"),
                         ERROR_CASES)
@pytest.mark.parametrize("stream", [False, True])
def test_each_error_kind_in_each_providers_shape(serve, kind, a_status, a_type, o_status,
                                                 o_type, o_code, stream):
    mock = serve({"rules": [{"reply": {"error": {"kind": kind}}}]})
    anthropic = call("POST", messages_url(mock), anthropic_body(stream=stream))
    assert anthropic.status == a_status
    assert anthropic.headers["Content-Type"].startswith("application/json")
    body = anthropic.json()
    assert body["type"] == "error" and body["error"]["type"] == a_type
    assert body["error"]["message"]
    assert "retry-after" not in {name.lower() for name in anthropic.headers}

    openai = call("POST", chat_url(mock), openai_body(stream=stream))
    assert openai.status == o_status
    error = openai.json()["error"]
    assert error["type"] == o_type and error["code"] == o_code and error["message"]
    assert set(error) == {"message", "type", "param", "code"}


def test_the_context_length_error_uses_each_providers_overflow_wording(serve):
    mock = serve({"rules": [{"reply": {"error": {"kind": "context_length"}}}]})
    anthropic = call("POST", messages_url(mock), anthropic_body()).json()
    assert "prompt is too long" in anthropic["error"]["message"]
    openai = call("POST", chat_url(mock), openai_body()).json()
    assert "maximum context length" in openai["error"]["message"]
    assert openai["error"]["param"] == "messages"


def test_the_not_found_error_names_the_model(serve):
    mock = serve({"rules": [{"reply": {"error": {"kind": "not_found"}}}]})
    answer = call("POST", messages_url(mock), anthropic_body(model="claude-nope"))
    assert "claude-nope" in answer.json()["error"]["message"]


@pytest.mark.parametrize(("retry_after", "header"), [(7, "7"), (1.5, "1.5"), (0, "0")])
def test_retry_after_is_sent_as_a_header(serve, retry_after: float, header: str):
    mock = serve({"rules": [{"reply": {"error": {"kind": "rate_limit",
                                                  "retryAfter": retry_after}}}]})
    assert call("POST", messages_url(mock), anthropic_body()).headers["retry-after"] == header
    assert call("POST", chat_url(mock), openai_body()).headers["retry-after"] == header


def test_an_error_can_carry_its_own_status_and_message(serve):
    mock = serve({"rules": [{"reply": {"error": {"kind": "server", "status": 502,
                                                  "message": "bad gateway"}}}]})
    answer = call("POST", messages_url(mock), anthropic_body())
    assert answer.status == 502
    assert answer.json()["error"] == {"type": "api_error", "message": "bad gateway"}


# --------------------------------------------------------------------------------------------
# pacing and failures mid-stream
# --------------------------------------------------------------------------------------------


def test_delay_ms_holds_back_the_answer(serve):
    mock = serve({"rules": [{"reply": {"text": "late", "delayMs": 400}}]})
    started = time.monotonic()
    answer = call("POST", messages_url(mock), anthropic_body(stream=True))
    assert time.monotonic() - started >= 0.4
    assert answer.status == 200


def test_delay_ms_also_holds_back_an_error(serve):
    mock = serve({"rules": [{"reply": {"error": {"kind": "server"}, "delayMs": 300}}]})
    started = time.monotonic()
    assert call("POST", chat_url(mock), openai_body()).status == 500
    assert time.monotonic() - started >= 0.3


def _log_lines(path: Path, count: int) -> list[dict[str, Any]]:
    """The log's lines once it has ``count`` of them (a handler may still be finishing)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        lines = [json.loads(line) for line in path.read_text().splitlines()] \
            if path.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


def test_a_client_that_gives_up_during_delay_ms_is_logged_as_abandoned(
        serve, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Like the Claude CLI's request timeout: nothing is sent, nothing fails in the server,
    and the handler does not sit out the whole delay."""
    mock = serve({"rules": [{"name": "slow", "times": 1,
                             "reply": {"text": "late", "delayMs": 60_000}}],
                  "default": {"text": "next"}})
    with pytest.raises(asyncio.TimeoutError):
        call("POST", messages_url(mock), anthropic_body(stream=True),
             timeout=aiohttp.ClientTimeout(total=0.3))
    (entry,) = _log_lines(tmp_path / "requests.jsonl", 1)
    assert entry["rule"] == "rules[0] (slow)"
    assert entry["abandoned"] is True and entry["status"] is None
    assert call("POST", messages_url(mock), anthropic_body()).json()["content"][0][
        "text"] == "next"
    assert "Error handling request" not in caplog.text


def test_a_client_that_leaves_a_paced_stream_ends_it_quietly(
        serve, caplog: pytest.LogCaptureFixture):
    # 8 s of paced stream; the client leaves after 2 s (a first chunk comes well within that
    # even on a loaded machine: CI runs two tox envs at once).
    mock = serve({"rules": [{"reply": {"text": "x" * 400, "chunkSize": 10,
                                       "chunkDelayMs": 200}}]})
    received: list[bytes] = []
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(_read_events(messages_url(mock), anthropic_body(stream=True),
                                 aiohttp.ClientTimeout(total=2.0), received))
    assert 0 < len(received) < 40
    time.sleep(0.2)  # the handler notices the client is gone
    assert call("POST", messages_url(mock), anthropic_body()).status == 200
    assert "Error handling request" not in caplog.text


async def _read_events(url: str, body: Any, timeout: aiohttp.ClientTimeout,
                       received: list[bytes]) -> None:
    """Stream ``url``, appending each event frame to ``received``, until the end or an error."""
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
            url, json=body) as response:
        assert response.status == 200
        buffer = b""
        async for data in response.content.iter_any():
            buffer += data
            *frames, buffer = buffer.split(b"\n\n")
            received.extend(frames)


def test_a_hanging_stream_sends_its_first_event_then_the_client_times_out(serve):
    mock = serve({"rules": [{"reply": {"text": "never finished", "hang": True}}]})
    received: list[bytes] = []
    # Read gaps of 2 s: the first event comes well within that, even on a loaded machine.
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S, sock_read=2)
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(_read_events(messages_url(mock), anthropic_body(stream=True), timeout,
                                 received))
    assert len(received) == 1 and received[0].startswith(b"event: message_start")


def test_a_hanging_whole_reply_sends_nothing_until_the_client_times_out(serve):
    mock = serve({"rules": [{"reply": {"text": "never", "hang": True}}]})
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S, sock_read=0.5)
    with pytest.raises(asyncio.TimeoutError):
        call("POST", chat_url(mock), openai_body(), timeout=timeout)


def test_the_provider_stops_promptly_after_a_hang(tmp_path: Path):
    script = {"rules": [{"reply": {"text": "never finished", "hang": True}}]}
    thread = start_mock_provider(script)
    mock = thread.start()
    try:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S, sock_read=0.3)
        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(_read_events(messages_url(mock), anthropic_body(stream=True), timeout,
                                     []))
    finally:
        started = time.monotonic()
        thread.stop()
    assert time.monotonic() - started < 30  # not held by the hang (room for a loaded machine)


def test_stopping_the_provider_ends_a_hang_the_client_still_waits_on():
    thread = start_mock_provider({"rules": [{"reply": {"text": "x", "hang": True}}]})
    mock = thread.start()
    received: list[bytes] = []
    outcome: list[BaseException | None] = []

    def client() -> None:
        timeout = aiohttp.ClientTimeout(total=60)
        try:
            asyncio.run(_read_events(messages_url(mock), anthropic_body(stream=True), timeout,
                                     received))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=client)
    waiting.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not received and time.monotonic() < deadline:
        time.sleep(0.02)
    assert received, "the first event never arrived"
    thread.stop()
    waiting.join(timeout=TIMEOUT_S)
    assert not waiting.is_alive(), "the client was still waiting after the provider stopped"
    assert len(received) == 1


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_drop_after_events_closes_the_connection_mid_stream(serve, protocol):
    mock = serve({"rules": [{"reply": {"text": "x" * 200, "chunkSize": 10,
                                       "dropAfterEvents": 4}}]})
    url, body = ((messages_url(mock), anthropic_body(stream=True)) if protocol == "anthropic"
                 else (chat_url(mock), openai_body(stream=True)))
    received: list[bytes] = []
    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(_read_events(url, body, aiohttp.ClientTimeout(total=TIMEOUT_S), received))
    assert len(received) == 4
    assert b"message_stop" not in b"".join(received)
    assert b"[DONE]" not in b"".join(received)


def test_the_provider_keeps_serving_after_a_dropped_connection(serve):
    mock = serve({"rules": [{"name": "drop", "times": 1,
                             "reply": {"text": "x" * 50, "dropAfterEvents": 2}}],
                  "default": {"text": "back"}})
    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(_read_events(messages_url(mock), anthropic_body(stream=True),
                                 aiohttp.ClientTimeout(total=TIMEOUT_S), []))
    answer = call("POST", messages_url(mock), anthropic_body())
    assert answer.json()["content"][0]["text"] == "back"


def test_two_clients_are_answered_at_once(serve):
    """A slow streamed reply does not hold back a quick one that starts after it."""
    mock = serve({"rules": [
        {"when": {"lastUserMessage": "slow"},
         "reply": {"text": "s" * 60, "chunkSize": 10, "chunkDelayMs": 80}},
        {"when": {"lastUserMessage": "quick"}, "reply": {"text": "quick answer"}}]})
    finished: list[str] = []

    async def ask(text: str, pause: float) -> Answer:
        await asyncio.sleep(pause)
        answer = await _request("POST", messages_url(mock), anthropic_body(text, stream=True))
        finished.append(text)
        return answer

    async def both() -> tuple[Answer, Answer]:
        return await asyncio.gather(ask("slow", 0), ask("quick", 0.1))

    slow, quick = asyncio.run(both())
    assert finished == ["quick", "slow"]
    text = "".join(d["delta"].get("text", "") for n, d in slow.events()
                   if n == "content_block_delta")
    assert text == "s" * 60
    assert "quick answer" in quick.body.decode()


# --------------------------------------------------------------------------------------------
# the request log
# --------------------------------------------------------------------------------------------

LOGGED_SCRIPT = {"rules": [
    {"name": "plan", "when": {"lastUserMessage": "Write a plan"}, "times": 1,
     "reply": {"toolCalls": [{"name": "Write", "input": {"file_path": "plan.md"}}]}},
    {"name": "done", "when": {"toolResult": "created"}, "reply": {"text": "Written."}},
    {"name": "busy", "when": {"protocol": "openai"},
     "reply": {"error": {"kind": "rate_limit", "retryAfter": 2}}},
]}


def _log_a_conversation(mock: MockProvider) -> None:
    first = anthropic_body("Write a plan", stream=True, system="You plan.")
    call("POST", messages_url(mock), first)
    second = {**first, "messages": [
        *first["messages"],
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Write",
                                           "input": {"file_path": "plan.md"}}]},
        user([{"type": "tool_result", "tool_use_id": "t1", "content": "File created"}])]}
    call("POST", messages_url(mock), second)
    call("POST", f"{messages_url(mock)}/count_tokens", first)
    call("POST", chat_url(mock), openai_body("Write a plan"))


def test_every_request_is_one_json_line_with_its_rule_and_reply(serve, tmp_path: Path):
    mock = serve(LOGGED_SCRIPT)
    _log_a_conversation(mock)
    lines = [json.loads(line) for line in
             (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [line["seq"] for line in lines] == [1, 2, 3, 4]
    plan, done, count, busy = lines
    assert plan["rule"] == "rules[0] (plan)" and plan["status"] == 200
    assert plan["protocol"] == "anthropic" and plan["path"] == "/v1/messages"
    assert plan["model"] == "claude-mock" and plan["stream"] is True and plan["turn"] == 1
    assert plan["request"]["messages"][0]["content"] == "Write a plan"
    assert plan["reply"]["toolCalls"][0]["name"] == "Write"
    assert done["rule"] == "rules[1] (done)" and done["turn"] == 2
    assert done["reply"] == {"text": "Written."}
    assert count["path"] == "/v1/messages/count_tokens"
    assert busy["rule"] == "rules[2] (busy)" and busy["status"] == 429
    assert busy["error"]["error"]["code"] == "rate_limit_exceeded"
    assert all(isinstance(line["at"], float) for line in lines)


def test_the_log_records_unmatched_requests(serve, tmp_path: Path):
    mock = serve({"rules": []})
    call("POST", messages_url(mock), anthropic_body("anything"))
    (entry,) = MockProviderLog(tmp_path / "requests.jsonl").entries()
    assert entry.rule is None and entry.status == 400
    assert "no rule matches" in entry.entry["error"]["error"]["message"]


def test_mock_provider_log_filters_model_requests(serve, tmp_path: Path):
    mock = serve(LOGGED_SCRIPT)
    _log_a_conversation(mock)
    log = MockProviderLog(tmp_path / "requests.jsonl")
    assert len(log.entries()) == 4
    assert len(log.requests()) == 3  # count_tokens is not a model request
    assert [r.rule for r in log.requests(protocol="anthropic")] == [
        "rules[0] (plan)", "rules[1] (done)"]
    assert [r.status for r in log.requests(rule="busy")] == [429]
    assert [r.rule for r in log.requests(rule="rules[1] (done)")] == ["rules[1] (done)"]
    assert log.requests(rule="lan") == []
    assert len(log.requests(path="/v1/messages/count_tokens")) == 1


def test_conversation_text_holds_every_text_of_the_request(serve, tmp_path: Path):
    mock = serve(LOGGED_SCRIPT)
    _log_a_conversation(mock)
    (_, done) = MockProviderLog(tmp_path / "requests.jsonl").requests(protocol="anthropic")
    text = done.conversation_text()
    assert done.model == "claude-mock" and len(done.messages) == 3
    assert text.splitlines() == ["You plan.", "Write a plan", "File created"]


def test_a_missing_log_has_no_entries(tmp_path: Path):
    assert MockProviderLog(tmp_path / "absent.jsonl").entries() == []


def test_the_pytest_fixture_starts_a_provider(mock_provider, tmp_path: Path):
    mock = mock_provider({"rules": [{"reply": {"text": "from the fixture"}}]},
                         log_path=tmp_path / "fixture.jsonl")
    answer = call("POST", messages_url(mock), anthropic_body())
    assert answer.json()["content"][0]["text"] == "from the fixture"
    assert len(MockProviderLog(tmp_path / "fixture.jsonl").requests()) == 1


def test_a_script_file_path_is_accepted(tmp_path: Path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"rules": [], "default": {"text": "from a file"}}))
    with start_mock_provider(path) as mock:
        assert call("POST", chat_url(mock), openai_body()).json()["choices"][0][
            "message"]["content"] == "from a file"


def test_client_env_points_every_client_at_the_mock(serve):
    mock = serve({"rules": []})
    env = mock.client_env()
    assert env["ANTHROPIC_BASE_URL"] == mock.base_url
    assert env["OPENAI_BASE_URL"] == mock.openai_base_url
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert mock.base_url.startswith("http://127.0.0.1:")


def test_the_provider_runs_inside_a_running_event_loop():
    async def scenario() -> Answer:
        async with MockProvider(MockScript.model_validate({"default": {"text": "async"}})) as m:
            return await _request("POST", chat_url(m), openai_body())

    assert asyncio.run(scenario()).json()["choices"][0]["message"]["content"] == "async"


def _busy_port() -> socket.socket:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    return held


def test_a_port_in_use_fails_the_start_and_stop_is_then_harmless(tmp_path: Path):
    with _busy_port() as held:
        thread = start_mock_provider({"rules": []}, port=held.getsockname()[1],
                                     log_path=tmp_path / "requests.jsonl")
        with pytest.raises(OSError):
            thread.start()
    thread.stop()
    thread.stop()


def test_stopping_twice_is_harmless():
    thread = start_mock_provider({"rules": []})
    thread.start()
    thread.stop()
    thread.stop()


# --------------------------------------------------------------------------------------------
# hankweave mock-provider serve
# --------------------------------------------------------------------------------------------


def test_serve_refuses_a_bad_script_naming_the_rule(tmp_path: Path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"rules": [{"name": "plan", "reply": {"txt": "hi"}}]}))
    result = CliRunner().invoke(mock_provider_group, ["serve", "--script", str(path)])
    assert result.exit_code == 2
    assert "rules[0] (plan).reply" in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_serve_refuses_a_missing_script(tmp_path: Path):
    result = CliRunner().invoke(mock_provider_group,
                                ["serve", "--script", str(tmp_path / "absent.json")])
    assert result.exit_code == 2
    assert "not found" in result.output


def test_serve_refuses_a_port_in_use(tmp_path: Path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"rules": []}))
    with _busy_port() as held:
        port = held.getsockname()[1]
        result = CliRunner().invoke(mock_provider_group,
                                    ["serve", "--script", str(path), "--port", str(port)])
    assert result.exit_code == 2
    assert f"127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output


def _serve_process(script: Path, *args: str) -> subprocess.Popen[str]:
    code = ("from hankweave.cli.mock_provider_cmd import mock_provider_group; "
            f"mock_provider_group(['serve', '--script', {str(script)!r}, *{list(args)!r}])")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_answers_until_signalled_then_exits_cleanly(tmp_path: Path, signum: int):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"name": "hi", "reply": {"text": "served"}}]}))
    log = tmp_path / "log" / "requests.jsonl"
    process = _serve_process(script, "--log", str(log))
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("Mock provider listening on http://127.0.0.1:"), first
        base_url = first.split()[-1]
        assert f"OPENAI_BASE_URL={base_url}/v1" in process.stdout.readline() + \
            process.stdout.readline()
        answer = call("POST", f"{base_url}/v1/messages", anthropic_body())
        assert answer.json()["content"][0]["text"] == "served"
        process.send_signal(signum)
        _, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert "Mock provider stopped." in err
    assert [r.rule for r in MockProviderLog(log).requests()] == ["rules[0] (hi)"]


def test_the_log_reader_skips_the_line_still_being_written(tmp_path: Path):
    from hankweave.testing.mock_provider import MockProviderLog

    log = tmp_path / "requests.jsonl"
    log.write_text('{"path": "/v1/messages", "rule": "rules[0]"}\n{"path": "/v1/mes')
    assert [entry.rule for entry in MockProviderLog(log).entries()] == ["rules[0]"]
