"""What ``hankweave attach`` shows, folded from the server's messages: :class:`AttachView`.

Independent of the connection and of the screen (``hankweave.cli.attach_cmd`` has both), so
tests feed it events and read what it holds.  It reads typed events
(:func:`hankweave.events.reading.parse_event`) and the kernel's transition models.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hankweave.cli.tables import money

if TYPE_CHECKING:
    from hankweave.events import catalogue as c
    from hankweave.events.reading import Event
    from hankweave.state.transitions import StateTransition
    from hankweave.state.types import CodonExecution, ExecutionCodonEntry, HankweaveState

    _SentinelData = (c.SentinelLoadedData | c.SentinelTriggeredData | c.SentinelOutputData
                     | c.SentinelErrorData | c.SentinelUnloadedData)

__all__ = ["AttachView", "WatchedCodon", "money", "shorten"]

_TERMINAL = ("completed", "failed", "skipped")


@dataclass
class WatchedCodon:
    """A codon as attach watched it: its newest record's status and cost, and its stream."""

    codon_id: str
    name: str
    status: str = "preparing"
    started: datetime | None = None
    ended: datetime | None = None
    cost: float = 0.0
    lines: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=200))
    tool_calls: int = 0


def _parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


class AttachView:
    """What ``hankweave attach`` shows, folded from the server's messages.

    Feed it every message with :meth:`handle`; journaled events already seen (by ``seq``) are
    ignored, so a replay after a reconnection never counts anything twice.
    """

    def __init__(self, *, tail: int = 8) -> None:
        from hankweave.state.types import HankweaveState

        self.last_seq = 0
        """The seq of the last journaled event applied: where a reconnection resumes."""
        self.connection = "connecting"
        self.url: str | None = None
        self.execution_path: str | None = None
        self.run_id: str | None = None
        self.run_status: str | None = None
        self.state: HankweaveState = HankweaveState()
        """The state folded with the kernel's reducer from the transitions received so far."""
        self.fold_refused = False
        """Whether the last transition received was refused by the reducer (see the tail)."""
        self.plan: list[tuple[str, str]] = []
        self.status: dict[str, str] = {}
        self.costs: dict[str, float] = {}
        self.codons: dict[str, WatchedCodon] = {}
        self.current: WatchedCodon | None = None
        self.total_cost = 0.0
        self.run_cost = 0.0
        self.budget: dict[str, Any] = {}
        self.sentinels: Counter[str] = Counter()
        self.last_sentinel: str | None = None
        self.idle: str | None = None
        self.tail: deque[tuple[str, str]] = deque(maxlen=tail)
        self.caught_up = False
        """Whether the replay of the journal is over (a ``history.batch`` without more)."""
        self.ended_live = False
        """Whether the newest run ended while this view watched (after the replay): the
        moment ``attach`` exits with the summary."""

    @property
    def run_ended(self) -> bool:
        """The newest run has ended (completed, failed, crashed, waiting for a person)."""
        from hankweave.cli.run_summary import is_ongoing

        return bool(self.state.runs) and not is_ongoing(self.state.runs[0].status)

    # ----- input -----

    def handle(self, message: Mapping[str, Any]) -> None:
        """One message from the server, of any kind."""
        from hankweave.events.catalogue import HistoryBatchData, ServerReadyData

        parsed = _parse(message)
        if parsed is None:
            return
        data = parsed.data
        if parsed.type == "handshake.response":  # the protocol's, not the catalogue's
            mode = data.get("mode", "readonly") if isinstance(data, dict) else "readonly"
            self.connection = f"connected ({mode})"
        elif isinstance(data, ServerReadyData):
            self.execution_path = data.execution_path or self.execution_path
            budget = (data.model_extra or {}).get("budget")
            if isinstance(budget, dict):
                self.budget = dict(budget)
        elif isinstance(data, HistoryBatchData):
            for event in data.events or []:
                self.apply(event.to_wire())
            self.caught_up = self.caught_up or not data.has_more
        elif parsed.type not in ("command.response", "pong"):
            self._apply(parsed)

    def apply(self, raw: Mapping[str, Any]) -> None:
        """One event (journaled or sent to this client only)."""
        event = _parse(raw)
        if event is not None:
            self._apply(event)

    def _apply(self, event: Event) -> None:
        from hankweave.events.catalogue import SENTINEL_EVENTS

        seq = event.seq
        if seq is not None:
            if seq <= self.last_seq:
                return
            self.last_seq = seq
        name = "sentinel" if event.type in SENTINEL_EVENTS else event.type.replace(".", "_")
        handler = getattr(self, "_on_" + name, None)
        if handler is not None:
            handler(event.data, event)
        line = _summary(event)
        if line is not None:
            style = _tail_style(event)
            self.tail.append((f"{seq if seq is not None else '-':>5} {line}", style))

    def _on_state_transition(self, data: c.StateTransitionData, event: Event) -> None:
        from hankweave.events.reading import read_transition
        from hankweave.state.transitions import RunStarted

        resulting = data.resulting_state
        if resulting is not None:  # the runtime's totals over the whole state.json
            self.total_cost = resulting.total_cost or 0.0
            if resulting.current_run_id:  # an ended run keeps showing what it cost
                self.run_cost = resulting.current_run_cost or 0.0
        transition = read_transition(data.transition, at=event.timestamp)
        if transition is not None and self._fold(transition, event):
            if isinstance(transition, RunStarted):
                self.idle = None
            self._show_state()
            # A run that ended in the replayed history is not the end: a resume may follow.
            self.ended_live = self.caught_up and self.run_ended

    def _fold(self, transition: StateTransition, event: Event) -> bool:
        """Apply ``transition`` to the folded state; ``False`` when the reducer refuses it."""
        from hankweave.state.reducer import apply_transition
        from hankweave.state.transitions import StateError

        try:
            self.state = apply_transition(self.state, transition)
        except (StateError, ValueError) as refused:
            # A history that starts mid-run (or a runtime ahead of this client) holds
            # transitions this fold cannot place: keep showing the last good state, say so once
            # (the transitions after a refused one are usually refused too), and go on trying:
            # the next run starts from what the fold holds.
            if not self.fold_refused:
                self.tail.append((f"{event.seq if event.seq is not None else '-':>5} " + shorten(
                    f"state: {transition.type} not folded ({refused});"
                    " showing the last good state", 110), "red"))
            self.fold_refused = True
            return False
        self.fold_refused = False
        return True

    def _show_state(self) -> None:
        """Read what the screen shows of the state from the newly folded state."""
        from hankweave.state.costs import codon_cost
        from hankweave.state.thread import analyze_execution_thread
        from hankweave.state.types import is_terminal_status

        state = self.state
        newest = state.runs[0] if state.runs else None
        self.run_id = newest.run_id if newest else None
        self.run_status = newest.status if newest else None
        self.plan = _plan_rows(state.execution_plan)
        self.status, self.costs = {}, {}
        for threaded in analyze_execution_thread(state).codons:  # newest first
            record = threaded.codon
            if record.codon_id in self.status:
                continue
            self.status[record.codon_id] = record.status
            if is_terminal_status(record.status) or codon_cost(record):
                self.costs[record.codon_id] = codon_cost(record)
        if newest is not None and newest.codons:
            self._follow(newest.codons[-1])

    def _follow(self, record: CodonExecution) -> None:
        """The newest record is the current codon; a new record starts a new stream."""
        from hankweave.state.costs import codon_cost

        started = _parse_time(record.start_time)
        codon = self.codons.get(record.codon_id)
        if codon is None or codon.started != started:
            codon = WatchedCodon(record.codon_id, self._name(record.codon_id), started=started)
            self.codons[record.codon_id] = codon
            self.idle = None
        self.current = codon
        codon.status, codon.cost = record.status, codon_cost(record)
        end = getattr(record, "end_time", None)
        codon.ended = _parse_time(end) if end else None

    def _on_codon_started(self, data: c.CodonStartedData, event: Event) -> None:
        codon = self.codons.get(str(data.codon_id))
        if codon is not None and data.codon_name:
            codon.name = str(data.codon_name)

    def _on_assistant_action(self, data: c.AssistantActionData, event: Event) -> None:
        codon = self.codons.get(str(data.codon_id))
        if codon is None:
            return
        if data.action == "tool_use":
            codon.tool_calls += 1
            codon.lines.append((f"⚙ {data.tool_name}({_tool_args(data.tool_input)})",
                                "magenta"))
            return
        style = "dim italic" if data.action == "thinking" else ""
        for line in str(data.content or "").splitlines() or [""]:
            if line.strip():
                codon.lines.append((line, style))

    def _on_tool_result(self, data: c.ToolResultData, event: Event) -> None:
        codon = self.codons.get(str(data.codon_id))
        if codon is not None:
            outcome = "error" if data.is_error else "ok"
            size = data.original_length or len(str(data.result or ""))
            codon.lines.append((f"  ↳ {data.tool_name} {outcome} ({size} chars)",
                                "red" if data.is_error else "dim"))

    def _on_server_idle(self, data: c.ServerIdleData, event: Event) -> None:
        self.idle = str(data.message or data.reason or "idle")

    def _on_budget_summary(self, data: c.BudgetSummaryData, event: Event) -> None:
        ceiling = data.ceiling.model_dump(by_alias=True, exclude_unset=True) if data.ceiling else {}
        self.budget = {key: value for key, value in ceiling.items() if value is not None}

    def _on_incomplete_codon(self, data: c.IncompleteCodonData, event: Event) -> None:
        codon_id = str(data.codon_id)
        if codon_id not in self.codons:
            self.codons[codon_id] = self.current = WatchedCodon(codon_id, str(data.codon_name))

    def _on_sentinel(self, data: _SentinelData, event: Event) -> None:
        what = event.type.removeprefix("sentinel.")  # loaded, triggered, output, ...
        self.sentinels[what] += 1
        self.last_sentinel = f"{data.sentinel_id} {what}"

    def _name(self, codon_id: str) -> str:
        return next((name for known, name in self.plan if known == codon_id), "")


_RUN_ENDS = ("RunCompleted", "RunFailed", "RunCrashed")

# What the body of the view shows, so the tail of recent events leaves it out.
_SHOWN_IN_BODY = ("state.transition", "assistant.action", "token.usage", "tool.result",
                  "file.updated", "filetree.updated", "rig.output", "state.snapshot")


def _parse(raw: Mapping[str, Any]) -> Event | None:
    """The typed event of a server message; ``None`` for one that is not an event."""
    from hankweave.events.reading import EventReadError, parse_event

    try:
        return parse_event(raw)
    except EventReadError:
        return None


def _plan_rows(entries: list[ExecutionCodonEntry] | None) -> list[tuple[str, str]]:
    return [(entry.codon_id or "?", (entry.codon.name if entry.codon else None) or "")
            for entry in entries or []]


def _tail_style(event: Event) -> str:
    """Red for an error, yellow for a warning (an ``error`` of severity ``warning``) and for
    the runtime waiting."""
    if event.type == "error":
        warning = getattr(event.data, "severity", None) == "warning"
        return "yellow" if warning else "red"
    return "yellow" if event.type == "server.idle" else ""


def _summary(event: Event) -> str | None:
    """The event's line in the tail of recent events (``None``: not listed there)."""
    from hankweave.events import catalogue as c

    kind, data = event.type, event.data
    if kind in _SHOWN_IN_BODY:
        return (_transition_summary(data, event.timestamp)
                if isinstance(data, c.StateTransitionData) else None)
    if isinstance(data, c.ErrorData) and data.severity == "warning":
        return shorten(f"warning: {data.message}", 110)
    if isinstance(data, c.InfoData | c.ErrorData | c.ServerIdleData):
        return shorten(f"{kind}: {data.message}", 110)
    if isinstance(data, c.CodonStartedData):
        return f"codon.started {data.codon_id} ({data.codon_name})"
    if isinstance(data, c.CodonCompletedData):
        return (f"codon.completed {data.codon_id}"
                f" {'ok' if data.success else 'not ok'} {money(data.cost)}")
    if kind.startswith("rollback.") and kind != "rollback.progress":
        target = (data.to_codon if isinstance(data, c.RollbackStartedData)
                  else getattr(data, "codon_id", None)) or ""
        return f"{kind} {target}".rstrip()
    return kind


def _transition_summary(data: c.StateTransitionData, timestamp: str | None) -> str | None:
    from hankweave.events.reading import read_transition
    from hankweave.state.transitions import CodonTransitioned

    if data.transition_type in _RUN_ENDS or data.transition_type == "RunStarted":
        return f"{data.transition_type} {data.run_id or ''}".rstrip()
    if data.transition_type == "CodonTransitioned":
        moved = read_transition(data.transition, at=timestamp)
        if isinstance(moved, CodonTransitioned) and moved.data.to in _TERMINAL:
            return f"{moved.data.codon_id} {moved.data.to}"
    return None


def _tool_args(value: Any) -> str:
    if isinstance(value, dict):
        return shorten(", ".join(f"{key}={str(item)!s}" for key, item in value.items()
                                  if key != "content"), 60)
    return shorten(str(value or ""), 60)
