"""Building the execution's stored result when a run ends (:mod:`hankweave.execution.result`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hankweave.codonlog import summarize_log
from hankweave.execution.meta import ExecutionMetaError, load_execution_meta
from hankweave.execution.result import (
    RESULT_TEXT_LIMIT,
    ExecutionResult,
    ResultCodons,
    ResultOutput,
    write_result,
)
from hankweave.fsutil import parse_iso
from hankweave.runtime.context import RunContext
from hankweave.runtime.outputs import expand_output_globs
from hankweave.state.costs import run_tokens, total_cost
from hankweave.state.thread import analyze_execution_thread
from hankweave.state.types import STOPPED_RUN_STATUSES, CodonExecution, Run

RESULT_STATUSES = frozenset({"completed", *STOPPED_RUN_STATUSES})
"""The run ends that store a result: an interrupted or crashed run is resumed, not done."""


def store_result(ctx: RunContext, run: Run) -> None:
    """Write the result of the execution whose run ``run`` just ended, if it ended for good."""
    if run.status in RESULT_STATUSES:
        write_result(ctx.layout.result_file, build_result(ctx, run))


def build_result(ctx: RunContext, run: Run) -> ExecutionResult:
    state = ctx.state
    newest: dict[str, CodonExecution] = {}
    for item in analyze_execution_thread(state).codons:  # newest first
        newest.setdefault(item.codon.codon_id, item.codon)
    records = list(newest.values())
    tokens = [run_tokens(each) for each in state.runs]
    first_start = parse_iso(_own_first_run(ctx, state.runs).start_time)
    end = parse_iso(run.end_time or run.start_time)
    failed = next((r for r in records if r.status == "failed"), None)
    reason = getattr(failed, "failure_reason", None)
    return ExecutionResult(
        status=run.status, run_id=run.run_id, user=run.user,
        finished_at=run.end_time or run.start_time,
        codons=ResultCodons(**{status: sum(1 for r in records if r.status == status)
                               for status in ("completed", "failed", "skipped")}),
        cost=total_cost(state), input_tokens=sum(t.input_tokens for t in tokens),
        output_tokens=sum(t.output_tokens for t in tokens),
        duration_ms=max(0, int((end - first_start).total_seconds() * 1000)),
        outputs=_outputs(ctx),
        final_text=_final_text(ctx, next((r for r in records if r.status == "completed"), None)),
        failure=f"{failed.codon_id}: {reason.message}" if failed is not None and reason
        is not None and reason.message else None)


def _own_first_run(ctx: RunContext, runs: list[Run]) -> Run:
    """The execution's first run (runs are newest first); a fork's first own run, not the
    source's that it keeps (docs/fork.md), or the fork would seem to have taken since then."""
    try:
        origin = load_execution_meta(ctx.layout.meta_file).forked_from
    except ExecutionMetaError:
        origin = None
    if origin is not None:
        own = [run for run in runs if run.start_time >= origin.forked_at]
        if own:
            return own[-1]
    return runs[-1]


def _outputs(ctx: RunContext) -> list[ResultOutput]:
    """The files the hank's ``outputFiles`` name, in ``agentRoot/`` (a directory: its files)."""
    root = ctx.layout.agent_root
    patterns = [pattern for site in ctx.hank.codon_sites()
                for group in site.codon.output_files or () for pattern in group.copy_]
    if not patterns or not root.is_dir():
        return []
    files: list[str] = []
    for rel in expand_output_globs(root, patterns):
        path = root / rel
        if path.is_dir():
            files += sorted(str(inner.relative_to(root)).replace("\\", "/")
                            for inner in path.rglob("*") if inner.is_file())
        elif path.is_file():
            files.append(rel)
    return [ResultOutput(path=rel, bytes=(root / rel).stat().st_size,
                         sha256=_sha256(root / rel)) for rel in dict.fromkeys(files)]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _final_text(ctx: RunContext, record: CodonExecution | None) -> str | None:
    """The final answer of ``record``'s session: its codon log's last successful result."""
    log_path = getattr(record, "claude_log_path", None)
    if not log_path:
        return None
    path = Path(log_path) if Path(log_path).is_absolute() else ctx.layout.path / log_path
    if not path.is_file():
        return None
    parser, _ = summarize_log(path)
    text = parser.result.result if parser.result is not None and parser.success else None
    if not text:
        return None
    return text if len(text) <= RESULT_TEXT_LIMIT else text[:RESULT_TEXT_LIMIT - 1] + "…"
