"""Helpers of the pi harness's tests."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.api import AGENT_MARKER_ENV, CodonRequest, ModelEntry, get_registry
from hankweave.testing import HankProject, run_attempt
from hankweave.testing.mock_provider import LoggedRequest, MockProviderLog
from hankweave_harness_pi import PiConfig, PiHarness


def model(spec: str) -> ModelEntry:
    return get_registry().resolve_model(spec)


def offline_env(mock_env: Mapping[str, str], **extra: str) -> dict[str, str]:
    """This process's environment without any provider key, with the mock's variables."""
    env = {name: value for name, value in os.environ.items()
           if not name.endswith(("_API_KEY", "_AUTH_TOKEN", "_BASE_URL", "_API_BASE"))
           and not name.startswith(("ANTHROPIC_", "OPENAI_", "HANKWEAVE_"))}
    return {**env, **mock_env, **extra}


def request(root: Path, mock_env: Mapping[str, str], prompt: str, *, spec: str = "gpt-5.2",
            entry: ModelEntry | None = None, **fields: Any) -> CodonRequest:
    work = root / "agentRoot"
    work.mkdir(parents=True, exist_ok=True)
    marker = {AGENT_MARKER_ENV: f"pi-tests/{root.name}"}
    env = offline_env(mock_env, **marker)
    values: dict[str, Any] = {
        "prompt": prompt, "system_prompt": "Be brief.", "model": entry or model(spec),
        "work_dir": work, "env": env, "env_overlay": {**mock_env, **marker}, "codon_id": "c",
        "run_id": "r"}
    values.update(fields)
    return CodonRequest(**values)


def attempt(req: CodonRequest, root: Path, config: PiConfig | None = None, **options: Any) -> Any:
    return asyncio.run(run_attempt(PiHarness, req, root / "exec", config=config, **options))


def log_records(run: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.log_path.read_text().splitlines() if line.strip()]


# --- hanks run by real ``hankweave`` processes ---------------------------------------------

@dataclass(frozen=True)
class Done:
    """A finished ``hankweave`` process."""

    code: int
    stdout: str
    stderr: str


class PiProject(HankProject):
    """A hank, its data and an execution directory under ``root``, run by ``hankweave``
    processes whose agents talk to the mock provider ``run --mock-provider`` serves on
    127.0.0.1 (``script``).

    The processes get no provider key and no endpoint (only ``PATH`` of this environment),
    load the pi harness by its entry point and the in-memory checkpoint backend by module,
    so a run needs no other sibling package.  A run resumed after a crash rolls back to a
    checkpoint of the dead process: ``durable=True`` uses the snapshot backend
    (``hankweave-checkpoint-snapshot``, git-free) instead.
    """

    def __init__(self, root: Path, script: Mapping[str, Any], *, durable: bool = False) -> None:
        super().__init__(root, plugin_modules=() if durable else (
                             "hankweave.testing.memory_checkpoints",),
                         load_plugins="pi,checkpoint-snapshot" if durable else "pi",
                         env={"HANKWEAVE_STRICT_PLUGINS": "1",
                              "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        if durable:
            self.env["HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND"] = "snapshot"
        self.script = root / "script.json"
        self.script.write_text(json.dumps(script))

    def hankweave(self, *args: str, timeout: float = 120) -> Done:
        done = subprocess.run([sys.executable, "-m", "hankweave", *args], env=self.env,
                              cwd=self.root, text=True, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
        return Done(done.returncode, done.stdout, done.stderr)

    def run(self) -> Done:
        """``hankweave run --headless`` against the mock: the hank on the data the first time,
        then the execution alone (which resumes a run that waits for a person)."""
        return self.hankweave(*self._run_args())

    def start(self) -> subprocess.Popen[str]:
        """:meth:`run` in the background, to be killed or interrupted."""
        return subprocess.Popen([sys.executable, "-m", "hankweave", *self._run_args()],
                                env=self.env, cwd=self.root, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def _run_args(self) -> list[str]:
        start = [] if self.exec_dir.exists() else [str(self.hank_dir), str(self.data)]
        return ["run", *start, "-e", str(self.exec_dir), "--headless", "--mock-provider",
                str(self.script)]

    def answer(self, interruption_id: str, *answer: str) -> Done:
        """``hankweave answer``: a text, or ``--approve`` / ``--reject``."""
        return self.hankweave("answer", "-e", str(self.exec_dir), interruption_id, *answer,
                              timeout=60)

    def state(self) -> dict[str, Any]:
        """``state.json`` as written (runs newest first)."""
        return json.loads((self.hankweave_dir / "state.json").read_text())

    def records(self) -> dict[str, dict[str, Any]]:
        """The last record of each codon in the newest run."""
        return {codon["codonId"]: codon for codon in self.state()["runs"][0]["codons"]}

    def codon_log(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The records of a codon record's log."""
        path = self.exec_dir / record["claudeLogPath"]
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def model_requests(self) -> list[LoggedRequest]:
        """The model requests the mock answered, over every run, in order."""
        return MockProviderLog(self.hankweave_dir / "mock-provider" / "requests.jsonl"
                               ).requests()
