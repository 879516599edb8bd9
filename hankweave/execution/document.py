"""One nested document of an execution, as Agency inspects one (docs/state.md, "The execution
document"): the execution (hank, data, status, cost, result), its thread, its runs with their
codons and checkpoints, and its interruptions.

Built read-only from ``state.json`` (with its log applied) and ``execution-meta.json``; the
models are its versioned format (:data:`DOCUMENT_VERSION`, JSON Schema from
:func:`document_json_schema`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from hankweave.execution.family import Family
from hankweave.execution.result import ExecutionResult, read_result
from hankweave.state.costs import codon_cost, codon_cost_complete, total_cost, total_sentinel_cost
from hankweave.state.interruptions import resumable_run
from hankweave.state.thread import analyze_execution_thread
from hankweave.state.types import (
    CodonExecution,
    HankweaveState,
    Interruption,
    Run,
    is_live_run,
    record_checkpoints,
)

DOCUMENT_VERSION = 1

ExecutionStatus = Literal["pending", "running", "interrupted", "completed", "failed", "cancelled",
                          "timeout", "crashed"]
"""Agency's execution statuses: its newest run's (a ``resuming`` run's execution is
``running``), ``interrupted`` while an answer or a command would resume it."""


class _Document(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True, use_attribute_docstrings=True)


class DocumentCheckpoint(_Document):
    type: str
    sha: str


class DocumentCodon(_Document):
    codon_id: str
    status: str
    attempt: int = 1
    cost: float
    cost_complete: bool
    start_time: str
    end_time: str | None = None
    failure: str | None = None
    """The failure reason's message, for a failed record."""
    checkpoints: list[DocumentCheckpoint]
    sentinel_cost: float = 0.0


class DocumentRun(_Document):
    run_id: str
    user: str | None = None
    """Who started the run (``run --user``, ``$HANKWEAVE_USER``, the login name)."""
    status: str
    start_time: str
    end_time: str | None = None
    starting_conditions: dict[str, Any]
    cost: float
    codons: list[DocumentCodon]


class DocumentThreadCodon(_Document):
    codon_id: str
    run_id: str
    status: str


class DocumentThread(_Document):
    codons: list[DocumentThreadCodon]
    """The codon history across continuation runs, oldest first."""
    next_codon_id: str | None
    failed: bool


class DocumentHankSource(_Document):
    """Where the hank came from when it is not a hank directory (docs/bundles.md,
    docs/remote-hanks.md)."""

    bundle_hash: str | None = None
    bundle_path: str | None = None
    remote: dict[str, str] | None = None


class DocumentExecution(_Document):
    path: str
    user: str | None = None
    """Who started the execution: its first run's user (each run names its own)."""
    hank_path: str | None
    data_path: str | None
    hank_source: DocumentHankSource | None = None
    """A bundle's hash and file, a remote hank's URL, ref and commit; None for a directory."""
    status: ExecutionStatus
    total_cost: float
    sentinel_cost: float
    """The sentinels' LLM costs, apart from the total."""
    pending_interruptions: int
    finished_codons: int
    result: ExecutionResult | None = None
    """The stored result (``.hankweave/result.json``) of the newest run that ended completed,
    failed, cancelled or timeout; None before any did."""
    family: Family | None = None
    """The executions this one was forked from and its forks (docs/fork.md); None when it
    has neither."""


class ExecutionDocument(_Document):
    """``hankweave inspect execution --json``."""

    document_version: int = DOCUMENT_VERSION
    execution: DocumentExecution
    thread: DocumentThread
    runs: list[DocumentRun]
    """Newest first, as in ``state.json``."""
    interruptions: list[dict[str, Any]]
    """The records of ``state.json``'s ``interruptions``, oldest first."""


def execution_document(state: HankweaveState, *, path: str, hank_path: str | None,
                       data_path: str | None,
                       result: ExecutionResult | None = None,
                       hank_source: DocumentHankSource | None = None,
                       family: Family | None = None) -> ExecutionDocument:
    """The document of the execution whose state is ``state``."""
    thread = analyze_execution_thread(state)
    thread_codons = [DocumentThreadCodon(codon_id=item.codon.codon_id, run_id=item.run_id,
                                         status=item.codon.status)
                     for item in reversed(thread.codons)]
    waiting = sum(1 for item in state.interruptions if item.status == "pending")
    return ExecutionDocument(
        execution=DocumentExecution(
            path=path, user=state.runs[-1].user if state.runs else None,
            hank_path=hank_path, data_path=data_path, hank_source=hank_source,
            status=_status(state, thread.next_codon_id, waiting),
            total_cost=total_cost(state), sentinel_cost=total_sentinel_cost(state),
            pending_interruptions=waiting,
            finished_codons=sum(1 for c in thread_codons if c.status in ("completed",
                                                                         "skipped")),
            result=result, family=family if family is not None and not family.empty else None),
        thread=DocumentThread(codons=thread_codons, next_codon_id=thread.next_codon_id,
                              failed=thread.failed),
        runs=[_run(run) for run in state.runs],
        interruptions=[_interruption(item) for item in state.interruptions])


def as_found(execution_dir: Path, state: HankweaveState, *,
             warn: Callable[[str], None] | None = None) -> HankweaveState:
    """``state`` with every ``running`` run whose runtime is gone shown ``crashed`` (its
    unfinished codon ``failed``), as the next start will record it; in memory only.

    A runtime is gone when no live one holds ``runtime.lock`` (the lock's own rule: its process
    exists and its heartbeat is fresh).  An unreadable lock leaves the state as stored, and
    ``warn`` is told why.  Every reader of an execution it does not run (``inspect``, the
    dashboard, an executor's status) sees it through this.
    """
    if not any(is_live_run(run.status) for run in state.runs):
        return state
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.fsutil import utc_now_iso
    from hankweave.state.lock import LockCorruptError, live_runtime_lock
    from hankweave.state.thread import with_dead_runs_crashed

    try:
        if live_runtime_lock(ExecutionLayout(execution_dir).hankweave_dir) is not None:
            return state
    except (LockCorruptError, OSError) as exc:
        if warn is not None:
            warn(f"cannot tell whether a runtime still runs this execution: {exc}")
        return state
    return with_dead_runs_crashed(state, utc_now_iso())


def document_of(execution_dir: Path, state: HankweaveState) -> ExecutionDocument:
    """The document of the execution directory ``execution_dir`` whose state is ``state``
    (the hank and data paths from ``execution-meta.json``; None when it is unreadable), with
    a run whose runtime is gone shown crashed (:func:`as_found`)."""
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.execution.meta import ExecutionMetaError, load_execution_meta

    state = as_found(execution_dir, state)
    source = None
    try:
        meta = load_execution_meta(ExecutionLayout(execution_dir).meta_file)
        hank_path, data_path = meta.hank_path, meta.read_only_source_data_path
        if meta.bundle_hash or meta.remote:
            source = DocumentHankSource(bundle_hash=meta.bundle_hash,
                                        bundle_path=meta.bundle_path, remote=meta.remote)
    except ExecutionMetaError:
        hank_path = data_path = None
    from hankweave.execution.family import family_of

    return execution_document(state, path=str(execution_dir.resolve()), hank_path=hank_path,
                              data_path=data_path,
                              result=read_result(ExecutionLayout(execution_dir).result_file),
                              hank_source=source, family=family_of(execution_dir.resolve()))


def _status(state: HankweaveState, next_codon: str | None, waiting: int) -> ExecutionStatus:
    if not state.runs:
        return "pending"
    if waiting and resumable_run(state) is not None:
        return "interrupted"  # an answer resumes it (stale pending records do not count)
    newest = state.runs[0].status
    if newest == "completed" and next_codon is not None:
        return "interrupted"  # stopped between codons: it resumes
    if newest == "running" or newest == "resuming":
        return "running"
    if newest == "interrupted":  # its interruptions were answered: a run resumes it
        return "interrupted"
    return newest  # completed, failed, cancelled, timeout, crashed


def _run(run: Run) -> DocumentRun:
    codons = [_codon(record) for record in run.codons]
    return DocumentRun(
        run_id=run.run_id, user=run.user, status=run.status, start_time=run.start_time,
        end_time=run.end_time,
        starting_conditions=run.starting_conditions.model_dump(mode="json", by_alias=True,
                                                               exclude_none=True),
        cost=sum(codon.cost for codon in codons), codons=codons)


def _codon(record: CodonExecution) -> DocumentCodon:
    reason = getattr(record, "failure_reason", None)
    sentinels = getattr(record, "sentinels", None)
    return DocumentCodon(
        codon_id=record.codon_id, status=record.status,
        attempt=getattr(record, "attempt", None) or 1, cost=codon_cost(record),
        cost_complete=codon_cost_complete(record), start_time=record.start_time,
        end_time=getattr(record, "end_time", None),
        failure=reason.message if reason is not None else None,
        checkpoints=[DocumentCheckpoint(type=kind, sha=sha)
                     for kind, sha in record_checkpoints(record)],
        sentinel_cost=sentinels.total_cost if sentinels is not None else 0.0)


def _interruption(item: Interruption) -> dict[str, Any]:
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)


def document_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :class:`ExecutionDocument`."""
    schema = ExecutionDocument.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://hankweave.dev/schemas/execution-document-v{DOCUMENT_VERSION}.json"
    return schema
