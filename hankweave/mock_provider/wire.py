"""The two wire protocols: a scripted reply rendered as Anthropic Messages or OpenAI Chat
Completions, streamed (server-sent events) or whole, and errors in each provider's shape."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hankweave.mock_provider.requests import ConversationView, Protocol
from hankweave.mock_provider.script import ErrorReply, Reply, Usage

_ids = itertools.count(1)


def next_id() -> int:
    """A process-wide counter for message and tool-call ids."""
    return next(_ids)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


@dataclass(frozen=True)
class WireError:
    status: int
    body: dict[str, Any]
    retry_after: float | None = None


# kind -> (status, Anthropic error type, Anthropic message, OpenAI type, OpenAI code, OpenAI message)
_ERRORS: dict[str, tuple[int, str, str, str, str | None, str]] = {
    "overloaded": (529, "overloaded_error", "Overloaded", "server_error", None,
                   "The server is overloaded or not ready yet."),
    "rate_limit": (429, "rate_limit_error",
                   "Number of request tokens has exceeded your per-minute rate limit",
                   "requests", "rate_limit_exceeded", "Rate limit reached for requests"),
    "invalid_request": (400, "invalid_request_error", "Invalid request",
                        "invalid_request_error", None, "Invalid request"),
    "authentication": (401, "authentication_error", "invalid x-api-key",
                       "invalid_request_error", "invalid_api_key", "Incorrect API key provided"),
    "permission": (403, "permission_error",
                   "Your API key does not have permission to use the specified resource.",
                   "invalid_request_error", "permission_denied",
                   "You do not have access to this resource."),
    "not_found": (404, "not_found_error", "model: {model}", "invalid_request_error",
                  "model_not_found",
                  "The model `{model}` does not exist or you do not have access to it."),
    "context_length": (400, "invalid_request_error",
                       "prompt is too long: 250000 tokens > 200000 maximum",
                       "invalid_request_error", "context_length_exceeded",
                       "This model's maximum context length is 128000 tokens. However, your "
                       "messages resulted in 250000 tokens. Please reduce the length of the "
                       "messages."),
    "server": (500, "api_error", "Internal server error", "server_error", None,
               "The server had an error while processing your request. Sorry about that!"),
}


# OpenAI has no 529: an overloaded OpenAI answers 503 (docs/testing-hanks.md: "529 / 503").
_OPENAI_STATUS = {"overloaded": 503}


def wire_error(protocol: Protocol, error: ErrorReply, view: ConversationView) -> WireError:
    """An error reply as the provider sends it: status, body, optional retry-after."""
    status, a_type, a_message, o_type, o_code, o_message = _ERRORS[error.kind]
    if protocol == "openai":
        status = _OPENAI_STATUS.get(error.kind, status)
    status = error.status or status
    if protocol == "anthropic":
        message = error.message or a_message.format(model=view.model)
        body: dict[str, Any] = {"type": "error", "error": {"type": a_type, "message": message}}
    else:
        message = error.message or o_message.format(model=view.model)
        body = {"error": {"message": message, "type": o_type,
                          "param": "messages" if error.kind == "context_length" else None,
                          "code": o_code}}
    return WireError(status, body, error.retry_after)


def _sse(event: str | None, data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


# --------------------------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------------------------


def _anthropic_usage(usage: Usage) -> dict[str, int]:
    return {"input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "output_tokens": usage.output_tokens}


def _anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.thinking:
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": "mock"})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id or f"toolu_mock_{next_id()}",
                       "name": call.name, "input": call.input})
    return blocks


def anthropic_message(reply: Reply, view: ConversationView, usage: Usage) -> dict[str, Any]:
    """The whole (non-streamed) Messages API response."""
    return {"id": f"msg_mock_{next_id()}", "type": "message", "role": "assistant",
            "model": view.model, "content": _anthropic_blocks(reply),
            "stop_reason": reply.effective_stop_reason(), "stop_sequence": None,
            "usage": _anthropic_usage(usage)}


def anthropic_events(reply: Reply, view: ConversationView, usage: Usage) -> Iterator[bytes]:
    """The streamed response: message_start, ping, each block's start/deltas/stop,
    message_delta with the stop reason and usage, message_stop."""
    start_usage = {**_anthropic_usage(usage), "output_tokens": 1}
    yield _sse("message_start", {"type": "message_start", "message": {
        "id": f"msg_mock_{next_id()}", "type": "message", "role": "assistant",
        "model": view.model, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": start_usage}})
    yield _sse("ping", {"type": "ping"})
    for index, block in enumerate(_anthropic_blocks(reply)):
        yield from _anthropic_block_events(index, block, reply.chunk_size)
    yield _sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": reply.effective_stop_reason(), "stop_sequence": None},
        "usage": _anthropic_usage(usage)})
    yield _sse("message_stop", {"type": "message_stop"})


def _anthropic_block_events(index: int, block: dict[str, Any], size: int) -> Iterator[bytes]:
    kind = block["type"]
    if kind == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": piece}
                  for piece in _pieces(block["thinking"], size)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"], size)]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": piece}
                  for piece in _pieces(json.dumps(block["input"]), size)]
    yield _sse("content_block_start", {"type": "content_block_start", "index": index,
                                       "content_block": start})
    for delta in deltas:
        yield _sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                           "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})


# --------------------------------------------------------------------------------------------
# OpenAI Chat Completions
# --------------------------------------------------------------------------------------------

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
           "max_tokens": "length"}


def _openai_usage(usage: Usage) -> dict[str, Any]:
    # OpenAI counts cached tokens inside prompt_tokens.
    prompt = usage.input_tokens + usage.cache_read_tokens
    return {"prompt_tokens": prompt, "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens}}


def _openai_calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"id": call.id or f"call_mock_{next_id()}", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.input)}}
            for call in reply.tool_calls]


def openai_completion(reply: Reply, view: ConversationView, usage: Usage) -> dict[str, Any]:
    """The whole (non-streamed) Chat Completions response."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    calls = _openai_calls(reply)
    if calls:
        message["tool_calls"] = calls
    return {"id": f"chatcmpl-mock-{next_id()}", "object": "chat.completion",
            "created": int(time.time()), "model": view.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": _FINISH[reply.effective_stop_reason()]}],
            "usage": _openai_usage(usage)}


def openai_events(reply: Reply, view: ConversationView, usage: Usage,
                  include_usage: bool) -> Iterator[bytes]:
    """The streamed response: ``data:`` chunks, the usage chunk when asked for, ``[DONE]``."""
    base = {"id": f"chatcmpl-mock-{next_id()}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": view.model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text, reply.chunk_size) if reply.text else []:
        yield chunk({"content": piece})
    for index, call in enumerate(_openai_calls(reply)):
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"],
                                                  "arguments": ""}}]})
        for piece in _pieces(call["function"]["arguments"], reply.chunk_size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _FINISH[reply.effective_stop_reason()])
    if include_usage:
        yield _sse(None, {**base, "choices": [], "usage": _openai_usage(usage)})
    yield _sse(None, "[DONE]")
