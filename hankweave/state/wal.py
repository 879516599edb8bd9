"""The transition log's files: segments, their headers, and the chain a state is rebuilt from.

A log is kept in **segments**.  Each begins with a header line naming what it extends, then one
transition per line:

* ``{"wal": 2, "id": "<id>", "base": "<sha256>"}`` extends the ``state.json`` whose bytes have
  that digest (version 1 headers, ``{"wal": 1, "base": …}``, have no id and read the same);
* ``{"wal": 2, "id": "<id>", "follows": "<id>"}`` continues the segment with that id.

``state.wal`` is the segment being appended to.  A background fold rotates it out as
``state.wal.folding`` (the new ``state.wal`` follows it), folds it into ``state.json`` in another
process, and records what it did in the marker ``state.fold`` (``{"segment", "base",
"state"}``: the segment, the digest of the ``state.json`` it extended, the digest of the one it
produced) before it replaces ``state.json``.  A fold in this process (``close()``) writes a new
``state.wal`` whose header names the new ``state.json`` directly.  The last folded segments are
kept as ``state.wal.prev``: they extend ``state.json.bak``.

:func:`chain` finds, for a state of a known digest, the segments that extend it, in order: the
one whose ``base`` is that digest (or that the marker says extended it), then each segment that
follows the last; after a background fold, the segment that follows the one the marker says
produced that digest.  Whatever moment a fold was cut at, exactly the transitions not yet in the
state are found, each once.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes

WAL_VERSION = 2


@dataclass
class Segment:
    """One log file, read: its header's fields and its complete transition lines."""

    name: str
    id: str | None = None
    base: str | None = None
    follows: str | None = None
    lines: list[bytes] = field(default_factory=list)
    torn_bytes: int = 0
    """The size of a last line without its newline (never acknowledged; not in ``lines``)."""
    unreadable: bool = False


@dataclass(frozen=True)
class FoldMarker:
    """``state.fold``: segment ``segment`` extended the state ``base`` and was folded into the
    state ``state`` (digests of ``state.json`` bytes)."""

    segment: str
    base: str
    state: str

    @classmethod
    def read(cls, path: Path) -> FoldMarker | None:
        try:
            data = json.loads(path.read_bytes())
            return cls(str(data["segment"]), str(data["base"]), str(data["state"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, path: Path) -> None:
        atomic_write_bytes(path, json.dumps({"wal": WAL_VERSION, "segment": self.segment,
                                             "base": self.base, "state": self.state}).encode(),
                           mode=PRIVATE_FILE_MODE)


def new_segment_id() -> str:
    return secrets.token_hex(8)


def header(segment_id: str, *, base: str | None = None, follows: str | None = None) -> bytes:
    fields: dict[str, Any] = {"wal": WAL_VERSION, "id": segment_id}
    if base is not None:
        fields["base"] = base
    else:
        fields["follows"] = follows
    return json.dumps(fields).encode() + b"\n"


def read_segment(path: Path) -> Segment | None:
    """The segment in ``path``; None when there is no such file (or it is empty)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data:
        return None
    lines = data.split(b"\n")
    segment = Segment(path.name, torn_bytes=len(lines[-1]))
    lines = lines[:-1]
    try:
        fields = json.loads(lines[0]) if lines else {}
        if not isinstance(fields, dict) or not ("base" in fields or "follows" in fields):
            raise ValueError("no base")
    except ValueError:
        segment.unreadable = True
        return segment
    segment.id = fields.get("id")
    segment.base = fields.get("base")
    segment.follows = fields.get("follows")
    segment.lines = lines[1:]
    return segment


def extends(segment: Segment, digest: str, marker: FoldMarker | None) -> bool:
    """Whether ``segment`` applies directly to the state whose digest is ``digest``."""
    if segment.unreadable:
        return False
    if segment.base is not None:
        return segment.base == digest
    if marker is None:
        return False
    # It was folded, and ``digest`` is the state it was folded onto; or it follows the segment
    # the marker's fold produced ``digest`` from.
    return ((segment.id is not None and marker.segment == segment.id and marker.base == digest)
            or (segment.follows == marker.segment and marker.state == digest))


def chain(digest: str, segments: Sequence[Segment | None],
          marker: FoldMarker | None) -> list[Segment]:
    """The segments to replay, in order, on the state whose digest is ``digest``."""
    candidates = [s for s in segments if s is not None and not s.unreadable]
    first = next((s for s in candidates if extends(s, digest, marker)), None)
    found: list[Segment] = []
    if first is not None:
        found.append(first)
        last = first.id
    elif marker is not None and marker.state == digest:
        last = marker.segment  # the state is that segment's fold: what follows it applies
    else:
        return []
    while last is not None:
        following = next((s for s in candidates if s.follows == last and s not in found), None)
        if following is None:
            break
        found.append(following)
        last = following.id
    return found
