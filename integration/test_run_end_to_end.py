"""``hankweave run`` in real processes: FakeHarness agents and the git checkpoint backend."""

from __future__ import annotations

import os
import signal
import subprocess

from integration.conftest import codon, records

THREE = [codon("a", checkpointedFiles=["**"]), codon("b"), codon("c")]


def test_three_codons_run_to_completion(project):
    project.write_hank(THREE)
    project.write_script({"a": {"messages": 2, "writeFiles": {"a.md": "alpha"}, "cost": 0.02},
                          "b": {"writeFiles": {"b.md": "beta"}}, "c": {"messages": 3}})
    result = project.run()
    assert result.returncode == 0, result.stderr
    state = project.state()
    assert [r.status for r in state.runs] == ["completed"]
    run = state.runs[0]
    assert [(c.codon_id, c.status) for c in run.codons] == [
        ("a", "completed"), ("b", "completed"), ("c", "completed")]
    assert all(len(c.completion_checkpoint) == 40 for c in run.codons)
    assert run.codons[0].final_cost == 0.02 and run.codons[0].assistant_message_count == 3
    assert (project.exec_dir / "agentRoot" / "b.md").read_text() == "beta"
    log = project.exec_dir / run.codons[0].claude_log_path
    kinds = [line.split('"type":"', 1)[1].split('"', 1)[0] for line in log.read_text().splitlines()]
    assert kinds[0] == "system" and kinds[-1] == "result" and "assistant" in kinds

    events = project.events()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types.count("codon.started") == 3 and types.count("codon.completed") == 3
    assert "state.transition" in types and "token.usage" in types

    branches = subprocess.run(
        ["git", f"--git-dir={project.exec_dir}/.hankweave/checkpoints/.hankweavecheckpoints",
         "for-each-ref", "--format=%(refname:short)", "refs/heads"],
        capture_output=True, text=True, check=True).stdout.split()
    assert f"run-{run.run_id}" in branches


def test_a_loop_runs_its_iterations(project):
    project.write_hank([codon("setup"), {
        "type": "loop", "id": "L", "name": "Loop",
        "terminateOn": {"type": "iterationLimit", "limit": 3},
        "codons": [codon("work", onFailure="retry")]}])
    result = project.run()
    assert result.returncode == 0, result.stderr
    state = project.state()
    assert [c.codon_id for c in state.runs[0].codons] == ["setup", "work#0", "work#1", "work#2"]
    assert [e.codon_id for e in state.execution_plan] == ["setup", "work#0", "work#1", "work#2"]
    loops = [e["data"] for e in project.events() if e["type"] == "loop.iteration.completed"]
    assert [(d["iteration"], d["isFinal"]) for d in loops] == [(0, False), (1, False), (2, True)]


def test_rig_setup_copies_and_runs_commands(project):
    (project.hank_dir / "templates").mkdir()
    (project.hank_dir / "templates" / "seed.txt").write_text("seeded")
    project.write_hank([codon("a", checkpointedFiles=["**"], rigSetup=[
        {"type": "copy", "copy": {"from": "templates", "to": "src"}},
        {"type": "command", "command": {"run": "cat seed.txt > copied.txt",
                                        "workingDirectory": "lastCopied"}},
        {"type": "command", "command": {"run": "echo made > made.txt"}}])])
    result = project.run()
    assert result.returncode == 0, result.stderr
    work = project.exec_dir / "agentRoot"
    assert (work / "src" / "seed.txt").read_text() == "seeded"
    assert (work / "src" / "copied.txt").read_text() == "seeded"
    assert (work / "made.txt").read_text().strip() == "made"
    record = project.state().runs[0].codons[0]
    assert record.rig_setup_checkpoint and record.rig_setup_checkpoint != \
        record.completion_checkpoint


def test_a_failing_rig_command_fails_the_codon(project):
    project.write_hank([codon("a", rigSetup=[
        {"type": "command", "command": {"run": "exit 3"}}])])
    result = project.run()
    assert result.returncode == 1
    failed = project.state().runs[0].codons[0]
    assert failed.status == "failed" and failed.failed_during == "preparing"
    assert "Rig setup failed" in failed.failure_reason.message


def test_allow_failure_lets_the_rig_continue(project):
    project.write_hank([codon("a", rigSetup=[
        {"type": "command", "command": {"run": "exit 3"}, "allowFailure": True},
        {"type": "command", "command": {"run": "echo ok > after.txt"}}])])
    result = project.run()
    assert result.returncode == 0, result.stderr
    assert (project.exec_dir / "agentRoot" / "after.txt").exists()
    failures = [e for e in project.events() if e["type"] == "rig.setup.failed"]
    assert failures and failures[0]["data"]["ignored"] is True


def test_continue_previous_resumes_the_previous_session(project):
    project.write_hank([codon("a"), codon("b", continuationMode="continue-previous")])
    project.write_script({"a": {"sessionId": "session-of-a"}})
    result = project.run()
    assert result.returncode == 0, result.stderr
    b = project.state().runs[0].codons[1]
    assert b.previous_session_id == "session-of-a"
    started = [e["data"] for e in project.events() if e["type"] == "codon.started"]
    assert started[1]["previousSessionId"] == "session-of-a"


def test_a_failed_codon_exits_1_and_the_next_start_resumes_after_the_last_success(project):
    project.write_hank(THREE)
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}},
                          "b": [{"result": "error", "errorText": "API Error: 401 unauthorized",
                                 "writeFiles": {"junk.md": "half done"}},
                                {"writeFiles": {"b.md": "beta"}}]})
    first = project.run()
    assert first.returncode == 1
    state = project.state()
    assert state.runs[0].status == "failed"
    assert state.runs[0].codons[-1].failure_reason.type == "api-error"

    second = project.run()
    assert second.returncode == 0, second.stderr
    state = project.state()
    latest = state.runs[0]
    assert latest.starting_conditions.type == "continuation"
    assert latest.starting_conditions.reason == "rollback"
    assert latest.starting_conditions.source.after_codon == "a"
    assert [c.codon_id for c in latest.codons] == ["b", "c"]
    assert len(records(state, "a", "completed")) == 1
    assert not (project.exec_dir / "agentRoot" / "junk.md").exists()


def test_kill_9_mid_codon_then_resume_completes_without_repeating_work(project):
    project.write_hank(THREE)
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}},
                          "b": [{"hang": True, "messages": 2}, {"writeFiles": {"b.md": "b"}}]})
    child = project.start()
    project.wait_for(lambda s: bool(s.runs) and any(
        c.codon_id == "b" and c.status == "running" for c in s.runs[0].codons))
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)

    result = project.run()
    assert result.returncode == 0, result.stderr
    state = project.state()
    assert [r.status for r in state.runs] == ["completed", "crashed"]
    crashed_b = state.runs[1].codons[-1]
    assert crashed_b.status == "failed" and crashed_b.failure_reason.message == "Server crashed"
    for codon_id in ("a", "b", "c"):
        assert len(records(state, codon_id, "completed")) == 1, codon_id
    thread = project.hw("inspect", "thread", "-e", str(project.exec_dir), "--json")
    assert thread.returncode == 0 and '"nextCodonId": null' in thread.stdout


def test_ctrl_c_stops_cleanly_with_130_and_leaves_a_resumable_state(project):
    project.write_hank(THREE)
    project.write_script({"b": [{"hang": True}, {}]})
    child = project.start()
    project.wait_for(lambda s: bool(s.runs) and any(
        c.codon_id == "b" and c.status == "running" for c in s.runs[0].codons))
    child.send_signal(signal.SIGINT)
    assert child.wait(30) == 130
    state = project.state()
    assert state.runs[0].status == "cancelled" and state.current_run_id is None
    assert state.runs[0].codons[-1].status == "failed"
    assert not (project.exec_dir / ".hankweave" / "runtime.lock").exists()
    result = project.run()
    assert result.returncode == 0, result.stderr
    assert len(records(project.state(), "a", "completed")) == 1


def test_a_second_run_on_a_live_execution_is_refused(project):
    project.write_hank(THREE)
    project.write_script({"a": {"hang": True}})
    child = project.start()
    try:
        project.wait_for(lambda s: bool(s.runs) and bool(s.runs[0].codons))
        second = project.run()
        assert second.returncode == 2
        assert f"pid {child.pid}" in second.stderr and "Traceback" not in second.stderr
    finally:
        child.kill()
        child.wait(10)


def test_rerunning_a_finished_execution_has_nothing_to_do(project):
    project.write_hank(THREE)
    assert project.run().returncode == 0
    again = project.run()
    assert again.returncode == 0
    assert "Nothing to do" in again.stderr
    assert len(project.state().runs) == 1


def test_changed_data_needs_force(project):
    project.write_hank(THREE)
    assert project.run().returncode == 0
    (project.data / "new.txt").write_text("more data")
    refused = project.run()
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_rollback_command_restores_a_codon_and_the_next_run_continues_after_it(project):
    project.write_hank([codon("a", checkpointedFiles=["**"]), codon("b"), codon("c")])
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}},
                          "b": {"writeFiles": {"b.md": "beta"}}})
    assert project.run().returncode == 0
    rolled = project.hw("rollback", "-e", str(project.exec_dir), "--to", "a")
    assert rolled.returncode == 0, rolled.stderr
    assert not (project.exec_dir / "agentRoot" / "b.md").exists()
    assert (project.exec_dir / "agentRoot" / "a.md").read_text() == "alpha"
    result = project.run()
    assert result.returncode == 0, result.stderr
    latest = project.state().runs[0]
    assert [c.codon_id for c in latest.codons] == ["b", "c"]
