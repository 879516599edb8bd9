"""Helpers for the Celery executor's tests: hank projects on the fake agent whose executions
resume across processes (git checkpoints), real ``hankweave worker`` processes, waiting."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hankweave.api import ExecutionLayout, HankweaveState, load_state

WAIT_S = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Project:
    """A hank, data sets, a shared HANKWEAVE_HOME and the environment every process gets."""

    def __init__(self, root: Path, broker: str) -> None:
        self.root = root
        self.broker = broker
        self.home = root / "home"
        self.script = root / "script.json"
        self.env = {
            "PATH": os.environ.get("PATH", ""), "HOME": str(root),
            "HANKWEAVE_HOME": str(self.home),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
            "HANKWEAVE_LOAD_PLUGINS": "checkpoint-git,executor-celery",
            "HANKWEAVE_STRICT_PLUGINS": "1",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "git",
            "HANKWEAVE_FAKE_SCRIPT": str(self.script),
            "HANKWEAVE_CELERY_BROKER": broker,
            "HANKWEAVE_CELERY_VISIBILITY_TIMEOUT": "6",
            "HANKWEAVE_CELERY_RESTORE_INTERVAL": "1",
            "HANKWEAVE_CELERY_DEFER": "1",
        }
        self.workers: list[subprocess.Popen[bytes]] = []
        self.script.write_text(json.dumps({"codons": {}}))

    # ----- what runs -----

    def hank(self, name: str, codons: list[dict[str, Any]]) -> Path:
        folder = self.root / name
        folder.mkdir()
        items = [{"name": f"Codon {item['id']}", "model": "fake",
                  "continuationMode": "fresh", "promptText": "Work.", **item}
                 for item in codons]
        (folder / "hank.json").write_text(json.dumps({"hank": items}))
        return folder

    def data(self, name: str) -> Path:
        folder = self.root / "data" / name
        folder.mkdir(parents=True)
        (folder / "input.txt").write_text(f"{name}\n")
        return folder

    def play(self, codons: dict[str, Any]) -> None:
        """The fake agent's script, by codon id."""
        self.script.write_text(json.dumps({"codons": codons}))

    # ----- commands and workers -----

    def hankweave(self, *args: str, check: bool = True,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env={**self.env, **(env or {})}, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120, check=False)
        if check:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def submit(self, *args: str) -> list[str]:
        return self.hankweave("submit", *args).stdout.split()

    def app(self) -> Any:
        from hankweave_executor_celery.app import make_app
        from hankweave_executor_celery.settings import load_settings

        return make_app(load_settings(env=self.env))

    def ledger(self) -> Any:
        from hankweave_executor_celery.ledger import Ledger

        return Ledger(self.broker)

    def start_worker(self, name: str, *queues: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the worker's, closed with it
        command = [sys.executable, "-m", "hankweave", "worker", "-c", "1", "-n", f"{name}@%h",
                   "-l", "info", *(arg for queue in queues for arg in ("-Q", queue))]
        worker = subprocess.Popen(command, cwd=self.root, env=self.env, stdout=log,
                                  stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.workers.append(worker)
        app = self.app()
        wait_for(lambda: any(key.startswith(f"{name}@")
                             for key in (app.control.inspect(timeout=0.5).ping() or {})),
                 f"worker {name} ready", alive=worker)
        return worker

    def kill(self, worker: subprocess.Popen[bytes]) -> None:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)

    def stop_workers(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()

    # ----- what happened -----

    def state(self, directory: str) -> HankweaveState:
        return load_state(ExecutionLayout(Path(directory)).hankweave_dir)[0]

    def status(self, directory: str) -> str:
        item = self.ledger().get(directory)
        assert item is not None, f"{directory} is not in the ledger"
        return str(item.status)

    def wait_status(self, directory: str, *statuses: str, timeout: float = WAIT_S) -> None:
        wait_for(lambda: self.status(directory) in statuses,
                 f"{directory} to be {'/'.join(statuses)} (is {self.status(directory)})",
                 timeout=timeout)

    def running_codon(self, directory: str) -> str | None:
        hankweave_dir = ExecutionLayout(Path(directory)).hankweave_dir
        if not (hankweave_dir / "state.json").exists() and \
                not (hankweave_dir / "state.wal").exists():
            return None
        state = self.state(directory)
        run = state.runs[0] if state.runs else None
        if run is None or not run.codons or run.codons[-1].status != "running":
            return None
        return str(run.codons[-1].codon_id)


def wait_for(condition: Callable[[], bool], what: str, *, timeout: float = WAIT_S,
             alive: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"the process ended while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def completed_records(state: HankweaveState) -> dict[str, int]:
    """How many completed records each codon has, across every run."""
    counts: dict[str, int] = {}
    for run in state.runs:
        for record in run.codons:
            if record.status == "completed":
                counts[record.codon_id] = counts.get(record.codon_id, 0) + 1
    return counts
