"""``ProxyMiddlewareContract``: the behaviour every LLM proxy middleware must have.

A middleware's test module subclasses it, names the class and the plugin that registers it,
and gives a valid ``config``::

    class TestMyMiddleware(ProxyMiddlewareContract):
        middleware_class = MyMiddleware
        plugin = "my_package.plugin"     # the module (or object) with register_proxy_middleware
        entry_point = "my-middleware"    # optional: also check the installed entry point

        def config(self, tmp_path):
            return {"set": {"x-team": "research"}}

pytest then runs every ``test_*`` method below against it: it is registered under its name by
its plugin's hook; it builds from its ``Config`` as a run builds it (and its settings are
strict); its hooks are coroutines that return promptly on a sample request of each wire
protocol, ``on_request`` returning None or a :class:`~hankweave.proxy.types.ProxyReply` and
leaving the request sendable; it never shows a credential the agent sent (in its ``repr``, its
``str``, its log records or its reply); and, through a real :class:`LlmProxy` in front of the
mock provider, every request of each protocol is answered and recorded.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from pydantic import BaseModel, ValidationError

from hankweave.proxy.types import (
    ProxyMiddleware,
    ProxyRecord,
    ProxyReply,
    ProxyRequest,
    ProxyResponseHead,
    WireProtocol,
)

T = TypeVar("T")

ANTHROPIC_KEY = "sk-ant-contract-0000-never-shown-aaaa"
OPENAI_KEY = "sk-proj-contract-0000-never-shown-bbbb"
OPENROUTER_KEY = "sk-or-v1-contract-0000-never-shown-cccc"
SESSION_COOKIE = "session=contract-0000-never-shown-dddd"
CREDENTIALS = (ANTHROPIC_KEY, OPENAI_KEY, OPENROUTER_KEY, SESSION_COOKIE)
"""The credentials the sample requests carry: none may appear in what a middleware shows."""


@dataclass(frozen=True)
class SampleRequest:
    """One agent request as the proxy would hand it to middleware."""

    label: str
    upstream: str
    protocol: WireProtocol
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]

    def build(self, codon_id: str | None = "draft") -> ProxyRequest:
        return ProxyRequest(upstream=self.upstream, protocol=self.protocol, method="POST",
                            path=self.path, headers=dict(self.headers),
                            body=json.dumps(self.body).encode(), codon_id=codon_id)


_CHAT = [{"role": "user", "content": "Say hello."}]
SAMPLE_REQUESTS = (
    SampleRequest("anthropic-messages", "anthropic", "anthropic", "/v1/messages?beta=true",
                  {"content-type": "application/json", "accept": "application/json",
                   "anthropic-version": "2023-06-01", "x-api-key": ANTHROPIC_KEY,
                   "user-agent": "claude-cli/2.0.0 (external, sdk-cli)"},
                  {"model": "claude-haiku-4-5", "max_tokens": 64, "stream": True,
                   "messages": _CHAT}),
    SampleRequest("openai-chat", "openai", "openai", "/chat/completions",
                  {"content-type": "application/json", "authorization": f"Bearer {OPENAI_KEY}",
                   "cookie": SESSION_COOKIE, "user-agent": "litellm/1.60"},
                  {"model": "gpt-5.2", "messages": _CHAT}),
    SampleRequest("openrouter-chat", "openrouter", "openai", "/chat/completions",
                  {"content-type": "application/json",
                   "authorization": f"Bearer {OPENROUTER_KEY}"},
                  {"model": "deepseek/deepseek-chat", "stream": True, "messages": _CHAT}),
)
"""A request of each wire protocol and upstream the proxy serves, credentials included."""

_MOCK_SCRIPT = {"rules": [], "default": {"text": "Hello from the mock provider."}}


def sample_record(request: ProxyRequest, status: int = 200) -> ProxyRecord:
    """What the proxy would record of ``request`` once answered."""
    return ProxyRecord(request_id="contract-1", at="2026-12-01T10:00:00.000Z",
                       codon_id=request.codon_id, upstream=request.upstream,
                       method=request.method, path=request.path.split("?", 1)[0],
                       model=request.model, streamed=request.streamed, status=status,
                       input_tokens=12, output_tokens=7, ttfb_ms=3.0, duration_ms=9.5,
                       request_bytes=len(request.body), response_bytes=420)


def _ids(sample: SampleRequest) -> str:
    return sample.label


class ProxyMiddlewareContract:
    """The behaviour every proxy middleware must have (see the module docstring)."""

    middleware_class: ClassVar[type[ProxyMiddleware]]
    plugin: ClassVar[object]
    """What registers the class through ``register_proxy_middleware``: the plugin module's
    dotted name, or the module or object itself."""
    entry_point: ClassVar[str | None] = None
    """The ``hankweave`` entry point of the installed distribution (None: not checked)."""
    prompt_s: ClassVar[float] = 1.0
    """How long one hook may take on a sample request: they run on the proxy's event loop,
    between every agent and its provider."""

    def config(self, tmp_path: Path) -> dict[str, Any]:
        """A valid ``config`` section (``proxy.middleware[].config``) for the middleware."""
        return {}

    def build(self, tmp_path: Path) -> ProxyMiddleware:
        """The middleware as a run builds it, from its validated settings."""
        cls = self.middleware_class
        return cls(cls.Config.model_validate(self.config(tmp_path)))

    def _plugin(self) -> object:
        return importlib.import_module(self.plugin) if isinstance(self.plugin, str) \
            else self.plugin

    def _within(self, awaitable: Awaitable[T], what: str) -> T:
        """Await one hook's result, which must come within :attr:`prompt_s`: waiting too long
        fails, and so does blocking the loop that long (which no timeout can interrupt)."""
        assert inspect.isawaitable(awaitable), (
            f"{what} returned {type(awaitable).__name__}, not an awaitable: make it async def")
        slow = (f"{what} took more than {self.prompt_s}s: middleware run on the proxy's event"
                " loop, between every agent and its provider, and must not block")

        async def bounded() -> T:
            began = time.monotonic()
            try:
                result = await asyncio.wait_for(awaitable, self.prompt_s)
            except TimeoutError:
                raise AssertionError(slow) from None
            assert time.monotonic() - began <= self.prompt_s, slow
            return result

        return asyncio.run(bounded())

    # ----- what it is -----

    def test_it_is_a_named_middleware(self) -> None:
        cls = self.middleware_class
        assert issubclass(cls, ProxyMiddleware) and cls is not ProxyMiddleware
        assert isinstance(cls.name, str) and cls.name.strip() == cls.name and cls.name
        assert issubclass(cls.Config, BaseModel)

    def test_its_plugin_registers_it_under_its_name(self) -> None:
        from hankweave.plugins import make_plugin_manager
        from hankweave.registry import Registry

        pm = make_plugin_manager(load_entrypoints=False, env={})
        pm.register(self._plugin(), name="plugin-under-contract")
        registry = Registry(pm)
        assert registry.proxy_middleware().get(self.middleware_class.name) \
            is self.middleware_class
        assert registry.registered_by("proxy middleware", self.middleware_class.name) \
            == "plugin-under-contract"

    def test_its_installed_entry_point_registers_it(self) -> None:
        if self.entry_point is None:
            pytest.skip("no entry_point given")
        from hankweave.plugins import make_plugin_manager
        from hankweave.registry import Registry

        pm = make_plugin_manager(env={"HANKWEAVE_LOAD_PLUGINS": self.entry_point}, strict=True)
        found = Registry(pm).proxy_middleware().get(self.middleware_class.name)
        assert found is not None, (f"the entry point {self.entry_point!r} registers no proxy"
                                   f" middleware named {self.middleware_class.name!r}: is the"
                                   " distribution installed?")
        assert found.__module__ == self.middleware_class.__module__
        assert found.__qualname__ == self.middleware_class.__qualname__

    # ----- its settings -----

    def test_it_builds_from_its_settings_as_a_run_does(self, tmp_path: Path) -> None:
        from hankweave.app.plugin_settings import build_proxy_middleware
        from hankweave.config.settings import SinkSpec
        from hankweave.plugins import make_plugin_manager
        from hankweave.registry import Registry

        pm = make_plugin_manager(load_entrypoints=False, env={})
        pm.register(self._plugin(), name="plugin-under-contract")
        spec = SinkSpec(name=self.middleware_class.name, config=self.config(tmp_path))
        checked, problems = build_proxy_middleware(Registry(pm), [spec], construct=False)
        assert (checked, problems) == ([], [])
        built, problems = build_proxy_middleware(Registry(pm), [spec])
        assert problems == []
        (middleware,) = built
        assert type(middleware) is self.middleware_class

    def test_its_settings_are_strict(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError) as caught:
            self.middleware_class.Config.model_validate({**self.config(tmp_path),
                                                         "noSuchSetting": 1})
        assert any(error["loc"] == ("noSuchSetting",) for error in caught.value.errors())

    # ----- its hooks -----

    def test_its_hooks_are_coroutine_functions(self) -> None:
        for hook in ("on_request", "on_response", "on_complete"):
            assert inspect.iscoroutinefunction(getattr(self.middleware_class, hook)), (
                f"{self.middleware_class.__name__}.{hook} must be an async def: the proxy"
                " awaits it")

    @pytest.mark.parametrize("sample", SAMPLE_REQUESTS, ids=_ids)
    def test_its_hooks_return_promptly_and_leave_the_request_sendable(
            self, tmp_path: Path, sample: SampleRequest) -> None:
        middleware = self.build(tmp_path)
        request = sample.build()
        reply = self._within(middleware.on_request(request), "on_request")
        assert reply is None or isinstance(reply, ProxyReply), (
            f"on_request returned {type(reply).__name__}: return None (send the request) or"
            " a ProxyReply (answer it)")
        if reply is not None:
            assert isinstance(reply.status, int) and 100 <= reply.status <= 599
            json.dumps(reply.body)  # the agent gets it as JSON
            assert all(isinstance(name, str) and isinstance(value, str)
                       for name, value in dict(reply.headers).items())
            assert isinstance(reply.reason, str) and reply.reason
        assert isinstance(request.body, bytes)
        assert isinstance(request.path, str) and request.path.startswith("/")
        for name, value in request.headers.items():
            assert isinstance(name, str) and name == name.lower(), (
                f"header {name!r}: the proxy hands over lower-case names; set them so, or the"
                " agent's own header of that name is sent as well")
            assert isinstance(value, str) and "\r" not in value and "\n" not in value, (
                f"header {name!r} has a value that is not one line")
        if reply is None:
            head = ProxyResponseHead(200, {"content-type": "text/event-stream",
                                           "request-id": "req_contract"})
            assert self._within(middleware.on_response(request, head), "on_response") is None
            assert isinstance(head.status, int) and 100 <= head.status <= 599
        status = reply.status if reply is not None else 200
        done = self._within(middleware.on_complete(request, sample_record(request, status)),
                            "on_complete")
        assert done is None

    def test_it_never_shows_a_credential_the_agent_sent(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.DEBUG)
        middleware = self.build(tmp_path)
        shown: list[tuple[str, str]] = []
        for sample in SAMPLE_REQUESTS:
            request = sample.build()
            reply = self._within(middleware.on_request(request), "on_request")
            if reply is not None:
                shown.append(("its reply's body", json.dumps(reply.body)))
                shown.append(("its reply's headers", json.dumps(dict(reply.headers))))
            else:
                head = ProxyResponseHead(401, {"content-type": "application/json"})
                self._within(middleware.on_response(request, head), "on_response")
            self._within(middleware.on_complete(request, sample_record(request)),
                         "on_complete")
        shown += [("its repr", repr(middleware)), ("its str", str(middleware)),
                  ("its settings' repr", repr(middleware.config)), ("the logs", caplog.text)]
        shown += [("a log record", record.getMessage()) for record in caplog.records]
        for where, text in shown:
            for credential in CREDENTIALS:
                assert credential not in text, f"{where} shows a credential the agent sent"

    # ----- through the real proxy -----

    def test_through_a_real_proxy_every_request_is_answered_and_recorded(
            self, tmp_path: Path) -> None:
        from hankweave.testing.mock_provider import start_mock_provider

        with start_mock_provider(_MOCK_SCRIPT, log_path=tmp_path / "mock.jsonl") as mock:
            statuses = asyncio.run(self._through_proxy(tmp_path, mock.base_url))
        log = tmp_path / "proxy" / "requests.jsonl"
        records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        assert {protocol for protocol, _ in statuses} == {"anthropic", "openai"}
        assert len(records) == len(statuses)
        for record, (protocol, status) in zip(records, statuses, strict=True):
            assert record["status"] == status
            assert "error" not in record, record["error"]
            assert status < 500, f"the agent's {protocol} request got {status}"

    async def _through_proxy(self, tmp_path: Path, mock_url: str) -> list[tuple[str, int]]:
        """Each sample request the proxy's upstreams serve, sent through it: its protocol and
        the status the agent got."""
        import aiohttp

        from hankweave.proxy.server import LlmProxy, upstreams_for

        proxy = LlmProxy(upstreams_for(env={}, anthropic_base_url=None, mock_url=mock_url),
                         middleware=[self.build(tmp_path)],
                         log_path=tmp_path / "proxy" / "requests.jsonl")
        await proxy.start()
        statuses: list[tuple[str, int]] = []
        try:
            async with aiohttp.ClientSession() as session:
                for sample in SAMPLE_REQUESTS:
                    if sample.upstream not in proxy.upstreams:
                        continue  # the mock provider serves anthropic and openai
                    url = f"{proxy.base_url}/{sample.upstream}{sample.path}"
                    async with session.post(url, headers=dict(sample.headers),
                                            data=json.dumps(sample.body)) as response:
                        await response.read()
                        statuses.append((sample.protocol, response.status))
        finally:
            await proxy.stop()
        return statuses


__all__ = ["CREDENTIALS", "SAMPLE_REQUESTS", "ProxyMiddlewareContract", "SampleRequest",
           "sample_record"]
