"""Where a model is called through litellm: litellm's model string, the endpoint and the key.

Two callers share these routes and credentials: the pi harness's codons and the sentinels'
observer calls.  The kernel has already resolved a codon's spelling (``pi/<provider>/<model>``,
``openrouter/...``, a bare id, a shortname) into a real provider and model id
(docs/behaviour.md §4.2); a sentinel's ``model`` is always a full ``<provider>/<model>`` id.
This module turns either into a litellm call:

* the litellm provider prefix (``google`` is litellm's ``gemini``; ``moonshotai`` goes through
  OpenRouter, as in the original);
* the endpoint: the harness setting ``providers.<id>.apiBase``, else the provider's usual
  variable (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, ...), else litellm's default; an
  OpenAI-compatible local server (vLLM, Ollama, LM Studio) is ``protocol: "openai"`` with its
  ``apiBase``;
* the key, from the environment the caller gives (for a codon its effective environment, the
  ``HANKWEAVE_<X>`` passthrough and the codon's ``env`` included), with the original's
  variables; a sentinel's own ``HANKWEAVE_SENTINEL_<PROVIDER>_API_KEY`` comes before them.  A
  missing key is a clear error before any call is made.

Under ``hankweave run --mock-provider`` every model talks to the mock: Anthropic ones over the
Anthropic protocol, all others over the OpenAI protocol, with the mock's dummy key.  Under
``--proxy`` they talk to the LLM proxy instead, which the endpoint variables point at
(docs/proxy.md).

Pure data and functions: nothing here imports litellm (or anything else of the kernel), so
validating a hank and loading sentinel configs stay light.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Protocol = Literal["openai", "anthropic", "native"]

MOCK_URL_ENV = "HANKWEAVE_MOCK_PROVIDER_URL"
"""Set by ``run --mock-provider`` (hankweave.mock_provider.client_env)."""
ANTHROPIC_API_URL = "https://api.anthropic.com"
"""Anthropic's own API: where the Claude CLI and litellm go with no base URL set."""
PROXY_ANTHROPIC_UPSTREAM_ENV = "HANKWEAVE_PROXY_ANTHROPIC_UPSTREAM"
"""Set beside :data:`PROXY_URL_ENV`: where the LLM proxy sends Anthropic requests, so that a
harness can tell a proxy in front of Anthropic's own API from one in front of another server."""
PROXY_URL_ENV = "HANKWEAVE_PROXY_URL"
"""Set by ``run --proxy`` (hankweave.proxy.server.LlmProxy.client_env): the LLM proxy's base
URL.  The base URL variables point into it too; under the mock, routes go through it."""

KEY_VARIABLES: dict[str, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "google": "GEMINI_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "zai": "ZAI_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "xai": "XAI_API_KEY",
    "moonshotai": "OPENROUTER_API_KEY",
}
"""The original's credential table (anthropic, google, openai, openrouter, zai), and the usual
variable of the other providers the catalogue knows.  Another provider's is
``<PROVIDER>_API_KEY``."""
KEY_FALLBACKS: dict[str, tuple[str, ...]] = {"google": ("GOOGLE_API_KEY",)}

BASE_URL_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
    "anthropic": ("ANTHROPIC_BASE_URL",),
    "openrouter": ("OPENROUTER_API_BASE",),
    "gemini": ("GEMINI_API_BASE",),
    "deepseek": ("DEEPSEEK_API_BASE",),
    "mistral": ("MISTRAL_API_BASE",),
    "groq": ("GROQ_API_BASE",),
    "xai": ("XAI_API_BASE",),
}
"""The endpoint variables, by litellm prefix (``gemini`` for ``google``; ``openai`` for any
provider spoken to over ``protocol: "openai"``)."""

LITELLM_PREFIX: dict[str, str] = {"google": "gemini", "zai": "zai", "amazon-bedrock": "bedrock"}
"""Our provider id -> litellm's, where they differ (litellm names Bedrock ``bedrock``)."""


AWS_CREDENTIAL_VARIABLES = (
    "AWS_BEARER_TOKEN_BEDROCK", "AWS_ACCESS_KEY_ID", "AWS_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE")
"""Variables any one of which gives the AWS credential chain something to go on."""
AWS_CREDENTIALS_HINT = (
    "set AWS_BEARER_TOKEN_BEDROCK, AWS_PROFILE (after `aws sso login`) or AWS_ACCESS_KEY_ID"
    " and AWS_SECRET_ACCESS_KEY in the environment, and AWS_REGION")


class CredentialsError(RuntimeError):
    """A model's provider has no key in the environment (or a sentinel's model names none)."""


@dataclass(frozen=True)
class Route:
    """How one model is called."""

    provider: str
    """The real provider (``openai``, ``google``, a local server's configured id)."""
    model: str
    """litellm's model string (``openai/gpt-5.2``, ``gemini/gemini-2.5-flash``)."""
    display: str
    """``provider/model`` as the log's ``init`` shows it."""
    api_base: str | None
    api_key: str | None
    key_variable: str | None
    """The variable the key came from (the ``init`` record's ``apiKeySource``), or None."""

    @property
    def anthropic(self) -> bool:
        return self.model.startswith("anthropic/")


@dataclass(frozen=True)
class ProviderOptions:
    """What the harness settings say about one provider (``providers.<id>``)."""

    api_base: str | None = None
    api_key_env: str | None = None
    protocol: Protocol | None = None


def route(provider: str, model_id: str, env: Mapping[str, str],
          options: ProviderOptions | None = None) -> Route:
    """The litellm route of a codon's ``provider``/``model_id`` (see the module docstring).

    The key is the setting ``apiKeyEnv``'s variable if there is one, else the provider's
    usual ones (:data:`KEY_VARIABLES`, :data:`KEY_FALLBACKS`)."""
    options = options or ProviderOptions()
    provider = provider.lower()
    found = _route(provider, model_id, env, options, (options.api_key_env,)
                   if options.api_key_env else _usual_key_variables(provider))
    if _missing_key(found, env) and not (options.protocol == "openai" and options.api_base):
        wanted = options.api_key_env or KEY_VARIABLES.get(provider)
        if wanted is not None:
            raise CredentialsError(
                f"Model {found.display} needs {wanted}: set it in the environment (or"
                f" HANKWEAVE_{wanted} to give it to agents only, or the codon's env)")
    return found


def sentinel_key_variable(provider: str) -> str:
    """The variable that gives a sentinel its own key for ``provider``:
    ``HANKWEAVE_SENTINEL_<PROVIDER>_API_KEY``, ``-`` read as ``_``."""
    return f"HANKWEAVE_SENTINEL_{provider.upper().replace('-', '_')}_API_KEY"


def sentinel_route(model: str, env: Mapping[str, str]) -> Route:
    """The litellm route of a sentinel's ``model``, a full ``<provider>/<model>`` id
    (``google/gemini-2.5-flash``, ``openrouter/moonshotai/kimi-k2``).

    The key is :func:`sentinel_key_variable`'s, else the provider's usual variables as for a
    codon (a provider outside :data:`KEY_VARIABLES`, such as a keyless local server, may go
    without); under the mock provider the route is the mock's, as :func:`route` gives it."""
    provider, slash, model_id = model.partition("/")
    if not (slash and provider and model_id):
        raise CredentialsError(
            f"Sentinel model {model!r} needs a full <provider>/<model> id"
            " (like anthropic/claude-haiku-4-5 or google/gemini-2.5-flash)")
    provider = provider.lower()
    own = sentinel_key_variable(provider)
    found = _route(provider, model_id, env, ProviderOptions(),
                   (own, *_usual_key_variables(provider)))
    if _missing_key(found, env) and provider in KEY_VARIABLES:
        raise CredentialsError(
            f"Sentinel model {found.display} needs {own} or {KEY_VARIABLES[provider]}")
    return found


def _route(provider: str, model_id: str, env: Mapping[str, str], options: ProviderOptions,
           key_variables: tuple[str, ...]) -> Route:
    """The route, its key from the first set variable of ``key_variables``; ``api_key`` is None
    when none is set (the callers decide whether that is an error)."""
    display = f"{provider}/{model_id}"
    mock = env.get(MOCK_URL_ENV)
    if mock:
        anthropic = provider == "anthropic"
        variable = "ANTHROPIC_API_KEY" if anthropic else "OPENAI_API_KEY"
        proxy = env.get(PROXY_URL_ENV)
        if proxy:
            base = f"{proxy}/anthropic" if anthropic else f"{proxy}/openai"
        else:
            base = mock if anthropic else f"{mock}/v1"
        return Route(provider, f"{'anthropic' if anthropic else 'openai'}/{model_id}", display,
                     base, env.get(variable), variable)
    protocol = options.protocol or "native"
    if protocol == "openai":
        prefix = "openai"
    elif protocol == "anthropic":
        prefix = "anthropic"
    elif provider == "moonshotai":
        prefix, model_id = "openrouter", f"moonshotai/{model_id}"
    else:
        prefix = LITELLM_PREFIX.get(provider, provider)
    api_base = options.api_base or next(
        (env[name] for name in BASE_URL_VARIABLES.get(prefix, ()) if env.get(name)), None)
    key_variable, api_key = _key(key_variables, env)
    return Route(provider, f"{prefix}/{model_id}", display, api_base, api_key, key_variable)


def _missing_key(found: Route, env: Mapping[str, str]) -> bool:
    """No key was found, outside the mock (whose route never fails for want of one)."""
    return found.api_key is None and not env.get(MOCK_URL_ENV)


def _usual_key_variables(provider: str) -> tuple[str, ...]:
    """The provider's usual key variables, in order (:data:`KEY_VARIABLES`, else
    ``<PROVIDER>_API_KEY``; then :data:`KEY_FALLBACKS`)."""
    return (KEY_VARIABLES.get(provider, f"{provider.upper()}_API_KEY"),
            *KEY_FALLBACKS.get(provider, ()))


def _key(names: tuple[str, ...], env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The first of ``names`` set in ``env`` and its value; ``(None, None)`` if none is."""
    for name in names:
        if env.get(name):
            return name, env[name]
    return None, None


def aws_credentials_visible(env: Mapping[str, str]) -> bool:
    """Whether the AWS credential chain (Bedrock's) has something to go on in ``env``: one of
    :data:`AWS_CREDENTIAL_VARIABLES`, or a shared credentials or config file.  An instance
    role is invisible until a request is made, so a False here can only be a warning."""
    if any(env.get(name) for name in AWS_CREDENTIAL_VARIABLES):
        return True
    home = env.get("HOME") or os.path.expanduser("~")
    files = (env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials"),
             env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config"))
    return any(os.path.isfile(path) for path in files)
