"""Shadow-git checkpoints for hankweave: the ``git`` checkpoint backend.

A private git repository at ``<exec>/.hankweave/checkpoints/.hankweavecheckpoints`` whose work
tree is ``<exec>/agentRoot``.  Every checkpoint is a commit whose tree is exactly the files the
kernel's resolver selects (:func:`hankweave.workspace.resolve_patterns`), so a file that is gone
is recorded as deleted.  Select it with ``checkpoints.backend = "git"`` (the default).

Layout of the repository (see the README for why):

* ``refs/hankweave/initial`` and ``main``: the empty commit "Initial checkpoint setup";
* ``refs/hankweave/checkpoints/<sha>``: one ref per checkpoint, the only thing keeping it alive;
* ``refs/heads/run-<runId>``: the newest checkpoint of each run;
* each checkpoint commit has the initial commit as its only parent, so pruning one never
  rewrites another (its id is its sha, and state refers to it);
* the commit message is :func:`hankweave.checkpoints.checkpoint_message` followed by a trailer
  paragraph holding a monotonic sequence number (list order) and the patterns used (restore);
* ``hankweave/covered-paths``: every path a checkpoint ever held, NUL-separated, so a restore
  knows which files are "covered" without reading every tree.

Every git call runs with an environment that names this repository and nothing else, and reads
neither the user's nor the system's git configuration.

Modules, one concern each: :mod:`.store` (the :class:`GitCheckpointStore`), :mod:`.owned` (the
repository's config and attributes, kept as written), :mod:`.environment` (the variables and
command-line configuration of every git process), :mod:`.commands` (running git),
:mod:`.repository` (building and repairing the repository), :mod:`.refs` (its names and refs),
:mod:`.records` (checkpoints parsed from commits), :mod:`.objects` (trees and commits written
in-process), :mod:`.coverage` (the index's paths and every path ever held), :mod:`.checkout`
(bringing the work tree to a checkpoint), :mod:`.worktree` (files git may store, removals),
:mod:`.retention` (what a prune keeps), :mod:`.reading` (a checkpoint's files read without
opening the store), :mod:`.fork` (a new execution's repository holding some checkpoints).
"""

from __future__ import annotations

from collections.abc import Callable

from hankweave.api import CheckpointStore, hookimpl

from hankweave_checkpoint_git.commands import GIT_MISSING
from hankweave_checkpoint_git.store import GitCheckpointStore

__all__ = ["GIT_MISSING", "GitCheckpointStore", "register_checkpoint_backends"]


@hookimpl
def register_checkpoint_backends(register: Callable[[type[CheckpointStore]], None]) -> None:
    """Provide the ``git`` backend."""
    register(GitCheckpointStore)
