"""Executions on real ``hankweave worker`` processes over a real Redis.

Celery delivers at least once (late acks, redelivery after the visibility timeout); the
runtime's lock and crash recovery make every codon run exactly once.  Each test drives the
``hankweave`` commands as a user would and reads what they left: the ledger, the execution's
state, the fake agent's attempt counts and the workers' logs.
"""

from __future__ import annotations

import re
from pathlib import Path

from celery_helpers import (
    LONG,
    PACED,
    SLOW,
    VISIBILITY_TIMEOUT_S,
    Project,
    all_records,
    completed_records,
    counted,
    free_port,
    group_members,
    tool_results,
)

from hankweave.api import ExecutionLayout, live_runtime_lock, parse_iso, read_state_strict


def _seconds_between(earlier: str, later: str) -> float:
    return parse_iso(later).timestamp() - parse_iso(earlier).timestamp()


def _dropped(task_id: str) -> str:
    """A worker log line saying a delivery of ``task_id`` was dropped without running: as
    revoked (the worker had the revoke), or by the task itself (it read the ledger)."""
    task = re.escape(task_id)
    return rf"Discarding revoked task: .*\[{task}\]|\[{task}\] succeeded .*'skipped'"


def test_two_workers_run_eight_hanks_each_codon_exactly_once(project: Project) -> None:
    three = project.hank("three", ["a", "b", "c"])
    four = project.hank("four", ["a", "b", "c", "d"])
    project.play({codon: counted({**PACED, "writeFiles": {f"{codon}.txt": codon}})
                  for codon in "abcd"})
    project.start_workers("w1", "w2")

    directories = [*project.submit(str(three), "--each",
                                   *(str(project.data(f"three-{i}")) for i in range(4))),
                   *project.submit(str(four), "--each",
                                   *(str(project.data(f"four-{i}")) for i in range(4)))]

    assert len(set(directories)) == 8
    for directory in directories:
        project.wait_status(directory, "completed")
    rows = project.status_rows()
    assert sorted(rows) == sorted(directories)
    for directory in directories:
        codons = "abc" if directory in directories[:4] else "abcd"
        row = rows[directory]
        assert row["status"] == "completed", row
        assert row["finishedCodons"] == len(codons) and row["cost"] > 0, row
        assert row["deliveries"] == 1, row
        state = project.state(directory)
        assert [run.status for run in state.runs] == ["completed"]
        expected = dict.fromkeys(codons, 1)
        assert completed_records(state) == expected
        assert all_records(state) == expected  # no failed or repeated record either
        agent_root = ExecutionLayout(Path(directory)).agent_root
        assert sorted(path.name for path in agent_root.glob("?.txt")) == [
            f"{codon}.txt" for codon in codons]
    assert {row["worker"].split("@")[0] for row in rows.values()} == {"w1", "w2"}
    followed = project.hankweave("status", "--json", "--follow").stdout.splitlines()
    assert len(followed) == 8  # everything has finished: --follow prints it once and ends
    # Each agent was started once per execution that has the codon, over both workers.
    assert project.attempts() == {"a": 8, "b": 8, "c": 8, "d": 4}


def test_a_worker_killed_mid_codon_is_redelivered_and_resumed_on_the_other(
        project: Project) -> None:
    hank = project.hank("hank", ["a", "b", "c"])
    project.play({"a": counted(PACED), "b": counted(SLOW), "c": counted(PACED)})
    workers = {worker.name: worker for worker in project.start_workers("w1", "w2")}
    [directory] = project.submit(str(hank), str(project.data("set")))

    project.wait_running(directory, "b")
    done_before = completed_records(project.state(directory))
    attempts_before = project.attempts()
    first = project.item(directory)
    victim = workers[first.worker.split("@")[0]]
    [survivor] = [worker for worker in workers.values() if worker is not victim]
    project.kill(victim)

    final = project.wait_status(directory, "completed")
    assert done_before == {"a": 1}
    assert final.deliveries == 2
    assert final.worker.split("@")[0] == survivor.name
    # Back only once the delivery had been unacknowledged for the visibility timeout.
    assert _seconds_between(first.started_at, final.started_at) >= VISIBILITY_TIMEOUT_S - 0.5
    state = project.state(directory)
    assert [run.status for run in state.runs] == ["completed", "crashed"]
    records = completed_records(state)
    attempts = project.attempts()
    for codon_id in done_before:  # completed before the kill: never run again
        assert records[codon_id] == 1
        assert attempts[codon_id] == attempts_before[codon_id] == 1
    assert records == {"a": 1, "b": 1, "c": 1}
    assert attempts == {"a": 1, "b": 2, "c": 1}  # b was cut off by the kill and ran again
    assert project.runs_started(directory) == 2
    assert survivor.alive()


def test_a_duplicate_delivery_while_the_run_is_live_is_deferred_not_run(
        project: Project) -> None:
    from hankweave_executor_celery.settings import TASK_NAME

    hank = project.hank("hank", ["a", "b"])
    project.play({"a": counted(SLOW), "b": counted(PACED)})
    project.start_workers("w1", "w2")
    [directory] = project.submit(str(hank), str(project.data("set")))
    project.wait_running(directory, "a")

    # The same task again, as the broker redelivers a run that outlives the visibility
    # timeout (a copy under another id is dropped at once: test_recovery.py).
    duplicate = project.item(directory).task_id
    project.app().send_task(TASK_NAME, args=[directory], task_id=duplicate)

    project.wait_log(rf"\[{duplicate}\] retry: Retry in 1", "the duplicate to be deferred")
    assert project.item(directory).status == "running"  # a deferred copy leaves it alone
    project.wait_status(directory, "completed")
    # The copy retries every second until it finds the run over, then does nothing.
    project.wait_log(rf"\[{duplicate}\] succeeded .*'skipped': 'already completed'",
                     "the duplicate's last retry")

    state = project.state(directory)
    assert [run.status for run in state.runs] == ["completed"]
    assert all_records(state) == {"a": 1, "b": 1}
    assert project.attempts() == {"a": 1, "b": 1}
    assert project.runs_started(directory) == 1
    item = project.item(directory)
    assert item.status == "completed" and item.deliveries == 1 and item.deferrals >= 1


def test_cancel_of_a_queued_execution_means_it_never_runs(project: Project) -> None:
    hank = project.hank("hank", ["a"])
    project.play({"a": PACED})
    [directory] = project.submit(str(hank), str(project.data("set")), "-Q", "later")
    task_id = project.item(directory).task_id

    cancelled = project.hankweave("cancel", "-e", directory)
    assert cancelled.stdout.strip() == f"Cancelled {directory}"
    assert project.item(directory).status == "cancelled"
    # Celery's revoke reached no worker; the one started now reads the ledger and drops it.
    project.start_workers("w1", queues=("later",))
    line = project.wait_log(_dropped(task_id), "the task to be dropped")
    assert "'skipped': 'cancelled'" in line

    assert not project.has_state(directory) or not project.state(directory).runs
    item = project.item(directory)
    assert item.status == "cancelled" and item.deliveries == 0
    assert project.runs_started(directory) == 0
    again = project.hankweave("cancel", "-e", directory, check=False)
    assert again.returncode == 2 and "its last run ended cancelled" in again.stderr


def test_cancel_stops_a_running_execution_cleanly_and_frees_its_worker(
        project: Project) -> None:
    hank = project.hank("hank", ["a", "b"])
    project.play({"a": LONG, "b": PACED})
    [worker] = project.start_workers("w1")
    [running] = project.submit(str(hank), str(project.data("one")))
    project.wait_running(running, "a")
    [waiting] = project.submit(str(hank), str(project.data("two")))  # the worker is busy

    assert project.hankweave("cancel", "-e", waiting).stdout.strip() == f"Cancelled {waiting}"
    stopping = project.hankweave("cancel", "-e", running)
    assert stopping.stdout.strip() == f"Cancelled {running} (stopping its run)"

    item = project.wait_status(running, "cancelled")
    assert item.exit_code == 143
    hankweave_dir = ExecutionLayout(Path(running)).hankweave_dir
    state, _ = read_state_strict(hankweave_dir)
    [run] = state.runs
    assert run.status == "cancelled"  # a person stopped it; the runtime saved its state
    [record] = run.codons  # b never started
    assert record.codon_id == "a" and record.status == "failed"
    assert record.failure_reason.retriable
    assert live_runtime_lock(hankweave_dir) is None
    # The cancelled task that waited reaches the worker once it is free, and is dropped.
    project.wait_log(_dropped(project.item(waiting).task_id), "the queued task to be dropped")
    assert project.runs_started(waiting) == 0
    assert not project.has_state(waiting) or not project.state(waiting).runs
    assert project.item(waiting).status == "cancelled"

    [after] = project.submit(str(hank), str(project.data("three")))
    assert project.wait_status(after, "completed").worker.startswith("w1@")
    assert worker.alive()


def test_cancel_of_an_execution_whose_worker_died_is_recorded_and_it_can_resume(
        project: Project) -> None:
    hank = project.hank("hank", ["a", "b"])
    project.play({"a": counted(PACED), "b": counted(SLOW)})
    workers = {worker.name: worker for worker in project.start_workers("w1", "w2")}
    [directory] = project.submit(str(hank), str(project.data("set")))
    project.wait_running(directory, "b")
    item = project.item(directory)
    project.kill(workers[item.worker.split("@")[0]])

    cancelled = project.hankweave("cancel", "-e", directory)
    assert cancelled.stdout.strip() == (
        f"Cancelled {directory} (its worker is gone: its redelivery is dropped; `hankweave"
        " submit -e` resumes it)")
    assert project.item(directory).status == "cancelled"  # at once, not left "running"
    # The redelivery (after the visibility timeout) is dropped by the surviving worker, which
    # had the revoke: it never runs.
    project.wait_log(_dropped(item.task_id), "the redelivery to be dropped")
    assert project.item(directory).status == "cancelled"
    assert project.runs_started(directory) == 1
    assert project.status_rows()[directory]["status"] == "cancelled"

    # Cancelled, not stuck: it can be queued again, and resumes where the crash left it.
    assert project.submit("-e", directory) == [directory]
    project.wait_status(directory, "completed")
    assert completed_records(project.state(directory)) == {"a": 1, "b": 1}
    assert project.attempts() == {"a": 1, "b": 2}


def test_an_interrupted_execution_frees_its_worker_and_completes_after_the_answer(
        project: Project) -> None:
    asks = project.hank("asks", ["ask"])
    plain = project.hank("plain", ["p"])
    project.play({"ask": {"messages": 1, "delayMs": 100, "askHuman": "Which colour?"},
                  "p": PACED})
    [worker] = project.start_workers("w1")

    [waiting] = project.submit(str(asks), str(project.data("one")))
    assert project.wait_status(waiting, "interrupted").exit_code == 3
    [question] = project.state(waiting).interruptions
    assert question.status == "pending"
    row = project.status_rows()[waiting]
    assert row["status"] == "interrupted" and row["pendingInterruptions"] == 1
    # The one worker is not held while the question waits.
    [other] = project.submit(str(plain), str(project.data("two")))
    assert project.wait_status(other, "completed").worker.startswith("w1@")
    assert project.item(waiting).status == "interrupted"

    answered = project.hankweave("answer", "-e", waiting, question.id, "Blue", "--submit")
    assert waiting in answered.stdout
    final = project.wait_status(waiting, "completed")
    assert final.deliveries == 2 and final.exit_code == 0

    state = project.state(waiting)
    assert state.interruption(question.id).status == "answered"
    record = state.runs[0].codons[-1]
    assert record.codon_id == "ask" and record.status == "completed"
    results = tool_results(Path(waiting) / record.claude_log_path)
    assert results[-1]["content"] == "Blue"  # the agent got the answer
    assert worker.alive()


def test_the_broker_down_is_one_clear_error_and_submit_creates_nothing(
        project: Project) -> None:
    hank = project.hank("hank", ["a"])
    down = f"redis://127.0.0.1:{free_port()}/0"
    data = str(project.data("set"))

    for args in (("submit", str(hank), data), ("worker", "-n", "nobody@%h"), ("status",)):
        done = project.hankweave(*args, check=False, env={"HANKWEAVE_CELERY_BROKER": down})
        assert done.returncode == 1, (args, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"Error: Cannot reach the Celery broker at {down}: "), line
        assert "HANKWEAVE_CELERY_BROKER" in line and ".." not in line
        assert "Traceback" not in done.stderr
    assert not project.home.exists()
    assert not project.ledger().all()


def test_bad_input_is_refused_clearly_with_exit_2(project: Project) -> None:
    nowhere = project.root / "nowhere"
    unknown = project.hankweave("cancel", "-e", str(nowhere), check=False)
    assert unknown.returncode == 2
    assert f"{nowhere} was never submitted" in unknown.stderr
    assert "Traceback" not in unknown.stderr

    broken = project.root / "broken"
    broken.mkdir()
    (broken / "hank.json").write_text('{"hank": [{"id": "a"}]}')
    invalid = project.hankweave("submit", str(broken), str(project.data("set")), check=False)
    assert invalid.returncode == 2
    assert str(broken / "hank.json") in invalid.stderr and "hank[0].model" in invalid.stderr
    assert "Traceback" not in invalid.stderr

    good = project.hank("good", ["a"])
    missing = project.hankweave("submit", str(good), str(project.root / "no-data"), check=False)
    assert missing.returncode == 2 and "Data source not found" in missing.stderr

    several = project.hankweave("submit", str(good), "x", "y", check=False)
    assert several.returncode == 2 and "--each" in several.stderr

    assert not project.home.exists()
    assert not project.ledger().all()


def test_priorities_order_what_waits(project: Project) -> None:
    hank = project.hank("hank", ["a"])
    project.play({"a": {"messages": 1}})
    order = {}
    for priority in ("9", "0", "5"):
        [order[priority]] = project.submit(str(hank), str(project.data(f"p{priority}")),
                                           "--priority", priority)
    project.start_workers("w1")
    started = {priority: project.wait_status(directory, "completed").started_at
               for priority, directory in order.items()}

    assert sorted(started, key=lambda priority: started[priority]) == ["0", "5", "9"]


def test_stopping_the_workers_leaves_no_process_behind(project: Project) -> None:
    workers = project.start_workers("w1", "w2")
    groups = [worker.process.pid for worker in workers]
    assert all(len(group_members(group)) >= 2 for group in groups)  # main + pool child

    assert project.stop_workers() == []
    assert all(not group_members(group) for group in groups)
    assert all(worker.process.returncode == 0 for worker in workers)  # a warm shutdown


def test_a_bundle_is_verified_at_submit_and_run_by_a_worker(project: Project) -> None:
    import json

    from hankweave.api import pack_hank

    hank = project.hank("hank", ["a", "b"])
    packed = pack_hank(hank, output=Path("hank.hank"), cwd=project.root)
    assert packed.output is not None and packed.lock is not None
    tampered = project.root / "tampered.hank"
    tampered.write_bytes(packed.output.read_bytes()[:-8] + b"\0" * 8)

    refused = project.hankweave("submit", str(tampered), str(project.data("bad")), check=False)
    assert refused.returncode == 2 and str(tampered) in refused.stderr
    assert "Traceback" not in refused.stderr and not project.ledger().all()

    project.play({"a": counted(PACED), "b": counted(PACED)})
    project.start_workers("w1")
    [directory] = project.submit(str(packed.output), str(project.data("set")))

    project.wait_status(directory, "completed")
    meta = json.loads((Path(directory) / ".hankweave/execution-meta.json").read_text())
    assert meta["bundleHash"] == packed.lock.bundle_hash
    assert meta["bundlePath"] == str(packed.output)
    assert Path(meta["hankPath"]).parent.name == packed.lock.bundle_hash
    assert project.attempts() == {"a": 1, "b": 1}
