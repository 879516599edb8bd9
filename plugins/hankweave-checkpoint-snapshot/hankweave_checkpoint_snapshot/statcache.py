"""``stat-cache.json``: path -> (size, mtime, inode, ctime, hash), so a file is read only when
its ``lstat`` differs from the one its hash was taken at.

Only a cache: a missing or damaged one is an empty one, and every entry names a durable object.
Files changed in the very clock tick of a scan are not cached (see
:func:`hankweave.workspace.trusted_before`).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import TypeAlias

from hankweave.api import PRIVATE_FILE_MODE, atomic_write_bytes, open_private
from hankweave_checkpoint_snapshot.formats import HASH, STAT_CACHE_FORMAT, FileEntry, canonical_json
from hankweave_checkpoint_snapshot.objects import OPEN_READ, hash_stream

STAT_CACHE_SLACK = 256
"""How many stat-cache entries may change before the cache is written again."""

StatKey: TypeAlias = tuple[int, int, int, int]  # size, mtime_ns, inode, ctime_ns
CachedStat: TypeAlias = tuple[int, int, int, int, str]  # a StatKey and the content's hash


class StatCache:
    """The stat cache of one store, read once and written when enough of it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, CachedStat] | None = None
        self._unsaved = 0  # entries changed since the cache was last written

    def load(self) -> dict[str, CachedStat]:
        """The stat cache; a missing, unreadable or malformed one is an empty one."""
        if self._entries is None:
            cache: dict[str, CachedStat] = {}
            try:
                raw = json.loads(self.path.read_bytes())
                if raw.get("format") == STAT_CACHE_FORMAT:
                    for path, value in raw["entries"].items():
                        if (isinstance(value, list) and len(value) == 5
                                and all(type(v) is int for v in value[:4])
                                and isinstance(value[4], str) and HASH.fullmatch(value[4])):
                            cache[path] = tuple(value)
            except (OSError, ValueError, AttributeError, KeyError, TypeError):
                cache = {}
            self._entries = cache
        return self._entries

    def keep(self, cache: dict[str, CachedStat], changed: int) -> None:
        """Make ``cache`` the stat cache; write it once enough of it changed (and at
        :meth:`close`): an older copy on disk is still right, it only costs re-reading the
        files changed since, and rewriting a 100,000-entry cache for every one-file
        checkpoint would cost more than the checkpoint."""
        previous = self._entries
        self._entries = cache
        self._unsaved += changed + abs(len(cache) - len(previous or ()))
        if self._unsaved > max(STAT_CACHE_SLACK, len(cache) // 50):
            self.save(cache)

    def save(self, cache: dict[str, CachedStat], *, durable: bool = False) -> None:
        self._entries = cache
        self._unsaved = 0
        data = canonical_json({"format": STAT_CACHE_FORMAT, "entries": cache})
        if durable:
            atomic_write_bytes(self.path, data, mode=PRIVATE_FILE_MODE)
            return
        # Not fsynced: losing the cache only costs a re-hash, and an older copy is still right,
        # because every entry is a fact about a stat that no later change can reproduce.
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        os.close(open_private(tmp, os.O_WRONLY | os.O_TRUNC))
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    def current_hash(self, path: str, full: str, st: os.stat_result) -> str | None:
        """The hash of a work-tree file's content, from the stat cache when it can be trusted."""
        cached = self.load().get(path)
        if cached is not None and cached[:4] == stat_key(st):
            return cached[4]
        try:
            fd = os.open(full, OPEN_READ)
        except OSError:
            return None
        with open(fd, "rb") as source:
            return hash_stream(source)[0]

    def close(self) -> None:
        """Write the cache if it changed (best effort); forget it."""
        if self._entries is not None and self._unsaved:
            with contextlib.suppress(OSError):
                self.save(self._entries)
        self._entries = None


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def matches_cache(cached: CachedStat, st: os.stat_result) -> bool:
    """Whether a work-tree file is a regular file with the stat its cache entry recorded (so
    it holds the content the entry names)."""
    return (stat.S_ISREG(st.st_mode) and cached[0] == st.st_size
            and cached[1] == st.st_mtime_ns and cached[2] == st.st_ino
            and cached[3] == st.st_ctime_ns)


def unchanged_since_cached(cached: CachedStat | None, entry: FileEntry,
                            st: os.stat_result | None) -> bool:
    """Whether a work-tree file is, by the stat cache, a regular file holding ``entry``."""
    return (cached is not None and st is not None and cached[4] == entry.hash
            and matches_cache(cached, st))

