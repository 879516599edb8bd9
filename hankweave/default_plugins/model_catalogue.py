"""The built-in model catalogue: the Anthropic models behind the ``haiku``, ``sonnet`` and
``opus`` aliases, and the original's provider routing.

Prices are Anthropic's published USD prices per million tokens (``cache_write`` is the
5-minute cache write).  Catalogue plugins add further providers and models; a duplicate id or
alias is an error, so a plugin replacing these entries disables this one with
``HANKWEAVE_DISABLE_PLUGINS=hankweave.default_plugins.model_catalogue``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hankweave.hookspecs import hookimpl

if TYPE_CHECKING:
    from hankweave.models import ModelEntry, ProviderEntry

CLAUDE_PACKAGE = "hankweave-harness-claude"
PI_PACKAGE = "hankweave-harness-pi"

# Plain data, turned into entries only when the catalogue is asked for, so that building the
# plugin manager (which every command does, --help included) does not load pydantic.
PROVIDERS: tuple[dict[str, Any], ...] = (
    {"provider_id": "anthropic", "harness": "claude", "package": CLAUDE_PACKAGE},
    # Bedrock runs the Claude harness in Bedrock mode, for Anthropic models only
    # (ids like "anthropic.claude-..." or "us.anthropic.claude-...").
    {"provider_id": "amazon-bedrock", "harness": "claude", "package": CLAUDE_PACKAGE,
     "model_pattern": r"(^|\.)anthropic\."},
    {"provider_id": "*", "harness": "pi", "package": PI_PACKAGE},
)

# (provider, model id, display name, aliases, context, output, USD per million tokens:
#  input, output, cache read, cache write) -- prices as published by the providers.
MODELS: tuple[tuple[Any, ...], ...] = (
    ("anthropic", "claude-haiku-4-5", "Claude Haiku 4.5", ("haiku",), 200_000, 64_000,
     1.0, 5.0, 0.10, 1.25),
    ("anthropic", "claude-sonnet-4-5", "Claude Sonnet 4.5", ("sonnet",), 200_000, 64_000,
     3.0, 15.0, 0.30, 3.75),
    ("anthropic", "claude-opus-4-1", "Claude Opus 4.1", ("opus",), 200_000, 32_000,
     15.0, 75.0, 1.50, 18.75),
    ("openai", "gpt-5", "GPT-5", (), 400_000, 128_000, 1.25, 10.0, 0.125, 0.0),
    ("openai", "gpt-5-mini", "GPT-5 mini", (), 400_000, 128_000, 0.25, 2.0, 0.025, 0.0),
    ("openai", "gpt-4.1", "GPT-4.1", (), 1_047_576, 32_768, 2.0, 8.0, 0.50, 0.0),
    ("openai", "gpt-4o", "GPT-4o", (), 128_000, 16_384, 2.5, 10.0, 1.25, 0.0),
    ("openai", "gpt-4o-mini", "GPT-4o mini", (), 128_000, 16_384, 0.15, 0.60, 0.075, 0.0),
    ("google", "gemini-2.5-pro", "Gemini 2.5 Pro", (), 1_048_576, 65_536, 1.25, 10.0, 0.31,
     0.0),
    ("google", "gemini-2.5-flash", "Gemini 2.5 Flash", (), 1_048_576, 65_536, 0.30, 2.50,
     0.075, 0.0),
)


def catalogue_entries() -> list[ModelEntry | ProviderEntry]:
    """The built-in providers and models as catalogue entries."""
    from hankweave.models import ModelCost, ModelEntry, ProviderEntry

    entries: list[ModelEntry | ProviderEntry] = [ProviderEntry(**p) for p in PROVIDERS]
    for provider, model, name, aliases, context, output, *prices in MODELS:
        cost = ModelCost(input=prices[0], output=prices[1], cache_read=prices[2],
                         cache_write=prices[3])
        entries.append(ModelEntry(provider_id=provider, model_id=model, name=name,
                                  aliases=aliases, context_limit=context,
                                  output_limit=output, cost=cost))
    return entries


@hookimpl
def register_models(register: Callable[[ModelEntry | ProviderEntry], None]) -> None:
    for entry in catalogue_entries():
        register(entry)
