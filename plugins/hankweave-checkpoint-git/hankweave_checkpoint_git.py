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
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import functools
import io
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from hankweave.api import (
    DATA_LINK,
    AmbiguousCheckpointError,
    ChangeHint,
    Checkpoint,
    CheckpointKind,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointStore,
    FileChange,
    RetentionPolicy,
    WorkspaceScan,
    checkpoint_message,
    fsync_dir,
    hookimpl,
    kill_point,
    parse_iso,
    pid_alive,
    private_dir,
    run_branch,
    utc_now_iso,
)

__all__ = ["GIT_MISSING", "GitCheckpointStore", "register_checkpoint_backends"]

log = logging.getLogger("hankweave.checkpoints.git")

GIT_DIR_NAME = ".hankweavecheckpoints"
LEGACY_GIT_DIR_NAME = ".git"
"""Where Hankweave before 0.10 kept the repository (moved into place on initialize)."""
INITIAL_MESSAGE = "Initial checkpoint setup"
INITIAL_BRANCH = "main"
INITIAL_REF = "refs/hankweave/initial"
CHECKPOINT_REFS = "refs/hankweave/checkpoints/"
RUN_BRANCHES = "refs/heads/run-"
COVERED_PATHS = "hankweave/covered-paths"
IDENTITY_NAME = "Hankweave Runtime"
IDENTITY_EMAIL = "runtime@hankweave.invalid"
LAYOUT_VERSION = "2"
"""Written into the repository's config (``hankweave.layout``) and bumped when
:func:`repository_config` changes.  A config without this version's line is an older layout,
brought up to date without a warning; a changed config with it was changed by someone else."""

GIT_MISSING = (
    "the git checkpoint backend needs the git executable; install git or choose "
    'checkpoints.backend = "snapshot"'
)

_CONFIG = """\
# Written by hankweave. Any change to this file is undone before the next git command
# (docs/checkpoints.md, "What is trusted").
[core]
\trepositoryformatversion = 0
\tfilemode = {filemode}
\tbare = false
\tautocrlf = false
\tsymlinks = true
\tlogallrefupdates = false
\thooksPath = {devnull}
\tfsmonitor = false
\tuntrackedCache = false
\tquotePath = false
{filesystem}[user]
\tname = {name}
\temail = {email}
[commit]
\tgpgsign = false
[tag]
\tgpgsign = false
[gc]
\tauto = 0
[maintenance]
\tauto = false
[hankweave]
\tlayout = {layout}
"""
_LAYOUT_LINE = f"[hankweave]\n\tlayout = {LAYOUT_VERSION}\n".encode()


def repository_config(*, filemode: bool, ignorecase: bool, precomposeunicode: bool) -> bytes:
    """The exact bytes of the repository's ``config``.

    What the backend needs and nothing else: no include, no filter or diff driver, no program.
    No reflogs (they would keep pruned checkpoints' objects alive); garbage collection only
    when :meth:`GitCheckpointStore.prune` asks for it.  The three flags are what ``git init``
    would have found out about the disk, found the same way (:func:`_probe_filesystem`).
    """
    filesystem = "".join(
        f"\t{key} = true\n" for key, on in (("ignorecase", ignorecase),
                                            ("precomposeunicode", precomposeunicode)) if on)
    return _CONFIG.format(filemode=str(filemode).lower(), devnull=os.devnull,
                          filesystem=filesystem, name=IDENTITY_NAME, email=IDENTITY_EMAIL,
                          layout=LAYOUT_VERSION).encode()


# info/attributes outranks every .gitattributes in agentRoot: the agent's eol, filter or
# encoding attributes must not change the bytes we store and write back.
REPOSITORY_ATTRIBUTES = (
    "# hankweave: checkpoints store and restore files byte for byte\n"
    "* -text -eol -filter -ident -working-tree-encoding\n"
)

SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", os.devnull),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),  # git's own name for "no pager"
    ("core.editor", ":"),  # the shell's no-op: git runs an editor through the shell
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", ":"),
    ("credential.helper", ""),  # an empty value empties the list of helpers
    ("protocol.allow", "never"),  # no transport at all: no ssh, no remote helper, no fetch
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),  # gpg.program only runs to sign or to verify
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
"""Configuration every git process gets with command-line scope (``GIT_CONFIG_COUNT``), which
outranks the repository's own ``config`` and every file it includes: whatever those say, no
hook, file-system monitor, attributes file, pager, editor, password prompt, ssh command,
credential helper, transport, signing program or background maintenance runs."""

_DRIVER_OVERRIDES: dict[str, tuple[tuple[str, str], ...]] = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("command", ""), ("textconv", ""), ("cachetextconv", "false")),
    "merge": (("driver", ""),),
}
"""For each filter, diff or merge driver the repository's configuration defines, the values
that take its programs away (git runs no filter whose command is empty)."""

NO_PROGRAMS_IN_DIFFS = ("--no-ext-diff", "--no-textconv")
"""Passed to every command that compares trees or files: no external diff, no textconv."""

# Lock files git leaves behind when it is killed mid-operation.
STALE_LOCKS = ("index.lock", "HEAD.lock", "config.lock", "packed-refs.lock", "shallow.lock",
               "logs/HEAD.lock")

HINTED_PATH_LIMIT = 5000
"""A change hint naming more paths than this is not worth following: the store scans."""

RESTORE_BY_PATH_LIMIT = 2000
"""A restore checks out at most this many differing paths one by one (or a quarter of the
tree); beyond that, resetting the whole index to the checkpoint is cheaper."""

_SUBJECT = re.compile(
    r"(?P<kind>rig-setup|completed|error|skipped|exit):(?P<codon>.*?) "
    r"\[run:(?P<run>[^\]]*)\](?: .*)?"
)
_TRAILER_PREFIX = "Hankweave-"
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class _Base:
    """What the store's last capture saw: the hint it ended at, its patterns, its tree."""

    watcher: str
    epoch: int
    patterns: tuple[str, ...]
    tree: str


def _continues(base: _Base, hint: ChangeHint | None, patterns: tuple[str, ...]) -> bool:
    """Whether ``hint`` covers exactly the time since the capture ``base`` describes."""
    return (hint is not None and hint.complete and hint.watcher == base.watcher
            and hint.since == base.epoch and patterns == base.patterns)


@dataclass(frozen=True)
class _Record:
    """A listed checkpoint plus what only this backend needs to know about it."""

    checkpoint: Checkpoint
    order: tuple[float, ...]
    patterns: tuple[str, ...] | None  # None: made by Hankweave 0.10.0, patterns unknown
    sequence: int | None  # None: not made by this backend, so not prunable


def _gitpython() -> ModuleType:
    """Import GitPython, turning "no git executable" into a clear storage error."""
    try:
        import git
    except ModuleNotFoundError as exc:
        if exc.name != "git":
            raise
        raise CheckpointStorageError(
            "the git checkpoint backend needs GitPython: pip install GitPython") from exc
    except ImportError as exc:
        # GitPython refuses to import when it cannot run `git version`.
        raise CheckpointStorageError(GIT_MISSING) from exc
    return git


def _command_line_config(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``pairs`` as ``GIT_CONFIG_COUNT``/``KEY_<n>``/``VALUE_<n>`` variables: configuration
    with command-line scope (git 2.31+), without touching the argument list."""
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for number, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{number}"] = key
        env[f"GIT_CONFIG_VALUE_{number}"] = value
    return env


def _driver_overrides(drivers: Iterable[tuple[str, str]]) -> builtins.list[tuple[str, str]]:
    """The :data:`_DRIVER_OVERRIDES` of each ``(section, name)`` driver."""
    return [(f"{section}.{name}.{key}", value)
            for section, name in sorted(set(drivers))
            for key, value in _DRIVER_OVERRIDES[section]]


def _driver_names(listed: bytes) -> set[tuple[str, str]]:
    """The filter, diff and merge drivers named in ``git config --list --name-only -z``
    output (sections and keys come lower-cased; a driver's name may hold dots)."""
    found = set()
    for entry in listed.split(b"\0"):
        section, _, rest = os.fsdecode(entry).strip().partition(".")
        name, dot, _ = rest.rpartition(".")
        if section in _DRIVER_OVERRIDES and dot and name:
            found.add((section, name))
    return found


def _may_define_drivers(config: bytes) -> bool:
    """Whether a config's bytes could define a driver or include a file that does: git
    spells section names literally (any letter case, no escapes), so a config without these
    words defines none, and listing it (one more git process) can be skipped."""
    lowered = config.lower()
    return any(word in lowered for word in (b"filter", b"diff", b"merge", b"include"))


def _probe_filesystem(directory: Path) -> dict[str, bool]:
    """What ``git init`` finds out about the disk ``directory`` is on, found the same way: an
    executable bit that sticks (``core.filemode``), a name that also answers in another
    letter case (``core.ignorecase``), a precomposed name that answers decomposed (macOS,
    ``core.precomposeunicode``)."""
    probe = directory / f"hankweave-probe-{os.getpid()}-{secrets.token_hex(4)}"
    probe.write_bytes(b"")
    try:
        before = probe.stat().st_mode
        probe.chmod(before ^ stat.S_IXUSR)
        filemode = probe.stat().st_mode != before
        ignorecase = os.path.exists(directory / probe.name.upper())
    finally:
        probe.unlink()
    precompose = False
    if sys.platform == "darwin":
        composed = directory / f"hankweave-probe-{os.getpid()}-\u00c4"
        composed.write_bytes(b"")
        try:
            precompose = os.path.exists(directory / composed.name.replace("\u00c4", "A\u0308"))
        finally:
            composed.unlink()
    return {"filemode": filemode, "ignorecase": ignorecase, "precomposeunicode": precompose}


def _read_plain(directory: Path, name: str, *, follow_directory: bool) -> bytes | None:
    """The bytes of the regular file ``directory/name``; None when it is missing, is not a
    regular file or a symlink, or (unless ``follow_directory``) ``directory`` is a symlink."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | (0 if follow_directory else nofollow)
    try:
        dir_fd = os.open(directory, flags)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | nofollow, dir_fd=dir_fd)
        with open(fd, "rb") as fh:
            return fh.read() if stat.S_ISREG(os.fstat(fh.fileno()).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(dir_fd)


@functools.cache
def _canonical_configs() -> frozenset[bytes]:
    """Every config the backend may have written: one per combination of the disk's flags.
    Accepting any of them gives nothing away (they are booleans about the disk), and spares
    probing the disk, or writing, on every store opened on a disk that cannot be written."""
    return frozenset(
        repository_config(filemode=a, ignorecase=b, precomposeunicode=c)
        for a, b, c in itertools.product((False, True), repeat=3))


class _OwnedFiles:
    """The repository's ``config`` and ``info/attributes``, kept exactly as the backend writes
    them.

    git reads both from the repository, and an agent can write both from ``agentRoot``: a
    config names programs (``core.fsmonitor``, hooks, filter and diff drivers, included
    files that name more) and the attributes pick the drivers.  :meth:`enforce` runs before
    every git process of the store; it reads the two small files and, when either differs
    from its canonical bytes, puts the canonical bytes back atomically and says so.
    """

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self._config: bytes | None = None

    @property
    def config(self) -> bytes:
        """The config to write: probed (:func:`_probe_filesystem`) the first time it is
        needed, beside the repository."""
        if self._config is None:
            self._config = repository_config(**_probe_filesystem(self.git_dir.parent))
        return self._config

    def enforce(self) -> None:
        """Restore whichever file differs; a repository not yet built is left alone."""
        config = _read_plain(self.git_dir, "config", follow_directory=True)
        upgrading = False
        if config not in _canonical_configs():
            if config is None and not self.git_dir.is_dir():
                return  # nothing built yet: _build_repository writes both files
            # A config of an older layout (or Hankweave 0.10.0's) is brought up to date.
            upgrading = config is not None and _LAYOUT_LINE not in config
            self._restore(self.git_dir, "config", self.config, quietly=upgrading)
        info = self.git_dir / "info"
        attributes = REPOSITORY_ATTRIBUTES.encode()
        if _read_plain(info, "attributes", follow_directory=False) != attributes:
            self._restore(info, "attributes", attributes, quietly=upgrading)

    @staticmethod
    def _restore(directory: Path, name: str, data: bytes, *, quietly: bool) -> None:
        _replace_file(directory, name, data)
        if not quietly:
            what = "config" if name == "config" else "info/attributes"
            log.warning("the checkpoint repository's %s had been changed, probably by an "
                        "agent; restored (%s)", what, directory / name)


def _replace_file(directory: Path, name: str, data: bytes) -> None:
    """Write ``directory/name`` atomically; a symlink or file where ``directory`` should be
    is replaced by a real directory first."""
    try:
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            directory.unlink()
        directory.mkdir(exist_ok=True)
        tmp = directory / f"{name}.hankweave-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)
    except OSError as exc:
        raise CheckpointStorageError(
            f"the checkpoint repository's {directory / name} was changed and cannot be put "
            f"back, so git is not run against it: {exc}") from exc


class _GitCommands(abc.ABC):
    """git commands against one repository, isolated from everything else on the machine.

    :meth:`environment` overrides every variable that could point git at another repository,
    index, object store, configuration or attribute source, so a runtime started from inside a
    git hook (which exports ``GIT_DIR`` and ``GIT_INDEX_FILE``) still only touches the shadow
    repository.  Subclasses say how a git process is started (:meth:`call`).
    """

    git_dir: Path

    @staticmethod
    def environment(git_dir: Path, work_tree: Path | None, home: Path, ceiling: Path,
                    drivers: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
        """The variables every call sets: this repository, no outside configuration, and the
        :data:`SAFE_CONFIG` (plus the overrides that empty each of ``drivers``, pairs of
        section and driver name) with command-line scope."""
        return {
            **_command_line_config([*SAFE_CONFIG, *_driver_overrides(drivers)]),
            "GIT_DIR": str(git_dir),
            **({"GIT_WORK_TREE": str(work_tree)} if work_tree is not None else {}),
            "GIT_COMMON_DIR": str(git_dir),
            "GIT_INDEX_FILE": str(git_dir / "index"),
            "GIT_OBJECT_DIRECTORY": str(git_dir / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
            "GIT_GRAFT_FILE": str(git_dir / "info" / "grafts"),
            "GIT_SHALLOW_FILE": str(git_dir / "shallow"),
            "GIT_NAMESPACE": "",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_CEILING_DIRECTORIES": str(ceiling),
            "GIT_DISCOVERY_ACROSS_FILESYSTEM": "0",
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home),
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_SYSTEM": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_PARAMETERS": "",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TEMPLATE_DIR": "",
            "GIT_DEFAULT_HASH": "sha1",
            "GIT_DEFAULT_REF_FORMAT": "files",
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_GLOB_PATHSPECS": "0",
            "GIT_NOGLOB_PATHSPECS": "0",
            "GIT_ICASE_PATHSPECS": "0",
            "GIT_TERMINAL_PROMPT": "0",
            # The caller's own variables outrank the configuration; these are git's "none".
            "GIT_PAGER": "cat",
            "GIT_EDITOR": ":",
            "GIT_SEQUENCE_EDITOR": ":",
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
            "GIT_AUTHOR_NAME": IDENTITY_NAME,
            "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
            "GIT_COMMITTER_NAME": IDENTITY_NAME,
            "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
        }

    def run(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        in_work_tree: bool = False,
        ok: Iterable[int] = (0,),
    ) -> bytes:
        """Run ``git <args>`` and return its stdout; a status outside ``ok`` raises."""
        status, out, err = self.call(*args, stdin=stdin, env=env, in_work_tree=in_work_tree)
        if status not in tuple(ok):
            detail = err.strip() or f"exit status {status}"
            raise CheckpointStorageError(
                f"git {args[0]} failed in the checkpoint repository {self.git_dir}: {detail}")
        return out

    @abc.abstractmethod
    def call(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        in_work_tree: bool = False,
    ) -> tuple[int, bytes, str]:
        """Run ``git <args>``; return ``(status, stdout, stderr)`` whatever the status."""


class _Git(_GitCommands):
    """Runs git commands through GitPython, which starts each process from ``os.environ``.

    ``owned`` (the store's repository, not one being built) is enforced before every process,
    so git only ever reads the backend's own config and attributes.
    """

    def __init__(self, git_dir: Path, work_tree: Path, home: Path, ceiling: Path,
                 owned: _OwnedFiles | None = None) -> None:
        git = _gitpython()
        self._git_module = git
        self.git_dir = git_dir
        self.work_tree = work_tree
        self._owned = owned
        self._env = self.environment(git_dir, work_tree, home, ceiling)
        self._in_home = git.Git(str(home))
        self._in_work_tree = git.Git(str(work_tree))

    def call(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        in_work_tree: bool = False,
    ) -> tuple[int, bytes, str]:
        """Run ``git <args>``; return ``(status, stdout, stderr)`` whatever the status."""
        if self._owned is not None:
            self._owned.enforce()
        runner = self._in_work_tree if in_work_tree else self._in_home
        command = [self._git_module.Git.GIT_PYTHON_GIT_EXECUTABLE, *args]
        full_env = {**self._env, **env} if env else self._env
        try:
            with contextlib.ExitStack() as stack:
                istream = None
                if stdin is not None:
                    # GitPython hands stdin to Popen, which needs a real file descriptor.
                    istream = stack.enter_context(tempfile.TemporaryFile())
                    istream.write(stdin)
                    istream.seek(0)
                status, out, err = runner.execute(
                    command, istream=istream, env=full_env, with_extended_output=True,
                    with_exceptions=False, stdout_as_string=False,
                    strip_newline_in_stdout=False)
        except self._git_module.exc.GitCommandNotFound as exc:
            raise CheckpointStorageError(GIT_MISSING) from exc
        except OSError as exc:
            raise CheckpointStorageError(f"could not run git for the checkpoint repository "
                                         f"{self.git_dir}: {exc}") from exc
        return int(status or 0), out, err if isinstance(err, str) else err.decode(errors="replace")


class _GitReader(_GitCommands):
    """Runs read-only git commands with the ``git`` executable alone, for
    :meth:`GitCheckpointStore.list_read_only`.

    GitPython is not imported: ``hankweave inspect`` must not import ``git``.  The executable
    is the one GitPython would run (``GIT_PYTHON_GIT_EXECUTABLE``, else ``git`` on ``PATH``),
    in the same locale.  No work tree is named: reading needs none, and git refuses a
    ``GIT_WORK_TREE`` that does not exist, which the reader must not create.

    The reader writes nothing, so it cannot put the repository's config back as the store
    does: every filter, diff and merge driver that config (or a file it includes) defines is
    emptied on each command line instead, beside the :data:`SAFE_CONFIG`.  Listing the
    configuration runs no program.
    """

    def __init__(self, git_dir: Path, home: Path, ceiling: Path) -> None:
        self.git_dir = git_dir
        self._home = home
        # An inherited GIT_WORK_TREE (a git hook exports one) must not survive either.
        inherited = {k: v for k, v in os.environ.items() if k != "GIT_WORK_TREE"}
        self._env = {**inherited, "LANGUAGE": "C", "LC_ALL": "C",
                     **self.environment(git_dir, None, home, ceiling)}
        self._executable = os.environ.get("GIT_PYTHON_GIT_EXECUTABLE") or "git"
        try:
            config = (git_dir / "config").read_bytes()
        except OSError:
            config = None  # git says what is wrong when the listing runs
        if config is None or _may_define_drivers(config):
            # A config git cannot read fails the listing itself, with git's message.
            _, listed, _ = self.call("config", "--list", "--includes", "--name-only", "-z")
            self._env.update(
                self.environment(git_dir, None, home, ceiling, _driver_names(listed)))

    def call(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        in_work_tree: bool = False,
    ) -> tuple[int, bytes, str]:
        """Run ``git <args>`` in the repository's parent directory."""
        if in_work_tree:
            raise ValueError("a _GitReader names no work tree to run git in")
        try:
            done = subprocess.run(
                [self._executable, *args], input=stdin, capture_output=True, check=False,
                cwd=self._home, env={**self._env, **env} if env else self._env)
        except FileNotFoundError as exc:
            raise CheckpointStorageError(GIT_MISSING) from exc
        except OSError as exc:
            raise CheckpointStorageError(f"could not run git for the checkpoint repository "
                                         f"{self.git_dir}: {exc}") from exc
        return done.returncode, done.stdout, done.stderr.decode(errors="replace")


class GitCheckpointStore(CheckpointStore):
    """Checkpoints as commits in a shadow git repository beside ``agentRoot/``.

    After :meth:`restore` HEAD is detached at the restored checkpoint, as in Hankweave 0.10.0;
    the next :meth:`create` moves HEAD to the run's branch.
    """

    name: ClassVar[str] = "git"
    accepts_change_hints: ClassVar[bool] = True

    stale_lock_seconds: ClassVar[float] = 2.0
    """A git lock file at least this old is taken as left behind by a killed process."""

    def __init__(self, execution_dir: Path) -> None:
        super().__init__(Path(execution_dir).absolute())
        self.checkpoints_dir = self.execution_dir / ".hankweave" / "checkpoints"
        self.git_dir = self.checkpoints_dir / GIT_DIR_NAME
        self._git: _Git | None = None
        self._owned = _OwnedFiles(self.git_dir)
        self._initial: str | None = None
        self._sequence = 0
        self._covered: set[str] | None = None
        self._index_cache: tuple[tuple[int, int, int], frozenset[str]] | None = None
        self._trees: dict[str, frozenset[str]] = {}
        self._base: _Base | None = None
        self._object_db: _Objects | None = None
        self._scan = WorkspaceScan(self.work_tree, self.checkpoints_dir / "fs-clock")

    # ----- lifecycle -----

    def initialize(self) -> str:
        """Open (or build) the shadow repository and return the initial checkpoint's sha.

        Repairs what a killed git process leaves behind: stale lock files, an abandoned build
        directory, an unreadable index (it is only a cache here).  A repository whose HEAD does
        not resolve is rebuilt when it holds no checkpoint, and refused otherwise.
        """
        # 0700 (an older one narrowed): git's own files inside keep git's modes, out of reach.
        private_dir(self.checkpoints_dir, tighten=True)
        # git refuses a GIT_WORK_TREE that does not exist, even for commands that never read it.
        self.work_tree.mkdir(parents=True, exist_ok=True)
        self._git = None
        self._initial = None
        self._base = None
        self._object_db = None
        git = self._runner(self.git_dir)
        self._migrate_legacy_git_dir()
        self._remove_abandoned_builds()
        if self.git_dir.exists():
            self._remove_stale_locks()
            status, _, err = git.call("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
            if status != 0:
                if self._holds_checkpoints():
                    raise CheckpointStorageError(
                        f"the checkpoint repository {self.git_dir} is damaged: its HEAD does not "
                        "resolve to a commit, but it holds checkpoints, so it is not rebuilt. "
                        "Repair it with git (HEAD must name a commit), or move it aside to start "
                        f"without checkpoints{': ' + err.strip() if err.strip() else ''}")
                shutil.rmtree(self.git_dir)
        if not self.git_dir.exists():
            self._build_repository()
        # The config and attributes are put right (an older layout brought up to date) by
        # the first git command below, as before every git command.
        self._initial = self._find_initial(git)
        self._check_index(git)
        self._covered = None
        records = self._records()
        self._sequence = max((r.sequence or 0 for r in records), default=0)
        return self._initial

    def close(self) -> None:
        """Forget cached state; the repository itself needs no closing."""
        self._git = None
        self._covered = None
        self._index_cache = None
        self._base = None
        self._object_db = None
        self._scan.forget()

    # ----- creating -----

    def create(
        self,
        *,
        kind: CheckpointKind,
        run_id: str,
        codon_id: str,
        codon_name: str,
        patterns: Sequence[str],
        duration_ms: int | None = None,
        changes: ChangeHint | None = None,
    ) -> Checkpoint:
        """Commit exactly the files ``patterns`` select on branch ``run-<run_id>``.

        With a change hint that continues from this store's previous capture, only the hinted
        paths are read and the tree is the previous one with those paths replaced; otherwise
        the work tree is scanned.  Both give the same tree for the same files.
        """
        git, initial = self._ready()
        # An agent may have deleted agentRoot itself; git needs the work tree to exist.
        self.work_tree.mkdir(parents=True, exist_ok=True)
        patterns = tuple(patterns)
        base, self._base = self._base, None  # a failure below leaves no base to continue from
        tree = None
        if base is not None and _continues(base, changes, patterns):
            assert changes is not None
            tree = self._tree_by_hint(base.tree, patterns, changes.paths)
        if tree is None:
            tree = self._tree_by_scan(git, patterns)
        timestamp = utc_now_iso()
        sequence = self._sequence + 1
        message = checkpoint_message(kind, codon_id, run_id, codon_name, timestamp, duration_ms)
        trailers = (f"{_TRAILER_PREFIX}Sequence: {sequence}\n"
                    f"{_TRAILER_PREFIX}Patterns: {json.dumps(list(patterns))}\n")
        sha = self._objects().commit(tree, initial, f"{message}\n{trailers}", timestamp)
        kill_point("checkpoint.commit")  # test-only: the commit exists, no ref keeps it yet
        branch = run_branch(run_id)
        # The checkpoint's own ref first: from then on it is kept, whatever happens next.
        self._write_ref(f"{CHECKPOINT_REFS}{sha}", sha)
        self._write_ref(f"refs/heads/{branch}", sha)
        self._sequence = sequence
        self._point_head_at(branch)
        if changes is not None:
            self._base = _Base(changes.watcher, changes.until, patterns, tree)
        return Checkpoint(id=sha, kind=kind, message=message, timestamp=timestamp, branch=branch,
                          run_id=run_id, codon_id=codon_id)

    def _tree_by_scan(self, git: _Git, patterns: tuple[str, ...]) -> str:
        """The tree of the files the patterns select now, through the index."""
        files = self._scan.resolve(patterns)
        wanted = set(files)
        index = self._index_paths(git)
        gone = index - wanted
        # What to (re)write into the index: files new to it, and those whose content, mode or
        # kind differs from it, which git finds from the index's stat data (diff-files).
        changed = [path for path in self._changed_since_index(git) if path in wanted]
        updates = _storable(self.work_tree, [f for f in files if f not in index] + changed)
        # Before the commit exists, so the covered set is never smaller than the checkpoints.
        self._note_covered(files)
        if gone:
            git.run("update-index", "--force-remove", "-z", "--stdin",
                    stdin=_nul_join(sorted(gone)), in_work_tree=True)
        if updates:
            # --remove: a file deleted since it was resolved leaves the index instead of failing.
            git.run("update-index", "--add", "--remove", "--replace", "-z", "--stdin",
                    stdin=_nul_join(updates), in_work_tree=True)
        tree = git.run("write-tree", in_work_tree=True).decode().strip()
        # The index now holds `wanted`, less any path git refused (it prints "Ignoring path").
        # Remembering a superset is harmless: such a path is only force-removed again later.
        self._remember_index(wanted)
        return tree

    def _tree_by_hint(self, base_tree: str, patterns: tuple[str, ...],
                      paths: frozenset[str]) -> str | None:
        """The previous capture's tree with the hinted paths read again; None to scan instead.

        The index is not touched: it stays the stat cache of an older tree, which the next
        scan corrects (``diff-files`` reports every file that changed since).
        """
        if len(paths) > HINTED_PATH_LIMIT or any(
                p.rsplit("/", 1)[-1] == ".gitignore" for p in paths):
            return None  # an ignore file changed: any file's selection may have changed
        objects = self._objects()
        changes: dict[str, tuple[bytes, bytes] | None] = {}
        added: builtins.list[str] = []
        for rel in sorted(paths):
            now = self._scan.resolve_under(patterns, rel)
            for gone in objects.paths_under(base_tree, rel).difference(now):
                changes[gone] = None
            for path in now:
                entry = objects.store_file(self.work_tree, path)
                changes[path] = entry
                if entry is not None:
                    added.append(path)
        self._note_covered(added)
        return objects.apply(base_tree, changes)

    # ----- reading -----
    # Annotations in this class say builtins.list: here, ``list`` is the method below.

    def list(
        self,
        *,
        run_id: str | None = None,
        codon_id: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Every checkpoint reachable from a ref, newest first, optionally filtered."""
        return [
            r.checkpoint for r in self._records()
            if (run_id is None or r.checkpoint.run_id == run_id)
            and (codon_id is None or r.checkpoint.codon_id == codon_id)
            and (kind is None or r.checkpoint.kind == kind)
        ]

    def list_read_only(self) -> builtins.list[Checkpoint]:
        """Every checkpoint, newest first, read with the ``git`` executable alone.

        GitPython is not imported, and nothing is written: the repository is not built,
        moved, re-configured or repaired, lock files stay (reading takes no lock), and a
        repository of Hankweave 0.10.0 or older is read where it is, without adopting it.
        """
        places = (self.git_dir, self.checkpoints_dir / LEGACY_GIT_DIR_NAME)
        git_dir = next((place for place in places if place.is_dir()), None)
        if git_dir is None:
            return []
        reader = _GitReader(git_dir, self.checkpoints_dir, self.execution_dir)
        initial = _recorded_initial(reader) or _original_initial(reader)
        return [r.checkpoint for r in _read_records(reader, initial)]

    def resolve(self, id_or_prefix: str) -> Checkpoint:
        return self._resolve_record(id_or_prefix).checkpoint

    def changed_files(self, from_id: str, to_id: str) -> builtins.list[FileChange]:
        """``git diff --name-status`` between two checkpoints, without rename detection."""
        git, _ = self._ready()
        old = self._resolve_record(from_id).checkpoint.id
        new = self._resolve_record(to_id).checkpoint.id
        out = git.run("diff-tree", *NO_PROGRAMS_IN_DIFFS, "-r", "-z", "--no-renames",
                      "--name-status", old, new)
        fields = out.split(b"\0")
        changes = []
        for status, path in zip(fields[0::2], fields[1::2], strict=False):
            if not status:
                continue
            change = {b"A": "added", b"D": "deleted"}.get(status[:1], "modified")
            changes.append(FileChange(os.fsdecode(path), change))  # type: ignore[arg-type]
        return sorted(changes, key=lambda c: c.path)

    # ----- restoring -----

    def restore(self, checkpoint_id: str, *, changes: ChangeHint | None = None) -> None:
        """Make the covered files of the work tree exactly the checkpoint's; detach HEAD there.

        Covered: the checkpoint's files, every file any checkpoint ever held, and every file the
        checkpoint's patterns match now.  Other files, and ``read_only_data_source``, stay.
        With a change hint that continues from the last capture, git is not asked which files
        differ: they are those the two trees differ in, and those the hint names.
        """
        git, _ = self._ready()
        record = self._resolve_record(checkpoint_id)
        sha = record.checkpoint.id
        base, self._base = self._base, None  # the work tree becomes the target's
        hinted = (base is not None and changes is not None
                  and _continues(base, changes, base.patterns))
        self.work_tree.mkdir(parents=True, exist_ok=True)
        target = self._tree_path_set(git, sha)
        covered = self._covered_paths(git) | self._index_paths(git)
        covered.update(self._scan.resolve(record.patterns or ()))
        emptied: set[Path] = set()
        for rel in sorted(covered - target):
            parent = self._remove_covered_file(rel)
            if parent is not None:
                emptied.add(parent)
        kill_point("checkpoint.restore")  # test-only: the removals are done, not the writes
        self._remove_empty_dirs(emptied)
        if hinted:
            assert base is not None and changes is not None
            differing = self._differing_by_hint(git, sha, base.tree, changes.paths, target)
        else:
            differing = self._differing_by_stat(git, sha, target)
        self._write_back(git, sha, target, differing)
        self._remember_index(target)
        self._write_ref("HEAD", sha)

    @staticmethod
    def _differing_by_stat(git: _Git, sha: str, target: frozenset[str]) -> builtins.list[str]:
        """The target's files that the work tree holds otherwise, as git finds them from the
        index's stat data (``diff-index``; a file missing from the index differs too)."""
        out = git.run("diff-index", *NO_PROGRAMS_IN_DIFFS, "-z", "--name-only", "--no-renames",
                      sha, in_work_tree=True)
        return [p for p in (os.fsdecode(p) for p in out.split(b"\0") if p) if p in target]

    def _differing_by_hint(self, git: _Git, sha: str, base_tree: str, paths: frozenset[str],
                           target: frozenset[str]) -> builtins.list[str]:
        """The same from what the last capture held and what changed since: the files its tree
        and the target's differ in, every file at or below a hinted path, and the target's
        files the index lacks (a hinted capture does not write the index, and a checked-out
        file enters it)."""
        objects = self._objects()
        target_tree = objects.commit_tree(sha)
        differing = objects.differing(base_tree, target_tree)
        for rel in paths:
            differing |= objects.paths_under(base_tree, rel)
            differing |= objects.paths_under(target_tree, rel)
        differing |= target - self._index_paths(git)
        return sorted(differing.intersection(target))

    def _write_back(self, git: _Git, sha: str, target: frozenset[str],
                    differing: builtins.list[str]) -> None:
        """Make the index and the work tree's files of ``target`` exactly the commit's.

        Only the ``differing`` files are written: those paths are checked out, and index
        entries the commit does not hold are dropped.  When that is most of the tree, or a
        path cannot be checked out alone (something in the way), the whole index is reset to
        the commit instead (``read-tree --reset -u``, which also writes only what differs).
        """
        stale = self._index_paths(git) - target
        if len(differing) + len(stale) <= max(RESTORE_BY_PATH_LIMIT, len(target) // 4):
            if stale:
                git.run("update-index", "--force-remove", "-z", "--stdin",
                        stdin=_nul_join(sorted(stale)), in_work_tree=True)
            status = 0
            if differing:
                status, _, _ = git.call("checkout", sha, "--pathspec-from-file=-",
                                        "--pathspec-file-nul", stdin=_nul_join(differing),
                                        in_work_tree=True)
            if status == 0:
                return
        # --reset overwrites files that are in the way (they are covered: the target holds them).
        git.run("read-tree", "--reset", "-u", sha, in_work_tree=True)

    # ----- exporting -----

    def materialize(self, checkpoint_id: str, target: Path) -> builtins.list[str]:
        """Check the checkpoint's tree out into the new or empty directory ``target``.

        A private index in a scratch directory is loaded with the checkpoint's tree
        (``read-tree``) and checked out with ``target`` as the work tree (``checkout-index``),
        so the repository's own index, HEAD and refs are never written and ``agentRoot/`` is not
        touched.  ``core.symlinks`` and the repository's attributes make links come out as
        links and bytes as stored.
        """
        git, _ = self._ready()
        sha = self._resolve_record(checkpoint_id).checkpoint.id
        paths = self._tree_paths(git, sha)
        with self._export_target(target) as root, tempfile.TemporaryDirectory(
                prefix="hankweave-materialize-") as scratch:
            private = {"GIT_INDEX_FILE": os.path.join(scratch, "index"),
                       "GIT_WORK_TREE": str(root)}
            git.run("read-tree", sha, env=private)
            git.run("checkout-index", "--all", env=private)
            written = sorted(_exported(root))
            if written != paths:
                # git skips an entry it cannot check out with only a warning: say which.
                missing = sorted(set(paths) - set(written))
                raise CheckpointStorageError(
                    f"checkpoint {sha} could not be materialized into {root}: git did not write "
                    f"{', '.join(missing[:5]) or 'the expected files'}")
        return paths

    def files(self, checkpoint_id: str) -> builtins.list[str]:
        """The checkpoint's paths, sorted, from ``git ls-tree``."""
        git, _ = self._ready()
        return self._tree_paths(git, self._resolve_record(checkpoint_id).checkpoint.id)

    # ----- retention -----

    def prune(self, policy: RetentionPolicy) -> builtins.list[str]:
        """Delete the checkpoints ``policy`` does not keep, and their objects.

        Always kept besides the policy: the initial checkpoint, the commit HEAD is at (the work
        tree's base), and checkpoints made by Hankweave 0.10.0 (they are chained by parentage,
        so removing one would rewrite the ids of the others).
        """
        git, initial = self._ready()
        records = self._records()
        status, out, _ = git.call("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        head = out.decode().strip() if status == 0 else None
        keep_ids = {k.strip().lower() for k in policy.keep_ids if len(k.strip()) >= 4}

        seen_per_run: dict[str | None, int] = {}
        kept: builtins.list[_Record] = []
        removed: builtins.list[_Record] = []
        for record in records:  # newest first
            checkpoint = record.checkpoint
            rank = seen_per_run.get(checkpoint.run_id, 0)
            seen_per_run[checkpoint.run_id] = rank + 1
            keep = (
                record.sequence is None
                or checkpoint.id in (initial, head)
                or rank < policy.keep_last_per_run
                or any(checkpoint.id.startswith(k) for k in keep_ids)
            )
            (kept if keep else removed).append(record)
        if not removed:
            return []

        gone = {r.checkpoint.id for r in removed}
        commands = [f"delete {CHECKPOINT_REFS}{sha} {sha}" for sha in sorted(gone)]
        tips = git.run("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
        for line in tips.decode().splitlines():
            tip, ref = line.split(" ", 1)
            if tip not in gone:
                continue
            run_id = ref.removeprefix(RUN_BRANCHES) if ref.startswith(RUN_BRANCHES) else None
            newest_kept = next((r.checkpoint.id for r in kept
                                if run_id is not None and r.checkpoint.run_id == run_id), None)
            commands.append(f"update {ref} {newest_kept} {tip}" if newest_kept
                            else f"delete {ref} {tip}")
        git.run("update-ref", "--stdin", stdin=("\n".join(commands) + "\n").encode())
        # Reclaim the space now: nothing else references the removed commits (no reflogs, no
        # children), so their unique trees and blobs go with them.
        git.run("reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
        git.run("gc", "--prune=now", "--quiet")
        self._object_db = None  # objects moved into a new pack
        return [r.checkpoint.id for r in removed]

    # ----- internals: setup -----

    def _runner(self, git_dir: Path) -> _Git:
        if self._git is not None and git_dir == self.git_dir:
            return self._git
        owned = self._owned if git_dir == self.git_dir else None
        runner = _Git(git_dir, self.work_tree, self.checkpoints_dir, self.execution_dir, owned)
        if git_dir == self.git_dir:
            self._git = runner
        return runner

    def _ready(self) -> tuple[_Git, str]:
        if self._initial is None or self._git is None:
            self.initialize()
        assert self._git is not None and self._initial is not None
        return self._git, self._initial

    def _migrate_legacy_git_dir(self) -> None:
        """Hankweave before 0.10 kept the repository in ``checkpoints/.git``; adopt it."""
        legacy = self.checkpoints_dir / LEGACY_GIT_DIR_NAME
        if not legacy.is_dir():
            return
        if self.git_dir.exists():
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            legacy.rename(self.checkpoints_dir / f"{GIT_DIR_NAME}-quarantine-{stamp}")
        else:
            legacy.rename(self.git_dir)

    def _remove_abandoned_builds(self) -> None:
        """Delete build directories of processes that died before renaming them into place."""
        for leftover in self.checkpoints_dir.glob(f"{GIT_DIR_NAME}.tmp-*"):
            pid_text = leftover.name.removeprefix(f"{GIT_DIR_NAME}.tmp-").split("-", 1)[0]
            if pid_text.isdigit() and pid_alive(int(pid_text)) and int(pid_text) != os.getpid():
                continue
            shutil.rmtree(leftover, ignore_errors=True)

    def _remove_stale_locks(self) -> None:
        """Remove the lock files a killed git process left behind.

        git's lock files carry no pid, so age decides: no command this backend runs holds a
        lock for :attr:`stale_lock_seconds`.  A younger lock may belong to a live process
        (another command reading this store), so we wait for it to go or to grow old.
        """
        deadline = time.monotonic() + self.stale_lock_seconds
        while True:
            locks = self._lock_files()
            now = time.time()
            young = []
            for lock in locks:
                with contextlib.suppress(FileNotFoundError):
                    if now - lock.stat().st_mtime < self.stale_lock_seconds:
                        young.append(lock)
            if not young or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        for lock in self._lock_files():
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()

    def _lock_files(self) -> builtins.list[Path]:
        locks = [self.git_dir / name for name in STALE_LOCKS if (self.git_dir / name).exists()]
        for base in (self.git_dir / "refs", self.git_dir / "logs" / "refs"):
            for dirpath, _, filenames in os.walk(base):
                locks.extend(Path(dirpath, f) for f in filenames if f.endswith(".lock"))
        return locks

    def _holds_checkpoints(self) -> bool:
        """Whether the repository's refs name any checkpoint, read without git's help."""
        refs = self.git_dir / "refs"
        if any(p.is_file() for p in (refs / "hankweave" / "checkpoints").rglob("*")):
            return True
        if any(p.is_file() for p in (refs / "heads").glob("run-*")):
            return True
        with contextlib.suppress(FileNotFoundError):
            packed = (self.git_dir / "packed-refs").read_text(errors="replace")
            return f" {CHECKPOINT_REFS}" in packed or f" {RUN_BRANCHES}" in packed
        return False

    def _build_repository(self) -> None:
        """Create the repository in a temporary directory and rename it into place."""
        build = self.checkpoints_dir / f"{GIT_DIR_NAME}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            git = self._runner(build)
            git.run("init", "--quiet", "--template=", f"--initial-branch={INITIAL_BRANCH}",
                    "--object-format=sha1", str(build))
            # The config init wrote (with core.worktree: the path is always passed instead,
            # so the execution directory can move) is replaced by the one the store owns.
            (build / "config").write_bytes(self._owned.config)
            (build / "info").mkdir(exist_ok=True)
            (build / "info" / "attributes").write_text(REPOSITORY_ATTRIBUTES, encoding="utf-8")
            empty_tree = git.run("mktree", stdin=b"").decode().strip()
            timestamp = utc_now_iso()
            initial = git.run("commit-tree", empty_tree, "-m", f"{INITIAL_MESSAGE}\n",
                              env=_dated(timestamp)).decode().strip()
            git.run("update-ref", "--stdin", stdin=(
                f"update refs/heads/{INITIAL_BRANCH} {initial}\n"
                f"update {INITIAL_REF} {initial}\n").encode())
            (build / COVERED_PATHS).parent.mkdir(parents=True, exist_ok=True)
            (build / COVERED_PATHS).write_bytes(b"")
            try:
                os.rename(build, self.git_dir)
            except OSError:
                if not self.git_dir.exists():
                    raise
                # Another process finished first; use its repository.
            fsync_dir(self.checkpoints_dir)
        finally:
            shutil.rmtree(build, ignore_errors=True)

    def _find_initial(self, git: _Git) -> str:
        recorded = _recorded_initial(git)
        if recorded is not None:
            return recorded
        original = _original_initial(git)
        if original is None:
            raise CheckpointStorageError(
                f'the checkpoint repository {self.git_dir} has no "{INITIAL_MESSAGE}" commit')
        git.run("update-ref", INITIAL_REF, original)  # adopted: the ref answers from now on
        return original

    def _check_index(self, git: _Git) -> None:
        """An index git cannot read is dropped: here it is only a cache of the last tree."""
        self._index_cache = None
        try:
            self._index_paths(git)
        except CheckpointStorageError:
            with contextlib.suppress(FileNotFoundError):
                (self.git_dir / "index").unlink()
            self._index_cache = None

    # ----- internals: listing -----

    def _records(self) -> builtins.list[_Record]:
        git, initial = self._ready()
        return _read_records(git, initial)

    def _resolve_record(self, id_or_prefix: str) -> _Record:
        needle = id_or_prefix.strip().lower()
        direct = self._record_by_ref(needle)
        if direct is not None:
            return direct
        records = self._records() if needle and set(needle) <= _HEX else []
        matches = [r for r in records if r.checkpoint.id.startswith(needle)]
        if not matches:
            raise CheckpointNotFoundError(f'no checkpoint has the id "{id_or_prefix}"')
        if len(matches) > 1:
            raise AmbiguousCheckpointError(
                f'the id prefix "{id_or_prefix}" matches {len(matches)} checkpoints; '
                "give more characters")
        return matches[0]

    def _record_by_ref(self, sha: str) -> _Record | None:
        """The checkpoint with this full id read straight from its loose ref and commit,
        without listing every checkpoint (the runtime restores by full id); None when that
        cannot answer (a prefix, packed refs, a checkpoint of Hankweave 0.10.0)."""
        _, initial = self._ready()
        if len(sha) != 40 or not set(sha) <= _HEX:
            return None
        if sha != initial:
            try:
                if (self.git_dir / CHECKPOINT_REFS / sha).read_text().strip() != sha:
                    return None
            except OSError:
                return None
        commit = self._objects().read_commit(sha)
        if commit is None:
            return None
        return _parse_record(sha, commit[0], commit[1], sha == initial, 0)

    @staticmethod
    def _tree_paths(git: _Git, sha: str) -> builtins.list[str]:
        """Every file path of a commit's tree, sorted."""
        listed = git.run("ls-tree", "-r", "-z", "--name-only", sha)
        return sorted(os.fsdecode(p) for p in listed.split(b"\0") if p)

    def _tree_path_set(self, git: _Git, sha: str) -> frozenset[str]:
        """A commit's paths, kept for the few commits restored last (a commit never changes)."""
        paths = self._trees.pop(sha, None)
        if paths is None:
            paths = frozenset(self._tree_paths(git, sha))
        self._trees[sha] = paths
        while len(self._trees) > 4:
            del self._trees[next(iter(self._trees))]
        return paths

    @staticmethod
    def _changed_since_index(git: _Git) -> builtins.list[str]:
        """Paths whose work-tree file differs from the index entry (modified, deleted, a new
        mode or kind), found by git from the index's stat data and, for entries changed in
        the index's own timestamp tick, by content."""
        out = git.run("diff-files", *NO_PROGRAMS_IN_DIFFS, "-z", "--name-only", "--no-renames",
                      in_work_tree=True)
        return [os.fsdecode(p) for p in out.split(b"\0") if p]

    # ----- internals: the index (a stat cache of the last tree written or checked out) -----

    def _index_key(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.git_dir / "index")
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _index_paths(self, git: _Git) -> set[str]:
        key = self._index_key()
        if key is None:
            return set()
        if self._index_cache is not None and self._index_cache[0] == key:
            return set(self._index_cache[1])
        out = git.run("ls-files", "-z", in_work_tree=True)
        paths = {os.fsdecode(p) for p in out.split(b"\0") if p}
        self._index_cache = (key, frozenset(paths))
        return paths

    def _remember_index(self, paths: Iterable[str]) -> None:
        key = self._index_key()
        self._index_cache = (key, frozenset(paths)) if key is not None else None

    def _point_head_at(self, branch: str) -> None:
        with contextlib.suppress(OSError):
            if (self.git_dir / "HEAD").read_text() == f"ref: refs/heads/{branch}\n":
                return
        self._write_ref("HEAD", f"ref: refs/heads/{branch}")

    def _write_ref(self, name: str, value: str) -> None:
        """Set a loose ref (or HEAD) as git does: write ``<ref>.lock`` (created exclusively, so
        a git process holding the lock makes this fail rather than interleave), then rename it
        over the ref.  A packed value of the same ref is shadowed by the loose one."""
        from gitdb.util import LockedFD

        path = self.git_dir / name
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
                f"cannot update {name} in the checkpoint repository {self.git_dir}: {exc}"
                ) from exc

    def _objects(self) -> _Objects:
        if self._object_db is None:
            self._object_db = _Objects(self.git_dir / "objects")
        return self._object_db

    # ----- internals: covered paths -----

    def _covered_paths(self, git: _Git) -> set[str]:
        if self._covered is not None:
            return set(self._covered)
        path = self.git_dir / COVERED_PATHS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = self._rebuild_covered(git, path)
        if data and not data.endswith(b"\0"):
            # A record torn by a kill: drop it, or the next append would glue onto it.
            data = data[: data.rfind(b"\0") + 1]
            with path.open("r+b") as fh:
                fh.truncate(len(data))
        self._covered = {os.fsdecode(p) for p in data.split(b"\0") if p}
        return set(self._covered)

    def _rebuild_covered(self, git: _Git, path: Path) -> bytes:
        """Every path any reachable commit added, i.e. every path a checkpoint held."""
        out = git.run("log", *NO_PROGRAMS_IN_DIFFS, "--all", "--no-renames", "--name-only", "-z",
                      "--format=")
        paths = sorted({p for p in out.split(b"\0") if p})
        data = b"".join(p + b"\0" for p in paths)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return data

    def _note_covered(self, files: Sequence[str]) -> None:
        assert self._git is not None
        covered = self._covered_paths(self._git)
        new = [f for f in files if f not in covered]
        if not new:
            return
        with (self.git_dir / COVERED_PATHS).open("ab") as fh:
            fh.write(_nul_join(new))
            fh.flush()
            os.fsync(fh.fileno())
        assert self._covered is not None
        self._covered.update(new)

    # ----- internals: work-tree edits -----

    def _remove_covered_file(self, rel: str) -> Path | None:
        """Unlink ``rel`` unless reaching it crosses a symlink; return its directory if removed.

        Directories, the data link and anything inside a ``.git`` are never touched.
        """
        parts = rel.split("/")
        if parts[0] == DATA_LINK or ".git" in parts:
            return None
        full = self.work_tree.joinpath(*parts)
        if not os.path.lexists(full):
            return None
        directory = self.work_tree
        for part in parts[:-1]:
            directory = directory / part
            try:
                if not stat.S_ISDIR(os.lstat(directory).st_mode):
                    return None  # a symlink (or file) in the way: what is behind it is not ours
            except FileNotFoundError:
                return None
        try:
            if stat.S_ISDIR(os.lstat(full).st_mode):
                return None
            os.unlink(full)
        except FileNotFoundError:
            return None
        return directory

    def _remove_empty_dirs(self, directories: Iterable[Path]) -> None:
        """Remove each directory a restore emptied, and its parents while they are empty."""
        for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
            while directory != self.work_tree and self.work_tree in directory.parents:
                try:
                    directory.rmdir()
                except OSError:
                    break
                directory = directory.parent


def _recorded_initial(git: _GitCommands) -> str | None:
    """The initial checkpoint named by our ref, or None (a repository of Hankweave 0.10.0)."""
    status, out, _ = git.call("rev-parse", "--verify", "--quiet", f"{INITIAL_REF}^{{commit}}")
    return out.decode().strip() if status == 0 else None


def _original_initial(git: _GitCommands) -> str | None:
    """The initial checkpoint of a repository made by Hankweave 0.10.0: its root commit."""
    roots = git.run("log", *NO_PROGRAMS_IN_DIFFS, "--all", "--max-parents=0",
                    "--format=%H %s").decode()
    for line in roots.splitlines():
        sha, _, subject = line.partition(" ")
        if subject == INITIAL_MESSAGE:
            return sha
    return None


def _read_records(git: _GitCommands, initial: str | None) -> list[_Record]:
    """Every checkpoint reachable from a ref, newest first (``initial``: the initial commit)."""
    out = git.run("log", *NO_PROGRAMS_IN_DIFFS, "--all", "--date-order", "-z",
                  "--format=%H%x1f%ct%x1f%B")
    records: dict[str, _Record] = {}
    entries = [e for e in out.decode("utf-8", errors="replace").split("\0") if e]
    for position, entry in enumerate(entries):
        sha, committed, body = entry.split("\x1f", 2)
        if sha in records:
            continue
        record = _parse_record(sha, int(committed), body, sha == initial, position)
        if record is not None:
            records[sha] = record
    return sorted(records.values(), key=lambda r: r.order, reverse=True)


def _parse_record(
    sha: str, committed: int, body: str, is_initial: bool, position: int,
) -> _Record | None:
    """A checkpoint from a commit's message; ``None`` for commits that are not checkpoints."""
    message, trailers = _split_trailers(body)
    if is_initial:
        timestamp = _iso(committed)
        checkpoint = Checkpoint(id=sha, kind="initial", message=message, timestamp=timestamp,
                                branch=INITIAL_BRANCH)
        return _Record(checkpoint, (0.0,), (), None)
    subject = _SUBJECT.fullmatch(message.split("\n", 1)[0])
    if subject is None:
        return None  # e.g. the original's recovery snapshots
    timestamp = _field(message, "Timestamp") or _iso(committed)
    run_id = subject["run"]
    checkpoint = Checkpoint(
        id=sha, kind=subject["kind"], message=message,  # type: ignore[arg-type]
        timestamp=timestamp, branch=run_branch(run_id), run_id=run_id,
        codon_id=subject["codon"])
    sequence_text = trailers.get("Sequence")
    if sequence_text is None or not sequence_text.isdigit():
        # Made by Hankweave 0.10.0: order by time, then by git's date order.
        return _Record(checkpoint, (1.0, _epoch(timestamp, committed), -position), None, None)
    try:
        patterns = tuple(str(p) for p in json.loads(trailers.get("Patterns", "[]")))
    except ValueError:
        patterns = None
    sequence = int(sequence_text)
    return _Record(checkpoint, (2.0, float(sequence)), patterns, sequence)


def _split_trailers(body: str) -> tuple[str, dict[str, str]]:
    """Split our trailer paragraph off a commit message."""
    head, sep, last = body.rpartition("\n\n")
    lines = [line for line in last.split("\n") if line]
    if not sep or not lines or not all(line.startswith(_TRAILER_PREFIX) for line in lines):
        return body, {}
    trailers = {}
    for line in lines:
        key, _, value = line[len(_TRAILER_PREFIX):].partition(":")
        trailers[key.strip()] = value.strip()
    return head + "\n", trailers


def _field(message: str, name: str) -> str | None:
    for line in message.split("\n")[1:]:
        if line.startswith(f"{name}: "):
            return line[len(name) + 2:].strip()
    return None


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _epoch(timestamp: str, fallback: int) -> float:
    try:
        return parse_iso(timestamp).timestamp()
    except ValueError:
        return float(fallback)


def _dated(timestamp: str) -> dict[str, str]:
    """Author and committer dates for a commit made at ``timestamp``."""
    date = f"{int(parse_iso(timestamp).timestamp())} +0000"
    return {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}


_TREE_MODE = b"40000"


class _Objects:
    """The repository's object database read and written in-process (GitPython's gitdb), to
    build a tree from a previous one plus a few changed files without a git process."""

    def __init__(self, objects_dir: Path) -> None:
        from gitdb.db import GitDB

        self.objects_dir = objects_dir
        self._db = GitDB(str(objects_dir))
        self._trees: dict[bytes, dict[bytes, tuple[bytes, bytes]]] = {}

    def _read(self, binsha: bytes, kind: bytes) -> bytes:
        """An object's content; a missing, unreadable or other-typed one is a storage error."""
        from gitdb.exc import ODBError

        try:
            stream = self._db.stream(binsha)
            if stream.type == kind:
                return bytes(stream.read())
            problem = f"is a {stream.type.decode()}, not a {kind.decode()}"
        except (ODBError, OSError, ValueError, zlib.error) as exc:
            problem = f"cannot be read ({type(exc).__name__}: {exc})"
        raise CheckpointStorageError(
            f"object {binsha.hex()} of the checkpoint repository ({self.objects_dir}) {problem}")

    def _tree(self, binsha: bytes) -> dict[bytes, tuple[bytes, bytes]]:
        """A tree's entries: name -> (mode, binsha)."""
        entries = self._trees.get(binsha)
        if entries is None:
            data = self._read(binsha, b"tree")
            entries = {}
            offset = 0
            while offset < len(data):
                space = data.index(b" ", offset)
                nul = data.index(b"\0", space)
                entries[data[space + 1:nul]] = (data[offset:space], data[nul + 1:nul + 21])
                offset = nul + 21
            self._trees[binsha] = entries
        return entries

    def commit(self, tree: str, parent: str, message: str, timestamp: str) -> str:
        """Write a checkpoint commit, byte for byte what ``git commit-tree <tree> -p <parent>
        -m <message>`` makes with our identity and the date of ``timestamp``."""
        date = f"{int(parse_iso(timestamp).timestamp())} +0000"
        ident = f"{IDENTITY_NAME} <{IDENTITY_EMAIL}> {date}"
        body = message if message.endswith("\n") else message + "\n"
        data = (f"tree {tree}\nparent {parent}\nauthor {ident}\ncommitter {ident}\n\n"
                f"{body}").encode()
        return self._store(b"commit", data).hex()

    def commit_tree(self, sha: str) -> str:
        """The tree a commit names."""
        header = self._read(bytes.fromhex(sha), b"commit").split(b"\n\n", 1)[0]
        return header.split(b"\n", 1)[0].removeprefix(b"tree ").decode()

    def differing(self, tree_a: str, tree_b: str) -> set[str]:
        """The file paths whose mode or content differ between two trees, or that only one
        holds; subtrees with the same sha are not entered."""
        found: set[str] = set()
        self._differing(bytes.fromhex(tree_a), bytes.fromhex(tree_b), "", found)
        return found

    def _differing(self, a: bytes | None, b: bytes | None, prefix: str,
                   found: set[str]) -> None:
        if a == b:
            return
        entries_a = self._tree(a) if a is not None else {}
        entries_b = self._tree(b) if b is not None else {}
        for name in entries_a.keys() | entries_b.keys():
            x, y = entries_a.get(name), entries_b.get(name)
            if x == y:
                continue
            path = prefix + os.fsdecode(name)
            x_tree = x is not None and x[0] == _TREE_MODE
            y_tree = y is not None and y[0] == _TREE_MODE
            if x_tree or y_tree:
                self._differing(x[1] if x_tree and x else None, y[1] if y_tree and y else None,
                                path + "/", found)
            if (x is not None and not x_tree) or (y is not None and not y_tree):
                found.add(path)

    def read_commit(self, sha: str) -> tuple[int, str] | None:
        """A commit's committer time and message, or None if there is no such commit."""
        try:
            data = self._read(bytes.fromhex(sha), b"commit")
        except CheckpointStorageError:
            return None  # the caller lists the checkpoints instead, which says what is wrong
        header, _, body = data.partition(b"\n\n")
        for line in header.split(b"\n"):
            if line.startswith(b"committer "):
                return int(line.rsplit(b" ", 2)[-2]), body.decode("utf-8", errors="replace")
        return None

    def paths_under(self, tree: str, rel: str) -> set[str]:
        """The file paths of ``tree`` that are ``rel`` or lie below it."""
        entries = self._tree(bytes.fromhex(tree))
        parts = [os.fsencode(part) for part in rel.split("/")]
        for depth, name in enumerate(parts):
            entry = entries.get(name)
            if entry is None:
                return set()
            if entry[0] != _TREE_MODE:
                return {rel} if depth == len(parts) - 1 else set()
            entries = self._tree(entry[1])
        found: set[str] = set()
        self._collect(entries, rel, found)
        return found

    def _collect(self, entries: Mapping[bytes, tuple[bytes, bytes]], prefix: str,
                 found: set[str]) -> None:
        for name, (mode, binsha) in entries.items():
            path = f"{prefix}/{os.fsdecode(name)}"
            if mode == _TREE_MODE:
                self._collect(self._tree(binsha), path, found)
            else:
                found.add(path)

    def _store(self, kind: bytes, data: bytes) -> bytes:
        import hashlib

        from gitdb.base import IStream

        binsha = hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).digest()
        try:
            if not self._db.has_object(binsha):
                self._db.store(IStream(kind, len(data), io.BytesIO(data)))
        except OSError as exc:  # a full or read-only disk
            raise CheckpointStorageError(
                f"cannot write an object into the checkpoint repository ({self.objects_dir}): "
                f"{exc}") from exc
        return binsha

    def store_file(self, root: Path, rel: str) -> tuple[bytes, bytes] | None:
        """Store a work-tree file as a blob: (mode, binsha); None if it is gone or special."""
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                return b"120000", self._store(b"blob", os.fsencode(os.readlink(full)))
            if not stat.S_ISREG(st.st_mode):
                return None
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with open(fd, "rb") as fh:
                mode = b"100755" if os.fstat(fh.fileno()).st_mode & stat.S_IXUSR else b"100644"
                return mode, self._store(b"blob", fh.read())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # unreadable, or replaced by a link as it was opened
            raise CheckpointStorageError(
                f"cannot checkpoint {rel} of the work tree {root}: {exc}") from exc

    def apply(self, tree: str, changes: Mapping[str, tuple[bytes, bytes] | None]) -> str:
        """``tree`` with each path set to its (mode, blob) or removed (None); the new tree's
        sha.  Directories left empty disappear, as ``write-tree`` makes them."""
        nested: dict[bytes, dict[str, tuple[bytes, bytes] | None]] = {}
        for path, entry in changes.items():
            head, _, rest = path.partition("/")
            nested.setdefault(os.fsencode(head), {})[rest] = entry
        binsha = self._apply(bytes.fromhex(tree), nested)
        return binsha.hex() if binsha is not None else self._store(b"tree", b"").hex()

    def _apply(self, binsha: bytes | None,
               changes: dict[bytes, dict[str, tuple[bytes, bytes] | None]]) -> bytes | None:
        entries = dict(self._tree(binsha)) if binsha is not None else {}
        for name, below in changes.items():
            if "" in below:  # the path is this entry itself: a file set or removed
                here = below.pop("")
                if here is None:
                    entries.pop(name, None)
                else:
                    entries[name] = here
            if below:
                nested: dict[bytes, dict[str, tuple[bytes, bytes] | None]] = {}
                for path, entry in below.items():
                    head, _, rest = path.partition("/")
                    nested.setdefault(os.fsencode(head), {})[rest] = entry
                old = entries.get(name)
                child = self._apply(old[1] if old and old[0] == _TREE_MODE else None, nested)
                if child is None:
                    if old is not None and old[0] == _TREE_MODE:
                        del entries[name]
                else:
                    entries[name] = (_TREE_MODE, child)
        if not entries:
            return None
        # git orders a tree's entries by name, a directory's name as if it ended with "/".
        ordered = sorted(entries.items(),
                         key=lambda item: item[0] + b"/" if item[1][0] == _TREE_MODE else item[0])
        body = b"".join(mode + b" " + name + b"\0" + sha for name, (mode, sha) in ordered)
        new = self._store(b"tree", body)
        self._trees[new] = entries
        return new


def _storable(root: Path, paths: list[str]) -> list[str]:
    """The paths git can store: regular files and symlinks outside any ``.git`` directory.

    A socket or FIFO (a dev server's socket in the workspace) would make ``update-index``
    abort the whole checkpoint, so such entries are skipped.  git also refuses a ``.git``
    component in any letter case (``.GIT`` is ``.git`` on a case-insensitive disk); skipping
    those here keeps them out of the covered set, so a restore never deletes them.
    """
    kept = []
    base = str(root) + os.sep
    for rel in paths:
        if ".git" in rel.lower() and ".git" in rel.lower().split("/"):
            continue
        try:
            mode = os.lstat(base + rel).st_mode  # str concatenation: pathlib costs 5x here
        except FileNotFoundError:
            kept.append(rel)  # gone since it was resolved: update-index --remove drops it
            continue
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            kept.append(rel)
    return kept


def _exported(root: Path) -> Iterator[str]:
    """The relative paths of the files and symlinks under ``root`` (links are not followed)."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        # os.walk lists a symlink to a directory among dirnames, and never descends into it.
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in [*filenames, *links]:
            yield prefix + name


def _nul_join(paths: Iterable[str]) -> bytes:
    """NUL-terminated paths, as ``git update-index -z --stdin`` and our covered list read them."""
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


@hookimpl
def register_checkpoint_backends(register: Callable[[type[CheckpointStore]], None]) -> None:
    """Provide the ``git`` backend."""
    register(GitCheckpointStore)
