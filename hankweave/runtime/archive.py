"""``archiveOnSuccess``, the archive manifest, and putting archives back on rollback (docs/behaviour.md §3.10).

After a codon completes, the files its ``archiveOnSuccess`` globs select are **moved** out of
agentRoot into ``rigArchive/`` (so the next codon starts without them), and each move is recorded
in ``.hankweave/archive-manifest.json``. The manifest lives outside the work tree and is never
checkpointed, so a rollback decides from it which archived files belong back in the workspace.

The restore is the 0.12 design, not 0.10.0's: an entry comes back only when its checkpoint lies
on the timeline being abandoned (reachable after the rollback target) or is ``orphan``; entries of
unknown checkpoints stay archived with a warning; a file present in the target tree is never
overwritten; and exactly the restored entries leave the manifest.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from hankweave.execution.layout import ExecutionLayout
from hankweave.fsutil import (
    PRIVATE_FILE_MODE,
    atomic_write_bytes,
    private_dir,
    remove_path,
    utc_now_iso,
)
from hankweave.state.types import LoopContext
from hankweave.workspace import resolve_patterns

__all__ = [
    "ARCHIVE_DIR",
    "MANIFEST_VERSION",
    "ORPHAN",
    "ArchiveEntry",
    "ArchiveFailure",
    "ArchiveLoopContext",
    "ArchiveManifest",
    "ArchiveManifestError",
    "ArchiveResult",
    "RestoreResult",
    "RestoreSelection",
    "archive_destination",
    "archive_on_success",
    "manifest_path",
    "restore_entries",
    "select_entries_to_restore",
]

log = logging.getLogger(__name__)

ARCHIVE_DIR = "rigArchive"
"""The archive folder, directly under the execution directory."""
MANIFEST_VERSION = "1.0.0"
ORPHAN = "orphan"
"""``checkpointSha`` of an entry archived without a checkpoint: always restored."""


def manifest_path(execution_dir: Path) -> Path:
    """``<execution_dir>/.hankweave/archive-manifest.json``."""
    return ExecutionLayout(execution_dir).archive_manifest


# --------------------------------------------------------------------------------------------
# The manifest file
# --------------------------------------------------------------------------------------------


class _ManifestModel(BaseModel):
    # camelCase on disk like every other runtime file; unknown keys kept so a manifest written
    # by another version round-trips.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="allow"
    )


class ArchiveLoopContext(_ManifestModel):
    """The loop iteration a loop codon's archive belongs to."""

    loop_id: str
    iteration: int


class ArchiveEntry(_ManifestModel):
    """One archived file."""

    source_path: str
    """Where it was, relative to agentRoot (and where a restore puts it back)."""
    archive_path: str
    """Where it is, relative to the execution directory (``rigArchive/...``)."""
    codon_id: str
    """The runtime id of the codon that archived it, or the loop id for a loop-level archive."""
    loop_context: ArchiveLoopContext | None = None
    """Set for a codon inside a loop; absent for top-level codons and loop-level archives."""
    checkpoint_sha: str
    """The archiving codon's completion checkpoint, or ``"orphan"``."""
    timestamp: str


class ArchiveManifest(_ManifestModel):
    """``.hankweave/archive-manifest.json``: every archived file not yet restored, oldest first."""

    version: Literal["1.0.0"] = "1.0.0"
    entries: list[ArchiveEntry] = Field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> ArchiveManifest:
        """Read the manifest; a missing file is an empty manifest.

        Raises:
            ArchiveManifestError: the file exists but is not a valid manifest. Starting afresh
                (as 0.10.0 did) would overwrite it and forget every archive it lists.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise ArchiveManifestError(f"Cannot read archive manifest {path}: {exc}") from exc
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            raise ArchiveManifestError(
                f"Archive manifest {path} is not valid ({exc.error_count()} problem(s), first: "
                f"{exc.errors()[0]['msg']}). Fix or move the file; rigArchive/ is unchanged."
            ) from exc

    def save(self, path: Path) -> None:
        """Write the manifest atomically (2-space indented JSON, optional fields left out)."""
        private_dir(path.parent)  # .hankweave/: docs/state.md, "File modes"
        data = self.model_dump_json(by_alias=True, exclude_none=True, indent=2)
        atomic_write_bytes(path, data.encode(), mode=PRIVATE_FILE_MODE)

    def remove(self, entries: Iterable[ArchiveEntry]) -> int:
        """Drop these exact entry objects (by identity, not equality); returns how many went."""
        doomed = {id(entry) for entry in entries}
        before = len(self.entries)
        self.entries = [entry for entry in self.entries if id(entry) not in doomed]
        return before - len(self.entries)


class ArchiveManifestError(Exception):
    """The archive manifest on disk cannot be read."""


# --------------------------------------------------------------------------------------------
# Archiving
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveFailure:
    """A path that could not be archived or restored (``failedPaths[]``)."""

    path: str
    error: str


@dataclass
class ArchiveResult:
    """What :func:`archive_on_success` did.

    Attributes:
        archived: source paths moved into ``rigArchive/`` (``archivedPaths``).
        failed: paths that could not be moved; they stay in agentRoot.
        missing: paths matched but gone before they could be moved (counted as success).
        entries: the manifest entries added, one per archived path.
    """

    archived: list[str] = field(default_factory=list)
    failed: list[ArchiveFailure] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    entries: list[ArchiveEntry] = field(default_factory=list)

    @property
    def matched_anything(self) -> bool:
        """Whether an ``archive.completed``/``archive.partial`` event is due at all."""
        return bool(self.archived or self.failed or self.missing)


def _identity(value: str) -> str:
    """A codon or loop id as one archive path component (``#`` becomes ``-``)."""
    if not value or value in (".", "..") or any(ch in value for ch in "/\\\0:"):
        raise ValueError(f"Invalid archive identity: {value!r}")
    return value.replace("#", "-")


def archive_destination(
    source_path: str,
    *,
    codon_id: str,
    loop_context: ArchiveLoopContext | LoopContext | None = None,
    loop_level: bool = False,
) -> str:
    """The archive path of ``source_path``, relative to the execution directory.

    * top-level codon: ``rigArchive/<codonId with # as ->/<path>``;
    * codon in a loop: ``rigArchive/<loopId>-<iteration>/<codonId with # as ->/<path>``;
    * loop-level (``codon_id`` is the loop id): ``rigArchive/<loopId>-loop/<path>``.
    """
    if loop_level:
        owner = f"{_identity(codon_id)}-loop"
    elif loop_context is not None:
        owner = f"{_identity(loop_context.loop_id)}-{loop_context.iteration}/{_identity(codon_id)}"
    else:
        owner = _identity(codon_id)
    return f"{ARCHIVE_DIR}/{owner}/{source_path}"


def _contained(root: Path, relative: str) -> Path:
    """``root/relative``, refusing anything that would leave ``root`` (paths come from JSON)."""
    if not relative or posixpath.isabs(relative) or "\\" in relative or "\0" in relative:
        raise ValueError(f"Invalid path: {relative!r}")
    normalized = posixpath.normpath(relative)
    if normalized in (".", "..") or normalized.startswith("../"):
        raise ValueError(f"Path leaves its directory: {relative!r}")
    return root / normalized


def _place_copy(source: Path, destination: Path) -> None:
    """Copy ``source`` to ``destination``, replacing what is there; symlinks stay symlinks.

    Archives hold files; a directory (from a manifest written by an older version) is copied
    as a tree.
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(destination):
        remove_path(destination)
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, destination, symlinks=True)
    else:
        shutil.copy2(source, destination, follow_symlinks=False)


def archive_on_success(
    patterns: Sequence[str],
    *,
    agent_root: Path,
    execution_dir: Path,
    codon_id: str,
    loop_context: ArchiveLoopContext | LoopContext | None,
    checkpoint_sha: str | None,
    manifest: ArchiveManifest,
    loop_level: bool = False,
) -> ArchiveResult:
    """Move the files ``patterns`` select from agentRoot into ``rigArchive/``.

    The patterns resolve like checkpoint patterns (gitignore-aware, files only). Each file is
    copied to :func:`archive_destination` (replacing an older archive copy), recorded in the
    manifest, which is saved, and only then deleted from agentRoot: a crash in between leaves
    the file in both places, never in neither.

    Args:
        codon_id: the runtime id (``write#0``), or the loop id with ``loop_level``.
        loop_context: the loop iteration of a codon inside a loop; ``None`` otherwise.
        checkpoint_sha: the codon's completion checkpoint; ``None`` records ``"orphan"``.
        manifest: the loaded manifest; entries are appended and it is saved after each one.
        loop_level: this is the loop's own ``archiveOnSuccess``, run once when the loop ends.

    Archive errors are reported in the result, never raised: they do not fail the codon.
    """
    result = ArchiveResult()
    context = (
        None
        if loop_level or loop_context is None
        else ArchiveLoopContext(loop_id=loop_context.loop_id, iteration=loop_context.iteration)
    )
    for rel in resolve_patterns(agent_root, patterns):
        source = agent_root / rel
        if not os.path.lexists(source):
            result.missing.append(rel)
            continue
        try:
            entry = _archive_file(source, rel, execution_dir=execution_dir, codon_id=codon_id,
                                  loop_context=context, loop_level=loop_level,
                                  checkpoint_sha=checkpoint_sha, manifest=manifest)
        except (OSError, ValueError) as exc:
            result.failed.append(ArchiveFailure(rel, str(exc)))
            continue
        result.archived.append(rel)
        result.entries.append(entry)
    return result


def _archive_file(source: Path, rel: str, *, execution_dir: Path, codon_id: str,
                  loop_context: ArchiveLoopContext | None, loop_level: bool,
                  checkpoint_sha: str | None, manifest: ArchiveManifest) -> ArchiveEntry:
    """Copy one file into the archive, record it in the saved manifest, then delete it (see
    :func:`archive_on_success`)."""
    archive_rel = archive_destination(
        rel, codon_id=codon_id, loop_context=loop_context, loop_level=loop_level
    )
    destination = _contained(execution_dir, archive_rel)
    if os.path.lexists(destination):
        log.info("Archive collision: %s is replaced", archive_rel)
    _place_copy(source, destination)
    entry = ArchiveEntry(
        source_path=rel,
        archive_path=archive_rel,
        codon_id=codon_id,
        loop_context=loop_context,
        checkpoint_sha=checkpoint_sha or ORPHAN,
        timestamp=utc_now_iso(),
    )
    manifest.entries.append(entry)
    try:
        manifest.save(manifest_path(execution_dir))
    except OSError:
        manifest.entries.remove(entry)
        raise
    source.unlink()
    return entry


# --------------------------------------------------------------------------------------------
# Restoring on rollback
# --------------------------------------------------------------------------------------------


@dataclass
class RestoreSelection:
    """The entries a rollback restores, and the ones it cannot place.

    Attributes:
        entries: to restore, in manifest order (oldest first).
        unknown: entries whose checkpoint the repository does not know; they stay archived.
        warnings: one message per unknown entry, for the log.
    """

    entries: list[ArchiveEntry] = field(default_factory=list)
    unknown: list[ArchiveEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def select_entries_to_restore(
    manifest: ArchiveManifest, reachable_after_target: set[str], known_shas: set[str]
) -> RestoreSelection:
    """Choose the manifest entries a rollback puts back.

    Args:
        reachable_after_target: the checkpoints being abandoned, ``git rev-list
            <target>..<head>`` (reachable from the pre-rollback head, not from the target).
        known_shas: every checkpoint the repository knows, to tell "not selected by design"
            from "cannot be placed".

    An ``orphan`` entry or one archived at an abandoned checkpoint is restored. Entries at or
    before the target, or on another timeline, stay archived. An entry whose checkpoint is
    unknown also stays (restoring would overwrite the workspace on a guess) and gets a warning.
    """
    selection = RestoreSelection()
    for entry in manifest.entries:
        sha = entry.checkpoint_sha
        if sha == ORPHAN or sha in reachable_after_target:
            selection.entries.append(entry)
        elif sha not in known_shas:
            message = (
                f"Archive entry {entry.source_path} ({entry.archive_path}) references checkpoint "
                f"{sha}, which is unknown to the checkpoint repository. Leaving it archived in "
                f"{ARCHIVE_DIR}/; restore it by hand if needed."
            )
            log.warning(message)
            selection.unknown.append(entry)
            selection.warnings.append(message)
    return selection


@dataclass
class RestoreResult:
    """What :func:`restore_entries` did (``rollback.archiveRestore``).

    Attributes:
        restored: entries whose file is back in agentRoot; they left the manifest. An older
            entry for a destination a newer entry restored counts as restored too.
        failed: entries that could not be restored; they stay in the manifest.
        skipped: entries whose destination exists in the target tree; archive copy and entry
            are kept.
    """

    restored: list[ArchiveEntry] = field(default_factory=list)
    failed: list[ArchiveFailure] = field(default_factory=list)
    skipped: list[ArchiveEntry] = field(default_factory=list)

    @property
    def restored_paths(self) -> list[str]:
        """The source paths restored, each once, in restore order."""
        return list(dict.fromkeys(entry.source_path for entry in self.restored))

    @property
    def status(self) -> Literal["completed", "partial", "failed"]:
        """``completed`` without failures, ``failed`` when nothing was restored, else
        ``partial``."""
        if not self.failed:
            return "completed"
        return "partial" if self.restored else "failed"


def restore_entries(
    entries: Sequence[ArchiveEntry],
    *,
    agent_root: Path,
    execution_dir: Path,
    manifest: ArchiveManifest,
    tree_has: Callable[[str], bool],
) -> RestoreResult:
    """Put archived files back into agentRoot after the rollback checkout.

    * An entry whose ``sourcePath`` exists in the checked-out target tree (``tree_has``) is
      skipped: the target's own file wins, and the archive copy stays.
    * Several entries for one destination: the newest (by timestamp, then manifest order) is
      the one copied back; the older ones were superseded on the abandoned timeline and leave
      the manifest with it.
    * Each restore is copy-then-delete of the archive copy.

    Afterwards exactly the restored entries are removed from ``manifest`` (which is saved) and
    archive directories left empty are removed, deepest first.
    """
    result = RestoreResult()
    archive_root = execution_dir / ARCHIVE_DIR
    # Decided before anything is copied: later entries may replace files this pass restored,
    # never files of the target tree.
    protected = {entry.source_path for entry in entries if tree_has(entry.source_path)}

    by_destination: dict[str, list[ArchiveEntry]] = {}
    ordered = sorted(enumerate(entries), key=lambda pair: (pair[1].timestamp, pair[0]))
    for _, entry in ordered:
        by_destination.setdefault(posixpath.normpath(entry.source_path), []).append(entry)

    for group in by_destination.values():
        newest, superseded = group[-1], group[:-1]
        if any(entry.source_path in protected for entry in group):
            result.skipped.extend(group)
            continue
        try:
            source = _contained(archive_root, _under_archive(newest.archive_path))
            destination = _contained(agent_root, newest.source_path)
            if not os.path.lexists(source):
                raise FileNotFoundError(f"Archive not found: {newest.archive_path}")
            _place_copy(source, destination)
        except (OSError, ValueError) as exc:
            result.failed.extend(ArchiveFailure(entry.source_path, str(exc)) for entry in group)
            continue
        for entry in group:
            _discard_archive_copy(entry, archive_root)
        result.restored.extend([*superseded, newest])

    if manifest.remove(result.restored):
        manifest.save(manifest_path(execution_dir))
    _prune_empty_dirs(archive_root, (entry.archive_path for entry in entries))
    return result


def _under_archive(archive_path: str) -> str:
    """``archive_path`` relative to ``rigArchive/`` (entries store it from the execution dir)."""
    normalized = posixpath.normpath(archive_path)
    prefix = ARCHIVE_DIR + "/"
    if not normalized.startswith(prefix):
        raise ValueError(f"Archive path is not inside {ARCHIVE_DIR}/: {archive_path!r}")
    return normalized[len(prefix) :]


def _discard_archive_copy(entry: ArchiveEntry, archive_root: Path) -> None:
    try:
        copy = _contained(archive_root, _under_archive(entry.archive_path))
        if os.path.lexists(copy):
            remove_path(copy)
    except (OSError, ValueError) as exc:
        # The file is back in the workspace; a stale archive copy is only clutter.
        log.warning("Restored %s; removing its archive copy failed: %s", entry.source_path, exc)


def _prune_empty_dirs(archive_root: Path, archive_paths: Iterable[str]) -> None:
    directories: set[Path] = set()
    for archive_path in archive_paths:
        try:
            directory = _contained(archive_root, _under_archive(archive_path)).parent
        except ValueError:
            continue
        while directory != archive_root and archive_root in directory.parents:
            directories.add(directory)
            directory = directory.parent
    for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        try:
            directory.rmdir()
        except OSError:
            # Not empty, or already gone: both are fine.
            continue
