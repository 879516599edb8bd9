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
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from hankweave.api import (
    DATA_LINK,
    PRIVATE_FILE_MODE,
    AmbiguousCheckpointError,
    ChangeHint,
    Checkpoint,
    CheckpointKind,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointStore,
    FileChange,
    RetentionPolicy,
    WorkspaceScan,
    atomic_write_bytes,
    checkpoint_message,
    fsync_dir,
    kill_point,
    open_private,
    pid_alive,
    private_dir,
    run_branch,
    trusted_before,
    utc_now_iso,
)

__all__ = [
    "FileEntry",
    "Manifest",
    "SnapshotCheckpointStore",
    "SymlinkEntry",
]

STORE_DIR = (".hankweave", "checkpoints", "snapshot")
"""Where the store lives, relative to the execution directory."""

MANIFEST_FORMAT: Final = "hankweave-snapshot-manifest/1"
REFS_FORMAT: Final = "hankweave-snapshot-refs/1"
STAT_CACHE_FORMAT: Final = "hankweave-snapshot-stat-cache/1"

INITIAL_MESSAGE = "Initial checkpoint setup\n"
INITIAL_BRANCH = "main"

TREE_DELTA_FORMAT: Final = "hankweave-snapshot-tree-delta/1"
MAX_DELTA_CHAIN = 32
"""How many delta trees may follow one another before a tree is written whole again."""
DELTA_SHARE = 32
"""A tree is written as a delta only when the changes are at most 1/DELTA_SHARE of its files."""

HINTED_PATH_LIMIT = 5000
"""A change hint naming more paths than this is not worth following: the store scans."""

STAT_CACHE_SLACK = 256
"""How many stat-cache entries may change before the cache is written again."""

SMALL_FILE_BYTES = 4 * 1024 * 1024
"""Files up to this size are read whole; larger ones are streamed in chunks."""

CHUNK_BYTES = 1024 * 1024

MAX_PENDING_OBJECTS = 64
"""Objects written but not yet fsynced, each holding an open file, before a batch is flushed."""

FSYNC_THREADS = 8
"""fsyncs issued together share the file system's journal commits: a batch of 100 is several
times faster on a few threads than one after another."""

VERIFIED_BYTES_BUDGET = 64 * 1024 * 1024
"""How much verified object content a restore keeps in memory between checking and writing."""

_ID = re.compile(r"[0-9a-f]{40}")
_HASH = re.compile(r"[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]*")
_MANIFEST_NAME = re.compile(r"([0-9a-f]{40})\.json")
_OPEN_READ = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
_OPEN_REWRITE = (os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
_OPEN_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


# ----- on-disk formats -----


class _Record(BaseModel):
    # Validators are built on first use, not at import: every start of hankweave (--help
    # included) imports this module, and most never read a manifest.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class FileEntry(_Record):
    """A regular file of a tree: its content's object and its executable bit."""

    type: Literal["file"] = "file"
    hash: str = Field(pattern=_HASH.pattern)
    size: int = Field(ge=0)
    executable: bool = False


class SymlinkEntry(_Record):
    """A symbolic link of a tree, stored as a link (its target is never followed)."""

    type: Literal["symlink"] = "symlink"
    target: str = Field(min_length=1)


TreeEntry: TypeAlias = Annotated[FileEntry | SymlinkEntry, Field(discriminator="type")]
Tree: TypeAlias = dict[str, FileEntry | SymlinkEntry]
_TREE = TypeAdapter(dict[str, TreeEntry], config=ConfigDict(defer_build=True))


class TreeDelta(_Record):
    """A tree written as the changes to another one, its ``base``: ``changes`` maps a path to
    its new entry, or to null when the file is gone.  Written when a checkpoint that followed
    a change hint changed a few files of a large tree, so it costs what changed rather than a
    rewrite of every entry."""

    format: Literal["hankweave-snapshot-tree-delta/1"] = TREE_DELTA_FORMAT
    base: str = Field(pattern=_HASH.pattern)
    changes: dict[str, TreeEntry | None]


class Manifest(_Record):
    """``manifests/<id>.json``: one checkpoint.

    ``id`` is the SHA-1 of the other fields (canonical JSON), which include a random ``nonce``,
    so two checkpoints of identical content still get different ids.
    """

    format: Literal["hankweave-snapshot-manifest/1"] = MANIFEST_FORMAT
    id: str = Field(pattern=_ID.pattern)
    sequence: int = Field(ge=0, description="Creation order in this store; newest is highest.")
    kind: CheckpointKind
    run_id: str | None
    codon_id: str | None
    codon_name: str | None
    message: str
    timestamp: str
    branch: str
    parent: str | None = Field(
        description="The branch's previous checkpoint, or (first on its branch) the current one.")
    patterns: list[str]
    tree: str = Field(pattern=_HASH.pattern)
    files: int = Field(ge=0)
    size: int = Field(ge=0, description="Total bytes of the checkpoint's regular files.")
    nonce: str

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(id=self.id, kind=self.kind, message=self.message,
                          timestamp=self.timestamp, branch=self.branch, run_id=self.run_id,
                          codon_id=self.codon_id)


class Refs(_Record):
    """``refs.json``: the checkpoint a restore made current, and when.

    Creating a checkpoint makes it current without writing this file: the current checkpoint
    is the newest one unless a restore happened after it (``sequence`` is the newest sequence
    number at the time of that restore).
    """

    format: Literal["hankweave-snapshot-refs/1"] = REFS_FORMAT
    head: str = Field(pattern=_ID.pattern)
    sequence: int


def _canonical_json(value: Any) -> bytes:
    # ASCII escapes keep file names that are not valid UTF-8 (surrogate-escaped str) encodable.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


class _TreeText:
    """The last committed tree's canonical JSON, kept as one piece per entry in path order, so
    a checkpoint that changed a few files of a large tree encodes only those entries and
    joins the rest.  The bytes are exactly :func:`_canonical_json` of the tree (the object's
    address depends on them)."""

    def __init__(self) -> None:
        self.paths: builtins.list[str] = []  # sorted
        self._parts: builtins.list[str] = []  # the piece of each path, in the same order
        self._pieces: dict[str, tuple[tuple[Any, ...], str]] = {}  # path -> (entry, piece)
        self._sizes: dict[str, int] = {}
        self.size = 0  # the bytes of every file in the tree

    def render(self, entries: dict[str, dict[str, Any]],
               changed: Iterable[str] | None = None) -> bytes:
        """The tree's JSON; ``changed``: the only paths that differ from the last render."""
        self.update(entries, changed)
        return self.text()

    def text(self) -> bytes:
        """The JSON of the tree as last updated."""
        return ("{" + ",".join(self._parts) + "}").encode("ascii")

    def update(self, entries: dict[str, dict[str, Any]],
               changed: Iterable[str] | None = None) -> None:
        """Make the kept tree ``entries``; ``changed``: the only paths that differ from it."""
        if changed is not None:
            changed = list(changed)
            # Each change is a list insertion or deletion: past a few, one pass over all is
            # cheaper (and its pieces of unchanged entries are reused all the same).
            if len(changed) * 16 > len(self.paths) + 256:
                changed = None
        if changed is None:
            self.paths = sorted(entries)
            self._parts = [self._piece(path, entries[path]) for path in self.paths]
            self._pieces = {path: self._pieces[path] for path in self.paths}
            self._sizes = {path: entry.get("size", 0) for path, entry in entries.items()}
            self.size = sum(self._sizes.values())
        else:
            for path in changed:
                self._replace(path, entries.get(path))

    def _replace(self, path: str, entry: dict[str, Any] | None) -> None:
        index = bisect.bisect_left(self.paths, path)
        present = index < len(self.paths) and self.paths[index] == path
        self.size -= self._sizes.pop(path, 0)
        if entry is None:
            if present:
                del self.paths[index], self._parts[index]
            self._pieces.pop(path, None)
            return
        if present:
            self._parts[index] = self._piece(path, entry)
        else:
            self.paths.insert(index, path)
            self._parts.insert(index, self._piece(path, entry))
        self._sizes[path] = entry.get("size", 0)
        self.size += self._sizes[path]

    def under(self, rel: str) -> builtins.list[str]:
        """The paths of the last render that are ``rel`` or lie below it."""
        paths = self.paths
        index = bisect.bisect_left(paths, rel)
        found = [rel] if index < len(paths) and paths[index] == rel else []
        start = bisect.bisect_left(paths, rel + "/")
        end = bisect.bisect_left(paths, rel + "0")  # "0" is the character after "/"
        return found + paths[start:end]

    def _piece(self, path: str, entry: dict[str, Any]) -> str:
        """The entry's ``"path":{...}`` text, encoded again only when the entry changed."""
        key = tuple(entry.values())
        known = self._pieces.get(path)
        if known is None or known[0] != key:
            known = (key, json.dumps(path, ensure_ascii=True) + ":"
                     + _canonical_json(entry).decode("ascii"))
            self._pieces[path] = known
        return known[1]


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

    def continues(self, hint: ChangeHint | None, patterns: tuple[str, ...]) -> bool:
        """Whether ``hint`` covers exactly the time since this capture, and can be followed."""
        return (hint is not None and hint.complete and hint.watcher == self.watcher
                and hint.since == self.epoch and patterns == self.patterns
                and len(hint.paths) <= HINTED_PATH_LIMIT
                and not any(p.rsplit("/", 1)[-1] == ".gitignore" for p in hint.paths))


def _same_entry(captured: dict[str, Any] | None, entry: FileEntry | SymlinkEntry) -> bool:
    """Whether a captured tree entry (a dict) holds what a checkpoint's entry holds."""
    if captured is None:
        return False
    if isinstance(entry, SymlinkEntry):
        return captured.get("type") == "symlink" and captured.get("target") == entry.target
    return (captured.get("type") == "file" and captured.get("hash") == entry.hash
            and captured.get("executable") == entry.executable)


def _matches_cache(cached: tuple[int, int, int, int, str], st: os.stat_result) -> bool:
    """Whether a work-tree file is a regular file with the stat its cache entry recorded (so
    it holds the content the entry names)."""
    return (stat.S_ISREG(st.st_mode) and cached[0] == st.st_size
            and cached[1] == st.st_mtime_ns and cached[2] == st.st_ino
            and cached[3] == st.st_ctime_ns)


def _unchanged_since_cached(cached: tuple[int, int, int, int, str] | None, entry: FileEntry,
                            st: os.stat_result | None) -> bool:
    """Whether a work-tree file is, by the stat cache, a regular file holding ``entry``."""
    return (cached is not None and st is not None and cached[4] == entry.hash
            and _matches_cache(cached, st))


def _manifest_id(fields: dict[str, Any]) -> str:
    body = {key: value for key, value in fields.items() if key != "id"}
    return hashlib.sha1(_canonical_json(body)).hexdigest()


def _is_safe_path(path: str) -> bool:
    """A relative "/"-separated path that stays inside the work tree and off the data link."""
    if not path or "\0" in path or path.startswith("/"):
        return False
    parts = path.split("/")
    return (parts[0] != DATA_LINK and ".git" not in parts
            and not any(part in ("", ".", "..") for part in parts))


@contextlib.contextmanager
def _storage_errors(action: str) -> Iterator[None]:
    """Report file-system failures as the interface's error, saying what was being done."""
    try:
        yield
    except OSError as exc:
        raise CheckpointStorageError(f"{action} failed: {exc}") from exc


# ----- the store -----


StatKey: TypeAlias = tuple[int, int, int, int]  # size, mtime_ns, inode, ctime_ns


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
        self._manifests: dict[str, Manifest] | None = None
        # The newest manifest and the newest of each branch (kept with ``_manifests``): a
        # commit needs both, and a long loop's store holds thousands of manifests.
        self._tips: tuple[Manifest | None, dict[str, Manifest]] | None = None
        self._refs: Refs | None = None
        self._stat_cache: dict[str, tuple[int, int, int, int, str]] | None = None
        self._held: set[str] | None = None  # every path any checkpoint holds
        self._trees: OrderedDict[str, Tree] = OrderedDict()
        self._delta_bases: dict[str, str] = {}  # delta tree -> its base, as read or written
        # Objects seen to exist in this process, and directories to fsync before a manifest
        # may refer to what they hold.
        self._known_objects: set[str] = set()
        self._unsynced_dirs: set[str] = set()
        self._pending: dict[str, tuple[int, str]] = {}  # digest -> (open fd, temp file)
        self._tmp_counter = 0
        self._scan = WorkspaceScan(self.work_tree, self.tmp_dir / "fs-clock")
        self._base: _Base | None = None  # what the last capture saw, for a change hint
        self._tree_text = _TreeText()
        self._rendered: dict[str, dict[str, Any]] | None = None
        """The entries ``_tree_text`` holds (the last commit's), to find what a scan changed."""
        self._unsaved_stats = 0  # stat-cache entries changed since it was last written

    # ----- the CheckpointStore interface -----

    def initialize(self) -> str:
        """Create the store and its initial, empty checkpoint, or reopen it.

        Temp files left by a killed process are removed: they were never part of a checkpoint,
        so nothing recorded is lost.
        """
        with _storage_errors(f"opening the snapshot store {self.store_dir}"):
            self._make_dirs()
            self._remove_leftovers()
            self._manifests = self._refs = self._tips = None  # on disk now, not remembered
            manifests = self._load_manifests()
            initial = [m for m in manifests.values() if m.kind == "initial"]
            if initial:
                return min(initial, key=lambda m: m.sequence).id
            try:
                manifest, _ = self._commit(kind="initial", run_id=None, codon_id=None,
                                           codon_name=None, message=INITIAL_MESSAGE,
                                           timestamp=utc_now_iso(), branch=INITIAL_BRANCH,
                                           patterns=(), entries={})
            except BaseException:
                self._discard_pending()
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
            self._load_manifests()
            patterns = tuple(patterns)
            base, self._base = self._base, None  # a failure below leaves nothing to follow
            try:
                changed: set[str] | None = None
                follows: _Base | None = None
                if base is not None and base.continues(changes, patterns):
                    assert changes is not None
                    entries, stat_cache, hashed, changed = self._capture_changes(
                        base, patterns, changes.paths)
                    follows = base
                else:
                    entries, stat_cache, hashed, changed = self._capture(patterns)
                manifest, chain = self._commit(
                    kind=kind, run_id=run_id, codon_id=codon_id, codon_name=codon_name,
                    message=message, timestamp=timestamp, branch=run_branch(run_id),
                    patterns=patterns, entries=entries, changed=changed, follows=follows)
            except BaseException:
                self._discard_pending()
                self._rendered = None  # the tree text may be ahead of the last commit now
                raise
            # Only after the manifest is durable: every hash in the cache must name a durable
            # object, because a later checkpoint will refer to it without looking.
            self._keep_stat_cache(stat_cache, hashed)
            if changes is not None:
                self._base = _Base(changes.watcher, changes.until, patterns, entries,
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
        manifests = sorted(self._load_manifests().values(), key=lambda m: m.sequence,
                           reverse=True)
        return [
            m.checkpoint() for m in manifests
            if (run_id is None or m.run_id == run_id)
            and (codon_id is None or m.codon_id == codon_id)
            and (kind is None or m.kind == kind)
        ]

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
        if base is not None and base.continues(changes, base.patterns):
            assert changes is not None
            known = base.entries
            touched = {path for rel in changes.paths for path in self._tree_text.under(rel)}
        with _storage_errors(f"restoring checkpoint {manifest.id}"):
            target = self._tree(manifest.tree, manifest.id)
            work = _WorkTree(self.work_tree)
            covered = self._held_paths().union(self._scan.resolve(manifest.patterns))
            removals = sorted(covered.difference(target))
            writes: list[tuple[str, FileEntry | SymlinkEntry]] = []
            chmods: list[tuple[str, bool]] = []
            cache = self._load_stat_cache()
            for path, entry in target.items():
                if path not in touched and _same_entry(known.get(path), entry):
                    continue  # on disk as captured, which is what the target holds
                st = work.lstat(path)
                if type(entry) is FileEntry and _unchanged_since_cached(
                        cache.get(path), entry, st):
                    assert st is not None
                    if bool(st.st_mode & stat.S_IXUSR) != entry.executable:
                        chmods.append((path, entry.executable))
                    continue  # the common case, inlined: holds the target, as the cache says
                if isinstance(entry, SymlinkEntry):
                    if not (st and stat.S_ISLNK(st.st_mode)
                            and os.readlink(work.full(path)) == entry.target):
                        writes.append((path, entry))
                elif (st and stat.S_ISREG(st.st_mode) and st.st_size == entry.size
                      and self._current_hash(path, work.full(path), st) == entry.hash):
                    if bool(st.st_mode & stat.S_IXUSR) != entry.executable:
                        chmods.append((path, entry.executable))
                else:
                    writes.append((path, entry))
            contents = self._verified_contents(writes, (
                f"checkpoint {manifest.id} cannot be restored (the work tree was left as it "
                "was)"))

            removed = [path for path in removals if work.remove(path)]
            work.remove_emptied_dirs(removed)
            for path, entry in writes:
                kill_point("checkpoint.restore")  # test-only: part of the files restored
                if isinstance(entry, SymlinkEntry):
                    work.write_symlink(path, entry.target)
                else:
                    data = contents.get(entry.hash)
                    work.write_file(path, entry.executable, data if data is not None else
                                    self._object_chunks(entry.hash, (
                                        f"checkpoint {manifest.id} was partly restored: the "
                                        f"stored content of {path}")))
            for path, executable in chmods:
                work.set_executable(path, executable)
            self._set_head(manifest)

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
            contents = self._verified_contents(entries, (
                f"checkpoint {manifest.id} cannot be materialized (nothing was written)"))
            with self._export_target(target) as root:
                # _WorkTree writes with O_EXCL/O_NOFOLLOW and never through a symlink, so a
                # link this export wrote earlier can never redirect a later file.
                out = _WorkTree(root)
                for path, entry in entries:
                    if isinstance(entry, SymlinkEntry):
                        out.write_symlink(path, entry.target)
                        continue
                    data = contents.get(entry.hash)
                    out.write_file(path, entry.executable, data if data is not None else
                                   self._object_chunks(entry.hash, (
                                       f"checkpoint {manifest.id} could not be materialized "
                                       f"(what was written is removed again): the stored "
                                       f"content of {path}")))
        return [path for path, _ in entries]

    def files(self, checkpoint_id: str) -> builtins.list[str]:
        """The checkpoint's paths, sorted, read from its (verified) file list."""
        manifest = self._manifest(checkpoint_id)
        with _storage_errors(f"listing the files of checkpoint {manifest.id}"):
            return sorted(self._tree(manifest.tree, manifest.id))

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
        manifests = sorted(self._load_manifests().values(), key=lambda m: m.sequence,
                           reverse=True)
        kept_per_run: dict[str | None, int] = {}
        removed: list[Manifest] = []
        for manifest in manifests:
            rank = kept_per_run.get(manifest.run_id, 0)
            kept_per_run[manifest.run_id] = rank + 1
            if (manifest.kind != "initial" and manifest.id not in policy.keep_ids
                    and rank >= policy.keep_last_per_run):
                removed.append(manifest)
        with _storage_errors("pruning checkpoints"):
            for manifest in removed:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.manifests_dir / f"{manifest.id}.json")
                del self._manifests_loaded()[manifest.id]
            if removed:
                fsync_dir(self.manifests_dir)
                self._held = self._tips = None
            self._collect_garbage()
        return [manifest.id for manifest in removed]

    def close(self) -> None:
        """Write the stat cache if it changed; forget what was cached in memory.  The store
        on disk is always consistent."""
        if self._stat_cache is not None and self._unsaved_stats:
            with contextlib.suppress(OSError):
                self._save_stat_cache(self._stat_cache)
        self._base = None
        self._scan.forget()
        self._tree_text = _TreeText()
        self._rendered = None
        self._manifests = self._tips = None
        self._refs = None
        self._stat_cache = None
        self._held = None
        self._trees.clear()
        self._delta_bases.clear()
        self._known_objects.clear()

    # ----- manifests and refs -----

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

    def _manifests_loaded(self) -> dict[str, Manifest]:
        if self._manifests is None:
            return self._load_manifests()
        return self._manifests

    def _load_manifests(self) -> dict[str, Manifest]:
        """Every manifest on disk (read once per instance; later kept up to date in memory)."""
        if self._manifests is not None:
            return self._manifests
        manifests: dict[str, Manifest] = {}
        try:
            names = os.listdir(self.manifests_dir)
        except FileNotFoundError:
            names = []
        except OSError as exc:
            raise CheckpointStorageError(f"cannot list checkpoints in {self.manifests_dir}: "
                                         f"{exc}") from exc
        for name in names:
            match = _MANIFEST_NAME.fullmatch(name)
            if match is None:
                continue  # a temp file of an interrupted write: not a checkpoint
            manifest = self._read_manifest(self.manifests_dir / name)
            if manifest.id != match.group(1):
                raise CheckpointStorageError(
                    f"checkpoint manifest {self.manifests_dir / name} holds id {manifest.id}")
            manifests[manifest.id] = manifest
        self._manifests, self._tips = manifests, None
        return manifests

    @staticmethod
    def _read_manifest(path: Path) -> Manifest:
        try:
            raw = json.loads(path.read_bytes())
            manifest = Manifest.model_validate(raw)
        except OSError as exc:
            raise CheckpointStorageError(f"cannot read checkpoint manifest {path}: {exc}") from exc
        except (ValueError, ValidationError) as exc:
            raise CheckpointStorageError(f"checkpoint manifest {path} is corrupt: "
                                         f"{' '.join(str(exc).split())}") from exc
        if _manifest_id(raw) != manifest.id:
            raise CheckpointStorageError(
                f"checkpoint manifest {path} is corrupt: its content does not match its id")
        return manifest

    def _manifest(self, id_or_prefix: str) -> Manifest:
        manifests = self._load_manifests()
        key = id_or_prefix.strip().lower()
        if key in manifests:
            return manifests[key]
        matches = [ident for ident in manifests if key and _HEX.fullmatch(key)
                   and ident.startswith(key)]
        if not matches:
            raise CheckpointNotFoundError(f"no checkpoint has the id {id_or_prefix!r}")
        if len(matches) > 1:
            raise AmbiguousCheckpointError(
                f"the id prefix {id_or_prefix!r} matches {len(matches)} checkpoints; "
                "give more characters")
        return manifests[matches[0]]

    def _newest_manifests(self) -> tuple[Manifest | None, dict[str, Manifest]]:
        """The newest manifest, and the newest of each branch."""
        if self._tips is None:
            newest: Manifest | None = None
            tips: dict[str, Manifest] = {}
            for manifest in self._manifests_loaded().values():
                if newest is None or manifest.sequence > newest.sequence:
                    newest = manifest
                tip = tips.get(manifest.branch)
                if tip is None or manifest.sequence > tip.sequence:
                    tips[manifest.branch] = manifest
            self._tips = (newest, tips)
        return self._tips

    def _head(self) -> str | None:
        """The current checkpoint: the newest, unless a restore happened after it."""
        manifests = self._manifests_loaded()
        newest, _ = self._newest_manifests()
        if newest is None:
            return None
        refs = self._load_refs()
        if refs is not None and refs.sequence >= newest.sequence and refs.head in manifests:
            return refs.head
        return newest.id

    def _load_refs(self) -> Refs | None:
        if self._refs is None:
            try:
                self._refs = Refs.model_validate_json(self.refs_path.read_bytes())
            except FileNotFoundError:
                return None
            except (OSError, ValueError) as exc:
                raise CheckpointStorageError(f"cannot read {self.refs_path}: {exc}") from exc
        return self._refs

    def _set_head(self, manifest: Manifest) -> None:
        newest, _ = self._newest_manifests()
        refs = Refs(head=manifest.id, sequence=newest.sequence if newest else manifest.sequence)
        atomic_write_bytes(self.refs_path, refs.model_dump_json(indent=2).encode() + b"\n",
                           mode=PRIVATE_FILE_MODE)
        self._refs = refs

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
            tree, chain = self._put_bytes(_canonical_json(delta)), follows.chain + 1
            self._delta_bases[tree] = follows.tree
        else:
            tree, chain = self._put_bytes(self._tree_text.text()), 0
        self._sync_objects()
        kill_point("checkpoint.commit")  # test-only: objects stored, no manifest names them yet
        manifests = self._manifests_loaded()
        newest, branch_tips = self._newest_manifests()
        tip = branch_tips.get(branch)
        parent = tip.id if tip is not None else self._head()
        fields: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "sequence": (newest.sequence if newest is not None else -1) + 1,
            "kind": kind, "run_id": run_id, "codon_id": codon_id, "codon_name": codon_name,
            "message": message, "timestamp": timestamp, "branch": branch, "parent": parent,
            "patterns": list(patterns), "tree": tree, "files": len(entries),
            "size": self._tree_text.size,
            "nonce": secrets.token_hex(8),
        }
        fields["id"] = _manifest_id(fields)
        manifest = Manifest.model_validate(fields)
        body = json.dumps(manifest.model_dump(), indent=2, ensure_ascii=True).encode() + b"\n"
        atomic_write_bytes(self.manifests_dir / f"{manifest.id}.json", body,
                           mode=PRIVATE_FILE_MODE)
        manifests[manifest.id] = manifest
        branch_tips[branch] = manifest
        self._tips = (manifest, branch_tips)
        if self._held is not None:
            self._held.update(entries if changed is None else changed.intersection(entries))
        return manifest, chain

    # ----- capturing the work tree -----

    def _capture(
        self, patterns: Sequence[str],
    ) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[int, int, int, int, str]], int,
               set[str] | None]:
        """The tree entries of the files the patterns select, the stat cache to keep, how
        many files were read, and the paths whose entry differs from the last commit's (None
        when that is not known).

        File contents are stored as objects on the way; a file whose ``lstat`` matches the
        stat cache is not read at all.
        """
        previous = self._load_stat_cache()
        cache: dict[str, tuple[int, int, int, int, str]] = {}
        entries: dict[str, dict[str, Any]] = {}
        last = self._rendered
        changed: set[str] = set()
        trusted_before = self._trusted_before()
        hashed = 0
        # The loop runs once per file of the work tree, so the common case (a regular file
        # whose lstat matches the stat cache, and whose entry is the last commit's) is inlined:
        # such a file costs its lstat and little more.  Everything else is _capture_file's.
        root = f"{self.work_tree}/"
        lstat, known = os.lstat, self._known_objects
        last_entries = last if last is not None else {}
        for path in self._scan.resolve(patterns):
            cached = previous.get(path)
            if cached is not None and cached[4] in known:
                try:
                    st = lstat(root + path)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # deleted while we walked: it is simply not in this checkpoint
                if _matches_cache(cached, st):
                    # Cached only once trusted, and unchanged since: still trusted.
                    cache[path] = cached
                    executable = bool(st.st_mode & stat.S_IXUSR)
                    entry = last_entries.get(path)
                    if (entry is not None and entry.get("hash") == cached[4]
                            and entry["executable"] == executable):
                        entries[path] = entry  # as committed last (same hash, so same size)
                        continue
                    entries[path] = {"type": "file", "hash": cached[4], "size": st.st_size,
                                     "executable": executable}
                    changed.add(path)
                    continue
            hashed += self._capture_file(path, previous, trusted_before, entries, cache)
            if last is not None and entries.get(path) != last.get(path):
                changed.add(path)
        if last is None:
            return entries, cache, hashed, None
        changed.update(path for path in last if path not in entries)
        return entries, cache, hashed, changed

    def _capture_changes(
        self, base: _Base, patterns: Sequence[str], paths: frozenset[str],
    ) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[int, int, int, int, str]], int,
               set[str]]:
        """As :meth:`_capture`, from the previous capture and the paths a hint names: each
        path (and, for a directory, everything below it) is dropped and read again.  Also
        returns the paths whose entry may differ from the previous capture's.

        The previous capture's entries are updated in place: the base is used up either way
        (a failure leaves none, and the next checkpoint scans).
        """
        previous = self._load_stat_cache()
        cache = dict(previous)
        entries = base.entries
        trusted_before = self._trusted_before()
        hashed = 0
        changed: set[str] = set()
        for rel in sorted(paths):
            for gone in self._tree_text.under(rel):
                entries.pop(gone, None)
                cache.pop(gone, None)
                changed.add(gone)
            for path in self._scan.resolve_under(patterns, rel):
                hashed += self._capture_file(path, previous, trusted_before, entries, cache)
                changed.add(path)
        return entries, cache, hashed, changed

    def _capture_file(self, path: str, previous: dict[str, tuple[int, int, int, int, str]],
                      trusted_before: int, entries: dict[str, dict[str, Any]],
                      cache: dict[str, tuple[int, int, int, int, str]]) -> int:
        """Add one work-tree file to ``entries`` (and ``cache``); 1 if it was read, else 0."""
        full = f"{self.work_tree}/{path}"  # not os.path.join: this runs once per file
        read = 0
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                entries[path] = {"type": "symlink", "target": os.readlink(full)}
                return 0
            if not stat.S_ISREG(st.st_mode):
                return 0  # sockets, fifos, devices: nothing a checkpoint can hold
            cached = previous.get(path)
            if (cached is not None and cached[:4] == _stat_key(st)
                    and self._has_object(cached[4], durable=True)):
                digest, size = cached[4], st.st_size
            else:
                digest, size, st = self._store_file(full)
                read = 1
        except (FileNotFoundError, NotADirectoryError):
            cache.pop(path, None)
            return 0  # deleted while we walked: it is simply not in this checkpoint
        entries[path] = {"type": "file", "hash": digest, "size": size,
                         "executable": bool(st.st_mode & stat.S_IXUSR)}
        if max(st.st_mtime_ns, st.st_ctime_ns) < trusted_before:
            cache[path] = (*_stat_key(st), digest)
        else:
            cache.pop(path, None)
        return read

    def _trusted_before(self) -> int:
        """A file-system timestamp such that files last changed before it may be cached
        (:func:`hankweave.workspace.trusted_before`, with ``tmp/fs-clock`` as the clock)."""
        return trusted_before(os.path.join(self.tmp_dir, "fs-clock"), self.work_tree)

    def _store_file(self, full: str) -> tuple[str, int, os.stat_result]:
        """Hash a work-tree file and store it as an object unless it already is one.

        Returns its hash, its size and the ``fstat`` taken before reading it, which is what
        the stat cache may remember.
        """
        fd = os.open(full, _OPEN_READ)
        try:
            st = os.fstat(fd)
            with open(fd, "rb", closefd=False) as source:
                if st.st_size <= SMALL_FILE_BYTES:
                    data = source.read()
                    digest = hashlib.sha256(data).hexdigest()
                    if not self._has_object(digest):
                        self._write_object(digest, [data])
                    return digest, len(data), st
                digest, size = _hash_stream(source)
                if not self._has_object(digest):
                    source.seek(0)
                    # The file may change between the two reads: name the object after what
                    # was actually copied.
                    digest, size = self._write_object(None, _chunks(source))
                return digest, size, st
        finally:
            os.close(fd)

    # ----- objects -----

    def _object_path(self, digest: str) -> str:
        return os.path.join(self.objects_dir, digest[:2], digest[2:])

    def _has_object(self, digest: str, *, durable: bool = False) -> bool:
        """Whether the object exists (or is pending); ``durable`` when it is known to be on disk.

        An object found but not known to be durable may have been renamed into place by a
        process killed before it synced the directory, so that directory is synced before a
        manifest refers to it.
        """
        if digest in self._known_objects or digest in self._pending:
            return True
        path = self._object_path(digest)
        if not os.path.isfile(path):
            return False
        self._known_objects.add(digest)
        if not durable:
            self._unsynced_dirs.add(os.path.dirname(path))
        return True

    def _write_object(self, digest: str | None, chunks: Iterable[bytes], *,
                      hashed: bool = False) -> tuple[str, int]:
        """Write an object to a temp file in ``tmp/``, to be fsynced and renamed into place.

        ``digest`` is the expected hash, or None to name the object after what was written;
        ``hashed``: ``digest`` is already the hash of these (immutable) bytes, so they are not
        hashed again.  The object becomes visible only in :meth:`_flush_objects`, after its
        fsync, so it is never seen torn.
        """
        if len(self._pending) >= MAX_PENDING_OBJECTS:
            self._flush_objects()
        self._tmp_counter += 1
        tmp = os.path.join(self.tmp_dir, f"{os.getpid()}-{self._tmp_counter}.tmp")
        hasher = hashlib.sha256()
        size = 0
        fd = os.open(tmp, _OPEN_CREATE, PRIVATE_FILE_MODE)  # the agent's files, stored privately
        try:
            for chunk in chunks:
                if not hashed:
                    hasher.update(chunk)
                size += len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            written = digest if hashed and digest is not None else hasher.hexdigest()
            if digest is not None and written != digest:
                raise CheckpointStorageError(f"object {digest} changed while it was written")
            duplicate = digest is None and self._has_object(written)
        except BaseException:
            _close_and_unlink(fd, tmp)
            raise
        if duplicate:
            _close_and_unlink(fd, tmp)
        else:
            self._pending[written] = (fd, tmp)
        return written, size

    def _flush_objects(self) -> None:
        """fsync the pending objects together, then rename them into ``objects/``."""
        pending, self._pending = self._pending, {}
        try:
            try:
                _in_parallel(os.fsync, [fd for fd, _ in pending.values()])
            finally:
                for fd, _ in pending.values():
                    os.close(fd)
            for digest, (_, tmp) in pending.items():
                path = self._object_path(digest)
                try:
                    os.replace(tmp, path)
                except FileNotFoundError:
                    private_dir(os.path.dirname(path))
                    self._unsynced_dirs.add(str(self.objects_dir))
                    os.replace(tmp, path)
                self._unsynced_dirs.add(os.path.dirname(path))
                self._known_objects.add(digest)
        except BaseException:
            for _, tmp in pending.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise

    def _discard_pending(self) -> None:
        """Drop the objects of a create that failed before they were flushed."""
        pending, self._pending = self._pending, {}
        for fd, tmp in pending.values():
            _close_and_unlink(fd, tmp)

    def _put_bytes(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if not self._has_object(digest):
            self._write_object(digest, [data], hashed=True)
        return digest

    def _sync_objects(self) -> None:
        """Make every object durable and visible (before a manifest may refer to it)."""
        self._flush_objects()
        objects_dir = str(self.objects_dir)
        # Fan-out directories first, so a new one's entries are on disk before the new name.
        _in_parallel(fsync_dir, [d for d in self._unsynced_dirs if d != objects_dir])
        if objects_dir in self._unsynced_dirs:
            fsync_dir(objects_dir)
        self._unsynced_dirs.clear()

    def _read_object(self, digest: str, what: str) -> bytes:
        """An object's bytes, verified against its hash; ``what`` names it in errors."""
        try:
            with open(self._object_path(digest), "rb") as source:
                data = source.read()
        except FileNotFoundError:
            raise _object_error(what, digest, "is missing") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise _object_error(what, digest, "is corrupt (its SHA-256 differs)")
        return data

    def _object_chunks(self, digest: str, what: str) -> Iterator[bytes]:
        """Stream an object, raising at the end if its hash does not match after all."""
        hasher = hashlib.sha256()
        try:
            source = open(self._object_path(digest), "rb")  # noqa: SIM115 - a generator owns it
        except FileNotFoundError:
            raise _object_error(what, digest, "is missing") from None
        with source:
            for chunk in _chunks(source):
                hasher.update(chunk)
                yield chunk
        if hasher.hexdigest() != digest:
            raise _object_error(what, digest, "is corrupt (its SHA-256 differs)")

    def _verified_contents(
        self, writes: Sequence[tuple[str, FileEntry | SymlinkEntry]], failure: str,
    ) -> dict[str, bytes | None]:
        """Check every object a restore or materialize will write; keep small ones in memory.

        Objects beyond the memory budget map to None and are streamed (and checked again).
        ``failure`` says what a missing or corrupt object means for the caller.
        """
        contents: dict[str, bytes | None] = {}
        budget = VERIFIED_BYTES_BUDGET
        for path, entry in writes:
            if not isinstance(entry, FileEntry) or entry.hash in contents:
                continue
            what = f"{failure}: the stored content of {path}"
            if entry.size <= min(budget, SMALL_FILE_BYTES):
                contents[entry.hash] = self._read_object(entry.hash, what)
                budget -= entry.size
            else:
                for _ in self._object_chunks(entry.hash, what):
                    pass
                contents[entry.hash] = None
        return contents

    def _collect_garbage(self) -> None:
        """Delete every object that no manifest's tree refers to."""
        referenced: set[str] = set()
        for manifest in self._manifests_loaded().values():
            tree = self._tree(manifest.tree, manifest.id)
            referenced.update(e.hash for e in tree.values() if isinstance(e, FileEntry))
            digest: str | None = manifest.tree
            while digest is not None and digest not in referenced:  # the tree and its bases
                referenced.add(digest)
                digest = self._delta_bases.get(digest)
        garbage: list[tuple[str, str]] = []
        for fan in os.scandir(self.objects_dir):
            if not (fan.is_dir(follow_symlinks=False) and len(fan.name) == 2):
                continue
            for obj in os.scandir(fan.path):
                digest = fan.name + obj.name
                if _HASH.fullmatch(digest) and digest not in referenced:
                    garbage.append((digest, obj.path))
        if not garbage:
            return
        doomed = {digest for digest, _ in garbage}
        # A cache entry is trusted to name a durable object, so before any object goes, the
        # cache is rewritten without it, durably: no older copy naming it can come back.
        cache = self._load_stat_cache()
        kept = {path: entry for path, entry in cache.items() if entry[4] not in doomed}
        self._save_stat_cache(kept, durable=True)
        for digest, path in garbage:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            self._known_objects.discard(digest)
            self._trees.pop(digest, None)
            self._delta_bases.pop(digest, None)
        for fan_dir in {os.path.dirname(path) for _, path in garbage}:
            try:
                os.rmdir(fan_dir)
            except OSError:
                fsync_dir(fan_dir)  # still holds live objects
        fsync_dir(self.objects_dir)

    # ----- trees -----

    def _tree(self, digest: str, checkpoint_id: str) -> Tree:
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
                self._keep_tree(current, tree)
                break
            if len(deltas) >= 2 * MAX_DELTA_CHAIN:
                raise CheckpointStorageError(
                    f"checkpoint {checkpoint_id}: its file list (object {digest}) is a chain of"
                    f" more than {2 * MAX_DELTA_CHAIN} delta trees")
            deltas.append(found)
            self._delta_bases[current] = found.base
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
            self._keep_tree(digest, tree)
        return tree

    def _tree_object(self, digest: str, checkpoint_id: str) -> Tree | TreeDelta:
        data = self._read_object(digest, f"checkpoint {checkpoint_id}: its file list")
        try:
            value = json.loads(data)
            if isinstance(value, dict) and isinstance(value.get("format"), str):
                return TreeDelta.model_validate(value)
            return _TREE.validate_python(value)
        except (ValueError, ValidationError) as exc:
            raise CheckpointStorageError(
                f"checkpoint {checkpoint_id}: its file list (object {digest}) is invalid: "
                f"{' '.join(str(exc).split())}") from exc

    @staticmethod
    def _checked_tree(tree: Tree, digest: str, checkpoint_id: str) -> Tree:
        parents = {path.rsplit("/", 1)[0] for path in tree if "/" in path}
        unsafe = [path for path in tree if not _is_safe_path(path) or path in parents]
        if unsafe:
            raise CheckpointStorageError(
                f"checkpoint {checkpoint_id}: its file list (object {digest}) holds paths that "
                f"cannot be restored: {', '.join(map(repr, unsafe[:5]))}")
        return tree

    def _keep_tree(self, digest: str, tree: Tree) -> None:
        self._trees[digest] = tree
        while len(self._trees) > 8:
            self._trees.popitem(last=False)

    def _held_paths(self) -> set[str]:
        """Every path any checkpoint of the store holds (computed once, then kept up to date)."""
        if self._held is None:
            held: set[str] = set()
            for manifest in self._manifests_loaded().values():
                held.update(self._tree(manifest.tree, manifest.id))
            self._held = held
        return self._held

    # ----- the stat cache -----

    def _load_stat_cache(self) -> dict[str, tuple[int, int, int, int, str]]:
        """The stat cache; a missing, unreadable or malformed one is an empty one."""
        if self._stat_cache is None:
            cache: dict[str, tuple[int, int, int, int, str]] = {}
            try:
                raw = json.loads(self.stat_cache_path.read_bytes())
                if raw.get("format") == STAT_CACHE_FORMAT:
                    for path, value in raw["entries"].items():
                        if (isinstance(value, list) and len(value) == 5
                                and all(type(v) is int for v in value[:4])
                                and isinstance(value[4], str) and _HASH.fullmatch(value[4])):
                            cache[path] = tuple(value)
            except (OSError, ValueError, AttributeError, KeyError, TypeError):
                cache = {}
            self._stat_cache = cache
        return self._stat_cache

    def _keep_stat_cache(self, cache: dict[str, tuple[int, int, int, int, str]],
                         changed: int) -> None:
        """Make ``cache`` the stat cache; write it once enough of it changed (and at
        :meth:`close`): an older copy on disk is still right, it only costs re-reading the
        files changed since, and rewriting a 100,000-entry cache for every one-file
        checkpoint would cost more than the checkpoint."""
        previous = self._stat_cache
        self._stat_cache = cache
        self._unsaved_stats += changed + abs(len(cache) - len(previous or ()))
        if self._unsaved_stats > max(STAT_CACHE_SLACK, len(cache) // 50):
            self._save_stat_cache(cache)

    def _save_stat_cache(
        self, cache: dict[str, tuple[int, int, int, int, str]], *, durable: bool = False,
    ) -> None:
        self._stat_cache = cache
        self._unsaved_stats = 0
        data = _canonical_json({"format": STAT_CACHE_FORMAT, "entries": cache})
        if durable:
            atomic_write_bytes(self.stat_cache_path, data, mode=PRIVATE_FILE_MODE)
            return
        # Not fsynced: losing the cache only costs a re-hash, and an older copy is still right,
        # because every entry is a fact about a stat that no later change can reproduce.
        tmp = self.stat_cache_path.with_name(f"{self.stat_cache_path.name}.tmp-{os.getpid()}")
        os.close(open_private(tmp, os.O_WRONLY | os.O_TRUNC))
        tmp.write_bytes(data)
        os.replace(tmp, self.stat_cache_path)

    def _current_hash(self, path: str, full: str, st: os.stat_result) -> str | None:
        """The hash of a work-tree file's content, from the stat cache when it can be trusted."""
        cached = self._load_stat_cache().get(path)
        if cached is not None and cached[:4] == _stat_key(st):
            return cached[4]
        try:
            fd = os.open(full, _OPEN_READ)
        except OSError:
            return None
        with open(fd, "rb") as source:
            return _hash_stream(source)[0]


class _WorkTree:
    """The work-tree side of a restore: never steps through a symlink, never leaves the root."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self._dirs: dict[str, bool] = {"": True}  # relative dir -> is a real directory

    def full(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root  # not os.path.join: once per file

    def _is_real_dir(self, rel_dir: str) -> bool:
        known = self._dirs.get(rel_dir)
        if known is None:
            parent = rel_dir.rsplit("/", 1)[0] if "/" in rel_dir else ""
            try:
                known = self._is_real_dir(parent) and stat.S_ISDIR(
                    os.lstat(self.full(rel_dir)).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                known = False
            self._dirs[rel_dir] = known
        return known

    def lstat(self, path: str) -> os.stat_result | None:
        """The entry at ``path``, or None when it is missing or lies beyond a non-directory."""
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        if not self._is_real_dir(parent):
            return None
        try:
            return os.lstat(self.full(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def remove(self, path: str) -> bool:
        """Delete a file or link; a directory standing there now is left alone."""
        st = self.lstat(path)
        if st is None or stat.S_ISDIR(st.st_mode):
            return False
        os.unlink(self.full(path))
        return True

    def remove_emptied_dirs(self, removed: Iterable[str]) -> None:
        """Remove the directories that deleting ``removed`` left empty, deepest first."""
        candidates: set[str] = set()
        for path in removed:
            while "/" in path:
                path = path.rsplit("/", 1)[0]
                candidates.add(path)
        for rel_dir in sorted(candidates, key=lambda d: d.count("/"), reverse=True):
            try:
                os.rmdir(self.full(rel_dir))
            except OSError:
                continue  # not empty: it holds files no checkpoint covers, or kept ones
            self._dirs[rel_dir] = False
        # Cached answers below a removed directory are stale now.
        self._dirs = {d: real for d, real in self._dirs.items() if real}

    def _make_room(self, path: str) -> None:
        """Make ``path``'s parents real directories and ``path`` itself free.

        Whatever stands in the way (a file where a directory belongs, a link to a directory,
        a directory where the file belongs) is removed, as ``git checkout --force`` does.
        """
        parts = path.split("/")
        for depth in range(1, len(parts)):
            rel_dir = "/".join(parts[:depth])
            if self._dirs.get(rel_dir):
                continue
            full = self.full(rel_dir)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISDIR(st.st_mode):
                os.unlink(full)
                st = None
            if st is None:
                os.mkdir(full)
            self._dirs[rel_dir] = True
        full = self.full(path)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(full)
            self._dirs = {d: real for d, real in self._dirs.items()
                          if d != path and not d.startswith(path + "/")}
        else:
            os.unlink(full)

    def write_file(self, path: str, executable: bool, content: bytes | Iterable[bytes]) -> None:
        """Give ``path`` this content and executable bit.

        A regular file with no other hard link is rewritten in place (cheaper than unlinking
        and creating); anything else is replaced by a new file, so a write never goes through
        a symlink or into a file shared with another path.
        """
        fd = self._open_for_rewrite(path, executable)
        if fd is None:
            self._make_room(path)
            fd = os.open(self.full(path), _OPEN_CREATE, 0o777 if executable else 0o666)
        try:
            for chunk in [content] if isinstance(content, bytes) else content:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def _open_for_rewrite(self, path: str, executable: bool) -> int | None:
        st = self.lstat(path)
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return None
        try:
            fd = os.open(self.full(path), _OPEN_REWRITE)
        except OSError:
            return None
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink != 1 or opened.st_ino != st.st_ino:
            os.close(fd)  # changed under us: replace it instead
            return None
        try:
            os.ftruncate(fd, 0)
            mode = stat.S_IMODE(opened.st_mode)
            if _executable_mode(mode, executable) != mode:
                os.fchmod(fd, _executable_mode(mode, executable))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_symlink(self, path: str, target: str) -> None:
        self._make_room(path)
        os.symlink(target, self.full(path))

    def set_executable(self, path: str, executable: bool) -> None:
        full = self.full(path)
        os.chmod(full, _executable_mode(stat.S_IMODE(os.lstat(full).st_mode), executable))


# ----- helpers -----


def _in_parallel(function: Callable[[Any], object], items: Sequence[Any]) -> None:
    """Apply ``function`` to every item, on a few threads when there are several."""
    if len(items) < 3:
        for item in items:
            function(item)
        return
    # Imported here, not with the module: every start of hankweave imports the module.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(FSYNC_THREADS, len(items))) as pool:
        for _ in pool.map(function, items):
            pass


def _close_and_unlink(fd: int, path: str) -> None:
    os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _executable_mode(mode: int, executable: bool) -> int:
    """Like git: executable means x wherever r is granted; not executable clears every x."""
    return (mode | stat.S_IXUSR | ((mode & 0o044) >> 2)) if executable else mode & ~0o111


def _stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _chunks(source: Any) -> Iterator[bytes]:
    read: Callable[[int], bytes] = source.read
    while chunk := read(CHUNK_BYTES):
        yield chunk


def _hash_stream(source: Any) -> tuple[str, int]:
    hasher = hashlib.sha256()
    size = 0
    for chunk in _chunks(source):
        hasher.update(chunk)
        size += len(chunk)
    return hasher.hexdigest(), size


def _object_error(what: str, digest: str, problem: str) -> CheckpointStorageError:
    return CheckpointStorageError(f"{what} (object {digest}) {problem}")
