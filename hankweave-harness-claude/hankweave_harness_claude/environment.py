"""The Claude Code CLI's environment and its private folders for one attempt.

The CLI does not get the runtime's whole environment, as in the original: only an allowlist of
it (the shell basics, ``IS_SANDBOX``, every ``CLAUDE_CODE_*`` and ``ANTHROPIC_*`` variable), in
Bedrock mode the
AWS credential chain, and then what the hank adds (``request.env_overlay``: the
``HANKWEAVE_<X>`` passthrough, the codon's ``env``, a mock provider's endpoint, the agent
marker), which wins.  A key of another provider in the runtime's environment never reaches the
agent's tools.

Then the harness's own variables:

* the CLI's temp and socket folders (``TMPDIR``, ``CLAUDE_CODE_TMPDIR``, ``XDG_RUNTIME_DIR``)
  are a folder of the attempt under the execution directory, removed after it: nothing is left
  in the system temp folder (a socket path has at most 103 bytes: under a deeply nested
  execution directory the sockets go to a private folder of the system temp folder instead,
  removed after the attempt too);
* with a base URL set (a proxy, a local server, the mock provider; hankweave's LLM proxy only
  when its upstream is not Anthropic's API) the CLI's config folder
  (``CLAUDE_CONFIG_DIR``, where it keeps its session transcripts) is the execution's own
  ``.hankweave/harnesses/claude/config/``, so an offline run never touches ``~/.claude``; against
  Anthropic itself it is the user's (a Claude login lives there) unless ``configDir`` says
  otherwise;
* ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` unless the environment sets it: without it the
  CLI reaches api.anthropic.com (telemetry) even with a base URL set;
* for the harness's ``ask_human`` tool (:mod:`.human`), unless the environment sets them:
  ``ENABLE_TOOL_SEARCH=false``, or the CLI hides MCP tools behind its ``ToolSearch`` tool and
  the model must load the schema first; and ``MCP_TOOL_TIMEOUT`` (ms) of
  :data:`~hankweave_harness_claude.human.HUMAN_WAIT_S`, since a person may take longer to
  answer than the CLI's default limit on an MCP call.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hankweave.api import ANTHROPIC_API_URL, PROXY_ANTHROPIC_UPSTREAM_ENV
from hankweave_harness_claude.human import HUMAN_WAIT_S

ALLOWED = frozenset({"PATH", "HOME", "USER", "SHELL", "TMPDIR", "LANG", "LC_ALL",
                     "CLAUDE_CONFIG_DIR", "IS_SANDBOX"})
"""The original's allowlist, and ``IS_SANDBOX``: exported on a sandbox, it lets the CLI run
with ``bypassPermissions`` as root."""
ALLOWED_PREFIXES = ("CLAUDE_CODE_", "ANTHROPIC_")

BEDROCK_PROVIDER = "amazon-bedrock"
"""The provider whose (``anthropic.``) models the CLI runs in Bedrock mode."""
BEDROCK_VARIABLES = frozenset({
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_BEARER_TOKEN_BEDROCK", "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
})
"""Bedrock mode's ambient variables (the credential chain, the proxies): taken from the
runtime's environment only, never from a codon's ``env``, as in the original."""
BEDROCK_DEFAULT_REGION = "us-east-1"

BASE_URL_VARIABLES = ("ANTHROPIC_BASE_URL", "ANTHROPIC_BEDROCK_BASE_URL")
QUIET = "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"
MCP_DEFAULTS = {"ENABLE_TOOL_SEARCH": "false", "MCP_TOOL_TIMEOUT": str(HUMAN_WAIT_S * 1000)}
"""What the ``ask_human`` tool needs of the CLI (see the module docstring)."""


def base_url_set(env: Mapping[str, str]) -> bool:
    """Whether the CLI is pointed at a server other than Anthropic's (a proxy, the mock).
    Through hankweave's own LLM proxy (``--proxy``) the proxy's upstream decides: in front of
    Anthropic's API, the CLI is as if called directly (the user's login counts)."""
    upstream = env.get(PROXY_ANTHROPIC_UPSTREAM_ENV)
    if upstream:
        return upstream.rstrip("/") != ANTHROPIC_API_URL
    return any(env.get(name) for name in BASE_URL_VARIABLES)


def allowlisted(env: Mapping[str, str]) -> dict[str, str]:
    """The runtime variables the CLI may see."""
    return {name: value for name, value in env.items()
            if name in ALLOWED or name.startswith(ALLOWED_PREFIXES)}


SOCKET_PATH_LIMIT = 103
"""The longest Unix socket path (``sun_path``, less its terminating NUL on Linux)."""
SOCKET_SUFFIX = len("/cc-socks/") + 7 + len(".sock")
"""What the CLI appends to ``XDG_RUNTIME_DIR`` for its socket (a pid of up to 7 digits)."""


@dataclass
class CLIFolders:
    """The folders one attempt's CLI writes to, besides the workspace."""

    temp: Path
    """Temp folder (``TMPDIR``, ``CLAUDE_CODE_TMPDIR``), removed by :meth:`remove`."""
    config: Path | None
    """``CLAUDE_CONFIG_DIR``, or None for the CLI's default (the user's ``~/.claude``)."""
    runtime: Path | None = None
    """``XDG_RUNTIME_DIR`` (its sockets): the temp folder when its socket paths fit, else a
    private folder of the system temp folder (the CLI would otherwise fall back to a shared
    ``/tmp/cc-socks-<uid>/`` that it leaves behind); removed by :meth:`remove` either way."""

    def create(self) -> None:
        self.temp.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.temp, 0o700)
        if len(str(self.temp)) + SOCKET_SUFFIX <= SOCKET_PATH_LIMIT:
            self.runtime = self.temp
        else:
            self.runtime = Path(tempfile.mkdtemp(prefix="hw-claude-"))  # mode 700
        if self.config is not None:
            self.config.mkdir(parents=True, exist_ok=True, mode=0o700)

    def written(self) -> list[Path]:
        """What the CLI writes besides the workspace: its temp and socket folders, and its
        config folder (the user's own ``~/.claude`` and ``~/.claude.json`` when it has none of
        ours: its login lives there)."""
        folders = [self.temp, *([self.runtime] if self.runtime else [])]
        if self.config is not None:
            return [*folders, self.config]
        home = Path(os.path.expanduser("~"))
        return [*folders, home / ".claude", home / ".claude.json"]

    def remove(self) -> None:
        shutil.rmtree(self.temp, ignore_errors=True)
        if self.runtime is not None and self.runtime != self.temp:
            shutil.rmtree(self.runtime, ignore_errors=True)


def cli_environment(env: Mapping[str, str], overlay: Mapping[str, str], *, bedrock: bool,
                    folders: CLIFolders) -> dict[str, str]:
    """The CLI's whole environment (see the module docstring).

    ``env`` is the attempt's merged environment (``CodonRequest.env``), ``overlay`` what the hank
    and the runtime added to it (``CodonRequest.env_overlay``).
    """
    result = allowlisted(env)
    added = dict(overlay)
    if bedrock:
        result.update({name: value for name, value in env.items()
                       if name in BEDROCK_VARIABLES and name not in overlay})
        for name in BEDROCK_VARIABLES:
            added.pop(name, None)
        result["CLAUDE_CODE_USE_BEDROCK"] = "1"
        if not (result.get("AWS_REGION") or result.get("AWS_DEFAULT_REGION")):
            result["AWS_REGION"] = BEDROCK_DEFAULT_REGION
    result.update(added)
    result["TMPDIR"] = result["CLAUDE_CODE_TMPDIR"] = str(folders.temp)
    result["XDG_RUNTIME_DIR"] = str(folders.runtime or folders.temp)
    if folders.config is not None:
        result["CLAUDE_CONFIG_DIR"] = str(folders.config)
    result.setdefault(QUIET, "1")
    for name, value in MCP_DEFAULTS.items():
        result.setdefault(name, value)
    return result
