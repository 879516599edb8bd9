"""Which paths the store has seen: the index's paths, and every path a checkpoint ever held.

A restore removes the "covered" files the target does not hold; both sets are read from the
repository once and then kept up to date in memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from hankweave.api import CheckpointStorageError

from hankweave_checkpoint_git.commands import GitRunner
from hankweave_checkpoint_git.environment import NO_PROGRAMS_IN_DIFFS
from hankweave_checkpoint_git.refs import COVERED_PATHS
from hankweave_checkpoint_git.worktree import nul_join


class IndexPaths:
    """The paths of the index: a stat cache of the last tree written or checked out.

    Kept in memory while the index file (inode, mtime, size) is the one last read or written.
    """

    def __init__(self, git_dir: Path) -> None:
        self.index = git_dir / "index"
        self._cache: tuple[tuple[int, int, int], frozenset[str]] | None = None

    def _key(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.index)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def paths(self, git: GitRunner) -> set[str]:
        key = self._key()
        if key is None:
            return set()
        if self._cache is not None and self._cache[0] == key:
            return set(self._cache[1])
        out = git.run("ls-files", "-z", in_work_tree=True)
        paths = {os.fsdecode(p) for p in out.split(b"\0") if p}
        self._cache = (key, frozenset(paths))
        return paths

    def remember(self, paths: Iterable[str]) -> None:
        """The index now holds ``paths`` (written by the caller's last git command)."""
        key = self._key()
        self._cache = (key, frozenset(paths)) if key is not None else None

    def check(self, git: GitRunner) -> None:
        """An index git cannot read is dropped: here it is only a cache of the last tree."""
        self._cache = None
        try:
            self.paths(git)
        except CheckpointStorageError:
            with contextlib.suppress(FileNotFoundError):
                self.index.unlink()
            self._cache = None

    def forget(self) -> None:
        self._cache = None


class CoveredPaths:
    """``hankweave/covered-paths``: every path a checkpoint ever held, NUL-separated, so a
    restore knows which files are covered without reading every tree."""

    def __init__(self, git_dir: Path) -> None:
        self.path = git_dir / COVERED_PATHS
        self._paths: set[str] | None = None

    def paths(self, git: GitRunner) -> set[str]:
        if self._paths is not None:
            return set(self._paths)
        path = self.path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = self._rebuild(git)
        if data and not data.endswith(b"\0"):
            # A record torn by a kill: drop it, or the next append would glue onto it.
            data = data[: data.rfind(b"\0") + 1]
            with path.open("r+b") as fh:
                fh.truncate(len(data))
        self._paths = {os.fsdecode(p) for p in data.split(b"\0") if p}
        return set(self._paths)

    def _rebuild(self, git: GitRunner) -> bytes:
        """Every path any reachable commit added, i.e. every path a checkpoint held."""
        out = git.run("log", *NO_PROGRAMS_IN_DIFFS, "--all", "--no-renames", "--name-only", "-z",
                      "--format=")
        paths = sorted({p for p in out.split(b"\0") if p})
        data = b"".join(p + b"\0" for p in paths)
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return data

    def note(self, git: GitRunner, files: Sequence[str]) -> None:
        """Add ``files`` durably (before a commit holds them: the set is never smaller)."""
        covered = self.paths(git)
        new = [f for f in files if f not in covered]
        if not new:
            return
        with self.path.open("ab") as fh:
            fh.write(nul_join(new))
            fh.flush()
            os.fsync(fh.fileno())
        assert self._paths is not None
        self._paths.update(new)

    def forget(self) -> None:
        self._paths = None
