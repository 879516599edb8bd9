"""The executions a dashboard shows, and one row of its list per execution.

A root is either an execution directory or a directory holding them (``HANKWEAVE_HOME``).  Each
execution gets a stable id in URLs: a hash of its resolved path, so a URL never carries a
filesystem path (nothing to traverse) and a malformed id is refused before any file is read.
Rows are rebuilt only when the execution's state files change on disk.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.api import (
    ExecutionLayout,
    LockCorruptError,
    StateLoadError,
    document_of,
    live_runtime_lock,
    read_state_strict,
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
    base: dict[str, Any] = {"id": ident, "path": str(path), "name": path.name,
                            "live": liveness(path).live,
                            "lastActivity": _last_activity(layout)}
    try:
        state, _ = read_state_strict(layout.hankweave_dir)
    except StateLoadError as exc:
        return {**base, "status": "unreadable", "error": str(exc), "hank": None, "data": None,
                "currentCodon": None, "cost": 0.0, "startTime": None, "endTime": None,
                "codons": 0, "finishedCodons": 0, "pendingInterruptions": 0}
    document = document_of(path, state).execution
    runs = state.runs
    return {
        **base,
        "status": document.status,
        "hank": _hank_name(document.hank_path),
        "hankPath": document.hank_path,
        "data": document.data_path,
        "currentCodon": current_codon(state),
        "cost": document.total_cost,
        "startTime": runs[-1].start_time if runs else None,
        "endTime": runs[0].end_time if runs else None,
        "runs": len(runs),
        "codons": len(state.execution_plan),
        "finishedCodons": document.finished_codons,
        "pendingInterruptions": document.pending_interruptions,
    }


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
