"""Which checkpoint backend holds an execution's checkpoints, for commands that read another
execution (``fork``, ``compare``): an execution directory does not record its backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hankweave.checkpoints import CheckpointStore
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.registry import Registry
    from hankweave.state.types import HankweaveState


def detect_backend(layout: ExecutionLayout, state: HankweaveState,
                   registry: Registry) -> type[CheckpointStore] | None:
    """The installed backend whose store in ``layout`` holds the state's initial checkpoint
    (each lists its store read-only, nothing created); None when none does."""
    initial = state.initial_checkpoint
    for backend in registry.checkpoint_backends().values():
        store = backend(layout.path)
        try:
            listed = store.list_read_only()
        finally:
            store.close()
        if listed and (initial is None or any(c.id == initial for c in listed)):
            return backend
    return None
