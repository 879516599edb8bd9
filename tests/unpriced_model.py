"""A test plugin: a fake model the catalogue has no price for (``model: "unpriced"``)."""

from __future__ import annotations

from typing import Any

from hankweave.hookspecs import hookimpl
from hankweave.models import ModelEntry


@hookimpl
def register_models(register: Any) -> None:
    register(ModelEntry(provider_id="fake", model_id="unpriced", name="Unpriced fake model",
                        aliases=("unpriced",), context_limit=200_000, output_limit=64_000,
                        cost=None))
