"""The ``headers`` middleware: its settings (what is refused, and how it is said), the headers
it sets, a real LLM proxy in front of the real mock provider, and the kernel's middleware
contract."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hankweave_proxy_headers.middleware import (
    CREDENTIAL_HEADERS,
    PROXY_MANAGED_HEADERS,
    FromEnv,
    HeadersMiddleware,
)
from pydantic import ValidationError

from hankweave.api import LlmProxy, ProxyRequest, upstreams_for
from hankweave.testing import MockProviderLog, ProxyMiddlewareContract, start_mock_provider

SECRET = "sk-ant-api03-never-in-a-message-0123456789"
MOCK_KEY = "hankweave-mock-key"
"""The dummy key the mock provider accepts (it logs which kind of key came, never the key)."""


def settings(**config: Any) -> HeadersMiddleware.Config:
    return HeadersMiddleware.Config.model_validate(config)


def problems(config: dict[str, Any]) -> dict[tuple[Any, ...], str]:
    """Each problem pydantic finds, by location, as the kernel words it (the validator's
    sentence)."""
    with pytest.raises(ValidationError) as caught:
        HeadersMiddleware.Config.model_validate(config)
    assert SECRET not in str(caught.value)
    return {error["loc"]: str(error.get("ctx", {}).get("error", error["msg"]))
            for error in caught.value.errors()}


def request(upstream: str = "anthropic", **headers: str) -> ProxyRequest:
    return ProxyRequest(upstream=upstream, protocol="openai" if upstream != "anthropic"
                        else "anthropic", method="POST", path="/v1/messages",
                        headers={"content-type": "application/json", **headers},
                        body=b'{"model": "claude-haiku-4-5", "messages": []}')


def applied(middleware: HeadersMiddleware, sent: ProxyRequest) -> dict[str, str]:
    assert asyncio.run(middleware.on_request(sent)) is None
    return sent.headers


# ----- settings -----

def test_valid_settings_keep_lower_case_names_and_env_references() -> None:
    config = settings(set={"X-Team": "research", "x-route": {"env": "ROUTE"}},
                      upstreams=["anthropic", "openrouter"])
    assert config.set == {"x-team": "research", "x-route": FromEnv(env="ROUTE")}
    assert config.upstreams == ["anthropic", "openrouter"]
    assert settings(set={"a": ""}).set == {"a": ""}  # an empty value is a value
    assert settings(set={"x-tab": "a\tb"}).upstreams is None  # tabs are allowed in a value


@pytest.mark.parametrize("name", ["Bad Name", "x-team:", "x/team", "", "x-tëam", "x\nfoo"])
def test_a_name_that_is_not_a_token_is_refused(name: str) -> None:
    found = problems({"set": {name: "research"}})
    assert "is not a header name" in found[("set", name)]


@pytest.mark.parametrize("name", [*sorted(CREDENTIAL_HEADERS), "Authorization", "X-API-Key"])
def test_a_credential_header_is_refused_and_the_message_says_why(name: str) -> None:
    found = problems({"set": {name: SECRET}})
    message = found[("set", name)]
    assert "credential header" in message
    assert "credentials stay with the agent" in message
    assert "must never be written into hankweave.json" in message


def test_a_credential_header_is_refused_even_from_the_environment() -> None:
    found = problems({"set": {"x-api-key": {"env": "ANTHROPIC_API_KEY"}}})
    assert "credentials stay with the agent" in found[("set", "x-api-key")]


@pytest.mark.parametrize("name", [*sorted(PROXY_MANAGED_HEADERS), "Host", "Content-Length"])
def test_a_hop_by_hop_or_framing_header_is_refused(name: str) -> None:
    assert "the proxy sets" in problems({"set": {name: "x"}})[("set", name)]


@pytest.mark.parametrize("value", ["a\r\nx-injected: 1", "line\n", "a\rb", "nul\x00", "\x7f"])
def test_a_value_that_is_not_one_line_is_refused_without_being_quoted(value: str) -> None:
    message = problems({"set": {"x-team": value}})[("set", "x-team")]
    assert message == ('the value of "x-team" must be one line: no CR, LF or other control'
                       " character")


@pytest.mark.parametrize("value", ["équipe", "snow \u2603", "caf\xe9"])
def test_a_value_that_is_not_ascii_is_refused_without_being_quoted(value: str) -> None:
    message = problems({"set": {"x-team": value}})[("set", "x-team")]
    assert message.startswith('the value of "x-team" must be ASCII text')
    assert value not in message


@pytest.mark.parametrize("value", [5, None, ["a"], {"value": SECRET}, {"env": "X", "x": 1}])
def test_a_value_that_is_not_a_string_nor_an_env_reference_is_refused(value: Any) -> None:
    message = problems({"set": {"x-team": value}})[("set", "x-team")]
    assert 'must be a string, or {"env": "NAME"}' in message


@pytest.mark.parametrize("variable", ["1ROUTE", "A-B", "", 7])
def test_an_env_reference_must_name_a_variable(variable: Any) -> None:
    assert "must name an environment variable" in problems(
        {"set": {"x-route": {"env": variable}}})[("set", "x-route")]


def test_the_same_header_twice_in_two_cases_is_refused() -> None:
    found = problems({"set": {"x-team": "a", "X-Team": "b"}})
    assert found[("set", "X-Team")] == ('"X-Team" and "x-team" are the same header (names are'
                                        " not case-sensitive): set it once")


def test_every_bad_header_is_reported_at_its_own_path_at_once() -> None:
    found = problems({"set": {"Bad Name": "x", "authorization": SECRET, "x-ok": "fine",
                              "host": "h"}})
    assert set(found) == {("set", "Bad Name"), ("set", "authorization"), ("set", "host")}


@pytest.mark.parametrize("config", [{}, {"set": {}}, {"set": ["x-team"]}, {"set": "x-team"}])
def test_set_must_name_at_least_one_header(config: dict[str, Any]) -> None:
    assert ("set",) in problems(config)


@pytest.mark.parametrize("upstreams", [[], ["Anthropic"], ["anthropic/v1"], [""], [3], "openai"])
def test_upstreams_must_be_upstream_names(upstreams: Any) -> None:
    found = problems({"set": {"x-team": "a"}, "upstreams": upstreams})
    assert any(loc[0] == "upstreams" for loc in found)


def test_unknown_settings_are_refused() -> None:
    assert ("headers",) in problems({"set": {"x-team": "a"}, "headers": {}})


# ----- building it -----

def test_an_env_reference_is_read_when_it_is_built() -> None:
    config = settings(set={"x-route": {"env": "ROUTE"}, "x-team": "research"})
    middleware = HeadersMiddleware(config, env={"ROUTE": "eu-west"})
    assert applied(middleware, request()) == {"content-type": "application/json",
                                              "x-route": "eu-west", "x-team": "research"}


def test_an_unset_variable_stops_it_being_built_naming_the_variable() -> None:
    config = settings(set={"x-route": {"env": "ROUTE"}})
    with pytest.raises(ValueError, match=r'set.x-route: \{"env": "ROUTE"\} names ROUTE, which'
                                         r" is not set \(or is empty\)"):
        HeadersMiddleware(config, env={})
    with pytest.raises(ValueError, match="is not set"):
        HeadersMiddleware(config, env={"ROUTE": ""})


def test_a_variable_that_is_not_one_line_is_refused_without_being_quoted() -> None:
    config = settings(set={"x-route": {"env": "ROUTE"}})
    with pytest.raises(ValueError) as caught:
        HeadersMiddleware(config, env={"ROUTE": f"{SECRET}\r\nx-injected: 1"})
    assert "the value of ROUTE must be one line" in str(caught.value)
    assert SECRET not in str(caught.value)
    with pytest.raises(ValueError, match="the value of ROUTE must be ASCII text"):
        HeadersMiddleware(config, env={"ROUTE": "équipe"})


def test_it_is_built_only_from_its_validated_settings() -> None:
    with pytest.raises(TypeError, match="validated settings"):
        HeadersMiddleware(None)


def test_neither_its_repr_nor_its_settings_repr_nor_its_logs_show_a_value(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    config = settings(set={"x-team": "research-team-value", "x-route": {"env": "ROUTE"}})
    middleware = HeadersMiddleware(config, env={"ROUTE": "route-from-env-value"})
    applied(middleware, request())
    assert repr(middleware) == "HeadersMiddleware(set=['x-route', 'x-team'], upstreams=None)"
    for text in (repr(middleware), str(middleware), repr(config), str(config), caplog.text):
        assert "research-team-value" not in text and "route-from-env-value" not in text
    assert "x-team" in caplog.text  # the names are what it logs


# ----- what it does to a request -----

def test_it_adds_headers_and_replaces_the_agents_own_of_the_same_name() -> None:
    middleware = HeadersMiddleware(settings(set={"X-Team": "research", "user-agent": "ours"}))
    sent = request(**{"user-agent": "claude-cli/2.0", "x-api-key": MOCK_KEY})
    assert applied(middleware, sent) == {"content-type": "application/json",
                                         "user-agent": "ours", "x-api-key": MOCK_KEY,
                                         "x-team": "research"}


def test_upstreams_limit_it_to_the_requests_to_those_upstreams() -> None:
    middleware = HeadersMiddleware(settings(set={"x-team": "research"},
                                            upstreams=["openai", "openrouter"]))
    assert "x-team" not in applied(middleware, request("anthropic"))
    assert applied(middleware, request("openai"))["x-team"] == "research"
    assert applied(middleware, request("openrouter"))["x-team"] == "research"


# ----- through a real LLM proxy, in front of the real mock provider -----

SCRIPT = {"rules": [], "default": {"text": "Hello from the mock."}}


async def send_through_proxy(middleware: HeadersMiddleware, mock_url: str,
                             log_path: Path) -> list[int]:
    """An Anthropic and an OpenAI request, as their clients send them, through a real proxy."""
    import aiohttp

    proxy = LlmProxy(upstreams_for(env={}, anthropic_base_url=None, mock_url=mock_url),
                     middleware=[middleware], log_path=log_path)
    await proxy.start()
    statuses = []
    try:
        async with aiohttp.ClientSession() as session:
            for url, headers, body in [
                (f"{proxy.base_url}/anthropic/v1/messages",
                 {"x-api-key": MOCK_KEY, "anthropic-version": "2023-06-01",
                  "X-Team": "the-agents-own"},
                 {"model": "claude-haiku-4-5", "max_tokens": 32,
                  "messages": [{"role": "user", "content": "Hello?"}]}),
                (f"{proxy.base_url}/openai/chat/completions",
                 {"authorization": f"Bearer {MOCK_KEY}"},
                 {"model": "gpt-5.2", "messages": [{"role": "user", "content": "Hello?"}]}),
            ]:
                async with session.post(url, headers=headers, json=body) as response:
                    await response.read()
                    statuses.append(response.status)
    finally:
        await proxy.stop()
    return statuses


def run_through_proxy(tmp_path: Path, **config: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """What the mock provider logged of each request (its headers, the kind of key), and the
    proxy's request log's lines."""
    mock_log, proxy_log = tmp_path / "mock.jsonl", tmp_path / "proxy" / "requests.jsonl"
    middleware = HeadersMiddleware(settings(**config))
    with start_mock_provider(SCRIPT, log_path=mock_log) as mock:
        statuses = asyncio.run(send_through_proxy(middleware, mock.base_url, proxy_log))
    assert statuses == [200, 200]
    logged = [dict(entry.entry) for entry in MockProviderLog(mock_log).requests()]
    assert [entry["protocol"] for entry in logged] == ["anthropic", "openai"]
    return logged, proxy_log.read_text(encoding="utf-8").splitlines()


def test_through_a_real_proxy_the_provider_gets_the_headers(tmp_path: Path) -> None:
    logged, records = run_through_proxy(tmp_path, set={"X-Team": "research",
                                                       "x-cost-centre": "cc-42"})
    for entry in logged:
        assert entry["headers"]["x-team"] == "research"  # the agent's own was replaced
        assert entry["headers"]["x-cost-centre"] == "cc-42"
        assert entry["auth"] == "mock"  # the agent's credentials went through as they were
    assert len(records) == 2
    for line in records:  # the proxy records no header
        assert "research" not in line and "cc-42" not in line
        assert json.loads(line)["status"] == 200


def test_through_a_real_proxy_upstreams_filter_the_requests(tmp_path: Path) -> None:
    logged, records = run_through_proxy(tmp_path, set={"x-cost-centre": "cc-42"},
                                        upstreams=["openai"])
    anthropic, openai = logged
    assert "x-cost-centre" not in anthropic["headers"]
    assert anthropic["headers"]["x-team"] == "the-agents-own"
    assert openai["headers"]["x-cost-centre"] == "cc-42"
    assert [json.loads(line)["upstream"] for line in records] == ["anthropic", "openai"]


# ----- loading -----

def test_loading_the_plugin_does_not_import_the_middleware_until_it_is_listed() -> None:
    probe = ("import sys\nfrom hankweave.api import Registry, make_plugin_manager\n"
             "pm = make_plugin_manager(strict=True)\n"
             "print('hankweave_proxy_headers.middleware' in sys.modules)\n"
             "assert 'headers' in Registry(pm).proxy_middleware()\n"
             "print('hankweave_proxy_headers.middleware' in sys.modules)")
    env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "headers"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    assert done.stdout.split() == ["False", "True"]


# ----- the kernel's contract -----

class TestHeadersMiddlewareContract(ProxyMiddlewareContract):
    middleware_class = HeadersMiddleware
    plugin = "hankweave_proxy_headers.plugin"
    entry_point = "headers"

    def config(self, tmp_path: Path) -> dict[str, Any]:
        return {"set": {"x-team": "research"}, "upstreams": ["anthropic", "openai"]}
