"""``hankweave inspect``: read an execution's recorded state without changing anything.

Both commands read ``<DIR>/.hankweave/state.json`` plus its transition log (``state.wal``), so
they show every acknowledged transition even while a runtime is writing.  ``inspect thread`` and
``inspect execution`` show a ``running`` run whose runtime is gone (no live ``runtime.lock``)
as ``crashed``, as the next start will record it.  ``inspect thread`` also
lists the execution's checkpoint store (:meth:`CheckpointStore.list_read_only`) to show which
recorded checkpoints can still be restored.  They take no lock and write no file.  Warnings go
to stderr, so ``--json`` output on stdout stays pure JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.options import execution_option

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from hankweave.cli.tables import FitTable
    from hankweave.execution.document import DocumentHankSource
    from hankweave.execution.family import Family
    from hankweave.execution.result import ExecutionResult
    from hankweave.state.thread import CheckpointData, ExecutionThread
    from hankweave.state.types import CodonExecution, HankweaveState, Interruption, Run

# Wide enough for the codon table when stdout is a file or a pipe (rich would assume 80).
_PIPE_WIDTH = 160


@click.group("inspect")
def inspect_group() -> None:
    """Show an execution's recorded state (read-only: no lock taken, nothing written)."""


_execution_option = execution_option()
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON on stdout instead of tables."
)
wide_option = click.option(
    "--wide", is_flag=True, help="Every column as a column, however wide the terminal (by"
    " default the columns that do not fit fold into a line under each row)."
)


@inspect_group.command("state")
@_execution_option
@json_option
@wide_option
def inspect_state(execution_dir: Path, as_json: bool, wide: bool) -> None:
    """Runs (newest first), their codons, statuses, costs and tokens.

    With --json, prints the state exactly as stored (camelCase), with the transition log
    applied.
    """
    from hankweave.state.types import dump_state

    state = load_execution_state(execution_dir)
    if as_json:
        click.echo(dump_state(state).decode())
        return
    _render_state(state, make_console(wide))


@inspect_group.command("thread")
@_execution_option
@click.option(
    "--run", "run_id", metavar="RUN_ID", help="End the thread at this run (default: newest)."
)
@json_option
@wide_option
def inspect_thread(execution_dir: Path, run_id: str | None, as_json: bool,
        wide: bool) -> None:
    """The execution thread: codon history across continuation runs and the next codon.

    Each codon's checkpoints are those its records name that the checkpoint store still
    holds: the store of the checkpoints.backend setting (hankweave.json in the current
    directory, HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND; default git), only read.
    """
    from hankweave.execution.family import family_of
    from hankweave.state.thread import analyze_execution_thread

    state = _as_found(execution_dir, load_execution_state(execution_dir))
    if run_id is not None and state.run_by_id(run_id) is None:
        raise CLIError(
            f"run {run_id!r} is not in {_state_path(execution_dir)}"
            f" ({len(state.runs)} runs recorded)"
        )
    stored = _stored_checkpoints(execution_dir, state)
    thread = analyze_execution_thread(state, checkpoint_data=stored, target_run_id=run_id)
    family = family_of(execution_dir.resolve())
    if as_json:
        shown = thread_to_json(thread)
        if not family.empty:
            shown["family"] = family.model_dump(mode="json")
        click.echo(json.dumps(shown, indent=2))
        return
    console = make_console(wide)
    for line in family_lines(family):
        console.print(line, highlight=False, markup=False)
    _render_thread(thread, console)


def thread_to_json(thread: ExecutionThread) -> dict[str, Any]:
    """The JSON shape ``inspect thread --json`` prints (camelCase, codons newest first)."""
    return {
        "totalRuns": thread.total_runs,
        "hasRunningCodon": thread.has_running_codon,
        "failed": thread.failed,
        "nextCodonId": thread.next_codon_id,
        "codons": [
            {
                "codonId": tc.codon.codon_id,
                "status": tc.codon.status,
                "runId": tc.run_id,
                "runStatus": tc.run_status,
                "globalIndex": index,
                "runIndex": tc.run_index,
                "codonIndexInRun": tc.codon_index_in_run,
                "continuationSessionId": tc.continuation_session_id,
                "validatedCheckpoints": [
                    cp.model_dump(mode="json", by_alias=True) for cp in tc.validated_checkpoints
                ],
            }
            for index, tc in enumerate(thread.codons)
        ],
    }


# ----- loading -----


def _state_path(execution_dir: Path) -> Path:
    from hankweave.execution.layout import ExecutionLayout

    return ExecutionLayout(execution_dir).state_file


def load_execution_state(execution_dir: Path) -> HankweaveState:
    """Read the state strictly; every problem becomes one CLIError line (exit code 2)."""
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.state.store import StateLoadError, read_state_strict

    if not execution_dir.exists():
        raise CLIError(f"execution directory {execution_dir}: does not exist")
    if not execution_dir.is_dir():
        raise CLIError(f"execution directory {execution_dir}: not a directory")
    try:
        state, report = read_state_strict(ExecutionLayout(execution_dir).hankweave_dir)
    except StateLoadError as exc:
        raise CLIError(_one_line(str(exc))) from None
    except OSError as exc:
        where = exc.filename or _state_path(execution_dir)
        raise CLIError(f"{where}: cannot read ({exc.strerror or exc})") from None
    for warning in report.warnings:
        warn(warning)
    for issue in report.issues:
        warn(f"state {issue.type}: {issue.message}")
    return state


def _as_found(execution_dir: Path, state: HankweaveState) -> HankweaveState:
    """``state`` with a run whose runtime is gone shown crashed (in memory only)."""
    from hankweave.execution.document import as_found

    return as_found(execution_dir, state, warn=warn)


def _stored_checkpoints(execution_dir: Path, state: HankweaveState) -> CheckpointData | None:
    """``{sha: {message, timestamp, branch}}`` of the checkpoints the execution's store holds,
    or None (after a warning) when the store cannot be read without opening it."""
    from hankweave.checkpoints import CheckpointError, checkpoint_data_of
    from hankweave.cli.checkpoint_backend import configured_backend
    from hankweave.config.errors import ConfigError

    try:
        backend = configured_backend()
        store = backend(execution_dir)
        try:
            listed = store.list_read_only()
        finally:
            store.close()
    except (ConfigError, CheckpointError) as exc:
        warn(f"checkpoints not shown: {exc}")
        return None
    if listed is None:
        warn(f'checkpoints not shown: the "{backend.name}" checkpoint backend cannot list'
              " its checkpoints without opening its store")
        return None
    stored = checkpoint_data_of(listed)
    recorded = _recorded_checkpoints(state)
    # The runtime never prunes a checkpoint state names, so none left means another store.
    if recorded and recorded.isdisjoint(stored):
        warn(f"none of the {len(recorded)} checkpoints state records is in the"
              f' "{backend.name}" checkpoint store of {execution_dir} (the store is missing,'
              " or the execution ran with another checkpoints.backend); no checkpoints shown")
    return stored


def _recorded_checkpoints(state: HankweaveState) -> set[str]:
    from hankweave.state.types import record_checkpoints

    return {sha for run in state.runs for codon in run.codons
            for _, sha in record_checkpoints(codon)}


def warn(text: str) -> None:
    click.echo(f"warning: {_one_line(text)}", err=True)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ----- human output -----


def make_console(wide: bool = False) -> Console:
    """The console of the tables: the terminal's width (``_PIPE_WIDTH`` for a pipe or a file
    unless COLUMNS says otherwise); ``wide``: as wide as any row, so no column folds."""
    from rich.console import Console

    from hankweave.cli.tables import wide_console

    console = Console(highlight=False)
    if wide:
        return wide_console(console)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = _PIPE_WIDTH
    return console


def _money(value: float, complete: bool = True) -> str:
    """Dollars; a trailing ``+`` marks a lower bound (some usage had no known price)."""
    return f"${value:.4f}" + ("" if complete else "+")


def _time(timestamp: str | None) -> str:
    # ISO-8601 with milliseconds -> "YYYY-MM-DD HH:MM:SS"; the stored value is in --json.
    return timestamp.replace("T", " ")[:19] if timestamp else "-"


def _short(sha: str | None) -> str:
    return sha[:8] if sha else "-"


def _checkpoint(codon: CodonExecution) -> str | None:
    """The checkpoint that best describes where the record ended, rig-setup as a fallback."""
    from hankweave.state.types import record_checkpoints

    found = record_checkpoints(codon)
    return found[0][1] if found else None


def _failure(codon: CodonExecution) -> str:
    reason = getattr(codon, "failure_reason", None)
    if reason is None:
        return ""
    text = reason.type + (f": {reason.message}" if reason.message else "")
    return text + (" (retriable)" if reason.retriable else "")


def _origin(run: Run) -> str:
    from hankweave.state.types import ContinuationStart

    conditions = run.starting_conditions
    if not isinstance(conditions, ContinuationStart):
        return "fresh"
    source = conditions.source
    after = source.after_codon or "the beginning"
    reason = f", {conditions.reason}" if conditions.reason else ""
    return f"continues {source.run_id} after {after} (checkpoint {_short(source.checkpoint_sha)}{reason})"


def _render_state(state: HankweaveState, console: Console) -> None:
    if not state.runs:
        console.print("No runs recorded.")
    for run in state.runs:
        _render_run(run, run.run_id == state.current_run_id, console)
    console.print(_totals(state))


def _render_run(run: Run, current: bool, console: Console) -> None:
    """A run's header line, then its codon table."""
    from rich.text import Text

    from hankweave.state.costs import codon_cost_complete, run_cost, run_tokens

    tokens = run_tokens(run)
    origin = _origin(run)
    run_priced = all(codon_cost_complete(codon) for codon in run.codons)
    # Short lines, so that nothing wraps mid-phrase at 80 columns.
    header = Text.assemble(
        ("Run ", "bold"),
        (run.run_id, "bold"),
        f"{' (current)' if current else ''}  {run.status}",
        f"  {origin}\n" if origin == "fresh" else f"\n  {origin}\n",
        f"  started {_time(run.start_time)}  ended {_time(run.end_time)}"
        f"{f'  by {run.user}' if run.user else ''}\n",
        f"  cost {_money(run_cost(run), run_priced)}  tokens in {tokens.input_tokens}"
        f" out {tokens.output_tokens}  branch {run.git_branch or '-'}",
    )
    console.print(header)
    if not run.codons:
        console.print("  (no codons)\n")
        return
    console.print(_codon_table(run))
    console.print()


def _codon_table(run: Run) -> FitTable:
    """One row per codon record of a run; a Sentinels column only when a codon has some.

    Key columns: #, codon, status, cost; the rest fold into a detail line when narrow."""
    from rich.text import Text

    from hankweave.cli.tables import FitTable, TableColumn
    from hankweave.state.costs import codon_cost, codon_cost_complete, codon_tokens

    watched = any(getattr(codon, "sentinels", None) for codon in run.codons)
    columns = [
        TableColumn("#", key=True, justify="right"), TableColumn("Codon", key=True), TableColumn("Status", key=True),
        TableColumn("Cost", key=True, justify="right"),
        TableColumn("In", priority=1, justify="right"), TableColumn("Out", priority=1, justify="right"),
        TableColumn("Started", priority=3), TableColumn("Ended", priority=4), TableColumn("Checkpoint", priority=2),
        *([TableColumn("Sentinels", priority=2)] if watched else []),
        TableColumn("Failure", priority=0, wrap_at=24),
    ]
    table = FitTable(columns)
    for index, codon in enumerate(run.codons):
        used = codon_tokens(codon)
        table.add_row(
            str(index),
            Text(codon.codon_id),
            Text(codon.status),
            _money(codon_cost(codon), codon_cost_complete(codon)),
            str(used.input_tokens),
            str(used.output_tokens),
            _time(codon.start_time),
            _time(getattr(codon, "end_time", None)),
            _short(_checkpoint(codon)),
            *([_sentinels(codon)] if watched else []),
            Text(_failure(codon)),
        )
    return table


def _totals(state: HankweaveState) -> Text:
    """The closing line: every run's cost and tokens, sentinels apart, and whether it is a
    lower bound (some usage had no known price)."""
    from rich.text import Text

    from hankweave.state.costs import (
        codon_cost_complete,
        current_run_cost,
        total_cost,
        total_sentinel_cost,
        total_tokens,
    )

    priced = all(codon_cost_complete(codon) for run in state.runs for codon in run.codons)
    tokens = total_tokens(state)
    codon_count = sum(len(run.codons) for run in state.runs)
    # "current run" only while one is: a finished run is no longer current (its cost is above).
    current = (f" (current run {_money(current_run_cost(state))})"
               if state.current_run is not None else "")
    totals = (
        f"Total: {_count(len(state.runs), 'run')}, {_count(codon_count, 'codon record')}, cost"
        f" {_money(total_cost(state), priced)}{current}\n"
        f"  tokens in {tokens.input_tokens} out {tokens.output_tokens}"
        f" cache-read {tokens.cache_read_tokens} cache-write {tokens.cache_creation_tokens}"
    )
    sentinels = total_sentinel_cost(state)
    if sentinels:
        totals += f", sentinels {_money(sentinels)} (not in the total)"
    if not priced:
        totals += "\n+ a lower bound: some usage had no known price (costComplete: false)"
    return Text(totals)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _sentinels(codon: CodonExecution) -> str:
    """``2: 5 calls, $0.0012``: the codon's sentinels, their LLM calls and what they cost."""
    from hankweave.state.costs import sentinel_cost

    group = getattr(codon, "sentinels", None)
    if group is None:
        return ""
    states = getattr(group, "executed", None) or getattr(group, "loaded", None) or []
    calls = sum(state.llm_call_count for state in states)
    return f"{len(states)}: {calls} call{'s' if calls != 1 else ''}, {_money(sentinel_cost(codon))}"


def _render_thread(thread: ExecutionThread, console: Console) -> None:
    """Key columns: #, codon, status, run; the rest fold into a detail line when narrow."""
    from rich.text import Text

    from hankweave.cli.tables import FitTable, TableColumn

    if thread.codons:
        table = FitTable([
            TableColumn("#", key=True, justify="right"), TableColumn("Codon", key=True),
            TableColumn("Status", key=True), TableColumn("Run", key=True),
            TableColumn("Run status", priority=0), TableColumn("Run #", priority=3, justify="right"),
            TableColumn("Index in run", priority=4, justify="right"),
            TableColumn("Continues session", priority=2), TableColumn("Checkpoints", priority=1, wrap_at=20),
        ])
        for index, tc in enumerate(thread.codons):
            checkpoints = ", ".join(
                f"{cp.type} {_short(cp.sha)}" for cp in tc.validated_checkpoints
            )
            table.add_row(
                str(index),
                Text(tc.codon.codon_id),
                Text(tc.codon.status),
                Text(tc.run_id),
                tc.run_status,
                str(tc.run_index),
                str(tc.codon_index_in_run),
                Text(tc.continuation_session_id or "-"),
                Text(checkpoints or "-"),
            )
        console.print(table)
    else:
        console.print("The thread has no codons.")
    summary = (
        f"{_count(len(thread.codons), 'codon')} across {_count(thread.total_runs, 'run')};"
        f" next codon: {thread.next_codon_id or 'none'};"
        f" failed: {'yes' if thread.failed else 'no'};"
        f" running codon: {'yes' if thread.has_running_codon else 'no'}"
    )
    console.print(Text(summary))


@inspect_group.command("execution")
@_execution_option
@json_option
@click.option("--schema", "print_schema", is_flag=True,
              help="Print the JSON Schema of the --json document instead.")
def inspect_execution(execution_dir: Path, as_json: bool, print_schema: bool) -> None:
    """The whole execution in one nested view: its status and cost, thread, runs (codons,
    checkpoints) and interruptions.

    --json prints it as one versioned document (docs/state.md, "The execution document").
    """
    from hankweave.execution.document import document_json_schema, document_of

    if print_schema:
        click.echo(json.dumps(document_json_schema(), indent=2))
        return
    state = _as_found(execution_dir, load_execution_state(execution_dir))
    document = document_of(execution_dir, state)
    if as_json:
        click.echo(document.model_dump_json(indent=2))
        return
    execution = document.execution
    click.echo(f"Execution {execution.path}: {execution.status}, cost ${execution.total_cost:.4f}"
               f" (sentinels ${execution.sentinel_cost:.4f}), {execution.finished_codons}"
               f" codon(s) finished, next {document.thread.next_codon_id or '-'}")
    click.echo(f"  hank {execution.hank_path or '-'}  data {execution.data_path or '-'}"
               f"{f'  started by {execution.user}' if execution.user else ''}")
    if execution.hank_source is not None:
        click.echo(f"  {_hank_source_line(execution.hank_source)}")
    if execution.family is not None:
        for line in family_lines(execution.family):
            click.echo(f"  {line}")
    for run in document.runs:
        click.echo(f"  run {run.run_id}  {run.status}  ${run.cost:.4f}"
                   f"{f'  by {run.user}' if run.user else ''}  "
                   + ", ".join(f"{c.codon_id} {c.status}" for c in run.codons))
    if execution.result is not None:
        _echo_result(execution.result)
    if execution.pending_interruptions:
        click.echo(f"  {execution.pending_interruptions} interruption(s) waiting:"
                   f" hankweave inspect interruptions -e {execution.path} --pending")


def _echo_result(result: ExecutionResult) -> None:
    """The stored result, as ``inspect execution`` shows it."""
    codons = result.codons
    click.echo(f"  result: {result.status} at {result.finished_at}, {codons.completed}"
               f" completed, {codons.failed} failed, {codons.skipped} skipped;"
               f" ${result.cost:.4f}, tokens in {result.input_tokens} out {result.output_tokens},"
               f" {result.duration_ms / 1000:.1f}s")
    if result.failure:
        click.echo(f"    failure: {result.failure}")
    for output in result.outputs:
        click.echo(f"    output {output.path}  {output.bytes} bytes  sha256 {output.sha256[:12]}")
    if result.final_text:
        first = result.final_text.strip().splitlines()[0] if result.final_text.strip() else ""
        click.echo(f"    final answer: {first[:200]}")


@inspect_group.command("interruptions")
@_execution_option
@click.option("--pending", "only_pending", is_flag=True, help="Only those waiting for an answer.")
@json_option
@wide_option
def inspect_interruptions(execution_dir: Path, only_pending: bool, as_json: bool,
        wide: bool) -> None:
    """The execution's pauses for a human: what was asked, of which codon, and the answers.

    Answer a pending one with `hankweave answer -e DIR ID ...`.
    """
    state = load_execution_state(execution_dir)
    items = [i for i in state.interruptions if i.status == "pending" or not only_pending]
    if as_json:
        click.echo(json.dumps([i.model_dump(mode="json", by_alias=True, exclude_none=True)
                               for i in items], indent=2))
        return
    _render_interruptions(items, make_console(wide))


def _answer_forms(item: Interruption) -> str:
    """What an interruption takes: its options, ``--extend AMOUNT | --reject`` for a budget
    ceiling, or free text."""
    if item.kind == "budget":
        return "--extend AMOUNT | --reject"
    return ", ".join(item.options or []) or "(free text)"


def _render_interruptions(items: list[Interruption], console: Console) -> None:
    """Key columns: id, codon, status; the question first among the rest."""
    from rich.text import Text

    from hankweave.cli.tables import FitTable, TableColumn

    if not items:
        console.print("No interruptions recorded.")
        return
    table = FitTable([
        TableColumn("Id", key=True), TableColumn("Codon", key=True), TableColumn("Status", key=True),
        TableColumn("Question", priority=0, wrap_at=24), TableColumn("Answer", priority=1, wrap_at=16),
        TableColumn("Kind", priority=2), TableColumn("Options", priority=3, wrap_at=16),
        TableColumn("Default", priority=4, wrap_at=16), TableColumn("By", priority=5),
    ])
    for item in items:
        answer = "" if item.status == "pending" else json.dumps(item.answer)
        default = (f"{json.dumps(item.default_answer)} at {_time(item.deadline)}"
                   if item.deadline and item.status == "pending" else "")
        table.add_row(Text(item.id), Text(item.codon_id), item.status, Text(item.question),
                      Text(answer), item.kind,
                      Text(_answer_forms(item)), Text(default),
                      Text(item.answered_by or ""))
    console.print(table)
    waiting = sum(1 for item in items if item.status == "pending")
    if waiting:
        console.print(f"{waiting} waiting: hankweave answer -e DIR ID TEXT\n"
                      "  (or --approve, --reject, --extend AMOUNT, --json VALUE instead of TEXT)")


__all__ = ["inspect_group", "thread_to_json"]


def family_lines(family: Family) -> list[str]:
    """The fork family in words: where this execution's history comes from, and its forks
    (other executions' metadata: what they say is escaped for the terminal)."""
    from hankweave.bundle.closure import printable

    lines = []
    for depth, member in enumerate(family.ancestors):
        whose = "forked" if depth == 0 else "  which was forked"
        gone = "" if member.exists else " (gone)"
        lines.append(f"{whose} from {member.path}{gone} after codon {member.codon}"
                     f" (checkpoint {_short(member.checkpoint)})")
    for member in family.forks:
        lines.append(f"fork {member.path} after codon {member.codon}"
                     f" (checkpoint {_short(member.checkpoint)})")
    return [printable(line) for line in lines]


def _hank_source_line(source: DocumentHankSource) -> str:
    """``from remote URL REF at COMMIT path P`` and/or ``from bundle FILE (bundleHash H)``."""
    parts = []
    if source.remote:
        remote = source.remote
        ref = f" {remote['ref']}" if "ref" in remote else ""
        path = f" path {remote['path']}" if "path" in remote else ""
        parts.append(f"from remote {remote.get('url', '?')}{ref} at"
                     f" {remote.get('commit', '?')[:12]}{path}")
    if source.bundle_hash:
        parts.append(f"from bundle {source.bundle_path or '-'} (bundleHash {source.bundle_hash})")
    return "; ".join(parts)
