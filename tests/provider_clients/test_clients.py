"""The official ``anthropic`` and ``openai`` clients and litellm against the mock provider:
replies whole and streamed, tool calls round-tripped over several turns, every error kind as
the client's own exception, hangs, dropped connections and concurrent clients.

Run by the provider-clients tox env (see ``conftest.py``); every client talks to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import litellm
import openai
import pytest

from hankweave.mock_provider.server import MockProvider
from hankweave.testing.mock_provider import MockProviderLog

litellm.suppress_debug_info = True

Serve = Callable[[Mapping[str, Any]], MockProvider]
TIMEOUT_S = 10.0
"""Clients' timeout where nothing is meant to hang (generous: the machine is noisy)."""
HANG_TIMEOUT_S = 1.0
"""Clients' timeout where the mock hangs."""

ANTHROPIC_MODEL = "claude-mock-1"
OPENAI_MODEL = "gpt-mock-1"
PLAN = "# Plan\n\n1. Survey the data.\n2. Write the findings.\n3. Polish them.\n"


def anthropic_client(mock: MockProvider, **options: Any) -> anthropic.Anthropic:
    options.setdefault("timeout", TIMEOUT_S)
    return anthropic.Anthropic(base_url=mock.base_url, api_key="mock-key", max_retries=0,
                               **options)


def openai_client(mock: MockProvider, **options: Any) -> openai.OpenAI:
    options.setdefault("timeout", TIMEOUT_S)
    return openai.OpenAI(base_url=mock.openai_base_url, api_key="mock-key", max_retries=0,
                         **options)


def litellm_route(mock: MockProvider, protocol: str) -> dict[str, Any]:
    """The ``model``/``api_base``/``api_key`` arguments of a litellm call to the mock."""
    if protocol == "anthropic":
        return {"model": f"anthropic/{ANTHROPIC_MODEL}", "api_base": mock.base_url,
                "api_key": "mock-key"}
    return {"model": f"openai/{OPENAI_MODEL}", "api_base": mock.openai_base_url,
            "api_key": "mock-key"}


def rules_answered(log_path: Path) -> list[str | None]:
    return [request.rule for request in MockProviderLog(log_path).requests()]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# A three-turn tool conversation: write a file, read it back, then say it is done.  Each
# later rule matches only on the tool result the client sent back.
TOOL_SCRIPT = {"rules": [
    {"name": "plan", "when": {"lastUserMessage": "Write a plan", "turn": 1},
     "reply": {"text": "I'll write it.", "chunkSize": 7,
               "toolCalls": [{"name": "Write",
                              "input": {"file_path": "plan.md", "content": PLAN}}]}},
    {"name": "check", "when": {"toolResult": {"regex": "^File created"}, "turn": 2},
     "reply": {"toolCalls": [{"name": "Read", "input": {"file_path": "plan.md"}}],
               "chunkSize": 5}},
    {"name": "done", "when": {"toolResult": {"contains": "Survey the data"}, "turn": 3},
     "reply": {"text": "The plan is written and checked.",
               "usage": {"inputTokens": 300, "outputTokens": 12}}},
]}


class FakeTools:
    """The client side of the tool calls: a file system in a dict."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def run(self, name: str, arguments: Mapping[str, Any]) -> str:
        if name == "Write":
            self.files[arguments["file_path"]] = arguments["content"]
            return f"File created successfully at {arguments['file_path']}"
        if name == "Read":
            return self.files[arguments["file_path"]]
        raise AssertionError(f"unexpected tool {name}")


ANTHROPIC_TOOLS = [
    {"name": "Write", "description": "Write a file",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"},
                                                       "content": {"type": "string"}}}},
    {"name": "Read", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
]
OPENAI_TOOLS = [{"type": "function",
                 "function": {"name": tool["name"], "description": tool["description"],
                              "parameters": tool["input_schema"]}} for tool in ANTHROPIC_TOOLS]


def assert_tool_conversation(log_path: Path, tools: FakeTools) -> None:
    assert tools.files == {"plan.md": PLAN}
    assert rules_answered(log_path) == ["rules[0] (plan)", "rules[1] (check)", "rules[2] (done)"]
    last = MockProviderLog(log_path).requests(rule="done")[0]
    assert "Write a plan" in last.conversation_text()
    assert "File created successfully at plan.md" in last.conversation_text()


# --------------------------------------------------------------------------------------------
# anthropic
# --------------------------------------------------------------------------------------------

FULL_REPLY = {"thinking": "Plan first.", "text": "Here is the plan.",
              "toolCalls": [{"name": "Write", "input": {"file_path": "plan.md",
                                                        "content": PLAN}}],
              "chunkSize": 8,
              "usage": {"inputTokens": 1200, "outputTokens": 57, "cacheReadTokens": 1500,
                        "cacheWriteTokens": 40}}


def test_anthropic_whole_reply(serve: Serve):
    mock = serve({"rules": [{"reply": FULL_REPLY}]})
    message = anthropic_client(mock).messages.create(
        model=ANTHROPIC_MODEL, max_tokens=1024, messages=[user("Write a plan")])
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Plan first."
    assert text.type == "text" and text.text == "Here is the plan."
    assert tool.type == "tool_use" and tool.name == "Write"
    assert tool.input == {"file_path": "plan.md", "content": PLAN}
    assert message.stop_reason == "tool_use"
    assert message.model == ANTHROPIC_MODEL
    assert (message.usage.input_tokens, message.usage.output_tokens) == (1200, 57)
    assert message.usage.cache_read_input_tokens == 1500
    assert message.usage.cache_creation_input_tokens == 40


def test_anthropic_stream_builds_the_same_message(serve: Serve):
    mock = serve({"rules": [{"reply": FULL_REPLY}]})
    with anthropic_client(mock).messages.stream(
            model=ANTHROPIC_MODEL, max_tokens=1024, messages=[user("Write a plan")]) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    assert "".join(texts) == "Here is the plan." and len(texts) > 1
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    tool = message.content[2]
    assert tool.type == "tool_use" and tool.input == {"file_path": "plan.md", "content": PLAN}
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == 57
    assert message.usage.cache_read_input_tokens == 1500


def test_anthropic_raw_stream_events(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "a" * 40, "chunkSize": 10}}]})
    events = list(anthropic_client(mock).messages.create(
        model=ANTHROPIC_MODEL, max_tokens=64, messages=[user("hi")], stream=True))
    kinds = [event.type for event in events]
    assert kinds == ["message_start", "content_block_start", *["content_block_delta"] * 4,
                     "content_block_stop", "message_delta", "message_stop"]


def test_anthropic_beta_messages_with_betas_are_served(serve: Serve, log_path: Path):
    mock = serve({"rules": [{"reply": {"text": "beta ok"}}]})
    message = anthropic_client(mock).beta.messages.create(
        model=ANTHROPIC_MODEL, max_tokens=64, messages=[user("hi")],
        betas=["interleaved-thinking-2025-05-14", "claude-code-20250219"])
    assert message.content[0].type == "text" and message.content[0].text == "beta ok"
    assert len(MockProviderLog(log_path).requests()) == 1


def test_anthropic_count_tokens(serve: Serve):
    mock = serve({"rules": []})
    count = anthropic_client(mock).messages.count_tokens(
        model=ANTHROPIC_MODEL, messages=[user("x" * 400)])
    assert count.input_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_calls_round_trip_over_three_turns(serve: Serve, log_path: Path,
                                                          stream: bool):
    mock = serve(TOOL_SCRIPT)
    client, tools = anthropic_client(mock), FakeTools()
    messages: list[dict[str, Any]] = [user("Write a plan for the survey")]
    for _ in range(5):
        if stream:
            with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=1024,
                                        tools=ANTHROPIC_TOOLS, messages=messages) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(model=ANTHROPIC_MODEL, max_tokens=1024,
                                             tools=ANTHROPIC_TOOLS, messages=messages)
        if message.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant",
                         "content": [block.model_dump() for block in message.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": block.id,
             "content": tools.run(block.name, block.input)}
            for block in message.content if block.type == "tool_use"]})
    assert message.content[0].type == "text"
    assert message.content[0].text == "The plan is written and checked."
    assert message.usage.input_tokens == 300
    assert_tool_conversation(log_path, tools)


ANTHROPIC_ERRORS = [
    ("overloaded", anthropic.OverloadedError, 529),
    ("rate_limit", anthropic.RateLimitError, 429),
    ("invalid_request", anthropic.BadRequestError, 400),
    ("authentication", anthropic.AuthenticationError, 401),
    ("permission", anthropic.PermissionDeniedError, 403),
    ("not_found", anthropic.NotFoundError, 404),
    ("context_length", anthropic.BadRequestError, 400),
    ("server", anthropic.InternalServerError, 500),
]


@pytest.mark.parametrize(("kind", "error_class", "status"), ANTHROPIC_ERRORS)
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_errors_are_the_clients_exceptions(serve: Serve, log_path: Path, kind: str,
                                                     error_class: type[Exception], status: int,
                                                     stream: bool):
    mock = serve({"rules": [{"reply": {"error": {"kind": kind, "retryAfter": 2}}}]})
    with pytest.raises(error_class) as caught:
        if stream:
            with anthropic_client(mock).messages.stream(
                    model=ANTHROPIC_MODEL, max_tokens=64, messages=[user("hi")]) as s:
                s.get_final_message()
        else:
            anthropic_client(mock).messages.create(model=ANTHROPIC_MODEL, max_tokens=64,
                                                   messages=[user("hi")])
    error = caught.value
    assert isinstance(error, anthropic.APIStatusError)
    assert error.status_code == status
    assert error.response.headers["retry-after"] == "2"
    assert isinstance(error.body, dict) and error.body["type"] == "error"
    assert len(rules_answered(log_path)) == 1  # max_retries=0: asked once


def test_anthropic_context_length_error_says_the_prompt_is_too_long(serve: Serve):
    mock = serve({"rules": [{"reply": {"error": {"kind": "context_length"}}}]})
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        anthropic_client(mock).messages.create(model=ANTHROPIC_MODEL, max_tokens=64,
                                               messages=[user("hi")])


def test_anthropic_client_retries_an_error_once_then_succeeds(serve: Serve, log_path: Path):
    mock = serve({"rules": [
        {"name": "busy", "times": 1, "reply": {"error": {"kind": "overloaded", "retryAfter": 0}}},
        {"name": "ok", "reply": {"text": "second time lucky"}}]})
    client = anthropic.Anthropic(base_url=mock.base_url, api_key="mock-key", max_retries=1,
                                 timeout=TIMEOUT_S)
    message = client.messages.create(model=ANTHROPIC_MODEL, max_tokens=64, messages=[user("hi")])
    assert message.content[0].type == "text" and message.content[0].text == "second time lucky"
    assert rules_answered(log_path) == ["rules[0] (busy)", "rules[1] (ok)"]


def test_anthropic_whole_reply_that_hangs_times_out(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "never", "hang": True}}]})
    started = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        anthropic_client(mock, timeout=HANG_TIMEOUT_S).messages.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=[user("hi")])
    assert time.monotonic() - started < TIMEOUT_S


def test_anthropic_stream_that_hangs_times_out(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "never", "hang": True}}]})
    started = time.monotonic()
    events: list[Any] = []
    with pytest.raises((anthropic.APITimeoutError, httpx2.TimeoutException)):
        for event in anthropic_client(mock, timeout=HANG_TIMEOUT_S).messages.create(
                model=ANTHROPIC_MODEL, max_tokens=64, messages=[user("hi")], stream=True):
            events.append(event)
    assert [event.type for event in events] == ["message_start"]
    assert time.monotonic() - started < TIMEOUT_S


def test_anthropic_stream_whose_connection_drops_raises(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "x" * 200, "chunkSize": 10,
                                       "dropAfterEvents": 5}}]})
    events: list[Any] = []
    with pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)):
        for event in anthropic_client(mock).messages.create(
                model=ANTHROPIC_MODEL, max_tokens=64, messages=[user("hi")], stream=True):
            events.append(event)
    assert [event.type for event in events][:2] == ["message_start", "content_block_start"]
    assert "message_stop" not in [event.type for event in events]


# --------------------------------------------------------------------------------------------
# openai
# --------------------------------------------------------------------------------------------

OPENAI_REPLY = {"text": "Here is the plan.", "chunkSize": 6,
                "toolCalls": [{"name": "Write",
                               "input": {"file_path": "plan.md", "content": PLAN}}],
                "usage": {"inputTokens": 1200, "outputTokens": 57, "cacheReadTokens": 300}}


def test_openai_whole_reply(serve: Serve):
    mock = serve({"rules": [{"reply": OPENAI_REPLY}]})
    completion = openai_client(mock).chat.completions.create(
        model=OPENAI_MODEL, messages=[user("Write a plan")], tools=OPENAI_TOOLS)
    (choice,) = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Here is the plan."
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "Write"
    assert json.loads(call.function.arguments) == {"file_path": "plan.md", "content": PLAN}
    assert completion.model == OPENAI_MODEL
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (1500, 57)
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 300


def test_openai_stream_with_usage(serve: Serve):
    mock = serve({"rules": [{"reply": OPENAI_REPLY}]})
    chunks = list(openai_client(mock).chat.completions.create(
        model=OPENAI_MODEL, messages=[user("Write a plan")], tools=OPENAI_TOOLS, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Here is the plan."
    arguments = "".join(call.function.arguments or "" for c in chunks if c.choices
                        for call in c.choices[0].delta.tool_calls or [] if call.function)
    assert json.loads(arguments) == {"file_path": "plan.md", "content": PLAN}
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 1557
    assert all(c.usage is None for c in chunks[:-1])


def test_openai_stream_without_usage_has_no_usage_chunk(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "hi"}}]})
    chunks = list(openai_client(mock).chat.completions.create(
        model=OPENAI_MODEL, messages=[user("hi")], stream=True))
    assert all(c.usage is None and c.choices for c in chunks)


def test_openai_models_list(serve: Serve):
    mock = serve({"rules": [{"when": {"model": {"equals": OPENAI_MODEL}},
                             "reply": {"text": "hi"}}]})
    assert {model.id for model in openai_client(mock).models.list()} == {OPENAI_MODEL, "mock"}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_calls_round_trip_over_three_turns(serve: Serve, log_path: Path,
                                                       stream: bool):
    mock = serve(TOOL_SCRIPT)
    client, tools = openai_client(mock), FakeTools()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You write plans."},
                                      user("Write a plan for the survey")]
    for _ in range(5):
        calls: list[dict[str, Any]]
        if stream:
            content, built = "", {}
            for chunk in client.chat.completions.create(model=OPENAI_MODEL, messages=messages,
                                                        tools=OPENAI_TOOLS, stream=True):
                delta = chunk.choices[0].delta
                content += delta.content or ""
                for piece in delta.tool_calls or []:
                    call = built.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += piece.id or ""
                    call["name"] += (piece.function.name or "") if piece.function else ""
                    call["arguments"] += (piece.function.arguments or "") if piece.function \
                        else ""
            calls = [built[index] for index in sorted(built)]
        else:
            message = client.chat.completions.create(model=OPENAI_MODEL, messages=messages,
                                                     tools=OPENAI_TOOLS).choices[0].message
            content = message.content or ""
            calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                     for c in message.tool_calls or [] if c.type == "function"]
        if not calls:
            break
        messages.append({"role": "assistant", "content": content or None, "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]})
        messages.extend({"role": "tool", "tool_call_id": c["id"],
                         "content": tools.run(c["name"], json.loads(c["arguments"]))}
                        for c in calls)
    assert content == "The plan is written and checked."
    assert_tool_conversation(log_path, tools)
    assert "You write plans." in MockProviderLog(log_path).requests()[0].conversation_text()


OPENAI_ERRORS = [
    ("overloaded", openai.InternalServerError, 503),
    ("rate_limit", openai.RateLimitError, 429),
    ("invalid_request", openai.BadRequestError, 400),
    ("authentication", openai.AuthenticationError, 401),
    ("permission", openai.PermissionDeniedError, 403),
    ("not_found", openai.NotFoundError, 404),
    ("context_length", openai.BadRequestError, 400),
    ("server", openai.InternalServerError, 500),
]


@pytest.mark.parametrize(("kind", "error_class", "status"), OPENAI_ERRORS)
@pytest.mark.parametrize("stream", [False, True])
def test_openai_errors_are_the_clients_exceptions(serve: Serve, log_path: Path, kind: str,
                                                  error_class: type[Exception], status: int,
                                                  stream: bool):
    mock = serve({"rules": [{"reply": {"error": {"kind": kind, "retryAfter": 2}}}]})
    with pytest.raises(error_class) as caught:
        result = openai_client(mock).chat.completions.create(
            model=OPENAI_MODEL, messages=[user("hi")], stream=stream)
        if stream:
            list(result)
    error = caught.value
    assert isinstance(error, openai.APIStatusError)
    assert error.status_code == status
    assert error.response.headers["retry-after"] == "2"
    assert isinstance(error.body, dict) and error.body["message"]
    assert len(rules_answered(log_path)) == 1  # max_retries=0: asked once


def test_openai_context_length_error_has_its_code(serve: Serve):
    mock = serve({"rules": [{"reply": {"error": {"kind": "context_length"}}}]})
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(mock).chat.completions.create(model=OPENAI_MODEL, messages=[user("hi")])
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length" in caught.value.message


def test_openai_stream_that_hangs_times_out(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "never", "hang": True}}]})
    started = time.monotonic()
    chunks: list[Any] = []
    with pytest.raises((openai.APITimeoutError, httpx2.TimeoutException)):
        for chunk in openai_client(mock, timeout=HANG_TIMEOUT_S).chat.completions.create(
                model=OPENAI_MODEL, messages=[user("hi")], stream=True):
            chunks.append(chunk)
    assert len(chunks) == 1 and chunks[0].choices[0].delta.role == "assistant"
    assert time.monotonic() - started < TIMEOUT_S


def test_openai_whole_reply_that_hangs_times_out(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "never", "hang": True}}]})
    with pytest.raises(openai.APITimeoutError):
        openai_client(mock, timeout=HANG_TIMEOUT_S).chat.completions.create(
            model=OPENAI_MODEL, messages=[user("hi")])


def test_openai_stream_whose_connection_drops_raises(serve: Serve):
    mock = serve({"rules": [{"reply": {"text": "x" * 200, "chunkSize": 10,
                                       "dropAfterEvents": 5}}]})
    chunks: list[Any] = []
    with pytest.raises((openai.APIConnectionError, httpx2.TransportError)):
        for chunk in openai_client(mock).chat.completions.create(
                model=OPENAI_MODEL, messages=[user("hi")], stream=True):
            chunks.append(chunk)
    assert len(chunks) == 5  # every event sent before the drop, then the error
    assert all(c.choices[0].finish_reason is None for c in chunks)


# --------------------------------------------------------------------------------------------
# two clients at once
# --------------------------------------------------------------------------------------------

CONCURRENT_SCRIPT = {"rules": [
    {"name": "slow", "when": {"lastUserMessage": "slow"},
     "reply": {"text": "s" * 60, "chunkSize": 10, "chunkDelayMs": 80}},
    {"name": "quick", "when": {"lastUserMessage": "quick"}, "reply": {"text": "quick answer"}},
]}


def test_an_anthropic_and_an_openai_client_at_once(serve: Serve):
    """A slow streamed Anthropic reply does not hold back a quick OpenAI one started after it."""
    mock = serve(CONCURRENT_SCRIPT)
    finished: list[str] = []

    async def slow() -> str:
        client = anthropic.AsyncAnthropic(base_url=mock.base_url, api_key="k", max_retries=0,
                                          timeout=TIMEOUT_S)
        async with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=64,
                                          messages=[user("slow")]) as stream:
            text = "".join([piece async for piece in stream.text_stream])
        finished.append("slow")
        return text

    async def quick() -> str:
        await asyncio.sleep(0.1)
        client = openai.AsyncOpenAI(base_url=mock.openai_base_url, api_key="k", max_retries=0,
                                    timeout=TIMEOUT_S)
        completion = await client.chat.completions.create(model=OPENAI_MODEL,
                                                          messages=[user("quick")])
        finished.append("quick")
        return completion.choices[0].message.content or ""

    async def both() -> list[str]:
        return list(await asyncio.gather(slow(), quick()))

    assert asyncio.run(both()) == ["s" * 60, "quick answer"]
    assert finished == ["quick", "slow"]


# --------------------------------------------------------------------------------------------
# litellm
# --------------------------------------------------------------------------------------------

PROTOCOLS = ["anthropic", "openai"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litellm_whole_reply(serve: Serve, protocol: str):
    mock = serve({"rules": [{"reply": OPENAI_REPLY}]})
    response = litellm.completion(**litellm_route(mock, protocol), messages=[user("plan")],
                                  tools=OPENAI_TOOLS, max_tokens=256, max_retries=0,
                                  timeout=TIMEOUT_S)
    message = response.choices[0].message
    assert message.content == "Here is the plan."
    (call,) = message.tool_calls
    assert call.function.name == "Write"
    assert json.loads(call.function.arguments) == {"file_path": "plan.md", "content": PLAN}
    assert response.choices[0].finish_reason == "tool_calls"
    assert response.usage.completion_tokens == 57


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litellm_stream_rebuilds_text_and_tool_calls(serve: Serve, protocol: str):
    mock = serve({"rules": [{"reply": OPENAI_REPLY}]})
    messages = [user("plan")]
    chunks = list(litellm.completion(**litellm_route(mock, protocol), messages=messages,
                                     tools=OPENAI_TOOLS, max_tokens=256, max_retries=0,
                                     timeout=TIMEOUT_S, stream=True,
                                     stream_options={"include_usage": True}))
    assert len(chunks) > 3
    built = litellm.stream_chunk_builder(chunks, messages=messages)
    assert built is not None
    message = built.choices[0].message
    assert message.content == "Here is the plan."
    (call,) = message.tool_calls
    assert json.loads(call.function.arguments) == {"file_path": "plan.md", "content": PLAN}
    assert built.usage.completion_tokens == 57


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("stream", [False, True])
def test_litellm_tool_calls_round_trip_over_three_turns(serve: Serve, log_path: Path,
                                                        protocol: str, stream: bool):
    mock = serve(TOOL_SCRIPT)
    tools = FakeTools()

    async def conversation() -> str:
        messages: list[Any] = [user("Write a plan for the survey")]
        for _ in range(5):
            response = await litellm.acompletion(
                **litellm_route(mock, protocol), messages=messages, tools=OPENAI_TOOLS,
                max_tokens=1024, max_retries=0, timeout=TIMEOUT_S, stream=stream)
            if stream:
                chunks = [chunk async for chunk in response]
                response = litellm.stream_chunk_builder(chunks, messages=messages)
            message = response.choices[0].message
            if not message.tool_calls:
                return message.content
            messages.append(message)
            messages.extend({"role": "tool", "tool_call_id": call.id,
                             "content": tools.run(call.function.name,
                                                  json.loads(call.function.arguments))}
                            for call in message.tool_calls)
        raise AssertionError("the conversation did not end")

    assert asyncio.run(conversation()) == "The plan is written and checked."
    assert_tool_conversation(log_path, tools)


@pytest.mark.parametrize("stream", [False, True])
def test_litellm_counts_anthropic_cache_tokens_once(serve: Serve, stream: bool):
    """message_start and message_delta both carry usage; the total is not doubled."""
    mock = serve({"rules": [{"reply": {"text": "ok", "usage": {
        "inputTokens": 1200, "outputTokens": 57, "cacheReadTokens": 300,
        "cacheWriteTokens": 40}}}]})
    messages = [user("hi")]
    response = litellm.completion(**litellm_route(mock, "anthropic"), messages=messages,
                                  max_tokens=64, max_retries=0, timeout=TIMEOUT_S,
                                  stream=stream)
    if stream:
        response = litellm.stream_chunk_builder(list(response), messages=messages)
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (1200 + 300 + 40, 57)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (300, 40)


LITELLM_ERRORS = {
    # kind: (Anthropic path: class, status; OpenAI path: class, status)
    "overloaded": (litellm.InternalServerError, 500, litellm.ServiceUnavailableError, 503),
    "rate_limit": (litellm.RateLimitError, 429, litellm.RateLimitError, 429),
    "invalid_request": (litellm.BadRequestError, 400, litellm.BadRequestError, 400),
    "authentication": (litellm.AuthenticationError, 401, litellm.AuthenticationError, 401),
    "permission": (litellm.PermissionDeniedError, 403, litellm.APIError, 403),
    "not_found": (litellm.NotFoundError, 404, litellm.NotFoundError, 404),
    "context_length": (litellm.ContextWindowExceededError, 400,
                       litellm.ContextWindowExceededError, 400),
    "server": (litellm.InternalServerError, 500, litellm.InternalServerError, 500),
}


@pytest.mark.parametrize("kind", sorted(LITELLM_ERRORS))
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("stream", [False, True])
def test_litellm_errors_are_its_exceptions(serve: Serve, log_path: Path, kind: str,
                                           protocol: str, stream: bool):
    a_class, a_status, o_class, o_status = LITELLM_ERRORS[kind]
    error_class, status = (a_class, a_status) if protocol == "anthropic" else (o_class, o_status)
    mock = serve({"rules": [{"reply": {"error": {"kind": kind, "retryAfter": 2}}}]})
    with pytest.raises(error_class) as caught:
        response = litellm.completion(**litellm_route(mock, protocol), messages=[user("hi")],
                                      max_tokens=64, max_retries=0, timeout=TIMEOUT_S,
                                      stream=stream)
        if stream:
            list(response)
    error: Any = caught.value
    assert error.status_code == status
    assert error.litellm_response_headers.get("retry-after") == "2"
    assert len(rules_answered(log_path)) == 1  # max_retries=0: asked once


def test_litellm_sees_the_anthropic_overloaded_status(serve: Serve):
    mock = serve({"rules": [{"reply": {"error": {"kind": "overloaded"}}}]})
    with pytest.raises(litellm.InternalServerError) as caught:
        litellm.completion(**litellm_route(mock, "anthropic"), messages=[user("hi")],
                           max_tokens=64, max_retries=0, timeout=TIMEOUT_S)
    assert caught.value.provider_status_code == 529


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litellm_stream_that_hangs_times_out(serve: Serve, protocol: str):
    mock = serve({"rules": [{"reply": {"text": "never", "hang": True}}]})
    started = time.monotonic()
    with pytest.raises(litellm.Timeout if protocol == "openai"
                       else litellm.exceptions.MidStreamFallbackError) as caught:
        list(litellm.completion(**litellm_route(mock, protocol), messages=[user("hi")],
                                max_tokens=64, max_retries=0, timeout=HANG_TIMEOUT_S,
                                stream=True))
    assert caught.value.status_code == 408
    assert time.monotonic() - started < TIMEOUT_S


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litellm_whole_reply_that_hangs_times_out(serve: Serve, protocol: str):
    mock = serve({"rules": [{"reply": {"text": "never", "hang": True}}]})
    with pytest.raises(litellm.Timeout):
        litellm.completion(**litellm_route(mock, protocol), messages=[user("hi")],
                           max_tokens=64, max_retries=0, timeout=HANG_TIMEOUT_S)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litellm_stream_whose_connection_drops_raises(serve: Serve, protocol: str):
    mock = serve({"rules": [{"reply": {"text": "x" * 200, "chunkSize": 10,
                                       "dropAfterEvents": 5}}]})
    chunks: list[Any] = []
    with pytest.raises(litellm.exceptions.MidStreamFallbackError) as caught:
        for chunk in litellm.completion(**litellm_route(mock, protocol), messages=[user("hi")],
                                        max_tokens=64, max_retries=0, timeout=TIMEOUT_S,
                                        stream=True):
            chunks.append(chunk)
    assert "connection" in str(caught.value).lower()
    assert "".join(c.choices[0].delta.content or "" for c in chunks) != "x" * 200


def test_litellm_two_calls_at_once(serve: Serve):
    mock = serve(CONCURRENT_SCRIPT)
    finished: list[str] = []

    async def ask(protocol: str, text: str, pause: float) -> str:
        await asyncio.sleep(pause)
        response = await litellm.acompletion(**litellm_route(mock, protocol),
                                             messages=[user(text)], max_tokens=64,
                                             max_retries=0, timeout=TIMEOUT_S, stream=True)
        content = "".join([chunk.choices[0].delta.content or "" async for chunk in response])
        finished.append(text)
        return content

    async def both() -> list[str]:
        return list(await asyncio.gather(ask("anthropic", "slow", 0),
                                         ask("openai", "quick", 0.1)))

    assert asyncio.run(both()) == ["s" * 60, "quick answer"]
    assert finished == ["quick", "slow"]
