"""A cancel that lands at the worst moment of a task: while it starts, or before the runtime
handles signals.  The task runs here, outside a worker, so the moment can be chosen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery_helpers import LONG, WAIT_S, Project

from hankweave.api import ExecutionLayout, live_runtime_lock


def _task(task_id: str) -> Any:
    """What the task reads of Celery's ``self``: its request."""
    return SimpleNamespace(request=SimpleNamespace(hostname="here@test", id=task_id))


def test_a_cancel_while_the_task_starts_means_it_does_not_run(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    from hankweave_executor_celery import tasks
    from hankweave_executor_celery.settings import load_settings

    hank = project.hank("hank", ["a"])
    [directory] = project.submit(str(hank), str(project.data("set")))  # no worker: queued
    cancels: list[subprocess.CompletedProcess[str]] = []

    def cancel_now(execution_dir: str) -> bool:
        # After the task read the ledger (not cancelled), before it records its start.
        cancels.append(project.hankweave("cancel", "-e", execution_dir))
        return False

    monkeypatch.setattr(tasks, "_held", cancel_now)
    result = tasks._run(_task(project.item(directory).task_id), directory, project.ledger(),
                        load_settings(env=project.env, cwd=project.root))

    assert [done.stdout.strip() for done in cancels] == [f"Cancelled {directory}"]
    assert result == {"skipped": "cancelled"}
    item = project.item(directory)
    assert item.status == "cancelled" and item.deliveries == 0  # not overwritten by "running"
    assert not project.has_state(directory) or not project.state(directory).runs


CHILD = r"""
import json, os, signal, sys, threading
from types import SimpleNamespace
from hankweave_executor_celery import tasks
from hankweave_executor_celery.ledger import Ledger
from hankweave_executor_celery.settings import load_settings

directory, broker, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
ledger = Ledger(broker)
task = SimpleNamespace(request=SimpleNamespace(hostname="here@test",
                                               id=ledger.get(directory).task_id))

def cancel():  # as `hankweave cancel` does: the ledger, then SIGTERM to the task's process
    ledger.update(directory, cancel_requested=True)
    os.kill(os.getpid(), signal.SIGTERM)

# Counted from the task's start, as Celery runs it: a real cancel signals only a task the
# ledger has running, which it records from inside the task.
run_held = tasks._run_held

def run_held_then_cancel(*args):
    threading.Timer(delay, cancel).start()
    return run_held(*args)

tasks._run_held = run_held_then_cancel
result = tasks._run(task, directory, ledger, load_settings())
print(json.dumps({"result": result, "defaultSigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}))
"""


@pytest.mark.parametrize("delay", [0.0, 0.2, 0.6, 2.5])
def test_a_sigterm_at_any_moment_of_a_task_is_recorded_and_its_process_lives_on(
        project: Project, delay: float) -> None:
    """Before the runtime handles SIGTERM (while it prepares, takes the lock, sets up), the
    task holds it and the launch stops cleanly; later the runtime stops the codon itself.
    Either way the pool process lives on and the ledger says cancelled, never "running"."""
    hank = project.hank("hank", ["a"])
    project.play({"a": LONG})
    [directory] = project.submit(str(hank), str(project.data("set")))

    done = subprocess.run([sys.executable, "-c", CHILD, directory, project.broker, str(delay)],
                          cwd=project.root, env=project.env, capture_output=True, text=True,
                          timeout=WAIT_S)

    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    outcome = json.loads(done.stdout.splitlines()[-1])
    item = project.item(directory)
    assert item.status == "cancelled", (item, outcome)
    assert outcome["result"] in ({"skipped": "cancelled"},
                                 {"exitCode": 143, "status": "cancelled"}), outcome
    assert outcome["defaultSigterm"]  # given back as the task found it
    assert live_runtime_lock(ExecutionLayout(Path(directory)).hankweave_dir) is None
    if project.has_state(directory):
        assert all(run.status != "running" for run in project.state(directory).runs)
