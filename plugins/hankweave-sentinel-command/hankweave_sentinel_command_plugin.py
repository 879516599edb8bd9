"""The ``command`` sentinel kind's entry point: what every ``hankweave`` start loads, kept light.

Every start (``hankweave --help`` included) loads the installed plugins; the kind itself
(:mod:`hankweave_sentinel_command`, with its pydantic options model) is imported only when the
kernel collects the sentinel kinds, which it does when a sentinel config loads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hankweave.api import hookimpl

if TYPE_CHECKING:
    from hankweave.api import SentinelKind


@hookimpl
def register_sentinel_kinds(register: Callable[[type[SentinelKind]], None]) -> None:
    from hankweave_sentinel_command import CommandSentinel

    register(CommandSentinel)
