"""The plugin's entry point (group ``hankweave``): registers the ``pi`` harness.

Every ``hankweave`` start loads it, so it imports nothing heavy: the harness class is imported
when harnesses are asked for, litellm only when a codon runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hankweave.api import hookimpl

if TYPE_CHECKING:
    from hankweave.api import Harness


@hookimpl
def register_harnesses(register: Callable[[type[Harness]], None]) -> None:
    from hankweave_harness_pi.harness import PiHarness

    register(PiHarness)
