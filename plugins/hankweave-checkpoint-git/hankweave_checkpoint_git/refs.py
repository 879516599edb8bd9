"""Names in the repository (its directory, refs and files) and writing a ref.

See the package docstring for the layout these names make up.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from hankweave.api import CheckpointStorageError

GIT_DIR_NAME = ".hankweavecheckpoints"
LEGACY_GIT_DIR_NAME = ".git"
"""Where Hankweave before 0.10 kept the repository (moved into place on initialize)."""
INITIAL_MESSAGE = "Initial checkpoint setup"
INITIAL_BRANCH = "main"
INITIAL_REF = "refs/hankweave/initial"
CHECKPOINT_REFS = "refs/hankweave/checkpoints/"
RUN_BRANCHES = "refs/heads/run-"
COVERED_PATHS = "hankweave/covered-paths"

# Lock files git leaves behind when it is killed mid-operation.
STALE_LOCKS = ("index.lock", "HEAD.lock", "config.lock", "packed-refs.lock", "shallow.lock",
               "logs/HEAD.lock")


def read_loose_ref(git_dir: Path, name: str) -> str | None:
    """The value of a loose ref (or HEAD) read straight from its file; None when there is no
    such file (the ref may still be packed)."""
    try:
        return (git_dir / name).read_text().strip()
    except OSError:
        return None


def point_head_at(git_dir: Path, branch: str) -> None:
    """Make HEAD the symbolic ref of ``branch`` (unless it already is)."""
    with contextlib.suppress(OSError):
        if (git_dir / "HEAD").read_text() == f"ref: refs/heads/{branch}\n":
            return
    write_ref(git_dir, "HEAD", f"ref: refs/heads/{branch}")


def write_ref(git_dir: Path, name: str, value: str) -> None:
    """Set a loose ref (or HEAD) as git does: write ``<ref>.lock`` (created exclusively, so
    a git process holding the lock makes this fail rather than interleave), then rename it
    over the ref.  A packed value of the same ref is shadowed by the loose one."""
    from gitdb.util import LockedFD

    path = git_dir / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = LockedFD(str(path))
        fd = lock.open(write=True)
        try:
            os.write(fd, f"{value}\n".encode())
            lock.commit()
        except BaseException:
            lock.rollback()
            raise
    except OSError as exc:  # a held lock, a full disk
        raise CheckpointStorageError(
            f"cannot update {name} in the checkpoint repository {git_dir}: {exc}"
            ) from exc
