"""The store's LOADING room: reading ``state.json`` and its logs into a state, without writing.

The recovery ladder (``state.json``; else ``state.json.bak`` rebuilt forward with the logs
that extend it; else a fresh empty state) and the replay of the log segments that extend the
state loaded (:func:`hankweave.state.wal.chain`, :func:`hankweave.state.fold.replay_segments`).
What was found is a :class:`LoadReport`; the writer (:class:`hankweave.state.store.StateStore`)
continues from it, and readers (``hankweave inspect``) use :func:`load_state` or
:func:`read_state_strict` alone.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from hankweave.state import heap
from hankweave.state.files import (
    BACKUP_FILE,
    FOLD_MARKER_FILE,
    FOLDING_WAL_FILE,
    PREVIOUS_WAL_FILE,
    STATE_FILE,
    WAL_FILE,
)
from hankweave.state.fold import Replayed, replay_segments
from hankweave.state.transitions import StateError
from hankweave.state.types import HankweaveState, dump_state, parse_state
from hankweave.state.validation import ValidationIssue, validate_state
from hankweave.state.wal import FoldMarker, Segment, chain, read_segment

ABSENT = "absent"  # the WAL base of an execution that has no state.json yet

LoadMethod = Literal["primary", "backup", "fresh", "new"]


class StateLoadError(StateError):
    """The state could not be read at all (raised by strict readers such as ``inspect``)."""


class StateUnreadableError(StateLoadError):
    """``state.json`` and its backup are both unreadable (or ``state.json`` is and there is no
    backup): a runtime refuses to start rather than run every codon again from nothing.

    Raised by :meth:`StateStore.open` with ``refuse_unreadable`` before anything is written;
    ``problems`` are the loader's one-line findings, naming each file.
    """

    def __init__(self, hankweave_dir: Path, problems: list[str]) -> None:
        self.hankweave_dir = Path(hankweave_dir)
        self.problems = problems
        super().__init__("; ".join(problems) or f"{hankweave_dir / STATE_FILE}: unreadable")




def digest(data: bytes | None) -> str:
    """What a log header names a ``state.json`` by: the SHA-256 of its bytes (``ABSENT``
    when there is none)."""
    return ABSENT if data is None else hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass
class LoadReport:
    """What loading found: where the state came from and everything worth telling the user."""

    method: LoadMethod
    issues: list[ValidationIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    wal_applied: int = 0
    wal_skipped: int = 0
    data_loss: bool = False
    # Whether the in-memory state equals state.json + the log, so appending can continue.
    wal_appendable: bool = False
    state_digest: str = ABSENT
    state_size: int = 0
    segment: Segment | None = None
    """``state.wal`` as read, when appending continues it."""
    folding: Segment | None = None
    """``state.wal.folding`` when it was replayed: a background fold that did not finish."""



    def took(self, replayed: Replayed) -> HankweaveState:
        """Count a replay's transitions (and say what it skipped); its state."""
        self.wal_applied += replayed.applied
        self.wal_skipped += len(replayed.skipped)
        self.warnings.extend(replayed.skipped)
        return replayed.state


def _parse_file(path: Path, report: LoadReport) -> tuple[HankweaveState, bytes] | None:
    data = _read(path)
    if data is None:
        return None
    try:
        return parse_state(data), data
    except (ValidationError, ValueError) as exc:
        report.issues.append(
            ValidationIssue("error", "corrupted_data", f"{path}: not a valid state: {_why(exc)}")
        )
        return None


def _why(exc: Exception) -> str:
    """Where a state file goes wrong, in one line."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


def _segments(hankweave_dir: Path, report: LoadReport, *names: str) -> list[Segment | None]:
    """The log segments named, read; torn last lines and unreadable headers are reported."""
    found = []
    for name in names:
        segment = read_segment(hankweave_dir / name)
        if segment is not None and segment.torn_bytes:
            # A line without its newline was being written when the process died: never
            # acknowledged.
            report.warnings.append(f"{name}: ignored a torn last line ({segment.torn_bytes}"
                                   " bytes)")
        if segment is not None and segment.unreadable:
            report.warnings.append(f"{name}: unreadable header; its transitions were ignored")
        found.append(segment)
    return found


def load_state(hankweave_dir: Path) -> tuple[HankweaveState, LoadReport]:
    """Load the state of an execution without writing anything.

    The files are read as one snapshot: if a fold replaced ``state.json`` or moved a log
    segment while they were being read, they are read again (a live writer's fold takes
    moments, so this settles at once).
    """
    hankweave_dir = Path(hankweave_dir)
    with heap.collections_paused():
        for _ in range(SNAPSHOT_ATTEMPTS - 1):
            before = _stamps(hankweave_dir)
            loaded = _load_once(hankweave_dir)
            if _stamps(hankweave_dir) == before:
                return loaded
        return _load_once(hankweave_dir)


SNAPSHOT_ATTEMPTS = 20
_FOLD_MOVED_FILES = (STATE_FILE, FOLDING_WAL_FILE, FOLD_MARKER_FILE, PREVIOUS_WAL_FILE,
                     BACKUP_FILE)


def _stamps(hankweave_dir: Path) -> list[tuple[int, int, int] | None]:
    """What identifies the files a fold replaces or moves (``state.wal`` only grows, except
    when a rotation starts a new one: its inode tells)."""
    stamps: list[tuple[int, int, int] | None] = []
    for name in (*_FOLD_MOVED_FILES, WAL_FILE):
        try:
            found = os.stat(hankweave_dir / name)
        except OSError:
            stamps.append(None)
            continue
        grows = name == WAL_FILE
        stamps.append((found.st_ino, 0 if grows else found.st_size,
                       0 if grows else found.st_mtime_ns))
    return stamps


def _load_once(hankweave_dir: Path) -> tuple[HankweaveState, LoadReport]:
    """The recovery ladder: ``state.json``; else ``state.json.bak`` rebuilt forward with the log
    the last fold retired (``state.wal.prev``), which gives back what ``state.json`` held;
    else a fresh empty state (with a warning).  The log segments that extend the state loaded
    are replayed on it (:func:`hankweave.state.wal.chain`): those of a fold still under way
    included.
    """
    hankweave_dir = Path(hankweave_dir)
    primary = hankweave_dir / STATE_FILE
    report = LoadReport(method="new")
    for leftover in sorted(hankweave_dir.glob(f"{STATE_FILE}.tmp*")):
        report.warnings.append(f"ignored leftover {leftover.name} (an interrupted write)")
    marker = FoldMarker.read(hankweave_dir / FOLD_MARKER_FILE)
    folding, current = _segments(hankweave_dir, report, FOLDING_WAL_FILE, WAL_FILE)

    loaded = _parse_file(primary, report)
    replayed: list[Segment] = []
    if loaded is not None:
        report.method = "primary"
        state, raw = loaded
        report.state_digest = digest(raw)
        report.state_size = len(raw)
    else:
        state, replayed = _fall_back(hankweave_dir, report, marker, folding, current)

    if report.method == "fresh":
        report.wal_appendable = False
        if current is not None and current.lines:
            report.warnings.append(f"{WAL_FILE}: not replayed (its base state is unreadable)")
    else:
        state = _extend(state, report, replayed, primary, marker, folding, current)
    if report.method == "backup":
        _say_what_the_backup_kept(report, extended=current is not None and current in replayed)

    report.issues.extend(validate_state(state, hankweave_dir))
    return state, report


def _extend(state: HankweaveState, report: LoadReport, replayed: list[Segment], primary: Path,
            marker: FoldMarker | None, folding: Segment | None, current: Segment | None,
            ) -> HankweaveState:
    """Replay the log segments that extend the state loaded (beyond those the fall-back
    already replayed, which ``replayed`` lists and gains them), and decide whether the writer
    can go on appending to ``state.wal``."""
    if current is None or current not in replayed:
        rest = [s for s in (folding, current) if s is not None and s not in replayed]
        more = chain(report.state_digest, rest, marker)
        state = report.took(replay_segments(state, more))
        replayed += more
    if current is not None and current in replayed:
        report.wal_appendable = report.method == "primary" or (
            report.method == "new" and not primary.exists())
    elif current is None:
        report.wal_appendable = report.method == "primary" and folding is None
    elif current.lines and report.method == "backup":
        # A log whose base is another file was already folded (or belongs to a lost version).
        report.warnings.append(f"{WAL_FILE}: does not extend {BACKUP_FILE}; not replayed")
    report.segment = current if report.wal_appendable else None
    report.folding = folding if folding is not None and folding in replayed else None
    return state


def _say_what_the_backup_kept(report: LoadReport, *, extended: bool) -> None:
    """The state came from the backup: ``extended`` when the logs carried it up to the current
    log.  Only a chain that reaches the current log proves nothing after the backup is gone."""
    report.data_loss = not extended
    report.warnings.append(
        f"{STATE_FILE} unusable; rebuilt what it held from its backup and the transition"
        " logs, nothing lost" if extended else
        f"{STATE_FILE} unusable; loaded {BACKUP_FILE}: what {STATE_FILE} held beyond it"
        " is lost")


def _fall_back(hankweave_dir: Path, report: LoadReport, marker: FoldMarker | None,
               folding: Segment | None, current: Segment | None,
               ) -> tuple[HankweaveState, list[Segment]]:
    """``state.json`` is missing or unreadable: its backup (or nothing), rebuilt forward with
    the logs that extend it (the one the last fold retired, and those after it).

    Sets the report's method and ``state_digest``: the digest the rebuilt state has written
    out, so a log whose header names the lost ``state.json`` is replayed on top too.
    """
    primary, backup = hankweave_dir / STATE_FILE, hankweave_dir / BACKUP_FILE
    loaded = _parse_file(backup, report)
    if loaded is None and backup.exists():
        report.method, report.data_loss = "fresh", True
        report.warnings.append(
            "Backup also corrupted, starting fresh: the state could not be loaded and an"
            " empty state is used in memory; nothing is written until the next change")
        return HankweaveState(), []
    state, raw = loaded if loaded is not None else (HankweaveState(), None)
    report.state_digest = digest(raw)
    report.state_size = len(raw) if raw else 0
    if loaded is not None:
        report.method = "backup"
    (previous,) = _segments(hankweave_dir, report, PREVIOUS_WAL_FILE)
    replayed = chain(report.state_digest, [previous, folding, current], marker)
    if replayed:
        state = report.took(replay_segments(state, replayed))
        report.method = "backup"
        report.state_digest = digest(dump_state(state))
    elif loaded is None and primary.exists():
        report.method, report.data_loss = "fresh", True
        report.warnings.append(
            f"{STATE_FILE} unusable and no backup: starting fresh; nothing is written until"
            " the next change")
    return state, replayed


def read_state_strict(hankweave_dir: Path) -> tuple[HankweaveState, LoadReport]:
    """Load for tools that must not guess: a missing or unreadable ``state.json`` is an error."""
    hankweave_dir = Path(hankweave_dir)
    primary = hankweave_dir / STATE_FILE
    if not primary.exists() and not (hankweave_dir / WAL_FILE).exists():
        raise StateLoadError(f"{primary}: no such file (is this an execution directory?)")
    state, report = load_state(hankweave_dir)
    if report.method == "fresh":
        problems = [i.message for i in report.issues if i.type == "corrupted_data"]
        raise StateLoadError(problems[0] if problems else f"{primary}: unreadable")
    return state, report
