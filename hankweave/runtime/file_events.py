"""``file.updated`` and ``filetree.updated``: the files a codon's agent writes, as they happen.

A :class:`FileTracker` follows one codon attempt (the original's file tracker, one per codon):

* at the codon's start, when ``checkpointedFiles`` patterns are in force, one ``file.updated``
  (``action: created``, ``source: {kind: "codon-start"}``) per existing file they match, then a
  ``filetree.updated``;
* after each file-writing tool call of the agent (``Write``, ``Edit``, ``MultiEdit``,
  ``NotebookEdit``: both harnesses log their writes under these names, with ``file_path``)
  that succeeded, one ``file.updated`` for the file it wrote, then a ``filetree.updated``.

The event is the late fingerprint shape: ``sha256`` and ``bytes`` of the file as it is on disk
once the tool has run (the original emitted before the write, from the tool's input), and
``source: {kind: "tool_use", toolUseId}``.  Watched are the files the patterns in force match
(:func:`~hankweave.runtime.planner.checkpoint_patterns_through`), or, without patterns, every
file under ``agentRoot/`` except ``.hankweave/``, ``.git/`` and the data link; nothing outside
``agentRoot/``.  A write that leaves the bytes as they were reports nothing; at most
:data:`FILE_EVENT_CAP` ``file.updated`` per attempt, then one ``info`` says the rest is not
reported (a codon that generates thousands of files must not flood the journal).

Sentinels see a lazily read ``content`` (:func:`with_file_content`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hankweave.events.catalogue import (
    FileNode,
    FiletreeUpdatedData,
    FileUpdatedData,
    ServerEvent,
)
from hankweave.workspace import DATA_LINK, matches_any, walk_files

FILE_WRITING_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
FILE_EVENT_CAP = 500
"""``file.updated`` events one codon attempt sends at the most."""
CONTENT_LIMIT = 1_000_000
"""The largest file a sentinel's ``content`` reads (bytes); a larger one has none."""
_NEVER_WATCHED = (".hankweave", ".git", DATA_LINK)

Emit = Callable[[str, Any], None]


class FileTracker:
    """The watched files of one codon attempt (see the module docstring)."""

    def __init__(self, agent_root: Path, patterns: Sequence[str], emit: Emit,
                 codon_id: str) -> None:
        self.root = agent_root
        self.patterns = [p for p in patterns if p.strip()]
        self.emit = emit
        self.codon_id = codon_id
        self._pending: dict[str, tuple[str, bool]] = {}
        """Tool use id -> (the file it writes, whether the file existed before)."""
        self._reported: dict[str, str] = {}
        """Path -> sha256 last reported, in report order (the tree's files)."""
        self._count = 0

    def codon_started(self) -> None:
        """Report the existing files the patterns in force match (none without patterns)."""
        if not self.patterns or not self.root.is_dir():
            return
        found = [rel for rel in walk_files(self.root)
                 if self._watched(rel) and matches_any(rel, self.patterns)]
        if any([self._report(rel, "created", {"kind": "codon-start"}) for rel in found]):
            self._tree()

    def tool_used(self, tool_use_id: str, name: str, tool_input: Mapping[str, Any]) -> None:
        """Note a tool call that will write a watched file."""
        if name not in FILE_WRITING_TOOLS:
            return
        target = next((tool_input[key] for key in ("file_path", "notebook_path", "path")
                       if isinstance(tool_input.get(key), str)), None)
        rel = self._relative(target) if target else None
        if rel is not None and self._included(rel):
            self._pending[tool_use_id] = (rel, (self.root / rel).is_file())

    def tool_finished(self, tool_use_id: str, failed: bool) -> None:
        """The tool call ``tool_use_id`` returned: report its file if it changed."""
        noted = self._pending.pop(tool_use_id, None)
        if noted is None or failed:
            return
        rel, existed = noted
        if self._report(rel, "modified" if existed else "created",
                        {"kind": "tool_use", "toolUseId": tool_use_id}):
            self._tree()

    # -- internals --

    def _relative(self, target: str) -> str | None:
        path = Path(target)
        absolute = path if path.is_absolute() else self.root / path
        try:
            rel = Path(os.path.normpath(absolute)).relative_to(os.path.normpath(self.root))
        except ValueError:
            return None  # outside agentRoot
        text = rel.as_posix()
        return None if text in ("", ".") or text.startswith("../") else text

    def _watched(self, rel: str) -> bool:
        return rel.split("/", 1)[0] not in _NEVER_WATCHED

    def _included(self, rel: str) -> bool:
        return self._watched(rel) and (not self.patterns or matches_any(rel, self.patterns))

    def _report(self, rel: str, action: str, source: dict[str, str]) -> bool:
        path = self.root / rel
        try:
            body = path.read_bytes()
        except OSError:
            return False  # removed again, or unreadable: nothing to fingerprint
        digest = hashlib.sha256(body).hexdigest()
        if self._reported.get(rel) == digest:
            return False
        if self._count >= FILE_EVENT_CAP:
            if self._count == FILE_EVENT_CAP:
                self._count += 1
                self.emit("info", {"message": f"Codon {self.codon_id} wrote more than"
                                              f" {FILE_EVENT_CAP} files; the rest are not"
                                              " reported as file.updated"})
            return False
        self._count += 1
        self._reported[rel] = digest
        self.emit("file.updated", FileUpdatedData.model_validate({
            "path": rel, "filename": path.name, "action": action, "sha256": digest,
            "bytes": len(body), "source": source}))
        return True

    def _tree(self) -> None:
        self.emit("filetree.updated", FiletreeUpdatedData(tree=file_tree(
            self.root, list(self._reported))))


def file_tree(root: Path, paths: Sequence[str]) -> list[FileNode]:
    """``paths`` (relative, ``/``-separated) as nested :class:`FileNode` directories."""
    top: dict[str, Any] = {}
    for rel in sorted(paths):
        node = top
        for part in rel.split("/")[:-1]:
            node = node.setdefault(part + "/", {})
        node[rel.rsplit("/", 1)[-1]] = rel

    def nodes(level: dict[str, Any], prefix: str) -> list[FileNode]:
        out = []
        for name, value in level.items():
            if isinstance(value, dict):
                directory = prefix + name.rstrip("/")
                out.append(FileNode(name=name.rstrip("/"), path=directory, is_directory=True,
                                    children=nodes(value, directory + "/")))
            else:
                out.append(FileNode(name=name, path=value, is_directory=False,
                                    last_modified=_modified(root / value)))
        return out

    return nodes(top, "")


def _modified(path: Path) -> str | None:
    from datetime import UTC, datetime

    try:
        stamp = path.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def with_file_content(event: ServerEvent, agent_root: Path) -> ServerEvent:
    """A sentinel's view of a fingerprint-only ``file.updated``: with ``content``, the file's
    text read now if its bytes still have the reported ``sha256`` (and it is at most
    :data:`CONTENT_LIMIT` bytes of UTF-8); else the event as it is."""
    data = event.data
    if event.type != "file.updated" or "content" in data or not data.get("sha256"):
        return event
    path = agent_root / str(data.get("path", ""))
    try:
        if path.stat().st_size > CONTENT_LIMIT:
            return event
        body = path.read_bytes()
        if hashlib.sha256(body).hexdigest() != data["sha256"]:
            return event  # changed since: the reported version is gone
        content = body.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return event
    return event.model_copy(update={"data": {**data, "content": content}})


