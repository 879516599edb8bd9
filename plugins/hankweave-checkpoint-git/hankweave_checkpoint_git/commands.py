"""Running git against the shadow repository: through GitPython for the store, with the
``git`` executable alone for a read-only listing.

Every process gets :func:`~hankweave_checkpoint_git.environment.git_environment`; the store's
runner also puts the repository's owned files back before each one.
"""

from __future__ import annotations

import abc
import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

from hankweave.api import CheckpointStorageError

from hankweave_checkpoint_git.environment import driver_names, git_environment, may_define_drivers
from hankweave_checkpoint_git.owned import OwnedFiles

GIT_MISSING = (
    "the git checkpoint backend needs the git executable; install git or choose "
    'checkpoints.backend = "snapshot"'
)


def gitpython() -> ModuleType:
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


class GitCommands(abc.ABC):
    """git commands against one repository, isolated from everything else on the machine.

    Every process runs with :attr:`_env` (the repository's :func:`git_environment`) plus the
    caller's ``env``; subclasses say how a git process is started (:meth:`_execute`).
    """

    git_dir: Path
    _env: dict[str, str]

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

    def call(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        in_work_tree: bool = False,
    ) -> tuple[int, bytes, str]:
        """Run ``git <args>``; return ``(status, stdout, stderr)`` whatever the status."""
        return self._execute(args, stdin, {**self._env, **env} if env else self._env,
                             in_work_tree)

    @abc.abstractmethod
    def _execute(self, args: tuple[str, ...], stdin: bytes | None, env: Mapping[str, str],
                 in_work_tree: bool) -> tuple[int, bytes, str]:
        """Start ``git <args>`` with exactly ``env``; return its status, stdout and stderr."""

    def _cannot_run(self, exc: OSError) -> CheckpointStorageError:
        return CheckpointStorageError(
            f"could not run git for the checkpoint repository {self.git_dir}: {exc}")


class GitRunner(GitCommands):
    """Runs git commands through GitPython, which starts each process from ``os.environ``.

    ``owned`` (the store's repository, not one being built) is enforced before every process,
    so git only ever reads the backend's own config and attributes.
    """

    def __init__(self, git_dir: Path, work_tree: Path, home: Path, ceiling: Path,
                 owned: OwnedFiles | None = None) -> None:
        git = gitpython()
        self._git_module = git
        self.git_dir = git_dir
        self.work_tree = work_tree
        self._owned = owned
        self._env = git_environment(git_dir, work_tree, home, ceiling)
        self._in_home = git.Git(str(home))
        self._in_work_tree = git.Git(str(work_tree))

    def _execute(self, args: tuple[str, ...], stdin: bytes | None, env: Mapping[str, str],
                 in_work_tree: bool) -> tuple[int, bytes, str]:
        if self._owned is not None:
            self._owned.enforce()
        runner = self._in_work_tree if in_work_tree else self._in_home
        command = [self._git_module.Git.GIT_PYTHON_GIT_EXECUTABLE, *args]
        try:
            with contextlib.ExitStack() as stack:
                istream = None
                if stdin is not None:
                    # GitPython hands stdin to Popen, which needs a real file descriptor.
                    istream = stack.enter_context(tempfile.TemporaryFile())
                    istream.write(stdin)
                    istream.seek(0)
                status, out, err = runner.execute(
                    command, istream=istream, env=env, with_extended_output=True,
                    with_exceptions=False, stdout_as_string=False,
                    strip_newline_in_stdout=False)
        except self._git_module.exc.GitCommandNotFound as exc:
            raise CheckpointStorageError(GIT_MISSING) from exc
        except OSError as exc:
            raise self._cannot_run(exc) from exc
        return int(status or 0), out, err if isinstance(err, str) else err.decode(errors="replace")


class GitReader(GitCommands):
    """Runs read-only git commands with the ``git`` executable alone, for what reads a
    repository without opening the store: :meth:`GitCheckpointStore.list_read_only`,
    ``manifest``, ``read_file``, and a fork (its source, and checking the new repository).

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
                     **git_environment(git_dir, None, home, ceiling)}
        self._executable = os.environ.get("GIT_PYTHON_GIT_EXECUTABLE") or "git"
        try:
            config = (git_dir / "config").read_bytes()
        except OSError:
            config = None  # git says what is wrong when the listing runs
        if config is None or may_define_drivers(config):
            # A config git cannot read fails the listing itself, with git's message.
            _, listed, _ = self.call("config", "--list", "--includes", "--name-only", "-z")
            self._env.update(git_environment(git_dir, None, home, ceiling, driver_names(listed)))

    def _execute(self, args: tuple[str, ...], stdin: bytes | None, env: Mapping[str, str],
                 in_work_tree: bool) -> tuple[int, bytes, str]:
        """Run ``git <args>`` in the repository's parent directory."""
        if in_work_tree:
            raise ValueError("a GitReader names no work tree to run git in")
        try:
            done = subprocess.run(
                [self._executable, *args], input=stdin, capture_output=True, check=False,
                cwd=self._home, env=env)
        except FileNotFoundError as exc:
            raise CheckpointStorageError(GIT_MISSING) from exc
        except OSError as exc:
            raise self._cannot_run(exc) from exc
        return done.returncode, done.stdout, done.stderr.decode(errors="replace")
