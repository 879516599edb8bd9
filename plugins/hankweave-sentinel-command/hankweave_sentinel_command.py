"""The ``command`` sentinel kind: a local command (a linter, a test) over the files a codon changed.

A sentinel config selects it with ``"kind": "command"`` and describes the command in
``options`` (:class:`CommandOptions`).  No model is called: each firing costs nothing.

Which files changed: when the sentinel loads (the codon attempt's start) it takes a
:class:`WorkspaceSnapshot` of the agent root's selected files; each firing takes a new one and
compares, so a firing sees what was created, modified or deleted since the previous firing (the
first: since the codon started).  A snapshot is one ``stat`` per file; only files changed in the
last :data:`RACY_WINDOW_NS` before a scan are also hashed, so a file rewritten with the same
size within one file-system clock tick is still seen as modified.

What a firing does: no change (and ``runWhenNoChanges`` off) writes nothing; otherwise the
command runs in the agent root, without a shell, with the changed files that still exist as
arguments, on stdin or not at all, bounded by ``timeoutSeconds`` (its whole process group is
killed past it), and its output (stdout and stderr, interleaved) becomes the sentinel's output
under a short header.  A non-zero exit is a finding, as linters exit 1 when they find problems,
unless ``failOnExitCode`` makes it a failure.

The snapshot advances only when a firing completes (it wrote its findings, or found nothing to
check): after a timeout or a failure, the next firing checks those files again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import shlex
import shutil
import signal
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from hankweave.api import (
    SentinelAnswer,
    SentinelError,
    SentinelFatalError,
    SentinelFiring,
    SentinelKind,
    SentinelOptions,
    SentinelSetup,
    glob_regex,
    resolve_patterns,
)

__all__ = [
    "CommandOptions",
    "CommandRun",
    "CommandSentinel",
    "CommandTimeout",
    "FileStamp",
    "WorkspaceChanges",
    "WorkspaceSnapshot",
    "kill_group",
    "run_command",
    "selected_files",
]

RACY_WINDOW_NS = 2_000_000_000
"""A file whose mtime is this close to a scan (or later) is hashed too: its stat may not change
when it is rewritten within the same clock tick (2 s covers FAT's timestamps)."""
HASH_LIMIT_BYTES = 8 * 1024 * 1024
"""Larger files are compared by their stat alone, however recently they changed."""
LISTED_PATHS = 20
"""How many paths a report's header names before it says "and N more"."""
SHOWN_COMMAND_CHARS = 160
"""How much of the command line a report's header and error messages quote."""
ERROR_OUTPUT_CHARS = 2000
"""How much of the output (its end) a ``failOnExitCode`` error message quotes."""
REAP_TIMEOUT_S = 5.0
"""How long a killed command may take to exit and close its output."""
_READ_CHUNK = 65536

NonEmpty = Annotated[str, Field(min_length=1)]


class CommandOptions(SentinelOptions):
    """The ``options`` of a ``command`` sentinel (camelCase in the config)."""

    model_config = SentinelOptions.model_config | {"strict": True}

    command: Annotated[list[NonEmpty], Field(min_length=1)]
    """The program and its arguments, run without a shell: ``["ruff", "check"]``."""
    files: Annotated[list[NonEmpty], Field(min_length=1)] = Field(
        default_factory=lambda: ["**/*"])
    """Globs of the files to watch, relative to the agent root."""
    exclude: list[NonEmpty] = Field(default_factory=list)
    """Globs of files not to watch, even when ``files`` selects them."""
    timeout_seconds: Annotated[float, Field(gt=0)] = 60
    """How long one run may take; past it its process group is killed (a failed firing)."""
    max_output_bytes: Annotated[int, Field(gt=0)] = 64 * 1024
    """How much of the output is kept; the rest is read, counted and dropped."""
    pass_files: Literal["args", "stdin", "none"] = "args"
    """How the command learns the changed files: appended to its arguments, one per line on
    its stdin, or not at all."""
    run_when_no_changes: bool = False
    """Run even when no selected file changed since the previous firing."""
    fail_on_exit_code: bool = False
    """A non-zero exit fails the firing (``sentinel.error``) instead of being a finding."""


# ----- which files changed -----


@dataclass(frozen=True)
class FileStamp:
    """What a snapshot knows of one file: its stat, and its hash when it changed just now."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    digest: bytes | None = None

    def same_stat(self, other: FileStamp) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.inode) == (
            other.size, other.mtime_ns, other.ctime_ns, other.inode)


@dataclass(frozen=True)
class WorkspaceChanges:
    """Paths created, modified and deleted between two snapshots, each sorted."""

    created: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    @property
    def present(self) -> list[str]:
        """The changed files that exist now (created or modified): what the command checks."""
        return sorted((*self.created, *self.modified))

    @property
    def count(self) -> int:
        return len(self.created) + len(self.modified) + len(self.deleted)

    def __bool__(self) -> bool:
        return self.count > 0


def selected_files(root: Path, files: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """The files under ``root`` that ``files`` selects and ``exclude`` does not, sorted.

    The kernel's resolver does the walk, so the selection means what ``checkpointedFiles``
    means: ``.gitignore`` honoured, ``.git`` and the data link never entered.
    """
    excluded = [glob_regex(pattern) for pattern in exclude]
    return [path for path in resolve_patterns(root, files)
            if not any(regex.fullmatch(path) for regex in excluded)]


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """The selected regular files of the agent root (symlinks followed) at one moment."""

    files: Mapping[str, FileStamp]
    taken_ns: int

    @classmethod
    def take(cls, root: Path, paths: Sequence[str],
             previous: WorkspaceSnapshot | None = None) -> WorkspaceSnapshot:
        """Stat ``paths`` (relative to ``root``); hash those changed just before the scan and
        those ``previous`` hashed whose stat did not change, so they can be compared."""
        taken_ns = time.time_ns()
        files: dict[str, FileStamp] = {}
        for path in paths:
            stamp = _stamp(root / path, taken_ns,
                           previous.files.get(path) if previous is not None else None)
            if stamp is not None:
                files[path] = stamp
        return cls(files, taken_ns)

    def changes_since(self, previous: WorkspaceSnapshot) -> WorkspaceChanges:
        before, after = previous.files, self.files
        created = [path for path in after if path not in before]
        deleted = [path for path in before if path not in after]
        modified = [path for path, stamp in after.items()
                    if path in before and _differs(before[path], stamp)]
        return WorkspaceChanges(tuple(sorted(created)), tuple(sorted(modified)),
                                tuple(sorted(deleted)))


def _stamp(path: Path, taken_ns: int, previous: FileStamp | None) -> FileStamp | None:
    try:
        info = os.stat(path)
    except OSError:  # gone since the walk, or a dangling symlink
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    stamp = FileStamp(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
    racy = info.st_mtime_ns >= taken_ns - RACY_WINDOW_NS
    compare = previous is not None and previous.digest is not None and previous.same_stat(stamp)
    if (racy or compare) and info.st_size <= HASH_LIMIT_BYTES:
        return FileStamp(stamp.size, stamp.mtime_ns, stamp.ctime_ns, stamp.inode,
                         _digest(path))
    return stamp


def _digest(path: Path) -> bytes | None:
    try:
        with path.open("rb") as file:
            return hashlib.file_digest(file, "blake2b").digest()
    except OSError:
        return None


def _differs(before: FileStamp, after: FileStamp) -> bool:
    if not before.same_stat(after):
        return True
    return before.digest is not None and after.digest is not None and before.digest != after.digest


# ----- running the command -----


@dataclass(frozen=True)
class CommandRun:
    """One finished run of the command."""

    argv: tuple[str, ...]
    exit_code: int
    """The exit status; negative: killed by that signal."""
    output: bytes
    """The first ``max_output_bytes`` of stdout and stderr, interleaved."""
    output_bytes: int
    """How many bytes it wrote in all."""
    duration_s: float

    @property
    def truncated(self) -> bool:
        return self.output_bytes > len(self.output)

    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")


class CommandTimeout(Exception):
    """The command ran past its timeout; its process group was killed."""


async def run_command(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                      stdin: bytes | None, timeout_s: float, max_output_bytes: int,
                      started: Callable[[int], None] | None = None) -> CommandRun:
    """Run ``argv`` in ``cwd`` in a session of its own, feed it ``stdin`` (None: no input) and
    keep the first ``max_output_bytes`` of its output.

    The process group is killed when the timeout passes (:class:`CommandTimeout`) or the
    caller is cancelled.  ``started`` is told the process id (which is also its group's).
    Raises :class:`OSError` when the program cannot be started.
    """
    began = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=dict(env), start_new_session=True,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    if started is not None:
        started(process.pid)
    finished = False
    try:
        async with asyncio.timeout(timeout_s):
            assert process.stdout is not None
            (output, total), _ = await asyncio.gather(
                _read_bounded(process.stdout, max_output_bytes), _feed(process, stdin))
            exit_code = await process.wait()
        finished = True
    except TimeoutError:
        raise CommandTimeout(f"timed out after {timeout_s:g}s") from None
    finally:
        if not finished:
            # The whole group: the program may have exited and left a child holding its output.
            kill_group(process.pid)
            await _reap(process)
    return CommandRun(tuple(argv), exit_code, output, total, time.monotonic() - began)


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, int]:
    kept = bytearray()
    total = 0
    while chunk := await stream.read(_READ_CHUNK):
        total += len(chunk)
        if len(kept) < limit:
            kept += chunk[:limit - len(kept)]
    return bytes(kept), total


async def _feed(process: asyncio.subprocess.Process, data: bytes | None) -> None:
    if data is None or process.stdin is None:
        return
    # A command that exits without reading its input is not an error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(data)
        await process.stdin.drain()
    process.stdin.close()


async def _reap(process: asyncio.subprocess.Process) -> None:
    """Wait for a killed command's exit and the end of its output, so no pipe is left open
    (bounded: a process that left the group may keep the pipe)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REAP_TIMEOUT_S):
            await process.wait()
            if process.stdout is not None:
                while await process.stdout.read(_READ_CHUNK):
                    pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (gone already: nothing to do)."""
    # The process leads its own session (start_new_session), so its group is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _runnable(argv0: str) -> bool:
    """Whether ``argv0`` can be found when the config loads (see :meth:`CommandSentinel.check`)."""
    if not _names_a_path(argv0):
        return shutil.which(argv0) is not None
    if not os.path.isabs(argv0):
        return True  # resolved in the agent root when it runs, which may not exist yet
    return os.path.isfile(argv0) and os.access(argv0, os.X_OK)


def _names_a_path(argv0: str) -> bool:
    return os.sep in argv0 or (os.altsep is not None and os.altsep in argv0)


# ----- the kind -----


class CommandSentinel(SentinelKind):
    """Runs :attr:`CommandOptions.command` over the files changed since the previous firing.

    Built when its codon attempt starts, before the agent does: the first snapshot is taken
    then, on the event loop (one ``stat`` per selected file), so no early write of the agent
    can be missed; later snapshots are taken in a thread.
    """

    name = "command"
    Options = CommandOptions

    options: CommandOptions

    @classmethod
    def check(cls, config: Any, directory: Path) -> None:
        """Refuse a command whose program cannot be found.

        A bare name (``ruff``) must be on ``PATH``; an absolute path must be an executable
        file.  A relative path (``./lint.sh``, ``tools/lint``) runs from the agent root, which
        does not exist when a config is validated, so it is accepted here and a missing one
        unloads the sentinel at its first firing.
        """
        argv0 = cls.Options.model_validate(config.options or {}).command[0]
        if not _runnable(argv0):
            where = "on PATH" if not _names_a_path(argv0) else "an executable file"
            raise ValueError(f"options.command: {argv0!r} is not {where}")

    def __init__(self, setup: SentinelSetup) -> None:
        super().__init__(setup)
        if not isinstance(setup.options, CommandOptions):
            raise ValueError(f"command sentinel {setup.sentinel_id}: options are not"
                             " CommandOptions")
        self.options = setup.options
        # Taken now, before the codon's agent starts, so its first write is a change.
        self._snapshot = self._scan(None)
        self._running: int | None = None
        """The process id (and group) of the command of the firing in progress."""
        self._closed = False

    def _scan(self, previous: WorkspaceSnapshot | None) -> WorkspaceSnapshot:
        root = self.setup.agent_root
        paths = selected_files(root, self.options.files, self.options.exclude)
        return WorkspaceSnapshot.take(root, paths, previous)

    async def fire(self, firing: SentinelFiring) -> SentinelAnswer | None:
        """Compare the workspace with the previous snapshot and run the command on what
        changed; None when nothing did (unless ``runWhenNoChanges``)."""
        snapshot = await asyncio.to_thread(self._scan, self._snapshot)
        changes = snapshot.changes_since(self._snapshot)
        if not changes and not self.options.run_when_no_changes:
            self._snapshot = snapshot
            return None
        run = await self._run(changes)
        if run.exit_code != 0 and self.options.fail_on_exit_code:
            raise SentinelError(f"{self._label()} exited with code {run.exit_code}"
                                f"{_output_tail(run)}", retriable=False)
        self._snapshot = snapshot
        return SentinelAnswer(content=self._report(run, changes), cost=0.0, llm_call=False)

    async def _run(self, changes: WorkspaceChanges) -> CommandRun:
        options = self.options
        paths = [_as_argument(path) for path in changes.present]
        argv = [*options.command, *(paths if options.pass_files == "args" else ())]
        stdin = "".join(f"{path}\n" for path in changes.present).encode() \
            if options.pass_files == "stdin" else None
        try:
            run = await run_command(argv, cwd=self.setup.agent_root, env=self.setup.env,
                                    stdin=stdin, timeout_s=options.timeout_seconds,
                                    max_output_bytes=options.max_output_bytes,
                                    started=self._started)
        except CommandTimeout as exc:
            raise SentinelError(f"{self._label()} {exc}") from None
        except OSError as exc:
            raise self._start_failure(exc, len(paths)) from None
        finally:
            self._running = None
        if self._closed:
            raise SentinelError(f"{self._label()} was killed: the sentinel unloaded")
        return run

    def _started(self, pid: int) -> None:
        self._running = pid

    def _start_failure(self, exc: OSError, arguments: int) -> SentinelError:
        if exc.errno == errno.E2BIG:
            hint = (f' with {arguments} changed files as arguments (use "passFiles": "stdin")'
                    if self.options.pass_files == "args" else "")
            return SentinelError(f"{self._label()}: the command line is too long{hint}",
                                 retriable=False)
        return SentinelFatalError(f"{self._label()} cannot be started: {exc.strerror or exc}",
                                  "configuration")

    def _label(self) -> str:
        return f"command {_shown(self.options.command)}"

    def _report(self, run: CommandRun, changes: WorkspaceChanges) -> str:
        return "\n".join([*_header(self.options, run, changes), "", _body(run)])

    async def aclose(self) -> None:
        """Kill the command of a firing still in progress, so nothing outlives the sentinel.

        The runtime cancels a firing before it unloads the sentinel, which kills the command
        already (:func:`run_command`); this covers a caller that closes without cancelling.
        """
        self._closed = True
        if self._running is not None:
            kill_group(self._running)


def _as_argument(path: str) -> str:
    # A file named "-rf.py" must not read as an option.
    return f"./{path}" if path.startswith("-") else path


def _header(options: CommandOptions, run: CommandRun,
            changes: WorkspaceChanges) -> list[str]:
    present = changes.present
    passed = {"args": f" (+{len(present)} changed files as arguments)",
              "stdin": f" ({len(present)} changed files on stdin)",
              "none": ""}[options.pass_files]
    status = f"killed by signal {-run.exit_code}" if run.exit_code < 0 else str(run.exit_code)
    counts = (f"{changes.count} ({len(changes.created)} created, {len(changes.modified)}"
              f" modified, {len(changes.deleted)} deleted)")
    lines = [f"$ {_shown(options.command)}{passed}",
             f"exit code: {status} after {run.duration_s:.2f}s",
             f"changed files: {counts}"]
    if present:
        lines.append(f"checked: {_listing(present)}")
    if changes.deleted:
        lines.append(f"deleted: {_listing(changes.deleted)}")
    return lines


def _shown(command: Sequence[str]) -> str:
    """The command as a shell would read it, cut short (a ``python -c`` script can be long)."""
    text = shlex.join(command)
    return text if len(text) <= SHOWN_COMMAND_CHARS else text[:SHOWN_COMMAND_CHARS] + "..."


def _listing(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:LISTED_PATHS])
    more = len(paths) - LISTED_PATHS
    return f"{shown}, and {more} more" if more > 0 else shown


def _body(run: CommandRun) -> str:
    text = run.text().rstrip("\n") or "(no output)"
    if run.truncated:
        text += (f"\n[output truncated: the first {len(run.output)} of {run.output_bytes}"
                 " bytes are shown]")
    return text


def _output_tail(run: CommandRun) -> str:
    text = run.text().strip()
    if not text:
        return ""
    tail = text[-ERROR_OUTPUT_CHARS:]
    return f": ...{tail}" if len(tail) < len(text) else f": {tail}"
