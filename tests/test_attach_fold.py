"""``hankweave attach`` folds the ``state.transition`` events it receives with the kernel's
reducer: from a real journal it holds the state the runtime wrote, and a transition the reducer
refuses leaves the last good state on screen."""

from __future__ import annotations

import pytest

from hankweave.cli.attach_view import AttachView
from hankweave.state.types import HankweaveState
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


def _fold(events: list[dict]) -> AttachView:
    view = AttachView()
    view.handle({"type": "history.batch", "data": {"events": events, "hasMore": False}})
    return view


def _untimed(state: HankweaveState) -> object:
    """The state without its times: the event's timestamp is stamped when the event is made,
    up to a millisecond after the transition's own."""
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not k.endswith("Time")}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value
    return strip(state.model_dump(by_alias=True))


def test_attach_folds_a_journal_into_the_state_the_runtime_wrote(project):
    project.write_hank([codon("draft"), codon("review"), codon("publish")])
    project.run({"draft": {"cost": 0.1}, "review": {"cost": 0.05},
                 "publish": {"hang": False, "result": "error", "errorText": "API Error: 401"}})
    project.run({"publish": {"cost": 0.02}})  # a rollback continuation of the failed run

    view = _fold(project.journal())

    assert _untimed(view.state) == _untimed(project.state())
    assert not view.fold_refused
    assert view.status == {"draft": "completed", "review": "completed", "publish": "completed"}
    assert view.costs == pytest.approx({"draft": 0.1, "review": 0.05, "publish": 0.02})
    assert view.run_id == project.state().runs[0].run_id and view.run_status == "completed"


def test_attach_keeps_the_last_good_state_when_a_history_starts_mid_run(project):
    project.write_hank([codon("a"), codon("b")])
    project.run({"a": {"cost": 0.1}, "b": {"cost": 0.2}})
    events = project.journal()
    started = next(i for i, e in enumerate(events)
                   if e["data"].get("transitionType") == "CodonStarted")

    view = _fold(events[started:])  # the RunStarted that opens the run is missing

    assert view.state.runs == [] and view.fold_refused
    refusals = [line for line, _ in view.tail if "not folded" in line]
    assert len(refusals) <= 1  # said once, not once per refused transition
    assert view.last_seq == events[-1]["seq"]


def test_a_harness_warning_is_shown_as_a_warning_not_an_error(project):
    project.write_hank([codon("a")])
    project.run({"a": {"warn": "The agent runs with acceptEdits here."}})

    view = _fold(project.journal())

    (line, style) = next((text, style) for text, style in view.tail if "acceptEdits" in text)
    assert "warning: The agent runs with acceptEdits here." in line and style == "yellow"
