"""Executions on real Celery worker processes over a real Redis: delivery is at least once, and
the runtime makes each codon run exactly once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from celery_helpers import Project, completed_records, free_port, wait_for

from hankweave.api import ExecutionLayout

PACED = {"messages": 3, "delayMs": 150}
SLOW = {"messages": 6, "delayMs": 400}


def test_two_workers_run_eight_hanks_each_codon_once(project: Project) -> None:
    hank = project.hank("hank", [{"id": c} for c in ("a", "b", "c")])
    project.play({"a": PACED, "b": PACED, "c": PACED})
    data = [str(project.data(f"set{i}")) for i in range(8)]
    project.start_worker("w1")
    project.start_worker("w2")

    directories = project.submit(str(hank), "--each", *data)

    assert len(directories) == 8
    for directory in directories:
        project.wait_status(directory, "completed")
    rows = [json.loads(line) for line in project.hankweave("status", "--json").stdout.split("\n")
            if line.strip()]
    assert sorted(row["execution"] for row in rows) == sorted(directories)
    assert {row["status"] for row in rows} == {"completed"}
    assert {row["worker"].split("@")[0] for row in rows} == {"w1", "w2"}
    assert all(row["finishedCodons"] == 3 and row["cost"] > 0 for row in rows)
    for directory in directories:
        state = project.state(directory)
        assert len(state.runs) == 1
        assert completed_records(state) == {"a": 1, "b": 1, "c": 1}


def test_a_worker_killed_mid_codon_has_its_execution_resumed_elsewhere(
        project: Project) -> None:
    hank = project.hank("hank", [{"id": c} for c in ("a", "b", "c")])
    project.play({"a": PACED, "b": SLOW, "c": PACED})
    workers = {"w1": project.start_worker("w1"), "w2": project.start_worker("w2")}

    [directory] = project.submit(str(hank), str(project.data("set")))
    wait_for(lambda: project.running_codon(directory) == "b", "codon b to run")
    item = project.ledger().get(directory)
    assert item is not None and item.worker
    project.kill(workers[item.worker.split("@")[0]])

    project.wait_status(directory, "completed")
    state = project.state(directory)
    records = completed_records(state)
    assert records["a"] == 1  # completed before the kill: never run again
    assert records == {"a": 1, "b": 1, "c": 1}
    assert state.runs[-1].status == "crashed"  # the killed worker's run
    final = project.ledger().get(directory)
    assert final is not None and final.deliveries == 2
    assert final.worker != item.worker


def test_a_duplicate_delivery_while_the_run_is_live_is_deferred(project: Project) -> None:
    from hankweave_executor_celery.app import TASK_NAME

    hank = project.hank("hank", [{"id": "a"}, {"id": "b"}])
    project.play({"a": SLOW, "b": PACED})
    project.start_worker("w1")
    project.start_worker("w2")
    [directory] = project.submit(str(hank), str(project.data("set")))
    wait_for(lambda: project.running_codon(directory) == "a", "codon a to run")

    project.app().send_task(TASK_NAME, args=[directory])  # a second delivery, live run
    wait_for(lambda: _deferrals(project, directory) > 0, "the duplicate to be deferred")
    project.wait_status(directory, "completed")
    time.sleep(3)  # the deferred copy retries (every second) and finds the run finished

    state = project.state(directory)
    assert len(state.runs) == 1
    assert completed_records(state) == {"a": 1, "b": 1}
    item = project.ledger().get(directory)
    assert item is not None and item.deliveries == 1 and item.status == "completed"
    assert item.deferrals >= 1


def test_cancel_drops_a_queued_execution(project: Project) -> None:
    hank = project.hank("hank", [{"id": "a"}])
    project.play({"a": PACED})
    [directory] = project.submit(str(hank), str(project.data("set")), "-Q", "later")

    cancelled = project.hankweave("cancel", "-e", directory)
    assert "Cancelled" in cancelled.stdout
    project.start_worker("w1", "later")
    time.sleep(3)

    assert project.status(directory) == "cancelled"
    layout = ExecutionLayout(Path(directory))
    assert not (layout.hankweave_dir / "state.json").exists() or \
        not project.state(directory).runs  # never ran
    again = project.hankweave("cancel", "-e", directory, check=False)
    assert again.returncode == 2 and "cancelled" in again.stderr


def test_cancel_stops_a_running_execution_and_frees_its_worker(project: Project) -> None:
    hank = project.hank("hank", [{"id": "a"}, {"id": "b"}])
    project.play({"a": SLOW, "b": PACED})
    project.start_worker("w1")
    [directory] = project.submit(str(hank), str(project.data("one")))
    wait_for(lambda: project.running_codon(directory) == "a", "codon a to run")

    project.hankweave("cancel", "-e", directory)

    project.wait_status(directory, "cancelled")
    state = project.state(directory)
    assert state.runs[0].status == "failed"
    assert state.runs[0].codons[-1].status == "failed"  # stopped, state saved
    [other] = project.submit(str(hank), str(project.data("two")))
    project.wait_status(other, "completed")  # the same worker is free again


def test_an_interrupted_execution_frees_its_worker_and_completes_after_the_answer(
        project: Project) -> None:
    asks = project.hank("asks", [{"id": "a"}])
    plain = project.hank("plain", [{"id": "p"}])
    project.play({"a": {"messages": 1, "askHuman": "Which colour?"}, "p": PACED})
    project.start_worker("w1")

    [waiting] = project.submit(str(asks), str(project.data("one")))
    project.wait_status(waiting, "interrupted")
    [other] = project.submit(str(plain), str(project.data("two")))
    project.wait_status(other, "completed")  # the one worker was not held
    [question] = [item for item in project.state(waiting).interruptions]

    answered = project.hankweave("answer", "-e", waiting, question.id, "Blue", "--submit")
    assert waiting in answered.stdout
    project.wait_status(waiting, "completed")

    state = project.state(waiting)
    record = state.runs[0].codons[-1]
    assert record.status == "completed"
    log = Path(waiting) / record.claude_log_path
    results = [block for line in log.read_text().splitlines()
               for block in (json.loads(line).get("message") or {}).get("content") or []
               if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results[-1]["content"] == "Blue"


def test_submit_with_the_broker_down_fails_clearly_and_creates_nothing(
        project: Project) -> None:
    hank = project.hank("hank", [{"id": "a"}])
    down = f"redis://127.0.0.1:{free_port()}/0"
    done = project.hankweave("submit", str(hank), str(project.data("set")), check=False,
                             env={"HANKWEAVE_CELERY_BROKER": down})

    assert done.returncode == 1
    assert f"Cannot reach the Celery broker at {down}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not project.home.exists() or not any(project.home.iterdir())


def test_bad_input_is_refused_clearly(project: Project) -> None:
    unknown = project.hankweave("cancel", "-e", str(project.root / "nowhere"), check=False)
    assert unknown.returncode == 2 and "never submitted" in unknown.stderr

    broken = project.root / "broken"
    broken.mkdir()
    (broken / "hank.json").write_text('{"hank": [{"id": "a"}]}')
    invalid = project.hankweave("submit", str(broken), str(project.data("set")), check=False)
    assert invalid.returncode == 2 and "Traceback" not in invalid.stderr
    assert "hank[0]" in invalid.stderr
    assert not project.ledger().all()

    both = project.hankweave("submit", str(broken), "a", "b", check=False)
    assert both.returncode == 2 and "--each" in both.stderr


def _deferrals(project: Project, directory: str) -> int:
    item = project.ledger().get(directory)
    return item.deferrals if item is not None else 0


def test_priorities_order_what_waits(project: Project) -> None:
    hank = project.hank("hank", [{"id": "a"}])
    project.play({"a": {"messages": 1}})
    order = {}
    for priority in ("9", "0", "5"):
        [order[priority]] = project.submit(str(hank), str(project.data(f"p{priority}")),
                                           "--priority", priority)
    project.start_worker("w1")
    for directory in order.values():
        project.wait_status(directory, "completed")

    started = {priority: project.ledger().get(directory).started_at
               for priority, directory in order.items()}
    assert sorted(started, key=lambda p: started[p]) == ["0", "5", "9"]
