"""The services that act on a run, built by the runtime and handed to each codon attempt.

They take the :class:`~hankweave.runtime.context.RunContext` (data) and never the other way
round, so the context stays a value every part can share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hankweave.runtime.humans import HumanLoop
    from hankweave.runtime.sentinels import SentinelManager


@dataclass(frozen=True)
class RunServices:
    """The human loop and the sentinels of one runtime."""

    humans: HumanLoop
    """Questions, held tool calls and approval gates (docs/human-in-the-loop.md)."""
    sentinels: SentinelManager
    """The sentinels of the codon attempt in progress."""
