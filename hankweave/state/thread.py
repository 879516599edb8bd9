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
  the run that closes a continuation cycle;
* a thread codon's validated checkpoints are looked up when read, not for every record up front.

A runtime asks for the thread several times per codon, and a long loop's thread holds thousands
of records; :class:`ThreadTracker` keeps the newest run's part of it up to date from the records
that changed since the last question, so each answer costs what changed, not the whole history.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import RunCrashed, RunCrashedData
from hankweave.state.types import (
    STOPPED_RUN_STATUSES,
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
    changed_positions,
    is_live_run,
    is_terminal_status,
    last_record,
    plan_positions,
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
    # 0 is the start run; larger numbers move up the continuation chain.
    run_index: int
    # The record's index in its own run's ``codons`` list.
    codon_index_in_run: int
    # The session this codon continued from (its ``previousSessionId``), if any.
    continuation_session_id: SessionId | None
    # The checkpoint store's data, read when ``validated_checkpoints`` is.
    checkpoint_data: CheckpointData | None = field(default=None, compare=False, repr=False)

    @property
    def validated_checkpoints(self) -> list[CheckpointInfo]:
        """Only checkpoints the checkpoint store confirms; empty when no store data was
        supplied."""
        return _validated_checkpoints(self.codon, self.checkpoint_data)


@dataclass(frozen=True, slots=True)
class ExecutionThread:
    """The reconstructed history (newest first) and what the runtime should do next."""

    codons: list[ThreadCodon] = field(default_factory=list)
    total_runs: int = 0
    # True when any codon in the thread is not terminal ("not yet finished", not only "running").
    has_running_codon: bool = False
    next_codon_id: CodonId | None = None
    # Thread codons by (loop id, iteration), oldest first, when a tracker keeps that index.
    iteration_index: _IterationView | None = field(default=None, compare=False, repr=False)

    def iteration_codons(self, loop_id: str, iteration: int) -> Iterable[ThreadCodon]:
        """The thread codons of one loop iteration, newest first."""
        indexed = self.iteration_index.get((loop_id, iteration)) \
            if self.iteration_index is not None else None
        if indexed is not None:
            return reversed(indexed)
        return (tc for tc in self.codons if _iteration_key(tc.codon) == (loop_id, iteration))

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
        if newest.run_status == "interrupted":
            return False  # it waits for a person: the next run resumes it (ours)
        if newest.codon.status == "failed":
            return True
        return (newest.run_status in STOPPED_RUN_STATUSES or newest.run_status == "crashed") \
            and not is_terminal_status(
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
    runs_by_id = _index_runs(state)
    if target_run_id is not None:
        start_run = runs_by_id.get(target_run_id)
    else:
        start_run = state.runs[0] if state.runs else None
    if start_run is None:
        return ExecutionThread()

    chain = _chain(start_run, runs_by_id)
    codons: list[ThreadCodon] = []
    for run_index, (run, until_codon) in enumerate(chain):
        codons.extend(_segment(run, range(until_codon, -1, -1), run_index, checkpoint_data))
    has_running_codon = any(not is_terminal_status(tc.codon.status) for tc in codons)
    next_codon_id = _next_codon_id(
        state.execution_plan, start_run, runs_by_id, codons[0] if codons else None,
        has_running_codon)
    return ExecutionThread(
        codons=codons,
        total_runs=len(chain),
        has_running_codon=has_running_codon,
        next_codon_id=next_codon_id,
    )


def _index_runs(state: HankweaveState) -> dict[RunId, Run]:
    # Built once: the walk and the next-codon rules look runs up by id.  First occurrence wins,
    # as with the original's ``find``.
    runs_by_id: dict[RunId, Run] = {}
    for run in state.runs:
        runs_by_id.setdefault(run.run_id, run)
    return runs_by_id


def _chain(start_run: Run, runs_by_id: Mapping[RunId, Run]) -> list[tuple[Run, int]]:
    """The runs of the thread, start run first, each with its newest record in the thread."""
    chain: list[tuple[Run, int]] = []
    visited: set[RunId] = set()
    current: Run | None = start_run
    until_codon = len(start_run.codons) - 1
    while current is not None and current.run_id not in visited:
        visited.add(current.run_id)
        chain.append((current, until_codon))
        conditions = current.starting_conditions
        if not isinstance(conditions, ContinuationStart):
            break  # a fresh run begins the thread
        source = conditions.source
        parent = runs_by_id.get(source.run_id)
        if parent is None:
            break  # the chain ends where its parent is gone
        until_codon = _parent_until_codon(parent, source.after_codon, source.checkpoint_sha)
        current = parent
    return chain


def _segment(run: Run, indices: Iterable[int], run_index: int,
             checkpoint_data: CheckpointData | None) -> Iterator[ThreadCodon]:
    """The thread codons of ``run``'s records at ``indices``, in that order."""
    run_end_time = run.end_time or None
    for index in indices:
        codon = run.codons[index]
        yield ThreadCodon(
            codon=codon,
            run_id=run.run_id,
            run_status=run.status,
            run_start_time=run.start_time,
            run_end_time=run_end_time,
            git_branch=run.git_branch,
            run_index=run_index,
            codon_index_in_run=index,
            continuation_session_id=getattr(codon, "previous_session_id", None) or None,
            checkpoint_data=checkpoint_data,
        )


def _iteration_key(codon: CodonExecution) -> tuple[str, int] | None:
    context = codon.loop_context
    return (context.loop_id, context.iteration) if context is not None else None


class ThreadTracker:
    """The execution thread of the newest run, kept current as that run's records change.

    A runtime appends to one run; everything else in the thread (the run's own fields, its
    ancestors) changes rarely.  So the tracker keeps the ancestors' part of the thread as it is
    while they stay the same objects, and redoes the newest run's thread codons only from its
    first record that is not the object it saw last time (records are immutable; the reducer
    replaces the one it changes).  Anything else that changed rebuilds the thread in full.
    The answers equal :func:`analyze_execution_thread`'s for the same state.
    """

    def __init__(self) -> None:
        self._state: HankweaveState | None = None
        self._thread = ExecutionThread()
        self._version = 0
        self._clear()

    def _clear(self) -> None:
        self._key: tuple[object, ...] | None = None
        # Held so the ids in ``_key`` stay unique while it is kept.
        self._chain: list[tuple[Run, int]] = []
        self._checkpoint_data: CheckpointData | None = None
        self._records: list[CodonExecution] = []  # the newest run's records, last seen
        self._newest: list[ThreadCodon] = []  # their thread codons, oldest first
        self._newest_unfinished = 0
        self._older: list[ThreadCodon] = []  # the ancestors' thread codons, newest first
        self._older_unfinished = False
        self._by_iteration: dict[tuple[str, int], list[ThreadCodon]] = {}

    def thread(self, state: HankweaveState,
               checkpoint_data: CheckpointData | None = None) -> ExecutionThread:
        """The thread of ``state``'s newest run (see :func:`analyze_execution_thread`)."""
        if state is self._state and checkpoint_data is self._checkpoint_data:
            return self._thread
        if not state.runs:
            self._clear()
            self._state, self._thread = state, ExecutionThread()
            return self._thread
        runs_by_id = _index_runs(state)
        start_run = state.runs[0]
        chain = _chain(start_run, runs_by_id)
        key = _chain_key(chain, checkpoint_data)
        if key != self._key or not self._follow(start_run):
            self._rebuild(chain, checkpoint_data)
            self._key = key
        self._chain = chain
        self._state = state
        self._version += 1
        has_running = self._newest_unfinished > 0 or self._older_unfinished
        newest = self._newest[-1] if self._newest else (self._older[0] if self._older else None)
        self._thread = ExecutionThread(
            codons=[*reversed(self._newest), *self._older],
            total_runs=len(chain),
            has_running_codon=has_running,
            next_codon_id=_next_codon_id(state.execution_plan, start_run, runs_by_id, newest,
                                         has_running),
            iteration_index=_IterationView(self, self._version),
        )
        return self._thread

    def _rebuild(self, chain: list[tuple[Run, int]],
                 checkpoint_data: CheckpointData | None) -> None:
        self._clear()
        start_run, _ = chain[0]
        for run_index, (run, until_codon) in enumerate(chain[1:], start=1):
            self._older.extend(_segment(run, range(until_codon, -1, -1), run_index,
                                        checkpoint_data))
        self._older_unfinished = any(not is_terminal_status(tc.codon.status)
                                     for tc in self._older)
        for tc in reversed(self._older):
            key = _iteration_key(tc.codon)
            if key is not None:
                self._by_iteration.setdefault(key, []).append(tc)
        self._checkpoint_data = checkpoint_data
        self._append_newest(start_run, 0)

    def _follow(self, start_run: Run) -> bool:
        """Bring the newest run's thread codons up to date; False when only a rebuild can."""
        old, new = self._records, start_run.codons
        if len(new) < len(old):
            return False
        changed = changed_positions(old, new)
        first = changed[0] if changed else len(new)
        while len(self._newest) > first:
            self._drop_newest()
        self._append_newest(start_run, first)
        return True

    def _append_newest(self, start_run: Run, first: int) -> None:
        for tc in _segment(start_run, range(first, len(start_run.codons)), 0,
                           self._checkpoint_data):
            self._newest.append(tc)
            if not is_terminal_status(tc.codon.status):
                self._newest_unfinished += 1
            key = _iteration_key(tc.codon)
            if key is not None:
                self._by_iteration.setdefault(key, []).append(tc)
        self._records = list(start_run.codons)

    def _drop_newest(self) -> None:
        tc = self._newest.pop()
        if not is_terminal_status(tc.codon.status):
            self._newest_unfinished -= 1
        key = _iteration_key(tc.codon)
        if key is not None:
            # The newest run's codons were appended last, so this one ends its list.
            self._by_iteration[key].pop()


class _IterationView:
    """A tracker's iteration index as it was for one thread it gave out (None once stale)."""

    def __init__(self, tracker: ThreadTracker, version: int) -> None:
        self._tracker, self._version = tracker, version

    def get(self, key: tuple[str, int]) -> Sequence[ThreadCodon] | None:
        if self._tracker._version != self._version:
            return None
        return self._tracker._by_iteration.get(key, ())


def _chain_key(chain: list[tuple[Run, int]],
               checkpoint_data: CheckpointData | None) -> tuple[object, ...]:
    """What the thread depends on besides the newest run's records (ids of immutable runs)."""
    start_run, _ = chain[0]
    return (id(checkpoint_data), start_run.run_id, start_run.status, start_run.start_time,
            start_run.end_time, start_run.git_branch, id(start_run.starting_conditions),
            *((id(run), until) for run, until in chain[1:]))


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
    newest: ThreadCodon | None,
    has_running_codon: bool,
) -> CodonId | None:
    """The codon the runtime would execute next if it continued this thread."""
    positions = plan_positions(plan)

    def successor(codon_id: CodonId) -> CodonId | None:
        position = positions.get(codon_id)
        if position is None or position + 1 >= len(plan):
            return None
        return plan[position + 1].codon_id

    first = plan[0].codon_id if plan else None

    if start_run.status in STOPPED_RUN_STATUSES:
        return None
    if has_running_codon:
        return None
    if newest is not None:
        if newest.run_status == "interrupted" and newest.codon.status == "failed":
            return newest.codon.codon_id  # ours: it resumes once answered
        # The original also has a rig-setup branch here, guarded by ``codons.length === 0``
        # inside this non-empty case, so it can never run; it is left out.  A rig-setup
        # continuation with earlier codons reaches the same answer anyway: the parent's codons
        # stop just before the codon that reruns, whose id is their plan successor.
        return successor(newest.codon.codon_id)

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


def with_dead_runs_crashed(state: HankweaveState, detected_at: str) -> HankweaveState:
    """``state`` as the next start's crash repair will leave it, in memory only: every
    ``running`` run marked ``crashed`` and its unfinished codon ``failed``.

    For readers that found no live runtime on the execution (no ``runtime.lock``, or one whose
    process is gone or whose heartbeat is stale: :func:`hankweave.state.lock.live_runtime_lock`),
    so a dead run is not shown ``running`` until a new start repairs it.  The repair is the
    reducer's own ``RunCrashed``; nothing is written.
    """
    for run in state.runs:
        if is_live_run(run.status):
            last = run.codons[-1].status if run.codons else "unknown"
            state = apply_transition(state, RunCrashed(data=RunCrashedData(
                run_id=run.run_id, detected_at=detected_at, last_codon_status=last)))
    return state


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
    position = plan_positions(plan).get(codon_id)
    if position is None or plan[position].codon.continuation_mode != "continue-previous":
        return None
    if position == 0:
        return None
    previous_id = plan[position - 1].codon_id
    for thread_codon in thread.codons:
        codon = thread_codon.codon
        if codon.codon_id != previous_id:
            continue
        session_id: str | None = getattr(codon, "claude_session_id", None)
        if not session_id:
            continue
        if codon.status == "completed":
            return session_id
        if codon.status == "skipped" and (getattr(codon, "assistant_message_count", None) or 0) > 0:
            return session_id
    return None
