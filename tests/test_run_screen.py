"""What a person sees when a codon ends (issue 37, item 1): a failure says why on the screen, in
one line under it, with the fix where one is known; the turn limit is a failure of its own; a
codon waiting for an answer, or stopped by Ctrl-C, is shown as what it is, not as a failure.

Each test renders the events of a real run (the fake harness) through the live view at 80 and
120 columns and through the headless log."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from hankweave.cli.progress import HeadlessLog, LiveView
from hankweave.exitcodes import EXIT_INTERRUPTED
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Outcome, Project, codon, wait_for_status

BAD_REQUEST = 'API Error: 400 {"type":"invalid_request_error","message":"max_tokens: 99999"}'


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


def live_screen(outcome: Outcome, width: int) -> list[str]:
    console = Console(record=True, file=io.StringIO(), width=width, force_terminal=False)
    view = LiveView(console)
    with view:
        for event in outcome.events:
            view(event)
    return console.export_text().splitlines()


def headless_lines(outcome: Outcome) -> list[str]:
    out = io.StringIO()
    log = HeadlessLog(out=out)
    for event in outcome.events:
        log(event)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_a_failure_says_why_under_its_line(project, width):
    project.write_hank([codon("survey")])
    outcome = project.run({"survey": {"result": "error", "errorText": BAD_REQUEST}})

    screen = live_screen(outcome, width)
    at = next(i for i, line in enumerate(screen) if line.startswith("✘ survey  failed"))
    assert screen[at + 1] == (f"  API invalid request: {BAD_REQUEST}"
                              " (not retried: retrying cannot fix it)")
    (line,) = [line for line in headless_lines(outcome) if "codon survey failed" in line]
    assert line.endswith(f": API invalid request: {BAD_REQUEST} (not retried: retrying cannot"
                         " fix it)")


def test_the_turn_limit_is_its_own_failure_with_its_fix_and_is_not_retried(project):
    project.write_hank([codon("survey", onFailure="retry",
                                retryConfig={"maxAttempts": 3, "delayMs": 0})])
    outcome = project.run({"survey": {"result": "max-turns", "messages": 4}})

    reason = outcome.record("survey").failure_reason
    assert (reason.type, reason.retriable) == ("turn-limit", False)
    assert len(outcome.records("survey")) == 1
    expected = ("  The agent reached its turn limit after 4 turns: give the codon less to do,"
                " or raise harnesses.fake.maxTurns in hankweave.json (not retried: retrying"
                " cannot fix it)")
    assert expected in live_screen(outcome, 80)


def test_a_codon_waiting_for_an_answer_is_shown_waiting(project):
    project.write_hank([codon("survey")])
    outcome = project.run({"survey": {"askHuman": "Which format?"}})

    assert outcome.code == EXIT_INTERRUPTED
    screen = live_screen(outcome, 80)
    assert any(line.startswith("⏸ survey  waiting") for line in screen), screen
    assert not any("✘" in line or "failed" in line for line in screen), screen
    assert any(line.startswith("[hankweave] codon survey waiting in")
               for line in headless_lines(outcome))


def test_a_codon_stopped_by_ctrl_c_is_shown_stopped(project):
    project.write_hank([codon("survey")])

    async def ctrl_c(runtime):
        await wait_for_status(runtime, "survey", "running")
        runtime.commands.request_shutdown("SIGINT")

    outcome = project.run_controlled(ctrl_c, {"survey": {"hang": True}})

    screen = live_screen(outcome, 80)
    at = next(i for i, line in enumerate(screen) if line.startswith("■ survey  stopped"))
    assert screen[at + 1].startswith("  Interrupted: "), screen
    assert not any("✘" in line for line in screen), screen


def test_a_harness_warning_is_shown_once_per_execution_across_codons_and_resumes(project):
    notice = "The agent runs with acceptEdits here."
    project.write_hank([codon("a"), codon("b", onFailure="abort")])
    first = project.run({"a": {"warn": notice}, "b": {"warn": notice, "result": "error"}})
    resumed = project.run({"b": {"warn": notice}})

    warnings = [d for outcome in (first, resumed) for d in outcome.of_type("error")
                if d["message"] == notice]
    assert [(w["codon"], w["severity"]) for w in warnings] == [("a", "warning")]
    assert resumed.code == 0 and resumed.record("b").status == "completed"


def test_a_resume_after_a_failed_first_codon_says_where_it_goes_back_to(project):
    """The first codon never completed: the resume goes back to the start of it, after its rig
    setup, and says so (not "rolled back to survey", as if survey had completed)."""
    project.write_hank([codon("survey", rigSetup=[{"type": "command",
                                                   "command": {"run": "echo ready > rig.txt"}}]),
                        codon("write")])
    project.run({"survey": {"result": "error", "errorText": "API Error: 500 internal"}})
    resumed = project.run({"survey": {"messages": 1}})

    assert resumed.code == 0
    infos = resumed.infos()
    assert ("The last run failed at codon survey; going back to the start of codon survey,"
            " after its rig setup to continue from there") in infos, infos
    assert any(info.startswith("Rolled back to the start of codon survey, after its rig setup"
                               " (checkpoint ") for info in infos), infos


def test_every_event_of_a_run_carries_its_run_id_and_journal_run_finds_them(project):
    """Agency's record: each event is attributed to its run, so one run's events can be read
    apart from a resume's (issue 36, item 8)."""
    from click.testing import CliRunner

    from hankweave.cli.journal_cmd import journal_command

    project.write_hank([codon("a"), codon("b")])
    project.run({"b": {"result": "error"}})
    project.run({"b": {"messages": 1}})
    runs = [run.run_id for run in reversed(project.state().runs)]
    events = project.journal()

    for run_id in runs:
        starts = [i for i, e in enumerate(events) if e["type"] == "state.transition"
                  and e["data"]["transitionType"] == "RunStarted"
                  and e["data"]["runId"] == run_id]
        ends = [i for i, e in enumerate(events) if e["type"] == "state.transition"
                and e["data"]["transitionType"] in ("RunCompleted", "RunFailed")
                and e["data"]["runId"] == run_id]
        during = events[starts[0]:ends[0]]
        assert {e.get("runId") for e in during} == {run_id}, [
            e["type"] for e in during if e.get("runId") != run_id]
        assert {"codon.started", "assistant.action", "token.usage", "codon.completed"} <= {
            e["type"] for e in during}
        listed = CliRunner().invoke(journal_command, ["-e", str(project.exec_dir), "--run",
                                                      run_id, "--json"])
        seqs = [json.loads(line)["seq"] for line in listed.stdout.splitlines()]
        assert seqs == [e["seq"] for e in events[starts[0]:ends[0] + 1]]
    before = events[:next(i for i, e in enumerate(events) if e.get("runId"))]
    assert before and all("runId" not in e for e in before)
