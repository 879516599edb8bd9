"""``hankweave inspect proxy``: the requests an execution's agents sent through the LLM proxy
(``--proxy``, docs/proxy.md), by codon, and the ones refused or failed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.inspect import json_option, make_console, warn, wide_option
from hankweave.cli.options import execution_option

if TYPE_CHECKING:
    from rich.console import Console


@click.command("proxy")
@execution_option()
@json_option
@wide_option
def inspect_proxy(execution_dir: Path, as_json: bool, wide: bool) -> None:
    """Per codon: the requests its agent sent through the LLM proxy, how many were refused at
    a ceiling, held for a person or failed, the tokens and dollars they used, and the median
    time to the first byte; then each request that was refused or failed."""
    from hankweave.cli.errors import CLIError
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.proxy.report import proxy_report, read_proxy_log

    if not execution_dir.is_dir():
        raise CLIError(f"execution directory {execution_dir}: does not exist")
    path = ExecutionLayout(execution_dir).proxy_log
    try:
        read = read_proxy_log(path)
    except FileNotFoundError:
        raise CLIError(
            f"{path}: no LLM proxy record: this execution's runs did not use the proxy (its"
            f" next run can: hankweave run -e {shlex.quote(str(execution_dir))} --proxy)"
        ) from None
    except OSError as exc:
        raise CLIError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if read.skipped:
        lines = ", ".join(str(number) for number in read.skipped[:5])
        more = ", ..." if len(read.skipped) > 5 else ""
        warn(f"{path}: {len(read.skipped)} line(s) that are not records skipped (line"
             f" {lines}{more})")
    report = proxy_report(read.records)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    _render(report, make_console(wide))


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _render(report: dict[str, Any], console: Console) -> None:
    from rich.text import Text

    from hankweave.cli.tables import FitTable, TableColumn

    console.print(Text(
        f"{report['requests']} request(s) through the LLM proxy, {_money(report['cost'])}:"
        f" {report['refused']} refused, {report['held']} held for a person,"
        f" {report['errors']} failed"))
    table = FitTable([
        TableColumn("Codon", key=True), TableColumn("Requests", key=True, justify="right"),
        TableColumn("Refused", priority=0, justify="right"),
        TableColumn("Held", priority=2, justify="right"),
        TableColumn("Failed", priority=1, justify="right"),
        TableColumn("In tokens", priority=3, justify="right"),
        TableColumn("Out tokens", priority=2, justify="right"),
        TableColumn("Dollars", key=True, justify="right"),
        TableColumn("First byte", priority=3, justify="right", label="first byte p50"),
    ])
    for codon in report["codons"]:
        table.add_row(codon["codonId"] or "(between codons)", str(codon["requests"]),
                      str(codon["refused"]), str(codon["held"]), str(codon["errors"]),
                      f"{codon['inputTokens']:,}", f"{codon['outputTokens']:,}",
                      _money(codon["cost"]), _ms(codon["ttfbP50Ms"]))
    console.print(table)
    if report["problems"]:
        console.print(Text("Refused or failed (UTC):"))
    for problem in report["problems"]:
        why = (problem.get("refused") and f"refused ({problem['refused']})") or problem.get(
            "error") or f"status {problem['status']}"
        when = problem["at"][11:19]  # the time of day (UTC): the record has the whole date
        console.print(Text(f"  {when}  {problem.get('codonId') or '-'}"
                           f"  {problem['method']} /{problem['upstream']}{problem['path']}"
                           f"  {problem['status']}  {why}"))
