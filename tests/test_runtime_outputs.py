"""The runtime in-process: what a run leaves behind and what it tells observers.

Output copies, archives, the event stream, and the progress displays fed from it.
"""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from hankweave.cli.progress import HeadlessLog, LiveView
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon, wait_for_status


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


# ----- outputs and archives -----


def test_output_files_are_copied_to_the_output_directory_after_success(project):
    project.write_hank([codon("a", outputFiles=[{"copy": ["report.md", "notes/*.txt"]}])])
    outcome = project.run({"a": {"writeFiles": {"report.md": "# Report", "notes/x.txt": "x",
                                                "scratch.md": "not copied"}}},
                          output=str(project.output_dir))

    assert outcome.code == 0
    assert (project.output_dir / "report.md").read_text() == "# Report"
    assert (project.output_dir / "notes" / "x.txt").read_text() == "x"
    assert not (project.output_dir / "scratch.md").exists()


def test_output_files_are_not_copied_after_a_failure(project):
    project.write_hank([codon("a", outputFiles=[{"copy": ["report.md"]}])])
    outcome = project.run({"a": {"writeFiles": {"report.md": "half"}, "result": "error"}},
                          output=str(project.output_dir))

    assert outcome.code == 1
    assert not (project.output_dir / "report.md").exists()


def test_a_failing_output_copy_fails_the_run(project):
    project.write_hank([codon("a", outputFiles=[{
        "copy": ["report.md"],
        "beforeCopy": [{"type": "command", "command": {"run": "exit 4"}}]}]), codon("b")])
    outcome = project.run({"a": {"writeFiles": {"report.md": "# Report"}}},
                          output=str(project.output_dir))

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "completed")]
    assert outcome.state.runs[0].status == "failed"
    errors = [d["message"] for d in outcome.of_type("error")]
    assert any("Copy group" in m for m in errors)


def test_archive_on_success_moves_files_into_rig_archive_and_records_them(project):
    project.write_hank([codon("a", checkpointedFiles=["**"], archiveOnSuccess=["drafts/*.md"])])
    outcome = project.run({"a": {"writeFiles": {"drafts/one.md": "1", "final.md": "f"}}})

    assert outcome.code == 0
    assert not (project.agent_root / "drafts" / "one.md").exists()
    assert (project.agent_root / "final.md").exists()
    assert (project.exec_dir / "rigArchive" / "a" / "drafts" / "one.md").read_text() == "1"
    manifest = json.loads((project.hankweave_dir / "archive-manifest.json").read_text())
    assert manifest["entries"] == [{
        "sourcePath": "drafts/one.md", "archivePath": "rigArchive/a/drafts/one.md",
        "codonId": "a", "checkpointSha": outcome.record("a").completion_checkpoint,
        "timestamp": manifest["entries"][0]["timestamp"]}]
    assert outcome.of_type("archive.completed") == [
        {"codonId": "a", "archivedPaths": ["drafts/one.md"]}]


# ----- the event stream -----


def test_journaled_events_are_numbered_consecutively(project):
    project.write_hank([codon("a"), codon("b")])
    outcome = project.run({"a": {"messages": 2}})

    journal = project.journal()
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    assert [e["seq"] for e in outcome.events] == [e["seq"] for e in journal]


def test_state_transition_events_carry_the_resulting_state(project):
    project.write_hank([codon("a", budget=None)])
    outcome = project.run({"a": {"cost": 0.5}})

    transitions = outcome.of_type("state.transition")
    assert transitions and all("resultingState" in d for d in transitions)
    last = transitions[-1]
    assert last["transitionType"] == "RunCompleted"
    assert last["resultingState"]["totalCost"] == 0.5
    assert last["resultingState"]["currentRunId"] is None


def test_codon_started_follows_the_running_transition(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"sessionId": "s-1"}})

    kinds = [(e["type"], e["data"].get("transition", {}).get("data", {}).get("to"))
             for e in outcome.events]
    running = kinds.index(("state.transition", "running"))
    started = kinds.index(("codon.started", None))
    assert started == running + 1
    assert outcome.of_type("codon.started")[0]["sessionId"] == "s-1"


def test_token_usage_is_reported_per_message_and_at_the_end(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"messages": 2, "cost": 0.25}})

    usage = outcome.of_type("token.usage")
    assert len(usage) == 3
    assert [u["outputTokens"] for u in usage] == [20, 20, 40]
    assert usage[0]["totalCost"] == pytest.approx(0.00011)
    assert usage[-1]["totalCost"] == 0.25
    assert outcome.record("a").final_cost == 0.25


# ----- progress displays -----


def _mixed_run(project):
    project.write_hank([codon("alpha"), codon("beta"), codon("gamma", onFailure="ignore")])

    async def skip_beta(runtime):
        await wait_for_status(runtime, "beta", "running")
        runtime.commands.skip()

    return project.run_controlled(skip_beta, {"beta": {"hang": True},
                                              "gamma": {"result": "error"}})


def test_the_live_view_lists_each_finished_codon_with_its_checkpoint(project):
    outcome = _mixed_run(project)
    console = Console(record=True, file=io.StringIO(), width=120, force_terminal=False)
    view = LiveView(console)
    with view:
        for event in outcome.events:
            view(event)
    screen = console.export_text()

    for codon_id, status in (("alpha", "completed"), ("beta", "skipped"), ("gamma", "failed")):
        record = outcome.record(codon_id)
        sha = (getattr(record, "completion_checkpoint", None)
               or getattr(record, "skip_checkpoint", None)
               or getattr(record, "error_checkpoint", None))
        line = next(line for line in screen.splitlines() if f"{codon_id}  " in line)
        assert status in line and f"checkpoint {sha[:8]}" in line


@pytest.mark.parametrize("show_costs", [True, False])
def test_the_live_view_shows_costs_only_when_show_costs_is_on(project, show_costs):
    from hankweave.config.settings import Settings

    outcome = _mixed_run(project)
    console = Console(record=True, file=io.StringIO(), width=120, force_terminal=False)
    view = LiveView(console)
    view.configure(Settings(show_costs=show_costs))
    with view:
        for event in outcome.events:
            view(event)
        console.print(view.panel())  # the panel's totals line, as the terminal shows it

    screen = console.export_text()
    assert ("$" in screen) is show_costs
    assert "alpha  completed" in screen


def test_the_headless_log_reports_starts_and_ends(project):
    outcome = _mixed_run(project)
    out = io.StringIO()
    log = HeadlessLog(out=out)
    for event in outcome.events:
        log(event)
    lines = out.getvalue().splitlines()

    assert "[hankweave] codon alpha started (Codon alpha)" in lines
    alpha = outcome.record("alpha").completion_checkpoint[:8]
    assert any(line.startswith("[hankweave] codon alpha completed")
               and line.endswith(f"checkpoint {alpha}") for line in lines)
    assert any(line.startswith("[hankweave] codon beta skipped") for line in lines)
    assert any(line.startswith("[hankweave] codon gamma failed") for line in lines)
    assert any("failed, continuing (onFailure=ignore)" in line for line in lines)


def test_a_state_snapshot_lists_at_most_the_newest_finished_codons(project, monkeypatch):
    from hankweave.runtime import reporter

    monkeypatch.setattr(reporter, "SNAPSHOT_COMPLETED_LIMIT", 2)
    project.write_hank([codon("a"), codon("b"), codon("c")])
    outcome = project.run()
    last = outcome.of_type("state.snapshot")[-1]
    assert [c["codonId"] for c in last["completedCodons"]] == ["c", "b"]
