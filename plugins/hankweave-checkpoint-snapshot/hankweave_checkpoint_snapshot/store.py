"""The ``snapshot`` checkpoint store: manifests over a content-addressed object store."""

from __future__ import annotations

import builtins
import contextlib
import os
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hankweave.api import (
    ChangeHint,
    Checkpoint,
    CheckpointKind,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointStore,
    FileChange,
    RetentionPolicy,
    StoredFile,
    WorkspaceScan,
    checkpoint_message,
    fsync_dir,
    kill_point,
    pid_alive,
    private_dir,
    run_branch,
    trusted_before,
    utc_now_iso,
)
from hankweave_checkpoint_snapshot.capture import Capture, Capturer
from hankweave_checkpoint_snapshot.fork import copy_manifests, kept_manifests
from hankweave_checkpoint_snapshot.formats import (
    INITIAL_BRANCH,
    INITIAL_MESSAGE,
    MAX_DELTA_CHAIN,
    STORE_DIR,
    TREE_DELTA_FORMAT,
    Manifest,
    SymlinkEntry,
    Tree,
    canonical_json,
)
from hankweave_checkpoint_snapshot.manifests import Manifests
from hankweave_checkpoint_snapshot.objects import ObjectStore
from hankweave_checkpoint_snapshot.restore import differences, write_entries
from hankweave_checkpoint_snapshot.retention import collect_garbage, expired
from hankweave_checkpoint_snapshot.statcache import StatCache
from hankweave_checkpoint_snapshot.trees import Trees, stored_file, stored_files
from hankweave_checkpoint_snapshot.treetext import TreeText
from hankweave_checkpoint_snapshot.worktree import WorkTree

DELTA_SHARE = 32
"""A tree is written as a delta only when the changes are at most 1/DELTA_SHARE of its files."""


@dataclass
class _Base:
    """What the store's last capture saw: the hint it ended at, its patterns, its entries."""

    watcher: str
    epoch: int
    patterns: tuple[str, ...]
    entries: dict[str, dict[str, Any]]
    tree: str
    """The capture's tree object, which a delta tree of the next capture extends."""
    chain: int
    """How many delta trees lead to it (0: it was written whole)."""

    def followed_by(self, hint: ChangeHint | None, patterns: tuple[str, ...]) -> bool:
        """Whether ``hint`` may be followed from this capture with these patterns."""
        return (hint is not None and patterns == self.patterns
                and hint.continues(self.watcher, self.epoch) and hint.worth_following())


@contextlib.contextmanager
def _storage_errors(action: str) -> Iterator[None]:
    """Report file-system failures as the interface's error, saying what was being done."""
    try:
        yield
    except OSError as exc:
        raise CheckpointStorageError(f"{action} failed: {exc}") from exc


class SnapshotCheckpointStore(CheckpointStore):
    """Checkpoints as manifests over a content-addressed object store; no git needed.

    One instance serves one execution directory from one thread.  What it learns (manifests,
    the stat cache, which objects exist) it keeps in memory after first use.
    """

    name: ClassVar[str] = "snapshot"
    accepts_change_hints: ClassVar[bool] = True

    def __init__(self, execution_dir: Path) -> None:
        super().__init__(execution_dir)
        self.store_dir = self.execution_dir.joinpath(*STORE_DIR)
        self.objects_dir = self.store_dir / "objects"
        self.manifests_dir = self.store_dir / "manifests"
        self.tmp_dir = self.store_dir / "tmp"
        self.refs_path = self.store_dir / "refs.json"
        self.stat_cache_path = self.store_dir / "stat-cache.json"
        self._manifests = Manifests(self.manifests_dir, self.refs_path)
        self._objects = ObjectStore(self.objects_dir, self.tmp_dir)
        self._trees = Trees(self._objects)
        self._stat_cache = StatCache(self.stat_cache_path)
        self._held: set[str] | None = None  # every path any checkpoint holds
        self._scan = WorkspaceScan(self.work_tree, self.tmp_dir / "fs-clock")
        self._base: _Base | None = None  # what the last capture saw, for a change hint
        self._tree_text = TreeText()
        self._rendered: dict[str, dict[str, Any]] | None = None
        """The entries ``_tree_text`` holds (the last commit's), to find what a scan changed."""

    # ----- the CheckpointStore interface -----

    def initialize(self) -> str:
        """Create the store and its initial, empty checkpoint, or reopen it.

        Temp files left by a killed process are removed: they were never part of a checkpoint,
        so nothing recorded is lost.
        """
        with _storage_errors(f"opening the snapshot store {self.store_dir}"):
            self._make_dirs()
            self._remove_leftovers()
            self._manifests.forget()  # on disk now, not remembered
            manifests = self._manifests.load()
            initial = [m for m in manifests.values() if m.kind == "initial"]
            if initial:
                return min(initial, key=lambda m: m.sequence).id
            try:
                manifest, _ = self._commit(kind="initial", run_id=None, codon_id=None,
                                           codon_name=None, message=INITIAL_MESSAGE,
                                           timestamp=utc_now_iso(), branch=INITIAL_BRANCH,
                                           patterns=(), entries={})
            except BaseException:
                self._objects.discard_pending()
                raise
            return manifest.id

    def create(
        self,
        *,
        kind: CheckpointKind,
        run_id: str,
        codon_id: str,
        codon_name: str,
        patterns: Sequence[str],
        duration_ms: int | None = None,
        changes: ChangeHint | None = None,
    ) -> Checkpoint:
        """Snapshot the files matching ``patterns`` on the run's branch (always a new checkpoint).

        With a change hint that continues from this store's previous capture, only the hinted
        paths are looked at; otherwise every selected file's ``lstat`` is compared with the
        stat cache.  Both give the same tree for the same files.
        """
        timestamp = utc_now_iso()
        message = checkpoint_message(kind, codon_id, run_id, codon_name, timestamp, duration_ms)
        with _storage_errors(f"creating a {kind} checkpoint of codon {codon_id}"):
            self._make_dirs()
            self._manifests.load()
            patterns = tuple(patterns)
            base, self._base = self._base, None  # a failure below leaves nothing to follow
            try:
                follows: _Base | None = None
                if base is not None and base.followed_by(changes, patterns):
                    assert changes is not None
                    captured, follows = self._capture_changes(base, patterns, changes.paths), base
                else:
                    captured = self._capture(patterns)
                manifest, chain = self._commit(
                    kind=kind, run_id=run_id, codon_id=codon_id, codon_name=codon_name,
                    message=message, timestamp=timestamp, branch=run_branch(run_id),
                    patterns=patterns, entries=captured.entries, changed=captured.changed,
                    follows=follows)
            except BaseException:
                self._objects.discard_pending()
                self._rendered = None  # the tree text may be ahead of the last commit now
                raise
            # Only after the manifest is durable: every hash in the cache must name a durable
            # object, because a later checkpoint will refer to it without looking.
            self._stat_cache.keep(captured.stat_cache, captured.hashed)
            if changes is not None:
                self._base = _Base(changes.watcher, changes.until, patterns, captured.entries,
                                   manifest.tree, chain)
        return manifest.checkpoint()

    def list(
        self,
        *,
        run_id: str | None = None,
        codon_id: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> list[Checkpoint]:
        """Checkpoints, newest first, optionally filtered."""
        manifests = sorted(self._manifests.load().values(), key=lambda m: m.sequence,
                           reverse=True)
        checkpoints = (m.checkpoint() for m in manifests)
        return [c for c in checkpoints if c.matches(run_id=run_id, codon_id=codon_id, kind=kind)]

    def list_read_only(self) -> builtins.list[Checkpoint]:
        """As :meth:`list`, which only reads manifests: no store directory is created, and
        nothing is repaired (a temp file of a killed process is no manifest, so it is ignored)."""
        return self.list()

    def resolve(self, id_or_prefix: str) -> Checkpoint:
        """The checkpoint with this id or unique id prefix."""
        return self._manifest(id_or_prefix).checkpoint()

    def restore(self, checkpoint_id: str, *, changes: ChangeHint | None = None) -> None:
        """Make the work tree's checkpointed files exactly those of the checkpoint.

        Every object the restore needs is read and verified first, so a missing or corrupt
        object raises :class:`CheckpointStorageError` before the work tree is touched.  With
        a change hint that continues from the last capture, a file that capture saw as the
        target holds it, and that no hinted change touched since, is not looked at.
        """
        manifest = self._manifest(checkpoint_id)
        base, self._base = self._base, None  # the work tree becomes the target's
        known: dict[str, dict[str, Any]] = {}
        touched: set[str] = set()
        if base is not None and base.followed_by(changes, base.patterns):
            assert changes is not None
            known = base.entries
            touched = {path for rel in changes.paths for path in self._tree_text.under(rel)}
        with _storage_errors(f"restoring checkpoint {manifest.id}"):
            target = self._tree(manifest.tree, manifest.id)
            work = WorkTree(self.work_tree)
            # An empty work tree (a fork's, a new clone's) has nothing to remove: the file lists
            # of every checkpoint need not be read for it.
            covered = self._held_paths().union(self._scan.resolve(manifest.patterns)) \
                if work.holds_anything() else set()
            removals = sorted(covered.difference(target))
            writes, chmods = differences(target, work, self._stat_cache, known, touched)
            contents = self._objects.verified_contents(writes, (
                f"checkpoint {manifest.id} cannot be restored (the work tree was left as it "
                "was)"))

            removed = [path for path in removals if work.remove(path)]
            work.remove_emptied_dirs(removed)
            write_entries(work, writes, contents, self._objects, restoring=True, failure=(
                f"checkpoint {manifest.id} was partly restored"))
            for path, executable in chmods:
                work.set_executable(path, executable)
            self._manifests.set_head(manifest)

    # builtins.list: in this class body, after `def list`, plain `list` names the method.
    def materialize(self, checkpoint_id: str, target: Path) -> builtins.list[str]:
        """Write the checkpoint's files into the new or empty directory ``target``.

        Reads manifests and objects only: the work tree, ``refs.json`` (the current
        checkpoint) and the stat cache stay as they are.  Every object is verified against its
        hash before ``target`` is created, so a damaged store fails without leaving a partial
        export behind.
        """
        manifest = self._manifest(checkpoint_id)
        with _storage_errors(f"materializing checkpoint {manifest.id}"):
            tree = self._tree(manifest.tree, manifest.id)
            entries = sorted(tree.items())
            contents = self._objects.verified_contents(entries, (
                f"checkpoint {manifest.id} cannot be materialized (nothing was written)"))
            with self._export_target(target) as root:
                # WorkTree writes with O_EXCL/O_NOFOLLOW and never through a symlink, so a
                # link this export wrote earlier can never redirect a later file.
                write_entries(WorkTree(root), entries, contents, self._objects, restoring=False, failure=(
                    f"checkpoint {manifest.id} could not be materialized (what was written is "
                    "removed again)"))
        return [path for path, _ in entries]

    def files(self, checkpoint_id: str) -> builtins.list[str]:
        """The checkpoint's paths, sorted, read from its (verified) file list."""
        manifest = self._manifest(checkpoint_id)
        with _storage_errors(f"listing the files of checkpoint {manifest.id}"):
            return sorted(self._tree(manifest.tree, manifest.id))

    def manifest(self, checkpoint_id: str) -> dict[str, StoredFile]:
        """The checkpoint's files from its (verified) file list, read as :meth:`list_read_only`
        reads.  Digests are ``sha256:``: a file's is its object's name."""
        manifest = self._manifest(checkpoint_id)
        with _storage_errors(f"listing the files of checkpoint {manifest.id}"):
            return stored_files(self._tree(manifest.tree, manifest.id))

    def differing_files(self, checkpoint_id: str, other: CheckpointStore, other_id: str
                        ) -> dict[str, tuple[StoredFile | None, StoredFile | None]]:
        """Entry by entry when ``other`` is a snapshot store too: the same tree object is the
        same files (a fork shares its history's), and two file lists are compared as parsed,
        only what differs made a :class:`StoredFile`."""
        if not isinstance(other, SnapshotCheckpointStore):
            return super().differing_files(checkpoint_id, other, other_id)
        mine, theirs = self._manifest(checkpoint_id), other._manifest(other_id)
        if mine.tree == theirs.tree:
            return {}
        with _storage_errors(f"comparing checkpoint {mine.id} with {theirs.id}"):
            one, two = self._tree(mine.tree, mine.id), other._tree(theirs.tree, theirs.id)
        return {path: (stored_file(one[path]) if path in one else None,
                       stored_file(two[path]) if path in two else None)
                for path in sorted(one.keys() | two.keys()) if one.get(path) != two.get(path)}

    def read_file(self, checkpoint_id: str, path: str) -> bytes:
        """The content of one file of the checkpoint, its object verified against its hash
        (a symlink: its target), read as :meth:`list_read_only` reads."""
        manifest = self._manifest(checkpoint_id)
        with _storage_errors(f"reading {path!r} of checkpoint {manifest.id}"):
            entry = self._tree(manifest.tree, manifest.id).get(path)
            if entry is None:
                raise CheckpointNotFoundError(
                    f"checkpoint {manifest.id[:12]} holds no file {path!r}")
            if isinstance(entry, SymlinkEntry):
                return os.fsencode(entry.target)
            return self._objects.read(
                entry.hash, f"checkpoint {manifest.id}: the stored content of {path}")

    def fork_into(self, target_execution_dir: Path, keep: Collection[str]) -> None:
        """Create the target's store holding the ``keep`` checkpoints (and the initial one):
        the objects hard-linked (copied across file systems), the kept manifests copied
        (:mod:`hankweave_checkpoint_snapshot.fork`).  Refused when the target already has a
        checkpoint store.

        Every object on disk is taken, not only those the kept checkpoints need: listing them
        costs a directory walk, while finding the needed ones means reading every kept
        checkpoint's file list (half a second for 25 checkpoints of 20,000 files).  A
        manifest is written only after its objects are durable, so the kept checkpoints'
        objects are all there; what else comes along goes at the fork's first prune."""
        target = SnapshotCheckpointStore(target_execution_dir)
        self._refuse_existing_store(target_execution_dir)
        # A reader of its own, as list_read_only reads: what this instance may have cached
        # is not trusted to be the store as it is now.
        manifests = Manifests(self.manifests_dir, self.refs_path).load()
        kept = kept_manifests(manifests, keep, self.store_dir)
        with _storage_errors(f"forking the snapshot store {self.store_dir} into "
                             f"{target.store_dir}"):
            target._make_dirs()
            try:
                for digest, path in self._objects.on_disk():
                    try:
                        target._objects.adopt(self._objects, digest, (
                            f"the snapshot store {self.store_dir} cannot be forked: an object "
                            "of its checkpoints"))
                    except CheckpointStorageError:
                        if os.path.lexists(path):
                            raise
                        # Pruned since it was listed: only an object no kept checkpoint needs.
                target._objects.sync()
            except BaseException:
                target._objects.discard_pending()
                raise
            copy_manifests(self.manifests_dir, target.manifests_dir, kept)

    def changed_files(self, from_id: str, to_id: str) -> builtins.list[FileChange]:
        """Files that differ between two checkpoints (content, kind or executable bit)."""
        old_manifest, new_manifest = self._manifest(from_id), self._manifest(to_id)
        with _storage_errors("comparing checkpoints"):
            old = self._tree(old_manifest.tree, old_manifest.id)
            new = self._tree(new_manifest.tree, new_manifest.id)
        changes = [FileChange(path, "deleted") for path in old.keys() - new.keys()]
        changes += [FileChange(path, "added") for path in new.keys() - old.keys()]
        changes += [FileChange(path, "modified") for path in old.keys() & new.keys()
                    if old[path] != new[path]]
        return sorted(changes, key=lambda change: change.path)

    def prune(self, policy: RetentionPolicy) -> builtins.list[str]:
        """Delete the checkpoints the policy does not keep, then every unreferenced object.

        Objects are collected even when no checkpoint goes, which also reclaims what a killed
        ``create`` wrote.  Returns the removed ids, newest first.
        """
        removed = expired(self._manifests.load().values(), policy)
        with _storage_errors("pruning checkpoints"):
            self._manifests.remove(removed)
            if removed:
                self._held = None
            collect_garbage(self._manifests, self._trees, self._objects, self._stat_cache)
        return [manifest.id for manifest in removed]

    def close(self) -> None:
        """Write the stat cache if it changed; forget what was cached in memory.  The store
        on disk is always consistent."""
        self._stat_cache.close()
        self._base = None
        self._scan.forget()
        self._tree_text = TreeText()
        self._rendered = None
        self._manifests.forget()
        self._held = None
        self._trees.forget()
        self._objects.forget()

    # ----- the parts' operations, through the store (tests call and patch these) -----

    def _manifest(self, id_or_prefix: str) -> Manifest:
        """The manifest with this id or unique id prefix (as :meth:`resolve`)."""
        manifests = self._manifests.load()
        exact = manifests.get(id_or_prefix.strip().lower())
        return exact if exact is not None else self._by_id_prefix(id_or_prefix, lambda: manifests)

    def _tree(self, digest: str, checkpoint_id: str) -> Tree:
        return self._trees.tree(digest, checkpoint_id)

    def _put_bytes(self, data: bytes) -> str:
        return self._objects.put_bytes(data)

    def _sync_objects(self) -> None:
        self._objects.sync()

    def _store_file(self, full: str) -> tuple[str, int, os.stat_result]:
        """Hash a work-tree file and store it as an object unless it already is one."""
        return self._objects.store_file(full)

    def _trusted_before(self) -> int:
        """A file-system timestamp such that files last changed before it may be cached
        (:func:`hankweave.workspace.trusted_before`, with ``tmp/fs-clock`` as the clock)."""
        return trusted_before(os.path.join(self.tmp_dir, "fs-clock"), self.work_tree)

    # ----- capturing and committing -----

    def _capture(self, patterns: tuple[str, ...]) -> Capture:
        """Scan the files the patterns select, compared with the last commit."""
        return self._capturer().scan(self._scan.resolve(patterns), self._rendered)

    def _capture_changes(self, base: _Base, patterns: tuple[str, ...],
                         paths: frozenset[str]) -> Capture:
        """Read only the hinted ``paths``, from the capture ``base`` (its entries are used up)."""
        return self._capturer().follow(base.entries, paths, patterns, self._tree_text, self._scan)

    def _capturer(self) -> Capturer:
        return Capturer(self.work_tree, self._stat_cache.load(), self._trusted_before(),
                        self._objects, self._store_file)

    def _commit(
        self, *, kind: CheckpointKind, run_id: str | None, codon_id: str | None,
        codon_name: str | None, message: str, timestamp: str, branch: str,
        patterns: Sequence[str], entries: dict[str, dict[str, Any]],
        changed: set[str] | None = None, follows: _Base | None = None,
    ) -> tuple[Manifest, int]:
        """Store the tree, then durably write the manifest that makes it a checkpoint.  Also
        returns how many delta trees lead to the tree (0 when it was written whole)."""
        self._tree_text.update(entries, changed)
        self._rendered = entries
        if (changed is not None and follows is not None and follows.chain < MAX_DELTA_CHAIN
                and len(changed) * DELTA_SHARE <= len(entries)):
            delta = {"format": TREE_DELTA_FORMAT, "base": follows.tree,
                     "changes": {path: entries.get(path) for path in changed}}
            tree, chain = self._put_bytes(canonical_json(delta)), follows.chain + 1
            self._trees.delta_bases[tree] = follows.tree
        else:
            tree, chain = self._put_bytes(self._tree_text.text()), 0
        self._sync_objects()
        kill_point("checkpoint.commit")  # test-only: objects stored, no manifest names them yet
        manifest = self._manifests.write({
            "kind": kind, "run_id": run_id, "codon_id": codon_id, "codon_name": codon_name,
            "message": message, "timestamp": timestamp, "branch": branch,
            "patterns": list(patterns), "tree": tree, "files": len(entries),
            "size": self._tree_text.size,
        })
        if self._held is not None:
            self._held.update(entries if changed is None else changed.intersection(entries))
        return manifest, chain

    def _held_paths(self) -> set[str]:
        """Every path any checkpoint of the store holds (computed once, then kept up to date)."""
        if self._held is None:
            held: set[str] = set()
            for manifest in self._manifests.loaded().values():
                held.update(self._tree(manifest.tree, manifest.id))
            self._held = held
        return self._held

    # ----- the store's directories -----

    def _make_dirs(self) -> None:
        if self.tmp_dir.is_dir() and self.manifests_dir.is_dir() and self.objects_dir.is_dir():
            return
        for directory in (self.objects_dir, self.manifests_dir, self.tmp_dir):
            private_dir(directory)  # under .hankweave/: docs/state.md, "File modes"
        # The new directories' own names, up to the execution directory.
        for directory in (self.store_dir, *self.store_dir.parents[:3]):
            fsync_dir(directory)

    def _remove_leftovers(self) -> None:
        """Delete temp files of processes that are gone (never those of a live process)."""
        def abandoned(name: str) -> bool:
            match = re.search(r"\.tmp-(\d+)$", name) or re.fullmatch(r"(\d+)-\d+\.tmp", name)
            if match is None:
                return False
            pid = int(match.group(1))
            return pid == os.getpid() or not pid_alive(pid)

        for directory in (self.tmp_dir, self.manifests_dir, self.store_dir):
            for entry in os.scandir(directory):
                if entry.is_file(follow_symlinks=False) and abandoned(entry.name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
