"""The built-in model catalogue: the Anthropic models behind the ``haiku``, ``sonnet`` and
``opus`` aliases, and the original's provider routing.

Prices are Anthropic's published USD prices per million tokens (``cache_write`` is the
5-minute cache write).  Catalogue plugins add further providers and models; a duplicate id or
alias is an error, so a plugin replacing these entries disables this one with
``HANKWEAVE_DISABLE_PLUGINS=hankweave.default_plugins.model_catalogue``.
"""

from __future__ import annotations

from collections.abc import Callable

from hankweave.hookspecs import hookimpl
from hankweave.models import ANY_PROVIDER, ModelCost, ModelEntry, ProviderEntry

CLAUDE_PACKAGE = "hankweave-harness-claude"
PI_PACKAGE = "hankweave-harness-pi"

PROVIDERS = (
    ProviderEntry(provider_id="anthropic", harness="claude", package=CLAUDE_PACKAGE),
    # Bedrock runs the Claude harness in Bedrock mode, for Anthropic models only
    # (ids like "anthropic.claude-..." or "us.anthropic.claude-...").
    ProviderEntry(
        provider_id="amazon-bedrock",
        harness="claude",
        package=CLAUDE_PACKAGE,
        model_pattern=r"(^|\.)anthropic\.",
    ),
    ProviderEntry(provider_id=ANY_PROVIDER, harness="pi", package=PI_PACKAGE),
)

MODELS = (
    ModelEntry(
        provider_id="anthropic",
        model_id="claude-haiku-4-5",
        name="Claude Haiku 4.5",
        aliases=("haiku",),
        context_limit=200_000,
        output_limit=64_000,
        cost=ModelCost(input=1.0, output=5.0, cache_read=0.10, cache_write=1.25),
    ),
    ModelEntry(
        provider_id="anthropic",
        model_id="claude-sonnet-4-5",
        name="Claude Sonnet 4.5",
        aliases=("sonnet",),
        context_limit=200_000,
        output_limit=64_000,
        cost=ModelCost(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75),
    ),
    ModelEntry(
        provider_id="anthropic",
        model_id="claude-opus-4-1",
        name="Claude Opus 4.1",
        aliases=("opus",),
        context_limit=200_000,
        output_limit=32_000,
        cost=ModelCost(input=15.0, output=75.0, cache_read=1.50, cache_write=18.75),
    ),
)


@hookimpl
def register_models(register: Callable[[ModelEntry | ProviderEntry], None]) -> None:
    for entry in (*PROVIDERS, *MODELS):
        register(entry)
