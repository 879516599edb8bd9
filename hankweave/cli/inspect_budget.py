"""``hankweave inspect budget``: each plan entry's limits against what it used.

Limits come from the journal's ``budget.limits`` events (what each codon attempt was given,
with the rule it came from); entries that have not started yet are projected with the same
allocation rules the runtime uses (:mod:`hankweave.runtime.allocation`), from the newest
ceiling the journal recorded and what the state says was spent.  Actuals come from the state:
every record of every run, failed attempts included.  Read-only, like the other ``inspect``
commands; it works on a finished execution and on one that is running.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.inspect import (
    json_option,
    load_execution_state,
    make_console,
    warn,
    wide_option,
)
from hankweave.cli.options import execution_option
from hankweave.runtime.budget_report import RecordedLimits, budget_report, read_recorded_limits

if TYPE_CHECKING:
    from rich.console import Console


_LIMIT_KEYS = ("maxDollars", "maxTimeSeconds", "maxOutputTokens", "maxContextTokens")


@click.command("budget")
@execution_option()
@json_option
@wide_option
def inspect_budget(execution_dir: Path, as_json: bool, wide: bool) -> None:
    """Per plan entry: its dollar, time and token limits (and where each came from) against
    what it spent and used, the run-wide ceiling against the whole execution's spending.

    Limits of entries that have not started are projected: what the entry would get if it
    started now (marked *).
    """
    state = load_execution_state(execution_dir)
    recorded = _recorded_limits(execution_dir)
    report = budget_report(state, recorded)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    _render(report, make_console(wide))


# ----- what the journal recorded -----


def _recorded_limits(execution_dir: Path) -> RecordedLimits:
    from hankweave.events.journal import JournalReadReport, journal_path

    recorded = RecordedLimits()
    path = journal_path(execution_dir)
    report = JournalReadReport(path)
    try:
        read_recorded_limits(path, recorded, report=report)
    except FileNotFoundError:
        warn(f"{path}: no event journal; the limits started codons ran under are unknown")
    except OSError as exc:
        warn(f"{path}: cannot read ({exc.strerror or exc}); the limits started codons ran"
              " under are unknown")
    if report.corrupt_lines:
        warn(f"{path}: {len(report.corrupt_lines)} corrupt line(s) skipped")
    return recorded


# ----- human output -----


def _money(value: float | None) -> str:
    """Cents from a dollar up, four decimals below, every digit that matters under a cent."""
    from hankweave.runtime.allocation import money

    if value is None:
        return "-"
    return f"${value:.4f}" if 0.01 <= abs(value) < 1 else money(value)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _against(used: str, limits: Mapping[str, Any] | None, key: str, shown: str,
             kind: str | None) -> str:
    if not limits or key not in limits:
        return used
    mark = "*" if kind == "projected" else ""
    return f"{used} / {shown}{mark}"


def _render(report: dict[str, Any], console: Console) -> None:
    from rich.text import Text

    from hankweave.cli.tables import FitTable, TableColumn

    ceiling = report["ceiling"]
    spent, elapsed = report["spentDollars"], report["elapsedSeconds"]
    if ceiling is None:
        console.print(Text("Ceiling: none recorded (the journal has no budget.limits or"
                           " budget.summary event)"))
    else:
        parts = [f"dollars {_money(ceiling.get('maxDollars'))}",
                 f"time {_secs(ceiling.get('maxTimeSeconds'))}",
                 f"allocation {ceiling.get('allocation', 'shared')}"]
        if ceiling.get("shares"):
            parts.append("shares " + ", ".join(f"{key} {value:.0%}"
                                               for key, value in ceiling["shares"].items()))
        if ceiling.get("onExceeded"):
            parts.append(f"onExceeded {ceiling['onExceeded']}")
        console.print(Text(f"Ceiling: {', '.join(parts)}"))
    used = f"Spent {_money(spent)}"
    if ceiling and ceiling.get("maxDollars") is not None:
        used += f" of {_money(ceiling['maxDollars'])}"
    used += f"; ran {_secs(elapsed)}"
    if ceiling and ceiling.get("maxTimeSeconds") is not None:
        used += f" of {_secs(ceiling['maxTimeSeconds'])}"
    console.print(Text(used + " (every run of the execution)"))

    # Key columns: codon, status, dollars; the rest fold into a detail line when narrow.
    table = FitTable([
        TableColumn("Codon", key=True), TableColumn("Loop", priority=1), TableColumn("Status", key=True),
        TableColumn("Dollars", key=True, justify="right"),
        TableColumn("Dollar limit from", priority=3, wrap_at=16, label="limit from"),
        TableColumn("Time", priority=2), TableColumn("Out tokens", priority=2),
        TableColumn("Breach", priority=0, wrap_at=16),
    ])
    projected = False
    for entry in report["entries"]:
        limits, kind, actual = entry["limits"], entry["limitsKind"], entry["actual"]
        projected = projected or (kind == "projected" and bool(limits) and any(
            key in limits for key in _LIMIT_KEYS))
        table.add_row(
            Text(entry["codonId"]), Text(entry["loopId"] or "-"), entry["status"],
            _against(_money(actual["dollars"]), limits, "maxDollars",
                     _money((limits or {}).get("maxDollars")), kind),
            Text((limits or {}).get("dollarsSource") or "-"),
            _against(_secs(actual["timeSeconds"]), limits, "maxTimeSeconds",
                     _secs((limits or {}).get("maxTimeSeconds")), kind),
            _against(str(actual["outputTokens"]), limits, "maxOutputTokens",
                     str((limits or {}).get("maxOutputTokens")), kind),
            Text(_breach(entry["budgetExceeded"])))
    console.print(table)
    for loop in report["loops"]:
        limits, actual, kind = loop["limits"], loop["actual"], loop["limitsKind"]
        dollars = _against(_money(actual["dollars"]), limits, "maxDollars",
                           _money(limits.get("maxDollars")), kind)
        seconds = _against(_secs(actual["timeSeconds"]), limits, "maxTimeSeconds",
                           _secs(limits.get("maxTimeSeconds")), kind)
        console.print(Text(
            f"Loop {loop['loopId']}: spent {dollars}"
            f" ({limits.get('dollarsSource', 'no dollar limit')}), ran {seconds}"
            f" ({limits.get('timeSource', 'no time limit')})"))
        projected = projected or kind == "projected"
    if projected:
        console.print(Text("* projected: the limit the entry would get if it started now"))
    _render_asks(report["asks"], console)


def _render_asks(asks: list[dict[str, Any]], console: Console) -> None:
    """The ceilings that asked a person, and what each person decided."""
    from rich.text import Text

    from hankweave.runtime.budget import ceiling_name, describe_amount, describe_used

    if not asks:
        return
    console.print(Text("Ceilings that asked (onExceeded: ask):"))
    for ask in asks:
        currency = ask["currency"]
        whose = {"codon": "its own", "run": "the run's",
                 "loop": f"loop {ask.get('loopId')}'s"}[ask["scope"]]
        what = (f"  {ask['codonId']}: {whose} {ceiling_name(currency, ask['limit'])}"
                f" ({ask['source']}) reached at"
                f" {describe_used(currency, ask['used'], ask['limit'])},"
                f" asked {ask['askedAt']}: ")
        if ask["decision"] == "extended":
            what += (f"extended by {describe_amount(currency, ask['amount'])} by"
                     f" {ask['answeredBy']} at {ask['answeredAt']}")
        elif ask["decision"] == "rejected":
            what += f"rejected by {ask['answeredBy']} at {ask['answeredAt']}"
        else:
            what += f"waiting ({ask['interruptionId']})"
        console.print(Text(what))


def _breach(exceeded: Mapping[str, Any] | None) -> str:
    if not exceeded:
        return "-"
    currency, used, limit = exceeded["currency"], exceeded["used"], exceeded["limit"]
    if currency == "cost":
        return f"cost {_money(used)} >= {_money(limit)}"
    if currency == "duration":
        return f"time {_secs(used)} >= {_secs(limit)}"
    return f"{currency} {used:g} >= {limit:g}"


__all__ = ["inspect_budget"]
