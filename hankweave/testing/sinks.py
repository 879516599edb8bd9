"""Testing event sinks: ``MemorySink`` and ``EventSinkContract``.

``MemorySink`` is a real sink plugin (registered as ``memory`` when this module is loaded as a
plugin, e.g. ``HANKWEAVE_PLUGIN_MODULES=hankweave.testing.sinks``) that keeps the events it gets
in memory, for tests of the runtime's event delivery; its settings can make it slow or broken.

``EventSinkContract`` is the conformance suite every sink subclasses::

    class TestMySink(EventSinkContract):
        sink_class = MySink

        def config(self, tmp_path):
            return {"path": str(tmp_path / "events.jsonl")}

        def received(self, sink, tmp_path):
            return [json.loads(line) for line in (tmp_path / "events.jsonl").open()]
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field, ValidationError

from hankweave.events.bus import EventBus
from hankweave.events.delivery import QueuedSink
from hankweave.events.sink import EventSink, SinkConfig
from hankweave.hookspecs import hookimpl


class MemorySink(EventSink):
    """Keeps every event it is given; every instance is listed in :attr:`instances`."""

    name: ClassVar[str] = "memory"
    instances: ClassVar[list[MemorySink]] = []
    """Every MemorySink built, oldest first (tests find the runtime's here)."""

    class Config(SinkConfig):
        label: str = ""
        """Tells instances apart in a test."""
        delay_ms: int = Field(default=0, ge=0)
        """Time each event takes to handle: a slow sink."""
        fail_after: int | None = Field(default=None, ge=0)
        """Raise on the event after this many: a broken sink."""
        queue_capacity: int | None = Field(default=None, gt=0)
        """Override the class's queue capacity (an overflow test)."""

    config: Config

    def __init__(self, config: SinkConfig | None = None) -> None:
        super().__init__(config)
        self.events: list[Mapping[str, Any]] = []
        self.closed = False
        self.threads: set[str] = set()
        self._lock = threading.Lock()
        MemorySink.instances.append(self)
        if self.config.queue_capacity is not None:
            self.queue_capacity = self.config.queue_capacity

    def handle(self, event: Mapping[str, Any]) -> None:
        if self.config.fail_after is not None and len(self.events) >= self.config.fail_after:
            raise RuntimeError(f"memory sink {self.config.label!r} is broken")
        if self.config.delay_ms:
            time.sleep(self.config.delay_ms / 1000)
        with self._lock:
            self.events.append(event)
            self.threads.add(threading.current_thread().name)

    def close(self) -> None:
        self.closed = True

    @property
    def types(self) -> list[str]:
        return [str(event.get("type")) for event in self.events]

    @classmethod
    def reset(cls) -> None:
        cls.instances.clear()


@hookimpl
def register_event_sinks(register: Any) -> None:
    register(MemorySink)


# ----- the contract -----


def sample_events() -> list[dict[str, Any]]:
    """A few journaled events of different kinds, as a sink receives them."""
    from hankweave.events.catalogue import make_event

    payloads: list[tuple[str, dict[str, Any]]] = [
        ("info", {"message": "Starting"}),
        ("codon.started", {"codonId": "a", "codonName": "A", "sessionId": "s-1",
                           "startTime": "2026-12-01T10:00:00.000Z"}),
        ("assistant.action", {"codonId": "a", "action": "tool_use", "content": "",
                              "toolName": "Write", "toolInput": {"file_path": "x.md"},
                              "toolUseId": "toolu_1"}),
        ("token.usage", {"codonId": "a", "inputTokens": 10, "outputTokens": 20,
                         "cacheCreationTokens": 0, "cacheReadTokens": 5, "totalCost": 0.001}),
        ("codon.completed", {"codonId": "a", "success": True, "cost": 0.001,
                             "duration": 1200, "exitStatus": {"type": "success"}}),
        ("sink.failed", {"sink": "other", "error": "RuntimeError: boom", "disabled": True}),
    ]
    return [make_event(kind, data, seq=seq).to_wire()
            for seq, (kind, data) in enumerate(payloads, start=1)]


class EventSinkContract:
    """The behaviour every event sink must have (see the module docstring)."""

    sink_class: ClassVar[type[EventSink]]

    def config(self, tmp_path: Path) -> dict[str, Any]:
        """A valid ``config`` section for the sink, under ``tmp_path``."""
        return {}

    def received(self, sink: EventSink, tmp_path: Path) -> list[Mapping[str, Any]] | None:
        """What the sink recorded, once closed, to compare with what it was sent; None when
        it keeps nothing a test can read (then only its not failing is checked)."""
        return None

    def build(self, tmp_path: Path) -> EventSink:
        return self.sink_class(self.sink_class.Config.model_validate(self.config(tmp_path)))

    def test_it_is_a_named_sink(self) -> None:
        assert isinstance(self.sink_class.name, str) and self.sink_class.name.strip()
        assert self.sink_class.queue_capacity > 0
        assert self.sink_class.flush_timeout_s > 0

    def test_its_settings_are_strict(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError) as caught:
            self.sink_class.Config.model_validate({**self.config(tmp_path),
                                                   "noSuchSetting": 1})
        assert any(error["loc"] == ("noSuchSetting",) for error in caught.value.errors())

    def test_it_takes_events_without_changing_them(self, tmp_path: Path) -> None:
        sink = self.build(tmp_path)
        sent = sample_events()
        before = copy.deepcopy(sent)
        for event in sent:
            sink.handle(event)
        sink.close()
        assert sent == before
        got = self.received(sink, tmp_path)
        if got is not None:
            assert [dict(event) for event in got] == before

    def test_fed_through_the_bus_it_gets_every_event_in_order(self, tmp_path: Path) -> None:
        sink = self.build(tmp_path)
        bus = EventBus(None)
        bus.add_sink(QueuedSink(sink, report=bus.emit))
        sent = [bus.emit("info", {"message": f"event {number}"}) for number in range(200)]
        bus.close()  # flushes the queue, then closes the sink
        got = self.received(sink, tmp_path)
        if got is not None:
            assert [event["seq"] for event in got] == [e.seq for e in sent if e is not None]

    def test_close_can_be_called_twice(self, tmp_path: Path) -> None:
        sink = self.build(tmp_path)
        sink.handle(sample_events()[0])
        sink.close()
        sink.close()


__all__ = ["EventSinkContract", "MemorySink", "sample_events"]
