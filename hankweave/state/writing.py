"""The store's WRITING room: how the files of ``.hankweave/`` are rewritten durably.

``state.json`` is rewritten in one way only, :func:`replace_state_file`, by both folds: the
writer's own (:meth:`hankweave.state.store.StateStore.fold`, ``close()``, a small state's timed
fold) and the background fold's process (:mod:`hankweave.state.fold`).  Two folds are needed,
not one: serialising a large state holds Python's GIL for as long as it takes, so it is done
in another process, while a small state is folded in a few milliseconds in the writer, which
also starts its next log there (:func:`retire_folded_logs`).  A transition is one append to
``state.wal`` (:class:`OpenLog`); the writer (:class:`hankweave.state.store.StateStore`) decides
when, and when to fold.  Reading is :mod:`hankweave.state.loading`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from hankweave.faults import disk_write, kill_point
from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes, fsync_dir, last_line_start
from hankweave.state.files import (
    BACKUP_FILE,
    FOLDING_WAL_FILE,
    PREVIOUS_WAL_FILE,
    STATE_FILE,
    WAL_FILE,
)
from hankweave.state.transitions import StateError
from hankweave.state.wal import Segment, header, new_segment_id, read_segment

log = logging.getLogger(__name__)

SYNC_INLINE_MAX_S = 0.0005
"""A log ``fdatasync`` that takes less than this on average is done on the event loop."""
SYNC_SLOW_S = 0.002


class PersistenceError(StateError):
    """The state could not be written; the transition was not applied."""


@dataclass
class OpenLog:
    """``state.wal`` as a writer appends to it."""

    path: Path
    fd: int | None = None
    size: int = 0
    """Its bytes, header included: a failed append is cut back to this."""
    segment_id: str | None = None
    """Its header's id (None for a log of the first format, which has none)."""
    dir_unsynced: bool = False
    """A rotation renamed the log: the next sync syncs the directory too, so the entry lasts."""
    sync_seconds: float = SYNC_INLINE_MAX_S * 2
    """A moving average of ``fdatasync``: measured in a thread until known fast."""

    def continue_on(self, segment: Segment | None, base: str) -> None:
        """Append to ``state.wal`` as loaded (``segment``), or start it on the state whose
        digest is ``base``."""
        if segment is None:
            self.segment_id = new_segment_id()
            atomic_write_bytes(self.path, header(self.segment_id, base=base),
                               mode=PRIVATE_FILE_MODE)
        else:
            self.segment_id = segment.id
        self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self.size = _cut_torn_tail(self.fd)

    def append(self, line: bytes) -> None:
        """Write one transition line: it survives a killed process once this returns."""
        assert self.fd is not None
        try:
            disk_write(self.path)
            written = os.write(self.fd, line)
            if written != len(line):
                raise OSError(f"short write to {WAL_FILE} ({written} of {len(line)} bytes)")
        except OSError as exc:
            # Take back a partial line: the next append would glue onto it and be lost.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.size)
            raise PersistenceError(f"cannot append to {self.path}: {reason(exc)}") from exc
        self.size += len(line)
        kill_point("state.append")

    def sync(self) -> None:
        """``fdatasync`` the log (and the directory after a rotation): what was appended
        survives a machine crash once this returns."""
        assert self.fd is not None
        try:
            started = time.perf_counter()
            os.fdatasync(self.fd)
            took = time.perf_counter() - started
            # A moving average of the sync alone; one slow sync sends the next ones to a thread.
            self.sync_seconds = max(0.8 * self.sync_seconds + 0.2 * took,
                                    took if took > SYNC_SLOW_S else 0.0)
            if self.dir_unsynced:  # a rotation renamed the log: its entry must last too
                fsync_dir(self.path.parent)
                self.dir_unsynced = False
        except OSError as exc:
            raise PersistenceError(f"cannot fsync {self.path}: {exc}") from exc

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _cut_torn_tail(fd: int) -> int:
    """Cut a last line that lacks its newline (the process died writing it, so it was never
    acknowledged) and return the size left: the next append must start a line of its own."""
    size = os.fstat(fd).st_size
    keep = last_line_start(fd, size)
    if keep < size:
        os.ftruncate(fd, keep)
    return keep


def reason(exc: OSError) -> str:
    """An OS error in words, without the path the message around it already names."""
    return exc.strerror or str(exc)


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
