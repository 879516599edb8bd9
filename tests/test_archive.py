"""archiveOnSuccess, the archive manifest, and the 0.12 rollback restore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hankweave.runtime.archive import (
    ArchiveEntry,
    ArchiveLoopContext,
    ArchiveManifest,
    ArchiveManifestError,
    ArchiveResult,
    RestoreResult,
    archive_destination,
    archive_on_success,
    manifest_path,
    restore_entries,
    select_entries_to_restore,
)
from hankweave.state.types import PlanLoopContext


@pytest.fixture
def execution_dir(tmp_path: Path) -> Path:
    root = tmp_path / "exec"
    (root / "agentRoot" / "notes").mkdir(parents=True)
    (root / ".hankweave").mkdir()
    return root


def agent_root_of(execution_dir: Path) -> Path:
    return execution_dir / "agentRoot"


def write(execution_dir: Path, rel: str, text: str) -> Path:
    path = agent_root_of(execution_dir) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def archive(
    execution_dir: Path,
    manifest: ArchiveManifest,
    patterns: list[str],
    *,
    codon_id: str = "write",
    loop_context: ArchiveLoopContext | PlanLoopContext | None = None,
    sha: str | None = "c1",
    loop_level: bool = False,
) -> ArchiveResult:
    return archive_on_success(
        patterns,
        agent_root=agent_root_of(execution_dir),
        execution_dir=execution_dir,
        codon_id=codon_id,
        loop_context=loop_context,
        checkpoint_sha=sha,
        manifest=manifest,
        loop_level=loop_level,
    )


def entry(
    source: str, archive_path: str, sha: str, timestamp: str = "2026-01-01T00:00:00.000Z"
) -> ArchiveEntry:
    return ArchiveEntry(
        source_path=source,
        archive_path=archive_path,
        codon_id="write",
        checkpoint_sha=sha,
        timestamp=timestamp,
    )


def restore(
    execution_dir: Path,
    manifest: ArchiveManifest,
    entries: list[ArchiveEntry],
    tree: set[str] | None = None,
) -> RestoreResult:
    present = tree or set()
    return restore_entries(
        entries,
        agent_root=agent_root_of(execution_dir),
        execution_dir=execution_dir,
        manifest=manifest,
        tree_has=lambda path: path in present,
    )


# ----- destinations -----


def test_top_level_codon_archives_under_its_id() -> None:
    assert archive_destination("notes/x.md", codon_id="write") == "rigArchive/write/notes/x.md"


def test_loop_codon_archives_under_loop_iteration_and_codon() -> None:
    context = ArchiveLoopContext(loop_id="gen", iteration=0)

    assert (
        archive_destination("notes/x.md", codon_id="write#0", loop_context=context)
        == "rigArchive/gen-0/write-0/notes/x.md"
    )


def test_loop_level_archive_goes_under_the_loop() -> None:
    assert (
        archive_destination("notes/x.md", codon_id="gen", loop_level=True)
        == "rigArchive/gen-loop/notes/x.md"
    )


def test_an_id_that_would_leave_the_archive_is_refused() -> None:
    with pytest.raises(ValueError, match="Invalid archive identity"):
        archive_destination("x.md", codon_id="../../etc")


# ----- archiving -----


def test_archiving_moves_files_and_records_one_entry_per_path(execution_dir: Path) -> None:
    write(execution_dir, "notes/a.md", "a")
    write(execution_dir, "notes/b.md", "b")
    manifest = ArchiveManifest()

    result = archive(execution_dir, manifest, ["notes/*.md"])

    assert result.archived == ["notes/a.md", "notes/b.md"]
    assert not (agent_root_of(execution_dir) / "notes" / "a.md").exists()
    assert (execution_dir / "rigArchive" / "write" / "notes" / "a.md").read_text() == "a"
    on_disk = json.loads(manifest_path(execution_dir).read_text())
    assert on_disk["version"] == "1.0.0"
    first = on_disk["entries"][0]
    assert {k: v for k, v in first.items() if k != "timestamp"} == {
        "sourcePath": "notes/a.md",
        "archivePath": "rigArchive/write/notes/a.md",
        "codonId": "write",
        "checkpointSha": "c1",
    }
    assert len(on_disk["entries"]) == 2


def test_loop_codon_entry_records_its_loop_iteration(execution_dir: Path) -> None:
    write(execution_dir, "notes/x.md", "x")
    manifest = ArchiveManifest()
    context = PlanLoopContext(loop_id="gen", iteration=2, codon_index_in_loop=0)

    archive(execution_dir, manifest, ["notes/x.md"], codon_id="write#2", loop_context=context)

    saved = json.loads(manifest_path(execution_dir).read_text())["entries"][0]
    assert saved["archivePath"] == "rigArchive/gen-2/write-2/notes/x.md"
    assert saved["loopContext"] == {"loopId": "gen", "iteration": 2}


def test_loop_level_entry_has_the_loop_id_and_no_loop_context(execution_dir: Path) -> None:
    write(execution_dir, "notes/x.md", "x")
    manifest = ArchiveManifest()

    archive(execution_dir, manifest, ["notes/**"], codon_id="gen", loop_level=True)

    saved = json.loads(manifest_path(execution_dir).read_text())["entries"][0]
    assert saved["codonId"] == "gen"
    assert saved["archivePath"] == "rigArchive/gen-loop/notes/x.md"
    assert "loopContext" not in saved


def test_archiving_without_a_checkpoint_records_an_orphan(execution_dir: Path) -> None:
    write(execution_dir, "notes/x.md", "x")
    manifest = ArchiveManifest()

    archive(execution_dir, manifest, ["notes/x.md"], sha=None)

    assert manifest.entries[0].checkpoint_sha == "orphan"


def test_archiving_matches_files_only_and_respects_gitignore(execution_dir: Path) -> None:
    write(execution_dir, "notes/keep.md", "k")
    write(execution_dir, "notes/skip.log", "s")
    write(execution_dir, ".gitignore", "*.log\n")
    manifest = ArchiveManifest()

    result = archive(execution_dir, manifest, ["notes"])

    assert result.archived == ["notes/keep.md"]
    assert (agent_root_of(execution_dir) / "notes" / "skip.log").exists()
    assert (agent_root_of(execution_dir) / "notes").is_dir()


def test_archiving_overwrites_an_existing_archive_copy(execution_dir: Path) -> None:
    manifest = ArchiveManifest()
    write(execution_dir, "notes/x.md", "first")
    archive(execution_dir, manifest, ["notes/x.md"])
    write(execution_dir, "notes/x.md", "second")

    result = archive(execution_dir, manifest, ["notes/x.md"], sha="c2")

    assert result.failed == []
    assert (execution_dir / "rigArchive" / "write" / "notes" / "x.md").read_text() == "second"
    assert [e.checkpoint_sha for e in manifest.entries] == ["c1", "c2"]


def test_nothing_matched_means_nothing_to_report(execution_dir: Path) -> None:
    result = archive(execution_dir, ArchiveManifest(), ["nothing/**"])

    assert not result.matched_anything
    assert not manifest_path(execution_dir).exists()


# ----- the manifest file -----


def test_missing_manifest_loads_empty(execution_dir: Path) -> None:
    assert ArchiveManifest.load(manifest_path(execution_dir)).entries == []


def test_manifest_round_trips(execution_dir: Path) -> None:
    path = manifest_path(execution_dir)
    manifest = ArchiveManifest(entries=[entry("a.md", "rigArchive/write/a.md", "c1")])

    manifest.save(path)

    assert ArchiveManifest.load(path) == manifest


def test_corrupt_manifest_is_an_error_not_a_fresh_start(execution_dir: Path) -> None:
    path = manifest_path(execution_dir)
    path.write_text("{not json")

    with pytest.raises(ArchiveManifestError, match="is not valid"):
        ArchiveManifest.load(path)
    assert path.read_text() == "{not json"


# ----- choosing what to restore -----


def test_restore_selects_entries_after_the_target_and_orphans() -> None:
    before = entry("before.md", "rigArchive/a/before.md", "c1")
    after = entry("after.md", "rigArchive/b/after.md", "c3")
    orphan = entry("orphan.md", "rigArchive/c/orphan.md", "orphan")
    other_timeline = entry("other.md", "rigArchive/d/other.md", "x9")
    manifest = ArchiveManifest(entries=[before, after, orphan, other_timeline])

    selection = select_entries_to_restore(manifest, {"c3"}, {"c1", "c2", "c3", "x9"})

    assert selection.entries == [after, orphan]
    assert selection.unknown == [] and selection.warnings == []


def test_entry_of_an_unknown_checkpoint_stays_archived_with_a_warning() -> None:
    lost = entry("lost.md", "rigArchive/a/lost.md", "deadbeef")
    manifest = ArchiveManifest(entries=[lost])

    selection = select_entries_to_restore(manifest, {"c3"}, {"c1", "c3"})

    assert selection.entries == []
    assert selection.unknown == [lost]
    assert "deadbeef" in selection.warnings[0]
    assert "unknown to the checkpoint repository" in selection.warnings[0]


# ----- restoring -----


def test_restore_moves_the_file_back_and_removes_exactly_its_entry(execution_dir: Path) -> None:
    manifest = ArchiveManifest()
    write(execution_dir, "notes/a.md", "a")
    write(execution_dir, "notes/b.md", "b")
    archive(execution_dir, manifest, ["notes/*.md"])
    restored_entry, kept_entry = manifest.entries

    result = restore(execution_dir, manifest, [restored_entry])

    assert result.restored_paths == ["notes/a.md"]
    assert result.status == "completed"
    assert (agent_root_of(execution_dir) / "notes" / "a.md").read_text() == "a"
    assert not (execution_dir / "rigArchive" / "write" / "notes" / "a.md").exists()
    assert manifest.entries == [kept_entry]
    assert ArchiveManifest.load(manifest_path(execution_dir)).entries == [kept_entry]


def test_restore_skips_a_path_present_in_the_target_tree(execution_dir: Path) -> None:
    manifest = ArchiveManifest()
    write(execution_dir, "notes/a.md", "archived")
    archive(execution_dir, manifest, ["notes/a.md"])
    write(execution_dir, "notes/a.md", "from the target checkpoint")

    result = restore(execution_dir, manifest, list(manifest.entries), tree={"notes/a.md"})

    assert result.skipped == manifest.entries and result.restored == []
    assert (agent_root_of(execution_dir) / "notes" / "a.md").read_text() == (
        "from the target checkpoint"
    )
    assert (execution_dir / "rigArchive" / "write" / "notes" / "a.md").exists()
    assert len(manifest.entries) == 1


def test_newest_entry_wins_for_the_same_destination(execution_dir: Path) -> None:
    manifest = ArchiveManifest()
    write(execution_dir, "notes/x.md", "iteration 0")
    archive(
        execution_dir,
        manifest,
        ["notes/x.md"],
        codon_id="write#0",
        sha="c1",
        loop_context=ArchiveLoopContext(loop_id="gen", iteration=0),
    )
    write(execution_dir, "notes/x.md", "iteration 1")
    archive(
        execution_dir,
        manifest,
        ["notes/x.md"],
        codon_id="write#1",
        sha="c2",
        loop_context=ArchiveLoopContext(loop_id="gen", iteration=1),
    )

    result = restore(execution_dir, manifest, list(manifest.entries))

    assert (agent_root_of(execution_dir) / "notes" / "x.md").read_text() == "iteration 1"
    assert len(result.restored) == 2 and result.restored_paths == ["notes/x.md"]
    assert manifest.entries == []


def test_newest_wins_even_when_both_entries_share_one_archive_copy(execution_dir: Path) -> None:
    manifest = ArchiveManifest()
    write(execution_dir, "notes/x.md", "first run")
    archive(execution_dir, manifest, ["notes/x.md"], sha="c1")
    write(execution_dir, "notes/x.md", "redo")
    archive(execution_dir, manifest, ["notes/x.md"], sha="c2")

    result = restore(execution_dir, manifest, list(manifest.entries))

    assert result.status == "completed"
    assert (agent_root_of(execution_dir) / "notes" / "x.md").read_text() == "redo"
    assert manifest.entries == []


def test_missing_archive_copy_fails_and_keeps_the_entry(execution_dir: Path) -> None:
    ghost = entry("notes/ghost.md", "rigArchive/write/notes/ghost.md", "c3")
    manifest = ArchiveManifest(entries=[ghost])

    result = restore(execution_dir, manifest, [ghost])

    assert result.status == "failed"
    assert result.failed[0].path == "notes/ghost.md"
    assert "Archive not found" in result.failed[0].error
    assert manifest.entries == [ghost]


def test_archive_path_outside_the_archive_is_refused(execution_dir: Path) -> None:
    (execution_dir / "secret.txt").write_text("s")
    sneaky = entry("notes/s.md", "rigArchive/../secret.txt", "c3")
    manifest = ArchiveManifest(entries=[sneaky])

    result = restore(execution_dir, manifest, [sneaky])

    assert result.status == "failed"
    assert (execution_dir / "secret.txt").exists()
    assert not (agent_root_of(execution_dir) / "notes" / "s.md").exists()


def test_partial_restore_reports_both_outcomes(execution_dir: Path) -> None:
    manifest = ArchiveManifest()
    write(execution_dir, "notes/a.md", "a")
    archive(execution_dir, manifest, ["notes/a.md"])
    ghost = entry("notes/ghost.md", "rigArchive/write/notes/ghost.md", "c1")
    manifest.entries.append(ghost)

    result = restore(execution_dir, manifest, list(manifest.entries))

    assert result.status == "partial"
    assert result.restored_paths == ["notes/a.md"]
    assert manifest.entries == [ghost]


def test_empty_archive_directories_are_pruned(execution_dir: Path) -> None:
    manifest = ArchiveManifest()
    write(execution_dir, "notes/deep/a.md", "a")
    write(execution_dir, "other.md", "o")
    archive(
        execution_dir,
        manifest,
        ["notes/deep/a.md"],
        codon_id="write#0",
        loop_context=ArchiveLoopContext(loop_id="gen", iteration=0),
    )
    archive(execution_dir, manifest, ["other.md"], codon_id="keep")
    restored = [e for e in manifest.entries if e.source_path == "notes/deep/a.md"]

    restore(execution_dir, manifest, restored)

    archive_root = execution_dir / "rigArchive"
    assert not (archive_root / "gen-0").exists()
    assert (archive_root / "keep" / "other.md").exists()
    assert archive_root.is_dir()
