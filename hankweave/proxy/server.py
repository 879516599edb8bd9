"""The LLM proxy's HTTP server (aiohttp), on 127.0.0.1 (docs/proxy.md).

Every agent request goes ``http://127.0.0.1:<port>/<upstream>/<path>`` -> the upstream's base
URL + ``<path>``: ``/anthropic/v1/messages`` -> ``https://api.anthropic.com/v1/messages``.  For
each request the proxy:

1. runs the enabled middleware's ``on_request`` (a middleware may answer it itself);
2. asks the runtime's :class:`~hankweave.proxy.types.Gate` whether it may go: past a ceiling it
   is refused with an error in the provider's own shape, at a ceiling that asks it waits for
   the person's answer;
3. sends it upstream as it is (credentials included: the proxy holds no key), asking for an
   uncompressed answer so that it can read the usage;
4. streams the answer back chunk by chunk as it arrives, reading its usage on the way
   (:class:`~hankweave.proxy.meter.UsageMeter`);
5. charges the usage to the codon, records the request (``requests.jsonl``, never a header or
   a body) and reports it (the ``proxy.request`` event).

``GET /health`` answers ``{"status": "ok", ...}``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.faults import proxy_down_at
from hankweave.fsutil import open_private, private_dir, utc_now_iso
from hankweave.hosts import LOCAL_HOST_NAMES, host_allowed
from hankweave.providers import ANTHROPIC_API_URL, PROXY_ANTHROPIC_UPSTREAM_ENV, PROXY_URL_ENV
from hankweave.proxy.meter import UsageMeter
from hankweave.proxy.types import (
    Admission,
    Gate,
    ProxyMiddleware,
    ProxyRecord,
    ProxyReply,
    ProxyRequest,
    ProxyResponseHead,
    WireProtocol,
)
from hankweave.secrets import mask_url_credentials

if TYPE_CHECKING:
    from aiohttp import ClientSession, web

log = logging.getLogger("hankweave.proxy")

HOST = "127.0.0.1"
MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""The Anthropic Messages API's own request limit."""
# Hop-by-hop headers, and those the proxy sets itself (the host, the length, the encoding).
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"})
_CONNECT_TIMEOUT_S = 30.0
BODY_TIMEOUT_S = 60.0
"""How long a request's body may take to arrive (a client that stalls holds a connection)."""
_SHUTDOWN_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Upstream:
    """Where one upstream's requests go."""

    name: str
    url: str
    """Its base URL, as the clients would call it directly (``https://api.openai.com/v1``)."""
    protocol: WireProtocol


def upstreams_for(env: Mapping[str, str], anthropic_base_url: str | None,
                  mock_url: str | None = None) -> tuple[Upstream, ...]:
    """The upstreams of a run: the mock provider's two protocols under ``--mock-provider``,
    else ``anthropicBaseUrl`` (or ``ANTHROPIC_BASE_URL``, or Anthropic's API), OpenAI's
    endpoint (``OPENAI_BASE_URL``/``OPENAI_API_BASE``, or OpenAI's API) and OpenRouter's."""
    if mock_url is not None:
        return (Upstream("anthropic", mock_url, "anthropic"),
                Upstream("openai", f"{mock_url}/v1", "openai"))
    return (
        Upstream("anthropic", anthropic_base_url or env.get("ANTHROPIC_BASE_URL")
                 or ANTHROPIC_API_URL, "anthropic"),
        Upstream("openai", env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_BASE")
                 or "https://api.openai.com/v1", "openai"),
        Upstream("openrouter", env.get("OPENROUTER_API_BASE") or "https://openrouter.ai/api/v1",
                 "openai"))


def provider_error(protocol: WireProtocol, kind: str, message: str, *,
                   code: str | None = None) -> dict[str, Any]:
    """An error body as the provider would send it (``kind``: Anthropic's error type;
    ``code``: OpenAI's error code)."""
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _error(protocol: WireProtocol, status: int, kind: str, message: str) -> web.StreamResponse:
    """The agent's answer when the proxy cannot relay its request."""
    from aiohttp import web

    return web.json_response(provider_error(protocol, kind, message), status=status)


class ProxyLog:
    """``.hankweave/proxy/requests.jsonl``: one line per request, written when it is done."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file = None
        if path is not None:
            private_dir(path.parent)
            self._file = os.fdopen(open_private(path, os.O_WRONLY | os.O_APPEND), "a",
                                   encoding="utf-8")

    def write(self, record: ProxyRecord) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class LlmProxy:
    """The proxy, in the running event loop: ``await proxy.start()`` ... ``await proxy.stop()``."""

    def __init__(self, upstreams: Sequence[Upstream], *, gate: Gate | None = None,
                 middleware: Sequence[ProxyMiddleware] = (), log_path: Path | None = None,
                 on_record: Callable[[ProxyRecord], object] | None = None,
                 port: int = 0, fallback_port: bool = True) -> None:
        self.upstreams = {upstream.name: upstream for upstream in upstreams}
        self._targets = {upstream.name: _without_userinfo(upstream.url) for upstream in upstreams}
        self.gate = gate
        self.middleware = tuple(middleware)
        self.log = ProxyLog(log_path)
        self.on_record = on_record
        self._port = port
        self._fallback = fallback_port
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self._ids = itertools.count(1)
        self._prefix = f"{int(time.time() * 1000):x}"
        self.handled = 0
        self._down = False
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the LLM proxy is not started")
        return f"http://{HOST}:{self.port}"

    def client_env(self) -> dict[str, str]:
        """What agents need to call every upstream through the proxy."""
        base = self.base_url
        env = {PROXY_URL_ENV: base}
        for upstream in self.upstreams.values():
            url = f"{base}/{upstream.name}"
            if upstream.name == "anthropic":
                env["ANTHROPIC_BASE_URL"] = url
                env[PROXY_ANTHROPIC_UPSTREAM_ENV] = upstream.url
            elif upstream.name == "openai":
                env["OPENAI_BASE_URL"] = env["OPENAI_API_BASE"] = url
            elif upstream.name == "openrouter":
                env["OPENROUTER_API_BASE"] = url
        return env

    async def start(self) -> None:
        import aiohttp
        from aiohttp import web

        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_get("/health", self._health)
        app.router.add_route("*", "/{upstream}/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                     shutdown_timeout=_SHUTDOWN_TIMEOUT_S)
        await self._runner.setup()
        try:
            await self._bind()
        except BaseException:
            await self.stop()
            raise
        # No decompression: the agent gets the upstream's bytes as they are.
        self._session = aiohttp.ClientSession(
            # No pool limit: every agent stream is one connection, held as long as it runs.
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=_CONNECT_TIMEOUT_S))

    async def _bind(self) -> None:
        from aiohttp import web

        assert self._runner is not None
        try:
            await web.TCPSite(self._runner, HOST, self._port).start()
        except OSError:
            if not (self._fallback and self._port):
                raise
            log.info("port %s is taken: the LLM proxy takes a free one", self._port)
            await web.TCPSite(self._runner, HOST, 0).start()
        self.port = self._runner.addresses[-1][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self.log.close()

    async def answering(self, timeout: float = 2.0) -> str | None:
        """None when the proxy answers its ``/health`` over TCP, else what went wrong."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(HOST, self.port), timeout)
        except (OSError, TimeoutError) as exc:
            return str(exc) or type(exc).__name__
        try:
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Connection: close\r\n\r\n")
            status = await asyncio.wait_for(reader.readline(), timeout)
            if status.split(b" ")[1:2] == [b"200"]:
                return None
            return f"/health answered {status.decode(errors='replace').strip()!r}"
        except (OSError, TimeoutError, IndexError) as exc:
            return str(exc) or type(exc).__name__
        finally:
            writer.close()

    async def _go_down(self, request: web.Request) -> None:
        assert self._runner is not None
        self._down = True  # connections kept alive are cut too
        for site in list(self._runner.sites):
            await site.stop()
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError

    async def _health(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        if not host_allowed(request.headers.get("host"), LOCAL_HOST_NAMES):
            return _foreign_host()

        return web.json_response({"status": "ok", "upstreams": sorted(self.upstreams),
                                  "requests": self.handled})

    # -- one request --

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        began = time.monotonic()
        at = utc_now_iso()
        target = self._target(request)
        if isinstance(target, web.StreamResponse):
            return target
        upstream, tail = target
        try:
            body = await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
        except TimeoutError:
            return _error(
                upstream.protocol, 408, "request_too_slow",
                f"hankweave proxy: the request body did not arrive within {BODY_TIMEOUT_S:g}s")
        proxied = ProxyRequest(
            upstream=upstream.name, protocol=upstream.protocol, method=request.method,
            path=tail + (f"?{request.query_string}" if request.query_string else ""),
            headers={name.lower(): value for name, value in request.headers.items()
                     if name.lower() not in _HOP_BY_HOP},
            body=body, codon_id=self.gate.current_codon() if self.gate is not None else None)
        record = ProxyRecord(request_id=f"{self._prefix}-{next(self._ids)}", at=at,
                             codon_id=proxied.codon_id, upstream=upstream.name,
                             method=request.method, path=tail,
                             model=proxied.model, streamed=proxied.streamed, status=0,
                             duration_ms=0.0, request_bytes=len(body))
        self.handled += 1
        if self._down or self.handled == proxy_down_at():  # test-only (docs/crash-testing.md)
            await self._go_down(request)
        response: web.StreamResponse | None = None
        try:
            reply, admission = await self._decide(proxied, record)
            record.model = proxied.model
            if reply is not None:
                record.refused, record.status = reply.reason, reply.status
                record.ttfb_ms = _ms(began)
                return web.json_response(reply.body, status=reply.status,
                                         headers=dict(reply.headers))
            if _hung_up(request):  # it gave up while held: nobody would read the answer
                record.error = "the agent hung up while the request was held"
                raise asyncio.CancelledError
            response = web.StreamResponse()
            return await self._relay(request, response, proxied, upstream, record,
                                     admission, began)
        except Exception as exc:  # a middleware or the proxy broke: the agent's 500
            log.exception("the LLM proxy failed a request to %s", upstream.name)
            # Only the kind: a middleware's message may quote a header (server.log has it).
            record.error = f"{type(exc).__name__} (.hankweave/logs/server.log has the details)"
            if response is not None and response.prepared:
                raise
            record.status = 500
            return _error(upstream.protocol, 500, "api_error", f"hankweave proxy: {record.error}")
        finally:
            record.duration_ms = _ms(began)
            await self._done(proxied, record)

    def _target(self, request: web.Request) -> tuple[Upstream, str] | web.StreamResponse:
        """The upstream a request is for and its path there, still encoded as the agent sent
        it; or the answer to a request the proxy does not relay."""
        from aiohttp import web

        if not host_allowed(request.headers.get("host"), LOCAL_HOST_NAMES):
            return _foreign_host()  # a web page's request by DNS rebinding
        name = request.match_info["upstream"]
        upstream = self.upstreams.get(name)
        if upstream is None:
            return web.json_response(
                {"error": {"message": f"no upstream {name!r}: the proxy serves"
                           f" /{'/, /'.join(sorted(self.upstreams))}/",
                           "type": "not_found_error"}}, status=404)
        # The raw path, not the decoded one: what reaches the upstream is what the agent sent.
        tail = request.raw_path.split("?", 1)[0][len(name) + 1:] or "/"
        if ".." in urllib.parse.unquote(tail).split("/"):
            return _error(upstream.protocol, 400, "invalid_request_error",
                          "hankweave proxy: a path with `..` would leave the upstream's base URL")
        return upstream, tail

    async def _decide(self, proxied: ProxyRequest, record: ProxyRecord
                      ) -> tuple[ProxyReply | None, Admission]:
        """The middleware's answer, else the runtime's (a refusal, or a wait at a ceiling
        that asks, then a go)."""
        reply = await self._before(proxied)
        if reply is not None or self.gate is None:
            return reply, Admission()
        admission = await self.gate.admit()
        record.codon_id = proxied.codon_id = admission.codon_id
        if admission.held_s >= 0.001:
            record.held_ms = round(admission.held_s * 1000, 1)
        refusal = admission.refusal
        if refusal is None:
            return None, admission
        return ProxyReply(400, provider_error(
            proxied.protocol, "invalid_request_error",
            f"hankweave: {refusal.message}; the request was not sent",
            code="budget_exceeded" if refusal.reason == "budget" else None),
            headers={"x-hankweave-refused": refusal.reason}, reason=refusal.reason), admission

    async def _before(self, request: ProxyRequest) -> ProxyReply | None:
        for middleware in self.middleware:
            reply = await middleware.on_request(request)
            if reply is not None:
                return reply
        return None

    async def _relay(self, request: web.Request, response: web.StreamResponse,
                     proxied: ProxyRequest, upstream: Upstream, record: ProxyRecord,
                     admission: Admission, began: float) -> web.StreamResponse:
        import aiohttp
        import yarl

        assert self._session is not None
        # Middleware may have added any name in any case: the proxy's own rules hold after.
        headers = {name.lower(): value for name, value in proxied.headers.items()
                   if name.lower() not in _HOP_BY_HOP}
        headers["accept-encoding"] = "identity"
        url, gateway = self._targets[upstream.name]
        if gateway is not None:  # the agent's own credential wins over a gateway's in the URL
            headers.setdefault("authorization", gateway)
        try:
            upstream_response = await self._session.request(
                proxied.method, yarl.URL(url.rstrip("/") + proxied.path, encoded=True),
                headers=headers, data=proxied.body, allow_redirects=False)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            shown = mask_url_credentials(f"{upstream.url} ({exc or type(exc).__name__})")
            record.status = 502
            record.error = f"upstream unreachable: {shown}"
            return _error(upstream.protocol, 502, "api_error",
                          f"hankweave proxy: cannot reach {shown}")
        async with upstream_response:
            # Lower-case names, as the request's: a middleware that sets a header replaces
            # the upstream's instead of sending it twice.
            head = ProxyResponseHead(upstream_response.status, {
                name.lower(): value for name, value in upstream_response.headers.items()
                if name.lower() not in _HOP_BY_HOP})
            for middleware in self.middleware:
                await middleware.on_response(proxied, head)
            record.status = head.status
            response.set_status(head.status)
            response.headers.update(head.headers)
            length = upstream_response.headers.get("content-length")
            if length is not None and length.isdigit():
                response.content_length = int(length)
            meter = UsageMeter(upstream.protocol, record.streamed) if head.status < 300 \
                else None
            try:
                await response.prepare(request)
                await self._stream(upstream_response, response, record, meter, began)
            except (TimeoutError, ConnectionResetError, aiohttp.ClientError) as exc:
                record.error = f"stream cut: {exc or type(exc).__name__}"
                # Cut the agent's connection too: a clean end would pass the part it got off
                # as the whole answer.
                if request.transport is not None:
                    request.transport.abort()
            finally:
                usage = meter.usage() if meter is not None else None
                if usage is not None:
                    record.input_tokens, record.output_tokens = (usage.input_tokens,
                                                                 usage.output_tokens)
                    record.cache_read_tokens = usage.cache_read_tokens
                    record.cache_creation_tokens = usage.cache_creation_tokens
                    record.cost = admission.charge(usage, proxied.model)
            return response

    @staticmethod
    async def _stream(upstream: Any, response: web.StreamResponse, record: ProxyRecord,
                      meter: UsageMeter | None, began: float) -> None:
        """Each chunk to the agent as it arrives, a copy to the meter."""
        async for chunk in upstream.content.iter_any():
            if not record.response_bytes:
                record.ttfb_ms = _ms(began)
            await response.write(chunk)
            record.response_bytes += len(chunk)
            if meter is not None:
                meter.feed(chunk)
        await response.write_eof()

    async def _done(self, request: ProxyRequest, record: ProxyRecord) -> None:
        self.log.write(record)
        if self.on_record is not None:
            try:
                self.on_record(record)
            except Exception:
                log.exception("reporting a proxy request failed")
        for middleware in self.middleware:
            try:
                await middleware.on_complete(request, record)
            except Exception:
                log.exception("proxy middleware %s failed on_complete", middleware.name)


def _without_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without a ``user:password@`` (aiohttp refuses one beside an ``Authorization``
    header), and that user and password as a basic ``Authorization`` value."""
    import yarl

    parsed = yarl.URL(url)
    if parsed.user is None:
        return url, None
    pair = f"{parsed.user}:{parsed.password or ''}".encode()
    return str(parsed.with_user(None)), f"Basic {base64.b64encode(pair).decode()}"


def _hung_up(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _foreign_host() -> web.StreamResponse:
    from aiohttp import web

    return web.json_response({"error": {"message": "hankweave proxy: this server answers to"
                                         " 127.0.0.1 and localhost only", "type": "forbidden"}},
                             status=403)


def _ms(began: float) -> float:
    return round((time.monotonic() - began) * 1000, 2)
