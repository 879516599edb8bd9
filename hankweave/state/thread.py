"""The execution thread: one newest-first codon history across a chain of continuation runs.

When a run stops partway through the plan and a later run continues it, ``state.json`` holds two
partial histories.  :func:`analyze_execution_thread` reconciles them by walking from the newest
run back through each continuation's parent, keeping from every parent only the codons the
continuation builds on.  The result answers what the runtime asks at startup and on resume:
which codon runs next, whether the thread has failed, and which agent session a
``continue-previous`` codon resumes.

This follows ``server/execution-thread.ts`` of Hankweave 0.10.0, with these differences:

* the codon a continuation names (``afterCodon``) is located by its **last** record in the
  parent run, not its first: retries append records, and the last one is the attempt the
  continuation was made from;
* runs and plan positions are indexed once, so the analysis takes time linear in the number of
  codon records instead of searching ``runs`` for every parent;
* ``total_runs`` counts the runs actually visited; the original's ``runIndex + 1`` also counts
  the run that closes a continuation cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hankweave.state.types import (
    CheckpointInfo,
    CodonExecution,
    CodonId,
    ContinuationStart,
    ExecutionCodonEntry,
    HankweaveState,
    Run,
    RunId,
    RunStatus,
    SessionId,
    is_terminal_status,
    last_record,
    record_checkpoints,
)

CheckpointData = Mapping[str, Mapping[str, str]]
"""Checkpoint store data by SHA: ``{sha: {"message", "timestamp", "branch"}}``."""


@dataclass(frozen=True, slots=True)
class ThreadCodon:
    """One codon record with its run context and its position in the thread."""

    codon: CodonExecution
    run_id: RunId
    run_status: RunStatus
    run_start_time: str
    # None while the run is still running.
    run_end_time: str | None
    git_branch: str
    # 0 is the newest codon across all runs of the thread.
    global_index: int
    # 0 is the start run; larger numbers move up the continuation chain.
    run_index: int
    # The record's index in its own run's ``codons`` list.
    codon_index_in_run: int
    # Only checkpoints the checkpoint store confirms; empty when no store data was supplied.
    validated_checkpoints: list[CheckpointInfo]
    # The session this codon continued from (its ``previousSessionId``), if any.
    continuation_session_id: SessionId | None


@dataclass(frozen=True, slots=True)
class ExecutionThread:
    """The reconstructed history (newest first) and what the runtime should do next."""

    codons: list[ThreadCodon] = field(default_factory=list)
    total_runs: int = 0
    # True when any codon in the thread is not terminal ("not yet finished", not only "running").
    has_running_codon: bool = False
    next_codon_id: CodonId | None = None

    @property
    def failed(self) -> bool:
        """Whether the thread as a whole has failed.

        Only the newest codon decides: it failed explicitly, or its run failed or crashed while
        the codon was still unfinished.  A historical run marked failed (for example by a server
        shutdown after its codons completed) does not fail the thread.  An empty thread has not
        failed.
        """
        if not self.codons:
            return False
        newest = self.codons[0]
        if newest.codon.status == "failed":
            return True
        return newest.run_status in ("failed", "crashed") and not is_terminal_status(
            newest.codon.status
        )


def analyze_execution_thread(
    state: HankweaveState,
    checkpoint_data: CheckpointData | None = None,
    target_run_id: RunId | None = None,
) -> ExecutionThread:
    """Build the execution thread that ends at ``target_run_id`` (default: the newest run).

    The start run contributes all its codons.  Each continuation then moves to its parent
    (``startingConditions.source.runId``), which contributes:

    * nothing when ``afterCodon`` is null (the continuation started from the beginning);
    * its codons up to and including ``afterCodon`` (a normal continuation);
    * its codons before ``afterCodon`` when that codon's ``rigSetupCheckpoint`` is the
      continuation's ``checkpointSha`` (a rig-setup continuation: the codon runs again);
    * all its codons when ``afterCodon`` has no record there.

    The walk ends at a fresh run, at a parent missing from ``state.runs``, or at a run already
    visited (a continuation cycle).  ``checkpoint_data`` (checkpoint store data by SHA) filters
    each codon's ``validated_checkpoints``; without it those lists are empty.  An unknown
    ``target_run_id`` or a state without runs gives an empty thread.
    """
    # Built once: the walk and the next-codon rules look runs and plan positions up by id.
    # First occurrence wins, as with the original's ``find``/``findIndex``.
    runs_by_id: dict[RunId, Run] = {}
    for run in state.runs:
        runs_by_id.setdefault(run.run_id, run)

    if target_run_id is not None:
        start_run = runs_by_id.get(target_run_id)
    else:
        start_run = state.runs[0] if state.runs else None
    if start_run is None:
        return ExecutionThread()

    codons: list[ThreadCodon] = []
    visited: set[RunId] = set()
    current: Run | None = start_run
    until_codon = len(start_run.codons) - 1
    run_index = 0
    has_running_codon = False

    while current is not None and current.run_id not in visited:
        visited.add(current.run_id)
        run_end_time = current.end_time or None
        for index in range(until_codon, -1, -1):
            codon = current.codons[index]
            if not is_terminal_status(codon.status):
                has_running_codon = True
            codons.append(
                ThreadCodon(
                    codon=codon,
                    run_id=current.run_id,
                    run_status=current.status,
                    run_start_time=current.start_time,
                    run_end_time=run_end_time,
                    git_branch=current.git_branch,
                    global_index=len(codons),
                    run_index=run_index,
                    codon_index_in_run=index,
                    validated_checkpoints=_validated_checkpoints(codon, checkpoint_data),
                    continuation_session_id=getattr(codon, "previous_session_id", None) or None,
                )
            )

        conditions = current.starting_conditions
        if not isinstance(conditions, ContinuationStart):
            break  # a fresh run begins the thread
        source = conditions.source
        parent = runs_by_id.get(source.run_id)
        if parent is None:
            break  # the chain ends where its parent is gone
        until_codon = _parent_until_codon(parent, source.after_codon, source.checkpoint_sha)
        current = parent
        run_index += 1

    next_codon_id = _next_codon_id(
        state.execution_plan, start_run, runs_by_id, codons, has_running_codon
    )
    return ExecutionThread(
        codons=codons,
        total_runs=len(visited),
        has_running_codon=has_running_codon,
        next_codon_id=next_codon_id,
    )


def _after_codon_record(run: Run, after_codon: CodonId) -> tuple[int, CodonExecution] | None:
    # Deliberate fix: the original takes the FIRST record of ``afterCodon`` in the parent
    # (``findIndex``).  Retries append records and the last one is the current attempt, so a
    # continuation after a codon that failed, was retried and completed would otherwise keep
    # only up to the stale failed attempt and the thread would look failed.
    return last_record(run, after_codon)


def _is_rig_setup_continuation(codon: CodonExecution, checkpoint_sha: str) -> bool:
    """The continuation restored the codon's rig-setup checkpoint, so that codon runs again."""
    return getattr(codon, "rig_setup_checkpoint", None) == checkpoint_sha


def _parent_until_codon(parent: Run, after_codon: CodonId | None, checkpoint_sha: str) -> int:
    """The index of the parent's newest codon record that belongs to the thread (-1: none)."""
    if not after_codon:
        return -1
    found = _after_codon_record(parent, after_codon)
    if found is None:
        return len(parent.codons) - 1
    index, record = found
    if _is_rig_setup_continuation(record, checkpoint_sha):
        return index - 1
    return index


def _next_codon_id(
    plan: list[ExecutionCodonEntry],
    start_run: Run,
    runs_by_id: Mapping[RunId, Run],
    codons: list[ThreadCodon],
    has_running_codon: bool,
) -> CodonId | None:
    """The codon the runtime would execute next if it continued this thread."""
    plan_index: dict[CodonId, int] = {}
    for position, entry in enumerate(plan):
        plan_index.setdefault(entry.codon_id, position)

    def successor(codon_id: CodonId) -> CodonId | None:
        position = plan_index.get(codon_id)
        if position is None or position + 1 >= len(plan):
            return None
        return plan[position + 1].codon_id

    first = plan[0].codon_id if plan else None

    if start_run.status == "failed":
        return None
    if has_running_codon:
        return None
    if codons:
        # The original also has a rig-setup branch here, guarded by ``codons.length === 0``
        # inside this non-empty case, so it can never run; it is left out.  A rig-setup
        # continuation with earlier codons reaches the same answer anyway: the parent's codons
        # stop just before the codon that reruns, whose id is their plan successor.
        return successor(codons[0].codon.codon_id)

    # Nothing executed yet anywhere in the thread.
    conditions = start_run.starting_conditions
    if not isinstance(conditions, ContinuationStart):
        return first
    source = conditions.source
    if not source.after_codon:
        return first
    source_run = runs_by_id.get(source.run_id)
    if source_run is None:
        return None
    found = _after_codon_record(source_run, source.after_codon)
    if found is not None and _is_rig_setup_continuation(found[1], source.checkpoint_sha):
        return source.after_codon
    return successor(source.after_codon)


def _validated_checkpoints(
    codon: CodonExecution, checkpoint_data: CheckpointData | None
) -> list[CheckpointInfo]:
    """The codon's checkpoints that the checkpoint store confirms, rig-setup first.

    A SHA recorded in state but absent from the store is dropped: state alone is history, not
    proof that the checkpoint can be restored.
    """
    if not checkpoint_data:
        return []
    candidates = reversed(record_checkpoints(codon))
    confirmed: list[CheckpointInfo] = []
    for kind, sha in candidates:
        data = checkpoint_data.get(sha)
        if data:
            confirmed.append(
                CheckpointInfo(
                    type=kind,
                    sha=sha,
                    message=data["message"],
                    timestamp=data["timestamp"],
                    branch=data["branch"],
                )
            )
    return confirmed


def get_next_codon_id(thread: ExecutionThread) -> CodonId | None:
    """The next codon chosen during analysis (it is not recomputed)."""
    return thread.next_codon_id or None


def find_continuation_session_id(
    thread: ExecutionThread, codon_id: CodonId, state: HankweaveState
) -> SessionId | None:
    """The agent session a ``continue-previous`` codon should resume, or None.

    Only a plan entry whose codon asks for ``continue-previous`` has one.  The session is that of
    the previous plan entry's newest record in the thread that has a ``claudeSessionId`` and is
    either completed, or skipped after producing assistant messages.  The runtime fails the codon
    (not retriably) when this returns None.
    """
    plan = state.execution_plan
    position = next((i for i, entry in enumerate(plan) if entry.codon_id == codon_id), None)
    if position is None or plan[position].codon.continuation_mode != "continue-previous":
        return None
    if position == 0:
        return None
    previous_id = plan[position - 1].codon_id
    for thread_codon in thread.codons:
        codon = thread_codon.codon
        if codon.codon_id != previous_id:
            continue
        session_id = getattr(codon, "claude_session_id", None)
        if not session_id:
            continue
        if codon.status == "completed":
            return session_id
        if codon.status == "skipped" and (getattr(codon, "assistant_message_count", None) or 0) > 0:
            return session_id
    return None
