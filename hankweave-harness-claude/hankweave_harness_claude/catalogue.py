"""The Anthropic model catalogue this release of the harness knows: Claude models on Anthropic
and on Amazon Bedrock, with the ``haiku``, ``sonnet`` and ``opus`` aliases (the newest model of
each family), prices per million tokens and context and output limits.

``anthropic_models.json`` is written by hankweave's ``scripts/refresh_model_catalogue.py`` from
the same data as the kernel's built-in catalogue; registered through ``register_models``, its
entries replace the kernel's Anthropic ones, so installing a newer harness is enough to get
newer Claude models and prices.  The routing entries send both providers to this harness
(Bedrock only for its ``anthropic.`` models).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hankweave.api import CatalogueSnapshot, ModelEntry, ProviderEntry

PACKAGE = "hankweave-harness-claude"
DATA_FILE = "anthropic_models.json"


@functools.cache
def snapshot() -> CatalogueSnapshot:
    from hankweave.api import CatalogueSnapshot

    data = resources.files(__package__ or "hankweave_harness_claude").joinpath(DATA_FILE)
    return CatalogueSnapshot.model_validate_json(data.read_bytes())


def entries() -> list[ModelEntry | ProviderEntry]:
    from hankweave.api import ProviderEntry

    found: list[ModelEntry | ProviderEntry] = [
        ProviderEntry(provider_id="anthropic", harness="claude", package=PACKAGE),
        ProviderEntry(provider_id="amazon-bedrock", harness="claude", package=PACKAGE,
                      model_pattern=r"(^|\.)anthropic\."),
    ]
    found.extend(snapshot().entries())
    return found
