"""The event journal: ``.hankweave/events/events.jsonl``, the durable record of every event.

One line per event, compact JSON, UTF-8, in emission order, append-only across runs and
restarts (a rollback never truncates it).  Lines written here start with ``{"seq":N,`` so that
a reader finds an event's position without parsing the line; lines written by Hankweave 0.10.0
have no ``seq`` and read all the same.

Durability: each event is one ``write(2)`` on an ``O_APPEND`` descriptor, so an event survives
a killed process as soon as :meth:`EventJournal.append` returns; :meth:`EventJournal.flush` and
:meth:`EventJournal.close` fsync for a machine crash.  A process killed in the middle of a write
can leave a torn last line: readers ignore it, and the next writer removes it before appending.

Reading: :func:`read_journal` (with an efficient ``after_seq``: bisection on the byte offset,
since ``seq`` grows with the offset) and :func:`follow_journal` for ``--follow``.  Both skip
and report unreadable lines instead of failing.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import re
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError

from hankweave.events.catalogue import EventError, ServerEvent, is_journaled
from hankweave.faults import disk_write
from hankweave.fsutil import fsync_dir, open_private, private_dir, write_fully

__all__ = [
    "JOURNAL_RELATIVE_PATH",
    "CorruptLine",
    "EventJournal",
    "JournalBusyError",
    "JournalError",
    "JournalReadReport",
    "encode_event",
    "follow_journal",
    "journal_path",
    "read_journal",
]

log = logging.getLogger("hankweave.events")

JOURNAL_RELATIVE_PATH = Path(".hankweave") / "events" / "events.jsonl"
"""Where the journal lives inside an execution directory."""

# A line as this module writes it, or as the original writes it (no seq, no schemaVersion).
# Matching this prefix gives a line's seq and type without parsing the rest, which can be large
# (file bodies, tool results).  Anything else falls back to a full parse.
_PREFIX = re.compile(
    rb'\{(?:"seq":(\d+),)?(?:"schemaVersion":\d+,)?"id":"[^"\\]*","timestamp":"[^"\\]*",'
    rb'"type":"([^"\\]*)"'
)
_SEQ_PREFIX = re.compile(rb'\{"seq":(\d+)[,}]')

# `json.dumps` with options builds an encoder per call; the journal writes one per event.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)

_BACKWARD_CHUNK = 256 * 1024
# Bisection stops when the remaining range is this small; the rest is a cheap prefix scan.
_BISECT_WINDOW = 64 * 1024


class JournalError(EventError):
    """The journal cannot be opened or written as asked."""


class JournalBusyError(JournalError):
    """Another writer (process or object) already has this journal open."""


def journal_path(execution_dir: Path | str) -> Path:
    """The journal file of an execution directory."""
    return Path(execution_dir) / JOURNAL_RELATIVE_PATH


def encode_event(event: ServerEvent) -> bytes:
    """One journal line: compact JSON of the event, UTF-8, ending in ``\\n``.

    Raises:
        EventError: the event holds NaN or infinity, which JSON cannot carry.
    """
    wire = event.to_wire()
    try:
        return (_ENCODER.encode(wire) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (undecodable output of a tool) has no UTF-8 form: escape it instead.
        return (_ASCII_ENCODER.encode(wire) + "\n").encode("ascii")
    except ValueError as exc:
        raise EventError(f"event {event.type!r} cannot be written as JSON: {exc}") from None


# ----- writing -----


class EventJournal:
    """The append-only writer of one execution's journal.

    Opening repairs the end of the file (see :attr:`warnings`) and finds the last ``seq``, so
    numbering continues across restarts with no gap and no duplicate.  Only one writer may have
    a journal open at a time (an exclusive ``flock``, released by the kernel if the process
    dies).  :meth:`append` is thread-safe.

    Raises (on open):
        JournalBusyError: another writer holds the journal.
        JournalError: the directory holds a dieted journal (:mod:`hankweave.events.diet`)
            that does not restore to its original; appending would start a second journal.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.warnings: list[str] = []
        """Problems found and repaired on open (a torn last line), already logged."""
        self._lock = threading.Lock()
        _restore_dieted_journal(self.path)
        private_dir(self.path.parent)
        created = not self.path.exists()
        # Read access too: finding the last seq reads the file through the same descriptor.
        # 0600: events carry agent output (docs/state.md, "File modes").
        fd = open_private(self.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JournalBusyError(
                    f"{self.path} is already open for writing by another journal"
                    " (another hankweave runtime on this execution directory?)"
                ) from None
            if created:
                fsync_dir(self.path.parent)
            self._size = self._repair_tail(fd)
            self._last_seq = _last_seq(fd, self._size)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last event in the journal; 0 when it holds none."""
        return self._last_seq

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next appended event must carry."""
        return self._last_seq + 1

    @property
    def closed(self) -> bool:
        return self._fd is None

    def append(self, event: ServerEvent) -> None:
        """Write one event as one line; it survives a killed process once this returns.

        Raises:
            JournalError: a connection event (never journaled) or an unknown type; a ``seq``
                other than :attr:`next_seq`; the journal is closed; the write failed (the
                journal is then left as it was before the call).
        """
        if not is_journaled(event.type):
            raise JournalError(
                f"event {event.type!r} is not journaled: connection events go to one client"
                " only, and unknown types have no place in the record"
            )
        line = encode_event(event)
        with self._lock:
            if self._fd is None:
                raise JournalError(f"{self.path} is closed")
            if event.seq != self._last_seq + 1:
                raise JournalError(
                    f"event {event.type!r} has seq {event.seq}; the journal expects"
                    f" {self._last_seq + 1} (seq must grow by one with no gap or duplicate)"
                )
            self._write(self._fd, line)
            self._last_seq = event.seq

    def flush(self) -> None:
        """Make every appended event survive a machine crash (fsync)."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        """Fsync and close; later appends raise.  Idempotent."""
        with self._lock:
            if self._fd is None:
                return
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)  # also releases the writer flock

    def __enter__(self) -> EventJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._fd is None else f"last_seq={self._last_seq}"
        return f"<EventJournal {self.path} {state}>"

    # -- internals --

    def _write(self, fd: int, line: bytes) -> None:
        view = memoryview(line)
        try:
            disk_write(self.path)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as exc:
            # Take back a partial line so the next append does not glue onto it.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            raise JournalError(f"cannot append to {self.path}: {exc}") from exc
        self._size += len(line)

    def _repair_tail(self, fd: int) -> int:
        """Remove a torn last line (or terminate a complete one); return the file size."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        start = _last_line_start(fd, size)
        fragment = os.pread(fd, size - start, start)
        if _is_json_object(fragment):
            # A whole event that only lacks its newline (not something this writer leaves, but
            # an event is an event): keep it.
            write_fully(fd, b"\n")
            self._warn(f"{self.path}: terminated a last line that lacked its newline")
            return size + 1
        os.ftruncate(fd, start)
        self._warn(
            f"{self.path}: removed a torn last line ({size - start} bytes at offset {start})"
            " left by an interrupted write; that event was never acknowledged"
        )
        return start

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("%s", message)


def _restore_dieted_journal(path: Path) -> None:
    """A writer opening a dieted journal restores it first (verified against the diet's
    ``originalSha256``) and removes the diet pair, keeping the body store for the next diet:
    new events must continue the original journal, not start a second one."""
    from hankweave.events.diet import DietError, is_dieted, prune_diet_pair, restore_journal

    if path.exists() or not is_dieted(path.parent):
        return
    try:
        _, size, _ = restore_journal(path.parent)
    except DietError as exc:
        raise JournalError(f"{exc}; the diet is kept as it was") from None
    prune_diet_pair(path.parent)
    log.info("the event journal was dieted; restored %d bytes in place (sha256-verified)", size)



def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def _last_line_start(fd: int, end: int) -> int:
    """Offset just after the last ``\\n`` before ``end`` (0 when there is none)."""
    pos = end
    while pos > 0:
        start = max(0, pos - _BACKWARD_CHUNK)
        newline = os.pread(fd, pos - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        pos = start
    return 0


def _lines_backward(fd: int, end: int) -> Iterator[bytes]:
    """The lines of ``[0, end)`` from last to first, without their ``\\n``.

    ``end`` must be a line boundary.  Reads in large windows from the end, so finding something
    near the end of a long file costs one read.
    """
    pos = end
    carry = b""  # the part of a line that began before the current window
    while pos > 0:
        start = max(0, pos - _BACKWARD_CHUNK)
        lines = (os.pread(fd, pos - start, start) + carry).split(b"\n")
        if start > 0:
            carry = lines[0]
            lines = lines[1:]
        yield from reversed(lines)
        pos = start


def _last_seq(fd: int, end: int) -> int:
    """The largest ``seq`` in the file: that of the last line that has one.

    Only this module's lines have a seq, and they start with it, so this usually reads one
    window (a journal written only by the original runtime is read to its start).  A damaged
    line whose prefix still shows its seq counts, so a seq is never reused.
    """
    for line in _lines_backward(fd, end):
        match = _SEQ_PREFIX.match(line)
        if match:
            return int(match[1])
    return 0


# ----- reading -----


def journal_last_seq(path: Path | str) -> int:
    """The ``seq`` of the journal's last complete event, read from its end (a torn last line
    is not counted); 0 for an empty journal or one without seqs.

    Raises:
        FileNotFoundError, OSError: the journal cannot be read.
    """
    from hankweave.events.diet import is_dieted

    path = Path(path)
    if not path.exists() and is_dieted(path.parent):
        last = 0
        for event in read_journal(path, report=JournalReadReport(path)):
            last = event.seq or last
        return last
    with open(path, "rb") as handle:
        fd = handle.fileno()
        return _last_seq(fd, _last_line_start(fd, os.fstat(fd).st_size))


@dataclass(frozen=True)
class CorruptLine:
    """A journal line that is not an event: where it is and why it was skipped."""

    line_number: int
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line_number} (byte {self.offset}): {self.reason}"


@dataclass
class JournalReadReport:
    """What a read found besides events; complete once the iteration is finished."""

    path: Path
    events: int = 0
    """Events yielded."""
    corrupt_lines: list[CorruptLine] = field(default_factory=list)
    """Lines that are not events, skipped.  Lines excluded by a filter before being parsed
    (an earlier ``seq``, another type) are not examined and so not reported."""
    torn_tail_bytes: int = 0
    """Size of a last line without its newline: an event being written, or torn by a crash."""

    @property
    def clean(self) -> bool:
        return not self.corrupt_lines


class _LineFilter:
    """Turns journal lines into the events a reader asked for, recording problems.

    Cheap checks come first: a line whose prefix shows an unwanted ``seq`` or type is dropped
    without parsing the rest of it.
    """

    def __init__(
        self,
        handle: BinaryIO,
        report: JournalReadReport,
        *,
        after_seq: int | None,
        types: Collection[str] | None,
        codon_id: str | None,
        log_problems: bool,
    ) -> None:
        self._handle = handle
        self.report = report
        self.after_seq = after_seq
        self._types = frozenset(types) if types is not None else None
        self._codon_id = codon_id
        self._log_problems = log_problems
        # Line numbers are counted from where reading started; the absolute number is only
        # worked out when a problem is reported, which is rare.
        self._first_line: int | None = None
        self._start_offset = 0
        self._lines_read = 0

    def start_at(self, offset: int) -> None:
        self._start_offset = offset
        self._lines_read = 0
        self._first_line = 1 if offset == 0 else None

    def feed(self, line: bytes, offset: int) -> ServerEvent | None:
        """One complete line (with or without its ``\\n``) that starts at ``offset``."""
        self._lines_read += 1
        if not line.strip():
            return None
        after = self.after_seq
        match = _PREFIX.match(line)
        if match is not None:
            seq = int(match[1]) if match[1] is not None else None
            if after is not None and (seq is None or seq <= after):
                return None
            if self._types is not None and match[2].decode() not in self._types:
                return None
        try:
            event = _parse_event(line)
        except ValidationError as exc:
            self._corrupt(offset, _why(exc))
            return None
        if match is None:
            if after is not None and (event.seq is None or event.seq <= after):
                return None
            if self._types is not None and event.type not in self._types:
                return None
        if self._codon_id is not None and event.data.get("codonId") != self._codon_id:
            return None
        self.report.events += 1
        return event

    def _corrupt(self, offset: int, reason: str) -> None:
        if self._first_line is None:
            self._first_line = _count_newlines(self._handle, self._start_offset) + 1
        problem = CorruptLine(self._first_line + self._lines_read - 1, offset, reason)
        self.report.corrupt_lines.append(problem)
        if self._log_problems:
            log.warning("%s: skipped %s", self.report.path, problem)


def _parse_event(line: bytes) -> ServerEvent:
    try:
        return ServerEvent.model_validate_json(line)
    except ValidationError as exc:
        if exc.errors()[0]["type"] != "json_invalid":
            raise
        # The fast parser refuses escaped lone surrogates, which Node's JSON.stringify and our
        # writer both produce for text that is not valid Unicode; Python's parser takes them.
        try:
            obj = json.loads(line)
        except ValueError:
            raise exc from None
        return ServerEvent.model_validate(obj)


def _why(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        return f"not JSON ({first['msg'].removeprefix('Invalid JSON: ')})"
    where = ".".join(str(p) for p in first["loc"])
    return f"not an event: {where + ': ' if where else ''}{first['msg']}"


def _count_newlines(handle: BinaryIO, end: int) -> int:
    fd = handle.fileno()
    count = pos = 0
    while pos < end:
        chunk = os.pread(fd, min(1 << 20, end - pos), pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count


def _start_offset(handle: BinaryIO, size: int, after_seq: int) -> int:
    """A line start before which no event has a seq greater than ``after_seq``, near the first
    one that does.

    Bisection on the byte offset: seq grows with the offset (lines without a seq, written by the
    original runtime, only come before numbered ones).  Each probe reads one line's prefix.
    """
    fd = handle.fileno()
    lo, hi = 0, size
    while hi - lo > _BISECT_WINDOW:
        mid = (lo + hi) // 2
        probe = _first_numbered_line(fd, mid, hi)
        if probe is None:
            hi = mid
            continue
        start, seq = probe
        if seq <= after_seq:
            lo = start  # this line and everything before it is not wanted
        else:
            hi = mid
    return lo


def _first_numbered_line(fd: int, pos: int, limit: int) -> tuple[int, int] | None:
    """``(offset, seq)`` of the first line starting at or after ``pos`` (and before ``limit``)
    whose prefix shows a seq."""
    # Back up one byte so a line starting exactly at `pos` is found too.
    scan = max(pos - 1, 0)
    at_line_start = pos == 0
    while scan < limit:
        chunk = os.pread(fd, 4096, scan)
        if not chunk:
            return None
        index = 0
        if not at_line_start:
            newline = chunk.find(b"\n")
            if newline < 0:
                scan += len(chunk)
                continue
            index = newline + 1
            at_line_start = True
        line_start = scan + index
        if line_start >= limit:
            return None
        head = os.pread(fd, 40, line_start)
        match = _SEQ_PREFIX.match(head)
        if match:
            return line_start, int(match[1])
        scan, at_line_start = line_start, False
    return None


def read_journal(
    path: Path | str,
    *,
    after_seq: int | None = None,
    types: Collection[str] | None = None,
    codon_id: str | None = None,
    report: JournalReadReport | None = None,
) -> Iterator[ServerEvent]:
    """Yield the journal's events, oldest first, optionally filtered.

    Args:
        path: the ``events.jsonl`` file.
        after_seq: only events whose ``seq`` is greater (events without a seq, from the
            original runtime, are then excluded).  Found by bisection, so reading the tail of a
            long journal does not read the whole file.
        types: only events of these types.
        codon_id: only events whose ``data.codonId`` is this.
        report: filled with the lines skipped as corrupt and the size of a torn last line
            (complete when the iteration ends).  Without one, problems are logged as warnings.

    A last line without its newline is ignored (it may be a write in progress).  A line that is
    not an event is skipped and reported, never fatal.

    Raises:
        FileNotFoundError: there is no journal at ``path``.
    """
    path = Path(path)
    if report is None:
        report = JournalReadReport(path)
        log_problems = True
    else:
        log_problems = False
    from hankweave.events.diet import open_journal_bytes

    with open_journal_bytes(path) as handle:  # a dieted journal reads as its original
        size = handle.seek(0, os.SEEK_END)
        lines = _LineFilter(
            handle,
            report,
            after_seq=after_seq,
            types=types,
            codon_id=codon_id,
            log_problems=log_problems,
        )
        # A dieted journal is read from memory: no descriptor to bisect, and no need.
        on_disk = isinstance(handle, io.BufferedReader)
        offset = 0 if after_seq is None or not on_disk else _start_offset(handle, size,
                                                                           after_seq)
        handle.seek(offset)
        lines.start_at(offset)
        for line in handle:
            if not line.endswith(b"\n"):
                report.torn_tail_bytes = len(line)
                break
            event = lines.feed(line, offset)
            offset += len(line)
            if event is not None:
                yield event


def follow_journal(
    path: Path | str,
    after_seq: int | None = None,
    poll_interval: float = 0.25,
    *,
    types: Collection[str] | None = None,
    codon_id: str | None = None,
    report: JournalReadReport | None = None,
    stop: threading.Event | None = None,
) -> Iterator[ServerEvent]:
    """Yield the journal's events (those after ``after_seq``), then new ones as they arrive.

    For ``--follow``.  Waits for the journal to appear if it does not exist yet, checks for
    new lines every ``poll_interval`` seconds, never yields a line before its newline is
    written, and copes with the file being replaced (it starts over, skipping the seqs it has
    already passed).  Runs until ``stop`` is set or the consumer stops iterating; filters and
    ``report`` are as for :func:`read_journal`.
    """
    follower = _Follower(Path(path), report, after_seq=after_seq, types=types,
                         codon_id=codon_id)

    def wait() -> bool:
        if stop is not None:
            return not stop.wait(poll_interval)
        time.sleep(poll_interval)
        return True

    try:
        while stop is None or not stop.is_set():
            if not follower.open():  # no journal yet
                if not wait():
                    return
                continue
            yield from follower.new_events()
            if not follower.read_any and not wait():
                return
    finally:
        follower.close()


class _Follower:
    """:func:`follow_journal`'s place in the journal: the open file, how far it was read and
    the highest seq passed, across polls and across the file being replaced."""

    def __init__(self, path: Path, report: JournalReadReport | None, *,
                 after_seq: int | None, types: Collection[str] | None,
                 codon_id: str | None) -> None:
        self.path = path
        self.log_problems = report is None
        self.report = report if report is not None else JournalReadReport(path)
        self.seen_seq = after_seq
        self.types, self.codon_id = types, codon_id
        self.handle: BinaryIO | None = None
        self.lines: _LineFilter | None = None
        self.offset = 0
        self.read_any = False
        """Whether the last :meth:`new_events` read a line (else the follower waits)."""

    def open(self) -> bool:
        """Have the journal open (again, if it was replaced); ``False`` while it does not
        exist."""
        if self.handle is not None and _replaced(self.path, self.handle):
            self.close()
        if self.handle is not None:
            return True
        try:
            self.handle = open(self.path, "rb")  # noqa: SIM115 - kept open across polls
        except FileNotFoundError:
            return False
        self.lines = _LineFilter(self.handle, self.report, after_seq=self.seen_seq,
                                 types=self.types, codon_id=self.codon_id,
                                 log_problems=self.log_problems)
        size = os.fstat(self.handle.fileno()).st_size
        self.offset = 0 if self.seen_seq is None else _start_offset(self.handle, size,
                                                                    self.seen_seq)
        self.lines.start_at(self.offset)
        return True

    def new_events(self) -> Iterator[ServerEvent]:
        """The events of the complete lines written since the last call."""
        handle, lines = self.handle, self.lines
        assert handle is not None and lines is not None
        if os.fstat(handle.fileno()).st_size < self.offset:
            # Shrunk below what we consumed: not a torn-line repair (that never removes a
            # complete line), so the content was replaced.  Start over, skipping seen seqs.
            self.offset = 0
            lines.after_seq = self.seen_seq
            lines.start_at(0)
        handle.seek(self.offset)
        self.read_any = False
        while True:
            line = handle.readline()
            if not line.endswith(b"\n"):
                # Nothing more, or a line still being written: read it whole next time.
                break
            self.read_any = True
            match = _SEQ_PREFIX.match(line)
            if match is not None:
                self.seen_seq = max(self.seen_seq or 0, int(match[1]))
            event = lines.feed(line, self.offset)
            self.offset += len(line)
            if event is not None:
                yield event

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def _replaced(path: Path, handle: BinaryIO) -> bool:
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # cannot tell (a permission change?): keep reading what we have open
    opened = os.fstat(handle.fileno())
    return (current.st_ino, current.st_dev) != (opened.st_ino, opened.st_dev)
