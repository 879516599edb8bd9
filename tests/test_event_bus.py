"""The event bus: numbering, journaling, delivery order and isolation of failing consumers."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hankweave.events import (
    EventBus,
    EventBusClosedError,
    EventDataError,
    EventJournal,
    EventSink,
    ServerEvent,
    UnknownEventTypeError,
    journal_path,
    read_journal,
)
from hankweave.events.catalogue import InfoData

PONG = {"message": "pong", "timestamp": "2026-02-05T10:00:00.123Z"}


class RecordingSink(EventSink):
    name = "recording"

    def __init__(self) -> None:
        self.events: list[Mapping[str, Any]] = []
        self.closed = False

    def handle(self, event: Mapping[str, Any]) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed = True

    @property
    def seqs(self) -> list[int]:
        return [e["seq"] for e in self.events]


class ExplodingSink(RecordingSink):
    name = "exploding"

    def __init__(self, fail_on: int = 1) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.calls = 0

    def handle(self, event: Mapping[str, Any]) -> None:
        self.calls += 1
        if self.calls >= self.fail_on:
            raise RuntimeError("sink is broken")
        super().handle(event)


class FailingCloseSink(RecordingSink):
    name = "bad-close"

    def close(self) -> None:
        raise OSError("cannot flush")


@pytest.fixture
def journal(tmp_path: Path) -> EventJournal:
    return EventJournal(journal_path(tmp_path))


def info(bus: EventBus, message: str = "hi") -> ServerEvent:
    event = bus.emit("info", {"message": message})
    assert event is not None
    return event


def test_journaled_events_get_consecutive_seq(journal: EventJournal) -> None:
    bus = EventBus(journal)
    triggered = {
        "sentinelId": "s",
        "codonId": "c",
        "triggerNumber": 1,
        "strategy": "immediate",
        "eventCount": 1,
        "queueSize": 0,
    }
    events: list[ServerEvent | None] = [info(bus, str(i)) for i in range(3)]
    events.append(bus.emit("sentinel.triggered", triggered))
    bus.close()
    assert [e.seq for e in events if e is not None] == [1, 2, 3, 4]
    assert list(read_journal(journal.path)) == events


def test_numbering_continues_from_the_journal(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    bus = EventBus(EventJournal(path))
    info(bus)
    info(bus)
    bus.close()
    bus = EventBus(EventJournal(path))
    assert bus.last_seq == 2
    assert info(bus).seq == 3
    bus.close()


def test_bus_without_journal_numbers_from_one() -> None:
    bus = EventBus(None)
    assert [info(bus).seq for _ in range(3)] == [1, 2, 3]


def test_connection_event_is_dropped_not_journaled_and_takes_no_seq(
    journal: EventJournal, caplog: pytest.LogCaptureFixture
) -> None:
    sink = RecordingSink()
    bus = EventBus(journal, sinks=[sink])
    seen: list[ServerEvent] = []
    bus.subscribe(seen.append)
    assert bus.emit("pong", PONG) is None
    assert info(bus).seq == 1
    bus.close()
    assert "dropped 'pong'" in caplog.text
    assert [e["type"] for e in sink.events] == ["info"]
    assert [e.type for e in seen] == ["info"]
    assert [e.type for e in read_journal(journal.path)] == ["info"]


def test_connection_event_with_bad_data_is_still_refused(journal: EventJournal) -> None:
    bus = EventBus(journal)
    with pytest.raises(EventDataError, match="'pong'"):
        bus.emit("pong", {"message": "pong"})


def test_sinks_receive_the_journaled_json_object(journal: EventJournal) -> None:
    sink = RecordingSink()
    bus = EventBus(journal, sinks=[sink])
    event = info(bus, "x")
    bus.close()
    assert sink.events == [event.to_wire()]
    assert sink.events[0]["data"] == {"message": "x"}
    assert sink.closed


class LeakingSink(RecordingSink):
    name = "leaking"

    def handle(self, event: Mapping[str, Any]) -> None:
        raise ConnectionError("cannot post to https://user:hunter2@collector.example/v1")


def test_a_sink_failure_keeps_no_url_password_in_the_journal(journal: EventJournal) -> None:
    # Issue 34 item 6: a sink's error may quote the endpoint it was given, with credentials.
    bus = EventBus(journal, sinks=[LeakingSink()])
    info(bus)
    bus.close()
    [failure] = [e for e in read_journal(journal.path) if e.type == "sink.failed"]
    assert failure.data["error"] == (
        "ConnectionError: cannot post to https://user:***@collector.example/v1")
    assert "hunter2" not in journal.path.read_text()


def test_failing_sink_is_disabled_with_one_sink_failed_event(journal: EventJournal) -> None:
    before, broken, after = RecordingSink(), ExplodingSink(fail_on=2), RecordingSink()
    bus = EventBus(journal, sinks=[before, broken, after])
    for i in range(4):
        info(bus, f"m{i}")
    assert bus.sinks == (before, after)
    bus.close()

    journaled = list(read_journal(journal.path))
    failures = [e for e in journaled if e.type == "sink.failed"]
    assert len(failures) == 1
    assert failures[0].data == {
        "sink": "exploding",
        "error": "RuntimeError: sink is broken",
        "disabled": True,
    }
    # The failure is recorded right after the event that broke the sink.
    assert [e.type for e in journaled] == ["info", "info", "sink.failed", "info", "info"]
    assert broken.calls == 2
    # The other sinks missed nothing, in order, including the failure report.
    assert before.seqs == after.seqs == [1, 2, 3, 4, 5]
    assert broken.closed  # a detached sink still gets to release what it holds


def test_each_failing_sink_reports_once(journal: EventJournal) -> None:
    bus = EventBus(journal, sinks=[ExplodingSink(), ExplodingSink(), RecordingSink()])
    info(bus)
    info(bus)
    bus.close()
    types = [e.type for e in read_journal(journal.path)]
    assert types == ["info", "sink.failed", "sink.failed", "info"]


def test_subscribers_receive_events_in_emission_order(journal: EventJournal) -> None:
    bus = EventBus(journal)
    first: list[int | None] = []
    second: list[int | None] = []
    bus.subscribe(lambda e: first.append(e.seq))
    bus.subscribe(lambda e: second.append(e.seq))
    for _ in range(5):
        info(bus)
    assert first == second == [1, 2, 3, 4, 5]


def test_failing_subscriber_is_logged_and_kept(
    journal: EventJournal, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus(journal)
    calls: list[int | None] = []

    def flaky(event: ServerEvent) -> None:
        calls.append(event.seq)
        raise ValueError("subscriber bug")

    bus.subscribe(flaky)
    info(bus)
    info(bus)
    assert calls == [1, 2]
    assert "subscriber" in caplog.text
    assert [e.type for e in read_journal(journal.path)] == ["info", "info"]


def test_unsubscribe_stops_delivery(journal: EventJournal) -> None:
    bus = EventBus(journal)
    seen: list[int | None] = []
    unsubscribe = bus.subscribe(lambda e: seen.append(e.seq))
    info(bus)
    unsubscribe()
    unsubscribe()
    info(bus)
    assert seen == [1]


def test_event_emitted_during_delivery_reaches_everyone_after_the_current_one(
    journal: EventJournal,
) -> None:
    sink = RecordingSink()
    bus = EventBus(journal, sinks=[sink])
    order: list[tuple[str, int | None]] = []

    def reacting(event: ServerEvent) -> None:
        order.append((event.data["message"], event.seq))
        if event.data["message"] == "trigger":
            info(bus, "reaction")

    bus.subscribe(reacting)
    info(bus, "trigger")
    info(bus, "after")
    assert order == [("trigger", 1), ("reaction", 2), ("after", 3)]
    assert sink.seqs == [1, 2, 3]


def test_invalid_payload_raises_naming_type_and_field_and_records_nothing(
    journal: EventJournal,
) -> None:
    sink = RecordingSink()
    bus = EventBus(journal, sinks=[sink])
    with pytest.raises(EventDataError) as caught:
        bus.emit("tool.result", {"codonId": "a", "toolUseId": "t", "toolName": "Bash"})
    assert "'tool.result'" in str(caught.value)
    assert "isError" in str(caught.value)
    assert sink.events == []
    assert info(bus).seq == 1  # the refused event consumed no seq


def test_unknown_type_is_refused(journal: EventJournal) -> None:
    with pytest.raises(UnknownEventTypeError):
        EventBus(journal).emit("codon.exploded", {})


def test_payload_model_instance_is_accepted(journal: EventJournal) -> None:
    bus = EventBus(journal)
    event = bus.emit("info", InfoData(message="typed"))
    assert event is not None and event.data == {"message": "typed"}


def test_close_failure_is_journaled_and_the_journal_closed(journal: EventJournal) -> None:
    good = RecordingSink()
    bus = EventBus(journal, sinks=[FailingCloseSink(), good])
    seen: list[str] = []
    bus.subscribe(lambda e: seen.append(e.type))
    info(bus)
    bus.close()
    bus.close()
    assert good.closed
    assert journal.closed
    journaled = list(read_journal(journal.path))
    assert [e.type for e in journaled] == ["info", "sink.failed"]
    assert journaled[1].data["error"] == "OSError: cannot flush"
    assert seen == ["info", "sink.failed"]
    with pytest.raises(EventBusClosedError):
        info(bus)


def test_concurrent_emitters_get_unique_seq_in_journal_order(journal: EventJournal) -> None:
    sink = RecordingSink()
    bus = EventBus(journal, sinks=[sink])

    def emit_many(worker: int) -> None:
        for i in range(200):
            info(bus, f"{worker}-{i}")

    threads = [threading.Thread(target=emit_many, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    bus.close()
    assert [e.seq for e in read_journal(journal.path)] == list(range(1, 801))
    assert sink.seqs == list(range(1, 801))
