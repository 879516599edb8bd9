"""What passes through the LLM proxy, as its parts and its plugins see it (docs/proxy.md).

* :class:`ProxyRequest`: one agent request on its way upstream; middleware may change its
  headers, its path or its JSON body.
* :class:`ProxyResponseHead`: the upstream's status and headers, before the body streams
  through (the body itself is never held back, so middleware cannot rewrite it).
* :class:`ProxyReply`: an answer the proxy gives itself, without calling upstream (a refusal,
  or a middleware's own answer).
* :class:`ProxyRecord`: what is recorded of a request once it is done
  (``.hankweave/proxy/requests.jsonl``, the ``proxy.request`` event).
* :class:`ProxyMiddleware`: the base class of ``register_proxy_middleware`` plugins.
* :class:`Gate`: how the proxy asks the runtime whether a request may go (a budget), and tells
  it what a response used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel

from hankweave.events.catalogue import ProxyRequestData
from hankweave.plugin_config import PluginConfig
from hankweave.state.types import TokenUsage

WireProtocol = Literal["anthropic", "openai"]
"""The wire protocol of an upstream: the Anthropic Messages API or OpenAI's chat API."""


@dataclass
class ProxyRequest:
    """One request, as middleware sees and may change it."""

    upstream: str
    """The upstream's name (``anthropic``, ``openai``, ``openrouter``): the first part of the
    proxy URL's path."""
    protocol: WireProtocol
    method: str
    path: str
    """The path after the upstream's name, with its query string (``/v1/messages?beta=true``)."""
    headers: dict[str, str]
    """Lower-case names; credentials are here as the agent sent them, and go upstream."""
    body: bytes
    codon_id: str | None = None
    """The codon whose agent sent it (None: no codon runs)."""
    _parsed: tuple[bytes, dict[str, Any] | None] | None = field(default=None, repr=False)

    @property
    def json(self) -> dict[str, Any] | None:
        """The body as a JSON object (None when it is not one), parsed again whenever the
        body changed.  Changing the object changes nothing sent: pass it to
        :meth:`set_json`."""
        if self._parsed is None or self._parsed[0] is not self.body:
            parsed = None
            if self.body[:1] == b"{":
                try:
                    parsed = json.loads(self.body)
                except ValueError:
                    parsed = None
            self._parsed = (self.body, parsed if isinstance(parsed, dict) else None)
        return self._parsed[1]

    def set_json(self, value: dict[str, Any]) -> None:
        """Replace the body with ``value``, encoded."""
        self.body = json.dumps(value, separators=(",", ":")).encode()
        self._parsed = (self.body, value)

    @property
    def model(self) -> str | None:
        found = (self.json or {}).get("model")
        return found if isinstance(found, str) else None

    @property
    def streamed(self) -> bool:
        return (self.json or {}).get("stream") is True


@dataclass
class ProxyResponseHead:
    """The upstream's answer before its body: middleware may change the status and headers."""

    status: int
    headers: dict[str, str]
    """Lower-case names (a header the upstream repeats keeps its last value)."""


@dataclass(frozen=True)
class ProxyReply:
    """An answer the proxy gives without calling upstream."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    reason: str = "middleware"
    """Why (recorded): ``budget``, ``stopping``, ``middleware``, ``unknown-upstream``."""


class ProxyRecord(ProxyRequestData):
    """One request the proxy handled, as ``requests.jsonl`` records it: the ``proxy.request``
    event's fields (never a header, a key or a body), when it arrived and its sizes."""

    at: str
    """When it arrived (ISO 8601, UTC)."""
    request_bytes: int = 0
    response_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def event(self) -> dict[str, Any]:
        """The ``proxy.request`` event's data."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True,
                               exclude={"at", "request_bytes", "response_bytes"})


class NoSettings(PluginConfig):
    """The settings of a middleware that takes none: an empty object."""


class ProxyMiddleware:
    """A plugin's part in every request through the proxy (``register_proxy_middleware``).

    Subclass it, give it a ``name`` (what ``proxy.middleware`` in ``hankweave.json`` enables it
    by) and optionally a ``Config`` model for its settings.  The proxy builds one instance per
    run and calls, for every request, in the order the settings list them:

    * :meth:`on_request` before the request goes upstream (and before the budget is asked):
      change the request in place, or return a :class:`ProxyReply` to answer it yourself;
    * :meth:`on_response` when the upstream's status and headers arrive: change them in place;
    * :meth:`on_complete` once the answer has been sent, with what was recorded.

    They run on the proxy's event loop, between the agent and its provider: keep them fast and
    never block.  An exception is the agent's 500 (``error`` recorded), not the run's end.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[BaseModel]] = NoSettings
    """Its settings (``proxy.middleware[].config``); none by default."""

    def __init__(self, config: BaseModel | None = None) -> None:
        self.config = config if config is not None else self.Config()

    async def on_request(self, request: ProxyRequest) -> ProxyReply | None:
        return None

    async def on_response(self, request: ProxyRequest, response: ProxyResponseHead) -> None:
        return None

    async def on_complete(self, request: ProxyRequest, record: ProxyRecord) -> None:
        return None


@dataclass(frozen=True)
class Refusal:
    """Why the runtime will not let a request go (the agent gets it as a provider error)."""

    reason: Literal["budget", "stopping"]
    message: str


def _uncharged(usage: TokenUsage, model: str | None) -> float | None:
    return None


@dataclass(frozen=True)
class Admission:
    """The runtime's answer to one request: whose it is, whether it may go, and where what
    its answer used is counted."""

    codon_id: str | None = None
    refusal: Refusal | None = None
    held_s: float = 0.0
    """How long it waited for a person first."""
    charge: Callable[[TokenUsage, str | None], float | None] = _uncharged
    """Account what the answer used (model as the request named it); its cost in dollars."""


class Gate(Protocol):
    """The runtime's side of the proxy (``hankweave.runtime.metering.ProxyGate``)."""

    def current_codon(self) -> str | None:
        """The codon whose agent runs now (None: none does)."""
        ...

    async def admit(self) -> Admission:
        """Whether a request may go now.  At a ceiling that asks, waits for the person."""
        ...
