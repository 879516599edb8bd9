"""Forking a store: a new execution's store holding some of this one's checkpoints.

Objects and manifests are never written again once in place (a prune only deletes), so the
new store hard-links every object on disk (verified copies where the file system cannot
link; listing them is cheaper than reading the kept file lists to find the needed ones, and
the rest go at the fork's first prune) and copies the kept checkpoints' manifests, the initial one among them (its kind
marks it).  The source is only read, as ``list_read_only`` reads it.  Neither ``refs.json``
(the current checkpoint: the fork's caller restores one) nor the stat cache (of another work
tree) is taken.  As when a checkpoint is written, the objects are made durable before any
manifest names them, so a fork killed midway leaves no manifest whose objects are missing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from hankweave.api import (
    PRIVATE_FILE_MODE,
    CheckpointNotFoundError,
    atomic_write_bytes,
)
from hankweave_checkpoint_snapshot.formats import Manifest


def kept_manifests(manifests: Mapping[str, Manifest], keep: Collection[str],
                   store_dir: Path) -> list[Manifest]:
    """The manifests of the ``keep`` ids and of the initial checkpoint; an id that names no
    checkpoint raises :class:`CheckpointNotFoundError`."""
    wanted = {ident.strip().lower() for ident in keep}
    initial = [m for m in manifests.values() if m.kind == "initial"]
    if initial:
        wanted.add(min(initial, key=lambda m: m.sequence).id)
    unknown = sorted(wanted.difference(manifests))
    if unknown:
        raise CheckpointNotFoundError(
            f"cannot fork the snapshot store {store_dir}: it holds no checkpoint "
            f"{', '.join(unknown)}")
    return sorted((manifests[ident] for ident in wanted), key=lambda m: m.sequence)


def copy_manifests(source_dir: Path, target_dir: Path, kept: Iterable[Manifest]) -> None:
    """Copy the kept checkpoints' manifest files, byte for byte (their ids hash them)."""
    for manifest in kept:
        name = f"{manifest.id}.json"
        atomic_write_bytes(target_dir / name, (source_dir / name).read_bytes(),
                           mode=PRIVATE_FILE_MODE)
