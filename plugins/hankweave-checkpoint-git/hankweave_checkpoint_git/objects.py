"""The repository's object database read and written in-process (GitPython's gitdb).

A checkpoint that follows a change hint builds its tree from the previous one plus the hinted
files without a git process; commits are written byte for byte as ``git commit-tree`` would.
"""

from __future__ import annotations

import io
import os
import stat
import zlib
from collections.abc import Mapping
from pathlib import Path

from hankweave.api import CheckpointStorageError, parse_iso

from hankweave_checkpoint_git.owned import IDENTITY_EMAIL, IDENTITY_NAME

_TREE_MODE = b"40000"


class ObjectDatabase:
    """The repository's object database read and written in-process (GitPython's gitdb), to
    build a tree from a previous one plus a few changed files without a git process."""

    def __init__(self, objects_dir: Path) -> None:
        from gitdb.db import GitDB

        self.objects_dir = objects_dir
        self._db = GitDB(str(objects_dir))
        self._trees: dict[bytes, dict[bytes, tuple[bytes, bytes]]] = {}

    def _read(self, binsha: bytes, kind: bytes) -> bytes:
        """An object's content; a missing, unreadable or other-typed one is a storage error."""
        from gitdb.exc import ODBError

        try:
            stream = self._db.stream(binsha)
            if stream.type == kind:
                return bytes(stream.read())
            problem = f"is a {stream.type.decode()}, not a {kind.decode()}"
        except (ODBError, OSError, ValueError, zlib.error) as exc:
            problem = f"cannot be read ({type(exc).__name__}: {exc})"
        raise CheckpointStorageError(
            f"object {binsha.hex()} of the checkpoint repository ({self.objects_dir}) {problem}")

    def _tree(self, binsha: bytes) -> dict[bytes, tuple[bytes, bytes]]:
        """A tree's entries: name -> (mode, binsha)."""
        entries = self._trees.get(binsha)
        if entries is None:
            data = self._read(binsha, b"tree")
            entries = {}
            offset = 0
            while offset < len(data):
                space = data.index(b" ", offset)
                nul = data.index(b"\0", space)
                entries[data[space + 1:nul]] = (data[offset:space], data[nul + 1:nul + 21])
                offset = nul + 21
            self._trees[binsha] = entries
        return entries

    def commit(self, tree: str, parent: str, message: str, timestamp: str) -> str:
        """Write a checkpoint commit, byte for byte what ``git commit-tree <tree> -p <parent>
        -m <message>`` makes with our identity and the date of ``timestamp``."""
        date = f"{int(parse_iso(timestamp).timestamp())} +0000"
        ident = f"{IDENTITY_NAME} <{IDENTITY_EMAIL}> {date}"
        body = message if message.endswith("\n") else message + "\n"
        data = (f"tree {tree}\nparent {parent}\nauthor {ident}\ncommitter {ident}\n\n"
                f"{body}").encode()
        return self._store(b"commit", data).hex()

    def commit_tree(self, sha: str) -> str:
        """The tree a commit names."""
        header = self._read(bytes.fromhex(sha), b"commit").split(b"\n\n", 1)[0]
        return header.split(b"\n", 1)[0].removeprefix(b"tree ").decode()

    def differing(self, tree_a: str, tree_b: str) -> set[str]:
        """The file paths whose mode or content differ between two trees, or that only one
        holds; subtrees with the same sha are not entered."""
        found: set[str] = set()
        self._differing(bytes.fromhex(tree_a), bytes.fromhex(tree_b), "", found)
        return found

    def _differing(self, a: bytes | None, b: bytes | None, prefix: str,
                   found: set[str]) -> None:
        if a == b:
            return
        entries_a = self._tree(a) if a is not None else {}
        entries_b = self._tree(b) if b is not None else {}
        for name in entries_a.keys() | entries_b.keys():
            x, y = entries_a.get(name), entries_b.get(name)
            if x == y:
                continue
            path = prefix + os.fsdecode(name)
            x_tree = x is not None and x[0] == _TREE_MODE
            y_tree = y is not None and y[0] == _TREE_MODE
            if x_tree or y_tree:
                self._differing(x[1] if x_tree and x else None, y[1] if y_tree and y else None,
                                path + "/", found)
            if (x is not None and not x_tree) or (y is not None and not y_tree):
                found.add(path)

    def read_commit(self, sha: str) -> tuple[int, str] | None:
        """A commit's committer time and message, or None if there is no such commit."""
        try:
            data = self._read(bytes.fromhex(sha), b"commit")
        except CheckpointStorageError:
            return None  # the caller lists the checkpoints instead, which says what is wrong
        header, _, body = data.partition(b"\n\n")
        for line in header.split(b"\n"):
            if line.startswith(b"committer "):
                return int(line.rsplit(b" ", 2)[-2]), body.decode("utf-8", errors="replace")
        return None

    def paths_under(self, tree: str, rel: str) -> set[str]:
        """The file paths of ``tree`` that are ``rel`` or lie below it."""
        entries = self._tree(bytes.fromhex(tree))
        parts = [os.fsencode(part) for part in rel.split("/")]
        for depth, name in enumerate(parts):
            entry = entries.get(name)
            if entry is None:
                return set()
            if entry[0] != _TREE_MODE:
                return {rel} if depth == len(parts) - 1 else set()
            entries = self._tree(entry[1])
        found: set[str] = set()
        self._collect(entries, rel, found)
        return found

    def _collect(self, entries: Mapping[bytes, tuple[bytes, bytes]], prefix: str,
                 found: set[str]) -> None:
        for name, (mode, binsha) in entries.items():
            path = f"{prefix}/{os.fsdecode(name)}"
            if mode == _TREE_MODE:
                self._collect(self._tree(binsha), path, found)
            else:
                found.add(path)

    def _store(self, kind: bytes, data: bytes) -> bytes:
        import hashlib

        from gitdb.base import IStream

        binsha = hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).digest()
        try:
            if not self._db.has_object(binsha):
                self._db.store(IStream(kind, len(data), io.BytesIO(data)))
        except OSError as exc:  # a full or read-only disk
            raise CheckpointStorageError(
                f"cannot write an object into the checkpoint repository ({self.objects_dir}): "
                f"{exc}") from exc
        return binsha

    def store_file(self, root: Path, rel: str) -> tuple[bytes, bytes] | None:
        """Store a work-tree file as a blob: (mode, binsha); None if it is gone or special."""
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                return b"120000", self._store(b"blob", os.fsencode(os.readlink(full)))
            if not stat.S_ISREG(st.st_mode):
                return None
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with open(fd, "rb") as fh:
                mode = b"100755" if os.fstat(fh.fileno()).st_mode & stat.S_IXUSR else b"100644"
                return mode, self._store(b"blob", fh.read())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # unreadable, or replaced by a link as it was opened
            raise CheckpointStorageError(
                f"cannot checkpoint {rel} of the work tree {root}: {exc}") from exc

    def apply(self, tree: str, changes: Mapping[str, tuple[bytes, bytes] | None]) -> str:
        """``tree`` with each path set to its (mode, blob) or removed (None); the new tree's
        sha.  Directories left empty disappear, as ``write-tree`` makes them."""
        nested: dict[bytes, dict[str, tuple[bytes, bytes] | None]] = {}
        for path, entry in changes.items():
            head, _, rest = path.partition("/")
            nested.setdefault(os.fsencode(head), {})[rest] = entry
        binsha = self._apply(bytes.fromhex(tree), nested)
        return binsha.hex() if binsha is not None else self._store(b"tree", b"").hex()

    def _apply(self, binsha: bytes | None,
               changes: dict[bytes, dict[str, tuple[bytes, bytes] | None]]) -> bytes | None:
        entries = dict(self._tree(binsha)) if binsha is not None else {}
        for name, below in changes.items():
            if "" in below:  # the path is this entry itself: a file set or removed
                here = below.pop("")
                if here is None:
                    entries.pop(name, None)
                else:
                    entries[name] = here
            if below:
                nested: dict[bytes, dict[str, tuple[bytes, bytes] | None]] = {}
                for path, entry in below.items():
                    head, _, rest = path.partition("/")
                    nested.setdefault(os.fsencode(head), {})[rest] = entry
                old = entries.get(name)
                child = self._apply(old[1] if old and old[0] == _TREE_MODE else None, nested)
                if child is None:
                    if old is not None and old[0] == _TREE_MODE:
                        del entries[name]
                else:
                    entries[name] = (_TREE_MODE, child)
        if not entries:
            return None
        # git orders a tree's entries by name, a directory's name as if it ended with "/".
        ordered = sorted(entries.items(),
                         key=lambda item: item[0] + b"/" if item[1][0] == _TREE_MODE else item[0])
        body = b"".join(mode + b" " + name + b"\0" + sha for name, (mode, sha) in ordered)
        new = self._store(b"tree", body)
        self._trees[new] = entries
        return new

