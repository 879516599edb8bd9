"""Bringing the index and the work tree to a checkpoint's tree, and the git queries it needs.

The index is only a stat cache here: it lets git find which files differ without reading them.
"""

from __future__ import annotations

import os

from hankweave_checkpoint_git.commands import GitRunner
from hankweave_checkpoint_git.coverage import IndexPaths
from hankweave_checkpoint_git.environment import NO_PROGRAMS_IN_DIFFS
from hankweave_checkpoint_git.objects import ObjectDatabase
from hankweave_checkpoint_git.worktree import nul_join

RESTORE_BY_PATH_LIMIT = 2000
"""A restore checks out at most this many differing paths one by one (or a quarter of the
tree); beyond that, resetting the whole index to the checkpoint is cheaper."""


def tree_paths(git: GitRunner, sha: str) -> list[str]:
    """Every file path of a commit's tree, sorted."""
    listed = git.run("ls-tree", "-r", "-z", "--name-only", sha)
    return sorted(os.fsdecode(p) for p in listed.split(b"\0") if p)


def changed_since_index(git: GitRunner) -> list[str]:
    """Paths whose work-tree file differs from the index entry (modified, deleted, a new
    mode or kind), found by git from the index's stat data and, for entries changed in
    the index's own timestamp tick, by content."""
    out = git.run("diff-files", *NO_PROGRAMS_IN_DIFFS, "-z", "--name-only", "--no-renames",
                  in_work_tree=True)
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def differing_by_stat(git: GitRunner, sha: str, target: frozenset[str]) -> list[str]:
    """The target's files that the work tree holds otherwise, as git finds them from the
    index's stat data (``diff-index``; a file missing from the index differs too)."""
    out = git.run("diff-index", *NO_PROGRAMS_IN_DIFFS, "-z", "--name-only", "--no-renames",
                  sha, in_work_tree=True)
    return [p for p in (os.fsdecode(p) for p in out.split(b"\0") if p) if p in target]


def differing_by_hint(git: GitRunner, objects: ObjectDatabase, index: IndexPaths, sha: str,
                      base_tree: str, paths: frozenset[str],
                      target: frozenset[str]) -> list[str]:
    """The same from what the last capture held and what changed since: the files its tree
    and the target's differ in, every file at or below a hinted path, and the target's
    files the index lacks (a hinted capture does not write the index, and a checked-out
    file enters it)."""
    target_tree = objects.commit_tree(sha)
    differing = objects.differing(base_tree, target_tree)
    for rel in paths:
        differing |= objects.paths_under(base_tree, rel)
        differing |= objects.paths_under(target_tree, rel)
    differing |= target - index.paths(git)
    return sorted(differing.intersection(target))


def write_back(git: GitRunner, index: IndexPaths, sha: str, target: frozenset[str],
               differing: list[str]) -> None:
    """Make the index and the work tree's files of ``target`` exactly the commit's.

    Only the ``differing`` files are written: those paths are checked out, and index
    entries the commit does not hold are dropped.  When that is most of the tree, or a
    path cannot be checked out alone (something in the way), the whole index is reset to
    the commit instead (``read-tree --reset -u``, which also writes only what differs).
    """
    stale = index.paths(git) - target
    if len(differing) + len(stale) <= max(RESTORE_BY_PATH_LIMIT, len(target) // 4):
        if stale:
            git.run("update-index", "--force-remove", "-z", "--stdin",
                    stdin=nul_join(sorted(stale)), in_work_tree=True)
        status = 0
        if differing:
            status, _, _ = git.call("checkout", sha, "--pathspec-from-file=-",
                                    "--pathspec-file-nul", stdin=nul_join(differing),
                                    in_work_tree=True)
        if status == 0:
            return
    # --reset overwrites files that are in the way (they are covered: the target holds them).
    git.run("read-tree", "--reset", "-u", sha, in_work_tree=True)
