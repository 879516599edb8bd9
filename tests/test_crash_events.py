"""``run.crashed``: what a start reports about the runs it found crashed, and how it shows."""

from __future__ import annotations

import io
from typing import Any

import pytest

from hankweave.cli.progress import HeadlessLog
from hankweave.events.catalogue import make_event
from hankweave.runtime.crashes import CrashFollowUp, follow_up, in_flight_codon, report_crashes
from hankweave.runtime.reporter import Reporter
from hankweave.state.thread import analyze_execution_thread, with_dead_runs_crashed
from hankweave.state.types import ContinuationSource, ContinuationStart, StartingConditions
from tests.state_builders import Scenario, plan


def emitted(state: Any, crashed: list[str], ended: dict[str, list[int]],
            resumed: Any = None, then: CrashFollowUp | None = None) -> list[dict[str, Any]]:
    events: list[tuple[str, Any]] = []
    if then is None:
        then = follow_up(state, analyze_execution_thread(state), resumed, _no_resume_point)
    report_crashes(Reporter(lambda kind, data: events.append((kind, data))), state, crashed,
                   ended, then)
    return [make_event(kind, data).data for kind, data in events]


def _no_resume_point(thread: Any) -> StartingConditions:
    raise AssertionError("a failed thread rolls back; it has no resume point")


def killed_in_b() -> Scenario:
    s = Scenario(plan("a", "b", "c"))
    s.start_run("r1").complete("r1", "a", sha="sha-a").start_codon("r1", "b")
    s.state = with_dead_runs_crashed(s.state, "2026-12-04T10:00:00.000Z")
    return s


def test_a_crash_mid_codon_names_the_codon_its_status_and_the_rollback() -> None:
    [data] = emitted(killed_in_b().state, ["r1"], {"r1": [4242]})

    assert data == {
        "runId": "r1", "detectedAt": "2026-12-04T10:00:00.000Z", "codonId": "b",
        "codonStatus": "running", "endedAgentPids": [4242], "next": "rollback",
        "afterCodonId": "a",
        "message": "Run r1 had crashed while codon b was running; it is marked crashed. Ended"
                   " agent process 4242, left running by crashed run r1. Next: rolling back to"
                   " the last successful codon, a, and retrying codon b.",
    }


def test_a_crash_before_any_codon_completed_rolls_back_to_the_initial_checkpoint() -> None:
    s = Scenario(plan("a", "b"))
    s.start_run("r1").start_codon("r1", "a")
    state = with_dead_runs_crashed(s.state, "2026-12-04T10:00:00.000Z")

    [data] = emitted(state, ["r1"], {})

    assert (data["next"], data.get("afterCodonId"), data["endedAgentPids"]) == \
        ("rollback", None, [])
    assert data["message"].endswith("Next: rolling back to the initial checkpoint and retrying"
                                    " from codon a.")


def test_a_run_that_waited_for_a_person_is_resumed() -> None:
    s = killed_in_b()
    run = s.state.run_by_id("r1")

    [data] = emitted(s.state, ["r1"], {}, resumed=run)

    assert (data["next"], data.get("afterCodonId")) == ("resume", None)
    assert data["message"].endswith("Next: resuming run r1, which waited for a person.")


def test_a_crash_between_codons_names_no_codon() -> None:
    s = Scenario(plan("a", "b"))
    s.start_run("r1").complete("r1", "a")
    state = with_dead_runs_crashed(s.state, "2026-12-04T10:00:00.000Z")
    continued: list[str] = []

    def resume_point(thread: Any) -> StartingConditions:
        continued.append(thread.codons[0].codon.codon_id)
        return ContinuationStart(source=ContinuationSource(
            run_id="r1", after_codon="a", checkpoint_sha="done-a"), reason="continue")

    thread = analyze_execution_thread(state)
    then = follow_up(state, thread, None, resume_point)

    assert continued == ["a"]
    assert (then.step, then.after_codon_id) == ("continue", "a")
    assert then.says == "continuing after codon a, with codon b"
    [data] = emitted(state, ["r1"], {}, then=then)
    assert "codonId" not in data and "codonStatus" not in data
    assert data["message"] == ("Run r1 had crashed between codons; it is marked crashed. Next:"
                               " continuing after codon a, with codon b.")


def test_the_in_flight_codon_is_the_one_the_crash_repair_failed_not_an_earlier_failure() -> None:
    s = Scenario(plan("a", "b"))
    s.start_run("r1").fail("r1", "a", message="rate limited")
    state = with_dead_runs_crashed(s.state, "2026-12-04T10:00:00.000Z")
    run = state.run_by_id("r1")

    assert run is not None and run.status == "crashed"
    assert in_flight_codon(run) is None


def test_dead_runs_are_crashed_only_in_the_copy() -> None:
    s = Scenario(plan("a"))
    s.start_run("r1").start_codon("r1", "a")

    shown = with_dead_runs_crashed(s.state, "2026-12-04T10:00:00.000Z")

    assert s.state.runs[0].status == "running" and s.state.runs[0].codons[0].status == "running"
    assert shown.runs[0].status == "crashed" and shown.runs[0].codons[0].status == "failed"
    assert shown.current_run_id is None


@pytest.mark.parametrize("as_json", [False, True])
def test_the_headless_log_shows_the_event_once(as_json: bool) -> None:
    [data] = emitted(killed_in_b().state, ["r1"], {})
    out = io.StringIO()

    HeadlessLog(as_json=as_json, out=out)(make_event("run.crashed", data).to_wire())

    if as_json:
        assert '"type": "run.crashed"' in out.getvalue()
    else:
        assert out.getvalue() == f"[hankweave] {data['message']}\n"
