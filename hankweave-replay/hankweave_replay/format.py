"""The recording format: what a ``.hwrec.tar.gz`` archive holds and where, and its one error.

Light on purpose (no pydantic, no tar files): the plugin's entry point, which every
``hankweave`` start loads, takes :data:`RECORDING_SUFFIX` from here.
"""

from __future__ import annotations

from typing import Literal

__version__ = "0.1.0"

FORMAT: Literal["hankweave-recording"] = "hankweave-recording"
FORMAT_VERSION = 1
"""Bumped when a reader of an older version could not replay the archive correctly."""
RECORDING_SUFFIX = ".hwrec.tar.gz"
"""How a recording's archive is named."""

MANIFEST_FILE = "recording.json"
STATE_FILE = "state.json"
META_FILE = "execution-meta.json"
HANK_DIR = "hank"
DATA_DIR = "data"
LOGS_DIR = "logs"
SNAPSHOTS_DIR = "snapshots"


class RecordingError(ValueError):
    """A recording cannot be written, unpacked or opened; the message says what and where.

    A ``ValueError``, so the kernel's launch reports it as "Cannot replay SOURCE: ...".
    """


def size_text(size: int) -> str:
    """A byte count as messages and notes show it (``3.2 MiB``, ``512 bytes``)."""
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} bytes"
