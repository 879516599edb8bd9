"""Recovery in seconds, not at the visibility timeout: workers' heartbeats in the ledger, a
silent worker's executions requeued by the others, a stopped worker's runs requeued at once, and
ledger writes that outlive a Redis outage.  Real ``redis-server`` and real worker processes;
small silence and heartbeat settings so each test takes seconds (the defaults are measured by
``benchmarks/scale_out.py``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery_helpers import (
    LONG,
    PACED,
    SLOW,
    WAIT_S,
    Project,
    completed_records,
    counted,
    free_port,
    redis_serving,
    wait_for,
)

from hankweave.api import parse_iso

SILENCE_S = 3
HEARTBEAT_S = 1


def quick_recovery(project: Project, *, visibility_timeout_s: float) -> None:
    project.env.update({
        "HANKWEAVE_CELERY_WORKER_SILENCE": str(SILENCE_S),
        "HANKWEAVE_CELERY_WORKER_HEARTBEAT": str(HEARTBEAT_S),
        "HANKWEAVE_CELERY_VISIBILITY_TIMEOUT": str(visibility_timeout_s),
    })


def started_again(project: Project, directory: str, codon_id: str, after: float) -> float:
    """When ``codon_id`` started in a run newer than the moment ``after`` (epoch seconds)."""
    def start() -> float | None:
        for run in project.state(directory).runs:
            for record in run.codons:
                if record.codon_id == codon_id and record.start_time:
                    moment = parse_iso(record.start_time).timestamp()
                    if moment > after:
                        return moment
        return None

    wait_for(lambda: start() is not None, f"{codon_id} to start again", explain=project.diagnostics)
    moment = start()
    assert moment is not None
    return moment


def test_a_killed_worker_s_execution_resumes_within_seconds_and_its_late_redelivery_is_dropped(
        project: Project) -> None:
    # The broker would give the task back only after 12 s; the survivors requeue it first.
    quick_recovery(project, visibility_timeout_s=12)
    hank = project.hank("hank", ["a", "b", "c"])
    project.play({"a": counted(PACED), "b": counted(SLOW), "c": counted(PACED)})
    workers = {worker.name: worker for worker in project.start_workers("w1", "w2", "w3")}
    [directory] = project.submit(str(hank), str(project.data("set")))
    project.wait_running(directory, "b")
    first = project.item(directory)
    victim = workers[first.worker.split("@")[0]]

    killed_at = time.time()
    project.kill(victim)

    resumed_at = started_again(project, directory, "b", killed_at)
    final = project.wait_status(directory, "completed")
    # Silence (3 s) plus at most a heartbeat and the new task's boot; the broker's own
    # redelivery would have taken 12 s from the first delivery.
    assert resumed_at - killed_at < SILENCE_S + 6, resumed_at - killed_at
    assert final.requeues == 1 and final.task_id != first.task_id  # two survivors, one requeue
    assert re.fullmatch(rf"requeued by w\d@\S+: its worker {re.escape(first.worker)} has been"
                        r" silent since \S+", final.requeue_reason or ""), final.requeue_reason
    state = project.state(directory)
    assert completed_records(state) == {"a": 1, "b": 1, "c": 1}
    assert project.attempts() == {"a": 1, "b": 2, "c": 1}  # b was cut off by the kill
    # The broker's redelivery of the dead worker's task comes at 12 s, and is dropped.
    project.wait_log(rf"dropping a delivery of {re.escape(directory)}: task"
                     rf" {re.escape(first.task_id)} was superseded", "the late redelivery",
                     timeout=30)
    assert project.runs_started(directory) == 2
    assert project.item(directory).status == "completed"
    # `status` names every worker; the dead one is flagged silent.
    workers_seen = project.status_workers()
    assert workers_seen[first.worker]["silent"] is True
    assert all(not row["silent"] and row["running"] == []
               for name, row in workers_seen.items() if name != first.worker)
    shown = project.hankweave("status").stdout
    assert "silent" in shown and first.worker in shown


def test_a_worker_stopped_with_sigterm_requeues_its_run_at_once(project: Project) -> None:
    quick_recovery(project, visibility_timeout_s=3600)
    hank = project.hank("hank", ["a", "b", "c"])
    project.play({"a": counted(PACED), "b": counted(LONG), "c": counted(PACED)})
    workers = {worker.name: worker for worker in project.start_workers("w1", "w2")}
    [directory] = project.submit(str(hank), str(project.data("set")))
    project.wait_running(directory, "b")
    first = project.item(directory)
    victim = workers[first.worker.split("@")[0]]

    stopped_at = time.time()
    os.kill(victim.process.pid, signal.SIGTERM)  # the worker's main process, as `kill PID`

    # Its run stops cleanly and the worker exits, long before b's 12 s of work would end.
    victim.process.wait(timeout=WAIT_S)
    assert time.time() - stopped_at < 8
    resumed_at = started_again(project, directory, "b", stopped_at)
    assert resumed_at - stopped_at < 8
    final = project.wait_status(directory, "completed")
    assert final.requeues == 1
    assert final.requeue_reason == f"requeued: its worker {first.worker} was stopped"
    assert final.worker != first.worker
    state = project.state(directory)
    assert completed_records(state) == {"a": 1, "b": 1, "c": 1}
    stopped_run = state.runs[-1]
    assert stopped_run.status != "running" and stopped_run.end_time  # recorded, not crashed
    assert project.attempts() == {"a": 1, "b": 2, "c": 1}
    assert "Warm shutdown" in victim.text()
    # A clean stop leaves the list of workers.
    assert first.worker not in project.status_workers()


def test_two_workers_racing_to_requeue_one_execution_send_one_task(
        project: Project, tmp_path: Path) -> None:
    from hankweave_executor_celery.ledger import Submission
    from hankweave_executor_celery.recovery import sweep
    from hankweave_executor_celery.settings import load_settings

    settings = load_settings(env={**project.env, "HANKWEAVE_CELERY_WORKER_SILENCE": "2",
                                  "HANKWEAVE_CELERY_WORKER_HEARTBEAT": "1"}, cwd=tmp_path)
    directory = tmp_path / "execution"
    directory.mkdir()  # no runtime lock: its runtime is gone
    ledger = project.ledger()
    ledger.add(Submission(execution_dir=str(directory), queue="hankweave", task_id="old",
                          status="running", worker="dead@host", submitted_at="2026-01-01T00:00:00Z",
                          started_at="2026-01-01T00:00:01Z"))
    sent: list[str] = []
    lock = threading.Lock()
    go = threading.Barrier(8)

    def racer(n: int) -> None:
        from hankweave_executor_celery.ledger import Ledger

        mine = Ledger(project.broker)  # a connection each, as separate workers have
        go.wait()

        def send(item: Submission) -> None:
            with lock:
                sent.append(item.task_id)

        sweep(mine, settings, f"w{n}@host", send)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    item = ledger.get(str(directory))
    assert item is not None
    assert len(sent) == 1 and sent == [item.task_id] and item.task_id != "old"
    assert item.status == "queued" and item.requeues == 1


# ----- a Redis outage -----


class DurableRedis:
    """A redis-server that keeps its data across a restart (append-only file, fsync always), as
    a production broker does; stopped and started again on the same port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.server: subprocess.Popen[bytes] | None = None
        self.started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server: the first time on a free port (another one if that was taken
        meanwhile: CI runs another tox env beside this one, with servers of its own), then
        again on the same one."""
        for _ in range(5):
            self.server = server = subprocess.Popen(
                ["redis-server", "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                 "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder),
                 "--logfile", str(self.folder / "redis.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            wait_for(lambda server=server: server.poll() is not None
                     or redis_serving(self.port, server),
                     f"redis-server on port {self.port}")
            if server.poll() is None:
                self.started = True
                return
            if self.started:
                break  # a restart must be on the same port
            self.port = free_port()
        log = self.folder / "redis.log"
        raise AssertionError(f"redis-server could not serve on port {self.port}"
                             f" (rc {server.poll()}):\n"
                             + (log.read_text() if log.exists() else ""))

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()  # it writes its data on the way out
            self.server.wait(10)


@pytest.fixture
def outage_project(redis_url: str, tmp_path: Path) -> Iterator[tuple[Project, DurableRedis]]:
    """A project on its own durable Redis (``redis_url`` only makes a missing redis-server
    skip or fail the test as the others do)."""
    folder = tmp_path / "redis"
    folder.mkdir()
    broker = DurableRedis(folder)
    broker.start()
    root = tmp_path / "project"
    root.mkdir()
    project = Project(root, broker.url)
    try:
        yield project, broker
    finally:
        if broker.server is None or broker.server.poll() is not None:
            broker.start()  # the workers stop warm only with their broker there
        left = project.stop_workers()
        broker.stop()
        assert not left, f"worker processes were left behind (now killed): {left}"


def test_a_run_that_ends_while_redis_is_down_is_recorded_when_it_returns(
        outage_project: tuple[Project, DurableRedis]) -> None:
    project, broker = outage_project
    hank = project.hank("hank", ["a", "b"])
    project.play({"a": counted(PACED), "b": counted(SLOW)})
    [worker] = project.start_workers("w1")
    [directory] = project.submit(str(hank), str(project.data("set")))
    project.wait_running(directory, "b")

    # Redis goes away mid-codon, and the run ends while it is away.
    broker.stop()
    wait_for(lambda: _run_ended(project, directory), "the run to end while Redis is down")
    ended = parse_iso(project.state(directory).runs[0].end_time or "").timestamp()
    time.sleep(6)  # the ledger's write waits for Redis meanwhile
    broker.start()

    final = project.wait_status(directory, "completed")
    # Recorded with the time the run ended, not the time Redis came back (6 s later; the
    # worker reads its clock once the runtime has shut down, which a loaded machine slows:
    # CI runs another tox env beside this one).
    assert abs(parse_iso(final.finished_at or "").timestamp() - ended) < 3
    assert project.status_rows()[directory]["status"] == "completed"
    assert completed_records(project.state(directory)) == {"a": 1, "b": 1}
    assert project.attempts() == {"a": 1, "b": 1}
    # The worker lived through it and takes new work.
    assert worker.alive()
    [second] = project.submit(str(hank), str(project.data("again")))
    project.wait_status(second, "completed")


def _run_ended(project: Project, directory: str) -> bool:
    state = project.state(directory)
    return bool(state.runs) and state.runs[0].status == "completed"
