"""The snapshot backend's entry point: what every ``hankweave`` start loads, kept light.

Every start (``hankweave --help`` included) loads the installed plugins; the backend itself
(:mod:`hankweave_checkpoint_snapshot`, with its pydantic manifest models) is imported only when
the kernel collects the checkpoint backends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hankweave.api import hookimpl

if TYPE_CHECKING:
    from hankweave.api import CheckpointStore


@hookimpl
def register_checkpoint_backends(register: Callable[[type[CheckpointStore]], None]) -> None:
    from hankweave_checkpoint_snapshot import SnapshotCheckpointStore

    register(SnapshotCheckpointStore)
