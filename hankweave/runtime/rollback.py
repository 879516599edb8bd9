"""Rollbacks: which checkpoint a rollback restores, restoring it, and the checkpoints to list.

The target functions are pure, over the execution thread, and shared by the runtime's rollback
commands, boot recovery and ``hankweave rollback``.  :class:`Rollbacks` performs them on a live
runtime: it restores the checkpoint, ends the current run and starts a continuation run from
the restored point (reason ``rollback``).  :func:`rollback_offline` does the same while no
runtime runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast, get_args

from hankweave.checkpoints import CheckpointError, CheckpointStore
from hankweave.config.hank import RigCopy
from hankweave.events.catalogue import CheckpointQueryInfo
from hankweave.execution.layout import ExecutionLayout
from hankweave.faults import kill_point
from hankweave.fsutil import private_dir
from hankweave.runtime.completion import report_snapshot
from hankweave.runtime.control import LiveControl, Phase, StartRequest
from hankweave.runtime.errors import RuntimeCommandError
from hankweave.runtime.lifecycle import new_run_id
from hankweave.state.thread import ExecutionThread, analyze_execution_thread
from hankweave.state.transitions import RunCompleted, RunRef, RunStarted, RunStartedData
from hankweave.state.types import (
    CheckpointType,
    ContinuationSource,
    ContinuationStart,
    FreshStart,
    HankweaveState,
    end_checkpoint,
    record_checkpoints,
)

if TYPE_CHECKING:
    from hankweave.runtime.context import RunContext
    from hankweave.runtime.lifecycle import RunLifecycle
    from hankweave.state.boot import OwnedExecution


@dataclass(frozen=True)
class CheckpointListing:
    """What ``checkpoint.list`` reports: the run asked about and its checkpoints, newest first."""

    run_id: str
    current_branch: str | None
    checkpoints: list[CheckpointQueryInfo]
    """Each as the ``checkpoint.list`` event carries it."""


@dataclass(frozen=True)
class RollbackTarget:
    """A checkpoint a rollback restores, and the codon record it belongs to."""

    run_id: str | None
    codon_id: str | None
    """``None`` for the initial checkpoint (the execution starts over)."""
    checkpoint_type: CheckpointType | Literal["initial"]
    sha: str

    def describe(self) -> str:
        """Where the workspace goes, as a person reads it: a rig-setup checkpoint is the start
        of its codon (which never completed), any other the codon's end."""
        if self.codon_id is None:
            return "the start of the execution"
        if self.checkpoint_type == "rig-setup":
            return f"the start of codon {self.codon_id}, after its rig setup"
        return f"the end of codon {self.codon_id} ({self.checkpoint_type})"



_CHECKPOINT_PREFERENCE: dict[str, tuple[CheckpointType, ...]] = {
    "start": ("rig-setup", "completed", "error", "skipped"),
    "end": ("completed", "error", "skipped", "rig-setup"),
}


def codon_checkpoint_target(thread: ExecutionThread, codon_id: str,
                            checkpoint_type: str = "end") -> RollbackTarget:
    """The checkpoint ``rollback.toCodon`` restores: of the newest thread record of the codon."""
    wanted = _CHECKPOINT_PREFERENCE.get(checkpoint_type)
    if wanted is None:
        if checkpoint_type not in get_args(CheckpointType):
            raise RuntimeCommandError(f"Unknown checkpoint type {checkpoint_type!r}: use start, end,"
                                " " + ", ".join(get_args(CheckpointType)))
        wanted = (cast(CheckpointType, checkpoint_type),)
    for item in thread.codons:
        if item.codon.codon_id != codon_id:
            continue
        available = dict(record_checkpoints(item.codon))
        for kind in wanted:
            if kind in available:
                return RollbackTarget(item.run_id, codon_id, kind, available[kind])
        raise RuntimeCommandError(f"No {checkpoint_type} checkpoint found for codon {codon_id!r}"
                            f" (its newest record is {item.codon.status})")
    known = ", ".join(dict.fromkeys(t.codon.codon_id for t in thread.codons)) or "none"
    raise RuntimeCommandError(f"Codon {codon_id!r} is not in the execution thread (codons: {known})")


def last_success_target(thread: ExecutionThread, initial_checkpoint: str | None) -> RollbackTarget:
    """Where ``rollback.toLastSuccess`` (and boot recovery) goes.

    The newest completed codon wins; when none completed, a failed codon's rig-setup checkpoint
    (it re-runs with its rig in place); else the initial checkpoint.
    """
    for item in thread.codons:
        sha = getattr(item.codon, "completion_checkpoint", None)
        if item.codon.status == "completed" and sha:
            return RollbackTarget(item.run_id, item.codon.codon_id, "completed", sha)
    for item in thread.codons:
        rig = getattr(item.codon, "rig_setup_checkpoint", None)
        if item.codon.status == "failed" and rig:
            return RollbackTarget(item.run_id, item.codon.codon_id, "rig-setup", rig)
    return RollbackTarget(None, None, "initial", initial_checkpoint or "")


def checkpoint_prefix_target(thread: ExecutionThread, state: HankweaveState,
                             prefix: str) -> RollbackTarget:
    """The checkpoint ``rollback.toCheckpoint`` restores: a unique id prefix match."""
    prefix = prefix.strip().lower()
    if not prefix:
        raise RuntimeCommandError("Give a checkpoint id (or a prefix of one)")

    def unique(matches: list[RollbackTarget]) -> RollbackTarget | None:
        shas = list(dict.fromkeys(m.sha for m in matches))
        if len(shas) > 1:
            raise RuntimeCommandError(f"Ambiguous checkpoint SHA {prefix}: it matches "
                                + ", ".join(sha[:12] for sha in shas))
        return matches[0] if matches else None

    in_thread = [RollbackTarget(item.run_id, item.codon.codon_id, kind, sha)
                 for item in thread.codons for kind, sha in record_checkpoints(item.codon)
                 if sha.lower().startswith(prefix)]
    found = unique(in_thread)
    if found is None:
        found = unique([RollbackTarget(run.run_id, codon.codon_id, kind, sha)
                        for run in state.runs for codon in reversed(run.codons)
                        for kind, sha in record_checkpoints(codon)
                        if sha.lower().startswith(prefix)])
    if found is None and state.initial_checkpoint and \
            state.initial_checkpoint.lower().startswith(prefix):
        found = RollbackTarget(None, None, "initial", state.initial_checkpoint)
    if found is None:
        raise RuntimeCommandError(f"Checkpoint {prefix} not found in any run (current or historical)")
    return found


def codons_newer_than(thread: ExecutionThread, target: RollbackTarget) -> list[str]:
    """Thread codons a rollback undoes, newest first (for ``rollback.started``)."""
    newer: list[str] = []
    for item in thread.codons:
        if target.codon_id is not None and item.codon.codon_id == target.codon_id and \
                item.run_id == target.run_id:
            if target.checkpoint_type == "rig-setup":
                newer.append(item.codon.codon_id)
            return newer
        newer.append(item.codon.codon_id)
    return newer


def event_checkpoint_type(target: RollbackTarget) -> CheckpointType:
    # The event schema has no "initial": the initial checkpoint is where the first codon's
    # rig setup starts from.
    return "rig-setup" if target.checkpoint_type == "initial" else target.checkpoint_type


def find_rollback_target(thread: ExecutionThread, codon_id: str) -> tuple[str, str]:
    """The run and checkpoint of the newest finished record of ``codon_id`` in the thread."""
    for item in thread.codons:
        codon = item.codon
        if codon.codon_id != codon_id:
            continue
        sha = end_checkpoint(codon) if codon.status in ("completed", "skipped") else None
        if sha:
            return item.run_id, sha
        raise RuntimeCommandError(f"No completed checkpoint found for codon {codon_id!r}"
                            f" (its newest record is {codon.status})")
    known = ", ".join(dict.fromkeys(t.codon.codon_id for t in thread.codons)) or "none"
    raise RuntimeCommandError(f"Codon {codon_id!r} is not in the execution thread (codons: {known})")


# ----- performing rollbacks -----


class Rollbacks:
    """The rollback commands of a live runtime, and boot recovery."""

    def __init__(self, ctx: RunContext, lifecycle: RunLifecycle, control: LiveControl) -> None:
        self.ctx = ctx
        self.lifecycle = lifecycle
        self.control = control

    async def to_last_success(self, *, auto_restart: bool = False) -> RollbackTarget:
        """Restore the newest successful point (``rollback.toLastSuccess``); see
        :func:`last_success_target`.  Refused while a codon runs."""
        self._refuse()
        target = last_success_target(self.ctx.thread(), self.ctx.state.initial_checkpoint)
        return await self._command(target, auto_restart)

    async def to_codon(self, codon_id: str, checkpoint_type: str = "end", *,
                       auto_restart: bool = False) -> RollbackTarget:
        """Restore a checkpoint of the newest record of ``codon_id`` (``rollback.toCodon``).

        ``checkpoint_type``: ``end`` (completed, else error, else skipped, else rig-setup),
        ``start`` (rig-setup, else completed, error, skipped) or one exact type.
        """
        self._refuse()
        target = codon_checkpoint_target(self.ctx.thread(), codon_id, checkpoint_type)
        return await self._command(target, auto_restart)

    async def to_checkpoint(self, sha_prefix: str, *,
                            auto_restart: bool = False) -> RollbackTarget:
        """Restore the checkpoint whose id starts with ``sha_prefix`` (``rollback.toCheckpoint``).

        Searched in the execution thread first, then in every run (an abandoned timeline), then
        the initial checkpoint; no match and several matches are refused.
        """
        self._refuse()
        target = checkpoint_prefix_target(self.ctx.thread(), self.ctx.state, sha_prefix)
        return await self._command(target, auto_restart)

    async def recover(self, thread: ExecutionThread, *, announce: bool = True) -> None:
        """Boot recovery: restore the last success of a failed thread (no command checks);
        ``announce=False`` when a crash report has said so already."""
        target = last_success_target(thread, self.ctx.state.initial_checkpoint)
        failed = next((item.codon.codon_id for item in thread.codons
                       if item.codon.status == "failed"), None)
        if announce:
            self.ctx.reporter.info(
                f"The last run failed{f' at codon {failed}' if failed else ''}; going back to"
                f" {target.describe()} to continue from there")
        await self._restore(target)

    def _refuse(self) -> None:
        control = self.control
        control.refuse_if_stopping()
        attempt = control.attempt
        if (attempt is not None and attempt.agent_running) or \
                self.ctx.codon_in_progress() is not None:
            raise RuntimeCommandError("Cannot rollback while a codon is running; skip or stop it"
                                      " first")
        if control.phase is not Phase.WAITING:
            raise RuntimeCommandError("Cannot rollback now: the runtime is between codons. It"
                                      " rolls back while it waits for a command"
                                      " (--no-autostart, after a force stop)")

    async def _command(self, target: RollbackTarget, auto_restart: bool) -> RollbackTarget:
        """Restore ``target`` while the drive loop waits, then restart or stay idle."""
        ctx, control = self.ctx, self.control
        known = ctx.checkpoints.data()
        if known is not None and target.sha not in known:
            raise RuntimeCommandError(f"Checkpoint {target.sha[:12]} is no longer in the"
                                      " checkpoint store (pruned?); choose another")
        control.enter(Phase.ROLLING_BACK)  # before the first await: concurrent commands see it
        try:
            async with control.command_lock:
                thread = ctx.thread()
                from_run = ctx.run_id or (ctx.state.runs[0].run_id if ctx.state.runs else "")
                checkpoint_type = event_checkpoint_type(target)
                undone = codons_newer_than(thread, target)
                ctx.reporter.rollback_started(
                    from_run=from_run,
                    from_codon=thread.codons[0].codon.codon_id if thread.codons else None,
                    to_codon=target.codon_id or "", checkpoint=target.sha,
                    checkpoint_type=checkpoint_type, undone=undone)
                try:
                    await self._restore(target, undone)
                except CheckpointError as exc:
                    raise RuntimeCommandError(f"Rollback to {target.sha[:12]} failed: {exc}"
                                              ) from exc
                ctx.reporter.rollback_completed(
                    from_run=from_run, to_run=ctx.run_id or "", checkpoint=target.sha,
                    codon_id=target.codon_id or "",
                    codon_name=ctx.codon_name(target.codon_id) if target.codon_id else "",
                    checkpoint_type=checkpoint_type, auto_restart=auto_restart)
                report_snapshot(ctx)
        finally:
            control.enter(Phase.WAITING)
        if auto_restart:
            control.queue_start(StartRequest())
        else:
            ctx.reporter.idle("rollback-completed",
                              "Rollback completed. Use 'codon.next' to continue.")
        return target

    async def _restore(self, target: RollbackTarget, undone: list[str] | None = None) -> None:
        """Restore the checkpoint, end the current run, and start the continuation run.

        ``undone``: the codons a rollback command takes back, newest first; each gets a
        ``rollback.progress`` step before the one restore (a checkpoint is a whole work tree,
        so there is nothing to restore codon by codon as the original does).  Boot recovery
        passes None: it reports the restored checkpoint only.
        """
        ctx = self.ctx
        if target.sha:
            if undone is not None:
                self._report_steps(target, undone)
            await ctx.checkpoints.restore(target.sha)
            kill_point("rollback.restored")  # test-only (docs/crash-testing.md)
            self._report_restored(target, undone or [])
        current = ctx.state.run_by_id(ctx.run_id or "")
        if current is not None and current.status == "running":
            await ctx.transition(RunCompleted(data=RunRef(run_id=current.run_id)))
        source_run = target.run_id or (ctx.state.runs[0].run_id if ctx.state.runs else None)
        if source_run is None:
            await self.lifecycle.start_run(
                FreshStart(initial_checkpoint_sha=ctx.state.initial_checkpoint))
            return
        if target.checkpoint_type == "rig-setup":
            self.control.rig_ready_for = target.codon_id  # it re-runs with its rig in place
        await self.lifecycle.start_run(ContinuationStart(
            source=ContinuationSource(run_id=source_run, after_codon=target.codon_id,
                                      checkpoint_sha=target.sha),
            reason="rollback"))
        ctx.reporter.info(f"Rolled back to {target.describe()} (checkpoint {target.sha[:8]})")

    def _report_steps(self, target: RollbackTarget, undone: list[str]) -> None:
        ctx, steps = self.ctx, len(undone) + 1
        for step, codon_id in enumerate(undone, start=1):
            ctx.reporter.rollback_progress(
                step=step, steps=steps,
                message=f"Undoing codon {codon_id} ({ctx.codon_name(codon_id)})")
        ctx.reporter.rollback_progress(
            step=steps, steps=steps, message=f"Applying checkpoint {target.sha[:8]}")

    def _report_restored(self, target: RollbackTarget, undone: list[str]) -> None:
        """``rollback.codonCheckpoint`` for the restored point, then ``rollback.rigCleanup``
        for each undone codon whose rig copied into agentRoot: the restore put those paths
        back as the checkpoint had them, removing the ones it did not have."""
        ctx = self.ctx
        codon_id = target.codon_id or ""
        ctx.reporter.rollback_codon_checkpoint(
            codon_id=codon_id, codon_name=ctx.codon_name(codon_id) if codon_id else "",
            checkpoint=target.sha, checkpoint_type=event_checkpoint_type(target),
            message=f"Restored checkpoint {target.sha[:8]}"
                    f" ({target.checkpoint_type} of {codon_id or 'the start'})")
        agent_root = ctx.layout.agent_root
        for undone_id in undone:
            copies = _rig_copy_targets(ctx, undone_id)
            if copies:
                ctx.reporter.rollback_rig_cleanup(
                    codon_id=undone_id, codon_name=ctx.codon_name(undone_id),
                    directories=copies,
                    removed=sum(not (agent_root / path).exists() for path in copies))


def _rig_copy_targets(ctx: RunContext, codon_id: str) -> list[str]:
    """Where ``codon_id``'s rig copies went in agentRoot (none for a codon the hank lost)."""
    try:
        operations = ctx.codon_config(codon_id).rig_setup or []
    except RuntimeCommandError:
        return []
    return [op.copy_.to for op in operations if isinstance(op, RigCopy)]


def list_checkpoints(ctx: RunContext, run_id: str | None = None) -> CheckpointListing:
    """Checkpoints recorded in state, newest first (``checkpoint.list``).

    Without ``run_id``: every run's, reported under the current run.  Only checkpoints the
    store still holds are listed (pruned ones cannot be restored), as far as the runtime knows
    them: the store itself is not read here, since the runtime may be using it in a worker
    thread (before boot has read it, nothing is filtered).
    """
    state = ctx.state
    if run_id is not None:
        run = state.run_by_id(run_id)
        if run is None:
            raise RuntimeCommandError(f"Run {run_id} not found")
        runs = [run]
    else:
        if not state.runs:
            raise RuntimeCommandError("No active run")
        runs = list(state.runs)
        run = state.run_by_id(ctx.run_id or "") or state.runs[0]
    known = ctx.checkpoints.peek()
    entries: list[CheckpointQueryInfo] = []
    for listed in runs:
        for codon in reversed(listed.codons):
            for kind, sha in record_checkpoints(codon):
                if known is not None and sha not in known:
                    continue
                timestamp = (known[sha].get("timestamp") if known is not None else None) or (
                    getattr(codon, "end_time", None) or codon.start_time)
                entries.append(CheckpointQueryInfo(
                    codon_id=codon.codon_id,
                    codon_name=ctx.codon_name(codon.codon_id), checkpoint_type=kind,
                    sha=sha, status=codon.status, timestamp=timestamp))
    return CheckpointListing(run_id=run.run_id, current_branch=run.git_branch,
                             checkpoints=entries)


async def rollback_offline(owned: OwnedExecution, checkpoints: CheckpointStore,
                           codon_id: str) -> tuple[str, str]:
    """``hankweave rollback``: restore a codon's checkpoint while no runtime runs.

    The work tree goes back to the codon's completion checkpoint and an empty continuation run
    after it (reason ``rollback``) is recorded, so the next ``hankweave run -e`` continues
    right after that codon.  Returns the new run's id and the checkpoint.
    """
    store = owned.store
    data = checkpoints.checkpoint_data()
    source_run, sha = find_rollback_target(analyze_execution_thread(store.state, data), codon_id)
    checkpoints.restore(sha)
    run_id = new_run_id()
    folder = private_dir(ExecutionLayout(checkpoints.execution_dir).run_folder(run_id))
    await store.transition(RunStarted(data=RunStartedData(
        run_id=run_id, run_folder=str(folder), git_branch=f"run-{run_id}",
        starting_conditions=ContinuationStart(
            source=ContinuationSource(run_id=source_run, after_codon=codon_id,
                                      checkpoint_sha=sha), reason="rollback"),
        server_pid=os.getpid())))
    await store.transition(RunCompleted(data=RunRef(run_id=run_id)))
    return run_id, sha
