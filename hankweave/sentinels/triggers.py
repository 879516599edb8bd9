"""When a sentinel fires: trigger matching, execution strategies and the per-sentinel queue.

Pure and synchronous (docs/sentinels.md, "Triggers and execution"): time is a number of
milliseconds the caller passes in, so the runtime drives the timers and tests use a fake clock.

* :class:`TriggerMatcher` turns the event stream into matched batches (event or sequence trigger);
  :class:`EventTriggerType` and :class:`SequenceTriggerType` are the same matching as the
  registered trigger classes (``hankweave.default_plugins.sentinels``);
* :class:`Batcher` groups matched batches by the execution strategy (immediate, debounce, count,
  timeWindow) and drains what is left when the codon completes;
* :class:`TriggerQueue` holds the triggers waiting to run, dropping the oldest past its limits.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hankweave.sentinel import SentinelTrigger, TriggerConfig
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

    @classmethod
    def of(cls, event: Mapping[str, object]) -> TriggerEvent:
        """An event as the journal stores it (``type``, ``data``, ``timestamp``)."""
        data, timestamp = event.get("data"), event.get("timestamp")
        return cls(str(event.get("type", "")), data if isinstance(data, Mapping) else {},
                   timestamp if isinstance(timestamp, str) else None)

    def as_event(self) -> dict[str, Any]:
        """The event as templates and sentinel kinds see it (``type``, ``timestamp``, ``data``)."""
        event: dict[str, Any] = {"type": self.type, "data": self.data}
        if self.timestamp is not None:
            event["timestamp"] = self.timestamp
        return event


Batch = list[TriggerEvent]
"""The events one trigger hands to the sentinel."""
Matched = list[tuple[int, TriggerEvent]]
"""Matched events with their arrival numbers."""


class TriggerMatcher:
    """Feeds events to one trigger and says when it matches.

    An event trigger matches each accepted event on its own.  A sequence trigger records the
    events its interest filter passes (the last :data:`HISTORY_LIMIT`) and checks its pattern
    when an event of the filter's last type arrives (any event, when the filter lists ``*``),
    over the events after the previous match.
    """

    def __init__(self, trigger: EventTrigger | SequenceTrigger) -> None:
        self.trigger = trigger
        self._event_trigger = trigger if isinstance(trigger, EventTrigger) else None
        self._sequence = trigger if isinstance(trigger, SequenceTrigger) else None
        # (arrival number, event): arrival numbers survive the history cap, indices would not.
        self._history: deque[tuple[int, TriggerEvent]] = deque(maxlen=HISTORY_LIMIT)
        self._arrivals = itertools.count()
        self._last_match = -1
        """Arrival number of the last event of the previous match."""
        # Non-consecutive matching is kept up to date as events are recorded instead of
        # scanning the window at each check.  The greedy in-order match over the window is a
        # chain: each element is the first event after the previous one that matches its step
        # (step j of the pattern for element j, modulo the pattern's length), so the complete
        # groups at its front are the matches a scan would find, one per check.
        self._chain: Matched = []
        interest = self._sequence.interest_filter.on if self._sequence else [WILDCARD]
        self._any = WILDCARD in interest
        self._interest = frozenset(interest)
        self._check_on = interest[-1]

    def feed(self, event_type: str, data: Mapping[str, Any],
             timestamp: str | None = None) -> Batch | None:
        """The batch this event completes, or ``None``."""
        if not observable(event_type):
            return None
        if self._event_trigger is not None:
            if not self._event_trigger.accepts(event_type, data):
                return None
            return [TriggerEvent(event_type, data, timestamp)]
        if not self._any and event_type not in self._interest:
            return None
        item = (next(self._arrivals), TriggerEvent(event_type, data, timestamp))
        self._history.append(item)
        sequence = self._sequence
        assert sequence is not None
        if not sequence.consecutive:
            self._forget_evicted(before=item[0])
            self._advance(item)
        if not self._any and event_type != self._check_on:
            return None
        match = self._tail_match() if sequence.consecutive else self._next_match()
        if match is None:
            return None
        self._last_match = match[-1][0]
        return [matched for _, matched in match]

    def _pattern(self) -> Sequence[PatternStep]:
        return self._sequence.pattern if self._sequence is not None else ()

    def _tail_match(self) -> Matched | None:
        """Consecutive mode: the newest events, if all come after the previous match and
        match the pattern step by step."""
        pattern = self._pattern()
        if len(self._history) < len(pattern):
            return None
        tail = list(itertools.islice(reversed(self._history), len(pattern)))[::-1]
        if tail[0][0] <= self._last_match:
            return None
        if all(step.accepts(event.type, event.data)
               for step, (_, event) in zip(pattern, tail, strict=True)):
            return tail
        return None

    def _advance(self, item: tuple[int, TriggerEvent]) -> None:
        pattern = self._pattern()
        event = item[1]
        if pattern[len(self._chain) % len(pattern)].accepts(event.type, event.data):
            self._chain.append(item)

    def _next_match(self) -> Matched | None:
        """Non-consecutive mode: the first greedy match after the previous one, if complete."""
        size = len(self._pattern())
        if len(self._chain) < size:
            return None
        match, self._chain = self._chain[:size], self._chain[size:]
        return match

    def _forget_evicted(self, *, before: int) -> None:
        """The history dropped its oldest event: a chain starting with it starts later now.

        Restarting from the next event that matches the first step moves every element to the
        same or a later event: an element stays where it is once the one before it is still
        earlier (nothing between them matched its step), so only the moved front is searched
        again, and each search goes forward only.  `before`: the event being recorded, which
        is matched after this.
        """
        oldest = self._history[0][0]
        while self._chain and self._chain[0][0] < oldest:
            self._chain = self._restarted(max(self._chain[0][0] + 1, oldest), before)

    def _restarted(self, start: int, before: int) -> Matched:
        pattern, old = self._pattern(), self._chain
        first = self._find(pattern[0], start, before)
        if first is None:
            return []
        chain = [first]
        for position in range(1, len(old)):
            if chain[-1][0] < old[position][0]:
                return chain + old[position:]
            found = self._find(pattern[position % len(pattern)], chain[-1][0] + 1, before)
            if found is None:
                return chain
            chain.append(found)
        return chain

    def _find(self, step: PatternStep, start: int,
              before: int) -> tuple[int, TriggerEvent] | None:
        """The first event recorded from arrival `start` on, and before `before`, that matches
        `step`."""
        skip = max(0, start - self._history[0][0])
        for item in itertools.islice(self._history, skip, None):
            if item[0] >= before:
                return None
            if step.accepts(item[1].type, item[1].data):
                return item
        return None


class _MatcherTrigger(SentinelTrigger):
    """A trigger type of the sentinel config format, as a registered trigger class.

    Its ``Config`` is the trigger object's model, a member of the config's ``Trigger`` union,
    so the kernel validates it with the rest of the sentinel config.  The runtime feeds a
    loaded sentinel's :class:`TriggerMatcher` directly, from the event's attributes (no event
    dict per event); this class is the same matching for whoever holds only the registered
    class.
    """

    Config: ClassVar[type[EventTrigger] | type[SequenceTrigger]]
    config: EventTrigger | SequenceTrigger

    def __init__(self, config: TriggerConfig | None = None) -> None:
        super().__init__(config)
        self._matcher = TriggerMatcher(self.config)

    def observe(self, event: Mapping[str, object]) -> list[Mapping[str, Any]] | None:
        seen = TriggerEvent.of(event)
        batch = self._matcher.feed(seen.type, seen.data, seen.timestamp)
        return [matched.as_event() for matched in batch] if batch else None


class EventTriggerType(_MatcherTrigger):
    """``{"type": "event", "on": [...], "conditions": [...]}``: each matching event fires."""

    name = "event"
    Config = EventTrigger


class SequenceTriggerType(_MatcherTrigger):
    """``{"type": "sequence", "interestFilter": ..., "pattern": [...]}``: the events that
    complete the pattern fire."""

    name = "sequence"
    Config = SequenceTrigger


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
