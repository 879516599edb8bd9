"""A background fold: ``python -m hankweave.state.fold HANKWEAVE_DIR``.

Started by the state store's writer after it rotated its log, with a lock on the segment that
outlives the writer (a writer that starts after a crash waits for it) (:mod:`hankweave.state.wal`):
writes ``state.json`` from ``state.json`` plus ``state.wal.folding``, in a process of its own so
the writer's transitions never wait for it.  The writer keeps appending to ``state.wal`` (which
follows the folded segment) and retires the segment when this exits 0.  Nothing else is
touched: the marker ``state.fold`` is written first (which segment, onto which state, into
which), then ``state.json`` is replaced (the old one kept as ``state.json.bak``).  A crash at any
moment leaves files from which loading finds every transition exactly once.

Exits 0 when the segment is folded (or already was), 1 with the reason on stderr otherwise.

This module is the store's FOLDING room: applying logged transitions to a state
(:func:`replay_segments`, which loading uses too), the background fold's process, and the
phases a writer's background fold goes through (:class:`FoldPhase`).  Reading the files is
:mod:`hankweave.state.loading`'s, rewriting ``state.json`` :mod:`hankweave.state.writing`'s.
"""

from __future__ import annotations

import enum
import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from hankweave.faults import kill_point
from hankweave.state.files import FOLD_MARKER_FILE, FOLDING_WAL_FILE, STATE_FILE
from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import StateError, parse_transition
from hankweave.state.types import HankweaveState, dump_state, parse_state
from hankweave.state.wal import FoldMarker, Segment, extends, read_segment
from hankweave.state.writing import replace_state_file

SYNC_CHUNK_BYTES = 512 * 1024
"""``state.json`` is written and synced this much at a time, so the writer's log syncs, which
go on during the fold, never wait for more than this much of it to reach the disk."""


class FoldPhase(enum.Enum):
    """Where a writer's background fold is (:class:`hankweave.state.store.StateStore`).

    A fold done in the writer's own process (a small state, ``close()``) has no phase: it runs
    under the writer's lock from start to end."""

    IDLE = "idle"
    """No segment is out for folding: ``state.wal`` alone extends ``state.json``."""
    RUNNING = "running"
    """``state.wal.folding`` is being folded by another process; ``state.wal`` follows it."""
    WAITING = "waiting"
    """``state.wal.folding`` is out, and no process folds it: its fold failed (tried again
    ``FOLD_RETRY_S`` later), the writer closed while it ran, or a writer that died left it.  The
    next fold that is due folds it (a fold here includes it)."""


@dataclass
class Replayed:
    """Logged transitions applied to a state."""

    state: HankweaveState
    applied: int = 0
    skipped: list[str] = field(default_factory=list)
    """One line per transition that could not be applied, naming the segment and line."""


def replay_segments(state: HankweaveState, segments: Sequence[Segment]) -> Replayed:
    """Apply the transitions of ``segments``, in order, to ``state``; a line that does not parse
    or apply is skipped (and said)."""
    replayed = Replayed(state)
    for segment in segments:
        for number, line in enumerate(segment.lines, start=2):
            try:
                replayed.state = apply_transition(replayed.state, parse_transition(line))
                replayed.applied += 1
            except (ValidationError, ValueError, StateError) as exc:
                replayed.skipped.append(f"{segment.name} line {number}: skipped ({exc})")
    return replayed


class FoldError(Exception):
    """The segment cannot be folded onto ``state.json``; the message says why."""


def fold_segment(hankweave_dir: Path) -> bool:
    """Fold ``state.wal.folding`` into ``state.json``; False when it already was."""
    raw = (hankweave_dir / STATE_FILE).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    marker = FoldMarker.read(hankweave_dir / FOLD_MARKER_FILE)
    segment = read_segment(hankweave_dir / FOLDING_WAL_FILE)
    if segment is None or segment.id is None:
        raise FoldError(f"{hankweave_dir / FOLDING_WAL_FILE}: no log segment to fold")
    if marker is not None and marker.segment == segment.id and marker.state == digest:
        return False
    if not extends(segment, digest, marker):
        raise FoldError(f"{FOLDING_WAL_FILE} does not extend this {STATE_FILE}")
    replayed = replay_segments(parse_state(raw), [segment])
    if replayed.skipped:
        raise FoldError("; ".join(replayed.skipped))
    data = dump_state(replayed.state)
    FoldMarker(segment.id, digest, hashlib.sha256(data).hexdigest()).write(
        hankweave_dir / FOLD_MARKER_FILE)
    kill_point("state.fold.marker")
    replace_state_file(hankweave_dir, data, sync_chunk=SYNC_CHUNK_BYTES)
    kill_point("state.fold.replaced")
    return True


def main(argv: list[str]) -> int:
    # argv[2], when given, is the descriptor of the segment's lock the writer passed on; it is
    # held until this process exits.
    if len(argv) not in (2, 3):
        print("usage: python -m hankweave.state.fold HANKWEAVE_DIR [LOCK_FD]", file=sys.stderr)
        return 2
    try:
        fold_segment(Path(argv[1]))
    except (FoldError, OSError, ValueError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
