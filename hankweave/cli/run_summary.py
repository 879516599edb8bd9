"""What a run came to, in a few lines, with the commands to run next.

:func:`summarize_run` reads a :class:`RunSummary` from the state (and, when given, the run's
events: the budget a ``budget.summary`` reported); :func:`summary_text` words it for a terminal
and :func:`summary_lines` as plain lines for logs.  ``hankweave run`` prints it when the run
ends (live or headless); ``hankweave attach`` when the run it watches ends or when it detaches,
so every screen that ends a run says the same thing the same way.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.exitcodes import EXIT_SIGINT, EXIT_SIGTERM

if TYPE_CHECKING:
    from rich.text import Text

    from hankweave.state.types import CodonExecution, FailedCodon, HankweaveState

__all__ = ["BudgetLine", "RunSummary", "Waiting", "is_ongoing", "one_line_reason",
           "summarize_run", "summary_lines", "summary_text"]

_ONGOING = ("running", "resuming")
_REASON_LIMIT = 400
"""The longest reason shown (a provider's error may quote a whole request)."""
_OUTPUTS_NAMED = 4
"""Output files named one by one; more are counted."""


def one_line_reason(message: str | None, retriable: bool | None) -> str:
    """A failure reason on one line, capped, saying when retrying cannot fix it."""
    text = " ".join(str(message or "no reason recorded").split())
    if len(text) > _REASON_LIMIT:
        text = text[:_REASON_LIMIT - 1] + "…"
    return text + (" (not retried: retrying cannot fix it)" if retriable is False else "")


@dataclass(frozen=True)
class BudgetLine:
    """One row of the budget table: what was spent against what was allowed."""

    what: str
    spent: str
    limit: str
    share: str = ""
    """The spent part of the limit (``42%``), when there is a limit."""


@dataclass(frozen=True)
class Waiting:
    """A question or approval that waits for a person."""

    interruption_id: str
    codon_id: str
    question: str
    """The question, its options and its default, on one line."""
    answer: str
    """The answer part of its ``answer`` command: an option, ``--approve`` or a placeholder,
    quoted to paste."""


@dataclass(frozen=True)
class RunSummary:
    """The newest run of an execution, as a person wants it at its end."""

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
    """The newest failed codon of the run and its reason, on one line."""
    pending_interruptions: int
    stopped_at: str | None = None
    """The codon a person's stop (Ctrl-C, ``f``, a shutdown) ended, when one did."""
    waiting: tuple[Waiting, ...] = ()
    budget: tuple[BudgetLine, ...] = ()
    outputs: Path | None = None
    """Where the outputs were copied, when an output directory is set."""
    output_files: tuple[str, ...] = field(default=())
    show_costs: bool = True
    exit_code: int | None = None
    """The run's exit code, when known (``hankweave run``): says a signal stopped it."""
    sentinel_cost: float = 0.0
    """What the run's sentinels cost (kept apart from the codons' cost, as in the state)."""

    @property
    def ongoing(self) -> bool:
        return is_ongoing(self.status)

    @property
    def pending(self) -> int:
        """Plan entries that have not finished (completed, failed or skipped)."""
        return max(self.planned - self.completed - self.failed - self.skipped, 0)

    @property
    def headline(self) -> str:
        """What the run came to, in a few words."""
        if self.status == "completed":
            return "Completed"
        if self.ongoing:
            return "Running"
        if self.status == "interrupted" or (self.pending_interruptions and not self.failure):
            return "Waiting for a person"
        signal = _SIGNALS.get(self.exit_code or 0)
        if signal is not None:
            return f"Stopped by {signal}" + (f" at {self.stopped_at}" if self.stopped_at else "")
        if self.stopped_at or self.status == "cancelled":
            return f"Stopped at {self.stopped_at}" if self.stopped_at else "Stopped"
        if self.status == "timeout":
            return "Stopped: the time ceiling was reached"
        if self.failure:
            return f"Failed at {self.failure}"
        return self.status.capitalize()


_SIGNALS = {EXIT_SIGINT: "Ctrl-C (SIGINT)", EXIT_SIGTERM: "SIGTERM"}


def is_ongoing(run_status: str) -> bool:
    """Whether a run with this status still goes on (every other status has ended it)."""
    return run_status in _ONGOING


def summarize_run(state: HankweaveState, *, now: datetime | None = None,
                  events: Iterable[Mapping[str, Any]] = (), output_dir: Path | None = None,
                  show_costs: bool = True, exit_code: int | None = None) -> RunSummary:
    """The summary of the newest run of ``state`` (``status="none"`` before any run).

    ``events``: the run's events, for its budget (the last ``budget.summary``); ``output_dir``:
    the output directory setting (the files in it are named)."""
    from hankweave.state.costs import run_cost, run_sentinel_cost, run_tokens, total_cost
    from hankweave.state.thread import analyze_execution_thread

    run = state.runs[0] if state.runs else None
    newest: dict[str, str] = {}
    for threaded in analyze_execution_thread(state).codons:  # newest first
        newest.setdefault(threaded.codon.codon_id, threaded.codon.status)
    statuses = list(newest.values())
    tokens = run_tokens(run) if run is not None else None
    failed_record = _newest_failed(run.codons if run else [])
    stopped = failed_record is not None and _stopped_by_person(failed_record)
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
        failure=None if stopped or failed_record is None else _failure(failed_record),
        pending_interruptions=sum(1 for i in state.interruptions if i.status == "pending"),
        stopped_at=failed_record.codon_id if stopped and failed_record else None,
        waiting=_waiting(state),
        budget=_budget(events),
        outputs=output_dir,
        output_files=_outputs(output_dir),
        show_costs=show_costs,
        exit_code=exit_code,
        sentinel_cost=run_sentinel_cost(run) if run else 0.0,
    )


def _newest_failed(records: list[CodonExecution]) -> FailedCodon | None:
    from hankweave.state.types import FailedCodon

    for record in reversed(records):
        if isinstance(record, FailedCodon) and record.failure_reason is not None:
            return record
    return None


def _stopped_by_person(record: FailedCodon) -> bool:
    """A codon that "failed" because a person stopped it (or waits for one): not a failure."""
    from hankweave.runtime.failures import failure_kind

    reason = record.failure_reason
    return reason is not None and failure_kind(reason.type, reason.message) != "failed"


def _failure(record: FailedCodon) -> str:
    reason = record.failure_reason
    assert reason is not None
    return f"{record.codon_id}: {one_line_reason(reason.message, reason.retriable)}"


def _waiting(state: HankweaveState) -> tuple[Waiting, ...]:
    from hankweave.app.launch import answer_placeholder
    from hankweave.state.interruptions import pending

    found = []
    for item in pending(state):
        options = f" [{' | '.join(item.options)}]" if item.options else ""
        deadline = (f" (default {item.default_answer!r} at {item.deadline})" if item.deadline
                    else "")
        question = " ".join(item.question.split())
        found.append(Waiting(item.id, item.codon_id, f"{question}{options}{deadline}",
                             answer_placeholder(item)))
    return tuple(found)


def _budget(events: Iterable[Mapping[str, Any]]) -> tuple[BudgetLine, ...]:
    """The run-wide ceiling against what the execution spent, from the last
    ``budget.summary`` (sent at the end of a run that has limits); none without one."""
    reported = None
    for event in events:
        if event.get("type") == "budget.summary":
            reported = event.get("data") or {}
    if reported is None:
        return ()
    ceiling, totals = reported.get("ceiling") or {}, reported.get("totals") or {}
    lines = [_budget_line("dollars", totals.get("actualDollars"), ceiling.get("maxDollars"),
                          _money),
             _budget_line("time", totals.get("actualTimeSeconds"),
                          ceiling.get("maxTimeSeconds"), duration_text)]
    tokens = sum(int((row.get("actual") or {}).get("outputTokens") or 0)
                 for row in reported.get("rows") or [])
    token_limits = [(row.get("budget") or {}).get("maxOutputTokens")
                    for row in reported.get("rows") or []]
    if any(limit is not None for limit in token_limits):
        lines.append(BudgetLine("output tokens", f"{tokens:,}", "per codon"))
    return tuple(lines)


def _budget_line(what: str, spent: Any, limit: Any, shown: Any) -> BudgetLine:
    spent_value = float(spent or 0)
    if limit is None:
        return BudgetLine(what, shown(spent_value), "none")
    share = f"{spent_value / float(limit):.0%}" if float(limit) > 0 else ""
    return BudgetLine(what, shown(spent_value), shown(float(limit)), share)


def _outputs(output_dir: Path | None) -> tuple[str, ...]:
    if output_dir is None:
        return ()
    try:
        return tuple(sorted(entry.name for entry in output_dir.iterdir()))
    except OSError:
        return ()


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


def _money(value: float) -> str:
    return f"${value:.4f}"


def duration_text(seconds: float) -> str:
    """``4.2s``, ``12m05s``, ``2h03m``: how the terminal says a length of time."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


# ----- words -----


def summary_lines(summary: RunSummary, execution: str | Path | None = None, *,
                  replayable: bool = True, files: bool = False) -> list[tuple[str, str]]:
    """The summary as ``(text, style)`` lines: the outcome, codons, cost and time, the budget,
    the outputs, what waits for a person, then the commands to run next for ``execution``
    (``DIR`` when unknown).

    ``replayable``: the run was not a replay (an export of it can be replayed); ``files``: name
    where the execution keeps its state, journal, logs, checkpoints and workspace."""
    where = shlex.quote(str(execution)) if execution else "DIR"
    if summary.run_id is None:
        return [(f"No run yet in {where}.", "")]
    style = {"Completed": "bold green", "Running": "bold cyan"}.get(
        summary.headline, "bold red" if summary.failure else "bold yellow")
    lines = [(summary.headline, style), _codons_line(summary), _usage_line(summary)]
    if summary.budget:
        lines.append((f"  {'budget':<14}{'spent':>11}  {'limit':>11}", "bold"))
        lines += [(f"  {line.what:<14}{line.spent:>11}  {line.limit:>11}  {line.share}"
                   .rstrip(), "") for line in summary.budget]
    if summary.outputs is not None:
        lines.append((f"  outputs   {_outputs_text(summary)}", ""))
    lines += [(f"  waiting   {item.interruption_id}  {item.codon_id}: {item.question}",
               "yellow") for item in summary.waiting]
    if files and execution:
        lines += _files_lines(Path(execution))
    lines.append(("Next:", "bold"))
    lines += [(f"  {command}", "") for command in
              _next_commands(summary, where, replayable=replayable)]
    return lines


def _files_lines(execution: Path) -> list[tuple[str, str]]:
    from hankweave.execution.layout import ExecutionLayout

    layout = ExecutionLayout(execution)
    return [(f"Execution directory: {layout.path}", "bold"),
            (f"  state        {layout.state_file}", ""),
            (f"  journal      {layout.events_file}", ""),
            (f"  codon logs   {layout.runs_dir}/<run>/<codon>-claude.log", ""),
            (f"  checkpoints  {layout.checkpoints_dir}", ""),
            (f"  workspace    {layout.agent_root}", ""),
            # Only an execution whose agents went through the LLM proxy has one.
            *([(f"  proxy log    {layout.proxy_log}", "")] if layout.proxy_log.exists() else [])]


def _codons_line(summary: RunSummary) -> tuple[str, str]:
    parts = [f"{summary.completed} done"]
    # A codon a person stopped, or that waits for one, "failed" in the records only.
    held = 1 if summary.stopped_at and summary.failed else 0
    failed = summary.failed - held
    parts += [f"{failed} failed"] if failed else []
    if held:
        parts.append("1 waiting" if summary.waiting else "1 stopped")
    parts += [f"{summary.skipped} skipped"] if summary.skipped else []
    parts += [f"{summary.pending} pending"] if summary.pending else []
    return f"  codons    {', '.join(parts)} (of {summary.planned} planned)", ""


def _usage_line(summary: RunSummary) -> tuple[str, str]:
    took = "" if summary.seconds is None else f"time {duration_text(summary.seconds)}"
    tokens = f"tokens in {summary.input_tokens:,} out {summary.output_tokens:,}"
    if not summary.show_costs:
        return f"  usage     {tokens}, {took}".rstrip(", "), ""
    cost = _money(summary.run_cost)
    if summary.sentinel_cost:
        cost += f" + sentinels {_money(summary.sentinel_cost)}"
    if abs(summary.total_cost - summary.run_cost) > 1e-9:
        cost += f" (execution {_money(summary.total_cost)})"
    return f"  usage     cost {cost}, {tokens}, {took}".rstrip(", "), ""


def _outputs_text(summary: RunSummary) -> str:
    files = summary.output_files
    if not files:
        return f"{summary.outputs} (nothing copied yet)"
    named = ", ".join(files[:_OUTPUTS_NAMED])
    more = f" and {len(files) - _OUTPUTS_NAMED} more" if len(files) > _OUTPUTS_NAMED else ""
    return f"{summary.outputs}: {named}{more}"


def _next_commands(summary: RunSummary, where: str, *, replayable: bool) -> list[str]:
    if summary.ongoing:
        return [f"hankweave attach -e {where}    # watch it"]
    commands = [f"hankweave answer -e {where} {shlex.quote(item.interruption_id)}"
                f" {item.answer}" for item in summary.waiting]
    if summary.status != "completed":
        # The execution's recorded intent (mock provider, model override...) comes with it.
        commands.append(f"hankweave run -e {where}    # resume")
    commands += [f"hankweave inspect thread -e {where}", f"hankweave inspect state -e {where}",
                 f"hankweave journal -e {where}",
                 f"hankweave dashboard {where}    # browse it"]
    if replayable and summary.status == "completed":
        commands += [f"hankweave export -e {where} -o run.hwrec.tar.gz    # record it",
                     "hankweave replay run.hwrec.tar.gz    # replay the recording offline"]
    return commands


def summary_text(summary: RunSummary, execution: str | Path | None = None, *,
                 replayable: bool = True, files: bool = False) -> Text:
    """:func:`summary_lines` as one rich text, for a terminal."""
    from rich.text import Text

    text = Text()
    for n, (line, style) in enumerate(summary_lines(summary, execution, replayable=replayable,
                                                    files=files)):
        text.append(("\n" if n else "") + line, style=style)
    return text
