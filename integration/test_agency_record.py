"""Agency's execution record through the real CLI (issue 36, item 8): who ran each run, the
statuses a person's stop and a time ceiling leave (``cancelled``, ``timeout``), the
``resuming`` start of a run that continues one, and the stored result."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

from hankweave.events.reading import read_transition
from hankweave.state.reducer import apply_transition
from hankweave.state.types import HankweaveState
from integration.conftest import Project, codon


def run_started(project: Project) -> list[dict[str, Any]]:
    return [e["data"]["transition"]["data"] for e in project.events()
            if e["type"] == "state.transition"
            and e["data"]["transitionType"] == "RunStarted"]


def folded(project: Project) -> Iterator[tuple[str, HankweaveState]]:
    """Each transition of the journal with the state after it, as the runtime wrote them."""
    state = HankweaveState(runs=[], current_run_id=None, execution_plan=[])
    for event in project.events():
        if event["type"] != "state.transition":
            continue
        transition = read_transition(event["data"]["transition"], at=event["timestamp"])
        if transition is not None:
            state = apply_transition(state, transition)
            yield transition.type, state


def document(project: Project) -> dict[str, Any]:
    shown = project.hw("inspect", "execution", "-e", str(project.exec_dir), "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_each_run_records_who_started_it(project: Project) -> None:
    project.write_hank([codon("a"), codon("b")])
    project.write_script({"b": {"result": "error", "errorText": "API Error: 500 internal"}})
    first = project.run("--user", "ana")
    project.write_script({})
    project.env["HANKWEAVE_USER"] = "bo"
    resumed = project.run()

    assert (first.returncode, resumed.returncode) == (1, 0), resumed.stderr
    assert [run.user for run in project.state().runs] == ["bo", "ana"]
    shown = document(project)
    assert shown["execution"]["user"] == "ana"
    assert [run["user"] for run in shown["runs"]] == ["bo", "ana"]
    human = project.hw("inspect", "execution", "-e", str(project.exec_dir)).stdout
    assert "started by ana" in human and "by bo" in human


def test_ctrl_c_leaves_the_run_cancelled_and_the_resume_is_resuming_until_its_codon(
        project: Project) -> None:
    project.write_hank([codon("a"), codon("b")])
    project.write_script({"b": {"hang": True}})
    process = project.start()
    project.wait_for(lambda s: any(c.codon_id == "b" and c.status == "running"
                                   for r in s.runs for c in r.codons))
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert project.state().runs[0].status == "cancelled"

    project.write_script({})
    resumed = project.run()

    assert resumed.returncode == 0, resumed.stderr
    runs = project.state().runs
    assert [run.status for run in runs] == ["completed", "cancelled"]
    assert [start.get("resuming", False) for start in run_started(project)] == [False, True]
    # Folding the journal: the second run is resuming from its start to its first codon.
    seen = [(kind, state.runs[0].status) for kind, state in folded(project)
            if state.runs and state.runs[0].run_id == runs[0].run_id]
    assert seen[0] == ("RunStarted", "resuming")
    assert seen[1][0] == "CodonStarted" and seen[1][1] == "running"


def test_a_run_time_ceiling_leaves_the_run_timeout_and_it_resumes(project: Project) -> None:
    project.write_hank([codon("a"), codon("b")])
    project.write_script({"a": {"hang": True}})
    stopped = project.run("--max-time", "1")

    assert stopped.returncode == 1, stopped.stderr
    assert project.state().runs[0].status == "timeout"
    assert document(project)["execution"]["status"] == "timeout"

    project.write_script({})
    resumed = project.run("--max-time", "600")
    assert resumed.returncode == 0, resumed.stderr
    assert project.state().runs[0].status == "completed"


def test_the_execution_stores_its_result(project: Project) -> None:
    project.write_hank([codon("a"), codon("b", outputFiles=[{"copy": ["report.md", "out/*"]}])])
    project.write_script({"b": {"writeFiles": {"report.md": "# Report\n", "out/n.txt": "42\n"}}})
    done = project.run("--user", "ana")

    assert done.returncode == 0, done.stderr
    stored = json.loads((project.exec_dir / ".hankweave" / "result.json").read_text())
    assert stored["status"] == "completed" and stored["user"] == "ana"
    assert stored["codons"] == {"completed": 2, "failed": 0, "skipped": 0}
    assert [(o["path"], o["bytes"]) for o in stored["outputs"]] == [("out/n.txt", 3),
                                                                     ("report.md", 9)]
    assert stored["outputs"][1]["sha256"] == (
        "497b7725a00101d6cf82489ef502fb0918962b10aaa7279962ab5ec3edc62533")
    assert stored["finalText"] == "Done."
    assert stored["cost"] > 0 and stored["inputTokens"] > 0 and stored["failure"] is None
    assert document(project)["execution"]["result"] == stored
