"""Every table the command line prints fits the terminal (hankweave/cli/tables.py): at 80
columns the key columns stay whole and the others fold into a line under each row; ``--wide``
keeps every column.  The screens are text snapshots (tests/snapshots/), rendered from the state
a real run with the fake harness left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from hankweave.cli import cli
from hankweave.cli.tables import FitTable, TableColumn
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry
from hankweave.state.types import HankweaveState, Interruption
from hankweave.testing import fake_harness
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon, loop
from tests.snapshot import assert_fits, assert_snapshot, normalized
from tests.state_builders import Scenario, plan, write_state

WIDTHS = (80, 120)
TOO_LONG = ('API Error: 400 {"type":"error","error":{"type":"invalid_request_error",'
            '"message":"prompt is too long: 212345 tokens > 200000 maximum"}}')


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-ins and the fake harness only, no HANKWEAVE_* variable, no stray settings."""
    pm = make_plugin_manager(load_entrypoints=False, env={})
    pm.register(fake_harness)
    registry = Registry(pm)
    monkeypatch.setattr("hankweave.registry.get_registry", lambda: registry)
    for name in list(os.environ):
        if name.startswith("HANKWEAVE_") and name != "HANKWEAVE_UPDATE_SNAPSHOTS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HANKWEAVE_HOME", str(tmp_path / "managed"))
    monkeypatch.setenv("HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND", "git")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real execution: run 1 fails its second codon (a provider 400), run 2 resumes it and
    finishes, with a loop and a budget; nothing is current any more."""
    project = Project(tmp_path_factory.mktemp("tables") / "project")
    project.env["HANKWEAVE_USER"] = "ana"  # the runs' user, the same on every machine
    project.write_hank(
        [codon("survey"),
         codon("summarize-the-findings", budget={"maxDollars": 0.5}),
         loop("refine", [codon("polish")], {"type": "iterationLimit", "limit": 2})],
        overrides={"budget": {"maxDollars": 2}})
    try:
        project.run({"summarize-the-findings": {"result": "error", "errorText": TOO_LONG}})
        project.run({"summarize-the-findings": {"messages": 3}})
    finally:
        use_script(None)
    return project.exec_dir


def render(width: int, *args: str | Path) -> str:
    result = CliRunner(env={"COLUMNS": str(width)}).invoke(cli, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", ["state", "thread", "budget"])
def test_inspect_tables_fit_the_terminal(resumed: Path, command: str, width: int) -> None:
    text = render(width, "inspect", command, "-e", resumed)

    assert_fits(text, width)
    assert_snapshot(f"inspect-{command}-{width}", normalized(text, str(resumed)))


def test_at_80_columns_codons_statuses_and_costs_stay_whole(resumed: Path) -> None:
    text = render(80, "inspect", "state", "-e", resumed)

    for cell in ("summarize-the-findings", "completed", "failed", "$0.0001"):
        assert cell in text
    joined = " ".join(line.strip() for line in text.splitlines())
    assert "prompt is too long: 212345 tokens > 200000 maximum" in joined


def test_a_finished_execution_shows_no_current_run(resumed: Path) -> None:
    text = render(120, "inspect", "state", "-e", resumed)

    assert "(current" not in text
    assert "Total: 2 runs, 5 codon records, cost $0.0008" in text


def test_wide_keeps_every_column_whatever_the_width(resumed: Path) -> None:
    text = render(80, "inspect", "state", "--wide", "-e", resumed)

    # The first run's table: the one with a failure.
    header = [line for line in text.splitlines() if line.startswith("#")][-1]
    for column in ("Codon", "Status", "Cost", "In", "Out", "Started", "Ended", "Checkpoint",
                   "Failure"):
        assert f" {column} " in f"{header} "
    assert "…" not in text


def interruptions(exec_dir: Path) -> None:
    s = Scenario(plan("survey", "review"))
    s.start_run("r1").complete("r1", "survey").start_codon("r1", "review")
    state: HankweaveState = s.state.model_copy(update={"interruptions": [
        Interruption(id="int-1", run_id="r1", codon_id="survey", kind="question",
                     question="Which of the three data files is the source of truth for"
                              " the quarterly figures?",
                     options=["sales.csv", "ledger.csv", "forecast.csv"],
                     created_at="2030-01-01T00:00:00.000Z", status="answered",
                     answer="ledger.csv", answered_at="2030-01-01T00:01:00.000Z",
                     answered_by="cli:ana"),
        Interruption(id="int-2", run_id="r1", codon_id="review", kind="approval",
                     question="Delete the 14 draft reports under report/drafts?",
                     options=["approve", "reject"], gate="after",
                     created_at="2030-01-01T00:02:00.000Z",
                     deadline="2030-01-01T01:02:00.000Z", default_answer="reject"),
    ]})
    write_state(exec_dir, state)


@pytest.mark.parametrize("width", WIDTHS)
def test_inspect_interruptions_fit_the_terminal(tmp_path: Path, width: int) -> None:
    interruptions(tmp_path / "exec")
    text = render(width, "inspect", "interruptions", "-e", tmp_path / "exec")

    assert_fits(text, width)
    assert_snapshot(f"inspect-interruptions-{width}", normalized(text))


# ----- the helper -----


def draw(table: FitTable, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def test_columns_fold_in_priority_order_and_key_columns_never_do() -> None:
    table = FitTable([TableColumn("Id", key=True), TableColumn("Later", priority=2), TableColumn("Sooner", priority=1)])
    table.add_row("a-rather-long-identifier", "x" * 20, "y" * 20)

    narrow, middle, wide = draw(table, 30), draw(table, 55), draw(table, 80)

    assert "Later" not in narrow and "Sooner" not in narrow
    assert "later " + "x" * 20 in narrow and "sooner " + "y" * 20 in narrow
    assert "Sooner" in middle and "later " + "x" * 20 in middle
    assert "Later" in wide and "Sooner" in wide


def test_rows_drawn_apart_line_up_when_columns_fold() -> None:
    table = FitTable([TableColumn("Id", key=True), TableColumn("Cost", key=True, justify="right"),
                      TableColumn("Note", priority=0, wrap_at=10), TableColumn("Extra", priority=1)])
    table.add_row("a", "$0.0001", "short", "e" * 40)
    table.add_row("bbbbbbbb", "$12.5000", "a much longer note than the other", "-")

    text = draw(table, 50)

    separators = {line.index("│") for line in text.splitlines() if "│" in line}
    assert len(separators) == 1, text
    assert "extra " + "e" * 40 in " ".join(text.split())
    assert_fits(text, 50)


def test_a_column_with_nothing_in_it_is_not_drawn() -> None:
    table = FitTable([TableColumn("Id", key=True), TableColumn("Failure", wrap_at=10)])
    table.add_row("a", "")

    assert "Failure" not in draw(table, 80)


def test_narrower_than_the_key_columns_the_widest_wraps_and_the_cost_stays_whole() -> None:
    table = FitTable([TableColumn("Execution", key=True), TableColumn("Status", key=True),
                      TableColumn("Cost", key=True, justify="right")])
    table.add_row("/root/.hankweave-executions/1796472884302-vcic-12f908", "running",
                  "$0.0123")

    text = draw(table, 40)

    assert "running" in text and "$0.0123" in text
    first_column = "".join(line.split("│")[0].strip() for line in text.splitlines()[2:])
    assert first_column == "/root/.hankweave-executions/1796472884302-vcic-12f908"
    assert_fits(text, 40)
