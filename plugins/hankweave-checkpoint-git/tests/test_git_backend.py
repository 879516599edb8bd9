"""The git checkpoint backend: the kernel's contract suite plus what is specific to git."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hankweave.api import (
    CheckpointNotFoundError,
    CheckpointStorageError,
    ExecutionLayout,
    FileChange,
    RetentionPolicy,
    load_state,
    record_checkpoints,
)
from hankweave.testing.checkpoints import (
    CheckpointChangeContract,
    CheckpointStoreContract,
    Executable,
    Symlink,
    file_stats,
    read_tree,
    watched_store,
    write_tree,
)

import hankweave_checkpoint_git.store as backend
from hankweave_checkpoint_git import GIT_MISSING, GitCheckpointStore

ALL = ("**",)
IDENTITY = "Hankweave Runtime <runtime@hankweave.invalid>"


def shadow_dir(execution_dir: Path) -> Path:
    return execution_dir / ".hankweave" / "checkpoints" / ".hankweavecheckpoints"


def clean_env(**extra: str) -> dict[str, str]:
    """The test's own git environment: no inherited GIT_*, no user or system configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="Test", GIT_AUTHOR_EMAIL="test@example.invalid",
               GIT_COMMITTER_NAME="Test", GIT_COMMITTER_EMAIL="test@example.invalid")
    env.update(extra)
    return env


def git_in(cwd: Path, *args: str, check: bool = True, **env: str) -> str:
    """Plain git in ``cwd`` (for the enclosing and nested repositories the tests set up)."""
    result = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd,
                            env=clean_env(**env), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def shadow(execution_dir: Path, *args: str, check: bool = True) -> str:
    """git against the shadow repository, the way a person inspecting it would call it."""
    return git_in(execution_dir, *args, check=check, GIT_DIR=str(shadow_dir(execution_dir)),
                  GIT_WORK_TREE=str(execution_dir / "agentRoot"))


def object_exists(execution_dir: Path, obj: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", obj], capture_output=True, check=False,
                          env=clean_env(GIT_DIR=str(shadow_dir(execution_dir)))).returncode == 0


def tree_entries(execution_dir: Path, sha: str) -> dict[str, str]:
    """``{path: mode}`` of a checkpoint's tree."""
    out = shadow(execution_dir, "ls-tree", "-r", "-z", "--full-tree", sha)
    entries = {}
    for item in filter(None, out.split("\0")):
        meta, path = item.split("\t", 1)
        entries[path] = meta.split()[0]
    return entries


def snap(store, codon: str = "c", *, run: str = "r1", kind: str = "completed",
         patterns: tuple[str, ...] = ALL):
    return store.create(kind=kind, run_id=run, codon_id=codon, codon_name=f"Codon {codon}",
                        patterns=patterns)


class TestGitCheckpointStore(CheckpointStoreContract):
    store_class = GitCheckpointStore

    def break_mid_create(self, store, execution_dir: Path) -> None:
        """What SIGKILL leaves at each step of a create: an updated index, a commit with no ref
        yet, lock files with partial content, a partial loose object and a torn path record."""
        git_dir = shadow_dir(execution_dir)
        initial = shadow(execution_dir, "rev-parse", "refs/hankweave/initial").strip()
        shadow(execution_dir, "update-index", "--add", "a.txt", "b.txt")
        tree = shadow(execution_dir, "write-tree").strip()
        orphan = shadow(execution_dir, "commit-tree", tree, "-p", initial, "-m",
                        "completed:half [run:r1] Half").strip()
        (git_dir / "index.lock").write_bytes(b"DIRC\x00\x00\x00\x02\x00\x00\x00")
        (git_dir / "refs" / "heads" / "run-r1.lock").write_bytes(orphan[:7].encode())
        (git_dir / "refs" / "hankweave" / "checkpoints" / f"{orphan}.lock").write_bytes(b"")
        objects = git_dir / "objects" / orphan[:2]
        (objects / "tmp_obj_Xy12Zq").write_bytes(b"x\x9c\x4b")
        with (git_dir / "hankweave" / "covered-paths").open("ab") as fh:
            fh.write(b"b.t")
        backdate(git_dir.rglob("*.lock"))


def backdate(paths, seconds: float = 60.0) -> None:
    """Make files look as old as those a process killed a minute ago left behind."""
    for path in paths:
        stamp = path.stat().st_mtime - seconds
        os.utime(path, (stamp, stamp))


# ----- layout, messages, branches -----


def test_repository_layout_and_configuration(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    initial = store.initialize()
    git_dir = shadow_dir(execution_dir)
    assert (git_dir / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert shadow(execution_dir, "rev-parse", "main", "refs/hankweave/initial").split() == [
        initial, initial]
    assert shadow(execution_dir, "log", "-1", "--format=%B", initial) == (
        "Initial checkpoint setup\n\n")
    config = dict(
        line.split("=", 1)
        for line in shadow(execution_dir, "config", "--file", str(git_dir / "config"),
                           "--list").splitlines())
    assert config["user.name"] == "Hankweave Runtime"
    assert config["user.email"] == "runtime@hankweave.invalid"
    assert config["commit.gpgsign"] == "false" and config["core.autocrlf"] == "false"
    assert config["core.symlinks"] == "true" and config["core.logallrefupdates"] == "false"
    assert "core.worktree" not in config  # the execution directory may move
    assert not (git_dir / "hooks").exists()
    assert not list(git_dir.parent.glob(".hankweavecheckpoints.tmp-*"))
    assert len(initial) == 40


def test_messages_branches_and_head_follow_the_original(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    work = store.work_tree
    write_tree(work, {"a.txt": "a"})
    rig = snap(store, "review#1", run="1788337916070-aqhfn", kind="rig-setup")
    done = store.create(kind="completed", run_id="1788337916070-aqhfn", codon_id="review#1",
                        codon_name="Review", patterns=("*.txt",), duration_ms=1234)
    exec_dir = store.execution_dir

    body = shadow(exec_dir, "log", "-1", "--format=%B", done.id)
    assert body.startswith(
        "completed:review#1 [run:1788337916070-aqhfn] Review\n\nCodon: Review\n"
        "Status: completed\nTimestamp: ")
    assert "\nDuration: 1234ms\n" in body
    assert done.message == body[: body.index("\n\nHankweave-Sequence:") + 1]
    assert 'Hankweave-Patterns: ["*.txt"]' in body
    assert shadow(exec_dir, "log", "-1", "--format=%an <%ae>|%cn <%ce>", done.id).strip() == (
        f"{IDENTITY}|{IDENTITY}")

    assert shadow(exec_dir, "rev-parse", "run-1788337916070-aqhfn").strip() == done.id
    assert shadow(exec_dir, "symbolic-ref", "HEAD").strip() == (
        "refs/heads/run-1788337916070-aqhfn")
    store.restore(rig.id)
    assert shadow(exec_dir, "symbolic-ref", "-q", "HEAD", check=False) == ""
    assert shadow(exec_dir, "rev-parse", "HEAD").strip() == rig.id
    # A run after the rollback gets its own branch; the first run's branch is untouched.
    later = snap(store, "next", run="r2")
    assert later.branch == "run-r2"
    assert shadow(exec_dir, "symbolic-ref", "HEAD").strip() == "refs/heads/run-r2"
    assert shadow(exec_dir, "rev-parse", "run-1788337916070-aqhfn").strip() == done.id
    branches = shadow(exec_dir, "for-each-ref", "--format=%(refname:short)", "refs/heads/")
    assert branches.split() == ["main", "run-1788337916070-aqhfn", "run-r2"]


def test_checkpoints_made_within_one_timestamp_list_newest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "utc_now_iso", lambda: "2026-01-02T03:04:05.678Z")
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    made = [snap(store, f"c{i}", run=f"r{i % 3}").id for i in range(12)]
    assert [c.id for c in store.list()][:12] == made[::-1]
    reopened = GitCheckpointStore(tmp_path / "exec")
    reopened.initialize()
    assert snap(reopened, "after").id == reopened.list()[0].id


def test_a_checkpoint_tree_is_exactly_the_resolved_files(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    work = store.work_tree
    write_tree(work, {"keep.txt": "k", "gone.txt": "g", "dir/x.md": "x", "run.sh":
                      Executable(b"#!/bin/sh\n"), "link": Symlink("keep.txt"),
                      "notes.log": "not matched"})
    first = snap(store, "first", patterns=("*.txt", "dir", "run.sh", "link"))
    assert tree_entries(store.execution_dir, first.id) == {
        "keep.txt": "100644", "gone.txt": "100644", "dir/x.md": "100644",
        "run.sh": "100755", "link": "120000"}
    write_tree(work, {"gone.txt": None, "dir/x.md": None})
    second = snap(store, "second", patterns=("*.txt", "dir", "run.sh", "link"))
    assert set(tree_entries(store.execution_dir, second.id)) == {"keep.txt", "run.sh", "link"}
    third = snap(store, "third", patterns=("keep.txt",))
    assert set(tree_entries(store.execution_dir, third.id)) == {"keep.txt"}


def test_what_git_cannot_store_is_skipped_and_left_alone(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    write_tree(store.work_tree, {"a.txt": "a"})
    os.mkfifo(store.work_tree / "pipe")
    write_tree(store.work_tree, {"vendored/.GIT/config": "a case-variant git directory"})
    made = snap(store, "special")
    assert tree_entries(store.execution_dir, made.id) == {"a.txt": "100644"}
    store.restore(made.id)
    assert (store.work_tree / "pipe").exists()
    assert (store.work_tree / "vendored" / ".GIT" / "config").exists()


def test_a_deleted_agent_root_is_checkpointed_as_empty(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    write_tree(store.work_tree, {"a.txt": "a"})
    full = snap(store, "full")
    shutil.rmtree(store.work_tree)
    empty = snap(store, "empty")
    assert store.changed_files(full.id, empty.id) == [FileChange("a.txt", "deleted")]
    store.restore(full.id)
    assert read_tree(store.work_tree) == {"a.txt": ("file", b"a", False)}


def test_changed_files_reports_type_changes_as_modified_and_never_renames(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    write_tree(store.work_tree, {"old-name.txt": "same content\n" * 20, "kind": "a file"})
    first = snap(store, "first")
    write_tree(store.work_tree, {"old-name.txt": None, "new-name.txt": "same content\n" * 20,
                                 "kind": Symlink("new-name.txt")})
    second = snap(store, "second")
    assert store.changed_files(first.id, second.id) == [
        FileChange("kind", "modified"),
        FileChange("new-name.txt", "added"),
        FileChange("old-name.txt", "deleted"),
    ]
    assert store.changed_files(first.id[:10], first.id) == []
    with pytest.raises(CheckpointNotFoundError):
        store.changed_files(first.id, "0" * 40)


def test_agent_gitattributes_never_change_the_stored_or_restored_bytes(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    files = {".gitattributes": "* text eol=crlf ident\n*.bin filter=nonexistent\n",
             "unix.txt": b"one\ntwo\n$Id$\n", "dos.txt": b"one\r\ntwo\r\n", "data.bin": b"\n\r\n"}
    write_tree(store.work_tree, files)
    made = snap(store, "attrs")
    for name in ("unix.txt", "dos.txt", "data.bin"):
        blob = subprocess.run(
            ["git", "cat-file", "blob", f"{made.id}:{name}"], capture_output=True, check=True,
            env=clean_env(GIT_DIR=str(shadow_dir(store.execution_dir)))).stdout
        assert blob == (files[name] if isinstance(files[name], bytes) else files[name].encode())
    expected = read_tree(store.work_tree)
    write_tree(store.work_tree, {"unix.txt": None, "dos.txt": None, "data.bin": None})
    store.restore(made.id)
    assert read_tree(store.work_tree) == expected


# ----- isolation -----


@pytest.fixture
def hostile_home(tmp_path, monkeypatch):
    """A HOME whose git configuration would break or mark any git call that reads it."""
    home = tmp_path / "home"
    hooks = home / "hooks"
    template = home / "template"
    marker = home / "hook-ran"
    for directory in (hooks, template / "hooks"):
        directory.mkdir(parents=True)
        for name in ("reference-transaction", "pre-commit", "post-commit", "post-checkout",
                     "post-index-change", "pre-auto-gc"):
            hook = directory / name
            hook.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\nexit 1\n")
            hook.chmod(0o755)
    (template / "from-the-template").write_text("copied by git init")
    gitconfig = textwrap.dedent(f"""\
        [user]
            name = Bogus Person
            email = bogus@example.com
        [core]
            hooksPath = {hooks}
            autocrlf = true
            symlinks = false
            fileMode = false
        [init]
            templateDir = {template}
            defaultBranch = trunk
        [commit]
            gpgSign = true
        [gc]
            auto = 1
        """)
    (home / ".gitconfig").write_text(gitconfig)
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "attributes").write_text("* text eol=crlf\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for name in list(os.environ):
        if name.startswith("GIT_") and not name.startswith("GIT_PYTHON"):
            monkeypatch.delenv(name)
    # The hostile configuration is live for any git that reads it.
    probe = subprocess.run(["git", "config", "user.name"], capture_output=True, text=True,
                           check=False)
    assert probe.stdout.strip() == "Bogus Person"
    return home


def snapshot_repository(repo: Path) -> dict[str, object]:
    """What must not change in a repository we do not own."""
    git_dir = repo / ".git"
    return {
        "status": git_in(repo, "status", "--porcelain"),
        "refs": git_in(repo, "for-each-ref"),
        "head": (git_dir / "HEAD").read_bytes(),
        "index": (git_dir / "index").read_bytes(),
        "config": (git_dir / "config").read_bytes(),
        "objects": sorted(str(p.relative_to(git_dir)) for p in (git_dir / "objects").rglob("*")),
    }


def make_repo(path: Path, files: dict[str, str]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    git_in(path, "init", "-q", "--template=")
    write_tree(path, files)
    git_in(path, "add", "-A")
    git_in(path, "commit", "-q", "-m", "their work")


def test_git_calls_are_isolated_from_user_config_and_surrounding_repositories(
        tmp_path, hostile_home):
    outer = tmp_path / "outer"
    make_repo(outer, {"README.md": "theirs", ".gitignore": "exec/\n"})
    execution_dir = outer / "exec"
    work = execution_dir / "agentRoot"
    make_repo(work / "sub", {"inner.txt": "nested"})
    write_tree(work, {"top.txt": "t", "sub/extra.txt": "e"})
    outer_before = snapshot_repository(outer)
    nested_before = snapshot_repository(work / "sub")
    gitconfig_before = (hostile_home / ".gitconfig").read_bytes()

    store = GitCheckpointStore(execution_dir)
    store.initialize()
    first = snap(store, "one")
    write_tree(work, {"top.txt": "changed", "sub/extra.txt": None})
    second = snap(store, "two", run="r2")
    store.restore(first.id)
    assert store.changed_files(first.id, second.id)
    store.prune(RetentionPolicy(keep_last_per_run=1))
    assert GitCheckpointStore(execution_dir).list_read_only() == store.list()
    store.close()

    assert snapshot_repository(outer) == outer_before
    assert snapshot_repository(work / "sub") == nested_before
    assert (hostile_home / ".gitconfig").read_bytes() == gitconfig_before
    assert not (hostile_home / "hook-ran").exists()
    git_dir = shadow_dir(execution_dir)
    assert not (git_dir / "from-the-template").exists()
    assert (git_dir / "HEAD").exists() and shadow(execution_dir, "rev-parse", "main")
    identities = set(shadow(execution_dir, "log", "--all", "--format=%an <%ae>|%cn <%ce>")
                     .splitlines())
    assert identities == {f"{IDENTITY}|{IDENTITY}"}
    for checkpoint in (first, second):
        entries = tree_entries(execution_dir, checkpoint.id)
        assert "160000" not in entries.values()  # never a submodule
        assert not any(".git" in path.split("/") for path in entries)
    assert "sub/inner.txt" in tree_entries(execution_dir, first.id)
    # Stored as they were, whatever core.autocrlf/symlinks/fileMode the user configured.
    assert read_tree(work)["top.txt"] == ("file", b"t", False)


def test_git_variables_inherited_from_a_hook_do_not_redirect_git(tmp_path, monkeypatch):
    outer = tmp_path / "outer"
    make_repo(outer, {"README.md": "theirs", ".gitignore": "exec/\n"})
    before = snapshot_repository(outer)
    # What a git hook exports to the processes it starts.
    monkeypatch.setenv("GIT_DIR", str(outer / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(outer))
    monkeypatch.setenv("GIT_INDEX_FILE", str(outer / ".git" / "index"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(outer / ".git" / "objects"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Hook Author")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.autocrlf'='true'")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(tmp_path / "nowhere"))

    store = GitCheckpointStore(outer / "exec")
    store.initialize()
    write_tree(store.work_tree, {"a.txt": "a\n"})
    made = snap(store, "one")
    write_tree(store.work_tree, {"a.txt": "changed\n"})
    store.restore(made.id)
    assert read_tree(store.work_tree) == {"a.txt": ("file", b"a\n", False)}
    assert GitCheckpointStore(outer / "exec").list_read_only() == store.list()
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                 "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT"):
        monkeypatch.delenv(name)
    assert snapshot_repository(outer) == before
    assert shadow(store.execution_dir, "log", "-1", "--format=%an", made.id).strip() == (
        "Hankweave Runtime")


# ----- repairs -----


def test_stale_lock_files_are_removed_on_initialize(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    good = snap(store, "good")
    git_dir = shadow_dir(execution_dir)
    locks = [git_dir / "index.lock", git_dir / "HEAD.lock", git_dir / "config.lock",
             git_dir / "packed-refs.lock", git_dir / "refs" / "heads" / "run-r1.lock",
             git_dir / "refs" / "hankweave" / "checkpoints" / f"{good.id}.lock"]
    for lock in locks:
        lock.write_bytes(b"left by a killed git")
    backdate(locks)
    reopened = GitCheckpointStore(execution_dir)
    reopened.initialize()
    assert not [lock for lock in locks if lock.exists()]
    write_tree(reopened.work_tree, {"new.txt": "n"})
    after = snap(reopened, "after")
    assert [c.id for c in reopened.list(run_id="r1")] == [after.id, good.id]


def test_a_young_lock_is_given_time_then_treated_as_stale(tmp_path):
    class QuickRepair(GitCheckpointStore):
        stale_lock_seconds = 0.3

    execution_dir = tmp_path / "exec"
    QuickRepair(execution_dir).initialize()
    lock = shadow_dir(execution_dir) / "index.lock"
    lock.write_bytes(b"")  # just now: it could belong to a live git, so it is waited for
    store = QuickRepair(execution_dir)
    store.initialize()
    assert not lock.exists()
    snap(store, "works")


def test_a_commit_whose_ref_was_never_written_is_not_a_checkpoint(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    initial = store.initialize()
    tree = shadow(execution_dir, "write-tree").strip()
    orphan = shadow(execution_dir, "commit-tree", tree, "-p", initial, "-m",
                    "completed:x [run:r1] Killed before update-ref\n").strip()
    assert orphan not in {c.id for c in store.list()}
    with pytest.raises(CheckpointNotFoundError):
        store.resolve(orphan)


def test_an_unreadable_index_is_dropped_it_is_only_a_cache(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    write_tree(store.work_tree, {"a.txt": "a", "b.txt": "b"})
    made = snap(store, "one")
    (shadow_dir(execution_dir) / "index").write_bytes(b"DIRC garbage from a power cut")
    reopened = GitCheckpointStore(execution_dir)
    reopened.initialize()
    write_tree(reopened.work_tree, {"a.txt": "changed", "c.txt": "c"})
    reopened.restore(made.id)
    assert read_tree(reopened.work_tree) == {"a.txt": ("file", b"a", False),
                                             "b.txt": ("file", b"b", False)}
    assert snap(reopened, "two").id in {c.id for c in reopened.list()}


def test_abandoned_build_directories_of_dead_processes_are_removed(tmp_path):
    execution_dir = tmp_path / "exec"
    checkpoints = execution_dir / ".hankweave" / "checkpoints"
    dead = checkpoints / ".hankweavecheckpoints.tmp-999999999-0badcafe"
    alive = checkpoints / f".hankweavecheckpoints.tmp-{os.getppid()}-0badcafe"
    for build in (dead, alive):
        (build / "objects").mkdir(parents=True)
    GitCheckpointStore(execution_dir).initialize()
    assert not dead.exists() and alive.exists()


def test_a_repository_whose_head_does_not_resolve_is_rebuilt_when_it_holds_nothing(tmp_path):
    execution_dir = tmp_path / "exec"
    GitCheckpointStore(execution_dir).initialize()
    git_dir = shadow_dir(execution_dir)
    (git_dir / "HEAD").write_text("ref: refs/heads/torn\n")
    (git_dir / "left-over").write_text("x")
    store = GitCheckpointStore(execution_dir)
    initial = store.initialize()
    assert not (git_dir / "left-over").exists()
    assert [(c.id, c.kind) for c in store.list()] == [(initial, "initial")]


@pytest.mark.parametrize("refs", ["loose", "packed"])
def test_a_repository_whose_head_does_not_resolve_is_refused_when_it_holds_checkpoints(
        tmp_path, refs):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    made = snap(store, "precious")
    if refs == "packed":  # as they are after a prune's gc
        shadow(execution_dir, "pack-refs", "--all")
    git_dir = shadow_dir(execution_dir)
    (git_dir / "HEAD").write_text("ref: refs/heads/torn\n")
    with pytest.raises(CheckpointStorageError, match="holds checkpoints"):
        GitCheckpointStore(execution_dir).initialize()
    (git_dir / "HEAD").write_text(f"{made.id}\n")
    assert GitCheckpointStore(execution_dir).resolve(made.id).id == made.id


def test_the_covered_path_record_is_rebuilt_from_history_when_missing(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    write_tree(store.work_tree, {"a/x.txt": "x", "b/y.txt": "y"})
    snap(store, "a", patterns=("a",))
    only_b = snap(store, "b", patterns=("b",))
    (shadow_dir(execution_dir) / "hankweave" / "covered-paths").unlink()
    reopened = GitCheckpointStore(execution_dir)
    reopened.initialize()
    reopened.restore(only_b.id)
    # a/x.txt is held by an earlier checkpoint, so it is covered: restoring one that lacks it
    # removes it even though the target's patterns do not match it.
    assert read_tree(reopened.work_tree) == {"b/y.txt": ("file", b"y", False)}


def test_restore_never_removes_through_a_symlinked_directory(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    work = store.work_tree
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("not ours")
    write_tree(work, {"d/x.txt": "ours"})
    with_d = snap(store, "with-d")
    write_tree(work, {"d/x.txt": None})
    (work / "d").rmdir()
    without_d = snap(store, "without-d")
    os.symlink(outside, work / "d")
    store.restore(without_d.id)
    assert (outside / "x.txt").read_text() == "not ours"
    store.restore(with_d.id)
    assert (outside / "x.txt").read_text() == "not ours"
    assert read_tree(work) == {"d/x.txt": ("file", b"ours", False)}


# ----- materialize -----


def repository_contents(git_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the shadow repository with its bytes and modification time."""
    return {str(p.relative_to(git_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in git_dir.rglob("*") if p.is_file()}


def test_materialize_never_touches_the_repository_or_a_repository_named_by_the_environment(
        tmp_path, monkeypatch):
    outer = tmp_path / "outer"
    make_repo(outer, {"README.md": "theirs", ".gitignore": "exec/\n"})
    store = GitCheckpointStore(outer / "exec")
    store.initialize()
    write_tree(store.work_tree, {"a.txt": "a1", "run.sh": Executable(b"#!/bin/sh\n"),
                                 "link": Symlink("a.txt")})
    first = snap(store, "first")
    write_tree(store.work_tree, {"a.txt": "a2", "b.txt": "b"})
    second = snap(store, "second")
    store.restore(first.id)  # HEAD detached at first, the index holds first's tree
    git_dir = shadow_dir(store.execution_dir)
    before = repository_contents(git_dir)
    work_before = read_tree(store.work_tree)
    outer_before = snapshot_repository(outer)
    # What a git hook exports: must not redirect the private index or the work tree.
    monkeypatch.setenv("GIT_DIR", str(outer / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(outer))
    monkeypatch.setenv("GIT_INDEX_FILE", str(outer / ".git" / "index"))

    store.materialize(second.id, tmp_path / "second")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name)
    assert read_tree(tmp_path / "second") == {
        "a.txt": ("file", b"a2", False), "b.txt": ("file", b"b", False),
        "run.sh": ("file", b"#!/bin/sh\n", True), "link": ("link", "a.txt")}
    assert repository_contents(git_dir) == before
    assert read_tree(store.work_tree) == work_before
    assert snapshot_repository(outer) == outer_before
    assert shadow(store.execution_dir, "rev-parse", "HEAD").strip() == first.id


def test_materialize_writes_the_stored_bytes_whatever_the_agent_gitattributes_say(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    files = {".gitattributes": "* text eol=crlf ident export-subst\n*.bin filter=nonexistent\n"
                               "hidden.txt export-ignore\n",
             "unix.txt": b"one\ntwo\n$Id$\n$Format:%H$\n", "data.bin": b"\n\r\n",
             "hidden.txt": b"still exported\n"}
    write_tree(store.work_tree, files)
    made = snap(store, "attrs")
    store.materialize(made.id, tmp_path / "out")
    assert read_tree(tmp_path / "out") == read_tree(store.work_tree)


def test_materialize_writes_file_names_that_are_not_utf8(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    name = os.fsdecode(b"caf\xe9.txt")
    (store.work_tree / name).write_bytes(b"latin-1 name")
    made = snap(store, "bytes")
    assert store.materialize(made.id, tmp_path / "out") == [name] == store.files(made.id)
    assert (tmp_path / "out" / name).read_bytes() == b"latin-1 name"


# ----- listing read-only (hankweave inspect) -----


def test_list_read_only_needs_no_work_tree_and_creates_none(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    initial = store.initialize()
    made = snap(store, "a")
    shutil.rmtree(store.work_tree)  # an agent may delete agentRoot itself

    listed = GitCheckpointStore(tmp_path / "exec").list_read_only()

    assert [c.id for c in listed] == [made.id, initial]
    assert not store.work_tree.exists()


def test_list_read_only_leaves_the_lock_files_of_a_killed_process(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    made = snap(store, "a")
    lock = shadow_dir(execution_dir) / "refs" / "heads" / "run-r1.lock"
    lock.write_bytes(made.id[:7].encode())
    backdate([lock])

    listed = GitCheckpointStore(execution_dir).list_read_only()

    assert listed == store.list() and listed[0].id == made.id
    assert lock.read_bytes() == made.id[:7].encode()  # repairing is initialize's job


def test_list_read_only_without_a_git_executable_gives_the_clear_error(tmp_path, monkeypatch):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    monkeypatch.setenv("GIT_PYTHON_GIT_EXECUTABLE", str(tmp_path / "no-such-git"))

    with pytest.raises(CheckpointStorageError) as caught:
        GitCheckpointStore(tmp_path / "exec").list_read_only()

    assert str(caught.value) == GIT_MISSING


def test_list_read_only_never_imports_gitpython(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    snap(store, "a")
    code = ("import sys\n"
            "from hankweave_checkpoint_git import GitCheckpointStore\n"
            "listed = GitCheckpointStore(sys.argv[1]).list_read_only()\n"
            "print(len(listed), 'git' in sys.modules)\n")

    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "exec")],
                            capture_output=True, text=True, check=True)

    assert result.stdout.split() == ["2", "False"]


# ----- missing git -----


def test_a_git_executable_that_disappears_gives_a_clear_error(tmp_path, monkeypatch):
    import git

    monkeypatch.setattr(git.Git, "GIT_PYTHON_GIT_EXECUTABLE", str(tmp_path / "no-such-git"))
    store = GitCheckpointStore(tmp_path / "exec")
    with pytest.raises(CheckpointStorageError) as caught:
        store.initialize()
    assert str(caught.value) == GIT_MISSING


@pytest.mark.parametrize("how", ["empty PATH", "GIT_PYTHON_GIT_EXECUTABLE"])
def test_no_git_executable_at_all_gives_a_clear_error(tmp_path, how):
    script = textwrap.dedent("""\
        import sys
        from hankweave.checkpoints import CheckpointStorageError
        from hankweave_checkpoint_git import GitCheckpointStore
        try:
            GitCheckpointStore(sys.argv[1]).initialize()
        except CheckpointStorageError as exc:
            print(exc)
        """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTHON"))}
    if how == "empty PATH":
        (tmp_path / "bin").mkdir()
        env["PATH"] = str(tmp_path / "bin")
    else:
        env["GIT_PYTHON_GIT_EXECUTABLE"] = str(tmp_path / "no-such-git")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "exec")], env=env,
                            capture_output=True, text=True, check=False)
    assert result.stdout.strip() == GIT_MISSING, result.stderr
    assert "Traceback" not in result.stderr


def test_importing_the_plugin_does_not_import_gitpython():
    code = "import sys, hankweave_checkpoint_git; print('git' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


# ----- retention -----


def test_prune_deletes_objects_and_never_changes_kept_ids(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    made = []
    for i in range(6):
        write_tree(store.work_tree, {"unique.bin": os.urandom(4096), f"f{i}.txt": str(i)})
        made.append(snap(store, f"c{i}"))
    blobs = [shadow(execution_dir, "rev-parse", f"{c.id}:unique.bin").strip() for c in made]
    kept_before = {c.id: c for c in made[4:]}

    removed = store.prune(RetentionPolicy(keep_last_per_run=2,
                                          keep_ids=frozenset({made[1].id[:12]})))
    assert set(removed) == {made[0].id, made[2].id, made[3].id}
    for index in (0, 2, 3):
        for obj in (made[index].id, blobs[index]):
            assert not object_exists(execution_dir, obj)
    for checkpoint in kept_before.values():
        assert store.resolve(checkpoint.id) == checkpoint
    assert store.resolve(made[1].id).id == made[1].id
    assert shadow(execution_dir, "rev-parse", "run-r1").strip() == made[5].id
    assert shadow(execution_dir, "fsck", "--no-dangling", "--no-progress") == ""
    assert store.prune(RetentionPolicy(keep_last_per_run=2,
                                       keep_ids=frozenset({made[1].id}))) == []


def test_prune_to_zero_keeps_what_head_is_at_and_moves_or_deletes_branches(tmp_path):
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    initial = store.initialize()
    other = [snap(store, f"o{i}", run="other") for i in range(2)]
    a = snap(store, "a", run="r1")
    b = snap(store, "b", run="r1")
    store.restore(a.id)  # HEAD detached at a: the work tree's base

    removed = store.prune(RetentionPolicy(keep_last_per_run=0))
    assert set(removed) == {other[0].id, other[1].id, b.id}
    assert {c.id for c in store.list()} == {initial, a.id}
    branches = shadow(execution_dir, "for-each-ref", "--format=%(refname:short) %(objectname)",
                      "refs/heads/")
    assert branches.splitlines() == [f"main {initial}", f"run-r1 {a.id}"]
    assert snap(store, "c", run="r1").id == store.list()[0].id


# ----- compatibility -----


def original_repository(execution_dir: Path) -> tuple[str, str]:
    """A repository as Hankweave 0.10.0 made it, with checkpoints of codons "one" and "two":
    chained commits on run branches, no refs of ours, deletions not recorded."""
    work = execution_dir / "agentRoot"
    git_dir = shadow_dir(execution_dir)
    work.mkdir(parents=True)
    git_dir.parent.mkdir(parents=True)
    git = {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work)}
    git_in(execution_dir, "init", "-q", "--initial-branch", "main", **git)
    git_in(execution_dir, "commit", "-q", "--allow-empty", "-m", "Initial checkpoint setup",
           **git)
    git_in(execution_dir, "checkout", "-q", "-b", "run-old", **git)

    def original_commit(codon: str, second: int) -> str:
        git_in(execution_dir, "add", "-f", "--", *sorted(p.name for p in work.iterdir()), **git)
        stamp = f"2025-05-0{second}T10:00:00.000Z"
        git_in(execution_dir, "commit", "-q", "--allow-empty", "-m",
               f"completed:{codon} [run:old] {codon}\n\nCodon: {codon}\nStatus: completed\n"
               f"Timestamp: {stamp}", GIT_COMMITTER_DATE=stamp, **git)
        return git_in(execution_dir, "rev-parse", "HEAD", **git).strip()

    write_tree(work, {"a.txt": "a1"})
    first = original_commit("one", 1)
    write_tree(work, {"a.txt": "a2", "b.txt": "b"})
    return first, original_commit("two", 2)


def test_a_repository_made_by_hankweave_0_10_is_adopted(tmp_path):
    execution_dir = tmp_path / "exec"
    work = execution_dir / "agentRoot"
    first, second = original_repository(execution_dir)

    store = GitCheckpointStore(execution_dir)
    initial = store.initialize()
    listed = store.list()
    assert [(c.id, c.kind, c.run_id, c.branch) for c in listed] == [
        (second, "completed", "old", "run-old"), (first, "completed", "old", "run-old"),
        (initial, "initial", None, "main")]
    assert listed[0].timestamp == "2025-05-02T10:00:00.000Z"
    store.restore(first)
    assert read_tree(work) == {"a.txt": ("file", b"a1", False)}
    assert store.prune(RetentionPolicy(keep_last_per_run=0)) == []
    newer = snap(store, "three", run="new")
    assert store.list()[0].id == newer.id


def test_a_repository_made_by_hankweave_0_10_is_listed_read_only_without_adopting_it(tmp_path):
    execution_dir = tmp_path / "exec"
    first, second = original_repository(execution_dir)
    before = file_stats(execution_dir)

    listed = GitCheckpointStore(execution_dir).list_read_only()

    assert [(c.id, c.kind) for c in listed[:2]] == [(second, "completed"), (first, "completed")]
    assert [c.kind for c in listed[2:]] == ["initial"]
    assert file_stats(execution_dir) == before  # refs/hankweave/initial is not written
    assert GitCheckpointStore(execution_dir).list() == listed


def test_a_legacy_dot_git_directory_is_moved_into_place(tmp_path):
    execution_dir = tmp_path / "exec"
    (execution_dir / "agentRoot").mkdir(parents=True)
    legacy = execution_dir / ".hankweave" / "checkpoints" / ".git"
    legacy.parent.mkdir(parents=True)
    git = {"GIT_DIR": str(legacy), "GIT_WORK_TREE": str(execution_dir / "agentRoot")}
    git_in(execution_dir, "init", "-q", **git)
    git_in(execution_dir, "commit", "-q", "--allow-empty", "-m", "Initial checkpoint setup",
           **git)
    initial = git_in(execution_dir, "rev-parse", "HEAD", **git).strip()
    assert GitCheckpointStore(execution_dir).initialize() == initial
    assert not legacy.exists() and shadow_dir(execution_dir).is_dir()


# ----- the plugin -----


def test_the_plugin_registers_the_git_backend():
    from hankweave.api import Registry, make_plugin_manager

    pm = make_plugin_manager(env={"HANKWEAVE_LOAD_PLUGINS": "checkpoint-git"}, strict=True)
    registry = Registry(pm)
    assert registry.checkpoint_backend("git") is GitCheckpointStore
    assert registry.registered_by("checkpoint backend", "git") == "checkpoint-git"


def test_checkpoint_data_round_trips_through_json(tmp_path):
    store = GitCheckpointStore(tmp_path / "exec")
    store.initialize()
    snap(store, "a")
    data = store.checkpoint_data()
    assert json.loads(json.dumps(data)) == data


# ----- hankweave inspect on a git-backed execution -----

HANK = {"hank": [{"id": codon, "name": codon.title(), "model": "fake",
                  "continuationMode": "fresh", "promptText": f"Write {codon}.",
                  "checkpointedFiles": ["**"]} for codon in ("draft", "review")]}
SCRIPT = {"codons": {codon: {"messages": 1, "writeFiles": {f"{codon}.md": codon}}
                     for codon in ("draft", "review")}}

# `python -m hankweave`, reporting at exit whether GitPython was imported.
INSPECT = """
import atexit, runpy, sys
atexit.register(lambda: print("git imported:", "git" in sys.modules, file=sys.stderr))
sys.argv = ["hankweave", *sys.argv[1:]]
runpy.run_module("hankweave", run_name="__main__")
"""


def hankweave_env(tmp_path: Path) -> dict[str, str]:
    return clean_env(HANKWEAVE_HOME=str(tmp_path / "home"), HANKWEAVE_LOAD_PLUGINS="checkpoint-git",
                     HANKWEAVE_PLUGIN_MODULES="hankweave.testing.fake_harness",
                     HANKWEAVE_FAKE_SCRIPT=str(tmp_path / "script.json"))


def git_backed_execution(tmp_path: Path) -> Path:
    """A two-codon hank run to completion by the fake agent on the git backend (the default)."""
    (tmp_path / "hank").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "hank" / "hank.json").write_text(json.dumps(HANK))
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    run = subprocess.run(
        [sys.executable, "-m", "hankweave", "run", "hank", "data", "-e", "exec", "--headless"],
        cwd=tmp_path, env=hankweave_env(tmp_path), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    return tmp_path / "exec"


def inspect_thread(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", INSPECT, "inspect", "thread", "-e", "exec", *args],
        cwd=tmp_path, env=hankweave_env(tmp_path), capture_output=True, text=True, timeout=60,
        check=False)


def test_inspect_thread_shows_the_checkpoints_of_a_git_backed_execution(tmp_path):
    execution_dir = git_backed_execution(tmp_path)
    state, _ = load_state(ExecutionLayout(execution_dir).hankweave_dir)
    recorded = {codon.codon_id: [sha for _, sha in reversed(record_checkpoints(codon))]
                for codon in state.runs[0].codons}
    before = file_stats(execution_dir)

    as_json = inspect_thread(tmp_path, "--json")
    table = inspect_thread(tmp_path)

    assert as_json.returncode == 0, as_json.stderr
    shown = {codon["codonId"]: [cp["sha"] for cp in codon["validatedCheckpoints"]]
             for codon in json.loads(as_json.stdout)["codons"]}
    assert shown == recorded and all(recorded.values())
    for codon, shas in recorded.items():
        row = next(line for line in table.stdout.splitlines() if f" {codon} " in line)
        assert row.rstrip().endswith(f"completed {shas[-1][:8]}")
    # Read with the git executable alone, and read only.
    assert as_json.stderr == table.stderr == "git imported: False\n"
    assert file_stats(execution_dir) == before


class TestGitCheckpointChanges(CheckpointChangeContract):
    store_class = GitCheckpointStore


def test_a_trusted_hint_builds_the_tree_a_scan_builds_without_scanning(tmp_path, monkeypatch):
    execution_dir = tmp_path / "exec"
    with watched_store(GitCheckpointStore, execution_dir, {
            f"d{i % 4}/e{i % 3}/f{i}.txt": f"{i}\n" for i in range(120)}) as (store, work, watcher):
        _hinted_tree_equals_a_scan(store, work, watcher, execution_dir, monkeypatch)


def _hinted_tree_equals_a_scan(store, work, watcher, execution_dir, monkeypatch):
    store.create(kind="completed", run_id="r", codon_id="a", codon_name="a", patterns=ALL,
                 changes=watcher.drain())
    write_tree(work, {"d1/e1/f1.txt": "edited\n", "d2/e2/f2.txt": None,
                      "d0/new/deep/g.txt": "new\n"})
    (work / "d3").rename(work / "d3-renamed")

    def no_scan(*args, **kwargs):
        raise AssertionError("a trusted hint must not scan the work tree")

    with monkeypatch.context() as patch:
        patch.setattr(store, "_tree_by_scan", no_scan)
        hinted = store.create(kind="completed", run_id="r", codon_id="b", codon_name="b",
                              patterns=ALL, changes=watcher.drain())
    scanned = GitCheckpointStore(execution_dir)
    scanned.initialize()
    full = scanned.create(kind="completed", run_id="r", codon_id="c", codon_name="c",
                          patterns=ALL)
    trees = shadow(execution_dir, "rev-parse", f"{hinted.id}^{{tree}}", f"{full.id}^{{tree}}")
    assert len(set(trees.split())) == 1
    # The index was not touched by the hinted capture; a later scan still finds every change.
    write_tree(work, {"d0/e0/f0.txt": "after\n"})
    again = store.create(kind="completed", run_id="r", codon_id="d", codon_name="d",
                         patterns=ALL)
    assert store.changed_files(full.id, again.id) == [FileChange("d0/e0/f0.txt", "modified")]
    scanned.close()


def test_commits_written_in_process_are_those_git_commit_tree_writes(tmp_path):
    execution_dir = tmp_path / "exec"
    write_tree(execution_dir / "agentRoot", {"a.txt": "a\n"})
    store = GitCheckpointStore(execution_dir)
    initial = store.initialize()
    made = snap(store, "one")
    tree = shadow(execution_dir, "rev-parse", f"{made.id}^{{tree}}").strip()
    message = shadow(execution_dir, "log", "-1", "--format=%B", made.id)[:-1]  # log adds "\n"
    for text in (message, "no final newline", "two\n\nparagraphs\n"):
        env = {"GIT_AUTHOR_DATE": "1767225600 +0000", "GIT_COMMITTER_DATE": "1767225600 +0000"}
        by_git = subprocess.run(
            ["git", "commit-tree", tree, "-p", initial, "-m", text], cwd=execution_dir,
            env={**os.environ, **env, "GIT_DIR": str(shadow_dir(execution_dir)),
                 "GIT_AUTHOR_NAME": "Hankweave Runtime",
                 "GIT_AUTHOR_EMAIL": "runtime@hankweave.invalid",
                 "GIT_COMMITTER_NAME": "Hankweave Runtime",
                 "GIT_COMMITTER_EMAIL": "runtime@hankweave.invalid"},
            capture_output=True, text=True, check=True).stdout.strip()
        ours = store._objects().commit(tree, initial, text, "2026-01-01T00:00:00.000Z")
        assert ours == by_git, text
    # A full id resolves without listing, to what listing finds.
    assert store.resolve(made.id) == next(c for c in store.list() if c.id == made.id)
    assert store.resolve(initial).kind == "initial"
    store.close()


def test_a_hinted_restore_asks_git_nothing_and_leaves_an_index_later_scans_can_trust(
        tmp_path, monkeypatch):
    with watched_store(GitCheckpointStore, tmp_path / "exec", {
            f"d{i % 3}/f{i}.txt": f"{i}\n" for i in range(60)}) as (store, work, watcher):
        _hinted_restore_keeps_the_index_whole(store, work, watcher, monkeypatch)


def _hinted_restore_keeps_the_index_whole(store, work, watcher, monkeypatch):
    def create(codon, **extra):
        return store.create(kind="completed", run_id="r", codon_id=codon, codon_name=codon,
                            patterns=ALL, **extra)

    create("a", changes=watcher.drain())
    write_tree(work, {"d0/new.txt": "added by a hinted capture\n"})  # never in the index
    with_new = create("b", changes=watcher.drain())
    write_tree(work, {"d1/f1.txt": "edited\n", "d2/f2.txt": None})
    create("c", changes=watcher.drain())
    write_tree(work, {"d0/f0.txt": "after the last checkpoint\n"})
    with monkeypatch.context() as patch:
        patch.setattr(backend, "differing_by_stat",
                      lambda *a: pytest.fail("a trusted hint must not ask git what differs"))
        store.restore(with_new.id, changes=watcher.drain())
    expected = {f"d{i % 3}/f{i}.txt": ("file", f"{i}\n".encode(), False) for i in range(60)}
    expected["d0/new.txt"] = ("file", b"added by a hinted capture\n", False)
    assert read_tree(work) == expected
    # The index holds every restored file again: a scan right after captures all of them.
    scanned = create("d")
    assert store.changed_files(with_new.id, scanned.id) == []


def test_a_full_disk_while_writing_objects_in_process_is_a_storage_error(tmp_path,
                                                                         monkeypatch):
    import errno

    from gitdb.db.loose import LooseObjectDB

    with watched_store(GitCheckpointStore, tmp_path / "exec",
                       {"a.txt": "a\n"}) as (store, work, watcher):
        store.create(kind="completed", run_id="r", codon_id="a", codon_name="a",
                     patterns=ALL, changes=watcher.drain())
        write_tree(work, {"a.txt": "changed\n"})

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as patch:
            patch.setattr(LooseObjectDB, "store", full)
            with pytest.raises(CheckpointStorageError, match="No space left"):
                store.create(kind="completed", run_id="r", codon_id="b", codon_name="b",
                             patterns=ALL, changes=watcher.drain())
        # Nothing half-made is trusted: the next checkpoint scans and holds the change.
        made = store.create(kind="completed", run_id="r", codon_id="c", codon_name="c",
                            patterns=ALL, changes=watcher.drain())
        assert shadow(tmp_path / "exec", "show", f"{made.id}:a.txt") == "changed\n"


def test_a_fork_writes_no_branch_a_planted_commit_message_names(tmp_path):
    """The run branch of a fork's refs comes from the checkpoint's message: one that names a
    path out of the repository (a planted commit) is not written; the checkpoint's own ref
    keeps it."""
    execution_dir = tmp_path / "exec"
    (execution_dir / "agentRoot").mkdir(parents=True)
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    (execution_dir / "agentRoot" / "a.txt").write_text("a")
    made = store.create(kind="completed", run_id="r1", codon_id="a", codon_name="A",
                        patterns=ALL)
    store.close()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    commit = shadow(execution_dir, "cat-file", "commit", made.id)
    planted = commit.replace("[run:r1]", f"[run:x/{'../' * 12}{str(victim)[1:]}]")
    assert planted != commit
    with open(tmp_path / "planted", "w") as handle:
        handle.write(planted)
    sha = shadow(execution_dir, "hash-object", "-t", "commit", "-w",
                 str(tmp_path / "planted")).strip()
    (shadow_dir(execution_dir) / "refs/hankweave/checkpoints" / sha).write_text(sha + "\n")

    GitCheckpointStore(execution_dir).fork_into(tmp_path / "fork", {sha})

    assert victim.read_text() == "precious"
    fork = GitCheckpointStore(tmp_path / "fork")
    fork.initialize()
    assert fork.resolve(sha).id == sha
    fork.close()
