"""One pass of a codon: the Claude Agent SDK driving a CLI that :mod:`.cli` has started.

Imported only when a codon runs (``claude_agent_sdk`` takes about a second to import; the
harness imports this module in a thread while the CLI boots).

The SDK's ``ClaudeSDKClient`` speaks the CLI's control protocol (the initialize handshake, the
``PreToolUse`` hook that asks the kernel's tool policy, the ``ask_human`` tool's MCP messages,
the prompt) over :class:`CLITransport`,
our transport for the running :class:`~hankweave_harness_claude.cli.CLIProcess`.  Every stdout
frame is teed into the codon log as it arrives (:mod:`.messages` converts it).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    CLIConnectionError,
    HookMatcher,
    Transport,
)

from hankweave.api import AttemptContext, ToolDecision, error_result
from hankweave_harness_claude.cli import CLIError, CLIProcess
from hankweave_harness_claude.human import (
    ASK_HUMAN_TOOL,
    HUMAN_WAIT_S,
    MCP_SERVER,
    ask_human_server,
)
from hankweave_harness_claude.messages import (
    SessionCosts,
    codon_log_record,
    is_result,
    is_success,
)

log = logging.getLogger(__name__)


class _ReaderErrorsAsDebug(logging.Filter):
    """The SDK logs an error when the CLI's stdout ends with a non-zero exit ("Fatal error in
    message reader: Claude Code exited with code 143"), then raises the same error to us, where
    it is classified into the codon's failure reason, or is no error at all when we ended the
    CLI (Ctrl-C, a shutdown, a question for a person).  Python's last-resort handler would
    print the log line to the person's terminal: keep it at debug level instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.getMessage().startswith(
                "Fatal error in message reader"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


logging.getLogger("claude_agent_sdk._internal.query").addFilter(_ReaderErrorsAsDebug())

EXIT_GRACE_S = 5.0
"""After a result: how long the CLI may take to write its transcript and exit on stdin EOF."""
DISCONNECT_TIMEOUT_S = 5.0
EARLY_EXIT_WAIT_S = 2.0
"""When the handshake fails: how long to wait for the CLI's exit code (it is usually gone)."""


class CLITransport(Transport):
    """The SDK's view of a running :class:`CLIProcess`."""

    def __init__(self, process: CLIProcess) -> None:
        self.process = process

    async def connect(self) -> None:
        await self.process.start()  # already started by the harness: nothing to do

    def is_ready(self) -> bool:
        return self.process.running

    async def write(self, data: str) -> None:
        try:
            await self.process.write(data)
        except CLIError as exc:
            raise CLIConnectionError(str(exc)) from exc

    async def end_input(self) -> None:
        await self.process.end_input()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self.process.frames()

    async def close(self) -> None:
        await self.process.stop(exit_grace_s=EXIT_GRACE_S)


def tool_policy_hook(context: AttemptContext) -> HookMatcher:
    """A ``PreToolUse`` hook that asks the kernel's tool policy before every tool call.

    Hooks run under every permission mode (``bypassPermissions`` included), unlike the SDK's
    ``can_use_tool``, which the CLI consults only where it would have asked a user.  The
    kernel's own ``ask_human`` tool is not asked about.  The policy may hold a call until a
    person approves it, so the CLI waits :data:`~hankweave_harness_claude.human.HUMAN_WAIT_S`
    for the hook, not the SDK's default minute.
    """

    async def before_tool(data: Any, tool_use_id: str | None, _ctx: Any) -> Any:
        name = str(data.get("tool_name", ""))
        if name == ASK_HUMAN_TOOL:
            return {}
        tool_input = data.get("tool_input") or {}
        decision: ToolDecision = await context.authorize_tool(name, tool_input)
        if not decision.allowed:
            return {"hookSpecificOutput": {
                "hookEventName": "PreToolUse", "permissionDecision": "deny",
                "permissionDecisionReason": decision.message or f"{name} is not allowed"}}
        if decision.updated_input is not None:
            return {"hookSpecificOutput": {
                "hookEventName": "PreToolUse", "permissionDecision": "allow",
                "updatedInput": dict(decision.updated_input)}}
        return {}

    return HookMatcher(matcher=None, hooks=[before_tool], timeout=HUMAN_WAIT_S)


class ClaudeCLIError(RuntimeError):
    """The CLI failed after its session had already reported its result."""


async def run_pass(process: CLIProcess, context: AttemptContext
                   ) -> AsyncIterator[dict[str, Any]]:
    """Drive the started ``process`` through one pass; yield its codon-log records as the CLI
    writes them.  Cancelling the iteration ends the CLI at once."""
    log = _PassLog(process, context)
    client = ClaudeSDKClient(options=_sdk_options(process, context),
                             transport=CLITransport(process))
    ended_cleanly = False
    try:
        if not await _send_prompt(client, process):
            # The CLI died before it took the prompt: its exit code and stderr say why.
            yield error_result(_ended_without_result(None, process), session_id=None)
            return
        messages = client.receive_messages().__aiter__()
        while not log.finished and await log.receive(messages):
            for record in log.drain():
                yield record
        for record in log.drain():  # what came with the end or the failure
            yield record
        if not log.finished:
            yield error_result(_ended_without_result(log.failure, process),
                               session_id=log.session_id)
            return
        await _bounded(client.disconnect())  # stdin EOF: the CLI writes its transcript, exits
        ended_cleanly = True
        code = process.returncode
        if code not in (0, None) and log.succeeded:
            raise ClaudeCLIError(f"Claude Code exited with code {code} after its result:"
                                 f" {process.stderr_tail()[-500:]}")
    finally:
        if not ended_cleanly:
            # Cancelled (skip, stop, idle timeout, budget) or failed: end the CLI now.
            await process.stop(exit_grace_s=0)
            await _bounded(client.disconnect())


class _PassLog:
    """The codon-log records of one pass, made from the CLI's frames as they arrive, up to
    its result (priced for this pass): with the session id, and whether it succeeded."""

    def __init__(self, process: CLIProcess, context: AttemptContext) -> None:
        self._frames: collections.deque[dict[str, Any]] = collections.deque()
        process.on_frame = self._frames.append
        self._costs = SessionCosts(context.state_dir)
        self._cost_before = self._costs.total(process.plan.resume)
        self.session_id: str | None = None
        self.succeeded = False
        self.finished = False
        """Whether the result has come (frames after it are not the pass's)."""
        self.failure: Exception | None = None
        """Why the messages stopped before the result: the CLI died, or the SDK failed."""

    async def receive(self, messages: AsyncIterator[Any]) -> bool:
        """Wait for the SDK's next message (its frames are teed in meanwhile); False when the
        messages have ended or failed (:attr:`failure`)."""
        try:
            await messages.__anext__()
        except StopAsyncIteration:
            return False
        except Exception as exc:  # the CLI died, or the SDK failed
            self.failure = exc
            return False
        return True

    def drain(self) -> list[dict[str, Any]]:
        """The records of the frames that have arrived, up to the result."""
        records = []
        while self._frames and not self.finished:
            record = codon_log_record(self._frames.popleft())
            if record is None:
                continue
            self.session_id = self.session_id or record.get("session_id")
            self.succeeded = self.succeeded or is_success(record)
            self.finished = is_result(record)
            if self.finished:
                record = self._costs.per_pass(record, self._cost_before)
            records.append(record)
        return records


def _sdk_options(process: CLIProcess, context: AttemptContext) -> ClaudeAgentOptions:
    """What the SDK's protocol side reads: the hooks it registers in the initialize handshake
    and the in-process MCP servers it answers ``mcp_message`` requests with (the ones
    ``--mcp-config`` declared).  The CLI's flags come from the plan (:mod:`.cli`)."""
    plan = process.plan
    servers = {MCP_SERVER: ask_human_server(context)} if MCP_SERVER in plan.sdk_mcp_servers \
        else {}
    return ClaudeAgentOptions(
        model=plan.model, cwd=str(plan.cwd), permission_mode=plan.permission_mode,  # type: ignore[arg-type]
        hooks={"PreToolUse": [tool_policy_hook(context)]}, mcp_servers=dict(servers),
        max_buffer_size=plan.buffer_size)


async def _send_prompt(client: ClaudeSDKClient, process: CLIProcess) -> bool:
    """Connect and send the prompt; False when the CLI died before it took it (an SDK
    failure with the CLI still running is raised)."""
    try:
        await client.connect()
        await client.query(process.plan.prompt)
    except Exception:
        if not await process.exited_within(EARLY_EXIT_WAIT_S):
            raise  # the SDK failed, not the CLI
        return False
    return True


def _ended_without_result(failure: BaseException | None, process: CLIProcess) -> str:
    """The error text of a pass whose CLI ended before its result (classified by the kernel)."""
    if failure is not None:
        return f"Claude Code CLI failed: {failure}"
    tail = process.stderr_tail()
    return (f"Claude Code CLI ended without a result (exit code {process.returncode})"
            + (f": {tail[-1000:]}" if tail else ""))


async def _bounded(closing: Awaitable[Any]) -> None:
    try:
        await asyncio.wait_for(closing, DISCONNECT_TIMEOUT_S)
    except Exception as exc:
        log.debug("disconnecting from the Claude Code CLI: %r", exc)
