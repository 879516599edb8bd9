"""What ``hankweave run --replay`` needs from a recording, and where it finds one.

The kernel knows nothing else of replay: the harness registered as :data:`REPLAY_HARNESS`
(``hankweave-replay`` provides it) opens a recording with its ``open_recording`` class method
and returns a :class:`Playback`.  Kept apart from the launch so a plugin can name these at
import time for free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hankweave.harness import Harness

REPLAY_HARNESS = "replay"
"""The registered name of the harness that plays recordings (``hankweave-replay``)."""


class Playback(Protocol):
    """A recording opened for ``run --replay``: what the launch needs to play it back.

    The harness registered as :data:`REPLAY_HARNESS` opens one with its ``open_recording``
    class method (``hankweave-replay`` defines both); the kernel knows no more of replay.
    """

    root: Path
    """The folder the recording was opened from or unpacked into; it holds ``hank_path`` and
    ``data_path``. A new execution keeps a copy of it (``.hankweave/recording/``) and opens
    that copy when it is resumed, so it never needs the source again."""
    hank_path: Path
    data_path: Path | None
    harness: type[Harness]
    warnings: list[str]

    def missing_logs(self, codon_ids: Sequence[str]) -> list[str]:
        """The planned codons the recording has no log for."""

    def close(self) -> None:
        """Remove whatever opening the recording unpacked (never a folder it was opened from)."""
