"""``hankweave status``: the ledger joined with each execution's own state.

The ledger says where a task is (queued, running on which worker, deferred) and how its last run
ended; the execution directory says how far it got (codons finished, the codon in progress, the
cost so far, pending interruptions).  A task the ledger calls running whose runtime lock is no
longer live lost its worker: it is shown ``requeued`` until the broker delivers it again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
from pydantic.alias_generators import to_camel

from hankweave.api import (
    ExecutionLayout,
    LockCorruptError,
    StateLoadError,
    document_of,
    live_runtime_lock,
    read_state_strict,
)
from hankweave_executor_celery.ledger import FINISHED, Ledger, Submission

if TYPE_CHECKING:
    from rich.console import RenderableType

REQUEUE_GRACE_S = 15.0
"""A task started this recently may not have taken its lock yet: not called requeued."""


@dataclass(frozen=True)
class Row:
    execution: str
    hank: str | None
    status: str
    worker: str | None
    codon: str | None
    finished_codons: int
    cost: float
    pending_interruptions: int
    deliveries: int
    submitted_at: str
    finished_at: str | None
    message: str | None


def rows(ledger: Ledger) -> list[Row]:
    return [row_of(item) for item in ledger.all()]


def row_of(item: Submission) -> Row:
    layout = ExecutionLayout(Path(item.execution_dir))
    codon, finished, cost, waiting = None, 0, 0.0, 0
    try:
        state, _ = read_state_strict(layout.hankweave_dir)
    except StateLoadError:
        state = None
    if state is not None:
        document = document_of(layout.path, state)
        finished, cost = document.execution.finished_codons, document.execution.total_cost
        waiting = document.execution.pending_interruptions
        newest = document.runs[0] if document.runs else None
        if newest is not None and newest.codons:
            codon = newest.codons[-1].codon_id
    return Row(execution=item.execution_dir, hank=item.hank, status=_status(item),
               worker=item.worker, codon=codon, finished_codons=finished, cost=cost,
               pending_interruptions=waiting, deliveries=item.deliveries,
               submitted_at=item.submitted_at, finished_at=item.finished_at,
               message=item.message)


def _status(item: Submission) -> str:
    if item.status != "running":
        return item.status
    return "running" if looks_live(item) else "requeued"


def looks_live(item: Submission) -> bool:
    """Whether a submission the ledger has as running still runs: its runtime holds the lock,
    or it started moments ago (its runtime may not hold the lock yet).  Otherwise its worker
    is gone and the task waits for its redelivery."""
    try:
        live = live_runtime_lock(ExecutionLayout(Path(item.execution_dir)).hankweave_dir)
    except LockCorruptError:
        return True
    return live is not None or _age(item.started_at) < REQUEUE_GRACE_S


def _age(timestamp: str | None) -> float:
    from hankweave.api import parse_iso

    if not timestamp:
        return float("inf")
    return time.time() - parse_iso(timestamp).timestamp()


def _json(row: Row) -> str:
    """One row as a JSON line, camelCase as every hankweave format."""
    return json.dumps({to_camel(key): value for key, value in asdict(row).items()})


def print_status(ledger: Ledger, *, as_json: bool) -> None:
    found = rows(ledger)
    if as_json:
        for row in found:
            click.echo(_json(row))
        return
    from rich.console import Console

    Console().print(table(found))


def table(found: list[Row]) -> RenderableType:
    """One row per execution; at 80 columns the execution, its status and cost stay whole and
    the rest fold into a line under each row (the kernel's ``FitTable``)."""
    from rich.console import Group
    from rich.text import Text

    from hankweave.api import FitTable, TableColumn

    view = FitTable([
        TableColumn("Execution", key=True), TableColumn("Status", key=True),
        TableColumn("Worker", priority=1), TableColumn("Codon", priority=0),
        TableColumn("Done", priority=2, justify="right"),
        TableColumn("Cost", key=True, justify="right"),
        TableColumn("Waiting", priority=0, justify="right"),
    ])
    for row in found:
        view.add_row(Text(row.execution), row.status, Text(row.worker or "-"),
                     Text(row.codon or "-"), str(row.finished_codons), f"${row.cost:.4f}",
                     str(row.pending_interruptions or "-"))
    if not found:
        return Group(view, Text("Nothing submitted yet: hankweave submit HANK DATA"))
    return view


def follow_status(ledger: Ledger, *, interval: float, as_json: bool) -> None:
    """Refresh until every execution has finished (or Ctrl-C)."""
    try:
        if as_json:
            _follow_json(ledger, interval)
            return
        from rich.live import Live

        with Live(table(rows(ledger)), refresh_per_second=4) as live:
            while True:
                found = rows(ledger)
                live.update(table(found))
                if all(row.status in FINISHED for row in found):
                    return
                time.sleep(interval)
    except KeyboardInterrupt:
        return


def _follow_json(ledger: Ledger, interval: float) -> None:
    seen: dict[str, Row] = {}
    while True:
        found = rows(ledger)
        for row in found:
            if seen.get(row.execution) != row:
                click.echo(_json(row))
                seen[row.execution] = row
        if all(row.status in FINISHED for row in found):
            return
        time.sleep(interval)
