"""``hankweave compare A B``: two executions codon by codon (docs/fork.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hankweave.cli.errors import CLIError
from hankweave.exitcodes import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from rich.console import Console

    from hankweave.app.compare import CodonComparison, CodonSide, Comparison, ExecutionSummary
    from hankweave.cli.tables import FitTable


@click.command("compare")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The comparison as one JSON document.")
@click.option("--codon", "codon_ids", multiple=True, metavar="ID",
              help="Show the differences of this codon only (repeatable).")
@click.option("--stat", is_flag=True, help="List the changed files without their diffs.")
@click.option("--wide", is_flag=True, help="Every column as a column, however wide.")
@click.option("--exit-code", is_flag=True, help="Exit 1 when the executions differ (as `git"
              " diff --exit-code`).")
def compare_command(a: Path, b: Path, as_json: bool, codon_ids: tuple[str, ...], stat: bool,
                    wide: bool, exit_code: bool) -> None:
    """Compare the executions A and B codon by codon: status, cost, tokens, time and turns;
    the files of their workspaces at each codon's checkpoint (unified diffs for text, sizes
    for binaries); the agents' final answers; and the first codon where they diverge.

    Either may be running: nothing is locked or written. Typical: A an execution and B a fork
    of it (`hankweave fork`).
    """
    from hankweave.app.compare import CompareError, compare_executions
    from hankweave.registry import get_registry

    try:
        comparison = compare_executions(a.resolve(), b.resolve(), registry=get_registry())
    except CompareError as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    unknown = set(codon_ids) - {row.codon_id for row in comparison.codons}
    if unknown:
        known = ", ".join(dict.fromkeys(row.codon_id for row in comparison.codons)) or "none"
        raise CLIError(f"--codon {', '.join(sorted(unknown))}: not a codon of either "
                       f"execution (their codons: {_shown(known)})", EXIT_USAGE)
    if as_json:
        click.echo(comparison.model_dump_json(indent=2))
    else:
        _show(comparison, set(codon_ids), stat=stat, wide=wide)
    if exit_code and comparison.first_divergence is not None:
        raise SystemExit(EXIT_FAILED)


def _show(comparison: Comparison, only: set[str], *, stat: bool, wide: bool) -> None:
    from rich.console import Console

    from hankweave.cli.tables import wide_console

    console = Console(highlight=False, markup=False)  # names and diffs are the agents' text
    if wide:
        wide_console(console)
    related = comparison.relation is not None
    console.print(_header("A", comparison.a, related))
    console.print(_header("B", comparison.b, related))
    if comparison.relation:
        console.print(f"  {_shown(comparison.relation)}")
    console.print(_table(comparison))
    first = comparison.first_divergence
    if first is None:
        console.print("No difference: every codon has the same status, workspace and output.")
        return
    row = comparison.codons[first - 1]
    console.print(f"First divergence: codon {_shown(row.codon_id)} (#{first}): "
                  f"{', '.join(row.differences)}")
    shown: CodonComparison | None = None
    for row in comparison.codons:
        if row.differences and (not only or row.codon_id in only):
            _details(console, row, stat=stat, like=shown)
            shown = row


def _header(name: str, side: ExecutionSummary, related: bool) -> str:
    """``related``: the relation line below says how the two are forks."""
    from hankweave.cli.tables import money

    fork = (f"; a fork of {side.forked_from.execution} after {side.forked_from.codon}"
            if side.forked_from and not related else "")
    return _shown(f"{name}  {side.path}\n   {side.status}, {side.codons} codons,"
                  f" {money(side.cost)}, tokens in {side.input_tokens} out"
                  f" {side.output_tokens}{fork}")


def _table(comparison: Comparison) -> FitTable:
    from hankweave.cli.tables import FitTable, TableColumn

    table = FitTable([
        TableColumn("#", key=True, justify="right"), TableColumn("Codon", key=True),
        TableColumn("Status A/B", key=True), TableColumn("Workspace", key=True),
        TableColumn("Cost A", priority=0, justify="right"),
        TableColumn("Cost B", priority=0, justify="right"),
        TableColumn("Output", priority=1),
        TableColumn("Tokens A", priority=2, justify="right"),
        TableColumn("Tokens B", priority=2, justify="right"),
        TableColumn("Time A/B", priority=3), TableColumn("Turns A/B", priority=4),
    ])
    for row in comparison.codons:
        a, b = row.a, row.b
        table.add_row(str(row.position), _shown(row.codon_id), _pair(a, b, lambda s: s.status),
                      _workspace(row), _cost(a), _cost(b), _output(row), _tokens(a), _tokens(b),
                      _pair(a, b, lambda s: "-" if s.seconds is None else f"{s.seconds:.1f}s"),
                      _pair(a, b, lambda s: "-" if s.turns is None else str(s.turns)))
    return table


def _pair(a: CodonSide | None, b: CodonSide | None, show: Callable[[CodonSide], str]) -> str:
    left, right = (show(side) if side else "—" for side in (a, b))
    return left if left == right else f"{left} / {right}"


def _workspace(row: CodonComparison) -> str:
    if row.same_workspace is None:
        return "—" if row.a is None or row.b is None else "-"
    if row.same_workspace:
        return "same (shared)" if row.same_checkpoint else "same"
    return _count_files(row)


def _output(row: CodonComparison) -> str:
    if row.same_output is None:
        return "-"
    return "same" if row.same_output else "differs"


def _cost(side: CodonSide | None) -> str:
    from hankweave.cli.tables import money

    return money(side.cost) if side else "—"


def _tokens(side: CodonSide | None) -> str:
    return f"{side.input_tokens}/{side.output_tokens}" if side else "—"


def _details(console: Console, row: CodonComparison, *, stat: bool,
             like: CodonComparison | None) -> None:
    """A differing codon's files and answer; files that differ exactly as at the codon shown
    before (a change carried on through the codons after it) are named, not shown again."""
    from rich.text import Text

    console.print(Text(f"\n── {row.position}. {_shown(row.codon_id)}: "
                       f"{', '.join(row.differences)}",
                       style="bold"))
    if row.files and like is not None and like.files == row.files:
        changes = ", ".join(f"{_shown(change.path)} {change.change}" for change in row.files[:5])
        more = f" and {len(row.files) - 5} more" if len(row.files) > 5 else ""
        console.print(f"  the same difference as at {_shown(like.codon_id)} (#{like.position}):"
                      f" {changes}{more}")
    else:
        _files(console, row, stat=stat)
    if row.output_diff and not stat:
        console.print("  the agent's final answer:")
        _diff(console, row.output_diff, cut=False)


def _count_files(row: CodonComparison) -> str:
    return f"{len(row.files)} file{'s differ' if len(row.files) != 1 else ' differs'}"


def _files(console: Console, row: CodonComparison, *, stat: bool) -> None:
    for change in row.files:
        sizes = (f"{change.size_a} → {change.size_b} bytes" if change.change == "changed"
                 else f"{change.size_b if change.change == 'added' else change.size_a} bytes")
        what = "binary, " if change.binary else ""
        mode = f", now {change.mode}" if change.mode else ""
        console.print(f"  {change.change:<8} {_shown(change.path)} ({what}{sizes}{mode})")
        if change.diff and not stat:
            _diff(console, change.diff, cut=change.truncated)


def _diff(console: Console, diff: str, *, cut: bool) -> None:
    from rich.text import Text

    for line in diff.splitlines():
        style = ("green" if line.startswith("+") and not line.startswith("+++") else
                 "red" if line.startswith("-") and not line.startswith("---") else
                 "cyan" if line.startswith("@@") else None)
        console.print(Text("    " + _shown(line), style=style or ""), soft_wrap=True)
    if cut:
        console.print("    … (cut; the whole file differs further: see --json or the checkpoints)")


def _shown(text: str) -> str:
    """``text`` safe for a terminal: control and bidi characters escaped, tabs and line
    breaks kept."""
    from hankweave.bundle.closure import printable

    return "\n".join("\t".join(printable(part) for part in line.split("\t"))
                     for line in text.split("\n"))
