"""The executions a dashboard shows, and one row of its list per execution.

A root is either an execution directory or a directory holding them (``HANKWEAVE_HOME``).  Each
execution gets a stable id in URLs: a hash of its resolved path, so a URL never carries a
filesystem path (nothing to traverse) and a malformed id is refused before any file is read.
Rows are rebuilt only when the execution's state files change on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.api import (
    ExecutionLayout,
    ExecutionMetaError,
    LockCorruptError,
    StateLoadError,
    document_of,
    live_runtime_lock,
    load_execution_meta,
    read_state_strict,
    spent_so_far,
)

ID_PATTERN = re.compile(r"^[0-9a-f]{16}$")

TERMINAL = frozenset({"completed", "failed", "skipped"})
"""Codon record statuses a record never leaves."""


class NotFound(Exception):
    """An unknown execution, run, codon or file: the message says which (HTTP 404)."""


class BadRequest(Exception):
    """A malformed id or request: the message says what is wrong (HTTP 400)."""


def execution_id(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]


def is_execution(path: Path) -> bool:
    layout = ExecutionLayout(path)
    return layout.state_file.is_file() or layout.state_log_file.is_file()


class Catalog:
    """The executions under the dashboard's roots, found again on every listing."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [root.resolve() for root in roots]
        self._paths: dict[str, Path] = {}
        self._rows: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def scan(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for root in self.roots:
            if is_execution(root):
                found[execution_id(root)] = root
                continue
            try:
                children = sorted(root.iterdir())
            except OSError:
                continue  # a root that went away lists nothing; the others still do
            for child in children:
                if child.is_dir() and is_execution(child):
                    found[execution_id(child)] = child
        with self._lock:
            self._paths = found
        return found

    def path_of(self, ident: str) -> Path:
        """The execution directory of ``ident``.

        Raises:
            BadRequest: not an id.
            NotFound: no execution under the roots has it.
        """
        if not ID_PATTERN.match(ident):
            raise BadRequest(f"{ident!r} is not an execution id (16 hex digits)")
        path = self._paths.get(ident) or self.scan().get(ident)
        if path is None or not is_execution(path):
            raise NotFound(f"no execution {ident} under {', '.join(map(str, self.roots))}")
        return path

    def served_id(self, path: Path) -> str | None:
        """The id of the execution in ``path`` if this dashboard serves it (it is a root, or
        an execution in one), else None: a path named by an execution's files (a fork's
        source) is linked only when the dashboard would serve it anyway."""
        resolved = path.resolve()
        ident = execution_id(resolved)
        if ident in self._paths:
            return ident
        if not is_execution(resolved):
            return None
        for root in self.roots:  # the rule of scan(), without listing every root
            if resolved == root or (resolved.parent == root and not is_execution(root)):
                return ident
        return None

    def rows(self) -> list[dict[str, Any]]:
        """One row per execution, the most recently active first."""
        rows = [self.row(ident, path) for ident, path in self.scan().items()]
        return sorted(rows, key=lambda row: row["lastActivity"] or "", reverse=True)

    def row(self, ident: str, path: Path) -> dict[str, Any]:
        layout = ExecutionLayout(path)
        signature = (_stamp(layout.state_file), _stamp(layout.state_log_file),
                     _stamp(layout.events_file), _stamp(layout.lock_file))
        cached = self._rows.get(ident)
        if cached is not None and cached[0] == signature:
            # A runtime killed with -9 leaves its lock file as it was: liveness is asked anew.
            return {**cached[1], "live": liveness(path).live}
        row = summary(ident, path)
        self._rows[ident] = (signature, row)
        return row


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@dataclass(frozen=True)
class Liveness:
    live: bool
    pid: int | None = None
    host: str | None = None


def liveness(path: Path) -> Liveness:
    """Whether a runtime holds the execution now (its lock is live)."""
    try:
        lock = live_runtime_lock(ExecutionLayout(path).hankweave_dir)
    except LockCorruptError:
        return Liveness(live=False)
    if lock is None:
        return Liveness(live=False)
    return Liveness(live=True, pid=lock.pid, host=lock.host)


def summary(ident: str, path: Path) -> dict[str, Any]:
    """The list row of the execution in ``path``; an unreadable one says why in ``error``."""
    layout = ExecutionLayout(path)
    alive = liveness(path).live
    base: dict[str, Any] = {"id": ident, "path": str(path), "name": path.name,
                            "live": alive, "lastActivity": _last_activity(layout)}
    try:
        state, _ = read_state_strict(layout.hankweave_dir)
    except StateLoadError as exc:
        return {**base, "status": "unreadable", "error": str(exc), "hank": None, "data": None,
                "title": path.name, "replayOf": None, "badge": badge_of("unreadable", None, 0),
                "currentCodon": None, "cost": 0.0, "seconds": 0.0, "startTime": None,
                "endTime": None, "codons": 0, "finishedCodons": 0, "pendingInterruptions": 0,
                "resumeCommand": None}
    document = document_of(path, state).execution
    runs = state.runs
    spent = spent_so_far(state)
    return {
        **base,
        **identity(path, document.hank_path),
        "status": document.status,
        "badge": badge_of(document.status, state, document.pending_interruptions),
        "hank": _hank_name(document.hank_path),
        "hankPath": document.hank_path,
        "data": document.data_path,
        "currentCodon": current_codon(state),
        "cost": spent.dollars,
        "seconds": spent.seconds,
        "startTime": runs[-1].start_time if runs else None,
        "endTime": runs[0].end_time if runs else None,
        "runs": len(runs),
        "codons": len(state.execution_plan),
        "finishedCodons": document.finished_codons,
        "pendingInterruptions": document.pending_interruptions,
        "resumeCommand": resume_command(path, document.status, alive),
    }


def identity(path: Path, hank_path: str | None) -> dict[str, Any]:
    """What a person recognises an execution by: ``title``, the hank's own name (its
    ``meta.name``, else its folder's), and ``replayOf``, the recording a replay was started
    from (its file name); the execution directory's name (``name``) tells executions of one
    hank apart."""
    replay_of = None
    try:
        meta = load_execution_meta(ExecutionLayout(path).meta_file)
    except ExecutionMetaError:
        meta = None
    if meta is not None and meta.recording is not None:
        source = meta.recording_source
        replay_of = Path(source.rstrip("/")).name if source else "a recording"
    return {"title": _hank_title(hank_path) or path.name, "replayOf": replay_of}


def _hank_title(hank_path: str | None) -> str | None:
    if not hank_path:
        return None
    try:
        meta = json.loads(Path(hank_path).read_text(encoding="utf-8")).get("meta") or {}
    except (OSError, ValueError, AttributeError):
        meta = {}
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name.strip() else _hank_name(hank_path)


def badge_of(status: str, state: Any, waiting: int) -> dict[str, str]:
    """The status a person needs to tell apart: an ``interrupted`` execution waits for a
    person (``waiting``), was rolled back (``rolled-back``) or was stopped between codons
    (``paused``); ``kind`` is the CSS class, ``text`` what the badge says."""
    if status != "interrupted" or state is None:
        return {"kind": status, "text": status}
    if waiting:
        return {"kind": "waiting", "text": f"waiting for you ({waiting})" if waiting > 1
                else "waiting for you"}
    newest = state.runs[0] if state.runs else None
    conditions = getattr(newest, "starting_conditions", None)
    if conditions is not None and getattr(conditions, "reason", None) == "rollback":
        after = getattr(conditions.source, "after_codon", None)
        return {"kind": "rolled-back",
                "text": f"rolled back to {after}" if after else "rolled back"}
    if getattr(newest, "status", None) == "interrupted":  # it waited; every answer is in
        return {"kind": "paused", "text": "answered: ready to go on"}
    return {"kind": "paused", "text": "paused"}


def resume_command(path: Path, status: str, live: bool) -> str | None:
    """The command that goes on with an execution nothing runs now (None: it is running, or
    there is nothing left to do)."""
    if live or status in ("completed", "running", "unreadable"):
        return None
    return run_command(path)


def run_command(path: Path) -> str:
    """``hankweave run -e DIR``, DIR quoted for a shell: it can be pasted as it is."""
    return f"hankweave run -e {shlex.quote(str(path))}"


def current_codon(state: Any) -> str | None:
    """The codon running now (the newest run's unfinished record), else the next one."""
    from hankweave.api import analyze_execution_thread

    if state.runs:
        for record in reversed(state.runs[0].codons):
            if record.status not in TERMINAL:
                return str(record.codon_id)
    return analyze_execution_thread(state).next_codon_id


def _hank_name(hank_path: str | None) -> str | None:
    """A hank is named by its directory (``…/my-hank/hank.json`` is ``my-hank``)."""
    if not hank_path:
        return None
    path = Path(hank_path)
    return path.parent.name if path.name in ("hank.json", "hank.jsonc") else path.name


def _last_activity(layout: ExecutionLayout) -> str | None:
    from datetime import UTC, datetime

    stamps = [_stamp(p) for p in (layout.events_file, layout.state_file, layout.state_log_file)]
    newest = max((s[0] for s in stamps if s is not None), default=None)
    if newest is None:
        return None
    moment = datetime.fromtimestamp(newest / 1e9, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
