"""What a run came to, in a few lines: :func:`summarize_run` reads it from the state and
:func:`summary_text` words it, with the commands to run next.

Plain functions over :class:`~hankweave.state.types.HankweaveState`, so every screen that
ends a run (``hankweave attach`` when the run ends or when it detaches; the live view of
``hankweave run`` can call the same two) says the same thing the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

    from hankweave.state.types import HankweaveState

__all__ = ["RunSummary", "is_ongoing", "summarize_run", "summary_text"]

_ONGOING = ("running", "resuming")


@dataclass(frozen=True)
class RunSummary:
    """The newest run of an execution, as a person wants it at the end."""

    run_id: str | None
    status: str
    """The run's status (``running`` while it goes on); ``none`` when nothing ran yet."""
    planned: int
    """Entries of the execution plan (loop iterations as they were planned)."""
    completed: int
    """Codons of the execution's thread whose newest record completed (earlier runs too)."""
    failed: int
    skipped: int
    run_cost: float
    total_cost: float
    seconds: float | None
    """From the run's start to its end (to ``now`` while it runs)."""
    input_tokens: int
    output_tokens: int
    failure: str | None
    """The newest failed codon of the run and its reason."""
    pending_interruptions: int

    @property
    def ongoing(self) -> bool:
        return is_ongoing(self.status)


def is_ongoing(run_status: str) -> bool:
    """Whether a run with this status still goes on (every other status has ended it)."""
    return run_status in _ONGOING


def summarize_run(state: HankweaveState, *, now: datetime | None = None) -> RunSummary:
    """The summary of the newest run of ``state`` (``status="none"`` before any run)."""
    from hankweave.state.costs import run_cost, run_tokens, total_cost
    from hankweave.state.thread import analyze_execution_thread

    run = state.runs[0] if state.runs else None
    newest: dict[str, str] = {}
    for threaded in analyze_execution_thread(state).codons:  # newest first
        newest.setdefault(threaded.codon.codon_id, threaded.codon.status)
    statuses = list(newest.values())
    tokens = run_tokens(run) if run is not None else None
    return RunSummary(
        run_id=run.run_id if run else None,
        status=run.status if run else "none",
        planned=len(state.execution_plan),
        completed=statuses.count("completed"),
        failed=statuses.count("failed"),
        skipped=statuses.count("skipped"),
        run_cost=run_cost(run) if run else 0.0,
        total_cost=total_cost(state),
        seconds=_seconds(run.start_time, run.end_time, now) if run else None,
        input_tokens=tokens.input_tokens if tokens else 0,
        output_tokens=tokens.output_tokens if tokens else 0,
        failure=_failure(state),
        pending_interruptions=sum(1 for i in state.interruptions if i.status == "pending"),
    )


def _seconds(start: str | None, end: str | None, now: datetime | None) -> float | None:
    began = _parse(start)
    ended = _parse(end) or now or datetime.now().astimezone()
    return max((ended - began).total_seconds(), 0.0) if began else None


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _failure(state: HankweaveState) -> str | None:
    run = state.runs[0] if state.runs else None
    for record in reversed(run.codons if run else []):
        reason = getattr(record, "failure_reason", None)
        if record.status == "failed" and reason is not None:
            return f"{record.codon_id}: {reason.type}" + (f": {reason.message}"
                                                         if reason.message else "")
    return None


def summary_text(summary: RunSummary, execution: str | None = None) -> Text:
    """The summary in short lines (they fit 80 columns but for ids and paths), then the next
    commands for ``execution`` (the execution directory; ``DIR`` when unknown)."""
    from rich.text import Text

    from hankweave.cli.tables import money

    where = execution or "DIR"
    if summary.run_id is None:
        return Text(f"No run yet in {where}.")
    style = {"completed": "bold green", "failed": "bold red", "crashed": "bold red"}.get(
        summary.status, "bold yellow")
    took = "" if summary.seconds is None else (
        f" for {summary.seconds:.1f}s" if summary.ongoing else f" after {summary.seconds:.1f}s")
    text = Text.assemble(("Run ", "bold"), (summary.run_id, "bold"), " ",
                         (summary.status, style), took, "\n")
    counts = [f"{summary.completed} of {summary.planned} codons completed"]
    counts += [f"{summary.failed} failed"] if summary.failed else []
    counts += [f"{summary.skipped} skipped"] if summary.skipped else []
    text.append(f"  {', '.join(counts)}\n")
    text.append(f"  cost {money(summary.run_cost)} (execution {money(summary.total_cost)}),"
                f" tokens in {summary.input_tokens} out {summary.output_tokens}\n")
    if summary.failure:
        text.append(f"  failed: {summary.failure}\n", style="red")
    text.append("Next:\n", style="bold")
    for command in _next_commands(summary, where):
        text.append(f"  {command}\n")
    text.rstrip()
    return text


def _next_commands(summary: RunSummary, where: str) -> list[str]:
    if summary.pending_interruptions:
        return [f"hankweave inspect interruptions -e {where} --pending",
                f"hankweave answer -e {where} ID TEXT"]
    if summary.ongoing:
        return [f"hankweave attach -e {where}    (watch again)"]
    commands = [f"hankweave inspect state -e {where}", f"hankweave journal -e {where}"]
    if summary.status != "completed":
        commands.append(f"hankweave run -e {where}    (resume)")
    return commands
