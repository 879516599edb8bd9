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
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from hankweave.faults import kill_point
from hankweave.state.files import FOLD_MARKER_FILE, FOLDING_WAL_FILE, STATE_FILE
from hankweave.state.types import dump_state, parse_state
from hankweave.state.wal import FoldMarker, extends, read_segment, replace_state_file

SYNC_CHUNK_BYTES = 512 * 1024
"""``state.json`` is written and synced this much at a time, so the writer's log syncs, which
go on during the fold, never wait for more than this much of it to reach the disk."""


class FoldError(Exception):
    """The segment cannot be folded onto ``state.json``; the message says why."""


def fold_segment(hankweave_dir: Path) -> bool:
    """Fold ``state.wal.folding`` into ``state.json``; False when it already was."""
    from hankweave.state.store import LoadReport, _replay

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
    report = LoadReport(method="primary")
    state = _replay(parse_state(raw), [segment], report)
    if report.wal_skipped:
        raise FoldError("; ".join(report.warnings))
    data = dump_state(state)
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
