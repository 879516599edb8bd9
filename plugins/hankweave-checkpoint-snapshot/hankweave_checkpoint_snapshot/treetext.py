"""The last committed tree's canonical JSON, kept piece by piece between checkpoints."""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from typing import Any

from hankweave_checkpoint_snapshot.formats import canonical_json


class TreeText:
    """The last committed tree's canonical JSON, kept as one piece per entry in path order, so
    a checkpoint that changed a few files of a large tree encodes only those entries and
    joins the rest.  The bytes are exactly :func:`~hankweave_checkpoint_snapshot.formats.canonical_json` of the tree (the object's
    address depends on them)."""

    def __init__(self) -> None:
        self.paths: list[str] = []  # sorted
        self._parts: list[str] = []  # the piece of each path, in the same order
        self._pieces: dict[str, tuple[tuple[Any, ...], str]] = {}  # path -> (entry, piece)
        self._sizes: dict[str, int] = {}
        self.size = 0  # the bytes of every file in the tree

    def render(self, entries: dict[str, dict[str, Any]],
               changed: Iterable[str] | None = None) -> bytes:
        """The tree's JSON; ``changed``: the only paths that differ from the last render."""
        self.update(entries, changed)
        return self.text()

    def text(self) -> bytes:
        """The JSON of the tree as last updated."""
        return ("{" + ",".join(self._parts) + "}").encode("ascii")

    def update(self, entries: dict[str, dict[str, Any]],
               changed: Iterable[str] | None = None) -> None:
        """Make the kept tree ``entries``; ``changed``: the only paths that differ from it."""
        if changed is not None:
            changed = list(changed)
            # Each change is a list insertion or deletion: past a few, one pass over all is
            # cheaper (and its pieces of unchanged entries are reused all the same).
            if len(changed) * 16 > len(self.paths) + 256:
                changed = None
        if changed is None:
            self.paths = sorted(entries)
            self._parts = [self._piece(path, entries[path]) for path in self.paths]
            self._pieces = {path: self._pieces[path] for path in self.paths}
            self._sizes = {path: entry.get("size", 0) for path, entry in entries.items()}
            self.size = sum(self._sizes.values())
        else:
            for path in changed:
                self._replace(path, entries.get(path))

    def _replace(self, path: str, entry: dict[str, Any] | None) -> None:
        index = bisect.bisect_left(self.paths, path)
        present = index < len(self.paths) and self.paths[index] == path
        self.size -= self._sizes.pop(path, 0)
        if entry is None:
            if present:
                del self.paths[index], self._parts[index]
            self._pieces.pop(path, None)
            return
        if present:
            self._parts[index] = self._piece(path, entry)
        else:
            self.paths.insert(index, path)
            self._parts.insert(index, self._piece(path, entry))
        self._sizes[path] = entry.get("size", 0)
        self.size += self._sizes[path]

    def under(self, rel: str) -> list[str]:
        """The paths of the last render that are ``rel`` or lie below it."""
        paths = self.paths
        index = bisect.bisect_left(paths, rel)
        found = [rel] if index < len(paths) and paths[index] == rel else []
        start = bisect.bisect_left(paths, rel + "/")
        end = bisect.bisect_left(paths, rel + "0")  # "0" is the character after "/"
        return found + paths[start:end]

    def _piece(self, path: str, entry: dict[str, Any]) -> str:
        """The entry's ``"path":{...}`` text, encoded again only when the entry changed."""
        key = tuple(entry.values())
        known = self._pieces.get(path)
        if known is None or known[0] != key:
            known = (key, json.dumps(path, ensure_ascii=True) + ":"
                     + canonical_json(entry).decode("ascii"))
            self._pieces[path] = known
        return known[1]
