"""The store's WRITING room: how the files of ``.hankweave/`` are rewritten durably.

``state.json`` is rewritten in one way only, :func:`replace_state_file`, by both folds: the
writer's own (:meth:`hankweave.state.store.StateStore.fold`, ``close()``, a small state's timed
fold) and the background fold's process (:mod:`hankweave.state.fold`).  Two folds are needed,
not one: serialising a large state holds Python's GIL for as long as it takes, so it is done
in another process, while a small state is folded in a few milliseconds in the writer, which
also starts its next log there (:func:`retire_folded_logs`).  Appending to ``state.wal`` is the
writer's (:class:`hankweave.state.store.StateStore`); reading is
:mod:`hankweave.state.loading`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes, fsync_dir
from hankweave.state.files import (
    BACKUP_FILE,
    FOLDING_WAL_FILE,
    PREVIOUS_WAL_FILE,
    STATE_FILE,
    WAL_FILE,
)
from hankweave.state.wal import header, read_segment

log = logging.getLogger(__name__)


def replace_state_file(hankweave_dir: Path, data: bytes, *,
                       sync_chunk: int | None = None) -> None:
    """Replace ``state.json`` with ``data`` durably, the previous one kept as
    ``state.json.bak``.  The backup is a hard link to the old file, not a copy, so a fold
    writes the state's bytes once; where links are not possible, it is a copy.
    ``sync_chunk``: as :func:`hankweave.fsutil.atomic_write_bytes`'s."""
    state, backup = hankweave_dir / STATE_FILE, hankweave_dir / BACKUP_FILE
    linked = hankweave_dir / f"{BACKUP_FILE}.tmp-{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(linked)
        os.link(state, linked)
        os.replace(linked, backup)
    except FileNotFoundError:
        pass  # the first state.json: nothing to keep
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(linked)
        atomic_write_bytes(state, data, backup=backup, sync_chunk=sync_chunk,
                           mode=PRIVATE_FILE_MODE)
        return
    atomic_write_bytes(state, data, sync_chunk=sync_chunk, mode=PRIVATE_FILE_MODE)


def quarantine_unreadable(hankweave_dir: Path, *, backup_unreadable: bool) -> None:
    """Move unreadable state files aside before the first write: nothing recorded is lost.

    ``state.json`` and ``state.wal`` always (loading did not use them), ``state.json.bak`` too
    when ``backup_unreadable`` (loading started fresh)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    names = [STATE_FILE, BACKUP_FILE] if backup_unreadable else [STATE_FILE]
    for name in [*names, WAL_FILE]:
        path = hankweave_dir / name
        if path.exists():
            os.replace(path, path.with_name(f"{name}.corrupt-{stamp}"))
            log.warning("state: kept unreadable %s as %s.corrupt-%s", name, name, stamp)
    fsync_dir(hankweave_dir)


def retire_folded_logs(hankweave_dir: Path, *, folding: bool) -> None:
    """Keep the logs just folded as ``state.wal.prev``: they extend the ``state.json.bak``
    just made, so the two rebuild what a damaged ``state.json`` held (load_state).

    ``folding``: the writer had rotated a segment out for a background fold that did not
    finish; it is folded too, and both segments are kept as one."""
    current, folded = hankweave_dir / WAL_FILE, hankweave_dir / FOLDING_WAL_FILE
    if not folding or not folded.exists():
        with contextlib.suppress(FileNotFoundError):
            os.replace(current, hankweave_dir / PREVIOUS_WAL_FILE)
        return
    # Both segments, as one, in the order written.
    first, rest = read_segment(folded), read_segment(current)
    assert first is not None and first.id is not None
    lines = [*first.lines, *(rest.lines if rest is not None else [])]
    head = header(first.id, base=first.base) if first.base is not None else header(
        first.id, follows=first.follows)
    atomic_write_bytes(hankweave_dir / PREVIOUS_WAL_FILE,
                       head + b"".join(line + b"\n" for line in lines),
                       mode=PRIVATE_FILE_MODE)
    os.unlink(folded)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(current)
