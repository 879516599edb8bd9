"""The runtime in-process: skip, stop, and the failure policy (abort, retry, ignore)."""

from __future__ import annotations

import asyncio
import time

import pytest

from hankweave.fsutil import process_running
from hankweave.state.store import StateStore, load_state
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon, wait_for_status

RETRY_FAST = {"delayMs": 0}
OVERLOADED = {"result": "error", "errorText": "API Error: 529 overloaded"}


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


@pytest.fixture
def slow_disk(monkeypatch):
    """Every durable state write takes 50 ms, so a command can land in the middle of one."""
    original = StateStore._sync_wal

    def slow_sync(store):
        time.sleep(0.05)
        original(store)

    monkeypatch.setattr(StateStore, "_sync_wal", slow_sync)


# ----- skip and stop -----


def test_skipping_a_hanging_codon_records_it_skipped_and_runs_the_next(project):
    project.write_hank([codon("a", checkpointedFiles=["**"]), codon("b")])

    async def skip_a(runtime):
        await wait_for_status(runtime, "a", "running")
        # Skip once the agent hangs: its three messages (two, then the write) are in.
        while runtime.state.runs[0].codons[-1].assistant_message_count < 3:
            await asyncio.sleep(0.002)
        assert runtime.commands.skip()

    outcome = project.run_controlled(
        skip_a, {"a": {"hang": True, "messages": 2, "writeFiles": {"a.md": "partial"}}})

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "skipped"), ("b", "completed")]
    a = outcome.record("a")
    assert a.skipped_during == "running"
    assert a.skip_checkpoint
    assert a.assistant_message_count == 3
    completed = {d["codonId"]: d for d in outcome.of_type("codon.completed")}
    assert completed["a"]["cost"] == 0 and completed["a"]["success"] is False
    assert completed["b"]["success"] is True
    assert outcome.state.runs[0].status == "completed"


def test_skip_without_a_running_codon_is_refused(project):
    project.write_hank([codon("a")])
    refused = []

    async def skip_then_stop(runtime):
        # autostart off: the runtime waits for a start command; nothing runs, nothing to skip.
        refused.append(runtime.commands.skip())
        runtime.commands.request_shutdown("SIGINT")

    outcome = project.run_controlled(skip_then_stop, autostart=False)
    assert refused == [False]
    assert outcome.code == 130
    assert outcome.state.runs[0].codons == []


def test_a_skip_during_a_state_write_keeps_the_state_log_in_step(project, slow_disk):
    # The skip arrives while the runtime waits for the running transition's fsync.
    project.write_hank([codon("a"), codon("b")])
    seen = {}

    async def skip_while_initializing(runtime):
        while not (runtime.commands.agent_running and runtime.state.runs[0].codons
                   and runtime.state.runs[0].codons[-1].status == "initializing"):
            await asyncio.sleep(0.002)
        runtime.commands.skip()
        await wait_for_status(runtime, "b", "running")
        # What a crash right now would leave: the state file plus its log, replayed.
        seen["disk"], seen["report"] = load_state(project.hankweave_dir)
        seen["memory"] = runtime.state

    outcome = project.run_controlled(skip_while_initializing, {"a": {"hang": True}})

    assert outcome.code == 0
    assert seen["report"].wal_skipped == 0
    assert seen["disk"].runs[0].codons == seen["memory"].runs[0].codons
    a = outcome.record("a")
    assert a.status == "skipped" and a.skipped_during == "running" and a.claude_session_id


@pytest.mark.parametrize(("signal_name", "exit_code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_mid_codon_fails_it_retriably_and_ends_the_run(project, signal_name, exit_code):
    project.write_hank([codon("a"), codon("b")])

    async def stop(runtime):
        await wait_for_status(runtime, "a", "running")
        runtime.commands.request_shutdown(signal_name)

    outcome = project.run_controlled(stop, {"a": {"hang": True}})

    assert outcome.code == exit_code
    assert outcome.statuses() == [("a", "failed")]
    reason = outcome.record("a").failure_reason
    assert reason.retriable and reason.message.startswith("Interrupted")
    assert outcome.state.runs[0].status == "cancelled"  # a person stopped it
    assert outcome.state.current_run_id is None


def test_a_stop_during_rig_setup_does_not_start_the_agent(project):
    project.write_hank([codon("a", rigSetup=[
        {"type": "command", "command": {"run": "sleep 0.2"}}]), codon("b")])

    async def stop_while_preparing(runtime):
        await wait_for_status(runtime, "a", "preparing")
        runtime.commands.request_shutdown("SIGINT")

    outcome = project.run_controlled(stop_while_preparing)

    assert outcome.code == 130
    assert outcome.statuses() == [("a", "failed")]
    a = outcome.record("a")
    assert a.failure_reason.message == "Interrupted: SIGINT" and a.failure_reason.retriable
    assert a.claude_log_path is None and outcome.of_type("codon.started") == []


def test_a_stop_while_the_agent_is_being_started_does_not_start_it(project, slow_disk):
    project.write_hank([codon("a"), codon("b")])

    async def stop_while_starting(runtime):
        # The stop lands during the write of the initializing transition.
        await wait_for_status(runtime, "a", "starting")
        runtime.commands.request_shutdown("SIGINT")

    outcome = project.run_controlled(stop_while_starting)

    assert outcome.code == 130
    assert outcome.statuses() == [("a", "failed")]
    assert outcome.record("a").failure_reason.message == "Interrupted: SIGINT"
    assert outcome.of_type("codon.started") == []


def test_a_stop_during_the_retry_wait_does_not_retry(project):
    project.write_hank([codon("a", onFailure="retry", retryConfig={"delayMs": 60_000}),
                        codon("b")])

    async def stop_while_waiting(runtime):
        await wait_for_status(runtime, "a", "failed")
        runtime.commands.request_shutdown("SIGTERM")

    # Within 30 s, not the 60 s wait (room for a loaded machine: CI runs two tox envs at once).
    outcome = project.run_controlled(stop_while_waiting, {"a": [OVERLOADED, {}]}, timeout=30)

    assert outcome.code == 143
    assert outcome.statuses() == [("a", "failed")]
    assert outcome.state.runs[0].status == "cancelled"


def test_autostart_off_waits_for_a_start_command(project):
    project.write_hank([codon("a"), codon("b")])
    idle = []

    async def start_each(runtime):
        for codon_id in ("a", "b"):
            runtime.commands.request_start()
            await wait_for_status(runtime, codon_id, "completed")
            idle.append(runtime.state.runs[0].status)
        runtime.commands.request_start()  # nothing is left: the run ends

    outcome = project.run_controlled(start_each, autostart=False)
    assert idle == ["running", "running"]
    assert outcome.code == 0
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]
    reasons = [d["reason"] for d in outcome.of_type("server.idle")]
    assert reasons == ["startup", "codon-completed", "codon-completed"]


# ----- the failure policy -----


def test_retry_after_a_retriable_error_runs_the_codon_again_in_the_same_run(project):
    project.write_hank([codon("a", onFailure="retry", retryConfig=RETRY_FAST), codon("b")])
    outcome = project.run({"a": [OVERLOADED, {}]})

    assert outcome.code == 0
    assert len(outcome.state.runs) == 1
    assert outcome.statuses() == [("a", "failed"), ("a", "completed"), ("b", "completed")]
    failed, completed = outcome.records("a")
    assert failed.failure_reason.retriable and failed.partial_cost > 0
    assert any(m.startswith("Retrying codon a") for m in outcome.infos())
    # The reported cost of the codon includes what the failed attempt spent.
    reported = next(d["cost"] for d in outcome.of_type("codon.completed")
                    if d["codonId"] == "a" and d["success"])
    assert reported == pytest.approx(failed.partial_cost + completed.final_cost)


def test_retry_stops_when_the_attempts_are_exhausted(project):
    project.write_hank([codon("a", onFailure="retry",
                              retryConfig={**RETRY_FAST, "maxAttempts": 2}), codon("b")])
    outcome = project.run({"a": OVERLOADED})

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "failed")] * 3  # the first attempt and two retries
    assert outcome.state.runs[0].status == "failed"


def test_retry_does_not_repeat_a_non_retriable_error(project):
    project.write_hank([codon("a", onFailure="retry", retryConfig=RETRY_FAST), codon("b")])
    outcome = project.run({"a": [{"result": "error", "errorText": "API Error: 401 unauthorized"},
                                 {}]})

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "failed")]
    assert outcome.record("a").failure_reason.retriable is False


def test_ignore_continues_with_the_next_codon(project):
    project.write_hank([codon("a", onFailure="ignore"), codon("b")])
    outcome = project.run({"a": OVERLOADED})

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "failed"), ("b", "completed")]
    completed = {d["codonId"]: d for d in outcome.of_type("codon.completed")}
    assert completed["a"]["failureIgnored"] is True
    assert "failureIgnored" not in completed["b"]
    assert outcome.state.runs[0].status == "completed"


def test_ignore_on_the_last_codon_completes_the_run_instead_of_hanging(project):
    project.write_hank([codon("a"), codon("b", onFailure="ignore")])
    outcome = project.run_controlled(_nothing, {"b": OVERLOADED}, timeout=10)

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "completed"), ("b", "failed")]
    assert outcome.state.runs[0].status == "completed"


def test_abort_with_a_retriable_error_in_headless_mode_fails_the_run(project):
    project.write_hank([codon("a"), codon("b")])
    outcome = project.run({"a": OVERLOADED})

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "failed")]
    assert outcome.record("a").failure_reason.retriable
    assert outcome.state.runs[0].status == "failed"


async def _nothing(runtime):
    return None


# ----- resuming -----


def test_a_stopped_run_resumes_and_finishes_without_repeating_work(project):
    project.write_hank([codon("a", checkpointedFiles=["**"]), codon("b"), codon("c")])

    async def stop_b(runtime):
        await wait_for_status(runtime, "b", "running")
        runtime.commands.request_shutdown("SIGINT")

    first = project.run_controlled(stop_b, {"a": {"writeFiles": {"a.md": "alpha"}},
                                            "b": {"hang": True}})
    assert first.code == 130

    second = project.run({"a": {"writeFiles": {"a.md": "alpha"}}})
    assert second.code == 0
    assert second.statuses() == [("b", "completed"), ("c", "completed")]
    assert len([r for r in second.records("a") if r.status == "completed"]) == 1
    assert (project.agent_root / "a.md").read_text() == "alpha"


def test_a_run_ceiling_counts_what_earlier_runs_spent(project):
    project.write_hank([codon("a"), codon("b"), codon("c")])
    unauthorized = {"result": "error", "errorText": "API Error: 401 unauthorized"}
    first = project.run({"a": {"cost": 0.03}, "b": unauthorized}, max_cost=0.05)
    assert first.code == 1

    second = project.run({"b": {"cost": 0.03}}, max_cost=0.05)
    assert second.code == 1  # $0.03 before + $0.03 now: nothing is left for c
    assert second.statuses() == [("b", "completed")]
    assert second.state.runs[0].status == "failed"


def test_an_attended_run_waits_after_a_retriable_failure_and_a_client_retries(project):
    project.write_hank([codon("a"), codon("b")])
    parked = []

    async def retry_when_parked(runtime):
        await wait_for_status(runtime, "a", "failed")
        while not runtime.commands.waiting_for_command:
            await asyncio.sleep(0.005)
        parked.append(True)
        runtime.commands.start_codon("a")

    outcome = project.run_controlled(
        retry_when_parked, {"a": [{"result": "error", "errorText": "API Error: 529 overloaded"},
                                  {"messages": 1}]},
        headless=False)
    assert parked == [True]
    assert outcome.code == 0
    assert outcome.statuses() == [("a", "failed"), ("a", "completed"), ("b", "completed")]
    idle = [d["message"] for d in outcome.of_type("server.idle")]
    assert any("retriable" in message and "ctl" in message for message in idle)


def test_an_unattended_run_ends_after_a_retriable_failure(project):
    project.write_hank([codon("a"), codon("b")])
    outcome = project.run({"a": {"result": "error", "errorText": "API Error: 529 overloaded"}})
    assert outcome.code == 1
    assert outcome.state.runs[0].status == "failed"


LONG_RIG = [{"type": "command", "command": {"run": "echo $$ > rig.pid; sleep 60; touch late"}}]


def rig_process_ended(project) -> bool:
    """The rig command's shell (and so its `sleep`) is gone (a zombie counts as gone) and never
    finished its work."""
    pid = int((project.agent_root / "rig.pid").read_text())
    deadline = time.monotonic() + 30  # only a failure waits it out
    while process_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_running(pid) and not (project.agent_root / "late").exists()


async def until_rig_runs(runtime, project) -> None:
    await wait_for_status(runtime, "a", "preparing")
    while not (project.agent_root / "rig.pid").exists():
        await asyncio.sleep(0.02)


def test_a_stop_during_a_long_rig_command_ends_it_at_once(project):
    project.write_hank([codon("a", rigSetup=LONG_RIG), codon("b")])

    async def stop_during_rig(runtime):
        await until_rig_runs(runtime, project)
        runtime.commands.request_shutdown("SIGINT")

    started = time.monotonic()
    outcome = project.run_controlled(stop_during_rig, timeout=30)

    assert time.monotonic() - started < 45  # not the command's 60 s (room for a loaded machine)
    assert outcome.code == 130
    assert outcome.statuses() == [("a", "failed")]
    assert outcome.record("a").failure_reason.message == "Interrupted: SIGINT"
    assert rig_process_ended(project)


def test_a_skip_during_rig_setup_skips_the_codon_and_runs_the_next(project):
    project.write_hank([codon("a", rigSetup=LONG_RIG), codon("b")])

    async def skip_during_rig(runtime):
        await until_rig_runs(runtime, project)
        assert runtime.commands.skip()

    outcome = project.run_controlled(skip_during_rig, timeout=30)

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "skipped"), ("b", "completed")]
    assert outcome.record("a").skipped_during == "preparing"
    assert rig_process_ended(project)


def test_a_force_stop_during_rig_setup_fails_the_codon_and_waits_for_a_command(project):
    project.write_hank([codon("a", rigSetup=LONG_RIG), codon("b")])

    async def force_stop_during_rig(runtime):
        await until_rig_runs(runtime, project)
        assert runtime.commands.force_stop("enough") == "a"
        while not runtime.commands.waiting_for_command:
            await asyncio.sleep(0.02)
        runtime.commands.request_shutdown("SIGTERM")

    outcome = project.run_controlled(force_stop_during_rig, timeout=30)

    assert outcome.statuses() == [("a", "failed")]
    assert outcome.record("a").failure_reason.message == "Force stopped: enough"
    assert rig_process_ended(project)
