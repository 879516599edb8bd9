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

The in-memory checkpoint backend is used (nothing resumes across processes here), so the
figures are the executor's and the runtime's, not git's.

Prints one JSON line.  Default: about three minutes on 2 cores; ``--quick``: 8 hanks, 1 round.

Usage: python benchmarks/scale_out.py [--hanks N] [--codons N] [--messages N] [--delay-ms N]
                                      [--rounds N] [--probes N] [--quick]
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

    def start_worker(self, concurrency: int) -> subprocess.Popen[bytes]:
        log = open(self.root / f"worker-{concurrency}.log", "ab")  # noqa: SIM115 - the child's
        worker = subprocess.Popen(
            [sys.executable, "-m", "hankweave", "worker", "-c", str(concurrency), "-l",
             "warning", "-n", f"bench{concurrency}@%h"], env={**os.environ, **self.env},
            stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 30
        while not (self.app.control.inspect(timeout=0.5).ping() or {}):
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
        "target_ratio": 3, "target_dispatch_ms": 50,
        "ok": ratio >= 3 and dispatch <= 50,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
