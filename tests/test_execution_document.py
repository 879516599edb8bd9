"""``hankweave inspect execution``: one nested, versioned document of an execution."""

from __future__ import annotations

import json
from functools import reduce

import jsonschema
from click.testing import CliRunner

from hankweave.cli import cli
from hankweave.execution.document import (
    DOCUMENT_VERSION,
    document_json_schema,
    execution_document,
)
from hankweave.state.reducer import apply_transition
from hankweave.state.store import StateStore
from hankweave.state.types import HankweaveState
from tests.runtime_harness import Project, codon
from tests.test_interruptions import created, interruption
from tests.transition_builders import lifecycle_to, moved, run_interrupted, run_started


def test_a_finished_run_is_one_document_that_fits_its_schema(tmp_path) -> None:
    project = Project(tmp_path)
    project.write_hank([codon("a"), codon("b", onFailure="retry",
                                          retryConfig={"maxAttempts": 2, "delayMs": 0})])
    outcome = project.run({"a": {"messages": 1, "cost": 0.25},
                           "b": [{"result": "error", "errorText": "API Error: 529 overloaded"},
                                 {"messages": 1, "cost": 0.5}]})
    assert outcome.code == 0

    done = CliRunner().invoke(cli, ["inspect", "execution", "-e", str(project.exec_dir),
                                    "--json"])

    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    jsonschema.Draft202012Validator(document_json_schema()).validate(document)
    assert document["documentVersion"] == DOCUMENT_VERSION
    execution = document["execution"]
    assert (execution["status"], execution["finishedCodons"]) == ("completed", 2)
    assert execution["hankPath"] == str(project.hank_dir / "hank.json")
    assert execution["totalCost"] >= 0.75
    (run,) = document["runs"]
    assert [(c["codonId"], c["status"], c["attempt"]) for c in run["codons"]] == [
        ("a", "completed", 1), ("b", "failed", 1), ("b", "completed", 2)]
    assert "API Error: 529 overloaded" in run["codons"][1]["failure"]
    assert all(c["checkpoints"] for c in run["codons"] if c["status"] == "completed")
    assert [(c["codonId"], c["status"]) for c in document["thread"]["codons"]] == [
        ("a", "completed"), ("b", "failed"), ("b", "completed")]  # oldest first
    assert document["thread"]["nextCodonId"] is None
    assert document["interruptions"] == []


WAITING = [run_started(), *lifecycle_to("a", "running"), created(interruption()),
           moved("a", "running", "failed"), run_interrupted()]
"""A run that ended waiting for a person."""


def test_a_pending_interruption_makes_the_execution_interrupted() -> None:
    state = reduce(apply_transition, WAITING, HankweaveState())

    document = execution_document(state, path="/x", hank_path=None, data_path=None)

    assert document.execution.status == "interrupted"
    assert document.execution.pending_interruptions == 1
    (record,) = document.interruptions
    assert (record["id"], record["status"], record["options"]) == (
        "int-1-aaaaa", "pending", ["postgres", "sqlite"])
    jsonschema.Draft202012Validator(document_json_schema()).validate(
        document.model_dump(mode="json"))


def test_the_human_view_and_the_schema(tmp_path) -> None:
    hankweave_dir = tmp_path / "exec" / ".hankweave"
    store = StateStore.open(hankweave_dir)
    for transition in WAITING:
        store.transition_sync(transition)
    store.close_sync()

    human = CliRunner().invoke(cli, ["inspect", "execution", "-e", str(tmp_path / "exec")])
    assert human.exit_code == 0, human.output
    assert ": interrupted, cost $0.0000" in human.output
    assert "1 interruption(s) waiting: hankweave inspect interruptions" in human.output
    schema = json.loads(CliRunner().invoke(cli, ["inspect", "execution", "-e", "unused",
                                                 "--schema"]).output)
    assert schema["$id"].endswith(f"execution-document-v{DOCUMENT_VERSION}.json")
    assert set(schema["required"]) == {"execution", "thread", "runs", "interruptions"}
