"""The codon records of a recording: each covered record's log and its end-of-codon snapshot,
read with the execution's own checkpoint backend."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hankweave_replay.execution import recorded_log
from hankweave_replay.format import LOGS_DIR, SNAPSHOTS_DIR, RecordingError
from hankweave_replay.links import link_stays_inside, resolves_inside
from hankweave_replay.manifest import RecordedCodon
from hankweave_replay.staging import Staging

if TYPE_CHECKING:
    from hankweave.api import CheckpointStore, CodonExecution, HankweaveState


def stage_codons(staging: Staging, execution_dir: Path, state: HankweaveState,
                 chosen: list[tuple[str, CodonExecution]], backend_name: str,
                 env: Mapping[str, str]) -> list[RecordedCodon]:
    """Stage the log and snapshot of each chosen (run id, record); the manifest's entries."""
    from hankweave.api import checkpoint_patterns_through, end_checkpoint

    snapshots = _SnapshotReader(staging, backend_name, execution_dir, env)
    codons: list[RecordedCodon] = []
    try:
        for run_id, record in chosen:
            log_member = _stage_log(staging, execution_dir, run_id, record)
            snapshot = snapshots.stage(end_checkpoint(record), record.codon_id)
            try:
                patterns = checkpoint_patterns_through(state.execution_plan, record.codon_id,
                                                       True)
            except (ValueError, LookupError):  # a record the recorded plan no longer holds
                patterns = []
            codons.append(RecordedCodon(codon_id=record.codon_id, run_id=run_id,
                                        status=record.status, log=log_member, snapshot=snapshot,
                                        checkpoint_patterns=patterns))
    finally:
        snapshots.close()
    return codons


def _stage_log(staging: Staging, execution_dir: Path, run_id: str, record: CodonExecution,
               ) -> str | None:
    """Copy the record's codon log; its member path (None: the record started no agent)."""
    from hankweave.api import codon_log_name

    source_log = recorded_log(execution_dir, getattr(record, "claude_log_path", None))
    if source_log is None:
        return None
    log_member = f"{LOGS_DIR}/{run_id}/{codon_log_name(record.codon_id)}"
    if source_log.is_file():
        staging.write(log_member, source_log.read_bytes())
    else:
        staging.notes.append(f"the log of codon {record.codon_id} (run {run_id}) is"
                             " missing from the execution directory")
    return log_member


class _SnapshotReader:
    """Stages end-of-codon checkpoints, each once, through the execution's checkpoint store
    (opened at the first checkpoint, closed by :meth:`close`)."""

    def __init__(self, staging: Staging, backend_name: str, execution_dir: Path,
                 env: Mapping[str, str]) -> None:
        self._staging = staging
        self._backend_name = backend_name
        self._execution_dir = execution_dir
        self._env = env
        self._store: CheckpointStore | None = None

    def stage(self, snapshot: str | None, codon_id: str) -> str | None:
        """Stage checkpoint ``snapshot`` of ``codon_id``; the snapshot the manifest names
        (None, with a note, when the checkpoint no longer exists)."""
        from hankweave.api import CheckpointError, CheckpointNotFoundError

        if snapshot is None or (self._staging.root / SNAPSHOTS_DIR / snapshot).exists():
            return snapshot
        if self._store is None:
            self._store = _open_store(self._backend_name, self._execution_dir, self._env)
        try:
            _stage_snapshot(self._staging, self._store, snapshot)
        except CheckpointNotFoundError:
            self._staging.notes.append(f"checkpoint {snapshot} of codon {codon_id} no"
                                       " longer exists (pruned?); its file changes are not"
                                       " replayed")
            return None
        except CheckpointError as exc:
            raise RecordingError(
                f"cannot read checkpoint {snapshot} of codon {codon_id} with the"
                f' "{self._backend_name}" checkpoint backend: {exc} (if the execution used'
                " another backend, name it with --checkpoint-backend)") from None
        return snapshot

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _open_store(name: str, execution_dir: Path, env: Mapping[str, str]) -> CheckpointStore:
    from hankweave.api import CheckpointError, Registry, get_registry, make_plugin_manager

    registry = get_registry() if dict(env) == dict(os.environ) else Registry(
        make_plugin_manager(env=env))
    try:
        return registry.checkpoint_backend(name)(execution_dir)
    except CheckpointError as exc:
        raise RecordingError(f"cannot read the execution's checkpoints: {exc}") from None


def _stage_snapshot(staging: Staging, store: CheckpointStore, checkpoint_id: str) -> None:
    member = f"{SNAPSHOTS_DIR}/{checkpoint_id}"
    root = staging.root / member
    for rel in store.materialize(checkpoint_id, root):  # redacted with every other file
        path = root / rel
        if path.is_symlink() and not (link_stays_inside(rel, os.readlink(path))
                                      and resolves_inside(path, root)):
            # Unpacking refuses links that leave their snapshot (by their text, or followed
            # through the others), so such a link could never be replayed; the note keeps the
            # loss visible (its target, a path of this machine, stays out).
            path.unlink()
            staging.notes.append(f"left out the symlink {rel} of checkpoint"
                                 f" {checkpoint_id}: it points outside the workspace")
