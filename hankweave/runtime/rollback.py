"""Rollback targets: which checkpoint a rollback restores, and the checkpoints a codon left.

Pure functions over the execution thread, shared by the runtime's rollback commands, the
WebSocket ``checkpoint.list`` reply and ``hankweave rollback``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast, get_args

from hankweave.runtime.errors import RuntimeCommandError
from hankweave.state.thread import ExecutionThread
from hankweave.state.types import CheckpointType, CodonExecution, HankweaveState


@dataclass(frozen=True)
class CheckpointEntry:
    """One checkpoint of a codon record (``CheckpointQueryInfo`` on the wire)."""

    run_id: str
    codon_id: str
    codon_name: str
    checkpoint_type: CheckpointType
    sha: str
    status: str
    timestamp: str

    def to_wire(self) -> dict[str, str]:
        """The ``CheckpointQueryInfo`` object of a ``checkpoint.list`` event."""
        return {"codonId": self.codon_id, "codonName": self.codon_name,
                "checkpointType": self.checkpoint_type, "sha": self.sha, "status": self.status,
                "timestamp": self.timestamp}


@dataclass(frozen=True)
class CheckpointListing:
    """What ``checkpoint.list`` reports: the run asked about and its checkpoints, newest first."""

    run_id: str
    current_branch: str | None
    checkpoints: list[CheckpointEntry]


@dataclass(frozen=True)
class RollbackTarget:
    """A checkpoint a rollback restores, and the codon record it belongs to."""

    run_id: str | None
    codon_id: str | None
    """``None`` for the initial checkpoint (the execution starts over)."""
    checkpoint_type: CheckpointType | Literal["initial"]
    sha: str



def record_checkpoints(codon: CodonExecution) -> list[tuple[CheckpointType, str]]:
    """A record's checkpoints, newest first: its terminal one, then its rig-setup one."""
    found: list[tuple[CheckpointType, str]] = []
    terminal = {"completed": ("completed", "completion_checkpoint"),
                "failed": ("error", "error_checkpoint"),
                "skipped": ("skipped", "skip_checkpoint")}.get(codon.status)
    if terminal is not None:
        sha = getattr(codon, terminal[1], None)
        if sha and sha != "none":
            found.append((terminal[0], sha))  # type: ignore[arg-type]
    rig = getattr(codon, "rig_setup_checkpoint", None)
    if rig:
        found.append(("rig-setup", rig))
    return found


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
        sha = getattr(codon, "completion_checkpoint", None) or getattr(
            codon, "skip_checkpoint", None)
        if sha:
            return item.run_id, sha
        raise RuntimeCommandError(f"No completed checkpoint found for codon {codon_id!r}"
                            f" (its newest record is {codon.status})")
    known = ", ".join(dict.fromkeys(t.codon.codon_id for t in thread.codons)) or "none"
    raise RuntimeCommandError(f"Codon {codon_id!r} is not in the execution thread (codons: {known})")
