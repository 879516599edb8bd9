"""The plugin's entry point (group ``hankweave``): the ``claude`` harness and the Anthropic
model catalogue.

Every ``hankweave`` start loads it (``--help`` included), so it imports nothing heavy: the
harness class is imported when harnesses are asked for (it imports the Claude Agent SDK only
when a codon runs), the catalogue when a model is first resolved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hankweave.api import hookimpl

if TYPE_CHECKING:
    from hankweave.api import Harness, ModelEntry, ProviderEntry


@hookimpl
def register_harnesses(register: Callable[[type[Harness]], None]) -> None:
    from hankweave_harness_claude.harness import ClaudeHarness

    register(ClaudeHarness)


@hookimpl
def register_models(register: Callable[[ModelEntry | ProviderEntry], None]) -> None:
    from hankweave_harness_claude.catalogue import entries

    for entry in entries():
        register(entry)
