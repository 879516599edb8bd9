"""``ClaudeHarness``: codons on Anthropic models, run by the Claude Code CLI.

This module is what the plugin registers, so it stays light: the Claude Agent SDK is imported
by :mod:`.session` when a codon runs (in a thread, while the CLI boots), never by
``hankweave --help``, ``validate`` or ``inspect``.

What one pass runs (the original's options, ``docs/harness-claude.md``):

* the codon's model (in Bedrock mode the Bedrock model id, with ``CLAUDE_CODE_USE_BEDROCK=1``),
  and the reasoning effort of a variant spelling (``sonnet-xhigh``) as ``--effort``, which the
  CLI applies as the model allows (adaptive models send it as the request's effort);
* the Claude Code system prompt with the hank's system prompt appended;
* ``cwd`` = the workspace; ``resume`` = the session of ``continue-previous`` and extensions;
* settings ``{"autoCompactEnabled": <the codon's autoCompact>}`` and setting sources
  ``["user"]``;
* the permission mode of :class:`ClaudeConfig` (unattended by default, see
  :func:`permissions`), and a ``PreToolUse`` hook that asks the kernel's tool policy;
* the ``ask_human`` tool (:mod:`.human`), an in-process MCP server, approved in every
  permission mode;
* the environment of :mod:`.environment`.

A pass that resumes an interruption (``request.resumes_interruption``) is an ordinary resume:
the Claude CLI cannot hold a pending tool call across processes, so the session continues and
``request.prompt``, which tells the agent the answers, is its next user turn.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from hankweave.api import (
    AttemptContext,
    CodonLogRecord,
    CodonRequest,
    Harness,
    HarnessConfig,
    PreflightProblem,
    PreflightRequest,
)
from hankweave_harness_claude.cli import CLIProcess, PassPlan, resolve_cli_path
from hankweave_harness_claude.environment import (
    BEDROCK_PROVIDER,
    CLIFolders,
    base_url_set,
    cli_environment,
)
from hankweave_harness_claude.human import ASK_HUMAN_TOOL, MCP_SERVER

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk",
                         "auto"]
SettingSource = Literal["user", "project", "local"]

UNATTENDED_TOOLS = ("Bash", "BashOutput", "KillShell", "Edit", "MultiEdit", "Write", "Read",
                    "Glob", "Grep", "NotebookEdit", "WebFetch", "WebSearch", "TodoWrite",
                    "Task", "Skill")
"""The Claude Code tools approved without asking when ``bypassPermissions`` cannot be used."""

ROOT_NOTICE = (
    "As root the Claude CLI refuses bypassPermissions: codons run with acceptEdits and the"
    " standard tools approved. On a sandbox, set IS_SANDBOX=1; or choose"
    " harnesses.claude.permissionMode (docs/harness-claude.md).")

SESSION_MODULE = "hankweave_harness_claude.session"
"""What drives a pass with the Claude Agent SDK (imported when a codon runs)."""
DEFAULT_BUFFER_SIZE = 64 * 1024 * 1024
CONFIG_DIR_CHOICES = ("auto", "execution", "user")


class ClaudeConfig(HarnessConfig):
    """The ``harnesses.claude`` settings."""

    permission_mode: PermissionMode | None = None
    """The CLI's permission mode.  Unset: unattended, as the original (``bypassPermissions``;
    as root, where the CLI refuses that without ``IS_SANDBOX=1``, ``acceptEdits`` with the
    standard tools approved, and a warning)."""
    allowed_tools: tuple[str, ...] = ()
    """Permission rules approved without asking (``"Bash(git:*)"``, ``"Write"``)."""
    disallowed_tools: tuple[str, ...] = ()
    """Tools removed from the agent's tool list (``"WebFetch"``)."""
    max_turns: int | None = Field(default=None, gt=0)
    """End a pass after this many agent turns (an ``error_max_turns`` result)."""
    setting_sources: tuple[SettingSource, ...] = ("user",)
    """Which Claude settings files apply (the original: the user's only; ``project`` would obey
    ``.claude/`` and ``CLAUDE.md`` in the workspace)."""
    config_dir: str = "auto"
    """The CLI's config folder (``CLAUDE_CONFIG_DIR``: transcripts, login): ``auto`` (the
    execution's own with a base URL set, else the user's), ``execution``, ``user``, or a path."""
    cli_path: str | None = None
    """The Claude Code CLI to run (default: ``CLAUDE_PATH_TO_CLAUDE_EXECUTABLE``, else the one
    bundled with ``claude-agent-sdk``)."""
    max_buffer_size: int = Field(default=DEFAULT_BUFFER_SIZE, gt=0)
    """The largest CLI message read, in bytes (a big tool output is one message)."""

    @field_validator("config_dir")
    @classmethod
    def _config_dir(cls, value: str) -> str:
        if value not in CONFIG_DIR_CHOICES and not os.path.isabs(os.path.expanduser(value)):
            raise ValueError(f"{value!r} is neither one of {', '.join(CONFIG_DIR_CHOICES)}"
                             " nor an absolute path")
        return value


class ClaudeSetupError(RuntimeError):
    """The harness cannot start the CLI as configured (reported before any request)."""


@dataclass(frozen=True)
class Permissions:
    mode: PermissionMode
    allowed_tools: tuple[str, ...]
    notice: str | None = None


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def permissions(config: ClaudeConfig, env: Mapping[str, str], *,
                as_root: bool | None = None) -> Permissions:
    """The permission mode and approved tools for the CLI (see :class:`ClaudeConfig`)."""
    root = running_as_root() if as_root is None else as_root
    sandbox = env.get("IS_SANDBOX") == "1"
    mode = config.permission_mode
    if mode is None:
        if root and not sandbox:
            tools = tuple(dict.fromkeys((*UNATTENDED_TOOLS, *config.allowed_tools)))
            return Permissions("acceptEdits", tools, ROOT_NOTICE)
        return Permissions("bypassPermissions", config.allowed_tools)
    if mode == "bypassPermissions" and root and not sandbox:
        raise ClaudeSetupError(
            "harnesses.claude.permissionMode is bypassPermissions, which the Claude CLI refuses"
            " to run as root: set IS_SANDBOX=1 (exported, HANKWEAVE_IS_SANDBOX=1 or the codon's"
            " env) if this machine is a sandbox, or leave permissionMode unset to run with"
            " acceptEdits and the standard tools approved")
    return Permissions(mode, config.allowed_tools)


_attempts = itertools.count(1)


class ClaudeHarness(Harness):
    """Runs codons with the Claude Code CLI (``claude-agent-sdk``)."""

    name: ClassVar[str] = "claude"
    package: ClassVar[str] = "hankweave-harness-claude"
    Config: ClassVar[type[HarnessConfig]] = ClaudeConfig
    default_idle_timeout_s: ClassVar[int | None] = 180
    # A cancelled pass ends the CLI within TERM_GRACE_S plus the SDK's disconnect.
    close_timeout_s: ClassVar[float] = 15.0

    def __init__(self, config: HarnessConfig | None = None) -> None:
        super().__init__(config)
        self._folders: CLIFolders | None = None

    @property
    def settings(self) -> ClaudeConfig:
        assert isinstance(self.config, ClaudeConfig)
        return self.config

    @classmethod
    def preflight(cls, request: PreflightRequest, config: HarnessConfig
                  ) -> list[PreflightProblem]:
        """The SDK, the CLI and the CLI's credentials (:mod:`.preflight`)."""
        from hankweave_harness_claude.preflight import preflight

        assert isinstance(config, ClaudeConfig)
        return preflight(request, config.cli_path, config.config_dir)

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[CodonLogRecord]:
        process = CLIProcess(self._plan(request, context), stderr=context.stderr,
                             on_spawn=context.report_process)
        # The CLI boots (half a second) while the SDK is imported (a second), on two cores.
        await process.start()
        try:
            session = await asyncio.to_thread(importlib.import_module, SESSION_MODULE)
        except BaseException:
            await process.stop(exit_grace_s=0)
            raise
        async for record in session.run_pass(process, context):
            yield record

    async def aclose(self) -> None:
        if self._folders is not None:
            self._folders.remove()

    # -- what one pass runs --

    def _plan(self, request: CodonRequest, context: AttemptContext) -> PassPlan:
        config = self.settings
        folders = self._folders_for(request, context)
        bedrock = request.model.provider_id == BEDROCK_PROVIDER
        env = cli_environment(request.env, request.env_overlay, bedrock=bedrock,
                              folders=folders)
        cli_path = resolve_cli_path(config.cli_path, env)
        launcher: tuple[str, ...] = ()
        if request.sandbox is not None:
            # Inside the sandbox the CLI may skip its permission prompts as root too: what it
            # can touch is the sandbox's to decide (docs/sandbox.md).
            env["IS_SANDBOX"] = "1"
            launcher = tuple(request.sandbox.wrap(
                [], writable=folders.written(), readable=[Path(cli_path).parent],
                network_default=True, path_env=env.get("PATH")))
        allowed = permissions(config, env)
        if allowed.notice:
            context.warn(allowed.notice)  # shown once per execution by the kernel
        return PassPlan(
            launcher=launcher, cli_path=cli_path, model=request.model.model_id,
            cwd=request.work_dir, prompt=request.prompt, env=env,
            permission_mode=allowed.mode, append_system_prompt=request.system_prompt,
            # The kernel's own tool: never refused by the CLI's permission rules.
            allowed_tools=tuple(dict.fromkeys((*allowed.allowed_tools, ASK_HUMAN_TOOL))),
            disallowed_tools=config.disallowed_tools,
            max_turns=config.max_turns, setting_sources=config.setting_sources,
            auto_compact=request.auto_compact, resume=request.session_id_to_resume,
            fork_session=request.fork_session,
            effort=effort.value if (effort := request.model.reasoning_effort) else None,
            buffer_size=config.max_buffer_size, sdk_mcp_servers=(MCP_SERVER,))

    def _folders_for(self, request: CodonRequest, context: AttemptContext) -> CLIFolders:
        """This attempt's CLI folders, made once and shared by its passes."""
        if self._folders is None:
            choice = self.settings.config_dir
            config: Path | None
            if choice == "user":
                config = None
            elif choice == "execution" or (choice == "auto" and base_url_set(request.env)):
                config = context.state_dir / "config"
            elif choice == "auto":
                config = None
            else:
                config = Path(os.path.expanduser(choice))
            # Short: the CLI makes sockets in here, and socket paths are limited to ~100 bytes.
            temp = context.state_dir / "t" / f"{os.getpid()}-{next(_attempts)}"
            self._folders = CLIFolders(temp=temp, config=config)
            self._folders.create()
        return self._folders

