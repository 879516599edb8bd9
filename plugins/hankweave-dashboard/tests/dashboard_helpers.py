"""Helpers for the dashboard's tests: hank projects on the fake agent run by real
``hankweave run`` processes (git checkpoints, so diffs are real), and a real ``hankweave
dashboard`` process serving them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.api import ExecutionLayout, load_state

WAIT_S = 60.0
"""The longest one wait may take before the test fails."""
PACED = {"messages": 4, "delayMs": 250}
"""About a second of agent work."""
LONG = {"messages": 200, "delayMs": 100}
"""About 20 seconds: long enough to skip from the page."""


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


class Project:
    """A shared HANKWEAVE_HOME, hanks on the fake agent and the environment every process gets."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.executions = root / "executions"
        """Where the tests' executions are (`-e` cannot name a directory in HANKWEAVE_HOME)."""
        self.executions.mkdir()
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith("HANKWEAVE_") and key != "CI"}
        self.env.update({
            "HOME": str(root),
            "HANKWEAVE_HOME": str(self.home),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
            "HANKWEAVE_LOAD_PLUGINS": "checkpoint-git,dashboard",
            "HANKWEAVE_STRICT_PLUGINS": "1",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "git",
        })
        self.runs: list[subprocess.Popen[bytes]] = []

    def hank(self, name: str, codons: dict[str, dict[str, Any] | list[dict[str, Any]]],
             fields: dict[str, dict[str, Any]] | None = None, **root: Any) -> Path:
        """A hank of fake-agent codons, scripted by ``codons`` (codon id: its attempt, or its
        attempts in turn);
        ``fields`` adds hank fields to codons (codon id: its fields, ``{"approval": …}``)."""
        folder = self.root / name
        folder.mkdir()
        items = [{"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
                  "continuationMode": "fresh", "promptText": f"Do {codon_id}.",
                  "checkpointedFiles": ["**/*.md", "**/*.txt"],
                  **(fields or {}).get(codon_id, {})}
                 for codon_id in codons]
        (folder / "hank.json").write_text(json.dumps({"hank": items, **root}))
        (folder / "script.json").write_text(json.dumps({"codons": codons}))
        return folder

    def data(self, name: str) -> Path:
        folder = self.root / "data" / name
        folder.mkdir(parents=True)
        (folder / "input.txt").write_text(f"{name}\n")
        return folder

    def start(self, hank: Path, data: Path, execution: Path, *extra: str,
              ) -> subprocess.Popen[bytes]:
        """``hankweave run`` in the background, its output in ``execution``'s sibling log."""
        log = execution.with_suffix(".log").open("wb")
        env = {**self.env, "HANKWEAVE_FAKE_SCRIPT": str(hank / "script.json")}
        process = subprocess.Popen(
            [sys.executable, "-m", "hankweave", "run", str(hank), str(data), "-e",
             str(execution), "--headless", "--yes", *extra],
            env=env, cwd=self.root, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.runs.append(process)
        return process

    def run(self, hank: Path, data: Path, name: str, *extra: str) -> Path:
        """Run a hank to its end; return its execution directory."""
        execution = self.executions / name
        process = self.start(hank, data, execution, *extra)
        process.wait(timeout=WAIT_S * 2)
        return execution

    def fork(self, source: Path, codon_id: str, name: str,
             codons: dict[str, dict[str, Any]]) -> Path:
        """``hankweave fork -e SOURCE --at CODON`` into the executions' folder, run to its end
        with the fake agent scripted by ``codons`` (the codons after CODON: their attempts)."""
        fork = self.executions / name
        script = self.root / f"{name}-script.json"
        script.write_text(json.dumps({"codons": codons}))
        env = {**self.env, "HANKWEAVE_FAKE_SCRIPT": str(script)}
        done = subprocess.run(
            [sys.executable, "-m", "hankweave", "fork", "-e", str(source), "--at", codon_id,
             "-o", str(fork), "--headless"],
            env=env, cwd=self.root, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=WAIT_S * 2, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return fork

    def state(self, execution: Path) -> Any:
        return load_state(ExecutionLayout(execution).hankweave_dir)[0]

    def gated(self, name: str, *extra: str) -> Path:
        """An execution whose run ended (``extra``: or waits, with ``--wait-for-answers``) for
        the approval before its codon ``draft`` starts."""
        hank = self.hank(f"{name}-hank", {"draft": {"messages": 1,
                                                    "writeFiles": {"draft.md": "draft\n"}}},
                         fields={"draft": {"approval": "before"}})
        return self.waiting(hank, name, *extra)

    def budget_ask(self, name: str, *extra: str) -> Path:
        """An execution whose run ended (or waits) asking to raise the $2.00 cap of its codon
        ``draft`` (``onExceeded: "ask"``): its second message spent $2.03.  Once extended, the
        attempt goes on with one cheap message."""
        costly = {"messages": 3, "usage": {"inputTokens": 0, "outputTokens": 203_000},
                  "writeFiles": {"draft.md": "draft\n"}}
        hank = self.hank(f"{name}-hank", {"draft": [costly, {"messages": 1}]},
                         fields={"draft": {"budget": {"maxDollars": 2.0, "onExceeded": "ask"}}})
        return self.waiting(hank, name, *extra)

    def waiting(self, hank: Path, name: str, *extra: str) -> Path:
        """Run ``hank`` until it waits for a person: its run ended, or (``extra``,
        ``--wait-for-answers``) it waits."""
        execution = self.executions / name
        if extra:
            self.start(hank, self.data(f"{name}-data"), execution, *extra)
            wait_for("the run to wait for a person", lambda: self.pending(execution))
            return execution
        self.run(hank, self.data(f"{name}-data"), name)
        assert self.pending(execution), execution.with_suffix(".log").read_text()
        return execution

    def pending(self, execution: Path) -> Any:
        """The interruption that waits (None: none does, or no state yet)."""
        if not ExecutionLayout(execution).state_file.exists():
            return None
        return next((item for item in self.state(execution).interruptions
                     if item.status == "pending"), None)

    def codon_status(self, execution: Path, codon_id: str) -> str | None:
        state = self.state(execution)
        for run in state.runs:
            for record in reversed(run.codons):
                if record.codon_id == codon_id:
                    return str(record.status)
        return None

    def stop(self) -> None:
        for process in self.runs:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@dataclass
class Dashboard:
    url: str
    key: str | None
    process: subprocess.Popen[str]
    output: list[str]

    def api(self, path: str) -> str:
        return self.url.rstrip("/") + path


@contextlib.contextmanager
def dashboard(project: Project, *args: str) -> Iterator[Dashboard]:
    """A ``hankweave dashboard --port 0`` process over the project's home."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hankweave", "dashboard", "--home", str(project.executions),
         "--port", "0", *args],
        env=project.env, cwd=project.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output: list[str] = []
    try:
        assert process.stdout is not None
        url = key = None
        while key is None:
            line = process.stdout.readline()
            if not line:
                raise AssertionError("the dashboard exited: " + "".join(output))
            output.append(line)
            if line.startswith("hankweave dashboard: "):
                url = line.split(": ", 1)[1].strip()
            if line.startswith("Control key"):
                value = line.split(": ", 1)[1].strip()
                key = "" if value.startswith("none") else value
        assert url is not None
        yield Dashboard(url=url, key=key or None, process=process, output=output)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
