"""``CheckpointStoreContract``: the behaviour every checkpoint backend must have.

A backend's test module subclasses it and says how to build a store and how to leave one as a
killed ``create`` would::

    class TestMyBackend(CheckpointStoreContract):
        store_class = MyCheckpointStore

        def break_mid_create(self, store, execution_dir):
            ...  # leave the partial files a SIGKILL during create() would leave

pytest then runs every ``test_*`` method below against the backend.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hankweave.checkpoints import (
    AmbiguousCheckpointError,
    Checkpoint,
    CheckpointError,
    CheckpointKind,
    CheckpointNotFoundError,
    CheckpointStore,
    FileChange,
    RetentionPolicy,
)
from hankweave.workspace import DATA_LINK

ALL = ("**",)


class Symlink(str):
    """A tree entry that is a symbolic link to this target."""


class Executable(bytes):
    """A tree entry that is a file with the executable bit set."""


Tree = dict[str, Any]


def write_tree(root: Path, files: Tree) -> None:
    """Create ``files`` ({relative path: str | bytes | Symlink | Executable | None}) under root.

    ``None`` deletes the path.
    """
    for rel, content in files.items():
        path = root / rel
        if content is None:
            if path.is_symlink() or path.is_file():
                path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        if isinstance(content, Symlink):
            os.symlink(str(content), path)
        elif isinstance(content, Executable):
            path.write_bytes(bytes(content))
            path.chmod(0o755)
        else:
            data = content.encode() if isinstance(content, str) else content
            path.write_bytes(data)
            path.chmod(0o644)


def read_tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every file and symlink under root (the data link excluded), with kind and content.

    A file is ``("file", bytes, executable)``, a symlink ``("link", target)``.
    """
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        for name in list(dirnames):
            path = Path(dirpath) / name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rel == DATA_LINK:
                dirnames.remove(name)
            elif path.is_symlink():
                dirnames.remove(name)
                out[rel] = ("link", os.readlink(path))
        for name in filenames:
            path = Path(dirpath) / name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rel == DATA_LINK:
                continue
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            else:
                executable = bool(path.stat().st_mode & stat.S_IXUSR)
                out[rel] = ("file", path.read_bytes(), executable)
    return out


@contextlib.contextmanager
def watched_store(store_class: type[CheckpointStore], execution_dir: Path,
                  files: Tree) -> Iterator[tuple[CheckpointStore, Path, Any]]:
    """``(store, work tree, workspace watcher)``: an initialized store over a work tree holding
    ``files``, watched as the runtime watches it.  Skips the test where no watcher exists."""
    from hankweave.workspace_watch import WorkspaceWatcher

    work = execution_dir / "agentRoot"
    write_tree(work, files)
    (execution_dir / ".hankweave").mkdir(exist_ok=True)
    store = store_class(execution_dir)
    store.initialize()
    watcher = WorkspaceWatcher.start(work)
    if watcher is None:
        store.close()
        pytest.skip("no workspace watcher on this platform")
    try:
        yield store, work, watcher
    finally:
        watcher.close()
        store.close()


def file_stats(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` (``root`` included) with its type, modification time and size,
    symlinks not followed: equal before and after an operation that must write nothing."""
    paths = [str(root)]
    for dirpath, dirnames, filenames in os.walk(root):
        paths += [os.path.join(dirpath, name) for name in [*dirnames, *filenames]]
    stats = {}
    for path in paths:
        st = os.lstat(path)
        stats[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), st.st_mtime_ns,
                                              st.st_size)
    return stats


def empty_dirs(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) != root and not dirnames and not filenames:
            found.append(os.path.relpath(dirpath, root))
    return sorted(found)


class _StoreFixtures:
    """An execution directory, its work tree, and an initialized store of ``store_class``."""

    store_class: ClassVar[type[CheckpointStore]]

    def make_store(self, execution_dir: Path) -> CheckpointStore:
        return self.store_class(execution_dir)

    @pytest.fixture
    def execution_dir(self, tmp_path: Path) -> Path:
        execution_dir = tmp_path / "exec"
        (execution_dir / "agentRoot").mkdir(parents=True)
        (execution_dir / ".hankweave").mkdir()
        return execution_dir

    @pytest.fixture
    def work(self, execution_dir: Path) -> Path:
        return execution_dir / "agentRoot"

    @pytest.fixture
    def store(self, execution_dir: Path):
        store = self.make_store(execution_dir)
        store.initialize()
        yield store
        store.close()


class CheckpointStoreContract(_StoreFixtures):
    """Subclass with ``store_class`` set (or ``make_store`` overridden) and ``break_mid_create``."""

    # ----- what a backend's test class provides -----

    def break_mid_create(self, store: CheckpointStore, execution_dir: Path) -> None:
        """Leave the store as a process killed in the middle of ``create()`` would."""
        raise NotImplementedError("backend test classes must simulate a killed create()")

    # ----- helpers -----

    @staticmethod
    def snap(store: CheckpointStore, codon: str = "c", *, run: str = "r1",
             kind: CheckpointKind = "completed", patterns: tuple[str, ...] = ALL) -> Checkpoint:
        return store.create(kind=kind, run_id=run, codon_id=codon, codon_name=f"Codon {codon}",
                            patterns=patterns)

    # ----- initialisation -----

    def test_initialize_creates_an_initial_checkpoint_once(self, execution_dir):
        store = self.make_store(execution_dir)
        first = store.initialize()
        store.close()
        again = self.make_store(execution_dir)
        assert again.initialize() == first
        listed = again.list()
        assert [c.id for c in listed] == [first] and listed[0].kind == "initial"
        assert listed[0].message.startswith("Initial checkpoint setup")
        again.close()

    # ----- creating and listing -----

    def test_a_checkpoint_is_created_even_when_nothing_changed(self, store, work):
        write_tree(work, {"a.txt": "A"})
        first = self.snap(store, "one")
        second = self.snap(store, "two")
        assert first.id != second.id
        assert store.changed_files(first.id, second.id) == []

    def test_checkpoint_metadata_follows_the_original_format(self, store, work):
        made = self.snap(store, "review#1", run="1788337916070-aqhfn", kind="error")
        assert made.message.splitlines()[0] == (
            "error:review#1 [run:1788337916070-aqhfn] Codon review#1")
        assert made.branch == "run-1788337916070-aqhfn"
        assert (made.kind, made.run_id, made.codon_id) == (
            "error", "1788337916070-aqhfn", "review#1")
        assert made.timestamp.endswith("Z")

    def test_list_is_newest_first_and_filterable(self, store, work):
        a = self.snap(store, "a", run="r1", kind="rig-setup")
        b = self.snap(store, "a", run="r1", kind="completed")
        c = self.snap(store, "b", run="r2", kind="completed")
        listed = [x.id for x in store.list()]
        assert listed[:3] == [c.id, b.id, a.id]
        assert [x.id for x in store.list(run_id="r1")] == [b.id, a.id]
        assert [x.id for x in store.list(codon_id="a", kind="rig-setup")] == [a.id]
        assert [x.id for x in store.list(kind="completed")] == [c.id, b.id]

    def test_checkpoint_data_maps_every_id_to_message_timestamp_branch(self, store, work):
        made = self.snap(store, "a")
        data = store.checkpoint_data()
        assert set(data) == {c.id for c in store.list()}
        assert data[made.id] == {"message": made.message, "timestamp": made.timestamp,
                                 "branch": "run-r1"}

    # ----- listing beside a runtime (hankweave inspect) -----

    @staticmethod
    def read_only_listing(store: CheckpointStore) -> list[Checkpoint]:
        listed = store.list_read_only()
        if listed is None:
            pytest.skip(f"{type(store).__name__} does not list read-only (list_read_only "
                        "returns None)")
        return listed

    def test_list_read_only_lists_what_list_does_and_writes_nothing(
            self, store, work, execution_dir):
        write_tree(work, {"a.txt": "A"})
        self.snap(store, "a", kind="rig-setup")
        self.snap(store, "a")
        self.snap(store, "b", run="r2")
        # A second instance that is never initialized, as `hankweave inspect` has.
        reader = self.make_store(execution_dir)
        before = file_stats(execution_dir)
        assert self.read_only_listing(reader) == store.list()
        assert file_stats(execution_dir) == before
        reader.close()

    def test_list_read_only_of_a_store_never_created_is_empty_and_creates_nothing(
            self, execution_dir):
        reader = self.make_store(execution_dir)
        before = file_stats(execution_dir)
        assert self.read_only_listing(reader) == []
        assert file_stats(execution_dir) == before
        reader.close()

    def test_resolve_by_id_and_unique_prefix(self, store, work):
        made = self.snap(store, "a")
        assert store.resolve(made.id) == made
        assert store.resolve(made.id[:12]).id == made.id
        with pytest.raises(CheckpointNotFoundError):
            store.resolve("f" * 40 if not made.id.startswith("f") else "0" * 40)

    def test_an_ambiguous_prefix_is_refused(self, store, work):
        ids = [self.snap(store, f"c{i}").id for i in range(40)]
        counts: dict[str, int] = {}
        for ident in ids:
            counts[ident[0]] = counts.get(ident[0], 0) + 1
        shared = next(p for p, n in counts.items() if n > 1)
        with pytest.raises(AmbiguousCheckpointError):
            store.resolve(shared)

    # ----- round trips -----

    def test_restore_round_trips_added_modified_and_deleted_files(self, store, work):
        write_tree(work, {"keep.txt": "v1", "change.txt": "old", "gone.txt": "bye",
                          "dir/nested.md": "# nested"})
        first = self.snap(store, "first")
        before = read_tree(work)
        write_tree(work, {"change.txt": "new", "gone.txt": None, "added.txt": "hello",
                          "dir/more/deep.txt": "deep"})
        second = self.snap(store, "second")
        after = read_tree(work)

        store.restore(first.id)
        assert read_tree(work) == before
        store.restore(second.id)
        assert read_tree(work) == after

    def test_changed_files_reports_each_change(self, store, work):
        write_tree(work, {"same.txt": "s", "mod.txt": "1", "del.txt": "d"})
        first = self.snap(store, "first")
        write_tree(work, {"mod.txt": "2", "del.txt": None, "new.txt": "n"})
        second = self.snap(store, "second")
        assert store.changed_files(first.id, second.id) == [
            FileChange("del.txt", "deleted"),
            FileChange("mod.txt", "modified"),
            FileChange("new.txt", "added"),
        ]

    def test_binary_empty_and_unicode_files_round_trip(self, store, work):
        files = {"blob.bin": bytes(range(256)) * 64, "empty.txt": b"",
                 "résumé ✓/naïve file.txt": "unicode", "crlf.txt": b"a\r\nb\r\n"}
        write_tree(work, files)
        made = self.snap(store, "bytes")
        expected = read_tree(work)
        write_tree(work, dict.fromkeys(files))
        store.restore(made.id)
        assert read_tree(work) == expected

    def test_executable_bit_round_trips(self, store, work):
        write_tree(work, {"run.sh": Executable(b"#!/bin/sh\necho hi\n"), "plain.txt": "x"})
        made = self.snap(store, "modes")
        (work / "run.sh").chmod(0o644)
        (work / "plain.txt").chmod(0o755)
        store.restore(made.id)
        tree = read_tree(work)
        assert tree["run.sh"][2] is True and tree["plain.txt"][2] is False

    def test_symlinks_are_stored_as_links_and_never_followed(self, store, work, tmp_path):
        outside = tmp_path / "outside.txt"
        outside.write_text("outside the workspace")
        write_tree(work, {"target.txt": "t", "link.txt": Symlink("target.txt"),
                          "escape.txt": Symlink(str(outside)), "dirlink": Symlink("sub"),
                          "sub/inner.txt": "i"})
        made = self.snap(store, "links")
        expected = read_tree(work)
        write_tree(work, {"link.txt": None, "escape.txt": None, "dirlink": None})
        (work / "link.txt").write_text("now a file")
        store.restore(made.id)
        assert read_tree(work) == expected
        assert outside.read_text() == "outside the workspace"

    def test_a_directory_emptied_by_restore_is_removed_and_empty_dirs_do_not_break(
            self, store, work):
        (work / "empty-at-first").mkdir()
        first = self.snap(store, "first")
        write_tree(work, {"later/only/file.txt": "x"})
        self.snap(store, "second")
        store.restore(first.id)
        assert "later/only/file.txt" not in read_tree(work)
        assert not (work / "later").exists()

    def test_the_data_link_is_never_captured_or_touched(self, store, work, tmp_path):
        data = tmp_path / "data"
        data.mkdir()
        (data / "input.csv").write_text("a,b\n")
        os.symlink(data, work / DATA_LINK)
        write_tree(work, {"out.txt": "o"})
        made = self.snap(store, "data")
        write_tree(work, {"out.txt": None})
        store.restore(made.id)
        assert (work / DATA_LINK).is_symlink() and (data / "input.csv").read_text() == "a,b\n"
        assert read_tree(work) == {"out.txt": ("file", b"o", False)}

    # ----- materializing (exporting a checkpoint's files elsewhere) -----

    @staticmethod
    def two_checkpoints(store: CheckpointStore, work: Path, outside: Path) -> tuple[
            Checkpoint, dict[str, Any], Checkpoint, dict[str, Any]]:
        """Two checkpoints whose trees differ in every way a file can: each with its tree."""
        outside.write_text("outside the workspace")
        write_tree(work, {"keep.txt": "v1", "change.txt": "old", "gone.txt": "bye",
                          "blob.bin": bytes(range(256)) * 64, "empty.txt": b"",
                          "résumé ✓/naïve file.txt": "unicode", "crlf.txt": b"a\r\nb\r\n",
                          "run.sh": Executable(b"#!/bin/sh\necho hi\n"),
                          "was-exec.sh": Executable(b"x"),
                          "link.txt": Symlink("keep.txt"), "escape.txt": Symlink(str(outside)),
                          "dirlink": Symlink("dir"), "dir/nested.md": "# nested",
                          "dangling": Symlink("no/such/file")})
        first = CheckpointStoreContract.snap(store, "first")
        first_tree = read_tree(work)
        write_tree(work, {"change.txt": "new", "gone.txt": None, "added.txt": "hello",
                          "dir/more/deep.txt": "deep", "was-exec.sh": b"x",
                          "link.txt": Symlink("change.txt"), "dangling": None})
        second = CheckpointStoreContract.snap(store, "second")
        second_tree = read_tree(work)
        return first, first_tree, second, second_tree

    def test_materialize_writes_exactly_the_files_of_the_chosen_checkpoint(
            self, store, work, tmp_path):
        outside = tmp_path / "outside.txt"
        first, first_tree, second, second_tree = self.two_checkpoints(store, work, outside)

        written = store.materialize(first.id, tmp_path / "export" / "first")
        assert read_tree(tmp_path / "export" / "first") == first_tree
        assert written == sorted(first_tree) == store.files(first.id)

        (tmp_path / "second").mkdir()  # an existing empty directory is as good as a new one
        written = store.materialize(second.id, tmp_path / "second")
        assert read_tree(tmp_path / "second") == second_tree
        assert written == sorted(second_tree) == store.files(second.id)
        # Links were written as links, not followed.
        assert outside.read_text() == "outside the workspace"

    def test_materialize_leaves_the_work_tree_and_the_store_as_they_were(
            self, store, work, tmp_path):
        first, first_tree, second, second_tree = self.two_checkpoints(
            store, work, tmp_path / "outside.txt")
        store.restore(first.id)
        write_tree(work, {"scratch.txt": "the agent's own"})
        work_before = read_tree(work)
        listed_before = store.list()

        store.materialize(second.id, tmp_path / "second")
        store.materialize(first.id[:12], tmp_path / "first")
        assert read_tree(tmp_path / "first") == first_tree
        assert read_tree(work) == work_before
        assert store.list() == listed_before
        # The store still knows the work tree as the restore left it: a checkpoint made now
        # differs from the restored one by the scratch file only.
        third = self.snap(store, "third")
        assert store.changed_files(first.id, third.id) == [FileChange("scratch.txt", "added")]
        store.restore(second.id)
        assert read_tree(work) == second_tree

    def test_materialize_of_an_empty_checkpoint_makes_an_empty_directory(
            self, store, tmp_path):
        initial = store.initialize()
        assert store.materialize(initial, tmp_path / "out") == []
        assert list((tmp_path / "out").iterdir()) == [] and store.files(initial) == []

    def test_materialize_refuses_a_target_that_is_not_an_empty_directory(
            self, store, work, tmp_path):
        write_tree(work, {"a.txt": "a"})
        made = self.snap(store, "one")
        occupied = tmp_path / "occupied"
        write_tree(occupied, {"theirs.txt": "keep me"})
        with pytest.raises(CheckpointError, match="not empty"):
            store.materialize(made.id, occupied)
        assert read_tree(occupied) == {"theirs.txt": ("file", b"keep me", False)}
        a_file = tmp_path / "a-file"
        a_file.write_text("not a directory")
        with pytest.raises(CheckpointError):
            store.materialize(made.id, a_file)
        assert a_file.read_text() == "not a directory"

    def test_materialize_refuses_a_target_inside_the_work_tree(self, store, work):
        write_tree(work, {"a.txt": "a"})
        made = self.snap(store, "one")
        with pytest.raises(CheckpointError, match="work tree"):
            store.materialize(made.id, work / "export")
        assert read_tree(work) == {"a.txt": ("file", b"a", False)}
        assert not (work / "export").exists()

    def test_materialize_of_an_unknown_checkpoint_raises_and_creates_nothing(
            self, store, work, tmp_path):
        made = self.snap(store, "one")
        unknown = "f" * 40 if not made.id.startswith("f") else "0" * 40
        with pytest.raises(CheckpointNotFoundError):
            store.materialize(unknown, tmp_path / "out")
        with pytest.raises(CheckpointNotFoundError):
            store.files(unknown)
        assert not (tmp_path / "out").exists()

    # ----- reading a checkpoint's files (hankweave compare) -----

    def test_manifest_lists_exactly_what_materialize_writes(self, store, work, tmp_path):
        first, first_tree, second, second_tree = self.two_checkpoints(
            store, work, tmp_path / "outside.txt")
        for made, tree in ((first, first_tree), (second, second_tree)):
            manifest = store.manifest(made.id)
            written = store.materialize(made.id, tmp_path / f"export-{made.id[:12]}")
            assert sorted(manifest) == written == sorted(tree)
            for path, held in tree.items():
                stored = manifest[path]
                algorithm, _, digest = stored.digest.partition(":")
                assert algorithm and digest, stored
                if held[0] == "link":
                    assert stored.symlink, path
                    assert stored.size == len(os.fsencode(held[1])), path
                else:
                    assert not stored.symlink, path
                    assert (stored.size, stored.executable) == (len(held[1]), held[2]), path

    def test_manifest_digests_are_equal_exactly_when_contents_are(self, store, work):
        write_tree(work, {"a.txt": "same", "dir/b.txt": "same", "run.sh": Executable(b"same"),
                          "other.txt": "other", "changes.txt": "before"})
        first = self.snap(store, "first")
        write_tree(work, {"changes.txt": "after"})
        second = self.snap(store, "second")
        one, two = store.manifest(first.id), store.manifest(second.id)
        assert one["a.txt"].digest == one["dir/b.txt"].digest == one["run.sh"].digest
        assert one["a.txt"].digest != one["other.txt"].digest
        assert one["a.txt"] == two["a.txt"] and one["other.txt"] == two["other.txt"]
        assert one["changes.txt"].digest != two["changes.txt"].digest

    def test_read_file_returns_the_stored_bytes_and_link_targets(self, store, work, tmp_path):
        first, first_tree, second, second_tree = self.two_checkpoints(
            store, work, tmp_path / "outside.txt")
        for made, tree in ((first, first_tree), (second, second_tree)):
            for path, held in tree.items():
                expected = os.fsencode(held[1]) if held[0] == "link" else held[1]
                assert store.read_file(made.id, path) == expected, path

    def test_manifest_and_read_file_write_nothing_and_need_no_initialize(
            self, store, work, execution_dir, tmp_path):
        first, first_tree, second, _ = self.two_checkpoints(
            store, work, tmp_path / "outside.txt")
        store.restore(first.id)
        expected = {made.id: store.manifest(made.id) for made in (first, second)}
        # A second instance that is never initialized, as `hankweave compare` has.
        reader = self.make_store(execution_dir)
        before = file_stats(execution_dir)
        assert reader.manifest(second.id) == expected[second.id]
        assert reader.manifest(first.id[:12]) == expected[first.id]
        assert reader.read_file(first.id, "change.txt") == b"old"
        assert reader.read_file(second.id, "change.txt") == b"new"
        assert file_stats(execution_dir) == before
        assert read_tree(work) == first_tree
        reader.close()

    def test_read_file_and_manifest_of_what_is_not_there_raise(self, store, work):
        write_tree(work, {"dir/a.txt": "a"})
        made = self.snap(store, "one")
        unknown = "f" * 40 if not made.id.startswith("f") else "0" * 40
        for missing in ("missing.txt", "dir", "dir/a.txt/deeper", ""):
            with pytest.raises(CheckpointNotFoundError):
                store.read_file(made.id, missing)
        with pytest.raises(CheckpointNotFoundError):
            store.read_file(unknown, "dir/a.txt")
        with pytest.raises(CheckpointNotFoundError):
            store.manifest(unknown)

    def test_manifest_of_a_checkpoint_of_20000_files(self, store, work):
        for folder in range(100):
            (work / f"d{folder}").mkdir()
        for number in range(20000):
            (work / f"d{number % 100}" / f"f{number}.txt").write_bytes(b"%d\n" % number)
        made = self.snap(store, "large")
        manifest = store.manifest(made.id)
        assert len(manifest) == 20000
        assert (manifest["d7/f1207.txt"].size, manifest["d7/f1207.txt"].executable) == (5, False)
        assert store.read_file(made.id, "d7/f1207.txt") == b"1207\n"

    # ----- forking (hankweave fork) -----

    def fork(self, source_dir: Path, target_dir: Path, keep: set[str]) -> CheckpointStore:
        """Fork as ``hankweave fork`` does, from an instance never initialized into a new
        execution directory; return the target's store (not yet initialized)."""
        (target_dir / "agentRoot").mkdir(parents=True)
        (target_dir / ".hankweave").mkdir()
        forker = self.make_store(source_dir)
        try:
            forker.fork_into(target_dir, keep)
        finally:
            forker.close()
        return self.make_store(target_dir)

    def history(self, store: CheckpointStore, work: Path) -> tuple[
            dict[str, Checkpoint], dict[str, dict[str, Any]]]:
        """Three checkpoints on two runs, by codon name, and the tree of each."""
        steps: list[tuple[str, str, Tree]] = [
            ("one", "r1", {"a.txt": "a1", "run.sh": Executable(b"#!/bin/sh\n"),
                           "link": Symlink("a.txt"), "dir/b.txt": "b1"}),
            ("two", "r2", {"a.txt": "a2", "dir/b.txt": None, "c.txt": "c"}),
            ("three", "r1", {"a.txt": "a3", "link": Symlink("c.txt")}),
        ]
        made: dict[str, Checkpoint] = {}
        trees: dict[str, dict[str, Any]] = {}
        for codon, run, files in steps:
            write_tree(work, files)
            made[codon] = self.snap(store, codon, run=run)
            trees[codon] = read_tree(work)
        return made, trees

    @staticmethod
    def store_contents(execution_dir: Path) -> dict[str, tuple[Any, ...]]:
        """Every file and link of the execution's checkpoint store, with its bytes."""
        root = execution_dir / ".hankweave" / "checkpoints"
        return read_tree(root) if root.exists() else {}

    def test_a_fork_holds_the_kept_checkpoints_under_the_same_ids(
            self, store, work, execution_dir, tmp_path):
        initial = store.initialize()
        made, trees = self.history(store, work)
        kept = {initial, made["one"].id, made["two"].id}
        source_before = file_stats(execution_dir)
        target = self.fork(execution_dir, tmp_path / "fork", kept)
        assert file_stats(execution_dir) == source_before
        try:
            assert target.initialize() == initial
            listed = {c.id: c for c in target.list()}
            for ident in kept:
                assert listed[ident] == target.resolve(ident) == store.resolve(ident)
                assert target.manifest(ident) == store.manifest(ident)
                ours = tmp_path / "ours" / ident
                theirs = tmp_path / "theirs" / ident
                assert target.materialize(ident, ours) == store.materialize(ident, theirs)
                assert read_tree(ours) == read_tree(theirs)
            fork_work = tmp_path / "fork" / "agentRoot"
            for codon in ("two", "one"):
                target.restore(made[codon].id)
                assert read_tree(fork_work) == trees[codon]
            target.restore(initial)
            assert read_tree(fork_work) == {}
        finally:
            target.close()

    def test_a_fork_and_its_source_never_change_each_other(
            self, store, work, execution_dir, tmp_path):
        initial = store.initialize()
        made, trees = self.history(store, work)
        kept = {initial, made["one"].id, made["two"].id}
        target = self.fork(execution_dir, tmp_path / "fork", kept)
        target.initialize()
        source_store, source_work = self.store_contents(execution_dir), read_tree(work)
        listed = store.list()

        # The fork goes its own way: restores, new checkpoints, a prune.
        fork_work = tmp_path / "fork" / "agentRoot"
        target.restore(made["one"].id)
        write_tree(fork_work, {"a.txt": "the fork's", "new.txt": "new"})
        self.snap(target, "fork-one", run="f1")
        target.restore(made["two"].id)
        self.snap(target, "fork-two", run="f1")
        target.prune(RetentionPolicy(keep_last_per_run=0, keep_ids=frozenset(kept)))
        assert self.store_contents(execution_dir) == source_store
        assert read_tree(work) == source_work and store.list() == listed

        # And the source goes its own: the fork's kept checkpoints stay whole.
        write_tree(work, {"a.txt": "the source's", "later.txt": "later"})
        self.snap(store, "later")
        store.restore(made["two"].id)
        store.prune(RetentionPolicy(keep_last_per_run=0, keep_ids=frozenset({initial})))
        for codon in ("one", "two"):
            target.restore(made[codon].id)
            assert read_tree(fork_work) == trees[codon]
        target.close()

    def test_a_fork_copies_what_the_file_system_cannot_link(
            self, store, work, execution_dir, tmp_path, monkeypatch):
        import errno

        initial = store.initialize()
        made, trees = self.history(store, work)

        def cross_device(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "link", cross_device)
        target = self.fork(execution_dir, tmp_path / "fork", {initial, made["two"].id})
        monkeypatch.undo()
        assert not self.shared_inodes(execution_dir, tmp_path / "fork")
        source_store = self.store_contents(execution_dir)
        assert target.initialize() == initial
        target.restore(made["two"].id)
        assert read_tree(tmp_path / "fork" / "agentRoot") == trees["two"]
        self.snap(target, "fork-one", run="f1")
        assert self.store_contents(execution_dir) == source_store
        target.close()

    @staticmethod
    def shared_inodes(one: Path, other: Path) -> set[tuple[int, int]]:
        """The files the two executions' checkpoint stores share (hard links)."""
        def inodes(execution_dir: Path) -> set[tuple[int, int]]:
            found = set()
            for dirpath, _, filenames in os.walk(execution_dir / ".hankweave" / "checkpoints"):
                for name in filenames:
                    st = os.lstat(os.path.join(dirpath, name))
                    found.add((st.st_dev, st.st_ino))
            return found

        return inodes(one) & inodes(other)

    def test_differing_files_lists_what_the_manifests_say_differs(
            self, store, work, execution_dir, tmp_path):
        """Within the store, against a fork of it (after each went on), and against a store
        of another backend (the default's manifest comparison): exactly the paths whose
        entries differ, each side's entry as its manifest lists it."""
        from hankweave.testing.memory_checkpoints import MemoryCheckpointStore

        initial = store.initialize()
        made, _ = self.history(store, work)
        fork = self.fork(execution_dir, tmp_path / "fork", {initial, made["two"].id})
        fork.initialize()
        fork.restore(made["two"].id)
        write_tree(tmp_path / "fork" / "agentRoot",
                   {"c.txt": "c, changed in the fork", "new/d.txt": "d", "a.txt": None})
        forked = self.snap(fork, "four", run="r3")
        other = MemoryCheckpointStore(tmp_path / "elsewhere")
        other.initialize()
        write_tree(other.work_tree, {"a.txt": "a3", "c.txt": "c", "x.txt": "x"})
        foreign = other.create(kind="completed", run_id="r9", codon_id="x", codon_name="x",
                               patterns=["**"])

        def expected(one: CheckpointStore, first: str, two: CheckpointStore, second: str
                     ) -> dict[str, tuple[Any, Any]]:
            mine, theirs = one.manifest(first), two.manifest(second)
            return {path: (mine.get(path), theirs.get(path))
                    for path in sorted(mine.keys() | theirs.keys())
                    if mine.get(path) != theirs.get(path)}

        for one, first, two, second in (
                (store, made["one"].id, store, made["three"].id),
                (store, made["three"].id, fork, forked.id),
                (fork, forked.id, store, made["two"].id)):
            found = one.differing_files(first, two, second)
            assert found == expected(one, first, two, second)
            assert found  # each pair differs somewhere
        assert store.differing_files(made["two"].id, fork, made["two"].id) == {}
        assert set(store.differing_files(made["three"].id, other, foreign.id)) >= {"x.txt"}
        fork.close()

    def test_a_fork_of_a_fork(self, store, work, execution_dir, tmp_path):
        initial = store.initialize()
        made, trees = self.history(store, work)
        first = self.fork(execution_dir, tmp_path / "first",
                          {initial, made["one"].id, made["two"].id})
        assert first.initialize() == initial
        first.restore(made["two"].id)
        write_tree(tmp_path / "first" / "agentRoot", {"x.txt": "x"})
        added = self.snap(first, "added", run="f1")
        added_tree = read_tree(tmp_path / "first" / "agentRoot")
        first.close()

        second = self.fork(tmp_path / "first", tmp_path / "second",
                           {initial, made["one"].id, added.id})
        assert second.initialize() == initial
        assert second.resolve(added.id) == added
        second_work = tmp_path / "second" / "agentRoot"
        second.restore(added.id)
        assert read_tree(second_work) == added_tree
        second.restore(made["one"].id)
        assert read_tree(second_work) == trees["one"]
        second.close()

    def test_forking_into_an_existing_store_is_refused(self, store, work, execution_dir,
                                                       tmp_path):
        initial = store.initialize()
        self.snap(store, "one")
        target_dir = tmp_path / "fork"
        (target_dir / "agentRoot").mkdir(parents=True)
        (target_dir / ".hankweave").mkdir()
        existing = self.make_store(target_dir)
        theirs = existing.initialize()
        listed = existing.list()
        existing.close()
        forker = self.make_store(execution_dir)
        with pytest.raises(CheckpointError):
            forker.fork_into(target_dir, {initial})
        forker.close()
        again = self.make_store(target_dir)
        assert again.initialize() == theirs and again.list() == listed
        again.close()

    def test_forking_an_unknown_checkpoint_is_refused(self, store, work, execution_dir,
                                                      tmp_path):
        initial = store.initialize()
        made = self.snap(store, "one")
        unknown = "f" * 40 if not made.id.startswith("f") else "0" * 40
        with pytest.raises(CheckpointError):
            self.fork(execution_dir, tmp_path / "fork", {initial, made.id, unknown})
        assert self.read_only_listing(self.make_store(tmp_path / "fork")) == []

    # ----- patterns -----

    def test_only_files_matching_the_patterns_are_captured(self, store, work):
        write_tree(work, {"notes/a.md": "a", "notes/b.txt": "b", "top.md": "t", "src/x.py": "x"})
        made = self.snap(store, "md", patterns=("**/*.md", "src"))
        write_tree(work, {"notes/a.md": "A2", "notes/b.txt": "B2", "top.md": None,
                          "src/x.py": None, "src/y.py": "y"})
        store.restore(made.id)
        tree = read_tree(work)
        assert tree["notes/a.md"][1] == b"a" and tree["top.md"][1] == b"t"
        assert tree["src/x.py"][1] == b"x" and "src/y.py" not in tree
        # Never covered by any pattern: the agent's own business, left as it is.
        assert tree["notes/b.txt"][1] == b"B2"

    def test_gitignored_files_are_not_captured(self, store, work):
        write_tree(work, {".gitignore": "*.log\nbuild/\n", "app.py": "a", "debug.log": "l1",
                          "build/out.bin": b"\x00"})
        made = self.snap(store, "ignored")
        write_tree(work, {"debug.log": "l2", "build/out.bin": b"\x01"})
        store.restore(made.id)
        tree = read_tree(work)
        assert tree["debug.log"][1] == b"l2" and tree["build/out.bin"][1] == b"\x01"

    def test_no_patterns_capture_nothing(self, store, work):
        write_tree(work, {"a.txt": "a"})
        made = self.snap(store, "none", patterns=())
        write_tree(work, {"a.txt": "changed"})
        store.restore(made.id)
        assert read_tree(work)["a.txt"][1] == b"changed"

    def test_a_file_no_longer_matching_later_patterns_is_recorded_as_deleted(self, store, work):
        write_tree(work, {"a.md": "a"})
        first = self.snap(store, "first", patterns=("*.md",))
        write_tree(work, {"a.md": None})
        second = self.snap(store, "second", patterns=("*.md",))
        assert store.changed_files(first.id, second.id) == [FileChange("a.md", "deleted")]
        write_tree(work, {"a.md": "came back"})
        store.restore(second.id)
        assert "a.md" not in read_tree(work)

    # ----- crashes -----

    def test_restore_and_create_work_after_a_crash_mid_create(self, store, work, execution_dir):
        write_tree(work, {"a.txt": "a"})
        good = self.snap(store, "good")
        expected = read_tree(work)
        write_tree(work, {"a.txt": "half-written", "b.txt": "b"})
        self.break_mid_create(store, execution_dir)
        store.close()

        reopened = self.make_store(execution_dir)
        reopened.initialize()
        assert good.id in {c.id for c in reopened.list()}
        reopened.restore(good.id)
        assert read_tree(work) == expected
        write_tree(work, {"c.txt": "c"})
        after = reopened.create(kind="completed", run_id="r1", codon_id="after",
                                codon_name="After", patterns=ALL)
        assert reopened.resolve(after.id).id == after.id
        reopened.close()

    # ----- retention -----

    def test_prune_keeps_the_last_n_per_run_and_everything_referenced(self, store, work):
        made = []
        for i in range(8):
            write_tree(work, {f"f{i}.txt": str(i) * 100})
            made.append((self.snap(store, f"c{i}"), read_tree(work)))
        referenced = made[2][0].id
        before = {c.id for c in store.list()}

        removed = store.prune(RetentionPolicy(keep_last_per_run=2,
                                              keep_ids=frozenset({referenced})))
        remaining = {c.id for c in store.list()}
        assert set(removed) | remaining == before and not set(removed) & remaining
        for checkpoint, tree in [made[2], made[6], made[7]]:
            assert checkpoint.id in remaining
            store.restore(checkpoint.id)
            assert read_tree(work) == tree
        for gone in removed:
            with pytest.raises(CheckpointNotFoundError):
                store.resolve(gone)
        assert any(c.kind == "initial" for c in store.list())

    def test_prune_with_nothing_to_remove_removes_nothing(self, store, work):
        self.snap(store, "only")
        assert store.prune(RetentionPolicy(keep_last_per_run=5)) == []


class CheckpointChangeContract(_StoreFixtures):
    """What the fast paths of a backend must keep: changes found in large trees, same-tick
    edits, kills mid-restore, and (for a backend that accepts them) change hints that never
    change what a checkpoint holds.  Subclass with ``store_class`` set, beside
    :class:`CheckpointStoreContract` (docs/checkpoints.md)."""

    @staticmethod
    def snap(store: CheckpointStore, codon: str = "c", *, changes: object = None,
             patterns: tuple[str, ...] = ALL) -> Checkpoint:
        extra: dict[str, Any] = {"changes": changes} if store.accepts_change_hints else {}
        return store.create(kind="completed", run_id="r1", codon_id=codon,
                            codon_name=f"Codon {codon}", patterns=patterns, **extra)

    @staticmethod
    def large_tree(work: Path, files: int = 3000) -> dict[str, str]:
        tree = {f"pkg{i % 7}/mod{i % 13}/f{i}.txt": f"content {i}\n" for i in range(files)}
        write_tree(work, tree)
        return tree

    def expect_tree(self, store: CheckpointStore, checkpoint: Checkpoint, tmp_path: Path,
                    expected: Tree) -> None:
        target = tmp_path / f"materialized-{checkpoint.id[:12]}"
        store.materialize(checkpoint.id, target)
        want = {rel: ("file", content.encode(), False) for rel, content in expected.items()}
        assert read_tree(target) == want

    # ----- large trees: the change is found, and only the change -----

    def test_one_change_in_a_large_tree(self, store, work, tmp_path):
        tree = self.large_tree(work)
        base = self.snap(store, "base")
        write_tree(work, {"pkg6/mod12/f1000.txt": "edited\n"})
        edited = self.snap(store, "edit")
        assert store.changed_files(base.id, edited.id) == [
            FileChange("pkg6/mod12/f1000.txt", "modified")]
        store.restore(base.id)
        assert read_tree(work)["pkg6/mod12/f1000.txt"] == ("file", tree["pkg6/mod12/f1000.txt"]
                                                          .encode(), False)
        store.restore(edited.id)
        assert (work / "pkg6/mod12/f1000.txt").read_text() == "edited\n"

    def test_a_rename_in_a_large_tree(self, store, work):
        self.large_tree(work)
        base = self.snap(store, "base")
        (work / "pkg1/mod1/f1.txt").rename(work / "pkg2/renamed.txt")
        moved = self.snap(store, "moved")
        assert store.changed_files(base.id, moved.id) == [
            FileChange("pkg1/mod1/f1.txt", "deleted"), FileChange("pkg2/renamed.txt", "added")]
        store.restore(base.id)
        assert (work / "pkg1/mod1/f1.txt").read_text() == "content 1\n"
        assert not (work / "pkg2/renamed.txt").exists()

    def test_a_deletion_in_a_large_tree(self, store, work):
        self.large_tree(work)
        base = self.snap(store, "base")
        (work / "pkg4/mod4/f4.txt").unlink()
        gone = self.snap(store, "gone")
        assert store.changed_files(base.id, gone.id) == [
            FileChange("pkg4/mod4/f4.txt", "deleted")]
        assert "pkg4/mod4/f4.txt" not in store.files(gone.id)
        store.restore(base.id)
        assert (work / "pkg4/mod4/f4.txt").read_text() == "content 4\n"

    def test_a_change_in_the_same_timestamp_tick_is_captured(self, store, work):
        """Same size, and the mtime put back to the nanosecond: only the ctime differs, as
        when a file is rewritten within one tick of a coarse clock."""
        write_tree(work, {"a.txt": "aaaa"})
        first = self.snap(store, "first")
        before = os.stat(work / "a.txt")
        for content, codon in (("bbbb", "second"), ("cccc", "third")):
            (work / "a.txt").write_text(content)
            os.utime(work / "a.txt", ns=(before.st_atime_ns, before.st_mtime_ns))
            made = self.snap(store, codon)
            store.restore(first.id)
            assert (work / "a.txt").read_text() == "aaaa"
            store.restore(made.id)
            assert (work / "a.txt").read_text() == content

    def test_restore_completes_after_a_kill_mid_restore(self, store, work, execution_dir):
        import subprocess
        import sys

        tree = self.large_tree(work, 300)
        base = self.snap(store, "base")
        write_tree(work, {"pkg1/mod1/f1.txt": "edited\n", "new/file.txt": "new\n",
                          "pkg2/mod2/f2.txt": None})
        self.snap(store, "edited")
        cls = type(store)
        script = (f"import sys; from pathlib import Path; from {cls.__module__} import "
                  f"{cls.__qualname__} as S; s = S(Path(sys.argv[1])); s.initialize(); "
                  f"s.restore(sys.argv[2])")
        env = {**os.environ, "HANKWEAVE_TEST_KILL_AT": "checkpoint.restore"}
        done = subprocess.run([sys.executable, "-c", script, str(execution_dir), base.id],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == -9, done.stderr
        reopened = self.make_store(execution_dir)
        reopened.initialize()
        reopened.restore(base.id)
        reopened.close()
        assert read_tree(work) == {rel: ("file", text.encode(), False)
                                   for rel, text in tree.items()}

    # ----- change hints -----

    @pytest.fixture
    def watcher(self, store, work):
        from hankweave.workspace_watch import WorkspaceWatcher

        if not store.accepts_change_hints:
            pytest.skip(f"the {store.name} backend takes no change hints")
        watcher = WorkspaceWatcher.start(work)
        if watcher is None:
            pytest.skip("no workspace watcher on this platform")
        yield watcher
        watcher.close()

    def scanned_files(self, execution_dir: Path, tmp_path: Path) -> dict[str, tuple[Any, ...]]:
        """What a fresh store (no hint to follow) captures of the work tree now."""
        fresh = self.make_store(execution_dir)
        fresh.initialize()
        made = fresh.create(kind="completed", run_id="scan", codon_id="scan",
                            codon_name="scan", patterns=ALL)
        target = tmp_path / f"scanned-{made.id[:12]}"
        fresh.materialize(made.id, target)
        fresh.close()
        return read_tree(target)

    def captured(self, store: CheckpointStore, made: Checkpoint,
                 tmp_path: Path) -> dict[str, tuple[Any, ...]]:
        target = tmp_path / f"hinted-{made.id[:12]}"
        store.materialize(made.id, target)
        return read_tree(target)

    def test_hinted_checkpoints_hold_what_a_scan_holds(self, store, work, watcher,
                                                       execution_dir, tmp_path):
        self.large_tree(work, 400)
        self.snap(store, "base", changes=watcher.drain())
        steps: list[Tree] = [
            {"pkg1/mod1/f1.txt": "edited\n", "pkg2/mod2/f2.txt": None},
            {"brand/new/dir/file.txt": "new\n", "brand/new/other.txt": "other\n"},
            {"pkg3/mod3/f3.txt": Executable(b"#!/bin/sh\n"), "link": Symlink("pkg1")},
            {"pkg4/mod4/f4.txt": "same size\n"},
        ]
        for number, step in enumerate(steps):
            write_tree(work, step)
            made = self.snap(store, f"step{number}", changes=watcher.drain())
            assert self.captured(store, made, tmp_path) == self.scanned_files(
                execution_dir, tmp_path), step
        # Directories moved, removed, and replaced by a file of the same name.
        (work / "pkg5").rename(work / "pkg5-moved")
        import shutil

        shutil.rmtree(work / "pkg6")
        shutil.rmtree(work / "brand" / "new" / "dir")
        (work / "brand" / "new" / "dir").write_text("a file now\n")
        made = self.snap(store, "moves", changes=watcher.drain())
        assert self.captured(store, made, tmp_path) == self.scanned_files(execution_dir, tmp_path)

    def test_a_change_behind_the_watchers_back_is_captured(self, store, work, watcher,
                                                           tmp_path):
        from hankweave.checkpoints import ChangeHint

        self.large_tree(work, 200)
        self.snap(store, "base", changes=watcher.drain())
        cases = {
            "lost events": lambda hint: ChangeHint(hint.watcher, hint.since, hint.until,
                                                   frozenset(), complete=False),
            "another watcher": lambda hint: ChangeHint("elsewhere", hint.since, hint.until,
                                                       frozenset(), complete=True),
            "a gap": lambda hint: ChangeHint(hint.watcher, hint.since + 5, hint.until + 5,
                                             frozenset(), complete=True),
            "no hint": lambda hint: None,
        }
        for number, (case, tamper) in enumerate(cases.items()):
            rel = f"pkg{number}/mod{number}/f{number}.txt"
            write_tree(work, {rel: f"behind the watcher's back: {case}\n"})
            real = watcher.drain()
            made = self.snap(store, f"case{number}", changes=tamper(real))
            held = self.captured(store, made, tmp_path)
            assert held[rel][1] == f"behind the watcher's back: {case}\n".encode(), case
            self.snap(store, f"resync{number}", changes=watcher.drain())

    def test_a_distrusted_interval_and_an_ignore_file_change_are_scanned(
            self, store, work, watcher, execution_dir, tmp_path):
        self.large_tree(work, 200)
        self.snap(store, "base", changes=watcher.drain())
        watcher.distrust()  # as the runtime does before rig setup commands
        write_tree(work, {"pkg1/mod1/f1.txt": "during the rig\n"})
        made = self.snap(store, "rig", changes=watcher.drain())
        assert self.captured(store, made, tmp_path)["pkg1/mod1/f1.txt"][1] == b"during the rig\n"
        write_tree(work, {".gitignore": "pkg2/\n"})
        made = self.snap(store, "ignore", changes=watcher.drain())
        held = self.captured(store, made, tmp_path)
        assert not any(path.startswith("pkg2/") for path in held)
        assert held == self.scanned_files(execution_dir, tmp_path)

    def test_a_hinted_restore_puts_back_what_a_scanning_restore_does(
            self, store, work, watcher, tmp_path):
        from hankweave.checkpoints import ChangeHint

        tree = self.large_tree(work, 300)
        base = self.snap(store, "base", changes=watcher.drain())
        write_tree(work, {"pkg1/mod1/f1.txt": "edited\n", "pkg2/mod2/f2.txt": None,
                          "fresh/file.txt": "fresh\n"})
        edited = self.snap(store, "edited", changes=watcher.drain())
        edited_tree = read_tree(work)
        write_tree(work, {"pkg3/mod3/f3.txt": "after the checkpoint\n",
                          "pkg1/mod1/f1.txt": "again\n"})
        store.restore(base.id, changes=watcher.drain())
        assert read_tree(work) == {rel: ("file", text.encode(), False)
                                   for rel, text in tree.items()}
        # A hint that cannot be followed (events were lost): every file is looked at.
        store.restore(edited.id, changes=watcher.drain())
        self.snap(store, "resync", changes=watcher.drain())
        write_tree(work, {"pkg4/mod4/f4.txt": "behind the watcher's back\n"})
        real = watcher.drain()
        store.restore(edited.id, changes=ChangeHint(real.watcher, real.since, real.until,
                                                    frozenset(), complete=False))
        assert read_tree(work) == edited_tree
