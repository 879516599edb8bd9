"""Helpers for the Celery executor's tests: hank projects on the fake agent whose executions
resume across processes (git checkpoints), real ``hankweave worker`` processes, and waiting for
what they do (polls with deadlines, never fixed sleeps)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.api import ExecutionLayout, HankweaveState, load_state

WAIT_S = 60.0
"""The longest any one wait may take before the test fails (a run takes a few seconds)."""
VISIBILITY_TIMEOUT_S = 6
STOP_S = 15.0
"""How long a worker gets to shut down warm after SIGTERM before its group is SIGKILLed."""

PACED = {"messages": 3, "delayMs": 150}
"""About half a second of agent work."""
SLOW = {"messages": 6, "delayMs": 400}
"""About 2.5 seconds: long enough to kill or duplicate while it runs."""
LONG = {"messages": 40, "delayMs": 300}
"""About 12 seconds: for a codon the test stops after several commands (each takes a second)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_serving(port: int, server: subprocess.Popen[bytes]) -> bool:
    """Whether ``server``, a redis-server started on ``port``, answers there.  Another
    redis-server that took the port first (CI runs another tox env beside this one, with
    servers of its own on free ports) answers too, but is not ours: ours then ends."""
    import redis

    client = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=10)
    try:
        return int(client.info("server")["process_id"]) == server.pid
    except (redis.ConnectionError, redis.TimeoutError):
        return False
    finally:
        client.close()


def counted(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempt scripted twice: FakeHarness counts the starts of a codon (in
    ``<script>.attempts.json``) only when it has more than one attempt."""
    return [attempt, attempt]


@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    script: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.process.poll() is None


class Project:
    """A hank, data sets, a shared HANKWEAVE_HOME and the environment every process gets.

    Each worker gets its own copy of the fake agent's script, so each keeps its own attempt
    counter (two processes updating one counter file could lose a count)."""

    def __init__(self, root: Path, broker: str) -> None:
        self.root = root
        self.broker = broker
        self.home = root / "home"
        self.script = root / "script.json"
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith(("HANKWEAVE_", "CELERY_")) and key != "CI"}
        self.env.update({
            "HOME": str(root),
            "HANKWEAVE_HOME": str(self.home),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
            "HANKWEAVE_LOAD_PLUGINS": "checkpoint-git,executor-celery",
            "HANKWEAVE_STRICT_PLUGINS": "1",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "git",
            "HANKWEAVE_FAKE_SCRIPT": str(self.script),
            "HANKWEAVE_CELERY_BROKER": broker,
            "HANKWEAVE_CELERY_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT_S),
            "HANKWEAVE_CELERY_RESTORE_INTERVAL": "1",
            "HANKWEAVE_CELERY_DEFER": "1",
        })
        self.workers: dict[str, Worker] = {}
        self._groups: set[int] = set()
        """Every process group a worker of this project was started in."""
        self._codons: dict[str, Any] = {}
        self._app: Any = None
        self._ledger: Any = None
        self.play({})

    # ----- what runs -----

    def hank(self, name: str, codon_ids: Iterable[str]) -> Path:
        """A hank of fake-agent codons (``"model": "fake"``), one per id."""
        folder = self.root / name
        folder.mkdir()
        items = [{"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
                  "continuationMode": "fresh", "promptText": f"Do {codon_id}."}
                 for codon_id in codon_ids]
        (folder / "hank.json").write_text(json.dumps({"hank": items}))
        return folder

    def data(self, name: str) -> Path:
        folder = self.root / "data" / name
        folder.mkdir(parents=True)
        (folder / "input.txt").write_text(f"{name}\n")
        return folder

    def play(self, codons: dict[str, Any]) -> None:
        """The fake agent's script, by codon id (for every worker, started or not)."""
        self._codons = codons
        text = json.dumps({"codons": codons})
        self.script.write_text(text)
        for worker in self.workers.values():
            worker.script.write_text(text)

    # ----- commands -----

    def hankweave(self, *args: str, check: bool = True,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env={**self.env, **(env or {})}, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=WAIT_S, check=False)
        if check:
            assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        return done

    def submit(self, *args: str) -> list[str]:
        """``hankweave submit ARGS``: the execution directories it printed."""
        return self.hankweave("submit", *args).stdout.split()

    def status_rows(self) -> dict[str, dict[str, Any]]:
        """``hankweave status --json``'s executions, by execution directory."""
        return {row["execution"]: row for row in self.status_lines("execution")}

    def status_workers(self) -> dict[str, dict[str, Any]]:
        """``hankweave status --json``'s workers, by name."""
        return {row["worker"]: row for row in self.status_lines("worker")}

    def status_lines(self, kind: str) -> list[dict[str, Any]]:
        out = self.hankweave("status", "--json").stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [row for row in rows if row["type"] == kind]

    def app(self) -> Any:
        if self._app is None:
            from hankweave_executor_celery.app import make_app
            from hankweave_executor_celery.settings import load_settings

            self._app = make_app(load_settings(env=self.env, cwd=self.root))
        return self._app

    def ledger(self) -> Any:
        if self._ledger is None:
            from hankweave_executor_celery.ledger import Ledger

            self._ledger = Ledger(self.broker)
        return self._ledger

    def item(self, directory: str) -> Any:
        """The ledger's submission of ``directory``."""
        found = self.ledger().get(directory)
        assert found is not None, f"{directory} is not in the ledger"
        return found

    # ----- workers -----

    def start_workers(self, *names: str, queues: tuple[str, ...] = ()) -> list[Worker]:
        """Start one ``hankweave worker -c 1`` process per name (all at once) and wait until
        every one answers a ping."""
        started = [self._spawn(name, queues) for name in names]
        app = self.app()

        def ready() -> bool:
            replies = app.control.inspect(timeout=0.5).ping() or {}
            return all(any(key.startswith(f"{worker.name}@") for key in replies)
                       for worker in started)

        wait_for(ready, f"workers {', '.join(names)} to be ready", alive=started)
        return started

    def _spawn(self, name: str, queues: tuple[str, ...]) -> Worker:
        if name in self.workers:
            assert not self.workers[name].alive(), f"worker {name} already runs"
        folder = self.root / "workers" / name
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / "script.json"
        script.write_text(json.dumps({"codons": self._codons}))
        log = folder / "worker.log"
        command = [sys.executable, "-m", "hankweave", "worker", "-c", "1", "-n", f"{name}@%h",
                   "-l", "info", *(arg for queue in queues for arg in ("-Q", queue))]
        with log.open("ab") as out:
            process = subprocess.Popen(
                command, cwd=self.root, env={**self.env, "HANKWEAVE_FAKE_SCRIPT": str(script)},
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        worker = Worker(name, process, log, script)
        self.workers[name] = worker
        self._groups.add(process.pid)
        return worker

    def kill(self, worker: Worker) -> None:
        """SIGKILL the worker's whole process group (its main process and pool child)."""
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait(10)
        wait_for(lambda: not group_members(worker.process.pid),
                 f"worker {worker.name}'s processes to be gone", timeout=10)

    def stop_workers(self) -> list[str]:
        """SIGTERM every worker's group (a warm shutdown), SIGKILL what is still there after
        ``STOP_S``; the processes that were left behind, if any (all killed by now)."""
        for worker in self.workers.values():
            if worker.alive():
                _signal_group(worker.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        for worker in self.workers.values():
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(worker.process.pid, signal.SIGKILL)
                worker.process.wait(10)
        left = [f"{pid}: {command}" for group in self._groups
                for pid, command in group_members(group)]
        for group in self._groups:
            _signal_group(group, signal.SIGKILL)
        if self._app is not None:
            self._app.close()
            self._app = None
        return left

    def worker_lines(self, pattern: str) -> list[str]:
        """The lines of every worker log that match the regular expression ``pattern``."""
        found = re.compile(pattern)
        return [line for worker in self.workers.values()
                for line in worker.text().splitlines() if found.search(line)]

    def wait_log(self, pattern: str, what: str, timeout: float = WAIT_S) -> str:
        """Wait for a worker log line matching ``pattern``; the line."""
        wait_for(lambda: bool(self.worker_lines(pattern)), what, timeout=timeout,
                 explain=self.diagnostics)
        return self.worker_lines(pattern)[0]

    def runs_started(self, directory: str) -> int:
        """How many times a worker logged starting the execution (``running DIR on ...``)."""
        return len(self.worker_lines(rf"running {re.escape(directory)} on "))

    def attempts(self) -> Counter[str]:
        """How many times the fake agent was started for each codon id, on every worker."""
        total: Counter[str] = Counter()
        for worker in self.workers.values():
            counter = worker.script.with_name(worker.script.name + ".attempts.json")
            if counter.exists():
                total.update(json.loads(counter.read_text()))
        return total

    def diagnostics(self) -> str:
        """The ledger and the tail of every worker log, for a failing assertion."""
        parts = []
        try:
            parts.extend(f"ledger: {item.model_dump_json()}" for item in self.ledger().all())
        except Exception as exc:  # the broker is gone: say so, still show the logs
            parts.append(f"ledger unreadable: {exc}")
        for worker in self.workers.values():
            tail = "\n".join(worker.text().splitlines()[-25:])
            parts.append(f"--- {worker.name} (rc {worker.process.poll()}):\n{tail}")
        return "\n".join(parts)

    # ----- what happened -----

    def has_state(self, directory: str) -> bool:
        layout = ExecutionLayout(Path(directory))
        return layout.state_file.exists() or layout.state_log_file.exists()

    def state(self, directory: str) -> HankweaveState:
        return load_state(ExecutionLayout(Path(directory)).hankweave_dir)[0]

    def running_codon(self, directory: str) -> str | None:
        """The codon the newest run is running, if any."""
        if not self.has_state(directory):
            return None
        state = self.state(directory)
        run = state.runs[0] if state.runs else None
        if run is None or not run.codons or run.codons[-1].status != "running":
            return None
        return str(run.codons[-1].codon_id)

    def wait_running(self, directory: str, codon_id: str) -> None:
        wait_for(lambda: self.running_codon(directory) == codon_id, f"codon {codon_id} to run",
                 explain=self.diagnostics)

    def wait_status(self, directory: str, *statuses: str, timeout: float = WAIT_S) -> Any:
        """Wait until the ledger shows one of ``statuses``; fails at once if the execution ends
        some other way.  The submission."""
        from hankweave_executor_celery.ledger import FINISHED

        def reached() -> bool:
            status = self.item(directory).status
            if status in FINISHED and status not in statuses:
                raise AssertionError(f"{directory} ended {status}, not {'/'.join(statuses)}\n"
                                     + self.diagnostics())
            return status in statuses

        wait_for(reached, f"{directory} to be {'/'.join(statuses)}", timeout=timeout,
                 explain=self.diagnostics)
        return self.item(directory)


def wait_for(condition: Callable[[], bool], what: str, *, timeout: float = WAIT_S,
             alive: Iterable[Worker] = (), explain: Callable[[], str] | None = None) -> None:
    """Poll ``condition`` every 0.1 s until it holds; fail after ``timeout`` seconds, or as
    soon as one of the ``alive`` workers ends."""
    watched = list(alive)
    deadline = time.monotonic() + timeout
    while not condition():
        for worker in watched:
            if not worker.alive():
                raise AssertionError(f"worker {worker.name} ended (rc {worker.process.poll()})"
                                     f" while waiting for {what}:\n{worker.text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}"
                                 + (f"\n{explain()}" if explain else ""))
        time.sleep(0.1)


def group_members(group: int) -> list[tuple[int, str]]:
    """The live processes of process group ``group``: ``(pid, command line)``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ")".
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == group and fields[0] != "Z":
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append((int(entry.name), command.strip()))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def completed_records(state: HankweaveState) -> Counter[str]:
    """How many completed records each codon id has, across every run."""
    return Counter(record.codon_id for run in state.runs for record in run.codons
                   if record.status == "completed")


def all_records(state: HankweaveState) -> Counter[str]:
    """How many records (any status) each codon id has, across every run."""
    return Counter(record.codon_id for run in state.runs for record in run.codons)


def tool_results(log: Path) -> list[dict[str, Any]]:
    """The tool_result blocks of a codon log, in order."""
    return [block for line in log.read_text().splitlines() if line.strip()
            for block in (json.loads(line).get("message") or {}).get("content") or []
            if isinstance(block, dict) and block.get("type") == "tool_result"]
