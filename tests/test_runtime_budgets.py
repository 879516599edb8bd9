"""The runtime in-process: codon budgets, the run's ceiling and time limits.

The fake model costs $1/M input and $5/M output tokens; each scripted message uses 10 input and
20 output tokens, so one message costs $0.00011.
"""

from __future__ import annotations

import pytest

from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon

ONE_MESSAGE = 0.00011


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


def test_reaching_a_codon_dollar_cap_completes_it_when_on_exceeded_is_complete(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002, "onExceeded": "complete"}),
                        codon("b")])
    outcome = project.run({"a": {"messages": 5}})

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]
    a = outcome.record("a")
    assert a.budget_exceeded.currency == "cost" and a.budget_exceeded.limit == 0.0002
    assert a.assistant_message_count == 2  # stopped at the message that crossed the cap
    completed = outcome.of_type("codon.completed")[0]
    assert completed["budgetExceeded"]["currency"] == "cost"
    assert any("budget limit reached" in m for m in outcome.infos())


def test_reaching_a_codon_dollar_cap_fails_it_when_on_exceeded_is_fail(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002, "onExceeded": "fail"},
                              onFailure="retry", retryConfig={"delayMs": 0}), codon("b")])
    outcome = project.run({"a": {"messages": 5}})

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "failed")]  # not retriable: no second attempt
    reason = outcome.record("a").failure_reason
    assert not reason.retriable and reason.message.startswith("Budget exceeded")


def test_an_output_token_cap_stops_the_codon(project):
    project.write_hank([codon("a", budget={"maxOutputTokens": 30})])
    outcome = project.run({"a": {"messages": 5}})

    assert outcome.code == 0
    a = outcome.record("a")
    assert a.status == "completed" and a.assistant_message_count == 2
    assert a.budget_exceeded.currency == "outputTokens" and a.budget_exceeded.used == 40


def test_an_exhausted_run_ceiling_stops_before_the_next_codon(project):
    project.write_hank([codon("a"), codon("b")])
    outcome = project.run({"a": {"cost": 0.02}}, max_cost=0.01)

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "completed")]
    assert outcome.state.runs[0].status == "failed"
    assert any("budget exhausted" in m.lower() for m in outcome.infos())
    summary = outcome.of_type("budget.summary")
    assert len(summary) == 1 and summary[0]["ceiling"]["maxDollars"] == 0.01


def test_a_codon_time_budget_interrupts_a_hanging_agent(project):
    project.write_hank([codon("a", budget={"maxTimeSeconds": 0.2}), codon("b")])
    outcome = project.run({"a": {"hang": True}})

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]
    exceeded = outcome.record("a").budget_exceeded
    assert exceeded.currency == "duration" and exceeded.used >= 0.2


def test_a_run_time_ceiling_interrupts_a_hanging_agent(project):
    project.write_hank([codon("a"), codon("b")])
    outcome = project.run({"a": {"hang": True}}, max_time=0.3)

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "completed")]
    assert outcome.record("a").budget_exceeded.currency == "duration"
    assert outcome.state.runs[0].status == "failed"


def test_the_budget_summary_has_a_row_per_codon_of_the_run(project):
    project.write_hank([codon("a", budget={"maxOutputTokens": 30}), codon("b")])
    outcome = project.run({"a": {"messages": 5}, "b": {"cost": 0.125}})

    (summary,) = outcome.of_type("budget.summary")
    rows = {row["codonId"]: row for row in summary["rows"]}
    assert rows["a"]["status"] == "exceeded" and rows["a"]["budget"] == {"maxOutputTokens": 30}
    assert rows["a"]["actual"]["outputTokens"] == 40
    assert rows["b"]["status"] == "completed" and rows["b"]["actual"]["dollars"] == 0.125
    assert summary["totals"]["actualDollars"] == pytest.approx(2 * ONE_MESSAGE + 0.125)
    last_events = [e["type"] for e in outcome.events[-3:]]
    assert last_events.index("budget.summary") < len(last_events) - 1  # before RunCompleted


def test_a_run_ceiling_reached_mid_codon_stops_the_agent_and_the_run(project):
    project.write_hank([codon("a"), codon("b")])
    outcome = project.run({"a": {"messages": 5}}, max_cost=0.0002)

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "completed")]
    a = outcome.record("a")
    assert a.assistant_message_count == 2
    assert a.budget_exceeded.currency == "cost" and a.budget_exceeded.limit == 0.0002


def test_a_run_stopped_by_its_ceiling_resumes_with_the_codons_left(project):
    project.write_hank([codon("a"), codon("b")])
    project.run({"a": {"cost": 0.02}}, max_cost=0.01)

    resumed = project.run({"a": {"cost": 0.02}}, max_cost=1.0)

    assert resumed.code == 0
    assert resumed.statuses() == [("b", "completed")]  # this run's codons; a ran before
    assert not any("Nothing to do" in notice for notice in resumed.notices)


def test_a_resume_after_a_failed_run_that_finished_its_plan_runs_nothing_again(project):
    project.write_hank([codon("a")])
    project.run({"a": {"cost": 0.02}}, max_cost=0.01)

    resumed = project.run({"a": {"cost": 0.02}}, max_cost=1.0)

    assert resumed.code == 0
    assert [record.codon_id for run in resumed.state.runs for record in run.codons] == ["a"]
