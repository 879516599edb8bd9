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

if TYPE_CHECKING:
    from hankweave.events import catalogue as c
    from hankweave.events.reading import Event
    from hankweave.state.transitions import RunStartedData
    from hankweave.state.types import ExecutionCodonEntry

    _SentinelData = (c.SentinelLoadedData | c.SentinelTriggeredData | c.SentinelOutputData
                     | c.SentinelErrorData | c.SentinelUnloadedData)

__all__ = ["AttachView", "money", "shorten"]

_TERMINAL = ("completed", "failed", "skipped")


@dataclass
class _Codon:
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


def money(value: float | None) -> str:
    return f"${value or 0:.4f}"


def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


class AttachView:
    """What ``hankweave attach`` shows, folded from the server's messages.

    Feed it every message with :meth:`handle`; journaled events already seen (by ``seq``) are
    ignored, so a replay after a reconnection never counts anything twice.
    """

    def __init__(self, *, tail: int = 8) -> None:
        self.last_seq = 0
        """The seq of the last journaled event applied: where a reconnection resumes."""
        self.connection = "connecting"
        self.url: str | None = None
        self.execution_path: str | None = None
        self.run_id: str | None = None
        self.run_status: str | None = None
        self.plan: list[tuple[str, str]] = []
        self.status: dict[str, str] = {}
        self.costs: dict[str, float] = {}
        self.codons: dict[str, _Codon] = {}
        self.current: _Codon | None = None
        self.total_cost = 0.0
        self.run_cost = 0.0
        self.budget: dict[str, Any] = {}
        self.sentinels: Counter[str] = Counter()
        self.last_sentinel: str | None = None
        self.idle: str | None = None
        self.tail: deque[tuple[str, str]] = deque(maxlen=tail)

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
            style = "red" if event.type == "error" else "yellow" if event.type == "server.idle" else ""
            self.tail.append((f"{seq if seq is not None else '-':>5} {line}", style))

    def _on_state_transition(self, data: c.StateTransitionData, event: Event) -> None:
        from hankweave.events.reading import read_transition
        from hankweave.state import transitions as t

        resulting = data.resulting_state
        if resulting is not None:
            self.total_cost = resulting.total_cost or 0.0
            if resulting.current_run_id:  # an ended run keeps showing what it cost
                self.run_cost = resulting.current_run_cost or 0.0
        match read_transition(data.transition, at=event.timestamp):
            case t.RunStarted(data=body):
                self._run_started(body)
            case t.RunCompleted(data=body) | t.RunFailed(data=body) | t.RunCrashed(data=body):
                if body.run_id == self.run_id:
                    self.run_status = _RUN_ENDS[data.transition_type]
            case t.ExecutionPlanUpdated(data=splice):
                position, remove = splice.position or 0, splice.remove or 0
                self.plan[position:position + remove] = _plan_rows(splice.entries)
            case t.CodonStarted(data=started) if started.codon_id:
                self._codon_started(started.codon_id, event.timestamp)
            case t.CodonTransitioned(data=moved) if moved.codon_id:
                self._codon_transitioned(moved.codon_id, str(moved.to), event.timestamp)
            case t.CostsIncremented(data=costs) if costs.codon_id in self.codons:
                codon = self.codons[costs.codon_id]
                codon.cost += float(costs.cost_delta or 0.0)
                self.costs[codon.codon_id] = codon.cost
            case t.CodonFinalCostSet(data=final) if final.codon_id in self.codons:
                codon = self.codons[final.codon_id]
                codon.cost = float(final.final_cost or 0.0)
                self.costs[codon.codon_id] = codon.cost

    def _run_started(self, body: RunStartedData) -> None:
        from hankweave.state.types import ContinuationStart

        self.run_id, self.run_status, self.idle = body.run_id, "running", None
        if body.execution_plan:
            self.plan = _plan_rows(body.execution_plan)
        start = body.starting_conditions
        if isinstance(start, ContinuationStart):
            self._reset_after(start.source.after_codon if start.source else None)

    def _codon_started(self, codon_id: str, timestamp: str | None) -> None:
        codon = _Codon(codon_id, self._name(codon_id), started=_parse_time(timestamp))
        self.codons[codon_id] = self.current = codon
        self.status[codon_id] = "preparing"
        self.idle = None

    def _codon_transitioned(self, codon_id: str, to: str, timestamp: str | None) -> None:
        self.status[codon_id] = to
        known = self.codons.get(codon_id)
        if known is not None:
            known.status = to
            if to in _TERMINAL:
                known.ended = _parse_time(timestamp)

    def _reset_after(self, after_codon: str | None) -> None:
        """A rollback continuation: codons after its point are to run again."""
        ids = [codon_id for codon_id, _ in self.plan]
        start = ids.index(after_codon) + 1 if after_codon in ids else 0
        for codon_id in ids[start:]:
            self.status.pop(codon_id, None)
            self.costs.pop(codon_id, None)

    def _on_codon_started(self, data: c.CodonStartedData, event: Event) -> None:
        codon = self.codons.get(str(data.codon_id))
        if codon is not None and data.codon_name:
            codon.name = str(data.codon_name)

    def _on_codon_completed(self, data: c.CodonCompletedData, event: Event) -> None:
        self.costs[str(data.codon_id)] = float(data.cost or 0.0)

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
            self.codons[codon_id] = self.current = _Codon(codon_id, str(data.codon_name))

    def _on_sentinel(self, data: _SentinelData, event: Event) -> None:
        what = event.type.removeprefix("sentinel.")  # loaded, triggered, output, ...
        self.sentinels[what] += 1
        self.last_sentinel = f"{data.sentinel_id} {what}"

    def _name(self, codon_id: str) -> str:
        return next((name for known, name in self.plan if known == codon_id), "")


_RUN_ENDS = {"RunCompleted": "completed", "RunFailed": "failed", "RunCrashed": "crashed"}

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


def _summary(event: Event) -> str | None:
    """The event's line in the tail of recent events (``None``: not listed there)."""
    from hankweave.events import catalogue as c

    kind, data = event.type, event.data
    if kind in _SHOWN_IN_BODY:
        return (_transition_summary(data, event.timestamp)
                if isinstance(data, c.StateTransitionData) else None)
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
