"""A restore's two halves: what differs between the work tree and the target, and writing it."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Any

from hankweave.api import kill_point
from hankweave_checkpoint_snapshot.formats import FileEntry, SymlinkEntry, Tree
from hankweave_checkpoint_snapshot.objects import ObjectStore
from hankweave_checkpoint_snapshot.statcache import StatCache, unchanged_since_cached
from hankweave_checkpoint_snapshot.worktree import WorkTree


def _same_entry(captured: dict[str, Any] | None, entry: FileEntry | SymlinkEntry) -> bool:
    """Whether a captured tree entry (a dict) holds what a checkpoint's entry holds."""
    if captured is None:
        return False
    if isinstance(entry, SymlinkEntry):
        return captured.get("type") == "symlink" and captured.get("target") == entry.target
    return (captured.get("type") == "file" and captured.get("hash") == entry.hash
            and captured.get("executable") == entry.executable)


def differences(
    target: Tree, work: WorkTree, stat_cache: StatCache, known: dict[str, dict[str, Any]],
    touched: set[str],
) -> tuple[list[tuple[str, FileEntry | SymlinkEntry]], list[tuple[str, bool]]]:
    """The target's entries the work tree does not hold (to write), and its files that
    differ only in the executable bit (to chmod).  An entry ``known`` (the last capture
    saw it as the target holds it) at a path no hinted change ``touched`` is skipped."""
    writes: list[tuple[str, FileEntry | SymlinkEntry]] = []
    chmods: list[tuple[str, bool]] = []
    cache = stat_cache.load()
    for path, entry in target.items():
        if path not in touched and _same_entry(known.get(path), entry):
            continue  # on disk as captured, which is what the target holds
        st = work.lstat(path)
        if type(entry) is FileEntry and unchanged_since_cached(cache.get(path), entry, st):
            assert st is not None
            if bool(st.st_mode & stat.S_IXUSR) != entry.executable:
                chmods.append((path, entry.executable))
            continue  # the common case, inlined: holds the target, as the cache says
        if isinstance(entry, SymlinkEntry):
            if not (st and stat.S_ISLNK(st.st_mode)
                    and os.readlink(work.full(path)) == entry.target):
                writes.append((path, entry))
        elif (st and stat.S_ISREG(st.st_mode) and st.st_size == entry.size
              and stat_cache.current_hash(path, work.full(path), st) == entry.hash):
            if bool(st.st_mode & stat.S_IXUSR) != entry.executable:
                chmods.append((path, entry.executable))
        else:
            writes.append((path, entry))
    return writes, chmods


def write_entries(work: WorkTree, entries: Sequence[tuple[str, FileEntry | SymlinkEntry]],
                  contents: dict[str, bytes | None], objects: ObjectStore, *,
                  restoring: bool, failure: str) -> None:
    """Write each entry, with its verified content (or the object streamed and checked
    again); ``failure`` says what a bad object means by then."""
    for path, entry in entries:
        if restoring:
            kill_point("checkpoint.restore")  # test-only: part of the files restored
        if isinstance(entry, SymlinkEntry):
            work.write_symlink(path, entry.target)
            continue
        data = contents.get(entry.hash)
        work.write_file(path, entry.executable, data if data is not None else
                        objects.chunks(entry.hash, (
                            f"{failure}: the stored content of {path}")))
