"""Scale-out on Celery: throughput of one worker process against four, and scheduling overhead.

A real ``redis-server`` on a free 127.0.0.1 port, real ``hankweave worker`` processes (the
Celery executor plugin, prefork pool).  Every hank has ``--codons`` codons on the fake agent
with paced messages (``--messages`` times ``--delay-ms`` per codon), so the work is I/O-bound, as a
real agent's is: the worker processes wait on the "model", not on the CPU.

* **Throughput** (``ratio``): ``--hanks`` executions are submitted (set up and queued, as
  ``hankweave submit`` does), then a worker with ``-c 1`` or ``-c 4`` is started and timed from
  its first task start to the last execution finished (ledger statuses).  The two
  configurations alternate for ``--rounds`` rounds (A B, B A, ...); ``ratio`` is the median of
  the per-round ratios of executions per second, 4 processes over 1.  Target: >= 3.
* **Scheduling overhead** (``dispatch_to_codon_start_p50_ms``): with the ``-c 4`` worker idle,
  ``--probes`` one-codon executions are sent one at a time; each is timed from ``send_task`` to
  its codon's recorded start (``startTime`` in state).  ``dispatch_to_task_start_p50_ms`` is the
  part Celery takes (to the task's start in the ledger); the rest is the runtime's boot (settings,
  preflight, ownership, the first checkpoint).  Target: dispatch to codon start p50 <= 50 ms.

* **Recovery** (``recovery_s``): two ``-c 1`` workers with the **default** settings
  (visibility timeout 7,200 s, heartbeat 10 s, silence 60 s); one execution of ``--codons``
  codons of ``--recovery-codon-s`` seconds each; the worker running it is SIGKILLed (its whole
  process group) mid-codon; timed from the kill to that codon starting again on the other
  worker (its start in the new run's state).  Target: <= 180 s.  ``recovery_requeues`` and
  ``recovery_codon_runs`` check that it was the survivor's requeue (not the broker) and that no
  completed codon ran twice.

The throughput and dispatch figures use the in-memory checkpoint backend, so they are the
executor's and the runtime's, not git's; the recovery resumes in another process, so it uses
git.

Prints one JSON line.  Default: about three minutes on 2 cores; ``--quick``: 8 hanks, 1 round.

Usage: python benchmarks/scale_out.py [--hanks N] [--codons N] [--messages N] [--delay-ms N]
                                      [--rounds N] [--probes N] [--recovery-codon-s S]
                                      [--no-recovery] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hankweave.api import ExecutionLayout, load_state, parse_iso

FINISHED = {"completed", "failed", "interrupted", "stopped", "cancelled"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Bench:
    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.root = root
        self.args = args
        self.port = free_port()
        self.broker = f"redis://127.0.0.1:{self.port}/0"
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.env = {
            "PATH": os.environ.get("PATH", ""), "HOME": str(root),
            "HANKWEAVE_HOME": str(root / "home"),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness,"
                                        "hankweave.testing.memory_checkpoints",
            "HANKWEAVE_LOAD_PLUGINS": "executor-celery",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
            "HANKWEAVE_FAKE_SCRIPT": str(root / "script.json"),
            "HANKWEAVE_CELERY_BROKER": self.broker,
        }
        os.environ.update(self.env)
        self._write_project()
        from hankweave_executor_celery.app import make_app
        from hankweave_executor_celery.ledger import Ledger
        from hankweave_executor_celery.settings import load_settings

        self.settings = load_settings()
        self.ledger = Ledger(self.broker)
        self._wait_for_redis()
        self.app = make_app(self.settings)

    def _write_project(self) -> None:
        args = self.args
        for name, codons in (("hank", args.codons), ("probe", 1)):
            (self.root / name).mkdir()
            items = [{"id": f"c{i}", "name": f"Codon {i}", "model": "fake",
                      "continuationMode": "fresh", "promptText": "Work."}
                     for i in range(codons)]
            (self.root / name / "hank.json").write_text(json.dumps({"hank": items}))
        (self.root / "data").mkdir()
        (self.root / "data" / "input.txt").write_text("input\n")
        script = {"codons": {}, "default": {"messages": args.messages, "delayMs": args.delay_ms}}
        (self.root / "script.json").write_text(json.dumps(script))

    def _wait_for_redis(self) -> None:
        from hankweave_executor_celery.ledger import BrokerError

        deadline = time.monotonic() + 10
        while True:
            try:
                self.ledger.check()
                return
            except BrokerError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # ----- submitting -----

    def submit(self, hank: str) -> tuple[str, float]:
        """Set up and queue one execution, as ``hankweave submit`` does: (dir, sent at)."""
        from hankweave_executor_celery.commands import _submit_one

        sent = time.time()
        directory = _submit_one(self.app, self.ledger, self.settings,
                                hank=str(self.root / hank), data=str(self.root / "data"),
                                execution=None, queue=self.settings.queue, priority=None)
        return directory, sent

    def prepared(self, count: int, hank: str) -> list[str]:
        """``count`` executions set up and queued (their send time does not matter here)."""
        return [self.submit(hank)[0] for _ in range(count)]

    # ----- workers -----

    def start_worker(self, concurrency: int, name: str | None = None,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        name = name or f"bench{concurrency}"
        log = open(self.root / f"worker-{name}.log", "ab")  # noqa: SIM115 - the child's
        worker = subprocess.Popen(
            [sys.executable, "-m", "hankweave", "worker", "-c", str(concurrency), "-l",
             "warning", "-n", f"{name}@%h"], env={**os.environ, **self.env, **(env or {})},
            stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 30
        while not any(key.startswith(f"{name}@")
                      for key in self.app.control.inspect(timeout=0.5).ping() or {}):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start (see {log.name})")
        return worker

    @staticmethod
    def stop_worker(worker: subprocess.Popen[bytes]) -> None:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()

    def wait_finished(self, directories: list[str], timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while True:
            done = {item.execution_dir: item for item in self.ledger.all()}
            if all(done[d].status in FINISHED for d in directories):
                failed = [d for d in directories if done[d].status != "completed"]
                if failed:
                    raise RuntimeError(f"{len(failed)} execution(s) did not complete: {failed[0]}")
                return
            if time.monotonic() > deadline:
                raise TimeoutError("executions did not finish")
            time.sleep(0.05)

    def throughput(self, concurrency: int) -> float:
        """Executions per second, first task start to last finish."""
        directories = self.prepared(self.args.hanks, "hank")
        worker = self.start_worker(concurrency)
        try:
            self.wait_finished(directories)
        finally:
            self.stop_worker(worker)
        items = {item.execution_dir: item for item in self.ledger.all()}
        starts = [parse_iso(items[d].started_at or "").timestamp() for d in directories]
        ends = [parse_iso(items[d].finished_at or "").timestamp() for d in directories]
        return len(directories) / (max(ends) - min(starts))

    def probes(self) -> tuple[list[float], list[float]]:
        """(dispatch → codon start, dispatch → task start) in ms, one probe at a time."""
        worker = self.start_worker(4)
        to_codon, to_task = [], []
        try:
            for _ in range(self.args.probes):
                directory, sent = self.submit("probe")
                self.wait_finished([directory])
                state, _ = load_state(ExecutionLayout(Path(directory)).hankweave_dir)
                started = parse_iso(state.runs[-1].codons[0].start_time).timestamp()
                item = self.ledger.get(directory)
                assert item is not None and item.started_at
                to_codon.append((started - sent) * 1000)
                to_task.append((parse_iso(item.started_at).timestamp() - sent) * 1000)
        finally:
            self.stop_worker(worker)
        return to_codon, to_task

    def recovery(self) -> dict[str, Any]:
        """SIGKILL the worker running an execution mid-codon; seconds until that codon starts
        again on the other worker, with the default settings (module docstring)."""
        git = {"HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
               "HANKWEAVE_LOAD_PLUGINS": "executor-celery,checkpoint-git",
               "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "git",
               "HANKWEAVE_FAKE_SCRIPT": str(self.root / "recovery.json")}
        messages = max(1, round(self.args.recovery_codon_s * 1000 / 500))
        (self.root / "recovery.json").write_text(json.dumps(
            {"codons": {}, "default": {"messages": messages, "delayMs": 500}}))
        workers = {name: self.start_worker(1, name, git) for name in ("reca", "recb")}
        try:
            # `hankweave submit` itself: the execution is set up with the git backend too.
            directory = subprocess.run(
                [sys.executable, "-m", "hankweave", "submit", str(self.root / "hank"),
                 str(self.root / "data")], env={**os.environ, **self.env, **git},
                capture_output=True, text=True, check=True).stdout.strip()
            codon = "c1"
            layout = ExecutionLayout(Path(directory))
            running = self._wait(lambda: self._running(layout, codon), f"{codon} to run")
            time.sleep(self.args.recovery_codon_s / 3)  # mid-codon
            item = self.ledger.get(directory)
            assert item is not None and item.worker and running
            victim = workers[item.worker.split("@")[0]]
            killed = time.time()
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
            restarted = self._wait(lambda: self._started_after(layout, codon, killed),
                                   f"{codon} to start again", timeout=600)
            self.wait_finished([directory], timeout=600)
            state, _ = load_state(layout.hankweave_dir)
            runs = {r.codon_id: 0 for run in state.runs for r in run.codons}
            for run in state.runs:
                for record in run.codons:
                    runs[record.codon_id] += record.status == "completed"
            final = self.ledger.get(directory)
            assert final is not None
            return {"recovery_s": round(restarted - killed, 1), "recovery_requeues": final.requeues,
                    "recovery_codon_runs": runs}
        finally:
            for worker in workers.values():
                self.stop_worker(worker)

    @staticmethod
    def _wait(check: Any, what: str, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.1)

    @staticmethod
    def _running(layout: ExecutionLayout, codon: str) -> bool:
        if not layout.state_file.exists():
            return False
        state, _ = load_state(layout.hankweave_dir)
        run = state.runs[0] if state.runs else None
        return bool(run and run.codons and run.codons[-1].codon_id == codon
                    and run.codons[-1].status == "running")

    @staticmethod
    def _started_after(layout: ExecutionLayout, codon: str, moment: float) -> float | None:
        state, _ = load_state(layout.hankweave_dir)
        for run in state.runs:
            for record in run.codons:
                if record.codon_id == codon and record.start_time:
                    started = parse_iso(record.start_time).timestamp()
                    if started > moment:
                        return started
        return None

    def close(self) -> None:
        self.redis.terminate()
        self.redis.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hanks", type=int, default=32)
    parser.add_argument("--codons", type=int, default=4)
    parser.add_argument("--messages", type=int, default=2)
    parser.add_argument("--delay-ms", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--probes", type=int, default=15)
    parser.add_argument("--recovery-codon-s", type=float, default=12.0)
    parser.add_argument("--no-recovery", action="store_true",
                        help="Skip the recovery measurement (about 80 s).")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.hanks, args.rounds, args.probes = 8, 1, 5
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    root = Path(tempfile.mkdtemp(prefix="hankweave-scale-out-"))
    bench = Bench(root, args)
    try:
        ratios, one, four = [], [], []
        for round_number in range(args.rounds):
            order = (1, 4) if round_number % 2 == 0 else (4, 1)
            measured = {concurrency: bench.throughput(concurrency) for concurrency in order}
            one.append(measured[1])
            four.append(measured[4])
            ratios.append(measured[4] / measured[1])
        to_codon, to_task = bench.probes()
        recovery = {} if args.no_recovery else bench.recovery()
    finally:
        bench.close()
        shutil.rmtree(root, ignore_errors=True)
    ratio = statistics.median(ratios)
    dispatch = statistics.median(to_codon)
    result: dict[str, Any] = {
        "benchmark": "scale_out", "hanks": args.hanks, "codons": args.codons,
        "codon_pacing_ms": args.messages * args.delay_ms, "rounds": args.rounds,
        "executions_per_s_1": [round(v, 3) for v in one],
        "executions_per_s_4": [round(v, 3) for v in four],
        "ratio": round(ratio, 2), "ratios": [round(r, 2) for r in ratios],
        "dispatch_to_codon_start_p50_ms": round(dispatch, 1),
        "dispatch_to_codon_start_p90_ms": round(statistics.quantiles(to_codon, n=10)[-1], 1)
        if len(to_codon) >= 2 else round(dispatch, 1),
        "dispatch_to_task_start_p50_ms": round(statistics.median(to_task), 1),
        **recovery,
        "target_ratio": 3, "target_dispatch_ms": 50, "target_recovery_s": 180,
        "ok": ratio >= 3 and dispatch <= 50 and recovery.get("recovery_s", 0) <= 180,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
