"""What the harness decides before the CLI starts: its command line, environment, folders and
permissions (no CLI runs here)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from claude_helpers import haiku

from hankweave.api import AGENT_MARKER_ENV, CodonRequest
from hankweave.testing import attempt_context
from hankweave_harness_claude import ClaudeConfig, ClaudeHarness
from hankweave_harness_claude.cli import PassPlan, bundled_cli, resolve_cli_path
from hankweave_harness_claude.environment import (
    SOCKET_PATH_LIMIT,
    SOCKET_SUFFIX,
    CLIFolders,
    base_url_set,
    cli_environment,
)
from hankweave_harness_claude.harness import ClaudeSetupError, permissions
from hankweave_harness_claude.messages import codon_log_record


@pytest.mark.parametrize("plan", [
    PassPlan(cli_path="/bin/claude", model="claude-haiku-4-5", cwd=Path("/w"), prompt="p",
             env={}, permission_mode="bypassPermissions"),
    PassPlan(cli_path="/bin/claude", model="m", cwd=Path("/w"), prompt="p", env={},
             permission_mode="acceptEdits", append_system_prompt="Be brief.",
             allowed_tools=("Bash", "Write"), disallowed_tools=("WebFetch",), max_turns=4,
             setting_sources=("user", "project"), auto_compact=True, resume="-flag-like-id",
             fork_session=True, sdk_mcp_servers=("hankweave",), effort="xhigh"),
])
def test_the_command_line_is_the_one_the_sdk_builds(plan: PassPlan) -> None:
    system_prompt: dict = {"type": "preset", "preset": "claude_code"}
    if plan.append_system_prompt:
        system_prompt["append"] = plan.append_system_prompt
    options = ClaudeAgentOptions(
        cli_path=plan.cli_path, model=plan.model, system_prompt=system_prompt,  # type: ignore[arg-type]
        permission_mode=plan.permission_mode,  # type: ignore[arg-type]
        allowed_tools=list(plan.allowed_tools), disallowed_tools=list(plan.disallowed_tools),
        max_turns=plan.max_turns, setting_sources=list(plan.setting_sources),  # type: ignore[arg-type]
        settings=plan.settings_json, resume=plan.resume, fork_session=plan.fork_session,
        mcp_servers={name: create_sdk_mcp_server(name) for name in plan.sdk_mcp_servers},
        effort=plan.effort)  # type: ignore[arg-type]
    assert plan.command() == SubprocessCLITransport("", options)._build_command()


@pytest.mark.parametrize("mode", [None, "default", "dontAsk"])
def test_every_pass_offers_ask_human_and_approves_it(tmp_path: Path, mode: str | None) -> None:
    harness = ClaudeHarness(ClaudeConfig(permission_mode=mode,  # type: ignore[arg-type]
                                         allowed_tools=("Write",)))
    request = CodonRequest(prompt="p", system_prompt=None, model=haiku(), work_dir=tmp_path,
                           env={"PATH": "/usr/bin"})
    try:
        command = harness._plan(request, attempt_context(tmp_path, request)).command()
    finally:
        asyncio.run(harness.aclose())

    declared = json.loads(command[command.index("--mcp-config") + 1])
    assert declared == {"mcpServers": {"hankweave": {"type": "sdk", "name": "hankweave"}}}
    [allowed] = [part for part in command if part.startswith("--allowedTools=")]
    approved = allowed.removeprefix("--allowedTools=").split(",")
    assert "mcp__hankweave__ask_human" in approved and "Write" in approved


@pytest.mark.parametrize(("fields", "flags"), [
    ({"session_id_to_resume": "s-1", "fork_session": True}, ["--resume=s-1", "--fork-session"]),
    ({"session_id_to_resume": "s-1", "extension": True}, ["--resume=s-1"]),
    ({}, []),
], ids=["a-new-attempt-forks", "an-extension-continues", "fresh"])
def test_an_attempt_that_resumes_a_session_forks_it(tmp_path: Path, fields: dict,
                                                    flags: list[str]) -> None:
    harness = ClaudeHarness()
    request = CodonRequest(prompt="p", system_prompt=None, model=haiku(), work_dir=tmp_path,
                           env={"PATH": "/usr/bin"}, **fields)
    try:
        command = harness._plan(request, attempt_context(tmp_path, request)).command()
    finally:
        asyncio.run(harness.aclose())

    assert [part for part in command if part.startswith(("--resume", "--fork"))] == flags


def test_the_bundled_cli_is_found_without_importing_the_sdk() -> None:
    probe = ("import sys; from hankweave_harness_claude.cli import bundled_cli;"
             " print(bundled_cli()); print('claude_agent_sdk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(bundled_cli()), "False"]
    assert resolve_cli_path(None, {}) == str(bundled_cli())
    assert resolve_cli_path(None, {"CLAUDE_PATH_TO_CLAUDE_EXECUTABLE": "/opt/claude"}) \
        == "/opt/claude"
    assert resolve_cli_path("/usr/local/bin/claude", {
        "CLAUDE_PATH_TO_CLAUDE_EXECUTABLE": "/opt/claude"}) == "/usr/local/bin/claude"


def folders(tmp_path: Path, config: bool = True) -> CLIFolders:
    made = CLIFolders(temp=tmp_path / "t", config=tmp_path / "config" if config else None)
    made.create()
    return made


def test_sockets_go_where_their_paths_fit(tmp_path: Path) -> None:
    short = CLIFolders(temp=Path("/tmp") / f"hw{os.getpid()}", config=None)
    deep = CLIFolders(temp=tmp_path / ("x" * 90) / "t", config=None)
    try:
        short.create()
        deep.create()
        assert short.runtime == short.temp
        assert deep.runtime is not None and deep.runtime != deep.temp
        assert len(str(deep.runtime)) + SOCKET_SUFFIX <= SOCKET_PATH_LIMIT
        assert oct(deep.runtime.stat().st_mode & 0o777) == "0o700"
    finally:
        short.remove()
        deep.remove()
    assert not short.temp.exists() and deep.runtime is not None and not deep.runtime.exists()


def test_the_cli_sees_an_allowlist_of_the_runtime_environment_and_the_hanks_overlay(
        tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "SHELL": "/bin/sh",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "CLAUDE_CODE_MAX_RETRIES": "1",
           "OPENAI_API_KEY": "sk-openai", "AWS_SECRET_ACCESS_KEY": "aws", "SECRET": "s",
           "HANKWEAVE_RUNTIME_PORT": "1", "GREETING": "hi", "CODON_ONLY": "c",
           AGENT_MARKER_ENV: "run/codon"}
    overlay = {"GREETING": "hi", "CODON_ONLY": "c", AGENT_MARKER_ENV: "run/codon"}

    result = cli_environment(env, overlay, bedrock=False, folders=folders(tmp_path))

    assert result["PATH"] == "/usr/bin" and result["HOME"] == "/home/u"
    assert result["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert result["CLAUDE_CODE_MAX_RETRIES"] == "1"
    for hidden in ("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "SECRET",
                   "HANKWEAVE_RUNTIME_PORT"):
        assert hidden not in result
    assert result["GREETING"] == "hi" and result["CODON_ONLY"] == "c"
    assert result[AGENT_MARKER_ENV] == "run/codon"
    for name in ("TMPDIR", "CLAUDE_CODE_TMPDIR"):
        assert result[name] == str(tmp_path / "t")
    assert result["CLAUDE_CONFIG_DIR"] == str(tmp_path / "config")
    assert result["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    # ask_human: its schema sent directly, and a week for a person to answer it.
    assert result["ENABLE_TOOL_SEARCH"] == "false"
    assert result["MCP_TOOL_TIMEOUT"] == str(7 * 24 * 3600 * 1000)


def test_through_hankweaves_proxy_the_proxys_upstream_decides_whose_config_folder() -> None:
    proxy = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/anthropic",
             "HANKWEAVE_PROXY_URL": "http://127.0.0.1:9"}
    # In front of Anthropic's own API: as if called directly (the user's login counts).
    assert not base_url_set({**proxy, "HANKWEAVE_PROXY_ANTHROPIC_UPSTREAM":
                             "https://api.anthropic.com/"})
    # In front of the mock or another server: the execution's own folder.
    assert base_url_set({**proxy, "HANKWEAVE_PROXY_ANTHROPIC_UPSTREAM": "http://127.0.0.1:7"})
    assert base_url_set({"ANTHROPIC_BASE_URL": "http://127.0.0.1:7"})
    assert not base_url_set({})


def test_the_overlay_wins_and_may_turn_traffic_back_on(tmp_path: Path) -> None:
    env = {"ANTHROPIC_MODEL": "ambient", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    overlay = {"ANTHROPIC_MODEL": "codon", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "0"}
    result = cli_environment(env, overlay, bedrock=False, folders=folders(tmp_path, False))
    assert result["ANTHROPIC_MODEL"] == "codon"
    assert result["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "0"
    assert "CLAUDE_CONFIG_DIR" not in result  # the user's own config folder


def test_bedrock_takes_the_aws_chain_from_the_runtime_never_from_the_codon(
        tmp_path: Path) -> None:
    env = {"AWS_PROFILE": "prod", "AWS_ACCESS_KEY_ID": "from-codon", "HTTPS_PROXY": "p"}
    overlay = {"AWS_ACCESS_KEY_ID": "from-codon"}
    result = cli_environment(env, overlay, bedrock=True, folders=folders(tmp_path))
    assert result["CLAUDE_CODE_USE_BEDROCK"] == "1"
    assert result["AWS_PROFILE"] == "prod" and result["HTTPS_PROXY"] == "p"
    assert "AWS_ACCESS_KEY_ID" not in result
    assert result["AWS_REGION"] == "us-east-1"


def test_unattended_permissions_as_root_are_accept_edits_with_a_notice() -> None:
    config = ClaudeConfig(allowed_tools=("mcp__x__y",))
    root = permissions(config, {}, as_root=True)
    assert root.mode == "acceptEdits"
    assert "Bash" in root.allowed_tools and "Write" in root.allowed_tools
    assert "mcp__x__y" in root.allowed_tools
    assert root.notice and "IS_SANDBOX=1" in root.notice
    sandbox = permissions(config, {"IS_SANDBOX": "1"}, as_root=True)
    assert (sandbox.mode, sandbox.notice) == ("bypassPermissions", None)
    user = permissions(config, {}, as_root=False)
    assert (user.mode, user.allowed_tools, user.notice) == (
        "bypassPermissions", ("mcp__x__y",), None)


def test_explicit_bypass_as_root_without_a_sandbox_is_refused_before_the_cli_starts() -> None:
    config = ClaudeConfig(permission_mode="bypassPermissions")
    with pytest.raises(ClaudeSetupError, match="IS_SANDBOX=1"):
        permissions(config, {}, as_root=True)
    assert permissions(config, {}, as_root=False).mode == "bypassPermissions"
    assert permissions(ClaudeConfig(permission_mode="plan"), {}, as_root=True).mode == "plan"


def test_settings_are_validated_with_their_names() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="configDir"):
        ClaudeConfig.model_validate({"configDir": "relative/path"})
    with pytest.raises(ValidationError, match="permissionMode"):
        ClaudeConfig.model_validate({"permissionMode": "yolo"})
    assert ClaudeConfig.model_validate({"configDir": "/abs", "maxTurns": 3}).max_turns == 3


@pytest.mark.parametrize(("frame", "kept"), [
    ({"type": "system", "subtype": "init", "session_id": "s"}, True),
    ({"type": "system", "subtype": "compact_boundary"}, True),
    ({"type": "system", "subtype": "task_started"}, False),
    ({"type": "stream_event", "event": {}}, False),
    ({"type": "rate_limit_event"}, False),
    ({"type": "user", "isReplay": True, "message": {}}, False),
    ({"type": "user", "message": {"role": "user", "content": []}}, True),
    ({"type": "assistant", "sdk_host_only": True}, False),
])
def test_frames_the_log_has_no_use_for_are_dropped(frame: dict, kept: bool) -> None:
    assert (codon_log_record(frame) is not None) is kept


def test_an_error_result_without_text_gets_an_empty_result() -> None:
    record = codon_log_record({"type": "result", "subtype": "error_max_turns", "is_error": True,
                               "errors": ["Reached maximum number of turns (1)"]})
    assert record is not None and record["result"] == ""
    assert json.loads(json.dumps(record))["errors"] == ["Reached maximum number of turns (1)"]
