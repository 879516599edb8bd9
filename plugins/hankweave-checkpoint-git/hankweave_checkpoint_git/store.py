"""The ``git`` checkpoint store: checkpoints as commits in a shadow repository."""

from __future__ import annotations

import builtins
import json
import os
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

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
    kill_point,
    private_dir,
    run_branch,
    utc_now_iso,
)

from hankweave_checkpoint_git.checkout import (
    changed_since_index,
    differing_by_hint,
    differing_by_stat,
    tree_paths,
    write_back,
)
from hankweave_checkpoint_git.commands import GitReader, GitRunner
from hankweave_checkpoint_git.coverage import CoveredPaths, IndexPaths
from hankweave_checkpoint_git.environment import NO_PROGRAMS_IN_DIFFS
from hankweave_checkpoint_git.fork import fork_repository, kept_records
from hankweave_checkpoint_git.objects import ObjectDatabase
from hankweave_checkpoint_git.owned import OwnedFiles
from hankweave_checkpoint_git.reading import StoredFiles, differing, file_bytes
from hankweave_checkpoint_git.records import (
    HEX,
    TRAILER_PREFIX,
    Record,
    original_initial,
    parse_record,
    read_records,
    recorded_initial,
)
from hankweave_checkpoint_git.refs import (
    CHECKPOINT_REFS,
    GIT_DIR_NAME,
    INITIAL_REF,
    LEGACY_GIT_DIR_NAME,
    point_head_at,
    read_loose_ref,
    write_ref,
)
from hankweave_checkpoint_git.repository import find_initial, open_or_build
from hankweave_checkpoint_git.retention import ref_updates, split_by_policy
from hankweave_checkpoint_git.worktree import (
    exported,
    nul_join,
    remove_covered_file,
    remove_empty_dirs,
    storable,
)


@dataclass(frozen=True)
class _Base:
    """What the store's last capture saw: the hint it ended at, its patterns, its tree."""

    watcher: str
    epoch: int
    patterns: tuple[str, ...]
    tree: str


class GitCheckpointStore(CheckpointStore):
    """Checkpoints as commits in a shadow git repository beside ``agentRoot/``.

    After :meth:`restore` HEAD is detached at the restored checkpoint, as in Hankweave 0.10.0;
    the next :meth:`create` moves HEAD to the run's branch.
    """

    name: ClassVar[str] = "git"
    accepts_change_hints: ClassVar[bool] = True

    stale_lock_seconds: ClassVar[float] = 2.0
    """A git lock file at least this old is taken as left behind by a killed process."""

    def __init__(self, execution_dir: Path) -> None:
        super().__init__(Path(execution_dir).absolute())
        self.checkpoints_dir = self.execution_dir / ".hankweave" / "checkpoints"
        self.git_dir = self.checkpoints_dir / GIT_DIR_NAME
        self._git: GitRunner | None = None
        self._owned = OwnedFiles(self.git_dir)
        self._initial: str | None = None
        self._sequence = 0
        self._covered = CoveredPaths(self.git_dir)
        self._index = IndexPaths(self.git_dir)
        self._trees: dict[str, frozenset[str]] = {}
        self._base: _Base | None = None
        self._object_db: ObjectDatabase | None = None
        self._scan = WorkspaceScan(self.work_tree, self.checkpoints_dir / "fs-clock")
        self._stored = StoredFiles()

    # ----- lifecycle -----

    def initialize(self) -> str:
        """Open (or build) the shadow repository and return the initial checkpoint's sha.

        Repairs what a killed git process leaves behind: stale lock files, an abandoned build
        directory, an unreadable index (it is only a cache here).  A repository whose HEAD does
        not resolve is rebuilt when it holds no checkpoint, and refused otherwise.
        """
        # 0700 (an older one narrowed): git's own files inside keep git's modes, out of reach.
        private_dir(self.checkpoints_dir, tighten=True)
        # git refuses a GIT_WORK_TREE that does not exist, even for commands that never read it.
        self.work_tree.mkdir(parents=True, exist_ok=True)
        self._git = None
        self._initial = None
        self._base = None
        self._object_db = None
        git = self._runner(self.git_dir)
        open_or_build(self.checkpoints_dir, self.git_dir, git, self.stale_lock_seconds,
                                 self._owned, self._runner)
        # The config and attributes are put right (an older layout brought up to date) by
        # the first git command below, as before every git command.
        self._initial = find_initial(git, self.git_dir)
        self._index.check(git)
        self._covered.forget()
        records = self._records()
        self._sequence = max((r.sequence or 0 for r in records), default=0)
        return self._initial

    def close(self) -> None:
        """Forget cached state; the repository itself needs no closing."""
        self._git = None
        self._covered.forget()
        self._index.forget()
        self._base = None
        self._object_db = None
        self._scan.forget()
        self._stored.forget()

    # ----- creating -----

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
        """Commit exactly the files ``patterns`` select on branch ``run-<run_id>``.

        With a change hint that continues from this store's previous capture, only the hinted
        paths are read and the tree is the previous one with those paths replaced; otherwise
        the work tree is scanned.  Both give the same tree for the same files.
        """
        git, initial = self._ready()
        # An agent may have deleted agentRoot itself; git needs the work tree to exist.
        self.work_tree.mkdir(parents=True, exist_ok=True)
        patterns = tuple(patterns)
        base, self._base = self._base, None  # a failure below leaves no base to continue from
        if (base is not None and changes is not None and patterns == base.patterns
                and changes.continues(base.watcher, base.epoch) and changes.worth_following()):
            tree = self._tree_by_hint(git, base.tree, patterns, changes.paths)
        else:
            tree = self._tree_by_scan(git, patterns)
        timestamp = utc_now_iso()
        sequence = self._sequence + 1
        message = checkpoint_message(kind, codon_id, run_id, codon_name, timestamp, duration_ms)
        trailers = (f"{TRAILER_PREFIX}Sequence: {sequence}\n"
                    f"{TRAILER_PREFIX}Patterns: {json.dumps(list(patterns))}\n")
        sha = self._objects().commit(tree, initial, f"{message}\n{trailers}", timestamp)
        kill_point("checkpoint.commit")  # test-only: the commit exists, no ref keeps it yet
        branch = run_branch(run_id)
        # The checkpoint's own ref first: from then on it is kept, whatever happens next.
        write_ref(self.git_dir, f"{CHECKPOINT_REFS}{sha}", sha)
        write_ref(self.git_dir, f"refs/heads/{branch}", sha)
        self._sequence = sequence
        point_head_at(self.git_dir, branch)
        if changes is not None:
            self._base = _Base(changes.watcher, changes.until, patterns, tree)
        return Checkpoint(id=sha, kind=kind, message=message, timestamp=timestamp, branch=branch,
                          run_id=run_id, codon_id=codon_id)

    def _tree_by_scan(self, git: GitRunner, patterns: tuple[str, ...]) -> str:
        """The tree of the files the patterns select now, through the index."""
        files = self._scan.resolve(patterns)
        wanted = set(files)
        index = self._index.paths(git)
        gone = index - wanted
        # What to (re)write into the index: files new to it, and those whose content, mode or
        # kind differs from it, which git finds from the index's stat data (diff-files).
        changed = [path for path in changed_since_index(git) if path in wanted]
        updates = storable(self.work_tree, [f for f in files if f not in index] + changed)
        # Before the commit exists, so the covered set is never smaller than the checkpoints.
        self._covered.note(git, files)
        if gone:
            git.run("update-index", "--force-remove", "-z", "--stdin",
                    stdin=nul_join(sorted(gone)), in_work_tree=True)
        if updates:
            # --remove: a file deleted since it was resolved leaves the index instead of failing.
            git.run("update-index", "--add", "--remove", "--replace", "-z", "--stdin",
                    stdin=nul_join(updates), in_work_tree=True)
        tree = git.run("write-tree", in_work_tree=True).decode().strip()
        # The index now holds `wanted`, less any path git refused (it prints "Ignoring path").
        # Remembering a superset is harmless: such a path is only force-removed again later.
        self._index.remember(wanted)
        return tree

    def _tree_by_hint(self, git: GitRunner, base_tree: str, patterns: tuple[str, ...],
                      paths: frozenset[str]) -> str:
        """The previous capture's tree with the hinted paths read again.

        The index is not touched: it stays the stat cache of an older tree, which the next
        scan corrects (``diff-files`` reports every file that changed since).
        """
        objects = self._objects()
        changes: dict[str, tuple[bytes, bytes] | None] = {}
        added: builtins.list[str] = []
        for rel in sorted(paths):
            now = self._scan.resolve_under(patterns, rel)
            for gone in objects.paths_under(base_tree, rel).difference(now):
                changes[gone] = None
            for path in now:
                entry = objects.store_file(self.work_tree, path)
                changes[path] = entry
                if entry is not None:
                    added.append(path)
        self._covered.note(git, added)
        return objects.apply(base_tree, changes)

    # ----- reading -----
    # Annotations in this class say builtins.list: here, ``list`` is the method below.

    def list(
        self,
        *,
        run_id: str | None = None,
        codon_id: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Every checkpoint reachable from a ref, newest first, optionally filtered."""
        return [r.checkpoint for r in self._records()
                if r.checkpoint.matches(run_id=run_id, codon_id=codon_id, kind=kind)]

    def list_read_only(self) -> builtins.list[Checkpoint]:
        """Every checkpoint, newest first, read with the ``git`` executable alone.

        GitPython is not imported, and nothing is written: the repository is not built,
        moved, re-configured or repaired, lock files stay (reading takes no lock), and a
        repository of Hankweave 0.10.0 or older is read where it is, without adopting it.
        """
        reader = self._reader()
        if reader is None:
            return []
        initial = recorded_initial(reader) or original_initial(reader)
        return [r.checkpoint for r in read_records(reader, initial)]

    def manifest(self, checkpoint_id: str) -> dict[str, StoredFile]:
        """The checkpoint's files from ``git ls-tree``, read as :meth:`list_read_only` reads.

        Digests are ``git-blob:<blob sha>``.  Sizes come from the blobs' headers, and what is
        learnt of a blob is kept, so later manifests of the same store read only new blobs.
        """
        reader, sha = self._read_only(checkpoint_id)
        return self._stored.manifest(reader, sha)

    def differing_files(self, checkpoint_id: str, other: CheckpointStore, other_id: str
                        ) -> dict[str, tuple[StoredFile | None, StoredFile | None]]:
        """Tree by tree when ``other`` is a git store too (a fork and its source share their
        history's trees, so only what changed is listed): :func:`.reading.differing`."""
        if not isinstance(other, GitCheckpointStore):
            return super().differing_files(checkpoint_id, other, other_id)
        reader, sha = self._read_only(checkpoint_id)
        other_reader, other_sha = other._read_only(other_id)
        return differing((reader, self._stored), f"{sha}^{{tree}}",
                         (other_reader, other._stored), f"{other_sha}^{{tree}}")

    def read_file(self, checkpoint_id: str, path: str) -> bytes:
        """The blob at ``path`` in the checkpoint (``git cat-file``), read as
        :meth:`list_read_only` reads."""
        reader, sha = self._read_only(checkpoint_id)
        return file_bytes(reader, sha, path)

    def resolve(self, id_or_prefix: str) -> Checkpoint:
        return self._resolve_record(id_or_prefix).checkpoint

    def changed_files(self, from_id: str, to_id: str) -> builtins.list[FileChange]:
        """``git diff --name-status`` between two checkpoints, without rename detection."""
        git, _ = self._ready()
        old = self._resolve_record(from_id).checkpoint.id
        new = self._resolve_record(to_id).checkpoint.id
        out = git.run("diff-tree", *NO_PROGRAMS_IN_DIFFS, "-r", "-z", "--no-renames",
                      "--name-status", old, new)
        fields = out.split(b"\0")
        changes = []
        for status, path in zip(fields[0::2], fields[1::2], strict=False):
            if not status:
                continue
            change = {b"A": "added", b"D": "deleted"}.get(status[:1], "modified")
            changes.append(FileChange(os.fsdecode(path), change))  # type: ignore[arg-type]
        return sorted(changes, key=lambda c: c.path)

    # ----- restoring -----

    def restore(self, checkpoint_id: str, *, changes: ChangeHint | None = None) -> None:
        """Make the covered files of the work tree exactly the checkpoint's; detach HEAD there.

        Covered: the checkpoint's files, every file any checkpoint ever held, and every file the
        checkpoint's patterns match now.  Other files, and ``read_only_data_source``, stay.
        With a change hint that continues from the last capture, git is not asked which files
        differ: they are those the two trees differ in, and those the hint names.
        """
        git, _ = self._ready()
        record = self._resolve_record(checkpoint_id)
        sha = record.checkpoint.id
        base, self._base = self._base, None  # the work tree becomes the target's
        hinted = (base is not None and changes is not None
                  and changes.continues(base.watcher, base.epoch))
        self.work_tree.mkdir(parents=True, exist_ok=True)
        target = self._tree_path_set(git, sha)
        covered = self._covered.paths(git) | self._index.paths(git)
        covered.update(self._scan.resolve(record.patterns or ()))
        emptied: set[Path] = set()
        for rel in sorted(covered - target):
            parent = remove_covered_file(self.work_tree, rel)
            if parent is not None:
                emptied.add(parent)
        kill_point("checkpoint.restore")  # test-only: the removals are done, not the writes
        remove_empty_dirs(self.work_tree, emptied)
        if hinted:
            assert base is not None and changes is not None
            differing = differing_by_hint(git, self._objects(), self._index, sha, base.tree, changes.paths, target)
        else:
            differing = differing_by_stat(git, sha, target)
        write_back(git, self._index, sha, target, differing)
        self._index.remember(target)
        write_ref(self.git_dir, "HEAD", sha)


    # ----- exporting -----

    def materialize(self, checkpoint_id: str, target: Path) -> builtins.list[str]:
        """Check the checkpoint's tree out into the new or empty directory ``target``.

        A private index in a scratch directory is loaded with the checkpoint's tree
        (``read-tree``) and checked out with ``target`` as the work tree (``checkout-index``),
        so the repository's own index, HEAD and refs are never written and ``agentRoot/`` is not
        touched.  ``core.symlinks`` and the repository's attributes make links come out as
        links and bytes as stored.
        """
        git, _ = self._ready()
        sha = self._resolve_record(checkpoint_id).checkpoint.id
        paths = tree_paths(git, sha)
        with self._export_target(target) as root, tempfile.TemporaryDirectory(
                prefix="hankweave-materialize-") as scratch:
            private = {"GIT_INDEX_FILE": os.path.join(scratch, "index"),
                       "GIT_WORK_TREE": str(root)}
            git.run("read-tree", sha, env=private)
            git.run("checkout-index", "--all", env=private)
            written = sorted(exported(root))
            if written != paths:
                # git skips an entry it cannot check out with only a warning: say which.
                missing = sorted(set(paths) - set(written))
                raise CheckpointStorageError(
                    f"checkpoint {sha} could not be materialized into {root}: git did not write "
                    f"{', '.join(missing[:5]) or 'the expected files'}")
        return paths

    def files(self, checkpoint_id: str) -> builtins.list[str]:
        """The checkpoint's paths, sorted, from ``git ls-tree``."""
        git, _ = self._ready()
        return tree_paths(git, self._resolve_record(checkpoint_id).checkpoint.id)

    # ----- forking -----

    def fork_into(self, target_execution_dir: Path, keep: Collection[str]) -> None:
        """Build the target's repository holding the ``keep`` checkpoints (and the initial).

        This repository is read as :meth:`list_read_only` reads it; its object files are
        hard-linked (copied across file systems) and the refs of the kept checkpoints written
        anew (:mod:`hankweave_checkpoint_git.fork`).  Refused when the target already has a
        checkpoint store.
        """
        target = GitCheckpointStore(target_execution_dir)
        self._refuse_existing_store(target_execution_dir)
        reader = self._reader()
        if reader is None:
            raise CheckpointNotFoundError(
                f"cannot fork {self.execution_dir}: it has no checkpoint repository")
        initial = recorded_initial(reader) or original_initial(reader)
        if initial is None:
            raise CheckpointStorageError(
                f"cannot fork the checkpoint repository {reader.git_dir}: it has no initial "
                "checkpoint")
        kept = kept_records(read_records(reader, initial), keep, initial, reader.git_dir)
        try:
            private_dir(target.checkpoints_dir, tighten=True)
            config = OwnedFiles(target.git_dir).config  # probes the target's disk
        except OSError as exc:
            raise CheckpointStorageError(
                f"cannot create the checkpoint store {target.checkpoints_dir}: {exc}") from exc
        fork_repository(reader, target.git_dir, target.execution_dir, kept, initial, config)

    # ----- retention -----

    def prune(self, policy: RetentionPolicy) -> builtins.list[str]:
        """Delete the checkpoints ``policy`` does not keep, and their objects.

        Always kept besides the policy: the initial checkpoint, the commit HEAD is at (the work
        tree's base), and checkpoints made by Hankweave 0.10.0 (they are chained by parentage,
        so removing one would rewrite the ids of the others).
        """
        git, initial = self._ready()
        records = self._records()
        status, out, _ = git.call("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        head = out.decode().strip() if status == 0 else None
        kept, removed = split_by_policy(records, policy, always=(initial, head))
        if not removed:
            return []
        tips = git.run("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
        git.run("update-ref", "--stdin", stdin=ref_updates(removed, kept, tips.decode()).encode())
        # Reclaim the space now: nothing else references the removed commits (no reflogs, no
        # children), so their unique trees and blobs go with them.
        git.run("reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
        git.run("gc", "--prune=now", "--quiet")
        self._object_db = None  # objects moved into a new pack
        return [r.checkpoint.id for r in removed]

    # ----- internals -----

    def _runner(self, git_dir: Path) -> GitRunner:
        if self._git is not None and git_dir == self.git_dir:
            return self._git
        owned = self._owned if git_dir == self.git_dir else None
        runner = GitRunner(git_dir, self.work_tree, self.checkpoints_dir, self.execution_dir, owned)
        if git_dir == self.git_dir:
            self._git = runner
        return runner

    def _ready(self) -> tuple[GitRunner, str]:
        if self._initial is None or self._git is None:
            self.initialize()
        assert self._git is not None and self._initial is not None
        return self._git, self._initial

    def _reader(self) -> GitReader | None:
        """A reader of the repository where it is (adopted or not), or None when there is
        none: what reads without opening the store use."""
        places = (self.git_dir, self.checkpoints_dir / LEGACY_GIT_DIR_NAME)
        git_dir = next((place for place in places if place.is_dir()), None)
        if git_dir is None:
            return None
        return GitReader(git_dir, self.checkpoints_dir, self.execution_dir)

    def _read_only(self, id_or_prefix: str) -> tuple[GitReader, str]:
        """A reader and the sha of the checkpoint with this id or unique id prefix, found
        without opening the store: a full id from its loose ref, anything else by listing."""
        reader = self._reader()
        if reader is None:
            raise CheckpointNotFoundError(f'no checkpoint has the id "{id_or_prefix}"')
        sha = id_or_prefix.strip().lower()
        if len(sha) == 40 and set(sha) <= HEX and sha in (
                read_loose_ref(reader.git_dir, f"{CHECKPOINT_REFS}{sha}"),
                read_loose_ref(reader.git_dir, INITIAL_REF)):
            return reader, sha
        initial = recorded_initial(reader) or original_initial(reader)
        record = self._by_id_prefix(
            id_or_prefix, lambda: {r.checkpoint.id: r for r in read_records(reader, initial)})
        return reader, record.checkpoint.id

    def _records(self) -> builtins.list[Record]:
        git, initial = self._ready()
        return read_records(git, initial)

    def _resolve_record(self, id_or_prefix: str) -> Record:
        direct = self._record_by_ref(id_or_prefix.strip().lower())
        if direct is not None:
            return direct
        return self._by_id_prefix(
            id_or_prefix, lambda: {r.checkpoint.id: r for r in self._records()})

    def _record_by_ref(self, sha: str) -> Record | None:
        """The checkpoint with this full id read straight from its loose ref and commit,
        without listing every checkpoint (the runtime restores by full id); None when that
        cannot answer (a prefix, packed refs, a checkpoint of Hankweave 0.10.0)."""
        _, initial = self._ready()
        if len(sha) != 40 or not set(sha) <= HEX:
            return None
        if sha != initial and read_loose_ref(self.git_dir, f"{CHECKPOINT_REFS}{sha}") != sha:
            return None
        commit = self._objects().read_commit(sha)
        if commit is None:
            return None
        return parse_record(sha, commit[0], commit[1], sha == initial, 0)

    def _tree_path_set(self, git: GitRunner, sha: str) -> frozenset[str]:
        """A commit's paths, kept for the few commits restored last (a commit never changes)."""
        paths = self._trees.pop(sha, None)
        if paths is None:
            paths = frozenset(tree_paths(git, sha))
        self._trees[sha] = paths
        while len(self._trees) > 4:
            del self._trees[next(iter(self._trees))]
        return paths


    def _objects(self) -> ObjectDatabase:
        if self._object_db is None:
            self._object_db = ObjectDatabase(self.git_dir / "objects")
        return self._object_db
