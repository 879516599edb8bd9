"""Git-free checkpoints: a content-addressed file store under ``.hankweave/checkpoints/snapshot/``.

Select it with ``checkpoints.backend = "snapshot"``.  It needs nothing but Python, and it never
packs, diffs or compresses, so it suits machines without git and work trees full of large
binaries.

Layout::

    <exec>/.hankweave/checkpoints/snapshot/
      objects/<2 hex>/<62 hex>   file contents and trees, named by the SHA-256 of their bytes
      manifests/<id>.json        one per checkpoint: its metadata and the hash of its tree
      refs.json                  the checkpoint a restore last made current (absent until one)
      stat-cache.json            path -> (size, mtime, inode, ctime, hash); only a cache
      tmp/                       objects being written, and fs-clock (read for its timestamp)

A *tree* is an object holding ``{path: entry}`` for every file of a checkpoint, where an entry
is ``{"type": "file", "hash", "size", "executable"}`` or ``{"type": "symlink", "target"}``.
Keeping the entries out of the manifest keeps manifests a few hundred bytes, so listing reads
little, and two checkpoints of the same files share one tree.  A checkpoint that followed a
change hint and changed a few files of a large tree writes a *delta tree* instead,
``{"format": "hankweave-snapshot-tree-delta/1", "base": <tree>, "changes": {path: entry or
null}}`` (a whole tree's values are all objects, so the two cannot be confused); at most
``MAX_DELTA_CHAIN`` deltas follow one another before a tree is written whole again.

Durability: an object is written to ``tmp/``, fsynced (in batches, on a few threads) and only
then renamed into place, so it is never seen torn; the directories it entered are fsynced before
any manifest refers to it; the manifest is written atomically after that.  A process killed
during :meth:`~SnapshotCheckpointStore.create` therefore leaves at worst unreferenced objects
(collected by the next prune) and temp files (removed by the next
:meth:`~SnapshotCheckpointStore.initialize`), never a partial checkpoint.

Speed: a file is read only when its ``lstat`` differs from the stat cache, so a checkpoint costs
one directory walk, one ``lstat`` per file, and work proportional to what changed.  Files
changed in the very clock tick of a scan are re-read next time
(see :func:`hankweave.workspace.trusted_before`).

Modules, one concern each: :mod:`.store` (the :class:`SnapshotCheckpointStore`), :mod:`.formats`
(the files' models, canonical JSON and ids), :mod:`.objects` (the object store and its
durability), :mod:`.manifests` (the checkpoints and the current one), :mod:`.trees` (reading a
checkpoint's tree), :mod:`.treetext` (the last tree's JSON, kept between checkpoints),
:mod:`.statcache`, :mod:`.capture` (reading the work tree), :mod:`.restore` (what differs,
and writing it), :mod:`.worktree` (writing into a directory without following links),
:mod:`.retention` (what a prune removes), :mod:`.fork` (a new execution's store holding some
checkpoints).  The entry point is the separate module
:mod:`hankweave_checkpoint_snapshot_plugin`, which imports none of this until the backends are
collected.
"""

from __future__ import annotations

from hankweave_checkpoint_snapshot.formats import FileEntry, Manifest, SymlinkEntry
from hankweave_checkpoint_snapshot.store import SnapshotCheckpointStore

__all__ = [
    "FileEntry",
    "Manifest",
    "SnapshotCheckpointStore",
    "SymlinkEntry",
]
