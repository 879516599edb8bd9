"""The checkpoint store interface: snapshots of a codon's workspace (``agentRoot/``).

Every codon leaves checkpoints: after its rig setup, and when it completes, fails or is skipped.
Rollback restores the work tree to one of them, and the execution thread validates the
checkpoint ids recorded in state against :meth:`CheckpointStore.checkpoint_data`.

Backends are plugins (``register_checkpoint_backends``).  The kernel never imports one; the
runtime picks the backend named by the ``checkpoints.backend`` setting (default ``git``).

What a checkpoint holds
    The files under ``agentRoot/`` that match the checkpoint's patterns (the accumulated
    ``checkpointedFiles`` globs of the plan up to the codon), honouring ``.gitignore`` files and
    never including ``read_only_data_source/``.  A file that matched an earlier checkpoint's
    patterns and is gone now is recorded as deleted.

What a restore does
    Afterwards the files covered by the target checkpoint are exactly its files: each is written
    back with its content and executable bit, and every other file under ``agentRoot/`` that the
    target's patterns match, or that any checkpoint of this store holds, is removed.  Files no
    checkpoint ever covered (the agent's scratch, the data link) are left alone.

What a materialize does
    A checkpoint's files are written into a fresh directory elsewhere (to export the recording
    of a finished execution), and nothing of the execution changes: not ``agentRoot/``, not the
    checkpoint a restore made current, not any other state of the store.

What a read-only listing does
    :meth:`CheckpointStore.list_read_only` lists the checkpoints for a reader beside the
    runtime (``hankweave inspect``): the store is read as it is, never initialized, repaired or
    locked, so the listing is safe while a runtime writes the store.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

CheckpointKind = Literal["initial", "rig-setup", "completed", "error", "skipped", "exit"]
"""``exit`` is the best-effort checkpoint of a codon still running at shutdown."""

_T = TypeVar("_T")
_HEX_DIGITS = frozenset("0123456789abcdef")


class CheckpointError(Exception):
    """Base of checkpoint store errors."""


class CheckpointNotFoundError(CheckpointError):
    """No checkpoint has this id (or an id prefix matched none)."""


class AmbiguousCheckpointError(CheckpointError):
    """An id prefix matched several checkpoints."""


class CheckpointStorageError(CheckpointError):
    """The store cannot be read or written (a missing tool, a torn repository, a full disk)."""


class BackendNotInstalledError(CheckpointError):
    """The configured backend is not provided by any installed plugin."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint, as listed by a store."""

    id: str
    kind: CheckpointKind
    message: str
    timestamp: str
    branch: str
    run_id: str | None = None
    codon_id: str | None = None

    def matches(self, *, run_id: str | None = None, codon_id: str | None = None,
                kind: CheckpointKind | None = None) -> bool:
        """Whether the checkpoint passes :meth:`CheckpointStore.list`'s filters (``None``:
        any)."""
        return ((run_id is None or self.run_id == run_id)
                and (codon_id is None or self.codon_id == codon_id)
                and (kind is None or self.kind == kind))


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to agentRoot, "/"-separated
    change: Literal["added", "modified", "deleted"]


@dataclass(frozen=True)
class StoredFile:
    """One file of a checkpoint, as :meth:`CheckpointStore.manifest` lists it.

    ``digest`` identifies the content: ``"<algorithm>:<hex>"`` (``git-blob:…``, ``sha256:…``).
    Two files with the same digest have the same bytes, within a backend and across two stores
    of the same backend; digests of different algorithms say nothing, so a reader compares the
    bytes then.  A symlink's digest and size are those of its target text.
    """

    digest: str
    size: int
    executable: bool = False
    symlink: bool = False


@dataclass(frozen=True)
class ChangeHint:
    """What a workspace watcher saw change under ``agentRoot/`` between two of its drains.

    ``paths`` are relative, "/"-separated, each a file or a directory that was created,
    written, had its metadata changed, was deleted, or was moved (both names).  A path that is
    or was a directory stands for its whole subtree: changes inside a directory created during
    the interval produced no events of their own.  ``complete`` is False when changes may have
    escaped (lost events, a directory that could not be watched, the runtime ran something it
    does not trust the watcher to see): then the hint says nothing.

    A hint continues exactly from the previous drain of the same watcher: a store may trust it
    only when its own last capture used the hint that ended at ``since`` (same ``watcher``),
    and must scan otherwise.
    """

    watcher: str
    since: int
    until: int
    paths: frozenset[str]
    complete: bool

    followable_paths: ClassVar[int] = 5000
    """A hint naming more paths than this is not worth following: the store scans."""

    def continues(self, watcher: str, until: int) -> bool:
        """Whether this hint covers exactly the time since a capture that used the hint of
        ``watcher`` ending at ``until``: the trust rule every store applies before it uses a
        hint in place of a scan.  A hint that may have missed changes never continues."""
        return self.complete and self.watcher == watcher and self.since == until

    def worth_following(self) -> bool:
        """Whether reading the hinted paths one by one beats a scan: the hint names at most
        :attr:`followable_paths` paths, and no ``.gitignore`` (a changed ignore file may change
        which files any pattern selects)."""
        return len(self.paths) <= self.followable_paths and not any(
            p.rsplit("/", 1)[-1] == ".gitignore" for p in self.paths)


@dataclass(frozen=True)
class RetentionPolicy:
    """What :meth:`CheckpointStore.prune` keeps.

    ``keep_last_per_run`` newest checkpoints of each run, the initial checkpoint, and every id in
    ``keep_ids`` (the runtime passes every checkpoint id referenced by state).
    """

    keep_last_per_run: int = 20
    keep_ids: frozenset[str] = field(default_factory=frozenset)


def checkpoint_message(
    kind: str, codon_id: str, run_id: str, codon_name: str, timestamp: str,
    duration_ms: int | None = None,
) -> str:
    """The commit message format of the original: tools parse its first line."""
    lines = [
        f"{kind}:{codon_id} [run:{run_id}] {codon_name}",
        "",
        f"Codon: {codon_name}",
        f"Status: {kind}",
        f"Timestamp: {timestamp}",
    ]
    if duration_ms is not None:
        lines.append(f"Duration: {duration_ms}ms")
    return "\n".join(lines) + "\n"


def run_branch(run_id: str) -> str:
    return f"run-{run_id}"


class CheckpointStore(abc.ABC):
    """A backend that snapshots and restores an execution's ``agentRoot/``.

    One instance serves one execution directory and is used from one thread at a time.
    """

    name: ClassVar[str]
    """The name users select in settings (``checkpoints.backend``)."""

    accepts_change_hints: ClassVar[bool] = False
    """Whether :meth:`create` and :meth:`restore` take ``changes=`` (a :class:`ChangeHint`).
    The runtime passes hints only to a backend that says so, so backends written before hints
    still load."""

    def __init__(self, execution_dir: Path) -> None:
        self.execution_dir = Path(execution_dir)
        self.work_tree = self.execution_dir / "agentRoot"

    @abc.abstractmethod
    def initialize(self) -> str:
        """Prepare the store and return the initial checkpoint's id.

        Creates the store and an initial, empty checkpoint on first use; on later calls reuses
        it (repairing what is safe to repair) and returns the same id.
        """

    @abc.abstractmethod
    def create(
        self,
        *,
        kind: CheckpointKind,
        run_id: str,
        codon_id: str,
        codon_name: str,
        patterns: Sequence[str],
        duration_ms: int | None = None,
    ) -> Checkpoint:
        """Snapshot the files matching ``patterns`` on the run's branch and return the checkpoint.

        A checkpoint is always created, even when nothing changed.  A backend with
        :attr:`accepts_change_hints` also takes ``changes``: a :class:`ChangeHint` of what
        changed since its previous capture, which it may use instead of scanning the work tree
        when the hint continues from that capture, and must ignore otherwise; the checkpoint
        holds the same files either way.
        """

    @abc.abstractmethod
    def list(
        self,
        *,
        run_id: str | None = None,
        codon_id: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> list[Checkpoint]:
        """Checkpoints, newest first, optionally filtered."""

    @abc.abstractmethod
    def resolve(self, id_or_prefix: str) -> Checkpoint:
        """The checkpoint with this id or unique id prefix.

        Raises :class:`CheckpointNotFoundError` or :class:`AmbiguousCheckpointError`.
        """

    @abc.abstractmethod
    def restore(self, checkpoint_id: str) -> None:
        """Make the work tree's checkpointed files exactly those of the checkpoint.

        A backend with :attr:`accepts_change_hints` also takes ``changes``, as :meth:`create`
        does: what changed since its last capture, so files that capture saw as the target
        holds them need not be looked at.
        """

    @abc.abstractmethod
    def changed_files(self, from_id: str, to_id: str) -> builtins.list[FileChange]:
        """Files that differ between two checkpoints, sorted by path."""

    @abc.abstractmethod
    def prune(self, policy: RetentionPolicy) -> builtins.list[str]:
        """Delete what the policy does not keep; return the ids removed."""

    def materialize(self, checkpoint_id: str, target: Path) -> builtins.list[str]:
        """Write exactly the checkpoint's files into the directory ``target``; return their paths.

        ``checkpoint_id`` is an id or a unique id prefix, as for :meth:`resolve`.  ``target`` is
        created when missing and must otherwise be an empty directory outside ``agentRoot/``
        and the checkpoint store; anything else raises :class:`CheckpointError`.  Each file is
        written with its content and executable bit, and a symlink as a symlink with its stored
        target (never followed).  The work tree, the current checkpoint and everything else of
        the store are left exactly as they were, so exporting is safe at any time nothing runs.

        Returns the sorted relative ("/"-separated) paths written, which are
        :meth:`files` of the checkpoint.  On failure, what was written is removed again.

        Backends override this.  The default exists so a third-party backend written before
        this operation still loads and runs; exporting from it reports that it cannot.
        """
        raise CheckpointError(
            f"the {self.name!r} checkpoint backend cannot write a checkpoint's files elsewhere "
            "(it does not implement materialize); export with a backend that does, such as "
            "git or snapshot")

    def files(self, checkpoint_id: str) -> builtins.list[str]:
        """The sorted relative ("/"-separated) paths of the files the checkpoint holds.

        Backends override this with a direct read of their file list; the default
        materializes the checkpoint into a scratch directory and reports what it wrote.
        """
        with tempfile.TemporaryDirectory(prefix="hankweave-checkpoint-files-") as scratch:
            return self.materialize(checkpoint_id, Path(scratch) / "files")

    @contextlib.contextmanager
    def _export_target(self, target: Path) -> Iterator[Path]:
        """Check and create ``target`` for :meth:`materialize`; undo it if writing fails.

        Yields the absolute directory to write into.  A backend resolves the checkpoint id
        first, so an unknown id never creates a directory.  On an exception the directories
        created here are removed, or, when ``target`` already existed, what was written into it,
        which leaves it empty as it was found.
        """
        root = Path(os.path.abspath(target))
        guarded = {"the work tree (agentRoot)": self.work_tree,
                   "the checkpoint store": self.execution_dir / ".hankweave" / "checkpoints"}
        real_root = root.resolve()
        for what, place in guarded.items():
            real_place = Path(os.path.abspath(place)).resolve()
            if real_root == real_place or real_place in real_root.parents:
                raise CheckpointError(
                    f"cannot materialize a checkpoint into {root}: it lies inside {what} "
                    f"({place}), which materialize must leave untouched; choose a directory "
                    "outside it")
        # The highest missing ancestor: on failure everything from there down is ours to remove.
        created: Path | None = None
        probe = root
        while not os.path.lexists(probe):
            created, probe = probe, probe.parent
        try:
            if created is None:
                if not root.is_dir():
                    raise CheckpointError(
                        f"cannot materialize a checkpoint into {root}: it exists and is not a "
                        "directory; give a new or empty directory")
                with os.scandir(root) as entries:
                    if any(True for _ in entries):
                        raise CheckpointError(
                            f"cannot materialize a checkpoint into {root}: the directory is not "
                            "empty, and its files would mix with the checkpoint's; give a new "
                            "or empty directory")
            else:
                root.mkdir(parents=True)
        except OSError as exc:
            raise CheckpointStorageError(
                f"cannot prepare {root} to materialize a checkpoint into: {exc}") from exc
        try:
            yield root
        except BaseException:
            if created is not None:
                shutil.rmtree(created, ignore_errors=True)
            else:
                _empty_directory(root)
            raise

    @staticmethod
    def _by_id_prefix(id_or_prefix: str, listed: Callable[[], Mapping[str, _T]]) -> _T:
        """The one entry of ``listed()`` (keyed by checkpoint id) whose id starts with
        ``id_or_prefix``, as :meth:`resolve` finds it: case and surrounding space do not count,
        and only a hexadecimal prefix is looked up (``listed`` is not called otherwise).

        Raises :class:`CheckpointNotFoundError` or :class:`AmbiguousCheckpointError`.
        """
        needle = id_or_prefix.strip().lower()
        found = listed() if needle and set(needle) <= _HEX_DIGITS else {}
        matches = [key for key in found if key.startswith(needle)]
        if not matches:
            raise CheckpointNotFoundError(f'no checkpoint has the id "{id_or_prefix}"')
        if len(matches) > 1:
            raise AmbiguousCheckpointError(
                f'the id prefix "{id_or_prefix}" matches {len(matches)} checkpoints; '
                "give more characters")
        return found[matches[0]]

    def list_read_only(self) -> builtins.list[Checkpoint] | None:
        """Every checkpoint, newest first, read without changing anything; ``None`` if the
        backend cannot list that way.

        Unlike :meth:`list`, this needs no :meth:`initialize`: it creates, repairs and locks
        nothing (a store that does not exist yet lists no checkpoints), and imports no more
        than listing needs, since ``hankweave inspect`` calls it and must stay light.

        Backends override this.  The default returns ``None`` so a third-party backend written
        before this operation still loads; ``inspect`` then shows no checkpoints and says why,
        rather than open the store.
        """
        return None

    def fork_into(self, target_execution_dir: Path, keep: Collection[str]) -> None:
        """Create the checkpoint store of ``target_execution_dir``, a new execution forked from
        this one, holding the checkpoints ``keep`` (ids, the initial checkpoint among them) under
        the same ids.

        The source is read as :meth:`list_read_only` reads it: never initialized, repaired,
        locked or written, so forking is safe while a runtime writes it.  What is immutable may
        be shared (a hard link) and everything else is copied, so no later write to either store
        changes a byte of the other.  Afterwards :meth:`initialize` of the target's store returns
        the same initial checkpoint, and every kept id resolves, restores, materializes and
        lists as it did here; checkpoints not kept may be absent.  The target's work tree is
        not touched (the caller restores the checkpoint it forks at).

        Backends override this; the default says that the backend cannot fork.
        """
        raise CheckpointError(
            f"the {self.name!r} checkpoint backend cannot fork an execution (it does not "
            "implement fork_into); fork with a backend that does, such as git or snapshot")

    @staticmethod
    def _refuse_existing_store(target_execution_dir: Path) -> None:
        """For :meth:`fork_into`: raise :class:`CheckpointError` unless the target's
        ``.hankweave/checkpoints`` is missing or empty, so a fork never mixes its checkpoints
        into a store that exists."""
        checkpoints_dir = Path(target_execution_dir) / ".hankweave" / "checkpoints"
        if not os.path.lexists(checkpoints_dir):
            return
        if checkpoints_dir.is_dir() and not checkpoints_dir.is_symlink():
            with os.scandir(checkpoints_dir) as entries:
                if not any(True for _ in entries):
                    return
        raise CheckpointError(
            f"cannot fork checkpoints into {checkpoints_dir}: a checkpoint store is already "
            "there; fork into a new execution directory")

    def manifest(self, checkpoint_id: str) -> dict[str, StoredFile]:
        """Every file of the checkpoint by relative ("/"-separated) path, read without
        changing anything, as :meth:`list_read_only` reads (safe while a runtime writes the
        store).

        Backends override this with a direct read; the default materializes the checkpoint
        into a scratch directory and hashes what it wrote.
        """
        import hashlib

        found: dict[str, StoredFile] = {}
        with tempfile.TemporaryDirectory(prefix="hankweave-checkpoint-manifest-") as scratch:
            root = Path(scratch) / "files"
            for rel in self.materialize(checkpoint_id, root):
                path = root / rel
                if path.is_symlink():
                    data = os.readlink(path).encode("utf-8", "surrogateescape")
                    found[rel] = StoredFile(f"sha256:{hashlib.sha256(data).hexdigest()}",
                                            len(data), symlink=True)
                    continue
                data = path.read_bytes()
                found[rel] = StoredFile(f"sha256:{hashlib.sha256(data).hexdigest()}",
                                        len(data), executable=os.access(path, os.X_OK))
        return found

    def differing_files(self, checkpoint_id: str, other: CheckpointStore, other_id: str
                        ) -> dict[str, tuple[StoredFile | None, StoredFile | None]]:
        """The files of this store's checkpoint and of ``other``'s (another store, of any
        backend) that may differ, by path: this one's entry and the other's, None where a side
        has no such file.  A path whose entries are equal (digest, mode, kind) is left out, so
        when both use one digest algorithm the result is exactly what differs; entries of
        different algorithms are listed and the caller compares their bytes.  Read as
        :meth:`manifest` reads.

        Backends override this to skip what two checkpoints share without listing it (equal
        subtrees, a shared base); the default compares the two manifests.
        """
        mine, theirs = self.manifest(checkpoint_id), other.manifest(other_id)
        return {path: (mine.get(path), theirs.get(path))
                for path in sorted(mine.keys() | theirs.keys())
                if mine.get(path) != theirs.get(path)}

    def read_file(self, checkpoint_id: str, path: str) -> bytes:
        """The bytes of one file of the checkpoint (a symlink: its target text), read as
        :meth:`manifest` reads.  Raises :class:`CheckpointNotFoundError` when the checkpoint
        holds no such file.

        Backends override this; the default materializes the checkpoint.
        """
        with tempfile.TemporaryDirectory(prefix="hankweave-checkpoint-read-") as scratch:
            root = Path(scratch) / "files"
            if path not in self.materialize(checkpoint_id, root):
                raise CheckpointNotFoundError(
                    f"checkpoint {checkpoint_id[:12]} holds no file {path!r}")
            target = root / path
            if target.is_symlink():
                return os.readlink(target).encode("utf-8", "surrogateescape")
            return target.read_bytes()

    def checkpoint_data(self) -> dict[str, dict[str, str]]:
        """``{id: {message, timestamp, branch}}`` for execution-thread validation."""
        return checkpoint_data_of(self.list())

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (open repositories, file handles)."""


def checkpoint_data_of(checkpoints: Iterable[Checkpoint]) -> dict[str, dict[str, str]]:
    """``{id: {message, timestamp, branch}}``: what execution-thread validation reads."""
    return {
        c.id: {"message": c.message, "timestamp": c.timestamp, "branch": c.branch}
        for c in checkpoints
    }


def _empty_directory(root: Path) -> None:
    """Remove everything inside ``root`` (best effort), never following a symlink."""
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in list(entries):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
