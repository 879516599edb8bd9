"""The event journal: line format, seq continuity, crash repair, tolerant and efficient reading."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hankweave.events import journal as journal_module
from hankweave.events.catalogue import ServerEvent, make_event
from hankweave.events.journal import (
    JOURNAL_RELATIVE_PATH,
    EventJournal,
    JournalBusyError,
    JournalError,
    JournalReadReport,
    follow_journal,
    journal_last_seq,
    journal_path,
    read_journal,
)

ORIGINAL_LINE = (
    b'{"id":"1738760000123-ab12cd34e","timestamp":"2026-02-05T10:00:00.123Z",'
    b'"type":"server.idle","data":{"reason":"startup","message":"Ready."}}\n'
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return journal_path(tmp_path)


def info(journal: EventJournal, message: str = "hello") -> ServerEvent:
    event = make_event("info", {"message": message}, seq=journal.next_seq)
    journal.append(event)
    return event


def action(journal: EventJournal, codon: str, text: str) -> ServerEvent:
    data = {"codonId": codon, "action": "message", "content": text}
    event = make_event("assistant.action", data, seq=journal.next_seq)
    journal.append(event)
    return event


def test_journal_lives_under_hankweave_events(tmp_path: Path) -> None:
    assert journal_path(tmp_path) == tmp_path / ".hankweave" / "events" / "events.jsonl"
    assert Path(".hankweave/events/events.jsonl") == JOURNAL_RELATIVE_PATH


def test_appended_events_read_back_in_order(path: Path) -> None:
    with EventJournal(path) as journal:
        written = [info(journal, f"m{i}") for i in range(5)]
    assert list(read_journal(path)) == written


def test_each_line_is_compact_json_starting_with_seq(path: Path) -> None:
    with EventJournal(path) as journal:
        action(journal, "a", "naïve 漢字")
    line = path.read_bytes()
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    assert line.startswith(b'{"seq":1,"schemaVersion":1,"id":"')
    assert b", " not in line and b'": ' not in line
    assert "naïve 漢字".encode() in line  # not \\u-escaped
    assert json.loads(line)["data"]["content"] == "naïve 漢字"


def test_seq_continues_across_reopen(path: Path) -> None:
    with EventJournal(path) as journal:
        info(journal)
        info(journal)
    with EventJournal(path) as journal:
        assert journal.last_seq == 2
        assert info(journal).seq == 3
    assert [e.seq for e in read_journal(path)] == [1, 2, 3]


def test_new_journal_starts_at_seq_one(path: Path) -> None:
    with EventJournal(path) as journal:
        assert journal.last_seq == 0
        assert journal.next_seq == 1


def test_append_refuses_a_gap_or_a_duplicate_seq(path: Path) -> None:
    with EventJournal(path) as journal:
        info(journal)
        with pytest.raises(JournalError, match="expects 2"):
            journal.append(make_event("info", {"message": "x"}, seq=3))
        with pytest.raises(JournalError, match="expects 2"):
            journal.append(make_event("info", {"message": "x"}, seq=1))
        with pytest.raises(JournalError):
            journal.append(make_event("info", {"message": "x"}))


def test_connection_events_are_refused(path: Path) -> None:
    with EventJournal(path) as journal:
        pong = make_event("pong", {"message": "pong", "timestamp": "t"}, seq=1)
        with pytest.raises(JournalError, match="'pong' is not journaled"):
            journal.append(pong)
    assert path.read_bytes() == b""


def test_torn_last_line_is_truncated_on_reopen_and_reported(path: Path) -> None:
    with EventJournal(path) as journal:
        info(journal, "one")
        info(journal, "two")
    intact = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"seq":3,"schemaVersion":1,"id":"17387600')  # killed mid-write

    with EventJournal(path) as journal:
        assert len(journal.warnings) == 1
        assert "torn last line" in journal.warnings[0]
        assert path.read_bytes() == intact
        assert journal.last_seq == 2
        info(journal, "three")

    lines = path.read_bytes().splitlines()
    assert len(lines) == 3
    assert json.loads(lines[2])["seq"] == 3
    report = JournalReadReport(path)
    assert [e.data["message"] for e in read_journal(path, report=report)] == [
        "one",
        "two",
        "three",
    ]
    assert report.clean


def test_torn_first_line_leaves_an_empty_journal(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"seq":1,"sche')
    with EventJournal(path) as journal:
        assert journal.warnings and journal.last_seq == 0
        info(journal)
    assert [e.seq for e in read_journal(path)] == [1]


def test_complete_last_event_missing_only_its_newline_is_kept(path: Path) -> None:
    with EventJournal(path) as journal:
        info(journal)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    with EventJournal(path) as journal:
        assert "terminated" in journal.warnings[0]
        assert journal.last_seq == 1
        info(journal)
    assert [e.seq for e in read_journal(path)] == [1, 2]


def test_reader_ignores_a_torn_last_line(path: Path) -> None:
    with EventJournal(path) as journal:
        info(journal)
    with open(path, "ab") as f:
        f.write(b'{"seq":2,"schemaVersion":1,"id":"x","times')
    report = JournalReadReport(path)
    assert [e.seq for e in read_journal(path, report=report)] == [1]
    assert report.torn_tail_bytes > 0
    assert report.clean


def test_corrupt_middle_line_is_reported_not_fatal(path: Path) -> None:
    with EventJournal(path) as journal:
        info(journal, "one")
    with open(path, "ab") as f:
        f.write(b"{not json at all\n")
        f.write(b'{"json":"but not an event"}\n')
    with EventJournal(path) as journal:
        info(journal, "two")

    report = JournalReadReport(path)
    events = list(read_journal(path, report=report))
    assert [e.data["message"] for e in events] == ["one", "two"]
    assert [(c.line_number, c.reason.split(" ")[0]) for c in report.corrupt_lines] == [
        (2, "not"),
        (3, "not"),
    ]
    assert "not JSON" in report.corrupt_lines[0].reason
    assert "not an event" in report.corrupt_lines[1].reason
    assert report.corrupt_lines[0].offset == len(path.read_bytes().splitlines(True)[0])


def test_corrupt_lines_are_logged_when_no_report_is_asked_for(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage\n")
    assert list(read_journal(path)) == []
    assert "line 1" in caplog.text


def test_reading_a_missing_journal_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(read_journal(tmp_path / "nope.jsonl"))


def write_long_journal(path: Path, count: int) -> None:
    # Payloads of varying, sometimes large size so bisection lands mid-line.
    with EventJournal(path) as journal:
        for i in range(count):
            action(journal, f"c{i % 3}", "x" * (i * 37 % 5000))


@pytest.mark.parametrize("after", [0, 1, 499, 1234, 2998, 2999, 3000, 5000])
def test_read_after_seq_returns_exactly_the_later_events_in_order(path: Path, after: int) -> None:
    write_long_journal(path, 3000)
    assert [e.seq for e in read_journal(path, after_seq=after)] == list(range(after + 1, 3001))


def test_read_after_seq_parses_only_the_events_it_returns(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_long_journal(path, 3000)
    parsed = 0

    class Counting(ServerEvent):
        @classmethod
        def model_validate_json(cls, *args: object, **kwargs: object) -> ServerEvent:  # type: ignore[override]
            nonlocal parsed
            parsed += 1
            return ServerEvent.model_validate_json(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(journal_module, "ServerEvent", Counting)
    assert [e.seq for e in read_journal(path, after_seq=2990)] == list(range(2991, 3001))
    assert parsed == 10


def test_read_after_seq_skips_original_unnumbered_lines(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(ORIGINAL_LINE * 3)
    with EventJournal(path) as journal:
        assert journal.last_seq == 0  # the original's lines carry no seq
        info(journal, "ours")
    assert [e.seq for e in read_journal(path)] == [None, None, None, 1]
    assert [e.seq for e in read_journal(path, after_seq=0)] == [1]


def test_corrupt_line_after_a_seq_is_reported_with_its_absolute_line_number(path: Path) -> None:
    write_long_journal(path, 500)
    with open(path, "ab") as f:
        f.write(b"garbage\n")
    with EventJournal(path) as journal:
        info(journal)
    report = JournalReadReport(path)
    assert [e.seq for e in read_journal(path, after_seq=499, report=report)] == [500, 501]
    assert [c.line_number for c in report.corrupt_lines] == [501]


def test_filters_by_type_and_codon(path: Path) -> None:
    with EventJournal(path) as journal:
        action(journal, "a", "1")
        info(journal)
        action(journal, "b", "2")
        action(journal, "a", "3")
    assert [e.seq for e in read_journal(path, types={"info"})] == [2]
    assert [e.seq for e in read_journal(path, codon_id="a")] == [1, 4]
    assert [e.seq for e in read_journal(path, after_seq=1, codon_id="a")] == [4]


def test_second_writer_is_refused(path: Path) -> None:
    with EventJournal(path), pytest.raises(JournalBusyError):
        EventJournal(path)


def test_closed_journal_refuses_appends(path: Path) -> None:
    journal = EventJournal(path)
    journal.close()
    journal.close()
    with pytest.raises(JournalError, match="closed"):
        journal.append(make_event("info", {"message": "late"}, seq=1))


def test_a_dieted_journal_that_does_not_restore_is_not_appended_to(path: Path) -> None:
    path.parent.mkdir(parents=True)
    (path.parent / "events.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    (path.parent / "journal.meta.json").write_text("{}")
    with pytest.raises(JournalError, match="restore"):
        EventJournal(path)


def test_lone_surrogate_is_escaped_not_fatal(path: Path) -> None:
    with EventJournal(path) as journal:
        info(journal, "bad \udcff byte")
    line = path.read_bytes()
    assert b"\\udcff" in line
    assert next(read_journal(path)).data["message"] == "bad \udcff byte"


KILLED_WRITER = """
import sys
from hankweave.events import EventBus, EventJournal
bus = EventBus(EventJournal(sys.argv[1]))
while True:
    event = bus.emit("info", {"message": "x" * 3000})
    print(event.seq, flush=True)
"""


def test_events_acknowledged_before_sigkill_survive_and_numbering_continues(path: Path) -> None:
    acknowledged = 0
    for _round in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        for _ in range(200):
            acknowledged = int(child.stdout.readline())
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    with EventJournal(path) as journal:
        assert journal.last_seq >= acknowledged
        report = JournalReadReport(path)
        seqs = [e.seq for e in read_journal(path, report=report)]
    assert seqs == list(range(1, journal.last_seq + 1))
    assert report.clean


def test_follow_yields_events_appended_by_another_writer(path: Path) -> None:
    stop = threading.Event()
    watchdog = threading.Timer(30, stop.set)  # only a failure waits it out
    watchdog.start()

    def writer() -> None:
        time.sleep(0.1)  # the journal does not exist yet when following starts
        with EventJournal(path) as journal:
            for i in range(5):
                info(journal, f"m{i}")
                time.sleep(0.02)

    thread = threading.Thread(target=writer)
    thread.start()
    seen = []
    try:
        for event in follow_journal(path, poll_interval=0.01, stop=stop):
            seen.append(event.data["message"])
            if len(seen) == 5:
                break
    finally:
        stop.set()
        watchdog.cancel()
        thread.join()
    assert seen == ["m0", "m1", "m2", "m3", "m4"]


def test_follow_after_seq_starts_after_it_and_waits_for_complete_lines(path: Path) -> None:
    with EventJournal(path) as journal:
        for i in range(3):
            info(journal, f"old{i}")
    stop = threading.Event()
    watchdog = threading.Timer(30, stop.set)  # only a failure waits it out
    watchdog.start()
    line = make_event("info", {"message": "new"}, seq=4).model_dump_json().encode()

    def writer() -> None:
        time.sleep(0.05)
        with open(path, "ab") as f:  # one line in two writes: never yielded half-written
            f.write(line[:20])
            f.flush()
            time.sleep(0.1)
            f.write(line[20:] + b"\n")

    thread = threading.Thread(target=writer)
    thread.start()
    seen = []
    try:
        for event in follow_journal(path, after_seq=2, poll_interval=0.01, stop=stop):
            seen.append((event.seq, event.data["message"]))
            if len(seen) == 2:
                break
    finally:
        stop.set()
        watchdog.cancel()
        thread.join()
    assert seen == [(3, "old2"), (4, "new")]


def test_follow_stops_when_asked(path: Path) -> None:
    stop = threading.Event()
    stop.set()
    assert list(follow_journal(path, poll_interval=0.01, stop=stop)) == []


def test_the_last_seq_is_read_from_the_end_without_a_writer(path: Path) -> None:
    with EventJournal(path) as journal:
        assert journal_last_seq(path) == 0
        for n in range(50):
            info(journal, f"message {n}")
    assert journal_last_seq(path) == 50
    with open(path, "ab") as handle:  # a write in progress: its seq does not count yet
        handle.write(b'{"seq":51,"schemaVersion":1,"id":"x","timest')
    assert journal_last_seq(path) == 50
    with pytest.raises(FileNotFoundError):
        journal_last_seq(path.parent / "nothing.jsonl")
