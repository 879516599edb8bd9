"""Forking the repository: a new execution's repository holding some of this one's checkpoints.

The source is only read: its commits with the ``git`` executable alone, as ``list_read_only``
reads them, and its object files, each hard-linked into the new repository (git never writes
an object file again, and a later gc of either repository only unlinks its own names), or
copied where the file system cannot link.  Nothing runs in the source that could write it:
no gc, no repack, no index.

The new repository is built beside its place and renamed into it, as a new one is.  Its config
and attributes are the backend's own; HEAD is ``main`` at the initial checkpoint; its refs keep
exactly the kept checkpoints: ``refs/hankweave/initial``, one ``refs/hankweave/checkpoints/<sha>``
each, and each run's branch at its newest kept checkpoint.  It has no index and no
covered-paths file: the store rebuilds both from the kept checkpoints when it first needs them.

The source may be written meanwhile.  An object written since is not needed (the kept commits
and everything they name were complete before); one repacked meanwhile (its loose file gone,
a new pack in its place) is found by another pass over the object directory.  Before it is
renamed into place, the new repository is checked to hold every object the kept checkpoints
need.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path

from hankweave.api import (
    CheckpointNotFoundError,
    CheckpointStorageError,
    fsync_dir,
)

from hankweave_checkpoint_git.commands import GitReader
from hankweave_checkpoint_git.owned import REPOSITORY_ATTRIBUTES
from hankweave_checkpoint_git.records import Record
from hankweave_checkpoint_git.refs import (
    CHECKPOINT_REFS,
    GIT_DIR_NAME,
    INITIAL_BRANCH,
    INITIAL_REF,
    write_ref,
)

LINK_PASSES = 3
"""Passes over the source's object directory before a missing object is reported (each pass
only links what the previous ones did not)."""

_FAN_OUT = re.compile(r"[0-9a-f]{2}")
_LOOSE = re.compile(r"[0-9a-f]{38}")
_PACK = re.compile(r"pack-[0-9a-f]{40}\.pack")
_RUN_BRANCH = re.compile(r"run-[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
"""A run branch as :func:`~hankweave.checkpoints.run_branch` names one."""



def kept_records(records: Sequence[Record], keep: Collection[str], initial: str,
                 git_dir: Path) -> list[Record]:
    """The records (newest first) of the ``keep`` ids and of the initial checkpoint; an id
    that names no checkpoint raises :class:`CheckpointNotFoundError`."""
    wanted = {ident.strip().lower() for ident in keep} | {initial}
    kept = [r for r in records if r.checkpoint.id in wanted]
    unknown = wanted.difference(r.checkpoint.id for r in kept)
    if unknown:
        raise CheckpointNotFoundError(
            f"cannot fork the checkpoint repository {git_dir}: it holds no checkpoint "
            f"{', '.join(sorted(unknown))}")
    return kept


def fork_repository(source: GitReader, git_dir: Path, execution_dir: Path,
                    kept: Sequence[Record], initial: str, config: bytes) -> None:
    """Build the repository ``git_dir`` (of the execution ``execution_dir``) holding the
    ``kept`` checkpoints of ``source``'s repository; ``config``: the bytes its config gets."""
    checkpoints_dir = git_dir.parent
    build = checkpoints_dir / f"{GIT_DIR_NAME}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        _skeleton(build, config)
        _refs(build, kept, initial)
        reader = GitReader(build, checkpoints_dir, execution_dir)
        shas = sorted({r.checkpoint.id for r in kept})
        missing: list[str] = []
        for _ in range(LINK_PASSES):
            share_objects(source.git_dir / "objects", build / "objects")
            missing = missing_objects(reader, shas)
            if not missing:
                break
        else:
            raise CheckpointStorageError(
                f"cannot fork the checkpoint repository {source.git_dir}: after "
                f"{LINK_PASSES} passes over its objects, the fork still lacks "
                f"{', '.join(missing[:5])}{' and more' if len(missing) > 5 else ''}")
        os.rename(build, git_dir)
        fsync_dir(checkpoints_dir)
    except OSError as exc:
        raise CheckpointStorageError(
            f"cannot fork the checkpoint repository {source.git_dir} into {git_dir}: "
            f"{exc}") from exc
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _skeleton(build: Path, config: bytes) -> None:
    """What ``git init --template=`` makes, with the backend's config and attributes."""
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
        (build / sub).mkdir(parents=True)
    (build / "config").write_bytes(config)
    (build / "info" / "attributes").write_text(REPOSITORY_ATTRIBUTES, encoding="utf-8")


def _refs(build: Path, kept: Sequence[Record], initial: str) -> None:
    """The refs of the kept checkpoints (newest first), loose as the store writes them."""
    write_ref(build, "HEAD", f"ref: refs/heads/{INITIAL_BRANCH}")
    write_ref(build, f"refs/heads/{INITIAL_BRANCH}", initial)
    write_ref(build, INITIAL_REF, initial)
    tips: dict[str, str] = {}
    for record in kept:
        sha = record.checkpoint.id
        if sha != initial:
            write_ref(build, f"{CHECKPOINT_REFS}{sha}", sha)
            tips.setdefault(record.checkpoint.branch, sha)
    for branch, sha in tips.items():
        if _RUN_BRANCH.fullmatch(branch) and ".." not in branch:
            write_ref(build, f"refs/heads/{branch}", sha)
        # else: a name read from a commit message that is no branch this store makes (a
        # planted one could name a path outside); the checkpoint's own ref keeps it.


def share_objects(source: Path, target: Path) -> None:
    """Link (or copy) into ``target`` every object file of ``source`` it lacks.

    Loose objects first, then packs: a repack writes its new pack before it removes the loose
    files, so an object gone from its loose file is in a pack listed after.  A pack is taken
    with its index, or not at all.  Temp files of writers (``tmp_*``) are never taken.
    """
    with os.scandir(source) as entries:
        fans = sorted(e.name for e in entries if _FAN_OUT.fullmatch(e.name))
    for fan in fans:
        try:
            names = os.listdir(source / fan)
        except FileNotFoundError:
            continue  # emptied and removed by a repack meanwhile
        loose = [name for name in names if _LOOSE.fullmatch(name)]
        if loose:
            (target / fan).mkdir(exist_ok=True)
        for name in loose:
            _share(source / fan / name, target / fan / name)
    try:
        packs = sorted(name for name in os.listdir(source / "pack") if _PACK.fullmatch(name))
    except FileNotFoundError:
        packs = []
    for pack in packs:
        index = pack.removesuffix(".pack") + ".idx"
        if os.path.lexists(target / "pack" / index):
            continue
        if _share(source / "pack" / pack, target / "pack" / pack) and not _share(
                source / "pack" / index, target / "pack" / index):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target / "pack" / pack)  # removed by a repack meanwhile


def _share(source: Path, target: Path) -> bool:
    """Hard-link ``source`` as ``target``, or copy it where linking fails; False when the
    source is gone (repacked or pruned since it was listed)."""
    if os.path.lexists(target):
        return True
    try:
        os.link(source, target)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        pass  # another file system, or hard links refused: copy
    try:
        shutil.copyfile(source, target)
    except FileNotFoundError:
        return False
    return True


def missing_objects(reader: GitReader, shas: Sequence[str]) -> list[str]:
    """What of the commits ``shas`` and everything they reach the repository lacks."""
    stdin = "".join(f"{sha}\n" for sha in shas).encode()
    checked = reader.run("cat-file", "--batch-check=%(objectname) %(objecttype)", stdin=stdin)
    absent = [line.split(b" ", 1)[0].decode() for line in checked.splitlines()
              if not line.endswith(b" commit")]
    if absent:
        return [f"checkpoint {sha}" for sha in absent]
    status, out, err = reader.call("rev-list", "--objects", "--missing=print", "--stdin",
                                   stdin=stdin)
    if status != 0:  # a missing parent (of a Hankweave 0.10.0 checkpoint) stops rev-list
        return [err.strip() or f"what rev-list needs (exit status {status})"]
    return [f"object {line[1:].decode()}" for line in out.splitlines() if line.startswith(b"?")]
