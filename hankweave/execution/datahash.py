"""The data-source hash that ties an execution to its input data (docs/behaviour.md §2.6).

Auto mode resumes the newest execution whose recorded hash matches, and an explicit `-e`
execution refuses a data source whose hash changed. The hash is cheap rather than exact: a file
is hashed with its content, a directory only by its structure (names, sizes, mtimes) to a
bounded depth, breadth and time, so touching or adding a file changes it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

DEFAULT_TIME_LIMIT_MS = 5000
MAX_DEPTH = 3
"""The root is depth 0; sub-directories are entered while depth < 3 (4 levels in all)."""
MAX_ITEMS_PER_DIR = 100
SKIPPED_NAMES = frozenset({"node_modules", "__pycache__", "dist", "build"})
"""Skipped besides every name starting with `.`."""
HASH_LENGTH = 12
_CHUNK = 1024 * 1024


def hash_data_source(path: Path, time_limit_ms: int = DEFAULT_TIME_LIMIT_MS) -> str:
    """The 12-hex-character hash of a data file or directory.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is neither a regular file nor a directory.
    """
    info = os.stat(path)
    if stat.S_ISREG(info.st_mode):
        return _hash_file(Path(path), info)
    if stat.S_ISDIR(info.st_mode):
        return _hash_directory(Path(path), time_limit_ms)
    raise ValueError(f"Data source is not a file or directory: {path}")


def _js_number(value: float) -> str:
    """A number as JavaScript prints it (`1.5`, `1712345678901`), so hashes match the original."""
    return str(int(value)) if value.is_integer() else repr(value)


def _hash_file(path: Path, info: os.stat_result) -> str:
    digest = hashlib.sha256()
    mtime_ms = info.st_mtime_ns / 1_000_000
    digest.update(f"file:{path.name}:{info.st_size}:{_js_number(mtime_ms)}".encode())
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()[:HASH_LENGTH]


def _sort_key(name: str) -> tuple[str, str]:
    # Approximates JavaScript's localeCompare: case-insensitive first, lower case before upper.
    return (name.casefold(), name.swapcase())


def _hash_directory(root: Path, time_limit_ms: int) -> str:
    root = Path(os.path.abspath(root))
    entries: list[str] = []
    deadline = time.monotonic() + time_limit_ms / 1000
    timed_out = False

    def scan(directory: Path, depth: int) -> None:
        nonlocal timed_out
        if time.monotonic() > deadline:
            if not timed_out:
                entries.append("TIMEOUT:scan_truncated")
                timed_out = True
            return
        try:
            with os.scandir(directory) as listing:
                items = sorted(listing, key=lambda entry: _sort_key(entry.name))
        except OSError as exc:
            entries.append(f"e:{directory}:read_error:{exc.strerror or exc}")
            return
        if len(items) > MAX_ITEMS_PER_DIR:
            entries.append(f"TRUNCATED:{directory}:{len(items) - MAX_ITEMS_PER_DIR}_more_items")
        # As in the original, the 100 are taken before skipped names are dropped.
        for item in items[:MAX_ITEMS_PER_DIR]:
            if item.name.startswith(".") or item.name in SKIPPED_NAMES:
                continue
            relative = os.path.relpath(item.path, root)
            try:
                info = os.stat(item.path)
            except OSError as exc:
                entries.append(f"e:{relative}:{exc.strerror or exc}")
                continue
            mtime = info.st_mtime_ns // 1_000_000_000
            # The entry type does not follow symlinks, so a linked directory is never entered.
            is_dir = item.is_dir(follow_symlinks=False)
            if is_dir:
                entries.append(f"d:{relative}:{mtime}")
            else:
                entries.append(f"f:{relative}:{info.st_size}:{mtime}")
            if is_dir and depth < MAX_DEPTH:
                scan(Path(item.path), depth + 1)

    scan(root, 0)
    if len(entries) < 5:
        # Few entries say little about the data; the path keeps small sources apart.
        entries.append(f"path:{root}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:HASH_LENGTH]
