"""The work-tree side of the backend: which files git may store, and removing covered files.

Nothing here follows a symlink or touches the data link or a ``.git`` directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from hankweave.api import DATA_LINK


def remove_covered_file(work_tree: Path, rel: str) -> Path | None:
    """Unlink ``rel`` unless reaching it crosses a symlink; return its directory if removed.

    Directories, the data link and anything inside a ``.git`` are never touched.
    """
    parts = rel.split("/")
    if parts[0] == DATA_LINK or ".git" in parts:
        return None
    full = work_tree.joinpath(*parts)
    if not os.path.lexists(full):
        return None
    directory = work_tree
    for part in parts[:-1]:
        directory = directory / part
        try:
            if not stat.S_ISDIR(os.lstat(directory).st_mode):
                return None  # a symlink (or file) in the way: what is behind it is not ours
        except FileNotFoundError:
            return None
    try:
        if stat.S_ISDIR(os.lstat(full).st_mode):
            return None
        os.unlink(full)
    except FileNotFoundError:
        return None
    return directory


def remove_empty_dirs(work_tree: Path, directories: Iterable[Path]) -> None:
    """Remove each directory a restore emptied, and its parents while they are empty."""
    for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        while directory != work_tree and work_tree in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                break
            directory = directory.parent


def storable(root: Path, paths: list[str]) -> list[str]:
    """The paths git can store: regular files and symlinks outside any ``.git`` directory.

    A socket or FIFO (a dev server's socket in the workspace) would make ``update-index``
    abort the whole checkpoint, so such entries are skipped.  git also refuses a ``.git``
    component in any letter case (``.GIT`` is ``.git`` on a case-insensitive disk); skipping
    those here keeps them out of the covered set, so a restore never deletes them.
    """
    kept = []
    base = str(root) + os.sep
    for rel in paths:
        if ".git" in rel.lower() and ".git" in rel.lower().split("/"):
            continue
        try:
            mode = os.lstat(base + rel).st_mode  # str concatenation: pathlib costs 5x here
        except FileNotFoundError:
            kept.append(rel)  # gone since it was resolved: update-index --remove drops it
            continue
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            kept.append(rel)
    return kept


def exported(root: Path) -> Iterator[str]:
    """The relative paths of the files and symlinks under ``root`` (links are not followed)."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        # os.walk lists a symlink to a directory among dirnames, and never descends into it.
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in [*filenames, *links]:
            yield prefix + name


def nul_join(paths: Iterable[str]) -> bytes:
    """NUL-terminated paths, as ``git update-index -z --stdin`` and our covered list read them."""
    return b"".join(os.fsencode(p) + b"\0" for p in paths)
