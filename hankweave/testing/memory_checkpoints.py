"""``MemoryCheckpointStore``: a checkpoint backend that keeps snapshots in memory.

For kernel tests, which must not depend on a sibling backend package.  It passes
:class:`hankweave.testing.checkpoints.CheckpointStoreContract`, so it behaves like the real
backends (within one process: nothing survives it).
"""

from __future__ import annotations

import builtins
import hashlib
import itertools
import os
import stat
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hankweave.checkpoints import (
    AmbiguousCheckpointError,
    Checkpoint,
    CheckpointError,
    CheckpointKind,
    CheckpointNotFoundError,
    CheckpointStore,
    FileChange,
    RetentionPolicy,
    StoredFile,
    checkpoint_message,
    run_branch,
)
from hankweave.fsutil import utc_now_iso
from hankweave.hookspecs import hookimpl
from hankweave.workspace import matches_any, resolve_patterns

# (kind, payload): ("file", (bytes, executable)) or ("link", target)
Entry = tuple[str, Any]


@dataclass
class _Snapshot:
    checkpoint: Checkpoint
    patterns: tuple[str, ...]
    files: dict[str, Entry] = field(default_factory=dict)


class MemoryCheckpointStore(CheckpointStore):
    """Snapshots held in a class-level dict keyed by execution directory."""

    name: ClassVar[str] = "memory"
    _stores: ClassVar[dict[Path, list[_Snapshot]]] = {}
    _counter = itertools.count()

    def __init__(self, execution_dir: Path) -> None:
        super().__init__(execution_dir)
        self._snapshots = self._stores.setdefault(self.execution_dir.resolve(), [])

    def initialize(self) -> str:
        for snap in self._snapshots:
            if snap.checkpoint.kind == "initial":
                return snap.checkpoint.id
        return self._add("initial", "main", None, None, "Initial checkpoint setup\n", (), {})

    def create(self, *, kind: CheckpointKind, run_id: str, codon_id: str, codon_name: str,
               patterns: Sequence[str], duration_ms: int | None = None) -> Checkpoint:
        files = {rel: _read(self.work_tree / rel) for rel in resolve_patterns(self.work_tree,
                                                                               patterns)}
        message = checkpoint_message(kind, codon_id, run_id, codon_name, utc_now_iso(),
                                     duration_ms)
        ident = self._add(kind, run_branch(run_id), run_id, codon_id, message, tuple(patterns),
                          files)
        return self.resolve(ident)

    def _add(self, kind: str, branch: str, run_id: str | None, codon_id: str | None,
             message: str, patterns: tuple[str, ...], files: dict[str, Entry]) -> str:
        ident = hashlib.sha1(f"{next(self._counter)}:{message}".encode()).hexdigest()
        checkpoint = Checkpoint(id=ident, kind=kind, message=message,  # type: ignore[arg-type]
                                timestamp=utc_now_iso(), branch=branch, run_id=run_id,
                                codon_id=codon_id)
        self._snapshots.append(_Snapshot(checkpoint, patterns, files))
        return ident

    def list(self, *, run_id: str | None = None, codon_id: str | None = None,
             kind: CheckpointKind | None = None) -> list[Checkpoint]:
        return [s.checkpoint for s in reversed(self._snapshots)
                if (run_id is None or s.checkpoint.run_id == run_id)
                and (codon_id is None or s.checkpoint.codon_id == codon_id)
                and (kind is None or s.checkpoint.kind == kind)]

    def list_read_only(self) -> builtins.list[Checkpoint]:
        """As :meth:`list`: the snapshots live in memory, so reading them changes nothing."""
        return self.list()

    def _find(self, id_or_prefix: str) -> _Snapshot:
        found = [s for s in self._snapshots if s.checkpoint.id.startswith(id_or_prefix)]
        if not found or not id_or_prefix:
            raise CheckpointNotFoundError(f"no checkpoint {id_or_prefix!r}")
        if len(found) > 1 and not any(s.checkpoint.id == id_or_prefix for s in found):
            raise AmbiguousCheckpointError(f"checkpoint prefix {id_or_prefix!r} is ambiguous")
        return next((s for s in found if s.checkpoint.id == id_or_prefix), found[0])

    def resolve(self, id_or_prefix: str) -> Checkpoint:
        return self._find(id_or_prefix).checkpoint

    def restore(self, checkpoint_id: str) -> None:
        target = self._find(checkpoint_id)
        covered = {p for s in self._snapshots for p in s.files}
        for rel in _walk(self.work_tree):
            in_scope = rel in covered or matches_any(rel, target.patterns)
            if in_scope and rel not in target.files:
                (self.work_tree / rel).unlink()
                _prune_dirs(self.work_tree, (self.work_tree / rel).parent)
        for rel, entry in target.files.items():
            _write(self.work_tree / rel, entry)

    # builtins.list: in this class body, after `def list`, plain `list` names the method.
    def materialize(self, checkpoint_id: str, target: Path) -> builtins.list[str]:
        """Write the snapshot's files into ``target``; the work tree and snapshots stay as is."""
        snapshot = self._find(checkpoint_id)
        paths = sorted(snapshot.files)
        with self._export_target(target) as root:
            for rel in paths:
                _write(root / rel, snapshot.files[rel])
        return paths

    def files(self, checkpoint_id: str) -> builtins.list[str]:
        """The snapshot's paths, sorted."""
        return sorted(self._find(checkpoint_id).files)

    def manifest(self, checkpoint_id: str) -> dict[str, StoredFile]:
        """The snapshot's files with ``sha256:`` digests."""
        return {rel: _stored(entry) for rel, entry in self._find(checkpoint_id).files.items()}

    def read_file(self, checkpoint_id: str, path: str) -> bytes:
        entry = self._find(checkpoint_id).files.get(path)
        if entry is None:
            raise CheckpointNotFoundError(f"checkpoint {checkpoint_id[:12]} holds no file {path!r}")
        return _content(entry)

    def fork_into(self, target_execution_dir: Path, keep: Collection[str]) -> None:
        """Give the target directory's store the kept snapshots (and the initial one); a
        snapshot never changes, so they are shared."""
        target = self._stores.setdefault(Path(target_execution_dir).resolve(), [])
        if target:
            raise CheckpointError(f"{target_execution_dir} already has a checkpoint store")
        wanted = set(keep)
        kept = [s for s in self._snapshots
                if s.checkpoint.id in wanted or s.checkpoint.kind == "initial"]
        unknown = wanted.difference(s.checkpoint.id for s in kept)
        if unknown:
            raise CheckpointNotFoundError(f"no checkpoint {', '.join(sorted(unknown))}")
        target.extend(kept)

    def changed_files(self, from_id: str, to_id: str) -> builtins.list[FileChange]:
        a, b = self._find(from_id).files, self._find(to_id).files
        changes = [FileChange(p, "deleted") for p in a if p not in b]
        changes += [FileChange(p, "added") for p in b if p not in a]
        changes += [FileChange(p, "modified") for p in a if p in b and a[p] != b[p]]
        return sorted(changes, key=lambda c: c.path)

    def prune(self, policy: RetentionPolicy) -> builtins.list[str]:
        keep: set[str] = set(policy.keep_ids)
        per_run: dict[str | None, int] = {}
        for snap in reversed(self._snapshots):
            cp = snap.checkpoint
            if cp.kind == "initial":
                keep.add(cp.id)
                continue
            per_run[cp.run_id] = per_run.get(cp.run_id, 0) + 1
            if per_run[cp.run_id] <= policy.keep_last_per_run:
                keep.add(cp.id)
        removed = [s.checkpoint.id for s in self._snapshots if s.checkpoint.id not in keep]
        self._snapshots[:] = [s for s in self._snapshots if s.checkpoint.id in keep]
        return removed


def _read(path: Path) -> Entry:
    if path.is_symlink():
        return ("link", os.readlink(path))
    return ("file", (path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR)))


def _content(entry: Entry) -> bytes:
    """A file's bytes, or a link's target."""
    kind, payload = entry
    return os.fsencode(payload) if kind == "link" else bytes(payload[0])


def _stored(entry: Entry) -> StoredFile:
    data = _content(entry)
    return StoredFile(f"sha256:{hashlib.sha256(data).hexdigest()}", len(data),
                      executable=entry[0] == "file" and bool(entry[1][1]),
                      symlink=entry[0] == "link")


def _write(path: Path, entry: Entry) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    kind, payload = entry
    if kind == "link":
        os.symlink(payload, path)
        return
    data, executable = payload
    path.write_bytes(data)
    path.chmod(0o755 if executable else 0o644)


def _walk(root: Path) -> list[str]:
    from hankweave.workspace import walk_files

    return list(walk_files(root))


def _prune_dirs(root: Path, directory: Path) -> None:
    while directory != root and directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()
        directory = directory.parent


@hookimpl
def register_checkpoint_backends(register: Any) -> None:
    register(MemoryCheckpointStore)
