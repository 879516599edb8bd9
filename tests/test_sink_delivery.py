"""Event sinks: enabled by name, built before anything exists, fed off the runtime's path.

The queued delivery in isolation (order, a slow sink, overflow, a failing sink, the flush at
shutdown), then sinks in real runs: enabled in ``hankweave.json``, reported and skipped when
they cannot be built, fatal under ``HANKWEAVE_STRICT_PLUGINS=1``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hankweave.app.request import LaunchError
from hankweave.events import EventBus, EventJournal, QueuedSink, journal_path, read_journal
from hankweave.testing import EventSinkContract, MemorySink, use_script
from tests.runtime_harness import Project, codon


@pytest.fixture(autouse=True)
def _fresh_sinks() -> Iterator[None]:
    MemorySink.reset()
    yield
    MemorySink.reset()


def memory(**config: Any) -> MemorySink:
    return MemorySink(MemorySink.Config(**config))


def queued_bus(tmp_path: Path, *sinks: MemorySink, capacity: int | None = None) -> EventBus:
    bus = EventBus(EventJournal(journal_path(tmp_path)))
    for sink in sinks:
        bus.add_sink(QueuedSink(sink, report=bus.emit, capacity=capacity))
    return bus


def emit_infos(bus: EventBus, count: int) -> None:
    for number in range(count):
        bus.emit("info", {"message": f"event {number}"})


class TestMemorySink(EventSinkContract):
    sink_class = MemorySink

    def received(self, sink: Any, tmp_path: Path) -> list[Any]:
        return list(sink.events)


# ----- queued delivery -----


def test_a_queued_sink_gets_every_event_in_order_from_its_own_thread(tmp_path):
    sink = memory()
    bus = queued_bus(tmp_path, sink)
    emit_infos(bus, 300)
    bus.close()

    assert [e["seq"] for e in sink.events] == list(range(1, 301))
    assert threading.current_thread().name not in sink.threads
    assert sink.closed


def test_a_slow_sink_never_holds_up_the_emitter(tmp_path):
    sink = memory(delay_ms=250)
    bus = queued_bus(tmp_path, sink)
    started = time.monotonic()
    emit_infos(bus, 20)
    emitting = time.monotonic() - started
    bus.close()  # waits for the sink: about 20 x 250 ms

    # The sink needs 5 s for these; emitting took a fraction (a bound with room for a loaded
    # machine: CI runs another tox env beside this one).
    assert emitting < 2.5
    assert len(sink.events) == 20


def test_overflow_drops_the_oldest_events_and_says_so(tmp_path):
    sink = memory(delay_ms=250)  # 10 s for all 40: emitting them is far quicker, even loaded
    bus = queued_bus(tmp_path, sink, capacity=5)
    emit_infos(bus, 40)
    bus.close()

    journal = list(read_journal(journal_path(tmp_path)))
    warnings = [e.data for e in journal if e.type == "sink.failed" and not e.data["disabled"]]
    assert warnings and warnings[0]["sink"] == "memory" and warnings[0]["dropped"] >= 1
    assert "dropped the oldest" in warnings[0]["error"]
    # The close reports every drop in all, the journal kept every event, the sink the newest.
    closing = [e.data for e in journal if e.type == "sink.failed"][-1]
    assert closing["disabled"] is True and "dropped" in closing["error"]
    assert len([e for e in journal if e.type == "info"]) == 40
    delivered = [e["data"]["message"] for e in sink.events if e["type"] == "info"]
    assert delivered[-1] == "event 39" and len(delivered) < 40


def test_a_sink_that_raises_is_detached_with_one_report(tmp_path):
    broken, good = memory(fail_after=3, label="broken"), memory(label="good")
    bus = EventBus(EventJournal(journal_path(tmp_path)))
    queued = QueuedSink(broken, report=bus.emit)
    bus.add_sink(queued)
    bus.add_sink(QueuedSink(good, report=bus.emit))
    emit_infos(bus, 4)  # the fourth breaks it, in its worker
    wait_until(lambda: queued.failure is not None)
    emit_infos(bus, 2)  # the next hand-off tells the bus, which detaches it
    bus.close()

    journal = list(read_journal(journal_path(tmp_path)))
    failures = [e for e in journal if e.type == "sink.failed"]
    assert len(failures) == 1
    assert failures[0].data["disabled"] is True
    assert "memory sink 'broken' is broken" in failures[0].data["error"]
    assert failures[0].seq == 6  # right after the event that found the sink broken
    assert len(broken.events) == 3
    assert [e["seq"] for e in good.events] == [e.seq for e in journal]


def wait_until(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_shutdown_flushes_what_is_queued(tmp_path):
    sink = memory(delay_ms=40)  # 4 s for all: far longer than emitting them, even loaded
    bus = queued_bus(tmp_path, sink)
    emit_infos(bus, 100)
    assert len(sink.events) < 100  # still being delivered
    bus.close()

    assert len(sink.events) == 100 and sink.closed


def test_a_sink_that_cannot_keep_up_at_shutdown_is_reported_not_waited_for(tmp_path):
    sink = memory(delay_ms=500)  # 10 s for all 20
    bus = EventBus(EventJournal(journal_path(tmp_path)))
    bus.add_sink(QueuedSink(sink, report=bus.emit, flush_timeout_s=0.3))
    emit_infos(bus, 20)
    started = time.monotonic()
    bus.close()

    assert time.monotonic() - started < 5  # not the sink's 10 s (room for a loaded machine)
    failures = [e.data for e in read_journal(journal_path(tmp_path)) if e.type == "sink.failed"]
    assert failures and "within 0.3s" in failures[-1]["error"]


# ----- in real runs -----


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    project.env["HANKWEAVE_PLUGIN_MODULES"] += ",hankweave.testing.sinks"
    project.write_hank([codon("a"), codon("b")])
    yield project
    use_script(None)


def enable(project: Project, *sinks: dict[str, Any]) -> None:
    (project.root / "hankweave.json").write_text(json.dumps({"events": {"sinks": list(sinks)}}))


def test_an_enabled_sink_gets_the_journal_from_its_own_thread(project):
    enable(project, {"name": "memory", "config": {"label": "all"}})
    outcome = project.run({"a": {"messages": 2}})

    assert outcome.code == 0
    (sink,) = MemorySink.instances
    assert sink.config.label == "all" and sink.closed
    assert sink.events == project.journal()
    assert "MainThread" not in sink.threads


def test_installed_sinks_that_are_not_enabled_are_not_built(project):
    outcome = project.run()

    assert outcome.code == 0
    assert MemorySink.instances == []


def test_two_instances_of_one_sink_each_get_everything(project):
    enable(project, {"name": "memory", "config": {"label": "one"}},
           {"name": "memory", "config": {"label": "two"}})
    project.run()

    one, two = MemorySink.instances
    assert one.events == two.events == project.journal()


@pytest.mark.parametrize(("spec", "problem"), [
    ({"name": "nope"}, 'events.sinks[0]: no installed event sink is named "nope"'),
    ({"name": "memory", "config": {"delayMs": -1}}, "events.sinks[0].config.delayMs"),
    ({"name": "memory", "config": {"colour": "red"}}, "events.sinks[0].config.colour"),
])
def test_a_sink_that_cannot_be_built_is_reported_and_skipped(project, spec, problem):
    enable(project, spec)
    outcome = project.run()

    assert outcome.code == 0
    assert any(problem in notice and "skipped" in notice for notice in outcome.notices)
    assert MemorySink.instances == []


def test_under_strict_plugins_a_bad_sink_stops_the_launch_before_anything_exists(project):
    enable(project, {"name": "memory", "config": {"colour": "red"}})
    project.env["HANKWEAVE_STRICT_PLUGINS"] = "1"

    with pytest.raises(Exception, match=r"events\.sinks\[0\]\.config\.colour") as caught:
        project.run()

    assert getattr(caught.value, "exit_code", 2) == 2
    assert not project.exec_dir.exists()


def test_a_sink_whose_constructor_raises_is_skipped(project, monkeypatch):
    def refuse(self, config=None):
        raise OSError("cannot reach the collector")

    monkeypatch.setattr(MemorySink, "__init__", refuse)
    enable(project, {"name": "memory"})
    outcome = project.run()

    assert outcome.code == 0
    assert any("could not be built: OSError: cannot reach the collector" in notice
               for notice in outcome.notices)


def test_a_strict_launch_closes_the_sinks_it_built_when_another_cannot_be(project,
                                                                            monkeypatch):
    original = MemorySink.__init__

    def build(self, config=None):
        original(self, config)
        if self.config.label == "bad":
            raise OSError("cannot reach the collector")

    monkeypatch.setattr(MemorySink, "__init__", build)
    enable(project, {"name": "memory", "config": {"label": "fine"}},
           {"name": "memory", "config": {"label": "bad"}})
    project.env["HANKWEAVE_STRICT_PLUGINS"] = "1"

    with pytest.raises(LaunchError, match=r"events\.sinks\[1\]: .*could not be built"):
        project.run()

    fine = MemorySink.instances[0]
    assert fine.config.label == "fine" and fine.closed
    assert not project.exec_dir.exists()
