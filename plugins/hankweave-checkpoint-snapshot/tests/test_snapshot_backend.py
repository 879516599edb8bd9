"""The snapshot backend: the checkpoint contract, plus what is specific to a file store."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import hankweave_checkpoint_snapshot as snapshot
import hankweave_checkpoint_snapshot_plugin as snapshot_plugin
import pytest
from hankweave_checkpoint_snapshot import SnapshotCheckpointStore, objects
from hankweave_checkpoint_snapshot.formats import MAX_DELTA_CHAIN, canonical_json, manifest_id
from hankweave_checkpoint_snapshot.worktree import WorkTree

from hankweave.api import (
    CheckpointStorageError,
    CheckpointStore,
    FileChange,
    RetentionPolicy,
)
from hankweave.testing.checkpoints import (
    ALL,
    CheckpointChangeContract,
    CheckpointStoreContract,
    Executable,
    Symlink,
    read_tree,
    watched_store,
    write_tree,
)

KILL_CREATE = Path(__file__).with_name("kill_create.py")
KILL_POINTS = ("object-write", "before-manifest", "manifest-write", "after-manifest")


def kill_create(execution_dir: Path, point: str) -> None:
    """Run create() in another process and SIGKILL it at ``point`` (see kill_create.py)."""
    done = subprocess.run([sys.executable, str(KILL_CREATE), str(execution_dir), point],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr


def store_dir(execution_dir: Path) -> Path:
    return execution_dir / ".hankweave" / "checkpoints" / "snapshot"


def object_files(execution_dir: Path) -> set[str]:
    objects = store_dir(execution_dir) / "objects"
    return {f"{fan.name}{obj.name}" for fan in objects.iterdir() for obj in fan.iterdir()}


def object_path(execution_dir: Path, digest: str) -> Path:
    return store_dir(execution_dir) / "objects" / digest[:2] / digest[2:]


def leftovers(execution_dir: Path) -> list[str]:
    root = store_dir(execution_dir)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp" in p.name)


def tree_of(store: SnapshotCheckpointStore, checkpoint_id: str) -> dict:
    manifest = store._manifest(checkpoint_id)
    return store._tree(manifest.tree, manifest.id)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
class TestSnapshotBackendContract(CheckpointStoreContract):
    store_class = SnapshotCheckpointStore

    def break_mid_create(self, store: CheckpointStore, execution_dir: Path) -> None:
        # Every way a killed create() can leave the store, one after the other: a torn object
        # temp file, durable objects without a manifest, a torn temp manifest, and a complete
        # manifest whose stat cache was never saved.
        for point in KILL_POINTS:
            kill_create(execution_dir, point)
        assert leftovers(execution_dir)


@pytest.fixture
def execution_dir(tmp_path: Path) -> Path:
    execution_dir = tmp_path / "exec"
    (execution_dir / "agentRoot").mkdir(parents=True)
    (execution_dir / ".hankweave").mkdir()
    return execution_dir


@pytest.fixture
def work(execution_dir: Path) -> Path:
    return execution_dir / "agentRoot"


@pytest.fixture
def store(execution_dir: Path):
    store = SnapshotCheckpointStore(execution_dir)
    store.initialize()
    yield store
    store.close()


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust every file to the stat cache at once, whatever clock tick it was written in."""
    monkeypatch.setattr(SnapshotCheckpointStore, "_trusted_before", lambda self: 2**62)


def snap(store: CheckpointStore, codon: str = "c", *, run: str = "r1",
         patterns: tuple[str, ...] = ALL):
    return store.create(kind="completed", run_id=run, codon_id=codon,
                        codon_name=f"Codon {codon}", patterns=patterns)


class HashCounter:
    """Counts the work-tree files the store reads to hash."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        real = SnapshotCheckpointStore._store_file

        def counting(store: SnapshotCheckpointStore, full: str):
            self.paths.append(os.path.relpath(full, store.work_tree))
            return real(store, full)

        monkeypatch.setattr(SnapshotCheckpointStore, "_store_file", counting)


# ----- layout, ids and manifests -----


def test_ids_are_40_hex_and_differ_for_identical_checkpoints(store, work):
    write_tree(work, {"a.txt": "a"})
    first, second = snap(store, "same"), snap(store, "same")
    assert re.fullmatch(r"[0-9a-f]{40}", first.id) and re.fullmatch(r"[0-9a-f]{40}", second.id)
    assert first.id != second.id
    assert tree_of(store, first.id) is tree_of(store, second.id)  # one tree object, shared


def test_a_manifest_records_its_checkpoint(store, work, execution_dir):
    write_tree(work, {"a.txt": "hello", "run.sh": b"#!/bin/sh\n", "link": Symlink("a.txt")})
    (work / "run.sh").chmod(0o755)
    made = store.create(kind="rig-setup", run_id="r1", codon_id="plan", codon_name="Plan",
                        patterns=("**",), duration_ms=1234)
    raw = json.loads((store_dir(execution_dir) / "manifests" / f"{made.id}.json").read_text())
    assert raw["id"] == made.id and raw["kind"] == "rig-setup" and raw["branch"] == "run-r1"
    assert (raw["run_id"], raw["codon_id"], raw["codon_name"]) == ("r1", "plan", "Plan")
    assert raw["message"] == made.message and "Duration: 1234ms" in raw["message"]
    assert raw["patterns"] == ["**"] and raw["files"] == 3 and raw["size"] == 15
    assert raw["sequence"] == 1 and raw["parent"] == store.list(kind="initial")[0].id
    tree = tree_of(store, made.id)
    assert tree["run.sh"].executable and not tree["a.txt"].executable
    assert tree["link"] == snapshot.SymlinkEntry(target="a.txt")


def test_the_initial_checkpoint_is_empty_and_on_main(store, work):
    (initial,) = store.list()
    assert (initial.kind, initial.branch, initial.run_id, initial.codon_id) == (
        "initial", "main", None, None)
    assert tree_of(store, initial.id) == {}


def test_a_new_run_forks_from_the_checkpoint_a_restore_made_current(store, work):
    a = snap(store, "a", run="r1")
    b = snap(store, "b", run="r1")
    assert store._manifest(b.id).parent == a.id
    store.restore(a.id)
    c = snap(store, "c", run="r2")
    assert store._manifest(c.id).parent == a.id
    d = snap(store, "d", run="r2")
    assert store._manifest(d.id).parent == c.id


def test_the_current_checkpoint_survives_a_reopen(store, work, execution_dir):
    a = snap(store, "a", run="r1")
    snap(store, "b", run="r1")
    store.restore(a.id)
    reopened = SnapshotCheckpointStore(execution_dir)
    reopened.initialize()
    assert reopened._manifest(snap(reopened, "c", run="r2").id).parent == a.id


# ----- deduplication and the stat cache -----


def test_identical_content_is_stored_once(store, work, execution_dir):
    before = object_files(execution_dir)
    write_tree(work, {"one.bin": b"x" * 5000, "dir/two.bin": b"x" * 5000, "three.bin": b"y"})
    snap(store, "first")
    snap(store, "second")
    added = object_files(execution_dir) - before
    # Two contents and one tree, however many files and checkpoints hold them.
    assert len(added) == 3


def test_unchanged_files_are_not_read_again(store, work, settled, monkeypatch):
    write_tree(work, {f"f{i}.txt": str(i) for i in range(20)})
    counter = HashCounter(monkeypatch)
    snap(store, "first")
    assert len(counter.paths) == 20
    counter.paths.clear()
    write_tree(work, {"f3.txt": "changed", "new.txt": "new"})
    second = snap(store, "second")
    assert sorted(counter.paths) == ["f3.txt", "new.txt"]
    assert tree_of(store, second.id)["f3.txt"].size == len("changed")


def test_the_stat_cache_survives_a_reopen(store, work, execution_dir, settled, monkeypatch):
    write_tree(work, {f"f{i}.txt": str(i) for i in range(5)})
    snap(store, "first")
    store.close()
    counter = HashCounter(monkeypatch)
    reopened = SnapshotCheckpointStore(execution_dir)
    reopened.initialize()
    snap(reopened, "second")
    assert counter.paths == []


def test_a_file_rewritten_with_the_same_size_and_mtime_is_still_seen(store, work, settled):
    write_tree(work, {"a.txt": "one"})
    first = snap(store, "first")
    before = os.stat(work / "a.txt")
    (work / "a.txt").write_text("two")
    os.utime(work / "a.txt", ns=(before.st_atime_ns, before.st_mtime_ns))
    second = snap(store, "second")
    assert store.changed_files(first.id, second.id) == [FileChange("a.txt", "modified")]


def test_the_racy_clock_is_the_file_systems_own(store, work):
    write_tree(work, {"before.txt": "b"})
    clock = store._trusted_before()
    write_tree(work, {"after.txt": "a"})
    assert os.stat(work / "before.txt").st_ctime_ns <= clock
    assert os.stat(work / "after.txt").st_ctime_ns >= clock


def test_a_file_changed_in_the_clock_tick_of_the_scan_is_hashed_again(
        store, work, monkeypatch):
    write_tree(work, {"old.txt": "o"})
    old_tick = os.stat(work / "old.txt").st_ctime_ns
    deadline = time.monotonic() + 5
    while True:  # write racy.txt in a later clock tick than old.txt
        write_tree(work, {"racy.txt": "r"})
        racy_tick = os.stat(work / "racy.txt").st_ctime_ns
        if racy_tick > old_tick or time.monotonic() > deadline:
            break
        time.sleep(0.001)
    assert racy_tick > old_tick
    # As if the scan began in the very tick racy.txt was written.
    monkeypatch.setattr(SnapshotCheckpointStore, "_trusted_before", lambda self: racy_tick)
    snap(store, "first")
    counter = HashCounter(monkeypatch)
    snap(store, "second")
    assert counter.paths == ["racy.txt"]


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"format": "other"}',
                                    b'{"format": "hankweave-snapshot-stat-cache/1", "entries": '
                                    b'{"a.txt": [1, 2, 3, 4, "nothex"]}}'])
def test_a_missing_or_broken_stat_cache_is_rebuilt(store, work, execution_dir, settled, damage):
    write_tree(work, {"a.txt": "a", "b.txt": "b"})
    snap(store, "first")
    store.close()
    (store_dir(execution_dir) / "stat-cache.json").write_bytes(damage)
    write_tree(work, {"a.txt": "A"})
    reopened = SnapshotCheckpointStore(execution_dir)
    reopened.initialize()
    made = snap(reopened, "second")
    write_tree(work, {"a.txt": "changed again"})
    reopened.restore(made.id)
    assert read_tree(work)["a.txt"] == ("file", b"A", False)


def test_a_cached_object_that_disappeared_is_stored_again(store, work, execution_dir, settled):
    write_tree(work, {"a.txt": "precious"})
    first = snap(store, "first")
    digest = tree_of(store, first.id)["a.txt"].hash
    store.close()
    object_path(execution_dir, digest).unlink()
    reopened = SnapshotCheckpointStore(execution_dir)
    reopened.initialize()
    second = snap(reopened, "second")
    assert object_path(execution_dir, digest).read_bytes() == b"precious"
    write_tree(work, {"a.txt": None})
    reopened.restore(second.id)
    assert (work / "a.txt").read_bytes() == b"precious"


# ----- restore -----


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_damaged_object_fails_the_restore_before_anything_changes(
        store, work, execution_dir, damage):
    write_tree(work, {"a.txt": "a1", "b.txt": "b1", "c.txt": "c1"})
    first = snap(store, "first")
    write_tree(work, {"a.txt": "a2", "b.txt": "b2", "c.txt": None, "d.txt": "d"})
    snap(store, "second")
    before = read_tree(work)
    damaged = object_path(execution_dir, tree_of(store, first.id)["b.txt"].hash)
    if damage == "corrupt":
        damaged.write_bytes(b"bit rot")
    else:
        damaged.unlink()

    with pytest.raises(CheckpointStorageError, match=rf"b\.txt.*is {damage}"):
        store.restore(first.id)
    assert read_tree(work) == before


def test_a_corrupt_tree_is_reported(store, work, execution_dir):
    write_tree(work, {"a.txt": "a"})
    made = snap(store, "first")
    store.close()
    object_path(execution_dir, store._manifest(made.id).tree).write_bytes(b"{}")
    reopened = SnapshotCheckpointStore(execution_dir)
    with pytest.raises(CheckpointStorageError, match=r"file list.*corrupt"):
        reopened.restore(made.id)


def test_restore_only_writes_what_differs(store, work, monkeypatch):
    write_tree(work, {f"f{i}.txt": str(i) for i in range(10)})
    (work / "f7.txt").chmod(0o755)
    first = snap(store, "first")
    write_tree(work, {"f4.txt": "changed"})
    (work / "f7.txt").chmod(0o644)
    snap(store, "second")
    written: list[str] = []
    real = WorkTree.write_file
    monkeypatch.setattr(WorkTree, "write_file",
                        lambda self, path, *args: (written.append(path), real(self, path, *args)))
    store.restore(first.id)
    assert written == ["f4.txt"] and (work / "f4.txt").read_text() == "4"
    assert os.access(work / "f7.txt", os.X_OK)  # a mode change is a chmod, not a rewrite


def test_restore_never_writes_or_deletes_through_a_symlinked_directory(store, work, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("not yours")
    write_tree(work, {"sub/x.txt": "mine"})
    first = snap(store, "first")
    write_tree(work, {"sub/x.txt": None})
    (work / "sub").rmdir()
    os.symlink(outside, work / "sub")
    snap(store, "second")  # holds "sub" as a link
    store.restore(first.id)
    assert (outside / "x.txt").read_text() == "not yours"
    assert not (work / "sub").is_symlink() and (work / "sub" / "x.txt").read_text() == "mine"


def test_restore_replaces_a_hard_linked_file_instead_of_writing_through_it(
        store, work, tmp_path):
    write_tree(work, {"a.txt": "checkpointed"})
    made = snap(store, "first")
    write_tree(work, {"a.txt": "agent's version"})
    os.link(work / "a.txt", tmp_path / "shared-with-a.txt")
    store.restore(made.id)
    assert (work / "a.txt").read_text() == "checkpointed"
    assert (tmp_path / "shared-with-a.txt").read_text() == "agent's version"


def test_a_rewritten_file_gets_the_checkpointed_executable_bit(store, work):
    write_tree(work, {"tool": Executable(b"#!/bin/sh\necho v1\n"), "notes.txt": "v1"})
    made = snap(store, "first")
    write_tree(work, {"tool": "plain now", "notes.txt": Executable(b"executable now")})
    store.restore(made.id)
    assert read_tree(work) == {"tool": ("file", b"#!/bin/sh\necho v1\n", True),
                               "notes.txt": ("file", b"v1", False)}


def test_a_tree_whose_paths_leave_the_work_tree_is_refused(store, work, execution_dir, tmp_path):
    victim = tmp_path / "victim.txt"
    made = snap(store, "first")
    evil = {"../victim.txt": {"type": "symlink", "target": "x"}}
    manifest = store._manifest(made.id)
    tree = store._put_bytes(canonical_json(evil))
    store._sync_objects()
    fields = manifest.model_dump() | {"tree": tree, "nonce": "evil"}
    fields["id"] = manifest_id(fields)
    (store_dir(execution_dir) / "manifests" / f"{fields['id']}.json").write_text(
        json.dumps(fields))
    reopened = SnapshotCheckpointStore(execution_dir)
    with pytest.raises(CheckpointStorageError, match="cannot be restored"):
        reopened.restore(fields["id"])
    assert not victim.exists() and not victim.is_symlink()


def test_a_tampered_manifest_is_reported_not_ignored(store, work, execution_dir):
    made = snap(store, "first")
    path = store_dir(execution_dir) / "manifests" / f"{made.id}.json"
    path.write_text(path.read_text().replace('"completed"', '"error"'))
    with pytest.raises(CheckpointStorageError, match="does not match its id"):
        SnapshotCheckpointStore(execution_dir).list()


@pytest.mark.skipif(sys.platform == "darwin", reason="APFS refuses names that are not UTF-8")
def test_a_file_name_that_is_not_utf8_round_trips(store, work):
    name = os.fsdecode(b"caf\xe9.txt")
    (work / name).write_bytes(b"latin-1 name")
    made = snap(store, "bytes")
    (work / name).unlink()
    store.restore(made.id)
    assert (work / name).read_bytes() == b"latin-1 name"


def test_a_large_file_is_streamed_and_round_trips(store, work, monkeypatch):
    monkeypatch.setattr(objects, "SMALL_FILE_BYTES", 1000)
    monkeypatch.setattr(objects, "CHUNK_BYTES", 300)
    big = os.urandom(5000)
    write_tree(work, {"big.bin": big})
    made = snap(store, "big")
    write_tree(work, {"big.bin": b"small now"})
    store.restore(made.id)
    assert (work / "big.bin").read_bytes() == big


# ----- materialize -----


def store_contents(execution_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the store with its bytes and modification time."""
    root = store_dir(execution_dir)
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def test_materialize_reads_the_store_and_changes_nothing_in_it(
        store, work, execution_dir, tmp_path):
    write_tree(work, {"a.txt": "a1", "run.sh": Executable(b"#!/bin/sh\n")})
    first = snap(store, "first")
    write_tree(work, {"a.txt": "a2", "b.txt": "b"})
    snap(store, "second")
    store.restore(first.id)  # writes refs.json: materialize must not move it
    before = store_contents(execution_dir)
    work_before = read_tree(work)

    store.materialize(first.id, tmp_path / "out")
    assert store_contents(execution_dir) == before
    assert read_tree(work) == work_before
    assert read_tree(tmp_path / "out") == work_before


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_damaged_object_fails_materialize_before_anything_is_written(
        store, work, execution_dir, tmp_path, damage):
    write_tree(work, {"a.txt": "a", "b.txt": "b"})
    made = snap(store, "first")
    damaged = object_path(execution_dir, tree_of(store, made.id)["b.txt"].hash)
    if damage == "corrupt":
        damaged.write_bytes(b"bit rot")
    else:
        damaged.unlink()
    with pytest.raises(CheckpointStorageError, match=rf"b\.txt.*is {damage}"):
        store.materialize(made.id, tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointStorageError):
        store.materialize(made.id, tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_failure_while_writing_removes_what_materialize_wrote(
        store, work, tmp_path, monkeypatch):
    write_tree(work, {"a.txt": "a", "b/c.txt": "c", "d.txt": "d"})
    made = snap(store, "first")
    real = WorkTree.write_file

    def fail_on_d(self, path, executable, content):
        if path == "d.txt":
            raise OSError(28, "No space left on device")
        real(self, path, executable, content)

    monkeypatch.setattr(WorkTree, "write_file", fail_on_d)
    (tmp_path / "existing").mkdir()
    with pytest.raises(CheckpointStorageError, match="No space left"):
        store.materialize(made.id, tmp_path / "existing")
    assert list((tmp_path / "existing").iterdir()) == []
    with pytest.raises(CheckpointStorageError, match="No space left"):
        store.materialize(made.id, tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()


def test_materialize_streams_large_files_and_odd_names(store, work, tmp_path, monkeypatch):
    monkeypatch.setattr(objects, "SMALL_FILE_BYTES", 1000)
    monkeypatch.setattr(objects, "CHUNK_BYTES", 300)
    big = os.urandom(5000)
    name = os.fsdecode(b"caf\xe9.txt")
    write_tree(work, {"big.bin": big, name: "latin-1 name"})
    made = snap(store, "big")
    assert store.materialize(made.id, tmp_path / "out") == sorted(["big.bin", name])
    assert (tmp_path / "out" / "big.bin").read_bytes() == big
    assert (tmp_path / "out" / name).read_bytes() == b"latin-1 name"


# ----- crashes -----


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_killed_create_never_leaves_a_partial_checkpoint(execution_dir, work, point):
    store = SnapshotCheckpointStore(execution_dir)
    store.initialize()
    write_tree(work, {"a.txt": "a"})
    good = snap(store, "good")
    store.close()
    write_tree(work, {"a.txt": "new", "b.txt": "b"})

    kill_create(execution_dir, point)

    reopened = SnapshotCheckpointStore(execution_dir)
    reopened.initialize()
    assert leftovers(execution_dir) == []
    listed = reopened.list()
    if point == "after-manifest":
        # The manifest was complete: a whole checkpoint the runtime never heard of.
        assert [c.codon_id for c in listed] == ["killed", "good", None]
        assert sorted(tree_of(reopened, listed[0].id)) == ["a.txt", "b.txt"]
    else:
        assert [c.id for c in listed][:1] == [good.id]
    reopened.restore(good.id)
    assert read_tree(work) == {"a.txt": ("file", b"a", False)}


def test_objects_of_a_killed_create_are_collected_by_the_next_prune(execution_dir, work):
    store = SnapshotCheckpointStore(execution_dir)
    store.initialize()
    store.close()
    before = object_files(execution_dir)
    write_tree(work, {"orphan.txt": "never checkpointed"})
    kill_create(execution_dir, "before-manifest")
    assert object_files(execution_dir) > before

    reopened = SnapshotCheckpointStore(execution_dir)
    reopened.initialize()
    assert reopened.prune(RetentionPolicy()) == []
    assert object_files(execution_dir) == before


def test_initialize_leaves_the_temp_files_of_a_live_process_alone(store, execution_dir):
    live = store_dir(execution_dir) / "tmp" / f"{os.getppid()}-1.tmp"
    dead = store_dir(execution_dir) / "tmp" / "999999999-1.tmp"
    live.write_bytes(b"being written")
    dead.write_bytes(b"abandoned")
    SnapshotCheckpointStore(execution_dir).initialize()
    assert live.exists() and not dead.exists()


# ----- retention -----


def test_prune_collects_the_objects_only_pruned_checkpoints_held(store, work, execution_dir):
    write_tree(work, {"shared.txt": "kept all along"})
    made = []
    for i in range(4):
        write_tree(work, {"v.txt": f"version {i}"})
        made.append(snap(store, f"c{i}"))
    hashes = [tree_of(store, c.id)["v.txt"].hash for c in made]
    shared = tree_of(store, made[0].id)["shared.txt"].hash
    trees = [store._manifest(c.id).tree for c in made]

    removed = store.prune(RetentionPolicy(keep_last_per_run=1, keep_ids=frozenset({made[1].id})))

    assert removed == [made[2].id, made[0].id]
    present = object_files(execution_dir)
    assert {hashes[1], hashes[3], shared, trees[1], trees[3]} <= present
    assert not {hashes[0], hashes[2], trees[0], trees[2]} & present
    store.restore(made[1].id)
    assert (work / "v.txt").read_text() == "version 1"


def test_prune_forgets_cached_hashes_of_collected_objects(store, work, execution_dir, settled):
    write_tree(work, {"a.txt": "first content"})
    first = snap(store, "first")
    write_tree(work, {"a.txt": None})
    snap(store, "second")
    write_tree(work, {"a.txt": "first content"})  # back, with a new stat
    store.restore(first.id)
    digest = tree_of(store, first.id)["a.txt"].hash
    store.prune(RetentionPolicy(keep_last_per_run=1))  # "first" goes, and its object
    assert digest not in object_files(execution_dir)
    third = snap(store, "third")  # must store a.txt again, not trust the cache
    assert object_path(execution_dir, digest).exists()
    write_tree(work, {"a.txt": None})
    store.restore(third.id)
    assert (work / "a.txt").read_text() == "first content"


def test_prune_keeps_each_run_separately(store, work):
    r1 = [snap(store, f"a{i}", run="r1") for i in range(3)]
    r2 = [snap(store, f"b{i}", run="r2") for i in range(3)]
    removed = store.prune(RetentionPolicy(keep_last_per_run=2))
    assert set(removed) == {r1[0].id, r2[0].id}


# ----- the plugin -----


def test_the_plugin_registers_the_snapshot_backend():
    from hankweave.api import Registry, make_plugin_manager

    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(snapshot_plugin, name="checkpoint-snapshot")
    registry = Registry(pm)
    assert registry.checkpoint_backends() == {"snapshot": SnapshotCheckpointStore}
    assert registry.registered_by("checkpoint backend", "snapshot") == "checkpoint-snapshot"


def test_the_distribution_exposes_the_plugin_entry_point():
    from importlib.metadata import entry_points

    (entry,) = [ep for ep in entry_points(group="hankweave") if ep.name == "checkpoint-snapshot"]
    assert entry.load() is snapshot_plugin


def test_loading_the_entry_point_leaves_the_backend_and_pydantic_unimported():
    """Every start of hankweave loads the entry point (--help included): it stays light."""
    code = ("import sys, hankweave_checkpoint_snapshot_plugin\n"
            "print([m for m in ('hankweave_checkpoint_snapshot', 'pydantic') if m in sys.modules])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_importing_the_plugin_builds_no_validator_and_no_thread_pool():
    """Every start of hankweave imports the plugin (--help included): that must stay cheap."""
    code = ("import sys, hankweave_checkpoint_snapshot as plugin\n"
            "print(plugin.Manifest.__pydantic_complete__, plugin.formats.TREE.pydantic_complete,\n"
            "      'concurrent.futures' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False", "False", "False"]


class TestSnapshotCheckpointChanges(CheckpointChangeContract):
    store_class = SnapshotCheckpointStore


def test_the_tree_text_kept_between_checkpoints_is_the_canonical_json():
    from hankweave_checkpoint_snapshot.formats import canonical_json as _canonical_json
    from hankweave_checkpoint_snapshot.treetext import TreeText as _TreeText

    rng = random.Random(7)
    names = ["a", "a.b", "a/b", "a-b", "ü/ß.txt", "\udcff-undecodable", "Z", "z/0", "z/"]
    text = _TreeText()
    entries: dict = {}
    for step in range(300):
        changed = set()
        for _ in range(rng.randrange(1, 4)):
            path = "/".join(rng.sample(names, rng.randrange(1, 3)))
            changed.add(path)
            if rng.random() < 0.2:
                entries.pop(path, None)
            elif rng.random() < 0.3:
                entries[path] = {"type": "symlink", "target": rng.choice(names)}
            else:
                entries[path] = {"type": "file", "hash": f"{rng.randrange(16 ** 8):064x}",
                                 "size": rng.randrange(10), "executable": rng.random() < 0.5}
        # Every few steps from scratch (after a scan), otherwise only the changed entries.
        rendered = text.render(entries, None if step % 7 == 0 else changed)
        assert rendered == _canonical_json(entries)
        assert text.size == sum(entry.get("size", 0) for entry in entries.values())
        prefix = rng.choice(names)
        assert text.under(prefix) == sorted(
            p for p in entries if p == prefix or p.startswith(prefix + "/"))


def test_a_trusted_hint_reads_only_the_hinted_paths(tmp_path, monkeypatch):
    execution_dir = tmp_path / "exec"
    with watched_store(SnapshotCheckpointStore, execution_dir, {
            f"d{i % 4}/e{i % 3}/f{i}.txt": f"{i}\n" for i in range(120)}) as (store, work, watcher):
        _hinted_capture_reads_little(store, work, watcher, execution_dir, monkeypatch)


def _hinted_capture_reads_little(store, work, watcher, execution_dir, monkeypatch):
    store.create(kind="completed", run_id="r", codon_id="a", codon_name="a", patterns=ALL,
                 changes=watcher.drain())
    write_tree(work, {"d1/e1/f1.txt": "edited\n", "d2/e2/f2.txt": None,
                      "d0/new/deep/g.txt": "new\n"})
    (work / "d3").rename(work / "d3-renamed")
    opened: list[str] = []
    real_lstat = os.lstat

    def counting_lstat(path, *args, **kwargs):
        opened.append(str(path))
        return real_lstat(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(store, "_capture", lambda *a: pytest.fail("a trusted hint must not scan"))
        patch.setattr(os, "lstat", counting_lstat)
        hinted = store.create(kind="completed", run_id="r", codon_id="b", codon_name="b",
                              patterns=ALL, changes=watcher.drain())
    files_read = [p for p in opened if p.endswith(".txt")]
    assert len(files_read) < 40  # the hinted files and the renamed directory's 30, not 120
    fresh = SnapshotCheckpointStore(execution_dir)
    fresh.initialize()
    full = fresh.create(kind="completed", run_id="r", codon_id="c", codon_name="c",
                        patterns=ALL)
    assert tree_of(store, hinted.id) == tree_of(fresh, full.id)
    fresh.close()


# ----- delta trees -----

LARGE_TREE = {f"d{i % 8}/e{i % 5}/f{i}.txt": f"{i}\n" for i in range(400)}


def hinted(store, watcher, label: str):
    return store.create(kind="completed", run_id="r", codon_id=label, codon_name=label,
                        patterns=ALL, changes=watcher.drain())


def tree_object(execution_dir: Path, store, checkpoint_id: str) -> dict:
    return json.loads(object_path(execution_dir, store._manifest(checkpoint_id).tree)
                      .read_bytes())


def scanned_tree(execution_dir: Path) -> dict:
    """The tree a fresh store's full scan of the work tree gives."""
    fresh = SnapshotCheckpointStore(execution_dir)
    fresh.initialize()
    try:
        made = fresh.create(kind="completed", run_id="r", codon_id="scan", codon_name="scan",
                            patterns=ALL)
        return tree_of(fresh, made.id)
    finally:
        fresh.close()


def test_a_hinted_checkpoint_of_a_few_files_writes_a_delta_tree_equal_to_a_scan(tmp_path):
    execution_dir = tmp_path / "exec"
    with watched_store(SnapshotCheckpointStore, execution_dir, LARGE_TREE) as (
            store, work, watcher):
        first = hinted(store, watcher, "first")  # a scan: the tree is written whole
        assert len(tree_object(execution_dir, store, first.id)) == 400
        write_tree(work, {"d1/e1/f1.txt": "edited\n", "d2/e2/f2.txt": None,
                          "d0/new/g.txt": "new\n", "link": Symlink("d1/e1/f1.txt")})
        second = hinted(store, watcher, "second")
        delta = tree_object(execution_dir, store, second.id)
        assert delta["format"] == "hankweave-snapshot-tree-delta/1"
        assert delta["base"] == store._manifest(first.id).tree
        assert delta["changes"]["d2/e2/f2.txt"] is None
        assert set(delta["changes"]) >= {"d1/e1/f1.txt", "d0/new/g.txt", "link"}
        assert tree_of(store, second.id) == scanned_tree(execution_dir)

        # A store that starts cold reads it through its base, and restores both ways.
        cold = SnapshotCheckpointStore(execution_dir)
        cold.initialize()
        assert tree_of(cold, second.id) == tree_of(store, second.id)
        assert sorted(cold.changed_files(first.id, second.id), key=lambda c: c.path) == [
            FileChange("d0/new/g.txt", "added"), FileChange("d1/e1/f1.txt", "modified"),
            FileChange("d2/e2/f2.txt", "deleted"), FileChange("link", "added")]
        expected = read_tree(work)
        cold.restore(first.id)
        assert (work / "d2/e2/f2.txt").read_text() == "2\n" and not (work / "link").exists()
        cold.restore(second.id)
        assert read_tree(work) == expected
        cold.close()


def test_delta_trees_chain_up_to_the_limit_then_a_tree_is_written_whole(tmp_path):
    execution_dir = tmp_path / "exec"
    with watched_store(SnapshotCheckpointStore, execution_dir, LARGE_TREE) as (
            store, work, watcher):
        made = [hinted(store, watcher, "start")]
        for step in range(MAX_DELTA_CHAIN + 3):
            write_tree(work, {f"d{step % 8}/e0/f{step}.txt": f"step {step}\n"})
            made.append(hinted(store, watcher, f"s{step}"))
        whole = [c for c in made if "format" not in tree_object(execution_dir, store, c.id)]
        assert whole == [made[0], made[MAX_DELTA_CHAIN + 1]]
        states = {c.id: tree_of(store, c.id) for c in made}
    cold = SnapshotCheckpointStore(execution_dir)
    cold.initialize()
    assert {c.id: tree_of(cold, c.id) for c in made} == states
    cold.close()


def test_a_change_to_many_files_writes_the_tree_whole(tmp_path):
    execution_dir = tmp_path / "exec"
    with watched_store(SnapshotCheckpointStore, execution_dir, LARGE_TREE) as (
            store, work, watcher):
        hinted(store, watcher, "start")
        write_tree(work, {f"d0/e{i % 5}/f{i * 8}.txt": "changed\n" for i in range(20)})
        assert "format" not in tree_object(execution_dir, store, hinted(store, watcher, "b").id)


def test_pruning_keeps_the_bases_of_the_delta_trees_it_keeps(tmp_path):
    execution_dir = tmp_path / "exec"
    with watched_store(SnapshotCheckpointStore, execution_dir, LARGE_TREE) as (
            store, work, watcher):
        made = [hinted(store, watcher, "start")]
        for step in range(4):
            write_tree(work, {"d3/e3/f3.txt": f"step {step}\n"})
            made.append(hinted(store, watcher, f"s{step}"))
        kept = made[-1]
        expected = tree_of(store, kept.id)
        removed = store.prune(RetentionPolicy(keep_last_per_run=1))
        assert set(removed) == {c.id for c in made[:-1]}
    cold = SnapshotCheckpointStore(execution_dir)
    cold.initialize()
    assert tree_of(cold, kept.id) == expected  # every base of its chain is still there
    write_tree(work, {"d3/e3/f3.txt": "later\n"})
    cold.restore(kept.id)
    assert (work / "d3/e3/f3.txt").read_text() == "step 3\n"
    cold.close()


def test_a_delta_tree_whose_base_is_lost_fails_the_restore_before_touching_anything(tmp_path):
    execution_dir = tmp_path / "exec"
    with watched_store(SnapshotCheckpointStore, execution_dir, LARGE_TREE) as (
            store, work, watcher):
        first = hinted(store, watcher, "start")
        write_tree(work, {"d3/e3/f3.txt": "changed\n"})
        second = hinted(store, watcher, "next")
    object_path(execution_dir, store._manifest(first.id).tree).unlink()
    write_tree(work, {"d3/e3/f3.txt": "changed again\n"})
    before = read_tree(work)
    cold = SnapshotCheckpointStore(execution_dir)
    cold.initialize()
    with pytest.raises(CheckpointStorageError, match="file list"):
        cold.restore(second.id)
    assert read_tree(work) == before
    cold.close()


def test_scans_in_a_row_give_the_trees_of_fresh_scans_whatever_changed(tmp_path):
    """A scan re-encodes only the entries that differ from the last commit's: across random
    edits, deletions, mode changes, symlinks, restores and failed checkpoints, each tree is the
    one a store that never saw the work tree before finds."""
    execution_dir = tmp_path / "exec"
    work = execution_dir / "agentRoot"
    write_tree(work, {f"d{i % 3}/f{i}.txt": f"{i}\n" for i in range(60)})
    (execution_dir / ".hankweave").mkdir()
    store = SnapshotCheckpointStore(execution_dir)
    store.initialize()
    rng = random.Random(11)
    made: list = []
    for step in range(30):
        if made and step % 4 == 3:
            store.restore(rng.choice(made).id)
        for _ in range(rng.randrange(0, 6)):
            path = f"d{rng.randrange(4)}/f{rng.randrange(70)}.txt"
            roll = rng.random()
            if roll < 0.4:
                write_tree(work, {path: f"step {step} {rng.random()}\n"})
            elif roll < 0.6:
                write_tree(work, {path: None})
            elif roll < 0.75 and (work / path).is_file():
                (work / path).chmod(0o755 if rng.random() < 0.5 else 0o644)
            elif roll < 0.85:
                write_tree(work, {path: None})
                write_tree(work, {path: Symlink(f"target-{step}")})
            else:
                write_tree(work, {path: f"{path}\n"})  # the same content again
        if step % 9 == 4:
            with pytest.MonkeyPatch.context() as patch:  # a checkpoint that fails late
                patch.setattr(store, "_sync_objects",
                              lambda: (_ for _ in ()).throw(OSError(28, "No space left")))
                with pytest.raises(CheckpointStorageError):
                    snap(store, f"failed-{step}")
        made.append(snap(store, f"s{step}"))
        assert tree_of(store, made[-1].id) == scanned_tree(execution_dir), f"step {step}"
    store.close()
