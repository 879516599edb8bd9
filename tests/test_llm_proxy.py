"""The LLM proxy (hankweave/proxy/): real sockets on 127.0.0.1 between an aiohttp client, the
proxy and a small aiohttp provider (or the scripted mock): answers pass through byte for byte
and unbuffered, usage is metered and charged, the gate refuses or holds requests, the record
keeps no credential, middleware changes requests and responses, failures are the provider's
own errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hankweave.mock_provider.script import parse_script
from hankweave.mock_provider.server import MockProvider
from hankweave.proxy.server import LlmProxy, Upstream, upstreams_for
from hankweave.proxy.types import (
    Admission,
    ProxyMiddleware,
    ProxyRecord,
    ProxyReply,
    ProxyRequest,
    ProxyResponseHead,
    Refusal,
)
from hankweave.state.types import TokenUsage

TIMEOUT_S = 10.0
"""Where nothing is meant to hang (generous: the machine is noisy)."""
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
OPENAI_KEY = "sk-proj-test-fedcba9876543210"


# --------------------------------------------------------------------------------------------
# the two protocols, as fixed bytes
# --------------------------------------------------------------------------------------------


def sse(event: str | None, data: object) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def anthropic_stream() -> list[bytes]:
    """A streamed Messages answer in chunks as a provider might cut them (one event split
    across two chunks): input and cache from message_start, output from message_delta."""
    events = b"".join([
        sse("message_start", {"type": "message_start", "message": {
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 1200, "cache_read_input_tokens": 800,
                      "cache_creation_input_tokens": 300, "output_tokens": 1}}}),
        sse("ping", {"type": "ping"}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}}),
        *(sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": piece}})
          for piece in ("The plan ", "is written: ", "survey, ", "then write.")),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta",
                              "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                              "usage": {"output_tokens": 42}}),
        sse("message_stop", {"type": "message_stop"}),
    ])
    return cut(events, 7)


def openai_stream() -> list[bytes]:
    """A streamed chat completion as OpenAI sends it when asked to ``include_usage``: every
    chunk says ``"usage":null`` but the last, which counts cached tokens inside prompt_tokens."""
    base = {"id": "chatcmpl-01", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "gpt-test"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse(None, {**base, "choices": [{"index": 0, "delta": delta,
                                               "finish_reason": finish}], "usage": None})

    events = b"".join([
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": piece}) for piece in ("The plan ", "is written: ", "survey.")),
        chunk({}, "stop"),
        sse(None, {**base, "choices": [], "usage": {
            "prompt_tokens": 1500, "completion_tokens": 40, "total_tokens": 1540,
            "prompt_tokens_details": {"cached_tokens": 1000}}}),
        sse(None, "[DONE]"),
    ])
    return cut(events, 6)


def cut(data: bytes, pieces: int) -> list[bytes]:
    """``data`` in ``pieces`` chunks of about the same size, cut anywhere (mid-line too)."""
    size = -(-len(data) // pieces)
    return [data[i:i + size] for i in range(0, len(data), size)]


@dataclass(frozen=True)
class Wire:
    """One protocol as the tests speak it."""

    name: str
    path: str
    """The proxy's path (upstream name included)."""
    upstream_path: str
    """Where the upstream receives it (the proxy's ``/openai`` is the upstream's ``/v1``)."""
    record_path: str
    """The path as recorded: after the upstream's name, without the query."""
    credential: tuple[str, str]
    stream: Callable[[], list[bytes]]
    streamed_usage: TokenUsage
    plain_answer: Mapping[str, Any]
    plain_usage: TokenUsage

    def body(self, *, stream: bool, model: str | None = None, **extra: Any) -> dict[str, Any]:
        model = model or ("claude-test" if self.name == "anthropic" else "gpt-test")
        body: dict[str, Any] = {"model": model, "max_tokens": 256, "stream": stream,
                                "messages": [{"role": "user", "content": "Write a plan"}],
                                **extra}
        if self.name == "openai" and stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def headers(self) -> dict[str, str]:
        name, value = self.credential
        extra = {"anthropic-version": "2023-06-01"} if self.name == "anthropic" else {}
        return {name: value, **extra}


ANTHROPIC = Wire(
    name="anthropic", path="/anthropic/v1/messages?beta=true",
    upstream_path="/v1/messages?beta=true", record_path="/v1/messages",
    credential=("x-api-key", ANTHROPIC_KEY), stream=anthropic_stream,
    streamed_usage=TokenUsage(input_tokens=1200, output_tokens=42, cache_read_tokens=800,
                              cache_creation_tokens=300),
    plain_answer={"id": "msg_02", "type": "message", "role": "assistant",
                  "model": "claude-test", "content": [{"type": "text", "text": "Done."}],
                  "stop_reason": "end_turn", "stop_sequence": None,
                  "usage": {"input_tokens": 90, "output_tokens": 7,
                            "cache_read_input_tokens": 20, "cache_creation_input_tokens": 5}},
    plain_usage=TokenUsage(input_tokens=90, output_tokens=7, cache_read_tokens=20,
                           cache_creation_tokens=5))
OPENAI = Wire(
    name="openai", path="/openai/chat/completions", upstream_path="/v1/chat/completions",
    record_path="/chat/completions",
    credential=("authorization", f"Bearer {OPENAI_KEY}"), stream=openai_stream,
    streamed_usage=TokenUsage(input_tokens=500, output_tokens=40, cache_read_tokens=1000),
    plain_answer={"id": "chatcmpl-02", "object": "chat.completion", "created": 1700000000,
                  "model": "gpt-test", "choices": [{"index": 0, "finish_reason": "stop",
                                                    "message": {"role": "assistant",
                                                                "content": "Done."}}],
                  "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37,
                            "prompt_tokens_details": {"cached_tokens": 10}}},
    plain_usage=TokenUsage(input_tokens=20, output_tokens=7, cache_read_tokens=10))
WIRES = [pytest.param(ANTHROPIC, id="anthropic"), pytest.param(OPENAI, id="openai")]


# --------------------------------------------------------------------------------------------
# a provider, the proxy, a client
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """A request as the provider received it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    raw_path: str = ""
    """As sent, still encoded."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FakeProvider:
    """A provider on 127.0.0.1 that keeps every request it receives and answers with
    ``answer`` (``async with FakeProvider(answer) as provider``)."""

    def __init__(self, answer: Handler) -> None:
        self.answer = answer
        self.received: list[Received] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> FakeProvider:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append(Received(request.method, request.path_qs,
                                      {k.lower(): v for k, v in request.headers.items()},
                                      await request.read(), request.raw_path))
        return await self.answer(request)


def streaming(chunks: list[bytes], *, after_first: asyncio.Event | None = None,
              last_sent: asyncio.Event | None = None) -> Handler:
    """Answers with ``chunks`` as server-sent events, a few milliseconds apart; with
    ``after_first``, waits for it between the first chunk and the rest."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream",
                                               "x-request-id": "req_upstream"})
        await response.prepare(request)
        for index, chunk in enumerate(chunks):
            if index == 1 and after_first is not None:
                await asyncio.wait_for(after_first.wait(), TIMEOUT_S)
            elif index:
                await asyncio.sleep(0.002)
            if index == len(chunks) - 1 and last_sent is not None:
                last_sent.set()
            await response.write(chunk)
        await response.write_eof()
        return response

    return answer


def answering(body: Mapping[str, Any], status: int = 200,
              headers: Mapping[str, str] | None = None) -> Handler:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=status, headers=dict(headers or {}))

    return answer


@contextlib.asynccontextmanager
async def proxy_to(url: str, **kwargs: Any) -> AsyncIterator[LlmProxy]:
    """The proxy in front of ``url``: ``/anthropic/...`` to it, ``/openai/...`` to its ``/v1``."""
    proxy = LlmProxy((Upstream("anthropic", url, "anthropic"),
                      Upstream("openai", f"{url}/v1", "openai")), **kwargs)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # case-insensitive (aiohttp's CIMultiDict)
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def send(url: str, body: Mapping[str, Any] | None = None, *, method: str = "POST",
               headers: Mapping[str, str] | None = None) -> Answer:
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session, \
            session.request(method, url, json=body, headers=dict(headers or {})) as response:
        return Answer(response.status, response.headers.copy(), await response.read())


async def recorded(records: list[ProxyRecord], count: int = 1) -> list[ProxyRecord]:
    """``records`` once ``count`` are in (a streamed answer is recorded just after its end)."""
    deadline = time.monotonic() + TIMEOUT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"{len(records)} of {count} requests recorded"
        await asyncio.sleep(0.002)
    return records


def run(scenario: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S * 2))


@dataclass
class FakeGate:
    """The runtime's side: one codon runs, every answer costs ``price``; ``refusal`` refuses
    every request; ``release`` holds each until it is set."""

    codon: str = "plan"
    price: float = 0.25
    refusal: Refusal | None = None
    release: asyncio.Event | None = None
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    charged: list[tuple[TokenUsage, str | None]] = field(default_factory=list)

    def current_codon(self) -> str | None:
        return self.codon

    async def admit(self) -> Admission:
        began = time.monotonic()
        self.asked.set()
        if self.release is not None:
            await self.release.wait()
        return Admission(codon_id=self.codon, refusal=self.refusal,
                         held_s=time.monotonic() - began, charge=self.charge)

    def charge(self, usage: TokenUsage, model: str | None) -> float | None:
        self.charged.append((usage, model))
        return self.price


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------
# answers pass through as they are
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_a_streamed_answer_arrives_byte_for_byte_and_its_first_chunk_before_the_last_is_sent(
        wire):
    chunks = wire.stream()

    async def scenario() -> tuple[bytes, list[bytes], bool, str]:
        after_first, last_sent = asyncio.Event(), asyncio.Event()
        async with FakeProvider(streaming(chunks, after_first=after_first,
                                          last_sent=last_sent)) as provider, \
                proxy_to(provider.url) as proxy, aiohttp.ClientSession() as session, \
                session.post(proxy.base_url + wire.path, json=wire.body(stream=True),
                             headers=wire.headers()) as response:
            first = await asyncio.wait_for(response.content.readany(), TIMEOUT_S)
            last_sent_before_first = last_sent.is_set()
            after_first.set()
            rest = [data async for data in response.content.iter_any()]
            return first, rest, last_sent_before_first, response.headers["content-type"]

    first, rest, last_sent_before_first, content_type = run(scenario())
    assert first == chunks[0]
    assert not last_sent_before_first
    assert first + b"".join(rest) == b"".join(chunks)
    assert content_type == "text/event-stream"


def test_a_plain_answer_keeps_its_bytes_and_content_length():
    raw = json.dumps(ANTHROPIC.plain_answer, indent=1).encode()

    async def indented(request: web.Request) -> web.StreamResponse:
        return web.Response(body=raw, content_type="application/json")

    async def scenario() -> Answer:
        async with FakeProvider(indented) as provider, proxy_to(provider.url) as proxy:
            return await send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=False))

    answer = run(scenario())
    assert answer.status == 200
    assert answer.body == raw
    assert answer.headers["content-length"] == str(len(raw))
    assert "transfer-encoding" not in answer.headers


def test_an_upstream_error_passes_through_with_its_status_and_is_not_metered():
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

    async def scenario() -> tuple[Answer, list[ProxyRecord], FakeGate]:
        records: list[ProxyRecord] = []
        gate = FakeGate()
        async with FakeProvider(answering(error, 529, {"retry-after": "3"})) as provider, \
                proxy_to(provider.url, gate=gate, on_record=records.append) as proxy:
            answer = await send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=True))
            return answer, await recorded(records), gate

    answer, (record,), gate = run(scenario())
    assert (answer.status, answer.json(), answer.headers["retry-after"]) == (529, error, "3")
    assert (record.status, record.input_tokens, record.cost) == (529, None, None)
    assert gate.charged == []


def test_a_stream_the_upstream_cuts_is_cut_for_the_client_too_and_recorded():
    chunks = ANTHROPIC.stream()

    async def cutting(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunks[0])
        await asyncio.sleep(0.01)
        assert request.transport is not None
        request.transport.abort()
        return response

    async def read(url: str) -> tuple[bytes, BaseException | None]:
        received = b""
        async with aiohttp.ClientSession() as session, \
                session.post(url, json=ANTHROPIC.body(stream=True)) as response:
            try:
                async for data in response.content.iter_any():
                    received += data
            except aiohttp.ClientError as exc:
                return received, exc
        return received, None

    async def scenario() -> tuple[Any, Any, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with FakeProvider(cutting) as provider, \
                proxy_to(provider.url, on_record=records.append) as proxy:
            direct = await read(provider.url + ANTHROPIC.upstream_path)
            proxied = await read(proxy.base_url + ANTHROPIC.path)
            return direct, proxied, await recorded(records)

    (direct, direct_error), (proxied, proxied_error), (record,) = run(scenario())
    assert direct == proxied == chunks[0]
    # As without the proxy: the client's connection breaks, it is not a clean (short) end.
    assert isinstance(direct_error, aiohttp.ClientPayloadError)
    assert isinstance(proxied_error, aiohttp.ClientPayloadError)
    assert record.error is not None and record.error.startswith("stream cut")
    assert record.response_bytes == len(chunks[0])


def test_a_client_that_hangs_up_mid_stream_ends_the_upstream_request_and_is_recorded():
    stopped = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            while True:
                await response.write(sse("ping", {"type": "ping"}))
                await asyncio.sleep(0.005)
        stopped.set()
        return response

    async def scenario() -> list[ProxyRecord]:
        records: list[ProxyRecord] = []
        async with FakeProvider(endless) as provider, \
                proxy_to(provider.url, on_record=records.append) as proxy:
            async with aiohttp.ClientSession() as session:
                response = await session.post(proxy.base_url + ANTHROPIC.path,
                                              json=ANTHROPIC.body(stream=True))
                await response.content.readany()
                response.close()
            await asyncio.wait_for(stopped.wait(), TIMEOUT_S)
            return await recorded(records)

    (record,) = run(scenario())
    assert record.error is not None and record.error.startswith("stream cut")
    assert record.status == 200 and record.response_bytes > 0


MOCK_SCRIPT = {"rules": [{"name": "plan", "reply": {
    "text": "The plan is written: survey the data, write the findings, then polish them.",
    "chunkSize": 10, "toolCalls": [{"name": "write", "input": {"path": "plan.md"}}],
    "usage": {"inputTokens": 1200, "outputTokens": 80, "cacheReadTokens": 300,
              "cacheWriteTokens": 50}}}]}
MOCK_IDS = re.compile(rb"(msg_mock_|toolu_mock_|call_mock_|chatcmpl-mock-)\d+")
MOCK_CREATED = re.compile(rb'"created":\d+')


def without_mock_ids(raw: bytes) -> bytes:
    """The mock numbers every message and tool call from one counter, and stamps OpenAI
    chunks with the second they were made: the only bytes that differ between two replies."""
    return MOCK_CREATED.sub(b'"created":0', MOCK_IDS.sub(rb"\1N", raw))


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_the_mock_provider_answers_the_same_through_the_proxy_as_directly(
        wire, stream, tmp_path):
    async def scenario() -> tuple[Answer, Answer, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with MockProvider(parse_script(MOCK_SCRIPT),
                                log_path=tmp_path / "mock.jsonl") as mock:
            proxy = LlmProxy(upstreams_for({}, None, mock.base_url), on_record=records.append)
            await proxy.start()
            try:
                direct = await send(mock.base_url + wire.upstream_path,
                                    wire.body(stream=stream), headers=wire.headers())
                proxied = await send(proxy.base_url + wire.path, wire.body(stream=stream),
                                     headers=wire.headers())
                await recorded(records)
            finally:
                await proxy.stop()
        return direct, proxied, records

    direct, proxied, (record,) = run(scenario())
    assert direct.status == proxied.status == 200
    assert direct.body != b""
    assert without_mock_ids(proxied.body) == without_mock_ids(direct.body)
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    if wire.name == "anthropic":
        expected = TokenUsage(input_tokens=1200, output_tokens=80, cache_read_tokens=300,
                              cache_creation_tokens=50)
    else:  # OpenAI has no cache writes
        expected = TokenUsage(input_tokens=1200, output_tokens=80, cache_read_tokens=300)
    assert (record.input_tokens, record.output_tokens, record.cache_read_tokens,
            record.cache_creation_tokens) == (
        expected.input_tokens, expected.output_tokens, expected.cache_read_tokens,
        expected.cache_creation_tokens)
    assert record.streamed is stream


# --------------------------------------------------------------------------------------------
# the record and the meter
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_a_request_is_one_private_line_with_its_usage_and_cost_and_no_credential(
        wire, tmp_path):
    log_path = tmp_path / ".hankweave" / "proxy" / "requests.jsonl"

    async def scenario() -> tuple[FakeProvider, list[ProxyRecord], FakeGate]:
        records: list[ProxyRecord] = []
        gate = FakeGate(price=0.0123)
        async with FakeProvider(streaming(wire.stream())) as provider:
            async with proxy_to(provider.url, gate=gate, log_path=log_path,
                                on_record=records.append) as proxy:
                answer = await send(proxy.base_url + wire.path, wire.body(stream=True),
                                    headers=wire.headers())
                assert answer.status == 200
                await recorded(records)
            return provider, records, gate

    provider, records, gate = run(scenario())
    (line,) = log_path.read_text().splitlines()
    written = json.loads(line)
    assert written == records[0].to_json()
    assert written["codonId"] == "plan"
    assert (written["upstream"], written["method"], written["path"]) == (
        wire.name, "POST", wire.record_path)
    assert (written["model"], written["status"], written["streamed"]) == (
        wire.body(stream=True)["model"], 200, True)
    usage = wire.streamed_usage
    assert (written["inputTokens"], written["outputTokens"], written["cacheReadTokens"],
            written["cacheCreationTokens"]) == (usage.input_tokens, usage.output_tokens,
                                                usage.cache_read_tokens,
                                                usage.cache_creation_tokens)
    assert written["cost"] == 0.0123
    assert 0 < written["ttfbMs"] <= written["durationMs"]
    assert written["responseBytes"] == len(b"".join(wire.stream()))
    assert written["requestBytes"] == len(provider.received[0].body)
    assert gate.charged == [(usage, wire.body(stream=True)["model"])]
    # The credential reaches the provider, never the record.
    name, value = wire.credential
    assert provider.received[0].headers[name] == value
    secret = ANTHROPIC_KEY if wire.name == "anthropic" else OPENAI_KEY
    assert secret not in log_path.read_text()
    assert secret not in json.dumps([record.model_dump() for record in records])
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("wire", WIRES)
def test_a_plain_answer_is_metered_from_its_usage(wire):
    async def scenario() -> tuple[list[ProxyRecord], FakeGate]:
        records: list[ProxyRecord] = []
        gate = FakeGate()
        async with FakeProvider(answering(wire.plain_answer)) as provider, \
                proxy_to(provider.url, gate=gate, on_record=records.append) as proxy:
            answer = await send(proxy.base_url + wire.path, wire.body(stream=False))
            assert answer.json() == wire.plain_answer
            return await recorded(records), gate

    (record,), gate = run(scenario())
    usage = wire.plain_usage
    assert (record.input_tokens, record.output_tokens, record.cache_read_tokens,
            record.cache_creation_tokens) == (usage.input_tokens, usage.output_tokens,
                                              usage.cache_read_tokens,
                                              usage.cache_creation_tokens)
    assert record.streamed is False
    assert gate.charged == [(usage, wire.body(stream=False)["model"])]
    assert record.cost == 0.25


def test_an_anthropic_stream_reports_the_last_cumulative_output():
    stop = sse("message_stop", {"type": "message_stop"})
    deltas = b"".join(sse("message_delta", {"type": "message_delta", "delta": {},
                                            "usage": {"output_tokens": tokens}})
                      for tokens in (50, 64))
    chunks = cut(b"".join(anthropic_stream()).replace(stop, deltas + stop), 5)

    async def scenario() -> list[ProxyRecord]:
        records: list[ProxyRecord] = []
        async with FakeProvider(streaming(chunks)) as provider, \
                proxy_to(provider.url, gate=FakeGate(), on_record=records.append) as proxy:
            await send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=True))
            return await recorded(records)

    (record,) = run(scenario())
    assert (record.input_tokens, record.output_tokens, record.cache_read_tokens) == (
        1200, 64, 800)


def test_an_openai_stream_without_a_usage_chunk_is_recorded_without_usage_and_not_charged():
    without_usage = re.sub(rb'data: [^\n]*"usage":\{[^\n]*\n\n', b"",
                           b"".join(openai_stream()))

    async def scenario() -> tuple[list[ProxyRecord], FakeGate]:
        records: list[ProxyRecord] = []
        gate = FakeGate()
        async with FakeProvider(streaming(cut(without_usage, 3))) as provider, \
                proxy_to(provider.url, gate=gate, on_record=records.append) as proxy:
            await send(proxy.base_url + OPENAI.path, OPENAI.body(stream=True))
            return await recorded(records), gate

    (record,), gate = run(scenario())
    assert b'"usage":{' not in without_usage and b'"content":"survey."' in without_usage
    assert (record.status, record.input_tokens, record.output_tokens, record.cost) == (
        200, None, None, None)
    assert gate.charged == []


# --------------------------------------------------------------------------------------------
# the gate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_a_refused_request_is_the_providers_own_400_and_never_goes_upstream(wire):
    refusal = Refusal("budget", "the codon plan has spent its $1.00")

    async def scenario() -> tuple[Answer, FakeProvider, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with FakeProvider(streaming(wire.stream())) as provider, \
                proxy_to(provider.url, gate=FakeGate(refusal=refusal),
                         on_record=records.append) as proxy:
            answer = await send(proxy.base_url + wire.path, wire.body(stream=True),
                                headers=wire.headers())
            return answer, provider, await recorded(records)

    answer, provider, (record,) = run(scenario())
    assert answer.status == 400
    assert answer.headers["x-hankweave-refused"] == "budget"
    body = answer.json()
    if wire.name == "anthropic":
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    else:
        assert (body["error"]["type"], body["error"]["code"]) == (
            "invalid_request_error", "budget_exceeded")
        message = body["error"]["message"]
    assert "the codon plan has spent its $1.00" in message
    assert provider.received == []
    assert (record.status, record.refused, record.codon_id) == (400, "budget", "plan")
    assert record.input_tokens is None


def test_a_held_request_waits_for_the_gate_then_goes_upstream():
    async def scenario() -> tuple[Answer, int, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        gate = FakeGate(release=asyncio.Event())
        async with FakeProvider(answering(ANTHROPIC.plain_answer)) as provider, \
                proxy_to(provider.url, gate=gate, on_record=records.append) as proxy:
            sending = asyncio.create_task(
                send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=False)))
            await asyncio.wait_for(gate.asked.wait(), TIMEOUT_S)
            await asyncio.sleep(0.1)
            received_while_held = len(provider.received)
            assert not sending.done()
            gate.release.set()
            answer = await sending
            return answer, received_while_held, await recorded(records)

    answer, received_while_held, (record,) = run(scenario())
    assert received_while_held == 0
    assert (answer.status, answer.json()) == (200, ANTHROPIC.plain_answer)
    assert record.held_ms is not None and record.held_ms >= 90
    assert record.duration_ms >= record.held_ms
    assert record.refused is None


def test_a_held_request_whose_agent_hung_up_never_goes_upstream():
    """A client that gives up waiting (a timeout, then a retry) must not be paid for: its
    request is dropped when the person answers, the retry's goes on."""
    async def scenario() -> tuple[int, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        gate = FakeGate(release=asyncio.Event())
        async with FakeProvider(answering(ANTHROPIC.plain_answer)) as provider, \
                proxy_to(provider.url, gate=gate, on_record=records.append) as proxy:
            sending = asyncio.create_task(
                send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=False)))
            await asyncio.wait_for(gate.asked.wait(), TIMEOUT_S)
            sending.cancel()  # the agent's client times out and closes its connection
            with contextlib.suppress(asyncio.CancelledError):
                await sending
            await asyncio.sleep(0.1)
            gate.release.set()
            await recorded(records)
            return len(provider.received), records

    received, (record,) = run(scenario())
    assert received == 0
    assert record.error == "the agent hung up while the request was held"


# --------------------------------------------------------------------------------------------
# the proxy's own answers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/openai/../../x", "/openai/%2e%2e/%2e%2e/x",
                                  "/openai/chat/..%2F..%2Fx"])
def test_a_path_that_would_leave_the_upstreams_base_url_is_refused(path):
    async def scenario() -> tuple[Answer, list[Received]]:
        async with FakeProvider(answering({})) as provider, proxy_to(provider.url) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                         "Connection: close\r\n\r\n{}".encode())
            raw = await reader.read()
            writer.close()
            status = int(raw.split(b" ", 2)[1])
            body = raw.split(b"\r\n\r\n", 1)[1]
            return Answer(status, {}, body), provider.received

    answer, received = run(scenario())
    assert answer.status == 400 and b"`..`" in answer.body
    assert received == []


def test_the_path_goes_upstream_as_the_agent_encoded_it_and_is_recorded_without_query():
    async def scenario() -> tuple[list[Received], list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with FakeProvider(answering({})) as provider, \
                proxy_to(provider.url, on_record=records.append) as proxy:
            await send(proxy.base_url + "/openai/chat%3Fa=1%23frag?x=1", {})
            return provider.received, await recorded(records)

    (received,), (record,) = run(scenario())
    assert received.raw_path == "/v1/chat%3Fa=1%23frag?x=1"
    assert record.path == "/chat%3Fa=1%23frag"


def test_a_gateway_credential_in_the_upstream_url_is_used_masked_and_never_recorded():
    async def scenario() -> tuple[list[Received], Answer, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with FakeProvider(answering({})) as provider:
            gateway = provider.url.replace("http://", "http://gw:GWPASS-SECRET@")
            async with proxy_to(gateway, on_record=records.append) as proxy:
                await send(proxy.base_url + "/anthropic/v1/messages", {})
                await send(proxy.base_url + "/anthropic/v1/messages", {},
                           headers={"authorization": "Bearer agent-own"})
            async with proxy_to(f"http://gw:GWPASS-SECRET@127.0.0.1:{closed_port()}",
                                on_record=records.append) as proxy:
                down = await send(proxy.base_url + "/anthropic/v1/messages", {})
            return provider.received, down, await recorded(records, 3)

    received, down, records = run(scenario())
    assert received[0].headers["authorization"].startswith("Basic ")  # the gateway's
    assert received[1].headers["authorization"] == "Bearer agent-own"  # the agent's wins
    assert down.status == 502 and b"GWPASS" not in down.body and b"gw:***@" in down.body
    assert not any("GWPASS" in json.dumps(r.to_json()) for r in records)


def test_a_body_that_never_arrives_is_answered_and_the_proxy_goes_on(monkeypatch):
    from hankweave.proxy import server

    monkeypatch.setattr(server, "BODY_TIMEOUT_S", 0.2)

    async def scenario() -> tuple[bytes, Answer]:
        async with FakeProvider(answering({})) as provider, proxy_to(provider.url) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Length: 100\r\n\r\n{")
            stalled = await asyncio.wait_for(reader.readline(), TIMEOUT_S)
            writer.close()
            return stalled, await send(proxy.base_url + "/anthropic/v1/messages", {})

    stalled, after = run(scenario())
    assert stalled.startswith(b"HTTP/1.1 408")
    assert after.status == 200


def test_health_answers_ok_and_an_unknown_upstream_is_404():
    async def scenario() -> tuple[Answer, Answer]:
        async with FakeProvider(answering({})) as provider, proxy_to(provider.url) as proxy:
            return (await send(proxy.base_url + "/health", method="GET"),
                    await send(proxy.base_url + "/mistral/v1/chat/completions", {}))

    health, unknown = run(scenario())
    assert health.status == 200
    assert health.json()["status"] == "ok"
    assert health.json()["upstreams"] == ["anthropic", "openai"]
    assert unknown.status == 404
    assert "mistral" in unknown.json()["error"]["message"]


def test_a_request_for_another_host_name_is_refused_before_anything():
    """A web page reaching the proxy by DNS rebinding names its own host: 403, not relayed."""
    async def scenario() -> tuple[Answer, Answer, Answer, list[Received]]:
        async with FakeProvider(answering({})) as provider, proxy_to(provider.url) as proxy:
            foreign = {"host": f"evil.example:{proxy.port}"}
            return (await send(proxy.base_url + "/anthropic/v1/messages", {}, headers=foreign),
                    await send(proxy.base_url + "/health", method="GET", headers=foreign),
                    await send(proxy.base_url + "/anthropic/v1/messages", {},
                               headers={"host": f"localhost:{proxy.port}"}),
                    provider.received)

    relayed, health, local, received = run(scenario())
    assert (relayed.status, health.status, local.status) == (403, 403, 200)
    assert len(received) == 1


@pytest.mark.parametrize("wire", WIRES)
def test_an_upstream_that_refuses_connections_is_a_502_in_the_providers_shape(wire):
    url = f"http://127.0.0.1:{closed_port()}"

    async def scenario() -> tuple[Answer, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with proxy_to(url, on_record=records.append) as proxy:
            answer = await send(proxy.base_url + wire.path, wire.body(stream=True))
            return answer, await recorded(records)

    answer, (record,) = run(scenario())
    assert answer.status == 502
    body = answer.json()
    if wire.name == "anthropic":
        assert (body["type"], body["error"]["type"]) == ("error", "api_error")
    else:
        assert body["error"]["type"] == "api_error"
    assert url in body["error"]["message"]
    assert record.status == 502
    assert record.error is not None and url in record.error


# --------------------------------------------------------------------------------------------
# middleware
# --------------------------------------------------------------------------------------------


class Tagging(ProxyMiddleware):
    name = "tagging"

    async def on_request(self, request: ProxyRequest) -> ProxyReply | None:
        request.headers["x-team"] = "research"
        return None


class Answering(ProxyMiddleware):
    name = "answering"

    async def on_request(self, request: ProxyRequest) -> ProxyReply | None:
        return ProxyReply(200, {"answered": "by middleware"}, headers={"x-cached": "yes"})


class Exploding(ProxyMiddleware):
    """Fails every request for the model ``explode``."""

    name = "exploding"

    async def on_request(self, request: ProxyRequest) -> ProxyReply | None:
        if request.model == "explode":
            raise RuntimeError("boom")
        return None


class Relabelling(ProxyMiddleware):
    name = "relabelling"

    async def on_response(self, request: ProxyRequest, response: ProxyResponseHead) -> None:
        response.headers["x-request-id"] = "req_proxied"
        response.headers["x-proxied"] = "yes"


def test_middleware_can_add_a_header_the_upstream_receives():
    async def scenario() -> FakeProvider:
        async with FakeProvider(answering(ANTHROPIC.plain_answer)) as provider, \
                proxy_to(provider.url, middleware=[Tagging()]) as proxy:
            await send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=False),
                       headers=ANTHROPIC.headers())
            return provider

    provider = run(scenario())
    (received,) = provider.received
    assert received.headers["x-team"] == "research"
    assert received.headers["x-api-key"] == ANTHROPIC_KEY
    assert received.path == "/v1/messages?beta=true"
    assert json.loads(received.body) == ANTHROPIC.body(stream=False)


def test_middleware_can_answer_a_request_without_the_upstream():
    async def scenario() -> tuple[Answer, FakeProvider, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with FakeProvider(answering(ANTHROPIC.plain_answer)) as provider, \
                proxy_to(provider.url, middleware=[Answering(), Tagging()],
                         on_record=records.append) as proxy:
            answer = await send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=False))
            return answer, provider, await recorded(records)

    answer, provider, (record,) = run(scenario())
    assert (answer.status, answer.json()) == (200, {"answered": "by middleware"})
    assert answer.headers["x-cached"] == "yes"
    assert provider.received == []
    assert (record.status, record.refused) == (200, "middleware")


@pytest.mark.parametrize("wire", WIRES)
def test_a_failing_middleware_is_a_500_in_the_providers_shape_and_the_next_request_goes(wire):
    async def scenario() -> tuple[Answer, Answer, list[ProxyRecord]]:
        records: list[ProxyRecord] = []
        async with FakeProvider(answering(wire.plain_answer)) as provider, \
                proxy_to(provider.url, middleware=[Exploding()],
                         on_record=records.append) as proxy:
            failed = await send(proxy.base_url + wire.path,
                                wire.body(stream=False, model="explode"))
            served = await send(proxy.base_url + wire.path, wire.body(stream=False))
            return failed, served, await recorded(records, 2)

    failed, served, (first, second) = run(scenario())
    assert failed.status == 500
    body = failed.json()
    if wire.name == "anthropic":
        assert (body["type"], body["error"]["type"]) == ("error", "api_error")
    else:
        assert body["error"]["type"] == "api_error"
    assert "hankweave proxy: RuntimeError" in body["error"]["message"]
    assert first.status == 500
    assert first.error is not None and first.error.startswith("RuntimeError")
    assert (served.status, served.json()) == (200, wire.plain_answer)
    assert (second.status, second.error) == (200, None)


def test_middleware_can_change_a_response_header():
    async def scenario() -> Answer:
        async with FakeProvider(streaming(ANTHROPIC.stream())) as provider, \
                proxy_to(provider.url, middleware=[Relabelling()]) as proxy:
            return await send(proxy.base_url + ANTHROPIC.path, ANTHROPIC.body(stream=True))

    answer = run(scenario())
    assert answer.headers.getall("x-request-id") == ["req_proxied"]
    assert answer.headers["x-proxied"] == "yes"
    assert answer.body == b"".join(ANTHROPIC.stream())


# --------------------------------------------------------------------------------------------
# its port
# --------------------------------------------------------------------------------------------


def test_a_taken_port_falls_back_to_a_free_one():
    async def scenario(taken: int) -> tuple[int | None, Answer]:
        async with proxy_to(f"http://127.0.0.1:{closed_port()}", port=taken) as proxy:
            return proxy.port, await send(proxy.base_url + "/health", method="GET")

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        port, health = run(scenario(taken))
    assert port not in (None, taken)
    assert health.status == 200


def test_a_taken_port_is_an_error_without_the_fallback():
    async def scenario(taken: int) -> None:
        async with proxy_to(f"http://127.0.0.1:{closed_port()}", port=taken,
                            fallback_port=False):
            pass

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(OSError):
            run(scenario(holder.getsockname()[1]))


def test_the_log_file_is_private_even_when_the_umask_is_wide(tmp_path):
    log_path = tmp_path / "proxy" / "requests.jsonl"

    async def scenario() -> None:
        async with proxy_to(f"http://127.0.0.1:{closed_port()}", log_path=log_path):
            pass

    previous = os.umask(0)
    try:
        run(scenario())
    finally:
        os.umask(previous)
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700
