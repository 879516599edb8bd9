"""Resuming the attempt a person interrupted keeps its work: real ``hankweave`` processes
(FakeHarness agents, git checkpoints) that stop for a person, ``hankweave answer``, and the
pasted ``hankweave run -e DIR``.  The rig setup ran once, for the attempt; the resume never
runs it again, so the file the agent wrote before it stopped is byte-identical afterwards, in
``agentRoot`` and in the codon's completion checkpoint (docs/human-in-the-loop.md)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from hankweave.exitcodes import EXIT_INTERRUPTED
from hankweave.registry import get_registry
from integration.conftest import Project, codon

TEMPLATE = "# Report\n\n(the template)\n"
WORK = "# Report\n\nWhat the agent wrote before it stopped.\n"
REPORT = "report/report.md"


@pytest.fixture
def reporting(project: Project) -> Project:
    """Codon ``draft`` whose rig copies ``templates/report`` to ``report/``, then ``ship``."""
    template = project.hank_dir / "templates" / "report"
    template.mkdir(parents=True)
    (template / "report.md").write_text(TEMPLATE)
    return project


def rig(**fields: Any) -> dict[str, Any]:
    return codon("draft", checkpointedFiles=["**"], rigSetup=[
        {"type": "copy", "copy": {"from": "templates/report", "to": "report"}}], **fields)


def answer(project: Project, *args: str) -> None:
    answered = project.hw("answer", "-e", str(project.exec_dir), *args)
    assert answered.returncode == 0, answered.stderr


def pending_id(project: Project) -> str:
    [item] = [item for item in project.state().interruptions if item.status == "pending"]
    return item.id


def rigs_run(project: Project) -> int:
    return sum(1 for event in project.events() if event["type"] == "rig.setup.completed")


def in_completion_checkpoint(project: Project, tmp_path: Path, codon_id: str) -> bytes:
    """The report's bytes in the newest completed record of ``codon_id``'s end checkpoint."""
    state = project.state()
    [record] = [c for run in state.runs for c in run.codons
                if c.codon_id == codon_id and c.status == "completed"]
    store = get_registry().checkpoint_backend("git")(project.exec_dir)
    try:
        target = tmp_path / f"checkpoint-{codon_id}"
        store.materialize(record.completion_checkpoint, target)
    finally:
        store.close()
    return (target / REPORT).read_bytes()


def assert_work_kept(project: Project, tmp_path: Path) -> None:
    assert (project.exec_dir / "agentRoot" / REPORT).read_bytes() == WORK.encode()
    assert in_completion_checkpoint(project, tmp_path, "draft") == WORK.encode()
    assert rigs_run(project) == 1


def resume(project: Project) -> None:
    resumed = project.hw("run", "-e", str(project.exec_dir), "--headless")
    assert resumed.returncode == 0, resumed.stderr
    newest = project.state().runs[0].codons
    assert [(c.codon_id, c.status) for c in newest][-1] == ("ship", "completed")


def test_an_answered_question_resumes_without_running_the_rig_again(reporting, tmp_path):
    reporting.write_hank([rig(), codon("ship")])
    # The first harness call writes over the template and asks; the resumed one only finishes.
    reporting.write_script({"draft": [{"writeFiles": {REPORT: WORK}, "askHuman": "Ship it?"},
                                      {"messages": 1}]})
    asked = reporting.run()
    assert asked.returncode == EXIT_INTERRUPTED, asked.stderr

    answer(reporting, pending_id(reporting), "yes")
    resume(reporting)
    assert_work_kept(reporting, tmp_path)


def test_an_approved_held_call_resumes_without_running_the_rig_again(reporting, tmp_path):
    reporting.write_hank([rig(toolApproval=[{"tool": "Bash"}]), codon("ship")])
    reporting.write_script({"draft": [
        {"writeFiles": {REPORT: WORK}, "tools": [{"name": "Bash", "input": {"command": "make"}}]},
        {"messages": 1}]})
    held = reporting.run()
    assert held.returncode == EXIT_INTERRUPTED, held.stderr

    answer(reporting, pending_id(reporting), "--approve")
    resume(reporting)
    assert_work_kept(reporting, tmp_path)


def test_an_approved_result_goes_on_without_touching_the_work(reporting, tmp_path):
    reporting.write_hank([rig(approval="after"), codon("ship")])
    reporting.write_script({"draft": {"writeFiles": {REPORT: WORK}}})
    gated = reporting.run()
    assert gated.returncode == EXIT_INTERRUPTED, gated.stderr

    answer(reporting, pending_id(reporting), "--approve")
    resume(reporting)
    assert_work_kept(reporting, tmp_path)


def test_a_runtime_killed_while_it_waits_resumes_the_same_attempt(reporting, tmp_path):
    reporting.write_hank([rig(), codon("ship")])
    reporting.write_script({"draft": [{"writeFiles": {REPORT: WORK}, "askHuman": "Ship it?"},
                                      {"messages": 1}]})
    waiting = reporting.start("--wait-for-answers")
    try:
        reporting.wait_for(lambda state: any(item.status == "pending"
                                             for item in state.interruptions))
        os.kill(waiting.pid, signal.SIGKILL)
        waiting.wait(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
        waiting.communicate()

    answer(reporting, pending_id(reporting), "yes")
    resume(reporting)
    assert_work_kept(reporting, tmp_path)
    # The resume carried on the interrupted attempt's session (nothing asked twice).
    state = reporting.state()
    [item] = state.interruptions
    assert item.status == "answered"


def test_the_resumed_attempt_is_told_the_answer_once(reporting):
    """What the resumed agent got: the recorded answer as its question's result, not a fresh
    start from the codon's prompt on a workspace reset by the rig."""
    reporting.write_hank([rig(), codon("ship")])
    reporting.write_script({"draft": [{"writeFiles": {REPORT: WORK}, "askHuman": "Ship it?"},
                                      {"askHuman": "Ship it?"}]})
    assert reporting.run().returncode == EXIT_INTERRUPTED
    answer(reporting, pending_id(reporting), "yes")
    resume(reporting)
    record = reporting.state().runs[0].codons[0]
    log = reporting.exec_dir / record.claude_log_path
    results = [block for line in log.read_text().splitlines()
               for record_ in [json.loads(line)] if record_["type"] == "user"
               for block in record_["message"]["content"]]
    assert [block["content"] for block in results] == ["yes"]
    assert (reporting.exec_dir / "agentRoot" / REPORT).read_text() == WORK
