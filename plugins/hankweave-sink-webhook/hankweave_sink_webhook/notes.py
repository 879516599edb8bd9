"""Which events become messages, and what each one says: the event stream read into
:class:`Note`\\ s, before any wire format.

* The events named in ``events`` are sent as they are (their ``data`` as journaled), each with
  a one-line ``summary`` a person can read in a chat notification.
* ``run.ended`` is not an event of the kernel: it is made here from the ``state.transition``
  that ends a run (``RunCompleted``, ``RunFailed``, ``RunInterrupted``) or from ``run.crashed``
  (the next start's report of a run whose runtime died; its ``RunCrashed`` transition is made
  before the journal opens, so no sink sees it), with the run's ``status`` (``completed``,
  ``failed``, ``cancelled``, ``timeout``, ``interrupted``, ``crashed``), its cost when this
  process saw it run, and the interruptions it left waiting.  One per run.
* The execution directory is what :meth:`Composer.bind` was given, else what the run's
  ``RunStarted`` transition says (its ``runFolder`` is ``<execution>/.hankweave/runs/<id>``).

Events are read with the kernel's typed readers (:func:`hankweave.api.parse_event`); a payload
that does not fit its model is read field by field, and what is missing reads ``None`` here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

from hankweave.api import (
    EventReadError,
    RunCompleted,
    RunCrashed,
    RunCrashedData,
    RunFailed,
    RunInterrupted,
    RunStarted,
    StateTransitionData,
    parse_event,
    read_transition,
)

RUN_ENDED = "run.ended"
_LONGEST_TEXT = 300
"""A question or an answer longer than this is cut in a summary (``data`` has it whole)."""


class BudgetAskFields(Protocol):
    """What a summary reads of a budget ask (the catalogue's ``BudgetAskData``)."""

    scope: str | None
    loop_id: str | None
    currency: str | None
    limit: float | None
    used: float | None
    source: str | None

    def model_dump(self, *, by_alias: bool = ..., exclude_none: bool = ...) -> dict[str, Any]:
        ...


class InterruptionCreatedFields(Protocol):
    """What is read of ``interruption.created`` (the catalogue's
    ``InterruptionCreatedData``, not in the public API: read through this view)."""

    interruption_id: str | None
    run_id: str | None
    codon_id: str | None
    kind: str | None
    question: str | None
    options: list[str] | None
    budget: BudgetAskFields | None


class InterruptionAnsweredFields(Protocol):
    interruption_id: str | None
    codon_id: str | None
    answer: Any
    answered_by: str | None


class BudgetWarningFields(Protocol):
    codon_id: str | None
    scope: str | None
    loop_id: str | None
    currency: str | None
    limit: float | None
    fraction: float | None
    message: str | None


@dataclass(frozen=True)
class Note:
    """One message to send, whatever its format."""

    event: str
    """The event's name: its type, or ``run.ended``."""
    id: str
    """The delivery id, the same on every retry and for every URL: the event's id, and for
    ``run.ended`` the id of the event it was made from with ``:run.ended`` added."""
    run_id: str | None
    timestamp: str | None
    execution: str | None
    summary: str
    data: Mapping[str, Any]
    links: list[dict[str, Any]] = field(default_factory=list)


LinkMaker = Callable[[InterruptionCreatedFields, str, Path], list[dict[str, Any]]]
"""Builds an interruption's action links: (its data, its creation time, the execution)."""


class Composer:
    """Reads the events a sink is handed, in order, into the notes to send."""

    def __init__(self, events: Collection[str], *, links: LinkMaker | None = None) -> None:
        self.wanted = frozenset(events)
        self.execution: Path | None = None
        self._bound = False
        self._links = links
        self._run_id: str | None = None
        self._run_cost: float | None = None
        self._waiting: dict[str, str] = {}  # interruption id -> its run's id
        self._ended: set[str] = set()  # runs whose run.ended was made

    def bind(self, execution: Path) -> None:
        self.execution, self._bound = execution.resolve(), True

    def compose(self, event: Mapping[str, Any]) -> list[Note]:
        """The notes ``event`` makes: none, itself, ``run.ended``, or both (``run.crashed``)."""
        kind = event.get("type")
        needs_runs = RUN_ENDED in self.wanted
        if kind == "state.transition":
            if not needs_runs and (self._bound or self.execution is not None):
                return []
        elif kind not in self.wanted and not (needs_runs and kind in (
                "interruption.created", "interruption.answered", "run.crashed")):
            return []
        try:
            parsed = parse_event(event)
        except EventReadError:
            return []
        if isinstance(parsed.data, StateTransitionData):
            ended = self._transition(parsed.data, parsed.id, parsed.timestamp)
            return [ended] if ended is not None else []
        own = self._own(parsed.type, parsed.data, parsed.id, parsed.timestamp, event)
        if isinstance(parsed.data, RunCrashedData):
            crashed = parsed.data
            ended = self._run_ended(crashed.run_id, "crashed", parsed.id, parsed.timestamp,
                                    codonId=crashed.codon_id, message=crashed.message)
            return [note for note in (own, ended) if note is not None]
        return [own] if own is not None else []

    def _own(self, kind: str, data: Any, event_id: str | None, timestamp: str | None,
             event: Mapping[str, Any]) -> Note | None:
        """The note of the event itself, if it is wanted (the interruptions are followed
        whether or not: ``run.ended`` names those a run left waiting)."""
        note = Note(event=kind, id=event_id or "", run_id=_run_of(event), timestamp=timestamp,
                    execution=self._where(), summary=kind, data=dict(event.get("data") or {}))
        if kind == "interruption.created":
            created = cast(InterruptionCreatedFields, data)
            if created.interruption_id and created.run_id:
                self._waiting[created.interruption_id] = created.run_id
            return self._created(note, created)
        if kind == "interruption.answered":
            answered = cast(InterruptionAnsweredFields, data)
            self._waiting.pop(answered.interruption_id or "", None)
            return self._keep(note, answered_summary(answered))
        if kind == "budget.warning":
            return self._keep(note, warning_summary(cast(BudgetWarningFields, data)))
        codon = getattr(data, "codon_id", None)
        return self._keep(note, f"{kind} (codon {codon})" if codon else kind)

    # ----- runs -----

    def _transition(self, data: StateTransitionData, event_id: str | None,
                    timestamp: str | None) -> Note | None:
        transition = read_transition(data.transition, at=timestamp)
        if isinstance(transition, RunStarted):
            self._run_started(transition.data.run_folder, transition.data.run_id)
        resulting = data.resulting_state
        if resulting is not None and resulting.current_run_id is not None:
            self._run_id = resulting.current_run_id
            self._run_cost = float(resulting.current_run_cost)
        match transition:
            case RunCompleted(data=ref):
                return self._run_ended(ref.run_id, "completed", event_id, timestamp)
            case RunFailed(data=failed):
                return self._run_ended(failed.run_id, failed.outcome or "failed", event_id,
                                       timestamp)
            case RunInterrupted(data=ref):
                return self._run_ended(ref.run_id, "interrupted", event_id, timestamp)
            case RunCrashed(data=crashed):
                return self._run_ended(crashed.run_id, "crashed", event_id, timestamp)
        return None

    def _run_started(self, run_folder: str | None, run_id: str | None) -> None:
        if not self._bound and run_folder and Path(run_folder).is_absolute():
            self.execution = Path(run_folder).parents[2]
        self._run_id, self._run_cost = run_id, None

    def _run_ended(self, run_id: str | None, status: str, event_id: str | None,
                   timestamp: str | None, **more: Any) -> Note | None:
        if RUN_ENDED not in self.wanted or not run_id or run_id in self._ended:
            return None
        self._ended.add(run_id)
        data: dict[str, Any] = {"runId": run_id, "status": status}
        data.update((key, value) for key, value in more.items() if value is not None)
        cost = self._run_cost if run_id == self._run_id and status != "crashed" else None
        if cost is not None:
            data["cost"] = round(cost, 6)
        waiting = [item for item, run in self._waiting.items() if run == run_id]
        if status == "interrupted":
            data["waitingFor"] = waiting
        # Its own id (the event it comes from may be sent too, under its id).
        return Note(event=RUN_ENDED, id=f"{event_id or run_id}:{RUN_ENDED}", run_id=run_id,
                    timestamp=timestamp, execution=self._where(), data=data,
                    summary=run_summary(run_id, status, cost, len(waiting)))

    # ----- interruptions -----

    def _created(self, note: Note, data: InterruptionCreatedFields) -> Note | None:
        if note.event not in self.wanted:
            return None
        links: list[dict[str, Any]] = []
        if self._links is not None and self.execution is not None:
            links = self._links(data, note.timestamp or "", self.execution)
        return replace(note, summary=created_summary(data), links=links)

    def _keep(self, note: Note, summary: str) -> Note | None:
        if note.event not in self.wanted:
            return None
        return replace(note, summary=summary)

    def _where(self) -> str | None:
        return str(self.execution) if self.execution is not None else None


def _run_of(event: Mapping[str, Any]) -> str | None:
    run_id = event.get("runId")
    return run_id if isinstance(run_id, str) else None


# ----- summaries: one line each -----


def created_summary(data: InterruptionCreatedFields) -> str:
    codon = data.codon_id or "?"
    question = _cut(data.question or "")
    if data.kind == "budget" and data.budget is not None:
        return budget_ask_summary(codon, data.budget)
    if data.kind == "approval":
        return f"codon {codon} waits for approval: {question}"
    if data.kind == "tool-approval":
        return f"codon {codon} waits for approval of a tool call: {question}"
    options = f" [{' | '.join(data.options)}]" if data.options else ""
    return f"codon {codon} asks: {question}{options}"


def budget_ask_summary(codon: str, budget: BudgetAskFields) -> str:
    """``codon draft reached its $2.00 ceiling; spent $2.03; extend by?``"""
    currency = budget.currency or "cost"
    if budget.scope == "loop":
        who = f"loop {budget.loop_id or '?'} (codon {codon})"
    elif budget.scope == "run":
        who = f"the run (at codon {codon})"
    else:
        who = f"codon {codon}"
    spent = {"cost": "spent", "duration": "ran"}.get(currency, "used")
    return (f"{who} reached its {quantity(currency, budget.limit)} ceiling; {spent}"
            f" {quantity(currency, budget.used, unit=False)}; extend by?")


def warning_summary(data: BudgetWarningFields) -> str:
    if data.message:
        return _cut(data.message)
    fraction = f"{data.fraction:.0%}" if data.fraction is not None else "most"
    return (f"codon {data.codon_id or '?'} has used {fraction} of its"
            f" {quantity(data.currency or 'cost', data.limit)} ceiling")


def answered_summary(data: InterruptionAnsweredFields) -> str:
    answer = data.answer
    if isinstance(answer, Mapping) and set(answer) == {"extend"}:
        shown = f"extend by {answer['extend']:g}" if isinstance(answer["extend"], int | float) \
            else f"extend by {answer['extend']}"
    elif isinstance(answer, str):
        shown = answer
    else:
        shown = repr(answer)
    by = f" (by {data.answered_by})" if data.answered_by else ""
    return (f"codon {data.codon_id or '?'}: {data.interruption_id or '?'} answered"
            f" {_cut(shown)}{by}")


_RUN_STATUS = {"completed": "completed", "failed": "failed", "cancelled": "was cancelled",
               "timeout": "ran out of time", "interrupted": "is waiting for a person",
               "crashed": "crashed (found when the next run started)"}


def run_summary(run_id: str, status: str, cost: float | None, waiting: int) -> str:
    line = f"run {run_id} {_RUN_STATUS.get(status, status)}"
    if status == "interrupted" and waiting:
        line += f" ({waiting} answer{'s' if waiting != 1 else ''} needed)"
    if cost is not None:
        line += f"; spent {dollars(cost)}"
    return line


def quantity(currency: str, amount: float | None, *, unit: bool = True) -> str:
    """``$2.00``, ``10m``, ``20,000 output-token`` (``unit=False``: ``20,000``)."""
    if amount is None:
        return "?"
    if currency == "cost":
        return dollars(amount)
    if currency == "duration":
        return duration(amount)
    tokens = f"{round(amount):,}"
    if not unit:
        return tokens
    return f"{tokens} {'output' if currency == 'outputTokens' else 'context'}-token"


def dollars(amount: float) -> str:
    return f"${amount:,.2f}" if amount == 0 or abs(amount) >= 0.01 else f"${amount:.4f}"


def duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "",
             f"{secs}s" if secs or not whole else ""]
    return " ".join(part for part in parts if part)


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _LONGEST_TEXT else text[:_LONGEST_TEXT - 1] + "…"


__all__ = ["RUN_ENDED", "Composer", "InterruptionCreatedFields", "LinkMaker",
           "Note"]
