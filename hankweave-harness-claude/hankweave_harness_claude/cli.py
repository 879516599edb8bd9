"""The Claude Code CLI as a child process: its command line, starting it, reading it, ending it.

Nothing here imports the Claude Agent SDK, so the CLI can start (it takes about half a second
to boot) while the SDK is still being imported (about a second): the two overlap, on two cores.

The process gets exactly the environment :mod:`.environment` builds, runs in a session (and
process group) of its own, and writes its stderr straight to the attempt's stderr file.

Ending it (:meth:`CLIProcess.stop`): after a result, stdin is closed and the CLI exits by
itself once its session transcript is written (the next codon may resume it); when the runtime
cancels the pass (skip, stop, idle timeout, budget, an interruption for a human), it gets
SIGTERM at once (it then ends its tools' processes, which run in sessions of their own), before
its stdin is closed, and SIGKILL for its process group three seconds later.  The SDK's own
shutdown would first wait five seconds for an exit that a CLI busy with a request never makes.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.api import AgentStartError, StderrLog

TERM_GRACE_S = 3.0
"""After SIGTERM: how long the CLI may take to end its tools before its group is killed."""
STDERR_TAIL_BYTES = 2000


class CLIError(RuntimeError):
    """The CLI could not be started, or failed while it ran."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class CLIStartError(CLIError, AgentStartError):
    """The CLI binary could not be started: a local problem no retry fixes."""


def bundled_cli() -> Path | None:
    """The CLI bundled in the ``claude-agent-sdk`` wheel, found without importing the SDK."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "_bundled" / "claude"
    return path if path.is_file() else None


@dataclass(frozen=True)
class PassPlan:
    """Everything one pass of the CLI runs with (decided by the harness, from its settings and
    the request)."""

    cli_path: str
    model: str
    cwd: Path
    prompt: str
    env: Mapping[str, str]
    permission_mode: str
    append_system_prompt: str | None = None
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    max_turns: int | None = None
    setting_sources: tuple[str, ...] = ("user",)
    auto_compact: bool = False
    resume: str | None = None
    fork_session: bool = False
    """With :attr:`resume`: continue a copy of that session under a new id (``--fork-session``),
    leaving the original as it was."""
    effort: str | None = None
    """The reasoning effort (``--effort``: ``high``, ``xhigh``), or None for the CLI's default."""
    buffer_size: int = 64 * 1024 * 1024
    sdk_mcp_servers: tuple[str, ...] = ()
    """In-process MCP servers (served by the SDK in the harness's process, reached through the
    control protocol's ``mcp_message`` requests): their names, as ``--mcp-config`` declares
    them."""
    launcher: tuple[str, ...] = ()
    """What the command runs under: the sandbox's ``bwrap ... --`` (empty: nothing)."""

    @property
    def settings_json(self) -> str:
        return json.dumps({"autoCompactEnabled": self.auto_compact})

    @property
    def mcp_config_json(self) -> str:
        """``--mcp-config`` as the SDK writes it for its servers (``type`` ``sdk``, no
        instance)."""
        return json.dumps({"mcpServers": {name: {"type": "sdk", "name": name}
                                          for name in self.sdk_mcp_servers}})

    def command(self) -> list[str]:
        """The command line: the flags the Claude Agent SDK passes for the same options (a test
        compares the two), in stream-json mode both ways.  A value is given in the ``=`` form,
        as the SDK does since 0.2.190, so no value (a prompt, a session id) can be a flag."""
        command = [self.cli_path, "--output-format", "stream-json", "--verbose"]
        if self.append_system_prompt:
            command.append(f"--append-system-prompt={self.append_system_prompt}")
        if self.allowed_tools:
            command.append(f"--allowedTools={','.join(self.allowed_tools)}")
        if self.max_turns:
            command.append(f"--max-turns={self.max_turns}")
        if self.disallowed_tools:
            command.append(f"--disallowedTools={','.join(self.disallowed_tools)}")
        command += [f"--model={self.model}", f"--permission-mode={self.permission_mode}"]
        if self.resume:
            command.append(f"--resume={self.resume}")
        command += ["--settings", self.settings_json]
        if self.sdk_mcp_servers:
            command += ["--mcp-config", self.mcp_config_json]
        if self.resume and self.fork_session:
            command.append("--fork-session")
        command.append(f"--setting-sources={','.join(self.setting_sources)}")
        if self.effort:
            command.append(f"--effort={self.effort}")
        command += ["--input-format", "stream-json"]
        return command


class CLIProcess:
    """One running CLI (see the module docstring)."""

    def __init__(self, plan: PassPlan, *, stderr: StderrLog,
                 on_spawn: Callable[[int], Awaitable[None]]) -> None:
        self.plan = plan
        self.stderr = stderr
        self.on_spawn = on_spawn
        self.process: asyncio.subprocess.Process | None = None
        self._stopped = False
        self.on_frame: Callable[[dict[str, Any]], None] = lambda frame: None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        """Start the CLI and report its pid to the kernel."""
        if self.process is not None:
            return
        plan = self.plan
        try:
            self.process = await asyncio.create_subprocess_exec(
                *plan.launcher, *plan.command(), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=self.stderr.fileno(), cwd=str(plan.cwd), env=dict(plan.env),
                limit=plan.buffer_size, start_new_session=True)
        except OSError as exc:
            raise CLIStartError(f"Could not start the Claude Code CLI ({plan.cli_path}): {exc}"
                                ) from exc
        await self.on_spawn(self.process.pid)

    async def write(self, data: str) -> None:
        process = self.process
        if process is None or process.stdin is None or process.stdin.is_closing():
            raise CLIError("the Claude Code CLI is not running")
        try:
            process.stdin.write(data.encode())
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise CLIError(f"the Claude Code CLI closed its input: {exc}") from exc

    async def end_input(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        """Every JSON frame the CLI writes to stdout (each also given to :attr:`on_frame`);
        raises :class:`CLIError` if it then exits with an error."""
        process = self.process
        if process is None or process.stdout is None:
            raise CLIError("the Claude Code CLI is not running")
        while True:
            try:
                line = await process.stdout.readline()
            except ValueError as exc:  # a line longer than the buffer
                raise CLIError(f"a CLI message exceeded maxBufferSize ({self.plan.buffer_size}"
                               " bytes)") from exc
            if not line:
                break
            line = line.strip()
            if not line:
                continue
            try:
                frame = json.loads(line)
            except ValueError:
                self.stderr.write(b"[stdout, not JSON] " + line[:500] + b"\n")
                continue
            if isinstance(frame, dict):
                self.on_frame(frame)
                yield frame
        code = await process.wait()
        if code != 0:
            tail = self.stderr_tail()
            raise CLIError(f"Claude Code exited with code {code}"
                           + (f": {tail[-1000:]}" if tail else ""), exit_code=code)

    def stderr_tail(self) -> str:
        """The end of what the CLI wrote to stderr in this attempt."""
        try:
            with open(self.stderr.path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - STDERR_TAIL_BYTES))
                return handle.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    async def exited_within(self, timeout_s: float) -> bool:
        """Whether the CLI has exited, or does within ``timeout_s``."""
        if self.process is None:
            return False
        if self.process.returncode is None:
            await _wait_exit(self.process, timeout_s)
        return self.process.returncode is not None

    async def stop(self, *, exit_grace_s: float) -> None:
        """End the CLI: stdin EOF and ``exit_grace_s`` to exit, then SIGTERM, then SIGKILL of
        its process group.

        Without a grace (a cancelled pass) SIGTERM comes before the EOF: on EOF the CLI fails
        the control request it waits on (an ``ask_human`` call, a ``PreToolUse`` hook held for
        a person's approval) as interrupted and at once sends the model another request: a
        turn paid for, and left in the session that a resume continues.
        """
        process = self.process
        if process is None or self._stopped:
            return
        self._stopped = True  # once: the group's id may be reused after the CLI is gone
        if exit_grace_s > 0:
            with contextlib.suppress(Exception):
                await self.end_input()
            if process.returncode is None:
                await _wait_exit(process, exit_grace_s)
        if process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            await _wait_exit(process, TERM_GRACE_S)
        with contextlib.suppress(Exception):
            await self.end_input()
        # Whatever is left of its group (the CLI, a tool it started) goes now.
        _signal_group(process.pid, signal.SIGKILL)
        if process.returncode is None:
            await _wait_exit(process, TERM_GRACE_S)


async def _wait_exit(process: asyncio.subprocess.Process, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(process.wait()), timeout_s)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signum)  # the CLI leads its own session and group


def env_cli_path(env: Mapping[str, str]) -> str | None:
    """``CLAUDE_PATH_TO_CLAUDE_EXECUTABLE``, as the original honours it."""
    return env.get("CLAUDE_PATH_TO_CLAUDE_EXECUTABLE") or None


def resolve_cli_path(configured: str | None, env: Mapping[str, str]) -> str:
    """The CLI to run: the setting, else the variable, else the bundled one, else ``claude``."""
    for candidate in (configured, env_cli_path(env)):
        if candidate:
            return os.path.expanduser(candidate)
    bundled = bundled_cli()
    if bundled is not None:
        return str(bundled)
    import shutil

    found = shutil.which("claude", path=env.get("PATH"))
    if found is None:
        raise CLIError("No Claude Code CLI: claude-agent-sdk has none bundled (a platform"
                       " without its wheel?) and there is no `claude` on PATH; set"
                       " harnesses.claude.cliPath")
    return found

