"""The mock provider takes any bytes a client sends: a body it cannot take (nested too deeply,
too large, not JSON, not a JSON object) is a 400 in the protocol's own error shape, never a
bare 500 or a dropped connection (issue 34 item 9).  Real HTTP to the server on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from hankweave.mock_provider.body import MAX_BODY_BYTES, MAX_BODY_DEPTH
from hankweave.mock_provider.server import MockProvider
from hankweave.testing.mock_provider import start_mock_provider

ROUTES = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions"}


@pytest.fixture
def mock() -> Iterator[MockProvider]:
    thread = start_mock_provider({"default": {"text": "ok"}})
    try:
        yield thread.start()
    finally:
        thread.stop()


def post(mock: MockProvider, path: str, body: bytes) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", mock.port, timeout=30)
    try:
        connection.request("POST", path, body=body, headers={"content-type": "application/json"})
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    return response.status, json.loads(raw)


def assert_invalid_request(protocol: str, status: int, body: Any, says: str) -> None:
    assert status == 400, body
    if protocol == "anthropic":
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["type"] == "invalid_request_error"
    assert says in body["error"]["message"]


def nested(depth: int) -> bytes:
    return b'{"model":"m","messages":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("protocol", ROUTES)
def test_deeply_nested_json_is_a_400_not_a_500(mock: MockProvider, protocol: str) -> None:
    status, body = post(mock, ROUTES[protocol], nested(100_000))
    assert_invalid_request(protocol, status, body, "nested")


@pytest.mark.parametrize("protocol", ROUTES)
def test_json_nested_past_the_limit_but_parseable_is_a_400(mock: MockProvider,
                                                          protocol: str) -> None:
    status, body = post(mock, ROUTES[protocol], nested(MAX_BODY_DEPTH + 1))
    assert_invalid_request(protocol, status, body, "nested")


def test_json_nested_within_the_limit_is_answered(mock: MockProvider) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
            "metadata": json.loads(nested(MAX_BODY_DEPTH - 4))}
    status, answer = post(mock, ROUTES["anthropic"], json.dumps(body).encode())
    assert status == 200, answer


@pytest.mark.parametrize("protocol", ROUTES)
def test_a_body_over_the_size_limit_is_a_400(mock: MockProvider, protocol: str) -> None:
    padding = b" " * (MAX_BODY_BYTES + 1)
    status, body = post(mock, ROUTES[protocol], b'{"model":"m"' + padding + b"}")
    assert_invalid_request(protocol, status, body, "larger than")


@pytest.mark.parametrize("protocol", ROUTES)
@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b"[1, 2]", b""])
def test_malformed_bodies_are_a_400(mock: MockProvider, protocol: str, raw: bytes) -> None:
    status, body = post(mock, ROUTES[protocol], raw)
    assert_invalid_request(protocol, status, body, "JSON")


def test_count_tokens_refuses_a_deep_body_too(mock: MockProvider) -> None:
    status, body = post(mock, "/v1/messages/count_tokens", nested(100_000))
    assert_invalid_request("anthropic", status, body, "nested")
