"""``hankweave status``: the ledger joined with each execution's own state, and the workers.

The ledger says where a task is (queued, running on which worker, deferred) and how its last run
ended; the execution directory says how far it got (codons finished, the codon in progress, the
cost so far, pending interruptions).  A task the ledger calls running whose runtime lock is no
longer live lost its worker: it is shown ``requeued`` until a live worker requeues it (within
``workerSilenceS`` plus a heartbeat, :mod:`.recovery`).  A run that has ended according to its
execution directory is shown as it ended, even before the ledger hears of it (a broker that was
down when the run ended).  Each worker is listed with its host, pid, last heartbeat and what it
runs; one silent for ``workerSilenceS`` is flagged ``silent``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic.alias_generators import to_camel

from hankweave.api import (
    ExecutionLayout,
    LockCorruptError,
    StateLoadError,
    document_of,
    live_runtime_lock,
    parse_iso,
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


@dataclass(frozen=True)
class WorkerRow:
    worker: str
    host: str
    pid: int
    heartbeat_at: str
    heartbeat_age_s: float
    silent: bool
    running: list[str]
    queues: list[str]


def rows(ledger: Ledger) -> list[Row]:
    return [row_of(item) for item in ledger.all()]


def worker_rows(ledger: Ledger, silence_s: float) -> list[WorkerRow]:
    """Every worker with a heartbeat in the ledger, and the executions it runs."""
    from hankweave_executor_celery.recovery import age_s

    items = ledger.all()
    found = []
    for beat in ledger.workers():
        age = age_s(beat.heartbeat_at)
        found.append(WorkerRow(
            worker=beat.name, host=beat.host, pid=beat.pid, heartbeat_at=beat.heartbeat_at,
            heartbeat_age_s=round(age, 1), silent=age > silence_s,
            running=[item.execution_dir for item in items
                     if item.worker == beat.name and item.status == "running"],
            queues=beat.queues))
    return found


def row_of(item: Submission) -> Row:
    layout = ExecutionLayout(Path(item.execution_dir))
    codon, finished, cost, waiting = None, 0, 0.0, 0
    try:
        state, _ = read_state_strict(layout.hankweave_dir)
    except StateLoadError:
        state = None
    ended = None
    if state is not None:
        document = document_of(layout.path, state)
        ended = _ended_since_start(item, document)
        finished, cost = document.execution.finished_codons, document.execution.total_cost
        waiting = document.execution.pending_interruptions
        newest = document.runs[0] if document.runs else None
        if newest is not None and newest.codons:
            codon = newest.codons[-1].codon_id
    return Row(execution=item.execution_dir, hank=item.hank, status=ended or _status(item),
               worker=item.worker, codon=codon, finished_codons=finished, cost=cost,
               pending_interruptions=waiting, deliveries=item.deliveries,
               submitted_at=item.submitted_at, finished_at=item.finished_at,
               message=item.message)


_ENDED = {"completed": "completed", "interrupted": "interrupted", "failed": "failed",
          "cancelled": "stopped"}
"""A run's status in its state, as the ledger says it (a crashed run is not an end: it is
resumed)."""


def _ended_since_start(item: Submission, document: Any) -> str | None:
    """How the run the ledger has running ended, if its state says it has: the ledger's write
    may not have landed yet (the broker was down when it ended)."""
    newest = document.runs[0] if document.runs else None
    if item.status != "running" or newest is None or not newest.end_time or not item.started_at:
        return None
    if parse_iso(newest.end_time) < parse_iso(item.started_at):
        return None  # an earlier run's end: this one has not ended
    return _ENDED.get(newest.status)


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
    from hankweave_executor_celery.recovery import age_s

    return age_s(timestamp)


def _json(row: Row | WorkerRow) -> str:
    """One row as a JSON line, camelCase as every hankweave format; ``type`` says which."""
    kind = "worker" if isinstance(row, WorkerRow) else "execution"
    return json.dumps({"type": kind, **{to_camel(key): value
                                        for key, value in asdict(row).items()}})


def print_status(ledger: Ledger, *, as_json: bool, silence_s: float) -> None:
    found = rows(ledger)
    workers = worker_rows(ledger, silence_s)
    if as_json:
        lines: list[Row | WorkerRow] = [*found, *workers]
        for line in lines:
            click.echo(_json(line))
        return
    from rich.console import Console

    Console().print(table(found, workers))


def table(found: list[Row], workers: list[WorkerRow] | None = None) -> RenderableType:
    """One row per execution; at 80 columns the execution, its status and cost stay whole and
    the rest fold into a line under each row (the kernel's ``FitTable``).  Then the workers."""
    from rich.console import Group
    from rich.text import Text

    from hankweave.api import FitTable, TableColumn

    view = FitTable([
        TableColumn("Execution", key=True), TableColumn("Status", key=True),
        TableColumn("Worker", priority=1), TableColumn("Codon", priority=0),
        TableColumn("Done", priority=2, justify="right"),
        TableColumn("Cost", key=True, justify="right"),
        TableColumn("Waiting", priority=0, justify="right"),
        TableColumn("Note", priority=3),
    ])
    for row in found:
        view.add_row(Text(row.execution), row.status, Text(row.worker or "-"),
                     Text(row.codon or "-"), str(row.finished_codons), f"${row.cost:.4f}",
                     str(row.pending_interruptions or "-"), Text(row.message or ""))
    parts: list[RenderableType] = [view]
    if not found:
        parts.append(Text("Nothing submitted yet: hankweave submit HANK DATA"))
    if workers is not None:
        parts += [Text(""), worker_table(workers)]
    return Group(*parts)


def worker_table(workers: list[WorkerRow]) -> RenderableType:
    """One row per worker: its heartbeat's age (``silent`` past ``workerSilenceS``: its runs
    are being requeued) and what it runs."""
    from rich.text import Text

    from hankweave.api import FitTable, TableColumn

    if not workers:
        return Text("No worker is running: start one with `hankweave worker`")
    view = FitTable([
        TableColumn("Worker", key=True), TableColumn("Heartbeat", key=True),
        TableColumn("Host", priority=1), TableColumn("Pid", priority=2, justify="right"),
        TableColumn("Runs", key=True),
    ])
    for row in workers:
        beat = Text(f"{row.heartbeat_age_s:.0f}s ago")
        if row.silent:
            beat.append("  silent", style="bold red")
        runs = ", ".join(Path(run).name for run in row.running) or "-"
        view.add_row(Text(row.worker), beat, Text(row.host), str(row.pid), Text(runs))
    return view


def follow_status(ledger: Ledger, *, interval: float, as_json: bool, silence_s: float) -> None:
    """Refresh until every execution has finished (or Ctrl-C); ``--json`` prints each
    execution's changes (the workers' heartbeats would be a line every few seconds)."""
    try:
        if as_json:
            _follow_json(ledger, interval)
            return
        from rich.live import Live

        with Live(table(rows(ledger)), refresh_per_second=4) as live:
            while True:
                found = rows(ledger)
                live.update(table(found, worker_rows(ledger, silence_s)))
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
