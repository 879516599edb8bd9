"""The mock provider's HTTP server (aiohttp): both protocols on one port of 127.0.0.1.

Routes: ``POST /v1/messages`` (any query string, any ``anthropic-beta`` header),
``POST /v1/messages/count_tokens``, ``HEAD``/``GET /api/hello``, ``POST /v1/chat/completions``
and ``GET /v1/models``.  aiohttp sets ``TCP_NODELAY`` on every connection, so small replies
are not held back by Nagle's algorithm.  Every request is appended to the request log (JSONL)
with the rule that answered it and what it answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.fsutil import open_private, private_dir
from hankweave.mock_provider.body import MAX_BODY_BYTES, BodyError, parse_body, too_large
from hankweave.mock_provider.requests import ConversationView, Protocol, RuleBook
from hankweave.mock_provider.script import ErrorReply, MockScript, Reply
from hankweave.mock_provider.wire import (
    anthropic_events,
    anthropic_message,
    openai_completion,
    openai_events,
    wire_error,
)

if TYPE_CHECKING:
    from aiohttp import web

HOST = "127.0.0.1"
MOCK_API_KEY = "hankweave-mock-key"
_HANG_POLL_S = 0.05
_SECRET_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization", "cookie"})
_SHUTDOWN_TIMEOUT_S = 2.0


def client_env(base_url: str) -> dict[str, str]:
    """What the real clients need to talk to a mock at ``base_url`` and to nothing else.

    The Claude Code CLI and the ``anthropic`` client read ``ANTHROPIC_BASE_URL`` (no ``/v1``);
    the CLI also needs non-essential traffic off, or it calls home even with a base URL, and
    few retries, or an error reply takes minutes.  The ``openai`` client and litellm read
    ``OPENAI_BASE_URL`` (with ``/v1``); litellm must not fetch its price map at import.
    """
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": MOCK_API_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
        "OPENAI_BASE_URL": f"{base_url}/v1",
        "OPENAI_API_BASE": f"{base_url}/v1",
        "OPENAI_API_KEY": MOCK_API_KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HANKWEAVE_MOCK_PROVIDER_URL": base_url,
    }


class RequestLog:
    """The JSONL request log: one line per request, written as it is answered."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._seq = 0
        self._file = None
        if path is not None:
            # 0600: it holds every prompt (in a run, under .hankweave/: docs/state.md).
            private_dir(path.parent)
            self._file = os.fdopen(open_private(path, os.O_WRONLY | os.O_APPEND), "a",
                                   encoding="utf-8")

    def write(self, entry: dict[str, Any]) -> None:
        self._seq += 1
        if self._file is not None:
            line = {"seq": self._seq, "at": round(time.time(), 3), **entry}
            self._file.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class MockProvider:
    """A scripted provider on 127.0.0.1, in the running event loop.

    ``async with MockProvider(script, log_path=...) as mock:`` starts it on a free port (or
    ``port``); :attr:`base_url`, :attr:`openai_base_url` and :meth:`client_env` tell clients
    where it is.
    """

    def __init__(self, script: MockScript, *, port: int = 0,
                 log_path: Path | None = None) -> None:
        self.script = script
        self.rules = RuleBook(script)
        self.log = RequestLog(log_path)
        self._port = port
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: the Anthropic base URL (clients add ``/v1/...``)."""
        if self.port is None:
            raise RuntimeError("the mock provider is not started")
        return f"http://{HOST}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: the OpenAI base URL."""
        return f"{self.base_url}/v1"

    def client_env(self) -> dict[str, str]:
        return client_env(self.base_url)

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_route("*", "/api/hello", self._hello)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._unknown_route)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                     shutdown_timeout=_SHUTDOWN_TIMEOUT_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self._port)
        try:
            await site.start()
        except BaseException:
            await self.stop()  # a port in use: release the runner and the log file
            raise
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._closing.set()  # ends hanging replies
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.log.close()

    async def __aenter__(self) -> MockProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ----- routes -----

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "anthropic")

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "openai")

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        entry: dict[str, Any] = {"protocol": "anthropic", **_request_facts(request)}
        try:
            body = await _read_body(request)
        except BodyError as exc:
            error = ErrorReply(kind="invalid_request", message=str(exc))
            return self._error_response("anthropic", error, ConversationView.of("anthropic", {}),
                                        entry)
        entry.update(model=str(body.get("model", "")), request=body)
        self.log.write({**entry, "status": 200})
        return web.json_response({"input_tokens": max(1, len(json.dumps(body)) // 4)})

    async def _hello(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        self.log.write({**_request_facts(request), "status": 200})
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        names = sorted({rule.when.model.equals for rule in self.script.rules
                        if rule.when.model is not None and rule.when.model.equals} | {"mock"})
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "hankweave-mock"}
            for name in names]})

    async def _unknown_route(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        self.log.write({**_request_facts(request), "status": 404})
        return web.json_response({"type": "error", "error": {
            "type": "not_found_error",
            "message": f"the hankweave mock provider has no route {request.method} {request.path}",
        }}, status=404)

    # ----- replies -----

    async def _answer(self, request: web.Request, protocol: Protocol) -> web.StreamResponse:
        from aiohttp import web

        entry: dict[str, Any] = {"protocol": protocol, **_request_facts(request)}
        try:
            body = await _read_body(request)
        except BodyError as exc:
            error = ErrorReply(kind="invalid_request", message=str(exc))
            return self._error_response(protocol, error, ConversationView.of(protocol, {}),
                                        entry)
        view = ConversationView.of(protocol, body)
        choice = self.rules.choose(view)
        reply = choice.reply
        entry.update(model=view.model, stream=view.stream, turn=view.turn, request=body,
                     rule=self.script.label(choice.index) if choice.index is not None else
                     ("default" if reply is not None else None))
        if choice.step is not None:
            entry["step"] = choice.step
        if reply is None:
            error = ErrorReply(kind="invalid_request", message=_unmatched(view))
            return self._error_response(protocol, error, view, entry)
        entry["reply"] = reply.model_dump(by_alias=True, exclude_defaults=True)
        if reply.delay_ms and not await self._wait(request, reply.delay_ms / 1000):
            # The client gave up (or the mock stops) before the answer was due.
            self.log.write({**entry, "status": None, "abandoned": True})
            return web.Response(status=503)
        if reply.error is not None:
            return self._error_response(protocol, reply.error, view, entry)
        self.log.write({**entry, "status": 200})
        if view.stream:
            return await self._stream(request, protocol, reply, view, body)
        if reply.hang:
            await self._wait(request, None)
        usage = reply.usage or self.script.usage
        whole = (anthropic_message(reply, view, usage) if protocol == "anthropic"
                 else openai_completion(reply, view, usage))
        return web.json_response(whole)

    def _error_response(self, protocol: Protocol, error: ErrorReply, view: ConversationView,
                        entry: dict[str, Any]) -> web.StreamResponse:
        from aiohttp import web

        rendered = wire_error(protocol, error, view)
        self.log.write({**entry, "status": rendered.status, "error": rendered.body})
        headers = {}
        if rendered.retry_after is not None:
            headers["retry-after"] = f"{rendered.retry_after:g}"
        return web.json_response(rendered.body, status=rendered.status, headers=headers)

    async def _stream(self, request: web.Request, protocol: Protocol, reply: Reply,
                      view: ConversationView, body: Mapping[str, Any]) -> web.StreamResponse:
        from aiohttp import web

        usage = reply.usage or self.script.usage
        frames: Iterator[bytes]
        if protocol == "anthropic":
            frames = anthropic_events(reply, view, usage)
        else:
            options = body.get("stream_options")
            include = isinstance(options, dict) and options.get("include_usage") is True
            frames = openai_events(reply, view, usage, include)
        response = web.StreamResponse(headers={"content-type": "text/event-stream",
                                               "cache-control": "no-cache"})
        try:
            await response.prepare(request)
            for sent, frame in enumerate(frames):
                if reply.drop_after_events is not None and sent >= reply.drop_after_events:
                    if request.transport is not None:
                        request.transport.abort()  # a connection dropped mid-stream
                    return response
                await response.write(frame)
                if reply.hang:
                    await self._wait(request, None)
                    return response
                if reply.chunk_delay_ms and not await self._wait(
                        request, reply.chunk_delay_ms / 1000):
                    return response
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away mid-stream: nothing left to answer
        return response

    async def _wait(self, request: web.Request, seconds: float | None) -> bool:
        """Wait ``seconds`` (None: for ever); True unless the client went away or the mock
        is stopping first."""
        deadline = None if seconds is None else asyncio.get_running_loop().time() + seconds
        while not self._closing.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                return False
            left = _HANG_POLL_S if deadline is None else deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return True
            await self._sleep(min(left, _HANG_POLL_S))
        return False

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)


async def _read_body(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object (:func:`~hankweave.mock_provider.body.parse_body`); a declared
    length over the limit is refused before anything is read, and aiohttp stops reading an
    undeclared one at the same limit (``client_max_size``)."""
    from aiohttp import web

    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise too_large(request.content_length)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large() from None
    return parse_body(raw)


def _request_facts(request: web.Request) -> dict[str, Any]:
    """What the log records of any request besides its body: method, path, query string (when
    there is one), the headers (names in lower case; credentials left out) and which key was
    sent."""
    facts: dict[str, Any] = {"method": request.method, "path": request.path}
    if request.query_string:
        facts["query"] = request.query_string
    facts["headers"] = {name.lower(): value for name, value in request.headers.items()
                        if name.lower() not in _SECRET_HEADERS}
    facts["auth"] = _auth_kind(request)
    return facts


def _auth_kind(request: web.Request) -> str:
    """Which key the client sent: ``mock`` (the dummy key a dry run hands out), ``other`` (a
    key from somewhere else: a misconfigured client) or ``none``.  Keys are never logged."""
    sent = request.headers.get("x-api-key") or request.headers.get("authorization") or ""
    key = sent.removeprefix("Bearer ").strip()
    if not key:
        return "none"
    return "mock" if key == MOCK_API_KEY else "other"


_REMINDER = re.compile(r"<system-reminder>.*?(</system-reminder>|$)", re.DOTALL)


def _unmatched(view: ConversationView) -> str:
    # The Claude CLI puts <system-reminder> blocks before the prompt: quote what is left.
    said = _REMINDER.sub("", view.last_user_message or "").strip()[:80]
    return (f"hankweave mock provider: no rule matches this {view.protocol} request "
            f"(model {view.model!r}, turn {view.turn}, last user message {said!r}) and the "
            "script has no default")


class MockProviderThread:
    """A :class:`MockProvider` running in its own thread and event loop, for code that is
    not async (tests with synchronous clients, the ``serve`` command)."""

    def __init__(self, script: MockScript, *, port: int = 0,
                 log_path: Path | None = None) -> None:
        self._args = (script, port, log_path)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.provider: MockProvider | None = None

    def start(self) -> MockProvider:
        self._thread = threading.Thread(target=self._serve, name="hankweave-mock-provider",
                                        daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure
        assert self.provider is not None
        return self.provider

    def stop(self) -> None:
        # A closed loop: already stopped, or the start failed.
        if self._loop is not None and self.provider is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(self.provider.stop(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> MockProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        script, port, log_path = self._args
        self._loop = asyncio.new_event_loop()
        try:
            self.provider = MockProvider(script, port=port, log_path=log_path)
            self._loop.run_until_complete(self.provider.start())
        except BaseException as exc:  # reported to start()'s caller
            self._failure = exc
            self._loop.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()
