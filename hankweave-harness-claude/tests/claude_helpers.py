"""Helpers of the Claude harness's tests: the real Claude Code CLI against the mock provider.

Everything runs offline: the CLI gets the mock's address and a dummy key, non-essential traffic
off, one retry, and its config and temp folders inside the test's own folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import claude_agent_sdk

from hankweave.api import ModelEntry, get_registry, marked_processes

BUNDLED_CLI = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


def haiku() -> ModelEntry:
    return get_registry().resolve_model("haiku")


def cli_processes(root: Path | None = None) -> list[int]:
    """Running Claude Code CLI processes started by hankweave (they carry an agent marker);
    with ``root``, only those working under it (this test session's temporary folder: another
    session on the machine, such as a tox env running beside this one, has its own)."""
    return [pid for pid in marked_processes("", prefix=True)
            if _is_cli(pid) and (root is None or _works_under(pid, root))]


def _works_under(pid: int, root: Path) -> bool:
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return False
    return cwd == root or root in cwd.parents


def _is_cli(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return command.endswith(b"claude")


def offline_env(mock_env: Mapping[str, str], **extra: str) -> dict[str, str]:
    """An environment for a request or a ``hankweave`` process: the mock's variables over a
    clean copy of this process's, with no real key of any provider."""
    env = {name: value for name, value in os.environ.items()
           if not name.endswith(("_API_KEY", "_AUTH_TOKEN")) and not name.startswith(
               ("ANTHROPIC_", "CLAUDE_", "HANKWEAVE_"))}
    return {**env, **mock_env, **extra}


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"id": codon_id, "name": codon_id.title(), "model": "haiku",
                              "continuationMode": "fresh", "promptText": f"Do {codon_id}."}
    values.update(fields)
    return values


@dataclass
class RunResult:
    code: int
    stdout: str
    stderr: str
    execution: Path

    def state(self) -> dict[str, Any]:
        return json.loads((self.execution / ".hankweave" / "state.json").read_text())

    def records(self) -> dict[str, dict[str, Any]]:
        """The last record of each codon in the last run."""
        run = self.state()["runs"][0]  # newest first
        return {codon["codonId"]: codon for codon in run["codons"]}

    def statuses(self) -> list[tuple[str, str]]:
        return [(c["codonId"], c["status"]) for c in self.state()["runs"][0]["codons"]]


@dataclass
class HankProject:
    """A hank, its data and an execution directory under ``root``, run with ``hankweave``."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def hank_dir(self) -> Path:
        return self.root / "hank"

    @property
    def execution(self) -> Path:
        return self.root / "exec"

    def write(self, items: list[dict[str, Any]], script: Mapping[str, Any]) -> None:
        self.hank_dir.mkdir(parents=True, exist_ok=True)
        (self.root / "data").mkdir(exist_ok=True)
        (self.root / "data" / "input.txt").write_text("apples 3\npears 5\n")
        (self.hank_dir / "hank.json").write_text(json.dumps(
            {"meta": {"name": "claude-test", "version": "1.0.0"}, "hank": items}))
        self.write_script(script)

    def write_script(self, script: Mapping[str, Any]) -> None:
        (self.root / "script.json").write_text(json.dumps(script))

    def command(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "hankweave", "run", str(self.hank_dir),
                str(self.root / "data"), "-e", str(self.execution), "--headless",
                "--mock-provider", str(self.root / "script.json"), *extra]

    def process_env(self) -> dict[str, str]:
        return offline_env({}, HANKWEAVE_HOME=str(self.root / "home"), **self.env)

    def run(self, *extra: str, timeout: float = 120) -> RunResult:
        done = subprocess.run(self.command(*extra), env=self.process_env(), text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout,
                              check=False)
        return RunResult(done.returncode, done.stdout, done.stderr, self.execution)

    def start(self, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(*extra), env=self.process_env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def mock_log(self) -> list[dict[str, Any]]:
        path = self.execution / ".hankweave" / "mock-provider" / "requests.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def model_requests(self) -> list[dict[str, Any]]:
        return [entry for entry in self.mock_log() if entry.get("path") == "/v1/messages"]


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def codon_status(execution: Path, codon_id: str) -> str | None:
    """The codon's status in the newest run, read from the journal-backed state file."""
    from hankweave.api import load_state

    try:
        state, _ = load_state(execution / ".hankweave")
    except Exception:
        return None
    if not state.runs:
        return None
    for record in reversed(state.runs[0].codons):
        if record.codon_id == codon_id:
            return record.status
    return None


def kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)

