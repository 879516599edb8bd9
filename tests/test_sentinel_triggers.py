"""Trigger matching, execution strategies and the trigger queue (docs/sentinels.md)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hankweave.sentinels.config import (
    CountExecution,
    DebounceExecution,
    EventTrigger,
    ImmediateExecution,
    SequenceTrigger,
    TimeWindowExecution,
)
from hankweave.sentinels.triggers import (
    HISTORY_LIMIT,
    QUEUE_LIMIT,
    QUEUED_EVENTS_LIMIT,
    Batcher,
    EventTriggerType,
    SequenceTriggerType,
    TriggerEvent,
    TriggerMatcher,
    TriggerQueue,
)


def event_trigger(on: list[str], *conditions: dict[str, Any]) -> TriggerMatcher:
    raw: dict[str, Any] = {"type": "event", "on": on}
    if conditions:
        raw["conditions"] = list(conditions)
    return TriggerMatcher(EventTrigger.model_validate(raw, by_alias=True, by_name=False))


def sequence(interest: list[str], pattern: list[dict[str, Any]], *,
             consecutive: bool = True) -> TriggerMatcher:
    raw = {"type": "sequence", "interestFilter": {"on": interest}, "pattern": pattern,
           "options": {"consecutive": consecutive}}
    return TriggerMatcher(SequenceTrigger.model_validate(raw, by_alias=True, by_name=False))


def failed(tool: str = "Bash") -> dict[str, Any]:
    return {"toolName": tool, "isError": True}


def ok(tool: str = "Bash") -> dict[str, Any]:
    return {"toolName": tool, "isError": False}


FAILED = {"type": "tool.result", "conditions": [
    {"path": "isError", "operator": "equals", "value": True}]}
ANY_RESULT = {"type": "tool.result"}


def batch(*names: str) -> list[TriggerEvent]:
    return [TriggerEvent(name, {"n": index}) for index, name in enumerate(names)]


# ------------------------------------------------------------------------------------------
# Event triggers
# ------------------------------------------------------------------------------------------


def test_an_event_trigger_makes_a_batch_of_each_matching_event() -> None:
    matcher = event_trigger(["tool.result"], {"path": "isError", "operator": "equals",
                                              "value": True})
    assert matcher.feed("tool.result", failed()) == [TriggerEvent("tool.result", failed())]
    assert matcher.feed("tool.result", ok()) is None
    assert matcher.feed("rig.output", failed()) is None


def test_a_wildcard_event_trigger_sees_only_observable_events() -> None:
    matcher = event_trigger(["*"])
    assert matcher.feed("rig.output", {}) == [TriggerEvent("rig.output", {})]
    assert matcher.feed("sentinel.output", {}) is None


def test_the_registered_event_trigger_class_matches_journal_events() -> None:
    trigger = EventTriggerType(EventTriggerType.Config.model_validate({
        "type": "event", "on": ["tool.result"], "conditions": [
            {"path": "isError", "operator": "equals", "value": True}]}))
    failure = {"type": "tool.result", "timestamp": "2026-01-01T00:00:00Z", "data": failed()}
    assert trigger.observe(failure) == [failure]
    assert trigger.observe({"type": "tool.result", "data": ok()}) is None


def test_the_registered_sequence_trigger_class_returns_the_events_of_the_pattern() -> None:
    trigger = SequenceTriggerType(SequenceTriggerType.Config.model_validate({
        "type": "sequence", "interestFilter": {"on": ["tool.result"]},
        "pattern": [FAILED, FAILED]}))
    first, second = ({"type": "tool.result", "data": failed()} for _ in range(2))
    assert trigger.observe(first) is None
    assert trigger.observe(second) == [first, second]


def test_a_registered_trigger_class_refuses_an_invalid_trigger_object() -> None:
    with pytest.raises(ValueError, match="on"):
        EventTriggerType.Config.model_validate({"type": "event", "on": []})


# ------------------------------------------------------------------------------------------
# Sequence triggers
# ------------------------------------------------------------------------------------------


def test_a_consecutive_sequence_matches_the_tail_of_the_window() -> None:
    matcher = sequence(["tool.result"], [FAILED, FAILED])
    assert matcher.feed("tool.result", failed("a")) is None
    assert matcher.feed("tool.result", ok()) is None
    assert matcher.feed("tool.result", failed("b")) is None
    assert matcher.feed("tool.result", failed("c")) == [
        TriggerEvent("tool.result", failed("b")), TriggerEvent("tool.result", failed("c"))]


def test_a_non_consecutive_sequence_matches_in_order_with_gaps() -> None:
    matcher = sequence(["tool.result"], [FAILED, FAILED], consecutive=False)
    assert matcher.feed("tool.result", failed("a")) is None
    assert matcher.feed("tool.result", ok()) is None
    assert matcher.feed("tool.result", failed("b")) == [
        TriggerEvent("tool.result", failed("a")), TriggerEvent("tool.result", failed("b"))]


def test_a_match_consumes_its_events() -> None:
    matcher = sequence(["tool.result"], [FAILED, FAILED])
    matcher.feed("tool.result", failed("a"))
    assert matcher.feed("tool.result", failed("b")) is not None
    assert matcher.feed("tool.result", failed("c")) is None
    assert matcher.feed("tool.result", failed("d")) == [
        TriggerEvent("tool.result", failed("c")), TriggerEvent("tool.result", failed("d"))]


def test_the_pattern_is_checked_only_on_the_last_filter_type() -> None:
    matcher = sequence(["tool.result", "codon.completed"], [FAILED], consecutive=False)
    assert matcher.feed("tool.result", failed()) is None
    assert matcher.feed("rig.output", {}) is None
    assert matcher.feed("codon.completed", {}) == [TriggerEvent("tool.result", failed())]


def test_a_wildcard_filter_checks_on_every_event() -> None:
    matcher = sequence(["*"], [ANY_RESULT, {"type": "rig.output"}])
    assert matcher.feed("tool.result", ok()) is None
    assert matcher.feed("rig.output", {}) == [
        TriggerEvent("tool.result", ok()), TriggerEvent("rig.output", {})]


def test_events_outside_the_interest_filter_are_not_recorded() -> None:
    matcher = sequence(["tool.result"], [ANY_RESULT, ANY_RESULT])
    matcher.feed("tool.result", ok("a"))
    matcher.feed("rig.output", {})
    assert matcher.feed("tool.result", ok("b")) == [
        TriggerEvent("tool.result", ok("a")), TriggerEvent("tool.result", ok("b"))]


def first_result_on_completion() -> TriggerMatcher:
    return sequence(["tool.result", "codon.completed"], [{"type": "tool.result", "conditions": [
        {"path": "toolName", "operator": "equals", "value": "first"}]}], consecutive=False)


def test_the_history_keeps_the_last_thousand_events() -> None:
    kept = first_result_on_completion()
    kept.feed("tool.result", ok("first"))
    for _ in range(HISTORY_LIMIT - 2):
        kept.feed("tool.result", ok("filler"))
    assert kept.feed("codon.completed", {}) == [TriggerEvent("tool.result", ok("first"))]

    forgotten = first_result_on_completion()
    forgotten.feed("tool.result", ok("first"))
    for _ in range(HISTORY_LIMIT - 1):
        forgotten.feed("tool.result", ok("filler"))
    assert forgotten.feed("codon.completed", {}) is None


# ------------------------------------------------------------------------------------------
# Execution strategies
# ------------------------------------------------------------------------------------------


def test_immediate_makes_each_match_a_trigger() -> None:
    batcher = Batcher(ImmediateExecution(strategy="immediate"), start=0)
    assert batcher.add(batch("a", "b"), now=5) == [batch("a", "b")]
    assert batcher.next_deadline() is None and batcher.flush() == []


def test_debounce_restarts_its_timer_on_each_match() -> None:
    batcher = Batcher(DebounceExecution(strategy="debounce", milliseconds=100), start=0)
    first, second = TriggerEvent("a", {}), TriggerEvent("b", {})
    assert batcher.add([first], now=0) == []
    assert batcher.add([second], now=80) == []
    assert batcher.next_deadline() == 180
    assert batcher.due(150) == []
    assert batcher.due(180) == [[first, second]]
    assert batcher.next_deadline() is None and batcher.due(500) == []


def test_flush_drains_a_pending_debounce() -> None:
    batcher = Batcher(DebounceExecution(strategy="debounce", milliseconds=100), start=0)
    batcher.add(batch("a"), now=0)
    assert batcher.flush() == [batch("a")]
    assert batcher.next_deadline() is None and batcher.flush() == []


def test_count_emits_each_time_the_threshold_is_reached() -> None:
    batcher = Batcher(CountExecution(strategy="count", threshold=2), start=0)
    a, b, c = (TriggerEvent(name, {}) for name in "abc")
    assert batcher.add([a], now=0) == []
    assert batcher.add([b], now=1) == [[a, b]]
    assert batcher.add([c], now=2) == []
    assert batcher.flush() == [[c]]


def test_time_window_ticks_at_a_fixed_rate_from_the_start() -> None:
    batcher = Batcher(TimeWindowExecution(strategy="timeWindow", milliseconds=100), start=1000)
    assert batcher.next_deadline() == 1100
    assert batcher.due(1100) == []
    assert batcher.next_deadline() == 1200
    batcher.add(batch("a"), now=1150)
    assert batcher.due(1230) == [batch("a")]
    assert batcher.next_deadline() == 1300
    batcher.add(batch("b"), now=1250)
    assert batcher.due(1520) == [batch("b")]
    assert batcher.next_deadline() == 1600


def test_flush_stops_the_time_window_and_drains_its_buffer() -> None:
    batcher = Batcher(TimeWindowExecution(strategy="timeWindow", milliseconds=100), start=0)
    batcher.add(batch("a"), now=10)
    assert batcher.flush() == [batch("a")]
    assert batcher.next_deadline() is None


# ------------------------------------------------------------------------------------------
# The queue
# ------------------------------------------------------------------------------------------


def test_the_queue_is_first_in_first_out() -> None:
    queue = TriggerQueue("watch")
    first = queue.push(batch("a"), "immediate", now=1)
    second = queue.push(batch("b", "c"), "count", now=2)
    assert first.id != second.id and queue.queued_events == 3
    assert queue.pop() == first
    assert queue.pop() == second and queue.pop() is None and queue.queued_events == 0


def test_a_full_queue_drops_its_oldest_trigger() -> None:
    queue = TriggerQueue("watch")
    pushed = [queue.push(batch("a"), "immediate", now=n) for n in range(QUEUE_LIMIT + 1)]
    assert len(queue) == QUEUE_LIMIT and queue.dropped == 1
    assert queue.pop() == pushed[1]


def test_too_many_queued_events_drop_the_oldest_triggers() -> None:
    queue = TriggerQueue("watch")
    half = QUEUED_EVENTS_LIMIT // 2
    queue.push([TriggerEvent("a", {})] * half, "debounce", now=0)
    second = queue.push([TriggerEvent("b", {})] * half, "debounce", now=1)
    assert queue.dropped == 0 and queue.queued_events == QUEUED_EVENTS_LIMIT
    third = queue.push(batch("c"), "debounce", now=2)
    assert queue.dropped == 1 and queue.queued_events == half + 1
    assert queue.pop() == second and queue.pop() == third


def test_the_queue_is_nearly_full_at_seventy_percent() -> None:
    queue = TriggerQueue("watch")
    for n in range(QUEUE_LIMIT * 7 // 10 - 1):
        queue.push(batch("a"), "immediate", now=n)
    assert not queue.nearly_full
    queue.push(batch("a"), "immediate", now=99)
    assert queue.nearly_full


def test_the_trigger_just_queued_is_kept_even_past_the_event_limit() -> None:
    queue = TriggerQueue("watch")
    queue.push(batch("a"), "debounce", now=0)
    huge = queue.push([TriggerEvent("b", {})] * (QUEUED_EVENTS_LIMIT + 1), "debounce", now=1)
    assert queue.dropped == 1 and queue.pop() == huge


# ----- the incremental sequence matcher against the original's scan -----


def _reference_matches(trigger: SequenceTrigger, stream: list[tuple[str, dict[str, Any]]],
                       limit: int) -> list[list[int]]:
    """The original's algorithm, literally: record, and at each check scan the window after
    the previous match (tail match or greedy match); positions of the matched events."""
    interest = trigger.interest_filter.on
    history: list[tuple[int, str, dict[str, Any]]] = []
    last, found = -1, []
    for position, (kind, data) in enumerate(stream):
        if "*" not in interest and kind not in interest:
            continue
        history = [*history, (position, kind, data)][-limit:]
        if "*" not in interest and kind != interest[-1]:
            continue
        window = [item for item in history if item[0] > last]
        pattern = trigger.pattern
        match: list[tuple[int, str, dict[str, Any]]] | None = None
        if trigger.consecutive:
            tail = window[len(window) - len(pattern):] if len(window) >= len(pattern) else None
            if tail and all(step.accepts(k, d) for step, (_, k, d) in zip(pattern, tail,
                                                                          strict=True)):
                match = tail
        else:
            progress: list[tuple[int, str, dict[str, Any]]] = []
            for item in window:
                if pattern[len(progress)].accepts(item[1], item[2]):
                    progress.append(item)
                    if len(progress) == len(pattern):
                        match = progress
                        break
        if match:
            last = match[-1][0]
            found.append([item[0] for item in match])
    return found


KINDS = ["tool.result", "assistant.action", "codon.completed", "token.usage"]


@settings(max_examples=300, deadline=None)
@given(stream=st.lists(st.tuples(st.sampled_from(KINDS), st.booleans()), max_size=120),
       interest=st.sampled_from([["tool.result", "codon.completed"], ["*"],
                                 ["assistant.action", "tool.result"]]),
       steps=st.lists(st.tuples(st.sampled_from([*KINDS, "*"]), st.booleans()), min_size=1,
                      max_size=4),
       consecutive=st.booleans(), limit=st.sampled_from([3, 7, 1000]))
# The first step's event falls out of a history of 3 before the last step arrives.
@example(stream=[("tool.result", False), ("token.usage", False), ("token.usage", False),
                 ("codon.completed", False)], interest=["*"],
         steps=[("tool.result", False), ("codon.completed", False)], consecutive=False, limit=3)
def test_the_incremental_matcher_finds_what_the_originals_scan_finds(
        stream, interest, steps, consecutive, limit) -> None:
    import hankweave.sentinels.triggers as triggers

    pattern = [FAILED if kind == "tool.result" and flagged else {"type": kind}
               for kind, flagged in steps]
    raw = {"type": "sequence", "interestFilter": {"on": interest}, "pattern": pattern,
           "options": {"consecutive": consecutive}}
    trigger = SequenceTrigger.model_validate(raw, by_alias=True, by_name=False)
    events = [(kind, {"isError": flag}) for kind, flag in stream]
    saved = triggers.HISTORY_LIMIT
    triggers.HISTORY_LIMIT = limit
    try:
        matcher = TriggerMatcher(trigger)
    finally:
        triggers.HISTORY_LIMIT = saved
    got = []
    for position, (kind, data) in enumerate(events):
        batch = matcher.feed(kind, {**data, "position": position})
        if batch:
            got.append([event.data["position"] for event in batch])
    assert got == _reference_matches(trigger, events, limit)
