"""Small durable-file and process helpers shared by the whole runtime.

Every file the runtime owns (``state.json``, ``runtime.lock``, metadata files) is replaced
atomically through :func:`atomic_write_bytes`, so a reader, or the next boot after a SIGKILL, sees
either the old content or the new content, never a torn write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

from hankweave.faults import disk_write, kill_point

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "atomic_write_bytes",
    "fsync_dir",
    "last_line_start",
    "open_private",
    "parse_iso",
    "pid_alive",
    "private_dir",
    "private_tree",
    "remove_path",
    "utc_now_iso",
]

PRIVATE_DIR_MODE = 0o700
"""``.hankweave/`` and every directory in it: state, journal and codon logs hold codon ``env``
values and agent output, for the user alone whatever the umask (docs/state.md)."""
PRIVATE_FILE_MODE = 0o600
"""Every file the runtime writes in ``.hankweave/``."""


def private_dir(path: Path | str, *, tighten: bool = False) -> Path:
    """Make ``path`` (and any missing parents) directories only their owner can enter: 0700.

    What is created gets that mode exactly (then ``chmod``-ed: the umask can only take bits
    away, and an unusual one could take the owner's).  An existing directory is left as it is
    unless ``tighten``: an execution's ``.hankweave/`` made by an older version is narrowed
    when it is opened, while a parent that may be the user's own folder is never touched."""
    path = Path(path)
    missing = [path, *(parent for parent in path.parents if not parent.exists())]
    for folder in reversed(missing):
        try:
            folder.mkdir(PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, PRIVATE_DIR_MODE)
    if tighten and stat.S_IMODE(path.stat().st_mode) != PRIVATE_DIR_MODE:
        with contextlib.suppress(PermissionError):  # someone else's: leave it be
            os.chmod(path, PRIVATE_DIR_MODE)
    return path


def skip_symlinks(directory: str, names: list[str]) -> set[str]:
    """A ``shutil.copytree`` ``ignore`` that leaves symbolic links out: a tree copied out of
    an execution (a fork's) must not carry a link back into it, or anywhere else."""
    return {name for name in names if os.path.islink(os.path.join(directory, name))}


def private_tree(root: Path | str) -> None:
    """Narrow a tree copied into ``.hankweave/`` (a recording kept for a replay): directories
    0700, regular files 0600; symbolic links are not followed (their own modes mean nothing)."""
    for folder, directories, files in os.walk(root):
        os.chmod(folder, PRIVATE_DIR_MODE)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, PRIVATE_FILE_MODE)
        directories[:] = [d for d in directories if not os.path.islink(os.path.join(folder, d))]


def open_private(path: Path | str, flags: int) -> int:
    """``os.open(path, flags | O_CREAT)`` for a file only its owner can read: 0600 whatever the
    umask, and an older file of ours with wider bits is narrowed too."""
    fd = os.open(path, flags | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_FILE_MODE:
            with contextlib.suppress(PermissionError):
                os.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fsync_dir(path: Path | str) -> None:
    """Flush a directory's entries (creations, renames, unlinks) to stable storage.

    Filesystems that cannot fsync a directory are tolerated: there is nothing more we can do there.
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:
        # Windows cannot open a directory; its renames are durable enough for our purpose.
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def last_line_start(fd: int, size: int) -> int:
    """The offset where the last line of the first ``size`` bytes of ``fd`` begins: just after
    its last newline, or 0 (read backwards in chunks, so a long file costs its last line)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def write_fully(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until all of ``data`` is written (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_synced_in_chunks(fd: int, data: bytes, chunk: int) -> None:
    """Write ``data`` ``chunk`` bytes at a time, each ``fdatasync``'d before the next.

    For a large file written while another file is being synced often (the state store's log
    during a background fold): a journalling file system commits the data of the blocks a
    transaction allocated before the transaction itself (ext4's ordered mode), so a log sync
    that shares a transaction with megabytes of this file's unwritten data waits for all of
    it.  Synced a chunk at a time, it waits for one chunk at most."""
    view = memoryview(data)
    for start in range(0, len(view), chunk):
        write_fully(fd, view[start:start + chunk])
        os.fdatasync(fd)


def _write_and_replace(path: Path, data: bytes, mode: int | None,
                       sync_chunk: int | None = None) -> None:
    """Write ``data`` to ``path.tmp-<pid>``, fsync it, set ``mode`` and rename it over ``path``."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    disk_write(path)
    # Create with the final mode so a secret-bearing file is never briefly world-readable.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    try:
        try:
            if mode is not None:
                # The umask (or a leftover tmp file) may have given other bits; force the exact mode.
                os.fchmod(fd, mode)
            if sync_chunk is None:
                write_fully(fd, data)
            else:
                write_synced_in_chunks(fd, data, sync_chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        kill_point(f"replace.{path.name}")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(
    path: Path | str,
    data: bytes,
    *,
    mode: int | None = None,
    backup: Path | str | None = None,
    sync_chunk: int | None = None,
) -> None:
    """Durably replace ``path`` with ``data``.

    The bytes go to ``<path>.tmp-<pid>`` in the same directory, are flushed and fsynced, then
    renamed over ``path`` with :func:`os.replace`, and the directory is fsynced so the rename
    survives a power loss.

    Args:
        path: the file to replace (created if missing).
        data: the complete new content.
        mode: permission bits to set on the new file (e.g. ``0o600``). When ``None`` an existing
            file keeps its permission bits and a new file gets the default mode (umask applies).
        backup: when given and ``path`` already exists, the previous content is first copied to
            this file, itself atomically, so ``backup`` always holds a complete earlier version.
        sync_chunk: write ``data`` this many bytes at a time, each synced before the next
            (:func:`write_synced_in_chunks`), rather than all at once.
    """
    path = Path(path)
    previous_mode: int | None = None
    with contextlib.suppress(FileNotFoundError):
        previous_mode = stat.S_IMODE(path.stat().st_mode)
    if backup is not None and previous_mode is not None:
        backup = Path(backup)
        # A copy, not a rename: `path` must exist at every instant for concurrent readers.
        _write_and_replace(backup, path.read_bytes(), previous_mode)
        if backup.parent.resolve() != path.parent.resolve():
            fsync_dir(backup.parent)
    _write_and_replace(path, data, mode if mode is not None else previous_mode, sync_chunk)
    fsync_dir(path.parent)


def remove_path(path: Path) -> None:
    """Remove a file, a symlink (never what it points at) or a whole directory tree."""
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists, as seen by ``kill(pid, 0)``.

    Only "no such process" means dead; a permission error means the process exists but belongs to
    someone else, so it counts as alive. A zombie (exited but not yet reaped) counts as alive.
    Non-positive pids are never alive: ``kill(0|-n, 0)`` would address process groups.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        # Larger than any pid the OS can hand out.
        return False
    return True


def process_running(pid: int) -> bool:
    """Whether a process with this pid is running: alive, and not a zombie that has exited and
    waits for its parent to reap it (read from ``/proc``; without it, as :func:`pid_alive`)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def utc_now_iso() -> str:
    """The current UTC time as ISO-8601 with milliseconds and ``Z``, e.g. ``2026-09-02T08:31:56.104Z``.

    This is the shape of JavaScript's ``Date.toISOString()``, used in every on-disk timestamp.
    """
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(ts: str) -> datetime:
    """Parse an ISO-8601 timestamp into an aware UTC datetime.

    Accepts a trailing ``Z`` or an explicit offset; a timestamp without an offset is taken as UTC.

    Raises:
        ValueError: ``ts`` is not an ISO-8601 timestamp.
    """
    if not isinstance(ts, str):
        raise ValueError(f"expected an ISO-8601 timestamp string, got {type(ts).__name__}")
    parsed = datetime.fromisoformat(ts.strip())
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
