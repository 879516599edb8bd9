"""Which files changed: the selection of watched files and the snapshots compared."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import hankweave_sentinel_command as command
import pytest
from command_helpers import write
from hankweave_sentinel_command import WorkspaceChanges, WorkspaceSnapshot, selected_files

HOUR_NS = 3600 * 1_000_000_000


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "agentRoot"
    root.mkdir()
    return root


def snapshot(root: Path, previous: WorkspaceSnapshot | None = None,
             files: tuple[str, ...] = ("**/*",)) -> WorkspaceSnapshot:
    return WorkspaceSnapshot.take(root, selected_files(root, files, ()), previous)


def age(path: Path) -> None:
    """Make ``path`` look last written an hour ago: no longer racy."""
    then = time.time_ns() - HOUR_NS
    os.utime(path, ns=(then, then))


# ----- the selection -----


def test_files_and_exclude_select_paths_relative_to_the_agent_root(root):
    write(root, {"a.py": "", "pkg/b.py": "", "pkg/gen/c.py": "", "notes.md": ""})
    assert selected_files(root, ["**/*.py"], []) == ["a.py", "pkg/b.py", "pkg/gen/c.py"]
    assert selected_files(root, ["**/*.py"], ["pkg/gen/**"]) == ["a.py", "pkg/b.py"]
    assert selected_files(root, ["*.py", "*.md"], []) == ["a.py", "notes.md"]


def test_git_ignored_files_and_the_data_link_are_never_selected(root, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.py").write_text("")
    (root / "read_only_data_source").symlink_to(data)
    write(root, {".gitignore": "build/\n", "build/out.py": "", ".git/hooks/x.py": "",
                 "src.py": ""})
    assert selected_files(root, ["**/*"], []) == [".gitignore", "src.py"]


def test_a_snapshot_follows_file_symlinks_and_skips_the_rest(root):
    write(root, {"real.py": "x = 1\n", "dir/inner.py": ""})
    (root / "link.py").symlink_to("real.py")
    (root / "dangling.py").symlink_to("missing.py")
    (root / "dirlink").symlink_to("dir")
    assert sorted(snapshot(root).files) == ["dir/inner.py", "link.py", "real.py"]


# ----- the changes -----


def test_created_modified_and_deleted_files_are_told_apart(root):
    write(root, {"keep.py": "k\n", "edit.py": "old\n", "gone.py": "g\n"})
    before = snapshot(root)
    write(root, {"edit.py": "new content\n", "new.py": "n\n"})
    (root / "gone.py").unlink()
    changes = snapshot(root, before).changes_since(before)
    assert changes == WorkspaceChanges(created=("new.py",), modified=("edit.py",),
                                       deleted=("gone.py",))
    assert changes.present == ["edit.py", "new.py"] and changes.count == 3


def test_an_untouched_workspace_has_no_changes(root):
    write(root, {"a.py": "a\n", "b/c.py": "c\n"})
    before = snapshot(root)
    changes = snapshot(root, before).changes_since(before)
    assert not changes and changes.count == 0


def test_a_file_outside_the_selection_is_no_change(root):
    before = snapshot(root, files=("**/*.py",))
    write(root, {"notes.md": "hello"})
    assert not snapshot(root, before, files=("**/*.py",)).changes_since(before)


def test_a_file_written_just_before_the_scan_is_hashed_and_an_old_one_is_not(root):
    write(root, {"fresh.py": "f\n", "old.py": "o\n"})
    age(root / "old.py")
    files = snapshot(root).files
    assert files["fresh.py"].digest is not None
    assert files["old.py"].digest is None


def test_a_rewrite_the_stat_cannot_show_is_found_by_the_hash(root):
    """Same size, same timestamps (rewritten within one clock tick): only content tells."""
    write(root, {"a.py": "x = 1\n"})
    now = snapshot(root)
    same_stat = dataclasses.replace(now.files["a.py"], digest=b"the bytes of another content")
    previous = WorkspaceSnapshot({"a.py": same_stat}, now.taken_ns)
    assert snapshot(root, previous).changes_since(previous).modified == ("a.py",)
    assert not snapshot(root, now).changes_since(now)


def test_a_hashed_file_is_compared_by_hash_again_once_it_is_old(root):
    write(root, {"a.py": "x = 1\n"})
    age(root / "a.py")
    stamp = snapshot(root).files["a.py"]
    previous = WorkspaceSnapshot({"a.py": dataclasses.replace(stamp, digest=b"?")}, 0)
    again = snapshot(root, previous)
    assert again.files["a.py"].digest is not None
    assert again.changes_since(previous).modified == ("a.py",)


def test_files_over_the_hash_limit_are_compared_by_stat_alone(root, monkeypatch):
    monkeypatch.setattr(command, "HASH_LIMIT_BYTES", 4)
    write(root, {"small.py": "1\n", "large.py": "12345\n"})
    files = snapshot(root).files
    assert files["small.py"].digest is not None and files["large.py"].digest is None


def test_a_file_replaced_by_another_of_the_same_size_is_modified(root):
    write(root, {"a.py": "one\n"})
    before = snapshot(root)
    write(root, {"tmp": "two\n"})
    (root / "tmp").replace(root / "a.py")  # a new inode, as editors and formatters save
    assert snapshot(root, before).changes_since(before).modified == ("a.py",)
