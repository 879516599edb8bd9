"""The ``headers`` proxy middleware: configured headers on every agent request on its way
upstream.

Enable it in ``hankweave.json`` (the middleware runs only with the LLM proxy: ``--proxy``, or
``"withoutProxy": false``)::

    {"withoutProxy": false,
     "proxy": {"middleware": [{"name": "headers", "config": {
         "set": {"x-team": "research", "x-gateway-route": {"env": "GATEWAY_ROUTE"}},
         "upstreams": ["anthropic"]}}]}}

``set`` adds each header to the request, replacing one the agent sent under the same name
(names are not case-sensitive: they are lower-cased, as the proxy hands them over).  A value is
a string, or ``{"env": "NAME"}``: the value of an environment variable, read once when the run
starts (so it need not be written into the settings file).  ``upstreams`` limits it to the
requests to those upstreams (``anthropic``, ``openai``, ``openrouter``); left out, every
request gets the headers.

Refused, when the settings are checked (``hankweave validate``, the start of a run): names
that are not RFC 7230 tokens, values with a line break, another control character or a
character that is not ASCII, the headers the proxy manages itself (hop-by-hop and framing:
``host``, ``content-length``, ``connection``, ...), and credential headers
(``authorization``, ``x-api-key``, ``cookie``, ...): credentials stay with the agent, in its
own environment, and must never be written into ``hankweave.json``.  Header values are never
logged nor shown in a ``repr``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_core import InitErrorDetails

from hankweave.api import PluginConfig, ProxyMiddleware, ProxyReply, ProxyRequest

log = logging.getLogger("hankweave.proxy.headers")

CREDENTIAL_HEADERS = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key",
    "cookie"})
"""Headers that carry a key or a session: Anthropic's, OpenAI's and OpenRouter's, Azure
OpenAI's (``api-key``), Google's (``x-goog-api-key``), and cookies."""

PROXY_MANAGED_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length", "content-encoding",
    "accept-encoding", "expect"})
"""Hop-by-hop and framing headers: the proxy and its HTTP client set these for each
connection and body (it asks upstream for an uncompressed answer to read its usage)."""

KNOWN_UPSTREAMS = ("anthropic", "openai", "openrouter")
"""The upstreams the kernel's proxy serves today (the first part of its URLs' paths)."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""RFC 7230's ``token``: what a header name is made of."""
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""What a header value must not hold: CR, LF, NUL and the other control characters (a tab
is allowed)."""
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UPSTREAM_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_SHOWN = 40


def _shown(name: object) -> str:
    """A header name as the settings file spells it, quoted (and cut when long)."""
    text = json.dumps(name, ensure_ascii=False) if isinstance(name, str) else repr(name)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 4] + '..."'


class FromEnv(PluginConfig):
    """``{"env": "NAME"}``: a header value read from the environment when the run starts."""

    env: str
    """The environment variable holding the value."""


def _name_problem(name: str) -> str | None:
    """Why ``name`` cannot be set (None: it can)."""
    lowered = name.lower()
    if not _TOKEN.fullmatch(name):
        return (f"{_shown(name)} is not a header name: use letters, digits and"
                " !#$%&'*+-.^_`|~ only (no space, colon or line break)")
    if lowered in CREDENTIAL_HEADERS:
        return (f"{_shown(name)} is a credential header: credentials stay with the agent and"
                " must never be written into hankweave.json (give the agent its key in its"
                " own environment: ANTHROPIC_API_KEY, OPENAI_API_KEY, ...)")
    if lowered in PROXY_MANAGED_HEADERS:
        return (f"{_shown(name)} is a hop-by-hop or framing header, which the proxy sets for"
                " each connection and body: it cannot be set")
    return None


def _text_problem(text: str) -> str | None:
    """Why ``text`` cannot be sent as a header value, worded to follow "the value of X"
    (None: it can).  Never quotes it."""
    if _CONTROL.search(text):
        return "must be one line: no CR, LF or other control character"
    if _NOT_ASCII.search(text):
        # aiohttp would send UTF-8, which a provider's front end may refuse or misread.
        return "must be ASCII text (RFC 9110: header values are US-ASCII in practice)"
    return None


def _value_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be the value of ``name`` (None: it can).  Never quotes it."""
    if isinstance(value, str):
        problem = _text_problem(value)
        return f"the value of {_shown(name)} {problem}" if problem else None
    if isinstance(value, Mapping) and set(value) == {"env"}:
        variable = value["env"]
        if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
            return (f'the value of {_shown(name)}: {{"env": ...}} must name an environment'
                    " variable (letters, digits and _, not starting with a digit)")
        return None
    return (f'the value of {_shown(name)} must be a string, or {{"env": "NAME"}} naming the'
            " environment variable that holds it")


def _check_headers(value: object) -> object:
    """``set``, checked as a whole: names lower-cased, each problem reported at its header's
    own path (``set.Authorization``), never quoting a value nor carrying one in the error."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError("set must be an object naming at least one header")
    problems: list[InitErrorDetails] = []
    headers: dict[str, object] = {}
    spelled: dict[str, str] = {}
    for name, header_value in value.items():
        if not isinstance(name, str):
            raise ValueError(f"{_shown(name)} is not a header name")
        lowered = name.lower()
        problem = _name_problem(name) or _value_problem(name, header_value)
        if problem is None and lowered in spelled:
            problem = (f"{_shown(name)} and {_shown(spelled[lowered])} are the same header"
                       " (names are not case-sensitive): set it once")
        if problem is not None:
            problems.append(InitErrorDetails(type="value_error", loc=(name,), input=name,
                                             ctx={"error": ValueError(problem)}))
            continue
        spelled[lowered] = name
        headers[lowered] = header_value
    if problems:
        # Raised from a validator, its errors are placed under the field: set.<name>.
        raise ValidationError.from_exception_data("set", problems)
    return headers


def _check_upstream(value: object) -> object:
    if not isinstance(value, str) or not _UPSTREAM_NAME.fullmatch(value):
        raise ValueError("must be an upstream's name, in lower case: "
                         + ", ".join(KNOWN_UPSTREAMS))
    return value


UpstreamName = Annotated[str, BeforeValidator(_check_upstream)]


class HeadersConfig(PluginConfig):
    """The ``headers`` middleware's settings (``proxy.middleware[].config``)."""

    # A ValidationError's text then never carries a value (a header value may be private).
    model_config = ConfigDict(hide_input_in_errors=True)

    field_messages: ClassVar[dict[str, str]] = {
        # Missing, empty or not an object; a header's own problem is reported at set.<name>.
        "set": 'give set as an object of the headers to add and their values, such as'
               ' {"x-team": "research"}',
    }

    set: dict[str, str | FromEnv] = Field(min_length=1)
    """The headers to add to each request, replacing the agent's own of the same name: a
    string, or ``{"env": "NAME"}`` (read when the run starts).  Names are lower-cased."""
    upstreams: list[UpstreamName] | None = Field(default=None, min_length=1)
    """Only the requests to these upstreams (``anthropic``, ``openai``, ``openrouter``) get
    the headers; left out, every request does."""

    @field_validator("set", mode="before")
    @classmethod
    def _valid_headers(cls, value: object) -> object:
        return _check_headers(value)

    def __repr_args__(self) -> Any:
        # The names, never the values (a value may come from a variable).
        yield "set", sorted(self.set)
        yield "upstreams", self.upstreams


def resolve_headers(headers: Mapping[str, str | FromEnv],
                    env: Mapping[str, str]) -> dict[str, str]:
    """Each header's value: the string, or the variable's value from ``env``.

    Raises :class:`ValueError` for a variable that is unset or empty, or whose value is not one
    line (naming the header and the variable, never the value)."""
    resolved: dict[str, str] = {}
    for name, value in headers.items():
        if isinstance(value, str):
            resolved[name] = value
            continue
        found = env.get(value.env, "")
        if not found:
            raise ValueError(f'set.{name}: {{"env": "{value.env}"}} names {value.env}, which'
                             " is not set (or is empty) in this environment")
        problem = _text_problem(found)
        if problem is not None:
            raise ValueError(f"set.{name}: the value of {value.env} {problem}")
        resolved[name] = found
    return resolved


class HeadersMiddleware(ProxyMiddleware):
    """Adds :attr:`HeadersConfig.set` to every request (to :attr:`HeadersConfig.upstreams`'
    only, when given) before it goes upstream."""

    name = "headers"
    Config = HeadersConfig
    config: HeadersConfig

    def __init__(self, config: BaseModel | None = None, *,
                 env: Mapping[str, str] | None = None) -> None:
        """``config``: the validated settings.  ``env`` (default: this process's
        environment) holds the variables ``{"env": ...}`` values name.  Raises
        :class:`ValueError` when one is unset."""
        if not isinstance(config, HeadersConfig):
            raise TypeError("HeadersMiddleware is built from its validated settings"
                            " (HeadersMiddleware.Config.model_validate({...}))")
        super().__init__(config)
        self._headers = resolve_headers(config.set, os.environ if env is None else env)
        self._upstreams = frozenset(config.upstreams) if config.upstreams is not None else None
        log.debug("proxy headers: %s on requests to %s", ", ".join(sorted(self._headers)),
                  ", ".join(sorted(self._upstreams)) if self._upstreams else "every upstream")

    @property
    def header_names(self) -> list[str]:
        """The names of the headers it sets (lower case)."""
        return sorted(self._headers)

    def applies_to(self, upstream: str) -> bool:
        return self._upstreams is None or upstream in self._upstreams

    async def on_request(self, request: ProxyRequest) -> ProxyReply | None:
        if self.applies_to(request.upstream):
            request.headers.update(self._headers)
        return None

    def __repr__(self) -> str:
        upstreams = sorted(self._upstreams) if self._upstreams is not None else None
        return f"HeadersMiddleware(set={self.header_names}, upstreams={upstreams})"


__all__ = ["CREDENTIAL_HEADERS", "PROXY_MANAGED_HEADERS", "FromEnv", "HeadersConfig",
           "HeadersMiddleware", "resolve_headers"]
