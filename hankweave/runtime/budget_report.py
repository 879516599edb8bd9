"""Each plan entry's budget limits against what it used: the report of ``hankweave inspect
budget`` and of the dashboard's budget bars.

Limits come from the journal's ``budget.limits`` events (what each codon attempt was given,
with the rule it came from); entries that have not started yet are projected with the same
allocation rules the runtime uses (:mod:`hankweave.runtime.allocation`), from the newest
ceiling the journal recorded and what the state says was spent.  Actuals come from the state:
every record of every run, failed attempts included.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hankweave.events.journal import JournalReadReport
    from hankweave.events.reading import Event
    from hankweave.state.types import CodonExecution, HankweaveState

BUDGET_EVENTS = frozenset({"budget.limits", "budget.summary"})


# ----- what the journal recorded -----


class RecordedLimits:
    """The newest ``budget.limits`` per codon, and the newest ceiling."""

    def __init__(self) -> None:
        self.ceiling: dict[str, Any] | None = None
        self.codons: dict[str, dict[str, Any]] = {}
        self.loops: dict[str, dict[str, Any]] = {}
        self.last_seq = 0
        """How far :func:`read_recorded_limits` read the journal (0: not at all)."""

    def add(self, event: Event) -> None:
        """One ``budget.limits`` or ``budget.summary`` event; others change nothing."""
        from hankweave.events.catalogue import BudgetLimitsData, BudgetSummaryData, dump_event_data

        data = event.data
        if isinstance(data, BudgetSummaryData):
            # A summary's ceiling has no allocation; the limits events say more.
            if self.ceiling is None and data.ceiling is not None:
                self.ceiling = {**dump_event_data(data.ceiling),
                                "allocation": data.allocation or "shared"}
            return
        if not isinstance(data, BudgetLimitsData) or data.ceiling is None:
            return
        self.ceiling = dump_event_data(data.ceiling)
        if data.codon_id is not None and data.limits is not None:
            self.codons[data.codon_id] = dump_event_data(data.limits)
        if data.loop_context is not None and data.loop is not None:
            self.loops[str(data.loop_context.loop_id)] = dump_event_data(data.loop)


# ----- the report -----


@dataclass(frozen=True)
class Spent:
    """What the hank's budget counts against its ceiling so far."""

    dollars: float
    """The money of every record of every run: a skipped or failed codon's partial cost too."""
    seconds: float
    """The runs' wall time, added up: the time between runs (waiting for a person, stopped)
    does not count, nor a run's live wait for a person at a budget ceiling."""


def spent_so_far(state: HankweaveState) -> Spent:
    """The figures the budget's ceiling is checked against; every view of "spent" and "time"
    shows these, so a page's cards and its budget bars agree."""
    from hankweave.runtime.budget import counted_seconds, spending_of

    return Spent(dollars=spending_of(state).total,
                 seconds=sum(counted_seconds(run, state.interruptions) for run in state.runs))


def budget_report(state: HankweaveState, recorded: RecordedLimits) -> dict[str, Any]:
    """The ``--json`` shape: ``{ceiling, spentDollars, elapsedSeconds, entries, loops,
    asks}``."""
    from hankweave.runtime.allocation import BudgetPlan, Pool, Progress
    from hankweave.runtime.budget import loop_seconds, spending_of

    ledger = spending_of(state)
    records: dict[str, list[CodonExecution]] = {}
    for run in reversed(state.runs):  # oldest run first
        for record in run.codons:
            records.setdefault(record.codon_id, []).append(record)
    loop_elapsed: dict[str, float] = {}
    for run in state.runs:
        for loop_id, seconds in loop_seconds(run).items():
            loop_elapsed[loop_id] = loop_elapsed.get(loop_id, 0.0) + seconds
    elapsed = spent_so_far(state).seconds
    pool = Pool.of_json(recorded.ceiling) or Pool()
    plan = BudgetPlan(state.execution_plan, pool)
    progress = Progress(ledger=ledger, started=frozenset(records), elapsed=elapsed,
                        loop_elapsed=loop_elapsed)

    entries = []
    for entry in state.execution_plan:
        attempts = records.get(entry.codon_id, [])
        limits = recorded.codons.get(entry.codon_id)
        kind = "applied" if limits is not None else None
        if limits is None and not attempts:
            limits, kind = plan.resolve(entry.codon_id, progress).to_json(ids=False), "projected"
        entries.append({
            "codonId": entry.codon_id,
            "loopId": entry.loop_context.loop_id if entry.loop_context else None,
            "status": _status(attempts[-1]) if attempts else "pending",
            "attempts": len(attempts),
            "limits": limits,
            "limitsKind": kind,
            "actual": _actual(attempts),
            "budgetExceeded": _exceeded(attempts),
        })
    loops = []
    for loop_id in plan.loop_ids():
        loop_limits = recorded.loops.get(loop_id)
        loop_kind = "applied"
        if loop_limits is None:
            loop_limits = plan.resolve_loop(loop_id, progress).to_json(ids=False)
            loop_kind = "projected"
        loops.append({"loopId": loop_id, "limits": loop_limits, "limitsKind": loop_kind,
                      "actual": {"dollars": ledger.of_loop(loop_id),
                                 "timeSeconds": loop_elapsed.get(loop_id, 0.0)}})
    return {"ceiling": recorded.ceiling, "spentDollars": ledger.total, "elapsedSeconds": elapsed,
            "entries": entries, "loops": loops, "asks": budget_asks(state)}


def budget_asks(state: HankweaveState) -> list[dict[str, Any]]:
    """Every ceiling that asked a person (``onExceeded: "ask"``), oldest first, with the
    decision: ``{interruptionId, codonId, scope, loopId?, currency, limit, used, source,
    askedAt, decision: extended|rejected|pending, amount?, answeredBy?, answeredAt?}``."""
    from hankweave.runtime.budget import extension_of

    asks = []
    for item in state.interruptions:
        if item.kind != "budget" or item.budget is None:
            continue
        amount = extension_of(item.answer)
        decision = "pending" if item.status == "pending" else (
            "extended" if amount is not None else "rejected")
        ask = {"interruptionId": item.id, "codonId": item.codon_id,
               **item.budget.model_dump(by_alias=True, exclude_none=True),
               "askedAt": item.created_at, "decision": decision, "amount": amount,
               "answeredBy": item.answered_by, "answeredAt": item.answered_at}
        asks.append({key: value for key, value in ask.items() if value is not None})
    return asks


def _status(record: CodonExecution) -> str:
    from hankweave.runtime.failures import failure_kind
    from hankweave.state.types import is_terminal_status

    if not is_terminal_status(record.status):
        return "running"
    if record.status == "completed" and getattr(record, "budget_exceeded", None):
        return "exceeded"
    reason = getattr(record, "failure_reason", None)
    if reason is not None and failure_kind(reason.type, reason.message) == "waiting":
        return "waiting"  # for a person: not a failure
    return record.status


def _actual(attempts: Iterable[CodonExecution]) -> dict[str, Any]:
    from hankweave.runtime.budget import record_span, spent_by
    from hankweave.state.costs import codon_tokens

    dollars, seconds, output = 0.0, 0.0, 0
    for record in attempts:
        dollars += spent_by(record)
        span = record_span(record)
        if span is not None:
            seconds += (span[1] - span[0]).total_seconds()
        output += codon_tokens(record).output_tokens
    return {"dollars": dollars, "timeSeconds": seconds, "outputTokens": output}


def _exceeded(attempts: list[CodonExecution]) -> dict[str, Any] | None:
    breach = getattr(attempts[-1], "budget_exceeded", None) if attempts else None
    return breach.model_dump(by_alias=True) if breach is not None else None


def read_recorded_limits(journal: Path, into: RecordedLimits | None = None, *,
                         after_seq: int | None = None,
                         report: JournalReadReport | None = None) -> RecordedLimits:
    """The limits the journal at ``journal`` recorded, added to ``into`` (a new
    :class:`RecordedLimits` by default).  With ``after_seq``, only the events after it are
    read (found by bisection), so a reader that keeps ``into`` reads each event once; its
    ``last_seq`` says how far it read.

    Raises:
        FileNotFoundError, OSError: the journal cannot be read.
    """
    from hankweave.events.journal import journal_last_seq, read_journal
    from hankweave.events.reading import parse_event

    recorded = into if into is not None else RecordedLimits()
    upto = journal_last_seq(journal)  # events appended meanwhile are read again next time
    for event in read_journal(journal, after_seq=after_seq, types=BUDGET_EVENTS,
                              report=report):
        recorded.add(parse_event(event.to_wire()))  # the newest wins: reading one twice is safe
    recorded.last_seq = max(recorded.last_seq, upto)
    return recorded


__all__ = ["BUDGET_EVENTS", "RecordedLimits", "budget_report", "read_recorded_limits"]
