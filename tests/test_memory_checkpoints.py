"""The in-memory test backend passes the checkpoint contract suite (and so proves the suite
runs in the kernel's own CI)."""

from __future__ import annotations

from hankweave.testing.checkpoints import CheckpointStoreContract
from hankweave.testing.memory_checkpoints import MemoryCheckpointStore


class TestMemoryCheckpointStore(CheckpointStoreContract):
    store_class = MemoryCheckpointStore

    def break_mid_create(self, store, execution_dir):
        # A create() in memory is one list append: there is no partial state to leave.
        pass
