"""The budget table of ``hankweave validate`` and ``hankweave inspect budget``: the limits
each plan entry gets, where they come from, and what the entries used."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hankweave.cli import cli
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry
from hankweave.testing import fake_harness
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon, loop

ONE_MESSAGE = 0.00011


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-ins and the fake harness only, no HANKWEAVE_* variable, no stray settings."""
    pm = make_plugin_manager(load_entrypoints=False, env={})
    pm.register(fake_harness)
    registry = Registry(pm)
    monkeypatch.setattr("hankweave.registry.get_registry", lambda: registry)
    for name in list(os.environ):
        if name.startswith("HANKWEAVE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HANKWEAVE_HOME", str(tmp_path / "managed"))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


@pytest.fixture
def project(tmp_path: Path):
    yield Project(tmp_path / "project")
    use_script(None)


def invoke(*args: str | Path) -> Result:
    return CliRunner(env={"COLUMNS": None}).invoke(cli, [*map(str, args)])


def budget_hank(project: Project) -> None:
    project.write_hank(
        [codon("a", budget={"maxTimeSeconds": 60}),
         loop("L", [codon("x", budget={"maxOutputTokens": 1000})],
              {"type": "iterationLimit", "limit": 2},
              budget={"maxTimeSeconds": 600, "onExceeded": "complete"}),
         codon("b"), codon("c", budget={"maxDollars": 0.5})],
        overrides={"budget": {"maxDollars": 10, "allocation": "proportional",
                              "shares": {"a": 0.25, "L": 0.5}, "onExceeded": "fail"}})


# ----- validate -----


def test_validate_json_has_the_resolved_budget_of_every_plan_entry(project):
    budget_hank(project)
    result = invoke("validate", project.hank_dir, project.data, "--max-time", "3600", "--json")

    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)["budgetTable"]
    assert table["ceiling"] == {"maxDollars": 10, "maxTimeSeconds": 3600,
                                "allocation": "proportional", "shares": {"a": 0.25, "L": 0.5},
                                "onExceeded": "fail"}
    assert table["entries"] == [
        {"codonId": "a", "maxDollars": 2.5, "dollarsSource": "proportional share (25% of $10.00)",
         "maxTimeSeconds": 60, "timeSource": "codon cap", "onExceeded": "fail",
         "onExceededSource": "hank"},
        {"codonId": "x#0", "loopId": "L", "maxDollars": 5,
         "dollarsSource": "shared pool of loop L", "maxTimeSeconds": 600,
         "timeSource": "loop L time left", "maxOutputTokens": 1000, "onExceeded": "complete",
         "onExceededSource": "loop L"},
        {"codonId": "b", "maxDollars": 2.5,
         "dollarsSource": "uniform split (1/1 of $2.50 unallocated)", "maxTimeSeconds": 3600,
         "timeSource": "run time left", "onExceeded": "fail", "onExceededSource": "hank"},
        {"codonId": "c", "maxDollars": 0.5, "dollarsSource": "codon cap",
         "maxTimeSeconds": 3600, "timeSource": "run time left", "onExceeded": "fail",
         "onExceededSource": "hank"},
    ]
    assert table["loops"] == [
        {"loopId": "L", "maxDollars": 5, "dollarsSource": "proportional share (50% of $10.00)",
         "maxTimeSeconds": 600, "timeSource": "loop cap", "onExceeded": "complete"}]


def test_validate_prints_the_budget_table(project):
    budget_hank(project)
    result = invoke("validate", project.hank_dir, project.data)

    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines()
            if line.split() and line.split()[0] in ("a", "x#0", "b", "c")}
    assert "$2.50 (proportional share (25% of $10.00))" in rows["a"]
    assert "60s (codon cap)" in rows["a"] and "fail (hank)" in rows["a"]
    assert "$5.00 (shared pool of loop L)" in rows["x#0"] and "1000" in rows["x#0"]
    assert "$2.50 (uniform split (1/1 of $2.50 unallocated))" in rows["b"]
    assert "$0.50 (codon cap)" in rows["c"]
    assert ("Loop L: dollars $5.00 (proportional share (50% of $10.00)), time 600s (loop cap)"
            in result.stdout)


def test_validate_lists_the_budgets_that_ask_among_what_waits_for_a_person(project):
    project.write_hank(
        [codon("a", budget={"maxDollars": 1, "onExceeded": "ask"}),
         loop("L", [codon("x")], {"type": "iterationLimit", "limit": 2},
              budget={"maxDollars": 2, "onExceeded": "ask"}), codon("b")],
        overrides={"budget": {"maxDollars": 10, "onExceeded": "ask"}})
    result = invoke("validate", project.hank_dir, project.data, "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["humanInTheLoop"] == ["hank: its budget ceiling asks",
                                        "loop L: its budget asks", "a: its budget asks"]
    on_exceeded = {e["codonId"]: e["onExceeded"] for e in report["budgetTable"]["entries"]}
    assert on_exceeded == {"a": "ask", "x#0": "ask", "b": "ask"}


def test_validate_says_when_nothing_is_limited(project):
    project.write_hank([codon("a")])
    result = invoke("validate", project.hank_dir, project.data)

    assert result.exit_code == 0, result.output
    assert "Budgets: no limits" in result.stdout
    entries = json.loads(invoke("validate", project.hank_dir, project.data, "--json").stdout)[
        "budgetTable"]["entries"]
    assert entries == [{"codonId": "a", "onExceeded": "complete", "onExceededSource": "default"}]


# ----- inspect budget -----


def finished_execution(project: Project) -> None:
    project.write_hank(
        [codon("a", budget={"maxDollars": 0.0002}), codon("b"), codon("c")],
        overrides={"budget": {"maxDollars": 0.001, "allocation": "proportional",
                              "shares": {"b": 0.5}}})
    project.run({"a": {"messages": 5}, "b": {"messages": 1}, "c": {"messages": 1}})


def test_inspect_budget_json_sets_each_entrys_limits_against_what_it_used(project):
    finished_execution(project)
    result = invoke("inspect", "budget", "-e", project.exec_dir, "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ceiling"] == {"maxDollars": 0.001, "allocation": "proportional",
                                 "shares": {"b": 0.5}}
    assert report["spentDollars"] == pytest.approx(4 * ONE_MESSAGE)
    a, b, c = report["entries"]
    assert (a["codonId"], a["status"], a["attempts"], a["limitsKind"]) == (
        "a", "exceeded", 1, "applied")
    assert a["limits"] == {"maxDollars": 0.0002, "dollarsSource": "codon cap",
                           "onExceeded": "complete", "onExceededSource": "default"}
    assert a["actual"]["dollars"] == pytest.approx(2 * ONE_MESSAGE)
    assert a["actual"]["outputTokens"] == 40
    assert a["budgetExceeded"] == {"currency": "cost", "limit": 0.0002,
                                   "used": pytest.approx(2 * ONE_MESSAGE)}
    assert b["limits"]["dollarsSource"] == "proportional share (50% of $0.001)"
    assert b["limits"]["maxDollars"] == pytest.approx(0.0005)
    assert c["limits"]["dollarsSource"] == "uniform split (1/1 of $0.0005 unallocated)"
    assert c["budgetExceeded"] is None


def test_inspect_budget_prints_limits_against_actuals(project):
    finished_execution(project)
    result = invoke("inspect", "budget", "-e", project.exec_dir)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Ceiling: dollars $0.001, time -, allocation proportional, shares b 50%" in out
    assert "Spent $0.00044 of $0.001" in out
    (a_row,) = [line for line in out.splitlines() if line.startswith("a ")]
    assert "exceeded" in a_row and "$0.00022 / $0.0002" in a_row and "codon cap" in a_row
    assert "cost $0.00022 >= $0.0002" in a_row


def test_inspect_budget_projects_the_entries_still_to_run(project):
    project.write_hank([codon("a"), codon("b"), codon("c")],
                       overrides={"budget": {"maxDollars": 0.0009, "allocation": "proportional"}})
    project.run({"a": {"messages": 1}, "b": {"result": "error"}})  # b fails: c never runs

    report = json.loads(invoke("inspect", "budget", "-e", project.exec_dir, "--json").stdout)
    c = report["entries"][2]
    assert (c["status"], c["limitsKind"], c["attempts"]) == ("pending", "projected", 0)
    # Its split is all that nobody else holds, but only what a and b left can be had.
    assert c["limits"]["maxDollars"] == pytest.approx(0.0009 - 2 * ONE_MESSAGE)
    assert c["limits"]["dollarsSource"] == "run remaining ($0.00068 of $0.0009)"
    text = invoke("inspect", "budget", "-e", project.exec_dir).stdout
    assert "* projected: the limit the entry would get if it started now" in text


def test_inspect_budget_of_a_missing_directory_is_a_clear_error(tmp_path):
    result = invoke("inspect", "budget", "-e", tmp_path / "nowhere")

    assert result.exit_code == 2
    assert "does not exist" in result.output
    assert "Traceback" not in result.output


def test_inspect_budget_of_a_corrupt_state_is_a_clear_error(tmp_path):
    state = tmp_path / "exec" / ".hankweave" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text("{not json")

    result = invoke("inspect", "budget", "-e", tmp_path / "exec")

    assert result.exit_code == 2
    assert "state.json" in result.output
    assert "Traceback" not in result.output



def test_inspect_budget_imports_no_heavy_library(tmp_path):
    from tests.test_lazy_imports import loaded_by

    example = Path(__file__).resolve().parents[1] / "examples" / "execution-demo"
    assert loaded_by("inspect", "budget", "-e", str(example), cwd=tmp_path) == ""
