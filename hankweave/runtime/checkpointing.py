"""The runtime's side of the checkpoint store: what it holds, creating, restoring, pruning.

Listing a store can cost a subprocess per call (git), and the execution thread is analysed
several times per codon; only this runtime adds or prunes checkpoints while it runs, so it reads
the list once and keeps it current.  Store calls that touch the disk run in a worker thread.

A store that accepts change hints gets, with each checkpoint, what a
:class:`~hankweave.workspace_watch.WorkspaceWatcher` saw change since the previous one, so a
codon that touched three files of a large tree costs about three files
(docs/checkpoints.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from hankweave.checkpoints import (
    ChangeHint,
    Checkpoint,
    CheckpointError,
    CheckpointKind,
    CheckpointStore,
    RetentionPolicy,
)
from hankweave.state.types import HankweaveState, referenced_checkpoint_ids
from hankweave.workspace_watch import WorkspaceWatcher

log = logging.getLogger(__name__)

CheckpointData = dict[str, Mapping[str, str]]


class KnownCheckpoints:
    """A :class:`CheckpointStore` and the ids it holds, as far as this runtime knows them."""

    def __init__(self, store: CheckpointStore, *, change_hints: bool = True) -> None:
        self.store = store
        self._known: CheckpointData | None = None
        self._watch = change_hints and store.accepts_change_hints
        self._watcher: WorkspaceWatcher | None = None

    def data(self) -> Mapping[str, Mapping[str, str]] | None:
        """The store's checkpoints by id (read once); None when the store cannot be listed."""
        if self._known is None:
            try:
                self._known = dict(self.store.checkpoint_data())
            except CheckpointError as exc:
                log.warning("checkpoint data unavailable: %s", exc)
                return None
        return self._known

    def peek(self) -> Mapping[str, Mapping[str, str]] | None:
        """What is known without reading the store (None before the first read)."""
        return self._known

    async def initialize(self) -> str:
        """Prepare the store and start watching the work tree; return the initial checkpoint's
        id."""
        initial = await asyncio.to_thread(self.store.initialize)
        if self._watch and self._watcher is None:
            self._watcher = await asyncio.to_thread(WorkspaceWatcher.start, self.store.work_tree)
        return initial

    def distrust_changes(self) -> None:
        """The next checkpoint scans the whole work tree, whatever the watcher saw (the
        runtime calls this before running what it does not trust the watcher to see whole,
        such as rig setup commands)."""
        if self._watcher is not None:
            self._watcher.distrust()

    async def _hint(self) -> dict[str, ChangeHint]:
        """``{"changes": what the watcher saw since its last drain}``, or nothing to pass."""
        if self._watcher is None:
            return {}
        return {"changes": await asyncio.to_thread(self._watcher.drain)}

    async def create(self, *, kind: CheckpointKind, run_id: str, codon_id: str,
                     codon_name: str, patterns: Sequence[str], duration_ms: int) -> Checkpoint:
        """Checkpoint the work tree.  Raises :class:`CheckpointError`."""
        hint = await self._hint()
        made = await asyncio.to_thread(
            self.store.create, kind=kind, run_id=run_id, codon_id=codon_id,
            codon_name=codon_name, patterns=list(patterns), duration_ms=duration_ms, **hint)
        if self._known is not None:
            self._known[made.id] = {"message": made.message, "timestamp": made.timestamp,
                                    "branch": made.branch}
        return made

    async def restore(self, checkpoint_id: str) -> None:
        """Put the work tree back as checkpoint ``checkpoint_id`` left it."""
        hint = await self._hint()
        await asyncio.to_thread(self.store.restore, checkpoint_id, **hint)

    def close(self) -> None:
        """Stop watching the work tree."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    async def prune(self, state: HankweaveState, keep_last_per_run: int) -> None:
        """Drop checkpoints nothing refers to beyond each run's newest ``keep_last_per_run``;
        a failure is logged, never fatal (pruning only saves space)."""
        policy = RetentionPolicy(keep_last_per_run=keep_last_per_run,
                                 keep_ids=referenced_checkpoint_ids(state))
        try:
            removed = await asyncio.to_thread(self.store.prune, policy)
        except CheckpointError as exc:
            log.warning("checkpoint pruning failed: %s", exc)
            return
        for ident in removed:
            (self._known or {}).pop(ident, None)
