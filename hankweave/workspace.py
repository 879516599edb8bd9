"""The agent workspace (``agentRoot/``): which files the ``checkpointedFiles`` globs select.

One resolver for every backend and every caller, so "what a checkpoint holds" means the same
thing everywhere:

* patterns are globs relative to ``agentRoot`` with fast-glob semantics (``*`` and ``?`` never
  cross ``/``, ``**`` spans directories, a pattern naming a directory selects everything below
  it);
* ``.gitignore`` files anywhere in the tree are honoured;
* ``read_only_data_source/`` (the input-data link) and any ``.git`` directory are never selected,
  and symlinks to directories are not followed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path

DATA_LINK = "read_only_data_source"


@lru_cache(maxsize=512)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile one glob into a regex matching "/"-separated relative paths."""
    pattern = pattern.strip()
    if pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.rstrip("/")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(ch))
                i += 1
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        elif ch == "{":
            end = pattern.find("}", i + 1)
            if end == -1:
                out.append(re.escape(ch))
                i += 1
            else:
                options = pattern[i + 1 : end].split(",")
                out.append("(?:" + "|".join(re.escape(o) for o in options) + ")")
                i = end + 1
        else:
            out.append(re.escape(ch))
            i += 1
    # A pattern that names a directory selects everything below it.
    return re.compile("".join(out) + "(?:/.*)?")


def matches_any(path: str, patterns: Sequence[str]) -> bool:
    return any(glob_regex(p).fullmatch(path) for p in patterns if p.strip())


class _IgnoreRules:
    """The ``.gitignore`` files met while walking, each anchored at its own directory."""

    def __init__(self) -> None:
        self._specs: list[tuple[str, object]] = []

    def add(self, rel_dir: str, gitignore: Path) -> None:
        import pathspec

        try:
            lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        self._specs.append((rel_dir, spec))

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        for base, spec in self._specs:
            if base and not rel_path.startswith(base + "/"):
                continue
            local = rel_path[len(base) + 1 :] if base else rel_path
            if spec.match_file(local + ("/" if is_dir else "")):  # type: ignore[attr-defined]
                return True
        return False


def walk_files(root: Path) -> Iterator[str]:
    """Every file and symlink under ``root`` (relative, "/"-separated), honouring ignores.

    The data link, ``.git`` directories and ignored directories are not entered; symlinks are
    yielded as entries and never followed; special files (FIFOs, sockets, devices) are skipped.
    """
    rules = _IgnoreRules()
    root = Path(root)

    def visit(directory: Path, rel_dir: str) -> Iterator[str]:
        gitignore = directory / ".gitignore"
        if gitignore.is_file():
            rules.add(rel_dir, gitignore)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except FileNotFoundError:
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if (rel_dir == "" and entry.name == DATA_LINK) or entry.name.lower() == ".git":
                continue  # git refuses .GIT too, and it is .git on case-insensitive disks
            is_dir = entry.is_dir(follow_symlinks=False)
            if rules.ignored(rel, is_dir):
                continue
            if is_dir:
                yield from visit(Path(entry.path), rel)
            elif entry.is_symlink() or entry.is_file(follow_symlinks=False):
                yield rel  # sockets, FIFOs and devices are not workspace content

    yield from visit(root, "")


def resolve_patterns(root: Path, patterns: Iterable[str]) -> list[str]:
    """The files under ``root`` that the globs select, sorted."""
    patterns = [p for p in patterns if p and p.strip()]
    if not patterns:
        return []
    return [rel for rel in walk_files(root) if matches_any(rel, patterns)]
