"""The built-in model catalogue: current models of the providers hankweave routes, with their
prices and limits, the ``haiku``, ``sonnet`` and ``opus`` aliases, and the original's provider
routing.

The models come from ``model_catalogue.json`` beside this module, generated from litellm's
maintained model price and limit data by ``scripts/refresh_model_catalogue.py`` (read as
data: litellm is not imported, nor needed).  It covers Anthropic, Anthropic models on Amazon
Bedrock (``amazon-bedrock/us.anthropic.claude-...``), OpenAI, Google, Mistral, DeepSeek, xAI and
Groq.  Catalogue plugins add further providers and models; a duplicate id or alias is an error,
so a plugin replacing these entries disables this one with
``HANKWEAVE_DISABLE_PLUGINS=hankweave.default_plugins.model_catalogue``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from hankweave.hookspecs import hookimpl

if TYPE_CHECKING:
    from hankweave.models import CatalogueSnapshot, ModelEntry, ProviderEntry

CLAUDE_PACKAGE = "hankweave-harness-claude"
PI_PACKAGE = "hankweave-harness-pi"
SNAPSHOT_FILE = "model_catalogue.json"

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


@functools.cache
def snapshot() -> CatalogueSnapshot:
    """The bundled catalogue file, read and validated once per process."""
    from hankweave.models import CatalogueSnapshot

    text = resources.files(__package__ or "hankweave.default_plugins").joinpath(SNAPSHOT_FILE)
    return CatalogueSnapshot.model_validate_json(text.read_bytes())


def catalogue_entries() -> list[ModelEntry | ProviderEntry]:
    """The built-in providers and models as catalogue entries."""
    from hankweave.models import ProviderEntry

    entries: list[ModelEntry | ProviderEntry] = [ProviderEntry(**p) for p in PROVIDERS]
    entries.extend(snapshot().entries())
    return entries


@hookimpl
def register_models(register: Callable[[ModelEntry | ProviderEntry], None]) -> None:
    for entry in catalogue_entries():
        register(entry)
