"""Opening the repository: building it, adopting an older one, repairing what a kill left.

Every function here runs while the store initializes, before the first checkpoint is read.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from hankweave.api import CheckpointStorageError, fsync_dir, pid_alive, utc_now_iso

from hankweave_checkpoint_git.commands import GitRunner
from hankweave_checkpoint_git.owned import REPOSITORY_ATTRIBUTES, OwnedFiles
from hankweave_checkpoint_git.records import dated, original_initial, recorded_initial
from hankweave_checkpoint_git.refs import (
    CHECKPOINT_REFS,
    COVERED_PATHS,
    GIT_DIR_NAME,
    INITIAL_BRANCH,
    INITIAL_MESSAGE,
    INITIAL_REF,
    LEGACY_GIT_DIR_NAME,
    RUN_BRANCHES,
    STALE_LOCKS,
)


def open_or_build(checkpoints_dir: Path, git_dir: Path, git: GitRunner, stale_seconds: float,
                  owned: OwnedFiles, runner: Callable[[Path], GitRunner]) -> None:
    """Make ``git_dir`` a usable repository: adopt an older one, remove what killed processes
    left behind, and build it when it is missing (or damaged and empty).

    A repository whose HEAD does not resolve is rebuilt when it holds no checkpoint, and
    refused otherwise.
    """
    migrate_legacy_git_dir(checkpoints_dir, git_dir)
    remove_abandoned_builds(checkpoints_dir)
    if git_dir.exists():
        remove_stale_locks(git_dir, stale_seconds)
        status, _, err = git.call("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        if status != 0:
            if holds_checkpoints(git_dir):
                raise CheckpointStorageError(
                    f"the checkpoint repository {git_dir} is damaged: its HEAD does not "
                    "resolve to a commit, but it holds checkpoints, so it is not rebuilt. "
                    "Repair it with git (HEAD must name a commit), or move it aside to start "
                    f"without checkpoints{': ' + err.strip() if err.strip() else ''}")
            shutil.rmtree(git_dir)
    if not git_dir.exists():
        build_repository(checkpoints_dir, git_dir, owned, runner)


def migrate_legacy_git_dir(checkpoints_dir: Path, git_dir: Path) -> None:
    """Hankweave before 0.10 kept the repository in ``checkpoints/.git``; adopt it."""
    legacy = checkpoints_dir / LEGACY_GIT_DIR_NAME
    if not legacy.is_dir():
        return
    if git_dir.exists():
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        legacy.rename(checkpoints_dir / f"{GIT_DIR_NAME}-quarantine-{stamp}")
    else:
        legacy.rename(git_dir)


def remove_abandoned_builds(checkpoints_dir: Path) -> None:
    """Delete build directories of processes that died before renaming them into place."""
    for leftover in checkpoints_dir.glob(f"{GIT_DIR_NAME}.tmp-*"):
        pid_text = leftover.name.removeprefix(f"{GIT_DIR_NAME}.tmp-").split("-", 1)[0]
        if pid_text.isdigit() and pid_alive(int(pid_text)) and int(pid_text) != os.getpid():
            continue
        shutil.rmtree(leftover, ignore_errors=True)


def remove_stale_locks(git_dir: Path, stale_seconds: float) -> None:
    """Remove the lock files a killed git process left behind.

    git's lock files carry no pid, so age decides: no command this backend runs holds a
    lock for ``stale_seconds``.  A younger lock may belong to a live process
    (another command reading this store), so we wait for it to go or to grow old.
    """
    deadline = time.monotonic() + stale_seconds
    while True:
        locks = lock_files(git_dir)
        now = time.time()
        young = []
        for lock in locks:
            with contextlib.suppress(FileNotFoundError):
                if now - lock.stat().st_mtime < stale_seconds:
                    young.append(lock)
        if not young or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for lock in lock_files(git_dir):
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def lock_files(git_dir: Path) -> list[Path]:
    locks = [git_dir / name for name in STALE_LOCKS if (git_dir / name).exists()]
    for base in (git_dir / "refs", git_dir / "logs" / "refs"):
        for dirpath, _, filenames in os.walk(base):
            locks.extend(Path(dirpath, f) for f in filenames if f.endswith(".lock"))
    return locks


def holds_checkpoints(git_dir: Path) -> bool:
    """Whether the repository's refs name any checkpoint, read without git's help."""
    refs = git_dir / "refs"
    if any(p.is_file() for p in (refs / "hankweave" / "checkpoints").rglob("*")):
        return True
    if any(p.is_file() for p in (refs / "heads").glob("run-*")):
        return True
    with contextlib.suppress(FileNotFoundError):
        packed = (git_dir / "packed-refs").read_text(errors="replace")
        return f" {CHECKPOINT_REFS}" in packed or f" {RUN_BRANCHES}" in packed
    return False


def build_repository(checkpoints_dir: Path, git_dir: Path, owned: OwnedFiles,
                     runner: Callable[[Path], GitRunner]) -> None:
    """Create the repository in a temporary directory and rename it into place."""
    build = checkpoints_dir / f"{GIT_DIR_NAME}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        git = runner(build)
        git.run("init", "--quiet", "--template=", f"--initial-branch={INITIAL_BRANCH}",
                "--object-format=sha1", str(build))
        # The config init wrote (with core.worktree: the path is always passed instead,
        # so the execution directory can move) is replaced by the one the store owns.
        (build / "config").write_bytes(owned.config)
        (build / "info").mkdir(exist_ok=True)
        (build / "info" / "attributes").write_text(REPOSITORY_ATTRIBUTES, encoding="utf-8")
        empty_tree = git.run("mktree", stdin=b"").decode().strip()
        timestamp = utc_now_iso()
        initial = git.run("commit-tree", empty_tree, "-m", f"{INITIAL_MESSAGE}\n",
                          env=dated(timestamp)).decode().strip()
        git.run("update-ref", "--stdin", stdin=(
            f"update refs/heads/{INITIAL_BRANCH} {initial}\n"
            f"update {INITIAL_REF} {initial}\n").encode())
        (build / COVERED_PATHS).parent.mkdir(parents=True, exist_ok=True)
        (build / COVERED_PATHS).write_bytes(b"")
        try:
            os.rename(build, git_dir)
        except OSError:
            if not git_dir.exists():
                raise
            # Another process finished first; use its repository.
        fsync_dir(checkpoints_dir)
    finally:
        shutil.rmtree(build, ignore_errors=True)


def find_initial(git: GitRunner, git_dir: Path) -> str:
    recorded = recorded_initial(git)
    if recorded is not None:
        return recorded
    original = original_initial(git)
    if original is None:
        raise CheckpointStorageError(
            f'the checkpoint repository {git_dir} has no "{INITIAL_MESSAGE}" commit')
    git.run("update-ref", INITIAL_REF, original)  # adopted: the ref answers from now on
    return original
