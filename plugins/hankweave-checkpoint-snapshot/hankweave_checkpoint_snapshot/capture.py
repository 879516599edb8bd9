"""Reading the work tree into a checkpoint's tree entries: a scan, or a change hint followed.

File contents are stored as objects on the way; a file whose ``lstat`` matches the stat cache
is not read at all, so a checkpoint costs one directory walk, one ``lstat`` per file, and work
proportional to what changed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.api import WorkspaceScan
from hankweave_checkpoint_snapshot.objects import ObjectStore
from hankweave_checkpoint_snapshot.statcache import CachedStat, matches_cache, stat_key
from hankweave_checkpoint_snapshot.treetext import TreeText


@dataclass
class Capture:
    """What one look at the work tree found."""

    entries: dict[str, dict[str, Any]]
    """The tree entries of the selected files."""
    stat_cache: dict[str, CachedStat]
    """The stat cache to keep once the checkpoint is durable."""
    hashed: int
    """How many files were read."""
    changed: set[str] | None
    """The paths whose entry may differ from the last commit's (None when that is unknown)."""


class Capturer:
    """Reads work-tree files into tree entries for one checkpoint.

    ``previous`` is the stat cache as it stands; ``trusted_before`` the file-system time before
    which a file's stat may be cached; ``store_file`` hashes and stores a file that must be read.
    """

    def __init__(self, work_tree: Path, previous: dict[str, CachedStat], trusted_before: int,
                 objects: ObjectStore,
                 store_file: Callable[[str], tuple[str, int, os.stat_result]]) -> None:
        self.root = f"{work_tree}/"  # joined by concatenation: this runs once per file
        self.previous = previous
        self.trusted_before = trusted_before
        self.objects = objects
        self.store_file = store_file

    def scan(self, files: Iterable[str], last: dict[str, dict[str, Any]] | None) -> Capture:
        """The selected ``files``, compared with ``last`` (the last commit's entries)."""
        previous = self.previous
        cache: dict[str, CachedStat] = {}
        entries: dict[str, dict[str, Any]] = {}
        changed: set[str] = set()
        hashed = 0
        # The loop runs once per file of the work tree, so the common case (a regular file
        # whose lstat matches the stat cache, and whose entry is the last commit's) is inlined:
        # such a file costs its lstat and little more.  Everything else is _read_file's.
        root = self.root
        lstat, known = os.lstat, self.objects.known
        last_entries = last if last is not None else {}
        for path in files:
            cached = previous.get(path)
            if cached is not None and cached[4] in known:
                try:
                    st = lstat(root + path)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # deleted while we walked: it is simply not in this checkpoint
                if matches_cache(cached, st):
                    # Cached only once trusted, and unchanged since: still trusted.
                    cache[path] = cached
                    executable = bool(st.st_mode & stat.S_IXUSR)
                    entry = last_entries.get(path)
                    if (entry is not None and entry.get("hash") == cached[4]
                            and entry["executable"] == executable):
                        entries[path] = entry  # as committed last (same hash, so same size)
                        continue
                    entries[path] = {"type": "file", "hash": cached[4], "size": st.st_size,
                                     "executable": executable}
                    changed.add(path)
                    continue
            hashed += self._read_file(path, entries, cache)
            if last is not None and entries.get(path) != last.get(path):
                changed.add(path)
        if last is None:
            return Capture(entries, cache, hashed, None)
        changed.update(path for path in last if path not in entries)
        return Capture(entries, cache, hashed, changed)

    def follow(self, entries: dict[str, dict[str, Any]], paths: Iterable[str],
               patterns: tuple[str, ...], tree: TreeText, scan: WorkspaceScan) -> Capture:
        """As :meth:`scan`, from the previous capture's ``entries`` (its tree is ``tree``) and
        the paths a hint names: each path (and, for a directory, everything below it) is
        dropped and read again.

        ``entries`` are updated in place: the base they come from is used up either way (a
        failure leaves none, and the next checkpoint scans).
        """
        cache = dict(self.previous)
        hashed = 0
        changed: set[str] = set()
        for rel in sorted(paths):
            for gone in tree.under(rel):
                entries.pop(gone, None)
                cache.pop(gone, None)
                changed.add(gone)
            for path in scan.resolve_under(patterns, rel):
                hashed += self._read_file(path, entries, cache)
                changed.add(path)
        return Capture(entries, cache, hashed, changed)

    def _read_file(self, path: str, entries: dict[str, dict[str, Any]],
                   cache: dict[str, CachedStat]) -> int:
        """Add one work-tree file to ``entries`` (and ``cache``); 1 if it was read, else 0."""
        full = self.root + path
        read = 0
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                entries[path] = {"type": "symlink", "target": os.readlink(full)}
                return 0
            if not stat.S_ISREG(st.st_mode):
                return 0  # sockets, fifos, devices: nothing a checkpoint can hold
            cached = self.previous.get(path)
            if (cached is not None and cached[:4] == stat_key(st)
                    and self.objects.has(cached[4], durable=True)):
                digest, size = cached[4], st.st_size
            else:
                digest, size, st = self.store_file(full)
                read = 1
        except (FileNotFoundError, NotADirectoryError):
            cache.pop(path, None)
            return 0  # deleted while we walked: it is simply not in this checkpoint
        entries[path] = {"type": "file", "hash": digest, "size": size,
                         "executable": bool(st.st_mode & stat.S_IXUSR)}
        if max(st.st_mtime_ns, st.st_ctime_ns) < self.trusted_before:
            cache[path] = (*stat_key(st), digest)
        else:
            cache.pop(path, None)
        return read
