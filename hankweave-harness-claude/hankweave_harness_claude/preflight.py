"""What the Claude harness checks before a run creates anything (``Harness.preflight``).

A codon on Claude needs the Claude Agent SDK (found, not imported: ``hankweave validate`` stays
light), a Claude Code CLI to run, and credentials the CLI will see:

* on Anthropic: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN`` or ``CLAUDE_CODE_OAUTH_TOKEN``
  in the agent's environment (each may come from the runtime's environment, its
  ``HANKWEAVE_<X>`` passthrough or the codon's ``env``), or a ``claude /login`` kept in the
  config folder the CLI will use (``.credentials.json``; on macOS the login is in the keychain
  and ``.claude.json`` records its account);
* on Bedrock: the AWS credential chain, from the runtime's environment only
  (:mod:`.environment`); an instance role cannot be seen beforehand, so only a warning.

Without these the CLI starts, answers "Not logged in · Please run /login" and the codon fails
after the earlier codons have spent money.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from hankweave.api import (
    AWS_CREDENTIALS_HINT,
    PreflightKind,
    PreflightProblem,
    PreflightRequest,
    aws_credentials_visible,
)
from hankweave_harness_claude.cli import CLIError, resolve_cli_path
from hankweave_harness_claude.environment import (
    BEDROCK_PROVIDER,
    BEDROCK_VARIABLES,
    base_url_set,
)

SDK_MODULE = "claude_agent_sdk"
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
"""What the CLI authenticates with, besides a stored login."""


def preflight(request: PreflightRequest, cli_path: str | None, config_dir: str
              ) -> list[PreflightProblem]:
    """The problems of one codon (see the module docstring); ``cli_path`` and ``config_dir``
    are the harness settings of the same names."""
    problems = _install_problems(request.env, cli_path)
    bedrock = request.model.provider_id == BEDROCK_PROVIDER  # as the pass decides it
    missing = (_bedrock_credentials(request) if bedrock
               else _anthropic_credentials(request, config_dir))
    if missing is not None:
        problems.append(missing)
    return problems


def _install_problems(env: Mapping[str, str], cli_path: str | None) -> list[PreflightProblem]:
    problems = []
    if importlib.util.find_spec(SDK_MODULE) is None:
        problems.append(PreflightProblem(
            PreflightKind.INSTALL, "the Claude harness needs the Claude Agent SDK, which is not"
            " installed: pip install claude-agent-sdk (or reinstall hankweave-harness-claude)"))
    try:
        path = resolve_cli_path(cli_path, env)
    except CLIError as exc:
        problems.append(PreflightProblem(PreflightKind.INSTALL, str(exc)))
        return problems
    found = shutil.which(path, path=env.get("PATH")) if os.sep not in path else path
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        problems.append(PreflightProblem(
            PreflightKind.INSTALL, f"the Claude Code CLI {path} is not an executable file"
            " (harnesses.claude.cliPath, or CLAUDE_PATH_TO_CLAUDE_EXECUTABLE)"))
    return problems


def _anthropic_credentials(request: PreflightRequest, config_dir: str) -> PreflightProblem | None:
    env = request.env
    if any(env.get(name) for name in KEY_VARIABLES):
        return None
    folder = _config_folder(env, config_dir)
    if folder is not None and _logged_in(folder, env):
        return None
    where = (f"; a `claude /login` in {folder} counts too" if folder is not None else
             "; this run's CLI keeps its config in the execution, so a stored login does not"
             " count (harnesses.claude.configDir)")
    return PreflightProblem(PreflightKind.CREDENTIALS, (
        f"Model {request.model.full_id} runs on the Claude Code CLI, which would have no"
        " credentials: set ANTHROPIC_API_KEY (or HANKWEAVE_ANTHROPIC_API_KEY to give it to"
        " agents only, or the codon's env), or CLAUDE_CODE_OAUTH_TOKEN (from `claude"
        f" setup-token`) in the environment{where}"))


def _config_folder(env: Mapping[str, str], config_dir: str) -> Path | None:
    """The CLI's config folder as :class:`.ClaudeHarness` will choose it, or None when it is
    one the execution makes afresh (no login can be there yet)."""
    if config_dir == "execution" or (config_dir == "auto" and base_url_set(env)):
        return None
    if config_dir not in ("auto", "user"):
        return Path(os.path.expanduser(config_dir))
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(os.path.expanduser(env["CLAUDE_CONFIG_DIR"]))
    return Path(env.get("HOME") or os.path.expanduser("~"), ".claude")


def _logged_in(folder: Path, env: Mapping[str, str]) -> bool:
    """A stored login: the credentials file, or (macOS keychain) the account ``.claude.json``
    records next to the folder or in it."""
    if (folder / ".credentials.json").is_file():
        return True
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    for account in (folder / ".claude.json", home / ".claude.json"):
        try:
            if '"oauthAccount"' in account.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


def _bedrock_credentials(request: PreflightRequest) -> PreflightProblem | None:
    # Bedrock's variables reach the CLI from the runtime's environment only, never from the
    # hank (environment.cli_environment).
    ambient = {name: value for name, value in request.env.items()
               if name not in BEDROCK_VARIABLES or name not in request.env_overlay}
    if aws_credentials_visible(ambient):
        return None
    return PreflightProblem(PreflightKind.CREDENTIALS, (
        f"Model {request.model.full_id} runs on Bedrock, but no AWS credentials are in sight:"
        f" {AWS_CREDENTIALS_HINT} (the hank's env cannot give them; an instance role is only"
        " found when the codon runs)"), warning=True)
