"""A runtime killed with ``kill -9``: before the next start ``inspect`` shows the dead run as
crashed (and writes nothing); the next start journals one ``run.crashed`` event that names the
run, its in-flight codon and what happens next, before the new run starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from hankweave.faults import KILL_AT_ENV
from hankweave.processes import AGENT_MARKER_ENV, agent_marker
from integration.conftest import Project, codon

THREE = [codon("a"), codon("b"), codon("c")]


def kill_9_while_b_runs(project: Project) -> str:
    """Start the hank, SIGKILL the runtime while codon ``b`` runs; the killed run's id."""
    child = project.start()
    try:
        project.wait_for(lambda s: bool(s.runs) and any(
            c.codon_id == "b" and c.status == "running" for c in s.runs[0].codons))
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
    return project.state().runs[0].run_id


def files_of(hankweave_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(hankweave_dir)): p.read_bytes()
            for p in sorted(hankweave_dir.rglob("*")) if p.is_file()}


def crashed_events(project: Project) -> list[dict[str, Any]]:
    return [e for e in project.events() if e["type"] == "run.crashed"]


def run_started_seq(project: Project, run_id: str) -> int:
    return next(e["seq"] for e in project.events() if e["type"] == "state.transition"
                and e["data"]["transitionType"] == "RunStarted"
                and e["data"]["transition"]["data"]["runId"] == run_id)


def test_inspect_shows_a_killed_run_crashed_before_any_resume_and_writes_nothing(
        project: Project) -> None:
    project.write_hank(THREE)
    project.write_script({"b": [{"hang": True}, {}]})
    killed = kill_9_while_b_runs(project)
    hankweave_dir = project.exec_dir / ".hankweave"
    assert (hankweave_dir / "runtime.lock").exists()  # left by the dead runtime
    before = files_of(hankweave_dir)

    shown = project.hw("inspect", "thread", "-e", str(project.exec_dir), "--json")
    execution = project.hw("inspect", "execution", "-e", str(project.exec_dir), "--json")

    assert shown.returncode == 0, shown.stderr
    thread = json.loads(shown.stdout)
    newest = thread["codons"][0]
    assert (newest["codonId"], newest["runId"]) == ("b", killed)
    assert newest["runStatus"] == "crashed" and newest["status"] == "failed"
    assert {c["runStatus"] for c in thread["codons"]} == {"crashed"}
    assert thread["failed"] is True and thread["hasRunningCodon"] is False
    assert execution.returncode == 0, execution.stderr
    document = json.loads(execution.stdout)
    assert document["execution"]["status"] == "crashed"
    assert document["runs"][0]["status"] == "crashed"
    # Read-only: the state, its log and the dead runtime's lock are as the kill left them.
    assert files_of(hankweave_dir) == before
    assert project.state().runs[0].status == "running"


def test_inspect_shows_a_live_run_running(project: Project) -> None:
    project.write_hank(THREE)
    project.write_script({"b": {"hang": True}})
    child = project.start()
    try:
        project.wait_for(lambda s: bool(s.runs) and any(
            c.codon_id == "b" and c.status == "running" for c in s.runs[0].codons))
        shown = project.hw("inspect", "thread", "-e", str(project.exec_dir), "--json")
    finally:
        child.kill()
        child.wait(10)
    assert shown.returncode == 0, shown.stderr
    newest = json.loads(shown.stdout)["codons"][0]
    assert (newest["codonId"], newest["status"], newest["runStatus"]) == \
        ("b", "running", "running")


def test_the_resume_after_a_kill_mid_codon_journals_one_run_crashed_before_its_run(
        project: Project) -> None:
    project.write_hank(THREE)
    project.write_script({"b": [{"hang": True}, {}]})
    killed = kill_9_while_b_runs(project)
    assert crashed_events(project) == []
    # An agent process the dead run left running, as the Claude CLI outlives its host.
    agent = subprocess.Popen(["sleep", "600"], env={**os.environ,
                                                    AGENT_MARKER_ENV: agent_marker(killed, "b")})
    try:
        resumed = project.run()
    finally:
        agent.kill()
        agent.wait(10)

    assert resumed.returncode == 0, resumed.stderr
    state = project.state()
    new_run = state.runs[0].run_id
    assert [r.status for r in state.runs] == ["completed", "crashed"]
    [event] = crashed_events(project)
    data = event["data"]
    assert data["runId"] == killed
    assert (data["codonId"], data["codonStatus"]) == ("b", "running")
    assert (data["next"], data["afterCodonId"]) == ("rollback", "a")
    assert data["detectedAt"] == state.runs[1].end_time
    assert data["endedAgentPids"] == [agent.pid]
    assert agent.returncode == -signal.SIGTERM  # ended by the resume, not by the test
    assert event["seq"] < run_started_seq(project, new_run)
    # What the log shows is the event's own account, once; the journal command lists it.
    assert resumed.stderr.count(data["message"]) == 1
    # The ended agent is named once, in that message (not again by a log line).
    assert resumed.stderr.count(str(agent.pid)) == 1, resumed.stderr
    listed = project.hw("journal", "-e", str(project.exec_dir), "--type", "run.crashed")
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    assert f"{killed} next: rollback" in line and " b " in line


def test_a_kill_between_codons_says_the_new_run_continues_after_the_finished_one(
        project: Project) -> None:
    project.write_hank(THREE)
    project.env[KILL_AT_ENV] = "codon.recorded@1"  # a is recorded completed, b not yet started
    killed = project.run()
    assert killed.returncode == -9, killed.stderr
    killed_run = project.state().runs[0].run_id

    del project.env[KILL_AT_ENV]
    resumed = project.run()

    assert resumed.returncode == 0, resumed.stderr
    [event] = crashed_events(project)
    data = event["data"]
    assert data["runId"] == killed_run
    assert "codonId" not in data and "codonStatus" not in data
    assert (data["next"], data["afterCodonId"]) == ("continue", "a")
    assert data["endedAgentPids"] == []
    assert event["seq"] < run_started_seq(project, project.state().runs[0].run_id)
