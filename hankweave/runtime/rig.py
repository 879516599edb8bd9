"""Rig setup: the ``copy`` and ``command`` operations run before a codon's agent starts (docs/behaviour.md §1.4).

:func:`run_rig` runs a codon's ``rigSetup`` in order and reports through callbacks, so the
orchestrator can turn them into ``info``, ``rig.output`` and ``rig.setup.failed`` events.
:func:`run_command` is the one shell-command runner of the runtime; ``outputFiles``'
``beforeCopy`` commands use it too.

Differences from Hankweave 0.10.0, on purpose:

* copies are done in Python (``shutil``; symlinks inside a copied tree stay symlinks), not by
  running ``cp -r`` through a shell with quoted paths;
* a copy target that would land outside agentRoot is refused;
* commands run in their own process group, so a timeout (or a cancelled rig) kills the command
  and everything it started;
* once a command has exited, its output pipes get a short grace period: a background process
  that keeps them open (``server &``) no longer makes rig setup hang.

POSIX only (process groups).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import enum
import logging
import os
import posixpath
import re
import shutil
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from hankweave.config.hank import RigCommand, RigCopy, RigOperation
from hankweave.faults import kill_point
from hankweave.fsutil import remove_path

__all__ = [
    "OUTPUT_LINE_MAX_CHARS",
    "OUTPUT_THROTTLE_S",
    "CommandPolicy",
    "CommandResult",
    "CommandRunner",
    "OutputCallback",
    "RigFailure",
    "RigFailureType",
    "RigOpOutcome",
    "RigResult",
    "classify_rig_failure",
    "describe_operation",
    "run_command",
    "run_rig",
]

log = logging.getLogger(__name__)

OUTPUT_THROTTLE_S = 1.0
"""At most one output callback per stream per this many seconds."""
OUTPUT_LINE_MAX_CHARS = 500
"""Output lines passed to callbacks are cut to this length."""

_OUTPUT_KEEP_CHARS = 64 * 1024
# What is kept of each stream for error messages: enough for any diagnosis, bounded for chatty
# installs.
_STDERR_TAIL_CHARS = 2000
_READ_CHUNK = 64 * 1024
_PIPE_GRACE_S = 2.0
_TERM_GRACE_S = 1.0
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_OPEN_LINE_MAX_CHARS = 4 * OUTPUT_LINE_MAX_CHARS

RigFailureType = Literal["command_failed", "timeout", "other"]
OpType = Literal["copy", "command"]
Stream = Literal["stdout", "stderr"]
OutputCallback = Callable[[Stream, str], None]
"""``(stream, line)``: the last line of an output chunk, throttled per stream."""


# --------------------------------------------------------------------------------------------
# Shell commands
# --------------------------------------------------------------------------------------------


class CommandPolicy(enum.Enum):
    """What a run does with the hank's shell commands: rig ``command`` operations and
    ``outputFiles[].beforeCopy``.  A replay's hank comes from a recording, that is from its
    author: its commands are their code, which the person replaying never agreed to run."""

    RUN = "run"
    """Run them (a run of the person's own hank)."""
    ANNOUNCE = "announce"
    """Print each, then run it (a replay with ``--allow-commands``)."""
    SKIP = "skip"
    """Skip each with a notice; a skipped rig command is not a failure (a replay)."""

    def notice(self, where: str, command: str) -> str | None:
        """The line a person sees before ``command`` (at ``where``, e.g. ``rig operation
        1/2``) runs or is skipped; None when it simply runs."""
        if self is CommandPolicy.SKIP:
            return (f"{where}: `{command}` skipped: a recording's commands are its author's"
                    " code; pass --allow-commands to run them")
        if self is CommandPolicy.ANNOUNCE:
            return f"{where}: running `{command}` (--allow-commands)"
        return None


@dataclass(frozen=True)
class CommandResult:
    """How a shell command ended.

    Attributes:
        exit_code: the exit status; ``-1`` when the command was ended by a signal.
        stdout: the captured standard output (its last 64 KiB).
        stderr: the captured standard error (its last 64 KiB).
        timed_out: the command ran past its timeout and was killed.
        duration_ms: wall time from spawn to exit.
        signal: the signal that ended the command, if one did.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_ms: int
    signal: int | None = None

    @property
    def ok(self) -> bool:
        """Exited with status 0 in time."""
        return self.exit_code == 0 and not self.timed_out


class CommandRunner(Protocol):
    """Runs one shell command; :func:`run_command` is the implementation."""

    def __call__(
        self,
        command: str,
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> Awaitable[CommandResult]: ...


class _LineThrottle:
    """Passes on at most one line per interval; a line that arrives too early waits its turn
    and is replaced by any later one, so the newest line is what gets through."""

    def __init__(self, emit: Callable[[str], None], interval: float) -> None:
        self._emit_callback = emit
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._last_emit: float | None = None
        self._pending: str | None = None
        self._timer: asyncio.TimerHandle | None = None

    def offer(self, line: str) -> None:
        now = self._loop.time()
        due = self._last_emit is None or now - self._last_emit >= self._interval
        if due and self._timer is None:
            self._emit(line)
            return
        self._pending = line
        if self._timer is None:
            assert self._last_emit is not None
            delay = max(0.0, self._last_emit + self._interval - now)
            self._timer = self._loop.call_later(delay, self._flush_due)

    def close(self) -> None:
        """Send the line still waiting, if any, and stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending is not None:
            line, self._pending = self._pending, None
            self._emit(line)

    def _flush_due(self) -> None:
        self._timer = None
        if self._pending is not None:
            line, self._pending = self._pending, None
            self._emit(line)

    def _emit(self, line: str) -> None:
        self._last_emit = self._loop.time()
        try:
            self._emit_callback(line)
        except Exception:
            # An observer's bug must not break the command it observes.
            log.exception("Output callback failed")


def _last_complete_line(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        stripped = line.strip()
        if stripped:
            return stripped[:OUTPUT_LINE_MAX_CHARS]
    return None


async def _pump(
    reader: asyncio.StreamReader, sink: list[str], throttle: _LineThrottle | None
) -> None:
    """Read a stream to its end into ``sink``, offering each chunk's last line to ``throttle``.

    Lines are reassembled across chunks (a pipe read may end mid-line), so a callback never
    sees half a line; a line still open at the end of the stream counts as complete.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    kept = 0
    open_line = ""
    while True:
        chunk = await reader.read(_READ_CHUNK)
        text = decoder.decode(chunk, final=not chunk)
        if text:
            sink.append(text)
            kept += len(text)
            if kept > 2 * _OUTPUT_KEEP_CHARS:
                joined = "".join(sink)[-_OUTPUT_KEEP_CHARS:]
                sink[:] = [joined]
                kept = len(joined)
            if throttle is not None:
                parts = _LINE_BREAK.split(open_line + text)
                # Bounded: a progress bar without newlines must not grow this forever.
                open_line = parts.pop()[-_OPEN_LINE_MAX_CHARS:]
                line = _last_complete_line(parts)
                if line is not None:
                    throttle.offer(line)
        if not chunk:
            if throttle is not None:
                line = _last_complete_line([open_line])
                if line is not None:
                    throttle.offer(line)
            return


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _end_group(process: asyncio.subprocess.Process, exited: asyncio.Future[int]) -> None:
    """SIGTERM the command's process group, SIGKILL it after a grace period."""
    _signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), _TERM_GRACE_S)
    # Also reaches children that outlived the shell or ignored SIGTERM.
    _signal_group(process.pid, signal.SIGKILL)
    await exited


async def _open_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_CHUNK)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


async def run_command(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float | None = None,
    on_output: OutputCallback | None = None,
) -> CommandResult:
    """Run ``command`` through ``/bin/sh`` in ``cwd`` with exactly the environment ``env``.

    stdout and stderr are captured. ``on_output(stream, line)`` gets the last line of each
    output chunk (trimmed, at most 500 characters), at most once a second per stream; the line
    still waiting when the command ends is delivered before this returns. With ``timeout_s`` the
    whole process group is killed when the time is up. Cancelling the call kills it too.

    Raises:
        OSError: the command could not be started (e.g. ``cwd`` does not exist).
    """
    started = time.monotonic()
    process, exited, out_read, err_read = await _spawn(command, cwd=cwd, env=env)
    try:
        stdout_reader, stdout_transport = await _open_reader(out_read)
        stderr_reader, stderr_transport = await _open_reader(err_read)
    except BaseException:
        # Cancelled (a skip, a stop) before the readers were set up: the command runs already.
        await asyncio.shield(_end_group(process, exited))
        raise

    throttles = _throttles(on_output)
    out: list[str] = []
    err: list[str] = []
    readers = [
        asyncio.ensure_future(_pump(stdout_reader, out, throttles.get("stdout"))),
        asyncio.ensure_future(_pump(stderr_reader, err, throttles.get("stderr"))),
    ]
    try:
        timed_out = await _wait_for_exit(process, exited, readers, timeout_s)
    finally:
        stdout_transport.close()
        stderr_transport.close()
        for throttle in throttles.values():
            throttle.close()

    returncode = exited.result()
    killed_by = -returncode if returncode < 0 else None
    return CommandResult(
        exit_code=-1 if returncode < 0 else returncode,
        stdout="".join(out)[-_OUTPUT_KEEP_CHARS:],
        stderr="".join(err)[-_OUTPUT_KEEP_CHARS:],
        timed_out=timed_out,
        duration_ms=round((time.monotonic() - started) * 1000),
        signal=killed_by,
    )


async def _spawn(
    command: str, *, cwd: Path, env: Mapping[str, str]
) -> tuple[asyncio.subprocess.Process, asyncio.Future[int], int, int]:
    """Start ``command`` in a new session: the process, its exit, and its stdout and stderr
    pipes' read ends."""
    # Our own pipes rather than asyncio's PIPE: asyncio's wait() also waits for the pipes to
    # close, which a background process (`server &`) may never do.
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=str(cwd),
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out_write,
            stderr=err_write,
            start_new_session=True,
        )
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return process, asyncio.ensure_future(process.wait()), out_read, err_read


def _throttles(on_output: OutputCallback | None) -> dict[Stream, _LineThrottle]:
    """One line throttle per stream when ``on_output`` wants the output."""
    if on_output is None:
        return {}
    callback = on_output
    return {
        "stdout": _LineThrottle(lambda line: callback("stdout", line), OUTPUT_THROTTLE_S),
        "stderr": _LineThrottle(lambda line: callback("stderr", line), OUTPUT_THROTTLE_S),
    }


async def _wait_for_exit(
    process: asyncio.subprocess.Process,
    exited: asyncio.Future[int],
    readers: Sequence[asyncio.Future[None]],
    timeout_s: float | None,
) -> bool:
    """Wait for the command (its group is killed at ``timeout_s``, or when the wait is
    cancelled) and for its output; whether it timed out."""
    timed_out = False
    try:
        try:
            await asyncio.wait_for(asyncio.shield(exited), timeout_s)
        except TimeoutError:
            timed_out = True
            await _end_group(process, exited)
        # Output written just before exit is still in the pipe; anything still holding the
        # pipe after the grace period is a background process we do not wait for.
        _, still_reading = await asyncio.wait(readers, timeout=_PIPE_GRACE_S)
        for reader in still_reading:
            reader.cancel()
    except asyncio.CancelledError:
        await asyncio.shield(_end_group(process, exited))
        for reader in readers:
            reader.cancel()
        raise
    return timed_out


# --------------------------------------------------------------------------------------------
# Rig setup
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RigFailure:
    """One failed rig operation, as ``rig.setup.failed`` reports it.

    Attributes:
        index: the operation's index in ``rigSetup`` (the event's ``commandIndex``).
        op_type: ``copy`` or ``command``.
        failure_type: ``timeout`` when the message or stderr mentions one, ``command_failed``
            for a command, ``other`` otherwise.
        exit_code: the command's exit status (``-1`` for a signal or a timeout kill); ``None``
            for copies and commands that never started.
        message: what went wrong, for ``Rig setup failed at <type> operation: <message>``.
        stderr_tail: the end of the command's stderr.
        ignored: ``allowFailure`` or ``--ignore-rig-failures`` let rig setup continue.
    """

    index: int
    op_type: OpType
    failure_type: RigFailureType
    exit_code: int | None
    message: str
    stderr_tail: str = ""
    ignored: bool = False


@dataclass(frozen=True)
class RigOpOutcome:
    """How one rig operation ended."""

    index: int
    op_type: OpType
    ok: bool
    duration_ms: int
    target: Path | None = None
    """For a copy: the target path in agentRoot."""
    exit_code: int | None = None
    """For a command that ran: its exit status."""
    failure: RigFailure | None = None
    skipped: bool = False
    """A command not run (:attr:`CommandPolicy.SKIP`); counted as done, never as a failure."""


@dataclass(frozen=True)
class RigResult:
    """The outcome of a codon's rig setup.

    Attributes:
        outcomes: one per operation that ran, in order (none after a fatal failure).
        failed: the failure that stopped rig setup, or ``None`` (ignored failures are in
            ``outcomes`` only).
        created_dirs: the targets of successful copies (directories or files), which a
            rollback removes to undo this rig.
        duration_ms: wall time of the whole rig setup.
    """

    outcomes: list[RigOpOutcome] = field(default_factory=list)
    failed: RigFailure | None = None
    created_dirs: list[Path] = field(default_factory=list)
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        """Rig setup completed (possibly with ignored failures)."""
        return self.failed is None

    @property
    def succeeded_count(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.ok)

    @property
    def failed_count(self) -> int:
        """Failed operations, ignored ones included."""
        return sum(1 for outcome in self.outcomes if not outcome.ok)


def describe_operation(op: RigOperation) -> str:
    """``copy <from> → <to>`` or ``command '<run>'``, as in ``Rig operation i/N: …``."""
    if isinstance(op, RigCopy):
        return f"copy {op.copy_.from_} → {op.copy_.to}"
    return f"command '{op.command.run}'"


def classify_rig_failure(message: str, stderr: str, op_type: OpType) -> RigFailureType:
    """``timeout`` when the text mentions one, else ``command_failed`` for commands, else
    ``other``."""
    text = f"{message}\n{stderr}".lower()
    if "timed out" in text or "timeout" in text or "etimedout" in text:
        return "timeout"
    return "command_failed" if op_type == "command" else "other"


class _OperationError(Exception):
    def __init__(self, message: str, *, exit_code: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr


def _inside(root: Path, relative: str) -> Path | None:
    """``root/relative`` if it stays inside ``root`` (lexically), else ``None``."""
    if posixpath.isabs(relative) or os.path.isabs(relative):
        return None
    normalized = posixpath.normpath(relative.replace(os.sep, "/"))
    if normalized in ("", ".") or normalized == ".." or normalized.startswith("../"):
        return None
    return root / normalized


def _copy_path(source: Path, target: Path) -> None:
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target, follow_symlinks=False)


async def _run_copy(op: RigCopy, *, agent_root: Path, hank_dir: Path) -> Path:
    source = hank_dir / op.copy_.from_
    target = _inside(agent_root, op.copy_.to)
    if target is None:
        raise _OperationError(f'Invalid target path "{op.copy_.to}"')
    if not os.path.lexists(source):
        raise _OperationError(f"Source path does not exist: {source}")
    if not target.parent.is_dir():
        raise _OperationError(f"Target parent directory does not exist: {target.parent}")

    def replace() -> None:
        if os.path.lexists(target):
            remove_path(target)
        _copy_path(source, target)

    try:
        await asyncio.to_thread(replace)
    except OSError as exc:
        raise _OperationError(f"Copy failed: {exc}") from exc
    return target


async def _run_rig_command(
    op: RigCommand,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float | None,
    on_output: OutputCallback,
) -> int:
    try:
        result = await run_command(
            op.command.run, cwd=cwd, env=env, timeout_s=timeout_s, on_output=on_output
        )
    except OSError as exc:
        raise _OperationError(f"Command could not be started: {exc}") from exc
    if result.timed_out:
        raise _OperationError(
            f"Command timed out after {timeout_s:g}s: {op.command.run}",
            exit_code=result.exit_code,
            stderr=result.stderr,
        )
    if result.exit_code != 0:
        how = (
            f"was killed by signal {result.signal}"
            if result.signal is not None
            else f"failed with exit code {result.exit_code}"
        )
        raise _OperationError(
            f"Command {how}: {op.command.run}", exit_code=result.exit_code, stderr=result.stderr
        )
    return result.exit_code


async def run_rig(
    ops: Sequence[RigOperation],
    *,
    agent_root: Path,
    hank_dir: Path,
    env: Mapping[str, str],
    ignore_failures: bool,
    timeout_s: float | None,
    on_output: Callable[[int, str, str], None],
    on_operation: Callable[[int, int, str], None],
    on_failure: Callable[[RigFailure], None],
    commands: CommandPolicy = CommandPolicy.RUN,
    on_notice: Callable[[str], None] = lambda line: None,
) -> RigResult:
    """Run a codon's rig setup operations in order.

    ``copy``: ``hank_dir/<from>`` (which must exist) replaces ``agent_root/<to>``, whose parent
    must already exist. ``command``: run through the shell with the runtime's environment plus
    ``env`` (the codon's ``env``), in agentRoot, or, for ``workingDirectory: "lastCopied"``, in
    the target of this rig's last successful copy; ``timeout_s`` bounds each command.

    A failed operation with ``allowFailure`` (or any failure with ``ignore_failures``) is
    reported with ``ignored=True`` and the next operation runs; any other failure stops rig setup
    and is returned in ``RigResult.failed``.

    Args:
        on_output: ``(operation index, "stdout"|"stderr", line)`` for command output, throttled
            to one line per second per stream (``rig.output``).
        on_operation: ``(index, total, description)`` before each operation, with ``index``
            counted from 0 and ``description`` from :func:`describe_operation`.
        on_failure: called for every failed operation, ignored or not (``rig.setup.failed``).
        commands: whether ``command`` operations run, are announced then run, or are skipped
            (copies always run: they are confined to agentRoot).
        on_notice: the line :meth:`CommandPolicy.notice` gives for a command, before it runs or
            instead of running.
    """
    started = time.monotonic()
    rig = _RigSetup(agent_root=agent_root, hank_dir=hank_dir, env={**os.environ, **env},
                    ignore_failures=ignore_failures, timeout_s=timeout_s, total=len(ops),
                    commands=commands, on_output=on_output, on_failure=on_failure,
                    on_notice=on_notice)
    outcomes: list[RigOpOutcome] = []
    for index, op in enumerate(ops):
        on_operation(index, len(ops), describe_operation(op))
        outcome = await rig.run(index, op)
        outcomes.append(outcome)
        if outcome.failure is not None and not outcome.failure.ignored:
            return RigResult(outcomes, outcome.failure, rig.created, _ms_since(started))
    return RigResult(outcomes, None, rig.created, _ms_since(started))


@dataclass
class _RigSetup:
    """One rig setup under way: its settings and callbacks (see :func:`run_rig`), and what
    its copies made so far."""

    agent_root: Path
    hank_dir: Path
    env: Mapping[str, str]
    """The runtime's environment plus the codon's ``env``."""
    ignore_failures: bool
    timeout_s: float | None
    total: int
    commands: CommandPolicy
    on_output: Callable[[int, str, str], None]
    on_failure: Callable[[RigFailure], None]
    on_notice: Callable[[str], None]
    created: list[Path] = field(default_factory=list)
    last_copied: Path | None = None

    async def run(self, index: int, op: RigOperation) -> RigOpOutcome:
        """Run one operation; a failure (reported to ``on_failure``) is in the outcome."""
        started = time.monotonic()
        try:
            if isinstance(op, RigCopy):
                target = await _run_copy(op, agent_root=self.agent_root, hank_dir=self.hank_dir)
                self.last_copied = target
                self.created.append(target)
                return RigOpOutcome(index=index, op_type=op.type, ok=True,
                                    duration_ms=_ms_since(started), target=target)
            return await self._command(index, op, started)
        except _OperationError as exc:
            return self._failed(index, op, exc, started)

    async def _command(self, index: int, op: RigCommand, started: float) -> RigOpOutcome:
        notice = self.commands.notice(f"rig operation {index + 1}/{self.total}", op.command.run)
        if notice is not None:
            self.on_notice(notice)
        if self.commands is CommandPolicy.SKIP:
            return RigOpOutcome(index=index, op_type=op.type, ok=True, duration_ms=0,
                                skipped=True)
        cwd = self.agent_root
        if op.command.working_directory == "lastCopied" and self.last_copied is not None:
            cwd = self.last_copied

        def forward(stream: Stream, line: str) -> None:
            kill_point("rig.command")  # test-only (docs/crash-testing.md)
            self.on_output(index, stream, line)

        exit_code = await _run_rig_command(
            op, cwd=cwd, env=self.env, timeout_s=self.timeout_s, on_output=forward
        )
        return RigOpOutcome(index=index, op_type=op.type, ok=True,
                            duration_ms=_ms_since(started), exit_code=exit_code)

    def _failed(self, index: int, op: RigOperation, exc: _OperationError,
                started: float) -> RigOpOutcome:
        failure = RigFailure(
            index=index,
            op_type=op.type,
            failure_type=classify_rig_failure(str(exc), exc.stderr, op.type),
            exit_code=exc.exit_code,
            message=str(exc),
            stderr_tail=exc.stderr[-_STDERR_TAIL_CHARS:],
            ignored=self.ignore_failures or op.allow_failure,
        )
        self.on_failure(failure)
        return RigOpOutcome(index=index, op_type=op.type, ok=False,
                            duration_ms=_ms_since(started), exit_code=exc.exit_code,
                            failure=failure)


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
