"""End-to-end fixtures: real ``hankweave`` processes, FakeHarness agents, git checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hankweave.state.store import load_state
from hankweave.state.types import HankweaveState


class Project:
    """A hank directory, a data directory, a fake-agent script and an execution directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hank_dir = root / "hank"
        self.data = root / "data"
        self.exec_dir = root / "exec"
        self.script = root / "script.json"
        for path in (self.hank_dir, self.data):
            path.mkdir(parents=True)
        (self.data / "input.txt").write_text("some input\n")
        self.env = {
            **os.environ,
            "HANKWEAVE_HOME": str(root / "home"),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
            "HANKWEAVE_FAKE_SCRIPT": str(self.script),
            "HANKWEAVE_STRICT_PLUGINS": "1",
        }
        self.env.pop("CI", None)
        self.write_script({})

    def write_hank(self, items: list[dict[str, Any]], **root: Any) -> None:
        (self.hank_dir / "hank.json").write_text(json.dumps({"hank": items, **root}, indent=2))

    def write_script(self, codons: dict[str, Any]) -> None:
        self.script.write_text(json.dumps({"codons": codons}))

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "hankweave", *args]

    def hw(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), cwd=self.root, env=self.env, text=True,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def run(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.hw("run", str(self.hank_dir), str(self.data), "-e", str(self.exec_dir),
                       "--headless", *extra, timeout=timeout)

    def start(self, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command("run", str(self.hank_dir), str(self.data), "-e", str(self.exec_dir),
                         "--headless", *extra),
            cwd=self.root, env=self.env, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)

    def state(self) -> HankweaveState:
        return load_state(self.exec_dir / ".hankweave")[0]

    def events(self) -> list[dict[str, Any]]:
        path = self.exec_dir / ".hankweave" / "events" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_for(self, condition: Callable[[HankweaveState], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hw = self.exec_dir / ".hankweave"
            started = (hw / "state.json").exists() or (hw / "state.wal").exists()
            if started and condition(self.state()):
                return
            time.sleep(0.05)
        raise AssertionError("condition not reached in time")


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    """A codon running on the fake model; a field given as None is left out."""
    item = {"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
            "continuationMode": "fresh", "promptText": f"Do {codon_id}.", **fields}
    return {key: value for key, value in item.items() if value is not None}


def records(state: HankweaveState, codon_id: str, status: str | None = None) -> list[Any]:
    return [c for run in state.runs for c in run.codons
            if c.codon_id == codon_id and (status is None or c.status == status)]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)
