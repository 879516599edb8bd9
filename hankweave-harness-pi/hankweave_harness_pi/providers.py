"""Where a codon's model is called: litellm's model string, the endpoint and the key.

The kernel has already resolved the hank's spelling (``pi/<provider>/<model>``, ``openrouter/...``,
a bare id, a shortname) into a real provider and model id (``docs/behaviour.md`` §4.2); this
module turns that into a litellm call:

* the litellm provider prefix (``google`` is litellm's ``gemini``; ``moonshotai`` goes through
  OpenRouter, as in the original);
* the endpoint: the harness setting ``providers.<id>.apiBase``, else the provider's usual
  variable (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, ...), else litellm's default; an
  OpenAI-compatible local server (vLLM, Ollama, LM Studio) is ``protocol: "openai"`` with its
  ``apiBase``;
* the key, from the codon's effective environment (the ``HANKWEAVE_<X>`` passthrough and the
  codon's ``env`` included), with the original's variables; a missing key is a clear error
  before the agent starts.

Under ``hankweave run --mock-provider`` every model talks to the mock: Anthropic ones over the
Anthropic protocol, all others over the OpenAI protocol, with the mock's dummy key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Protocol = Literal["openai", "anthropic", "native"]

MOCK_URL_ENV = "HANKWEAVE_MOCK_PROVIDER_URL"
"""Set by ``run --mock-provider`` (hankweave.mock_provider.client_env)."""

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
variable of the other providers the catalogue knows."""
KEY_FALLBACKS: dict[str, tuple[str, ...]] = {"google": ("GOOGLE_API_KEY",)}

BASE_URL_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
    "anthropic": ("ANTHROPIC_BASE_URL",),
    "openrouter": ("OPENROUTER_API_BASE",),
    "google": ("GEMINI_API_BASE",),
    "deepseek": ("DEEPSEEK_API_BASE",),
    "mistral": ("MISTRAL_API_BASE",),
    "groq": ("GROQ_API_BASE",),
    "xai": ("XAI_API_BASE",),
}

LITELLM_PREFIX: dict[str, str] = {"google": "gemini", "zai": "zai"}
"""Our provider id -> litellm's, where they differ."""


class CredentialsError(RuntimeError):
    """The codon's provider has no key in the effective environment."""


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
    """The litellm route for ``provider``/``model_id`` (see the module docstring)."""
    options = options or ProviderOptions()
    provider = provider.lower()
    display = f"{provider}/{model_id}"
    mock = env.get(MOCK_URL_ENV)
    if mock:
        anthropic = provider == "anthropic"
        return Route(provider, f"{'anthropic' if anthropic else 'openai'}/{model_id}", display,
                     mock if anthropic else f"{mock}/v1",
                     env.get("ANTHROPIC_API_KEY" if anthropic else "OPENAI_API_KEY"),
                     "ANTHROPIC_API_KEY" if anthropic else "OPENAI_API_KEY")
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
    key_variable, api_key = _key(provider, env, options)
    if api_key is None and not (protocol == "openai" and options.api_base):
        wanted = options.api_key_env or KEY_VARIABLES.get(provider)
        if wanted is not None:
            raise CredentialsError(
                f"Model {display} needs {wanted}: set it in the environment (or"
                f" HANKWEAVE_{wanted} to give it to agents only, or the codon's env)")
    return Route(provider, f"{prefix}/{model_id}", display, api_base, api_key, key_variable)


def _key(provider: str, env: Mapping[str, str],
         options: ProviderOptions) -> tuple[str | None, str | None]:
    names = ((options.api_key_env,) if options.api_key_env else
             (KEY_VARIABLES.get(provider, f"{provider.upper()}_API_KEY"),
              *KEY_FALLBACKS.get(provider, ())))
    for name in names:
        if name and env.get(name):
            return name, env[name]
    return None, None
