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
import stat
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
        self.add_spec(rel_dir, pathspec.GitIgnoreSpec.from_lines(lines))

    def add_spec(self, rel_dir: str, spec: object) -> None:
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


RACY_WINDOW_NS = 2_000_000_000
"""How old a change must be, by the wall clock, to be trusted to a stat cache when the file
system's own clock cannot be read (a work tree on another device than the clock file).

File timestamps are coarse (a kernel tick on Linux, 1 s on HFS+, 2 s on FAT), so something
changed twice within one tick keeps its whole stat; such "racily clean" entries are read again
next time, as git does."""


def trusted_before(clock_file: str | os.PathLike[str], work_tree: str | os.PathLike[str]) -> int:
    """A file-system timestamp (ns) such that anything under ``work_tree`` last changed before
    it may be trusted to a stat cache.

    Read from the file system's own clock by touching ``clock_file`` (created when missing):
    any change made afterwards gets a timestamp at least this one, whatever the granularity, so
    a cached stat strictly older stays right until the stat changes.  When the clock file is on
    another device than ``work_tree``, the wall clock less :data:`RACY_WINDOW_NS` is used.
    """
    try:
        os.utime(clock_file)
    except FileNotFoundError:
        os.close(os.open(clock_file, os.O_WRONLY | os.O_CREAT, 0o600))
    marker = os.stat(clock_file)
    try:
        same_device = marker.st_dev == os.stat(work_tree).st_dev
    except OSError:
        same_device = False
    if same_device:
        return marker.st_mtime_ns
    import time

    return time.time_ns() - RACY_WINDOW_NS


# ----- resolving again and again: a per-directory cache -----

_StatKey = tuple[int, int, int, int]
"""(device, inode, mtime_ns, ctime_ns): ctime too, because a tool can put an mtime back."""


def _stat_key(st: os.stat_result) -> _StatKey:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def _clock(clock_file: Path, root: Path) -> int:
    return trusted_before(clock_file, root)  # a seam: tests put a coarse file system here


class _Listing:
    """What one directory held when it was read: its entries, sorted, that a walk can yield."""

    __slots__ = ("entries", "gitignore", "key", "reliable", "selections")

    def __init__(self, key: _StatKey, reliable: bool, entries: tuple[tuple[str, bool], ...],
                 gitignore: bool) -> None:
        self.key = key
        # Whether the stat was older than the file-system clock when the entries were read: a
        # directory changed in the same tick could change again without its stat showing it.
        self.reliable = reliable
        self.entries = entries  # (name, is_dir); .git, the data link and special files dropped
        self.gitignore = gitignore  # whether a ".gitignore" entry is among the names
        # (patterns, ignore-chain key) -> runs of (selected files, subdirectory to enter or "")
        self.selections: dict[tuple[tuple[str, ...], tuple[object, ...]],
                              tuple[tuple[tuple[str, ...], str], ...]] = {}


class WorkspaceScan:
    """:func:`resolve_patterns` for a caller that resolves the same tree again and again.

    A checkpoint store resolves its patterns at every checkpoint, and in a large tree most
    directories have not changed since the last time.  A directory's part of the result
    depends only on its entries (names and kinds), which its own stat witnesses (adding,
    removing, renaming or replacing an entry changes the directory's mtime and ctime), and on
    the ``.gitignore`` files in it and above it, whose stats witness their content.  So each
    directory's selection is kept under those stats and reused while they are unchanged; only
    the directories that changed are read, and no file is stat-ed.

    Stats are trusted only when older than the file system's clock at the start of the scan
    (:func:`trusted_before`): a directory changed within the current timestamp tick could
    change again without its stat showing it, so it is read again next time.

    The result is exactly :func:`resolve_patterns`'s, in the same order.  One instance serves
    one work tree, from one thread at a time.
    """

    max_selections_per_directory = 4

    def __init__(self, root: Path, clock_file: Path) -> None:
        self.root = Path(root)
        self.clock_file = clock_file
        self._listings: dict[str, _Listing] = {}
        self._specs: dict[str, tuple[tuple[int, ...], object]] = {}

    def forget(self) -> None:
        """Drop everything cached: the next resolve reads the whole tree."""
        self._listings.clear()
        self._specs.clear()

    def resolve(self, patterns: Iterable[str]) -> list[str]:
        """The files under the root that the globs select, as :func:`resolve_patterns`."""
        selected = tuple(p for p in patterns if p and p.strip())
        if not selected:
            return []
        trusted = _clock(self.clock_file, self.root) if self.root.is_dir() else 0
        out: list[str] = []
        seen: set[str] = set()
        self._resolve_dir(str(self.root), "", selected, (), trusted, out, seen)
        for stale in self._listings.keys() - seen:
            del self._listings[stale]  # directories gone (or no longer entered)
        return out

    def resolve_under(self, patterns: Iterable[str], rel: str) -> list[str]:
        """The files :meth:`resolve` would give that are ``rel`` or lie below it.

        Costs what ``rel`` holds, not what the tree holds: only ``rel``'s ancestors (and their
        ``.gitignore`` files) are looked at on the way down, which is what a store needs for
        the few paths a change hint names.
        """
        selected = tuple(p for p in patterns if p and p.strip())
        parts = rel.split("/")
        if (not selected or not rel or parts[0] == DATA_LINK or "" in parts
                or any(part.lower() == ".git" for part in parts)):
            return []
        trusted = _clock(self.clock_file, self.root)
        chain: tuple[object, ...] = ()
        full, rel_dir = str(self.root), ""
        for depth, name in enumerate(parts):
            if os.path.lexists(f"{full}/.gitignore"):
                chain = (*chain, self._gitignore_key(full, rel_dir, trusted))
            child_full = f"{full}/{name}"
            child = f"{rel_dir}/{name}" if rel_dir else name
            try:
                st = os.lstat(child_full)
            except OSError:
                return []
            is_dir = stat.S_ISDIR(st.st_mode)
            if self._rules(chain).ignored(child, is_dir):
                return []
            if depth < len(parts) - 1:
                if not is_dir:
                    return []  # a symlink or a file where a directory was: walks stop there
                full, rel_dir = child_full, child
            elif is_dir:
                out: list[str] = []
                self._resolve_dir(child_full, child, selected, chain, trusted, out, set())
                return out
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                return [rel] if matches_any(rel, selected) else []
        return []

    def _resolve_dir(self, full: str, rel_dir: str, patterns: tuple[str, ...],
                     chain: tuple[object, ...], trusted: int, out: list[str],
                     seen: set[str]) -> None:
        listing = self._listing(full, rel_dir, trusted)
        if listing is None:
            return
        seen.add(rel_dir)
        if listing.gitignore:
            chain = (*chain, self._gitignore_key(full, rel_dir, trusted))
        runs = listing.selections.get((patterns, chain))
        if runs is None:
            runs = self._select(listing, rel_dir, patterns, chain)
            if listing.reliable and all(link[2] for link in chain):  # type: ignore[index]
                if len(listing.selections) >= self.max_selections_per_directory:
                    listing.selections.clear()
                listing.selections[(patterns, chain)] = runs
        prefix = f"{full}/"
        for files, subdir in runs:
            out.extend(files)
            if subdir:
                name = subdir.rsplit("/", 1)[-1]
                self._resolve_dir(prefix + name, subdir, patterns, chain, trusted, out, seen)

    def _listing(self, full: str, rel_dir: str, trusted: int) -> _Listing | None:
        """The directory's entries, from the cache while its stat is unchanged."""
        try:
            st = os.lstat(full)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        key = _stat_key(st)
        cached = self._listings.get(rel_dir)
        if cached is not None and cached.reliable and cached.key == key:
            return cached
        try:
            with os.scandir(full) as scanned:
                raw = sorted(scanned, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        entries = []
        gitignore = False
        for entry in raw:
            if (rel_dir == "" and entry.name == DATA_LINK) or entry.name.lower() == ".git":
                continue
            gitignore = gitignore or entry.name == ".gitignore"
            if entry.is_dir(follow_symlinks=False):
                entries.append((entry.name, True))
            elif entry.is_symlink() or entry.is_file(follow_symlinks=False):
                entries.append((entry.name, False))
        listing = _Listing(key, key[2] < trusted and key[3] < trusted, tuple(entries), gitignore)
        self._listings[rel_dir] = listing
        return listing

    def _gitignore_key(self, full: str, rel_dir: str, trusted: int) -> tuple[str, tuple[int, ...], bool]:
        """(directory, the .gitignore's stat, whether that stat may be trusted)."""
        try:
            st = os.stat(f"{full}/.gitignore")  # followed, as walk_files reads it
            key = _stat_key(st)
            ident: tuple[int, ...] = (*key, st.st_size, int(stat.S_ISREG(st.st_mode)))
            fresh = key[2] < trusted and key[3] < trusted
        except OSError:
            ident, fresh = (), True
        return (rel_dir, ident, fresh)

    def _spec(self, full_dir: str, link: tuple[str, tuple[int, ...], bool]) -> object | None:
        rel_dir, ident, reliable = link
        if not ident or not ident[-1]:
            return None  # no readable regular .gitignore: walk_files reads none either
        cached = self._specs.get(rel_dir)
        if cached is not None and cached[0] == ident:
            return cached[1]  # only reliable specs are kept
        import pathspec

        try:
            text = Path(full_dir, ".gitignore").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        spec = pathspec.GitIgnoreSpec.from_lines(text.splitlines())
        if reliable:
            self._specs[rel_dir] = (ident, spec)
        else:
            self._specs.pop(rel_dir, None)
        return spec

    def _rules(self, chain: tuple[object, ...]) -> _IgnoreRules:
        """The ignore rules of a chain of ``.gitignore`` keys (see :meth:`_gitignore_key`)."""
        rules = _IgnoreRules()
        for link in chain:
            base = link[0]  # type: ignore[index]
            spec = self._spec(str(self.root / base) if base else str(self.root), link)  # type: ignore[arg-type]
            if spec is not None:
                rules.add_spec(base, spec)
        return rules

    def _select(self, listing: _Listing, rel_dir: str, patterns: tuple[str, ...],
                chain: tuple[object, ...]) -> tuple[tuple[tuple[str, ...], str], ...]:
        """Apply the ignore rules and the globs to one directory's entries."""
        rules = self._rules(chain)
        runs: list[tuple[tuple[str, ...], str]] = []
        files: list[str] = []
        for name, is_dir in listing.entries:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rules.ignored(rel, is_dir):
                continue
            if is_dir:
                runs.append((tuple(files), rel))
                files = []
            elif matches_any(rel, patterns):
                files.append(rel)
        if files or not runs:
            runs.append((tuple(files), ""))
        return tuple(runs)
