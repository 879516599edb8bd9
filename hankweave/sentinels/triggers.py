"""When a sentinel fires: trigger matching, execution strategies and the per-sentinel queue.

Pure and synchronous (docs/sentinels.md, "Triggers and execution"): time is a number of
milliseconds the caller passes in, so the runtime drives the timers and tests use a fake clock.

* :class:`TriggerMatcher` turns the event stream into matched batches (event or sequence trigger);
* :class:`Batcher` groups matched batches by the execution strategy (immediate, debounce, count,
  timeWindow) and drains what is left when the codon completes;
* :class:`TriggerQueue` holds the triggers waiting to run, dropping the oldest past its limits.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hankweave.sentinels.conditions import WILDCARD, observable
from hankweave.sentinels.config import (
    CountExecution,
    DebounceExecution,
    EventTrigger,
    ImmediateExecution,
    PatternStep,
    SequenceTrigger,
    TimeWindowExecution,
)

HISTORY_LIMIT = 1000
"""Events a sequence trigger remembers."""
QUEUE_LIMIT = 100
"""Triggers a sentinel's queue holds."""
QUEUED_EVENTS_LIMIT = 10_000
"""Events all queued triggers of a sentinel hold together."""


@dataclass(frozen=True)
class TriggerEvent:
    """One event as a sentinel sees it."""

    type: str
    data: Mapping[str, Any]
    timestamp: str | None = None

    def as_event(self) -> dict[str, Any]:
        """The event as templates and sentinel kinds see it (``type``, ``timestamp``, ``data``)."""
        event: dict[str, Any] = {"type": self.type, "data": self.data}
        if self.timestamp is not None:
            event["timestamp"] = self.timestamp
        return event


Batch = list[TriggerEvent]
"""The events one trigger hands to the sentinel."""


class TriggerMatcher:
    """Feeds events to one trigger and says when it matches.

    An event trigger matches each accepted event on its own.  A sequence trigger records the
    events its interest filter passes (the last :data:`HISTORY_LIMIT`) and checks its pattern
    when an event of the filter's last type arrives (any event, when the filter lists ``*``),
    over the events after the previous match.
    """

    def __init__(self, trigger: EventTrigger | SequenceTrigger) -> None:
        self.trigger = trigger
        # (arrival number, event): arrival numbers survive the history cap, indices would not.
        self._history: deque[tuple[int, TriggerEvent]] = deque(maxlen=HISTORY_LIMIT)
        self._arrivals = itertools.count()
        self._last_match = -1
        """Arrival number of the last event of the previous match."""

    def feed(self, event_type: str, data: Mapping[str, Any],
             timestamp: str | None = None) -> Batch | None:
        """The batch this event completes, or ``None``."""
        if not observable(event_type):
            return None
        if isinstance(self.trigger, EventTrigger):
            if not self.trigger.accepts(event_type, data):
                return None
            return [TriggerEvent(event_type, data, timestamp)]
        event = TriggerEvent(event_type, data, timestamp)
        interest = self.trigger.interest_filter.on
        if WILDCARD not in interest and event_type not in interest:
            return None
        self._history.append((next(self._arrivals), event))
        if WILDCARD not in interest and event_type != interest[-1]:
            return None
        window = [item for item in self._history if item[0] > self._last_match]
        match = (_tail_match if self.trigger.consecutive else _greedy_match)(
            self.trigger.pattern, window)
        if match is None:
            return None
        self._last_match = match[-1][0]
        return [matched for _, matched in match]


def _tail_match(
    pattern: Sequence[PatternStep], window: Sequence[tuple[int, TriggerEvent]]
) -> list[tuple[int, TriggerEvent]] | None:
    if len(window) < len(pattern):
        return None
    tail = list(window[len(window) - len(pattern):])
    if all(step.accepts(event.type, event.data) for step, (_, event) in zip(pattern, tail,
                                                                            strict=True)):
        return tail
    return None


def _greedy_match(
    pattern: Sequence[PatternStep], window: Sequence[tuple[int, TriggerEvent]]
) -> list[tuple[int, TriggerEvent]] | None:
    matched: list[tuple[int, TriggerEvent]] = []
    for item in window:
        step = pattern[len(matched)]
        if step.accepts(item[1].type, item[1].data):
            matched.append(item)
            if len(matched) == len(pattern):
                return matched
    return None


Execution = ImmediateExecution | DebounceExecution | CountExecution | TimeWindowExecution


class Batcher:
    """Groups matched batches into triggers by the execution strategy, on the caller's clock.

    ``now`` is in milliseconds.  The caller calls :meth:`due` at :meth:`next_deadline` and
    :meth:`flush` when the codon completes.
    """

    def __init__(self, execution: Execution, start: float) -> None:
        """`start`: when the sentinel loaded; timeWindow ticks are counted from it."""
        self.execution = execution
        self._buffer: Batch = []
        self._deadline: float | None = None
        if isinstance(execution, TimeWindowExecution):
            self._deadline = start + execution.milliseconds

    @property
    def strategy(self) -> str:
        return self.execution.strategy

    def add(self, events: Batch, now: float) -> list[Batch]:
        """Record one match; the triggers ready at once."""
        execution = self.execution
        if isinstance(execution, ImmediateExecution):
            return [list(events)]
        self._buffer.extend(events)
        if isinstance(execution, DebounceExecution):
            self._deadline = now + execution.milliseconds
        elif isinstance(execution, CountExecution) and len(self._buffer) >= execution.threshold:
            return [self._take()]
        return []

    def due(self, now: float) -> list[Batch]:
        """The triggers whose timer has passed by `now`."""
        if self._deadline is None or now < self._deadline:
            return []
        execution = self.execution
        if isinstance(execution, TimeWindowExecution):
            # Fixed rate: missed ticks are skipped, the schedule stays aligned to the start.
            while self._deadline <= now:
                self._deadline += execution.milliseconds
        else:
            self._deadline = None
        return [self._take()] if self._buffer else []

    def next_deadline(self) -> float | None:
        """When :meth:`due` next has something to do (``None``: no timer running)."""
        return self._deadline

    def flush(self) -> list[Batch]:
        """Completion drain: stop the timer and turn what is buffered into a final trigger."""
        self._deadline = None
        return [self._take()] if self._buffer else []

    def _take(self) -> Batch:
        batch, self._buffer = self._buffer, []
        return batch


@dataclass(frozen=True)
class QueuedTrigger:
    """A trigger waiting for its sentinel: ``{id, events, strategy, queuedAt}``."""

    id: str
    events: Batch
    strategy: str
    queued_at: float


class TriggerQueue:
    """One sentinel's pending triggers, processed one at a time, oldest first.

    Holds at most :data:`QUEUE_LIMIT` triggers and :data:`QUEUED_EVENTS_LIMIT` events; past
    either limit the oldest trigger is dropped (never the one just queued) and counted.
    """

    def __init__(self, sentinel_id: str) -> None:
        self.sentinel_id = sentinel_id
        self._triggers: deque[QueuedTrigger] = deque()
        self._numbers = itertools.count(1)
        self.queued_events = 0
        self.dropped = 0

    def push(self, events: Batch, strategy: str, now: float) -> QueuedTrigger:
        """Queue a trigger made of `events`, dropping the oldest ones past the limits."""
        if len(self._triggers) >= QUEUE_LIMIT:
            self._drop_oldest()
        trigger = QueuedTrigger(
            f"{self.sentinel_id}-{next(self._numbers)}", list(events), strategy, now)
        self._triggers.append(trigger)
        self.queued_events += len(trigger.events)
        while self.queued_events > QUEUED_EVENTS_LIMIT and len(self._triggers) > 1:
            self._drop_oldest()
        return trigger

    def pop(self) -> QueuedTrigger | None:
        """The oldest trigger, removed from the queue, or ``None`` when it is empty."""
        if not self._triggers:
            return None
        trigger = self._triggers.popleft()
        self.queued_events -= len(trigger.events)
        return trigger

    @property
    def nearly_full(self) -> bool:
        """At 70% of :data:`QUEUE_LIMIT` (the original logs a line)."""
        return len(self._triggers) >= QUEUE_LIMIT * 7 // 10

    def __len__(self) -> int:
        return len(self._triggers)

    def _drop_oldest(self) -> None:
        self.pop()
        self.dropped += 1
