"""Reading a checkpoint's tree: verified, validated, delta trees applied to their bases."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Iterable

from pydantic import ValidationError

from hankweave.api import CheckpointStorageError, StoredFile
from hankweave_checkpoint_snapshot.formats import (
    MAX_DELTA_CHAIN,
    TREE,
    FileEntry,
    Manifest,
    SymlinkEntry,
    Tree,
    TreeDelta,
    is_safe_path,
)
from hankweave_checkpoint_snapshot.objects import ObjectStore


class Trees:
    """The trees of one store's checkpoints; a few recent ones are kept parsed."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self._trees: OrderedDict[str, Tree] = OrderedDict()
        self.delta_bases: dict[str, str] = {}
        """Each delta tree's base, as read or written."""

    def forget(self, digests: Iterable[str] | None = None) -> None:
        """Forget these trees (objects deleted), or every tree kept."""
        if digests is None:
            self._trees.clear()
            self.delta_bases.clear()
            return
        for digest in digests:
            self._trees.pop(digest, None)
            self.delta_bases.pop(digest, None)

    def tree(self, digest: str, checkpoint_id: str) -> Tree:
        """A checkpoint's tree, verified and validated (a few recent ones are kept parsed); a
        delta tree is applied to its base, read the same way."""
        tree = self._trees.get(digest)
        if tree is not None:
            self._trees.move_to_end(digest)
            return tree
        deltas: list[TreeDelta] = []
        current = digest
        while (tree := self._trees.get(current)) is None:
            found = self._tree_object(current, checkpoint_id)
            if isinstance(found, dict):
                tree = self._checked_tree(found, current, checkpoint_id)
                self._keep(current, tree)
                break
            if len(deltas) >= 2 * MAX_DELTA_CHAIN:
                raise CheckpointStorageError(
                    f"checkpoint {checkpoint_id}: its file list (object {digest}) is a chain of"
                    f" more than {2 * MAX_DELTA_CHAIN} delta trees")
            deltas.append(found)
            self.delta_bases[current] = found.base
            current = found.base
        if deltas:
            tree = dict(tree)
            for delta in reversed(deltas):
                for path, entry in delta.changes.items():
                    if entry is None:
                        tree.pop(path, None)
                    else:
                        tree[path] = entry
            tree = self._checked_tree(tree, digest, checkpoint_id)
            self._keep(digest, tree)
        return tree

    def referenced(self, manifests: Iterable[Manifest]) -> set[str]:
        """Every object the checkpoints of ``manifests`` need: each one's tree, the bases of
        a delta tree, and the content of every file."""
        referenced: set[str] = set()
        for manifest in manifests:
            tree = self.tree(manifest.tree, manifest.id)
            referenced.update(e.hash for e in tree.values() if isinstance(e, FileEntry))
            digest: str | None = manifest.tree
            while digest is not None and digest not in referenced:  # the tree and its bases
                referenced.add(digest)
                digest = self.delta_bases.get(digest)
        return referenced

    def _tree_object(self, digest: str, checkpoint_id: str) -> Tree | TreeDelta:
        data = self.objects.read(digest, f"checkpoint {checkpoint_id}: its file list")
        try:
            # A whole tree parsed and checked in one pass: half the time of the two below,
            # which read what pydantic's parser refuses (a delta tree; a name that is not
            # UTF-8, kept as a lone surrogate escape).
            with contextlib.suppress(ValidationError):
                return TREE.validate_json(data)
            value = json.loads(data)
            if isinstance(value, dict) and isinstance(value.get("format"), str):
                return TreeDelta.model_validate(value)
            return TREE.validate_python(value)
        except (ValueError, ValidationError) as exc:
            raise CheckpointStorageError(
                f"checkpoint {checkpoint_id}: its file list (object {digest}) is invalid: "
                f"{' '.join(str(exc).split())}") from exc

    @staticmethod
    def _checked_tree(tree: Tree, digest: str, checkpoint_id: str) -> Tree:
        parents = {path.rsplit("/", 1)[0] for path in tree if "/" in path}
        unsafe = [path for path in tree if not is_safe_path(path) or path in parents]
        if unsafe:
            raise CheckpointStorageError(
                f"checkpoint {checkpoint_id}: its file list (object {digest}) holds paths that "
                f"cannot be restored: {', '.join(map(repr, unsafe[:5]))}")
        return tree

    def _keep(self, digest: str, tree: Tree) -> None:
        self._trees[digest] = tree
        while len(self._trees) > 8:
            self._trees.popitem(last=False)


def stored_files(tree: Tree) -> dict[str, StoredFile]:
    """A tree's entries as :meth:`~hankweave.checkpoints.CheckpointStore.manifest` lists them:
    a file's digest is ``sha256:<its object>`` (objects are named by the SHA-256 of their
    bytes), a symlink's the SHA-256 of its target."""
    return {path: stored_file(entry) for path, entry in tree.items()}


def stored_file(entry: FileEntry | SymlinkEntry) -> StoredFile:
    """One entry as :func:`stored_files` lists it."""
    if isinstance(entry, FileEntry):
        return StoredFile(f"sha256:{entry.hash}", entry.size, entry.executable)
    target = os.fsencode(entry.target)
    return StoredFile(f"sha256:{hashlib.sha256(target).hexdigest()}", len(target),
                      symlink=True)
