"""The runtime in-process: codon budgets, the run's ceiling and time limits.

The fake model costs $1/M input and $5/M output tokens; each scripted message uses 10 input and
20 output tokens, so one message costs $0.00011.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from hankweave.fsutil import parse_iso
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon, loop, wait_for_status

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
    assert outcome.state.runs[0].status == "timeout"  # Agency's status: its ceiling ended it


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


# ----- helpers -----


def limits_events(outcome) -> dict[str, dict]:
    """The newest ``budget.limits`` of each codon."""
    return {data["codonId"]: data for data in outcome.of_type("budget.limits")}


def proportional(max_dollars: float, allocation: str = "proportional", **shares: float) -> dict:
    budget = {"maxDollars": max_dollars, "allocation": allocation}
    if shares:
        budget["shares"] = shares
    return {"overrides": {"budget": budget}}


# ----- allocation modes in a run -----


def test_a_proportional_share_is_the_codons_dollar_limit(project):
    project.write_hank([codon("a"), codon("b")], **proportional(0.001, a=0.2))
    outcome = project.run({"a": {"messages": 5}})

    a = outcome.record("a")
    assert a.budget_exceeded.currency == "cost"
    assert a.budget_exceeded.limit == pytest.approx(0.0002)
    assert a.assistant_message_count == 2
    limits = limits_events(outcome)
    assert limits["a"]["limits"]["dollarsSource"] == "proportional share (20% of $0.001)"
    assert limits["a"]["ceiling"] == {"maxDollars": 0.001, "allocation": "proportional",
                                      "shares": {"a": 0.2}}


def test_codons_without_a_share_split_the_rest_and_unspent_money_flows_on(project):
    project.write_hank([codon("a"), codon("b"), codon("c")], **proportional(0.0009))
    outcome = project.run({"a": {"messages": 5}, "b": {"messages": 1}, "c": {"messages": 1}})

    limits = {codon_id: data["limits"] for codon_id, data in limits_events(outcome).items()}
    assert limits["a"]["maxDollars"] == pytest.approx(0.0003)
    assert limits["a"]["dollarsSource"] == "uniform split (1/3 of $0.0009 unallocated)"
    assert outcome.record("a").budget_exceeded.used == pytest.approx(3 * ONE_MESSAGE)
    assert limits["b"]["maxDollars"] == pytest.approx(0.00045)
    assert limits["b"]["dollarsSource"] == "uniform split (1/2 of $0.0009 unallocated)"
    # a spent 0.00033 and b 0.00011: the run has 0.00046 left, less than c's split.
    assert limits["c"]["maxDollars"] == pytest.approx(0.00046)
    assert limits["c"]["dollarsSource"] == "run remaining ($0.00046 of $0.0009)"


def test_under_proportional_strict_an_unspent_share_is_lost(project):
    hank = [codon("a"), codon("d", budget={"maxDollars": 0.0009})]
    project.write_hank(hank, **proportional(0.001, "proportional-strict", a=0.5))
    strict = limits_events(project.run({"a": {"messages": 1}}))["d"]["limits"]

    assert strict["maxDollars"] == pytest.approx(0.0005)
    assert strict["dollarsSource"] == "strict remaining ($0.0005 after earlier shares)"


# ----- every currency -----


def test_a_context_token_cap_stops_the_codon_at_the_first_turn_over_it(project):
    project.write_hank([codon("a", budget={"maxContextTokens": 25})])
    outcome = project.run({"a": {"messages": 5}})

    exceeded = outcome.record("a").budget_exceeded
    assert (exceeded.currency, exceeded.limit, exceeded.used) == ("contextTokens", 25, 30)
    assert outcome.record("a").assistant_message_count == 1


def test_on_exceeded_fail_can_come_from_the_hank_budget(project):
    project.write_hank([codon("a"), codon("b")],
                       overrides={"budget": {"maxDollars": 0.0002, "onExceeded": "fail"}})
    outcome = project.run({"a": {"messages": 5}})

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "failed")]
    assert outcome.record("a").failure_reason.message == (
        "Budget exceeded: cost limit $0.0002 (shared pool) reached: $0.00022 spent")
    assert limits_events(outcome)["a"]["limits"]["onExceededSource"] == "hank"


def test_on_exceeded_fail_can_come_from_the_loop_budget(project):
    project.write_hank([loop("L", [codon("x")], {"type": "iterationLimit", "limit": 3},
                             budget={"maxDollars": 0.0001, "onExceeded": "fail"}),
                        codon("b")])
    outcome = project.run({"x": {"messages": 2}})

    assert outcome.code == 1
    assert outcome.statuses() == [("x#0", "failed")]
    assert not outcome.record("x#0").failure_reason.retriable


# ----- loop budgets -----


def test_a_loop_that_spent_its_dollars_ends_and_the_hank_goes_on(project):
    project.write_hank([loop("L", [codon("x")], {"type": "iterationLimit", "limit": 10},
                             budget={"maxDollars": 0.0005}), codon("b")])
    # Each iteration's result reports $0.0003: no codon crosses its limit while it runs,
    # but after two iterations the loop has spent $0.0006.
    outcome = project.run({"x": {"messages": 1, "cost": 0.0003}})

    assert outcome.code == 0
    assert outcome.statuses() == [("x#0", "completed"), ("x#1", "completed"),
                                  ("b", "completed")]
    final = outcome.of_type("loop.iteration.completed")[-1]
    assert (final["iteration"], final["isFinal"], final["terminationReason"]) == (
        1, True, "budget_exceeded")
    assert "Loop budget reached (cost limit $0.0005 (loop L: loop cap) reached: $0.0006 spent);" \
           " the loop ends" in outcome.infos()
    x1 = limits_events(outcome)["x#1"]
    assert x1["limits"]["maxDollars"] == pytest.approx(0.0002)
    assert x1["loop"] == {"maxDollars": 0.0005, "dollarsSource": "loop cap"}


def test_a_loop_that_used_its_time_ends_with_its_codon_stopped(project):
    project.write_hank([loop("L", [codon("x")], {"type": "iterationLimit", "limit": 10},
                             budget={"maxTimeSeconds": 0.5}), codon("b")])
    outcome = project.run({"x": {"messages": 3, "delayMs": 100}})

    statuses = outcome.statuses()
    assert statuses[-1] == ("b", "completed")
    assert 2 <= len(statuses) <= 3  # x#0 takes 0.3 s: x#1 (or x#0, if slow) is stopped
    stopped = outcome.record(statuses[-2][0])
    assert stopped.budget_exceeded.currency == "duration"
    assert limits_events(outcome)[stopped.codon_id]["limits"]["timeSource"] == (
        "loop L time left")
    assert outcome.of_type("loop.iteration.completed")[-1]["terminationReason"] == (
        "budget_exceeded")


# ----- the harness is stopped within a second -----


def watch_harness(monkeypatch) -> list[tuple[str, float]]:
    """Marks of what the fake agent did and when: ``start``, each record's type, ``stopped``."""
    from hankweave.testing.fake_harness import FakeHarness

    marks: list[tuple[str, float]] = []
    original = FakeHarness.run_codon

    async def run_codon(self, request, context):
        marks.append(("start", time.monotonic()))
        try:
            async for record in original(self, request, context):
                marks.append((str(record.get("type")), time.monotonic()))
                yield record
        finally:
            marks.append(("stopped", time.monotonic()))

    monkeypatch.setattr(FakeHarness, "run_codon", run_codon)
    return marks


def test_a_cost_breach_stops_the_agent_at_once(project, monkeypatch):
    marks = watch_harness(monkeypatch)
    project.write_hank([codon("a", budget={"maxDollars": 0.0002})])
    outcome = project.run({"a": {"messages": 5, "delayMs": 300, "process": True}})

    assistant = [moment for kind, moment in marks if kind == "assistant"]
    (stopped,) = [moment for kind, moment in marks if kind == "stopped"]
    assert len(assistant) == 2  # the third message never came: the agent was stopped
    assert stopped - assistant[1] < 1.0
    assert outcome.record("a").budget_exceeded.used == pytest.approx(2 * ONE_MESSAGE)


@pytest.mark.parametrize("whose", ["codon", "run"])
def test_a_time_breach_stops_a_hanging_agent_within_a_second(project, monkeypatch, whose):
    marks = watch_harness(monkeypatch)
    own = {"maxTimeSeconds": 0.5} if whose == "codon" else None
    project.write_hank([codon("a", budget=own)])
    options = {"max_time": 0.5} if whose == "run" else {}
    outcome = project.run({"a": {"hang": True, "process": True}}, **options)

    (started,) = [moment for kind, moment in marks if kind == "start"]
    (stopped,) = [moment for kind, moment in marks if kind == "stopped"]
    exceeded = outcome.record("a").budget_exceeded
    assert exceeded.currency == "duration"
    assert exceeded.limit <= 0.5  # the run's: what was left of it when the codon started
    assert exceeded.limit <= exceeded.used < exceeded.limit + 0.5  # seen when it happened
    assert stopped - started < exceeded.limit + 1.0


# ----- across resumes -----


def test_a_resumed_run_counts_what_the_stopped_run_spent_and_how_long_it_took(project):
    project.write_hank([codon("a"), codon("b")])

    async def stop_in_b(runtime) -> None:
        await wait_for_status(runtime, "b", "running")
        while not runtime.state.runs[0].codons[-1].assistant_message_count:
            await asyncio.sleep(0.005)
        runtime.commands.request_shutdown("SIGTERM")

    first = project.run_controlled(
        stop_in_b, {"a": {"messages": 2, "delayMs": 200}, "b": {"messages": 1, "hang": True}},
        max_cost=0.001, max_time=60)
    run = first.state.runs[0]
    assert [(c.codon_id, c.status) for c in run.codons] == [("a", "completed"), ("b", "failed")]
    took = (parse_iso(run.end_time) - parse_iso(run.start_time)).total_seconds()

    second = project.run({"b": {"messages": 1}}, max_cost=0.001, max_time=60)

    assert second.statuses() == [("b", "completed")]
    b = limits_events(second)["b"]
    assert b["spentDollars"] == pytest.approx(3 * ONE_MESSAGE)  # a, and b's stopped attempt
    assert b["limits"]["maxDollars"] == pytest.approx(0.001 - 3 * ONE_MESSAGE)
    # Plus the second run's own time until b: room for a loaded machine (CI runs two tox envs).
    assert took <= b["elapsedSeconds"] < took + 10
    assert b["limits"]["maxTimeSeconds"] == pytest.approx(60 - b["elapsedSeconds"], abs=0.01)
    assert b["limits"]["timeSource"] == "run time left"


# ----- budget.summary -----


def test_the_budget_summary_covers_every_entry_of_the_run_with_its_limits(project):
    project.write_hank([codon("a", budget={"maxOutputTokens": 30}),
                        loop("L", [codon("x")], {"type": "iterationLimit", "limit": 2}),
                        codon("s", onFailure="ignore")], overrides={"budget": {"maxDollars": 1}})
    outcome = project.run({"a": {"messages": 5}, "x": {"messages": 1},
                           "s": {"messages": 1, "result": "error"}})

    (summary,) = outcome.of_type("budget.summary")
    for row in summary["rows"]:
        assert row["actual"].pop("timeSeconds") >= 0
    assert summary["ceiling"] == {"maxDollars": 1}
    assert summary["allocation"] == "shared"
    assert summary["rows"] == [
        {"codonId": "a", "status": "exceeded",
         "budget": {"maxDollars": pytest.approx(1), "maxOutputTokens": 30},
         "actual": {"dollars": pytest.approx(2 * ONE_MESSAGE), "outputTokens": 40}},
        {"codonId": "x#0", "loopContext": {"loopId": "L", "iteration": 0, "codonIndexInLoop": 0},
         "status": "completed", "budget": {"maxDollars": pytest.approx(1 - 2 * ONE_MESSAGE)},
         "actual": {"dollars": pytest.approx(ONE_MESSAGE), "outputTokens": 20}},
        {"codonId": "x#1", "loopContext": {"loopId": "L", "iteration": 1, "codonIndexInLoop": 0},
         "status": "completed", "budget": {"maxDollars": pytest.approx(1 - 3 * ONE_MESSAGE)},
         "actual": {"dollars": pytest.approx(ONE_MESSAGE), "outputTokens": 20}},
        {"codonId": "s", "status": "failed",
         "budget": {"maxDollars": pytest.approx(1 - 4 * ONE_MESSAGE)},
         "actual": {"dollars": pytest.approx(ONE_MESSAGE), "outputTokens": 20}},
    ]
    assert summary["totals"]["budgetDollars"] == 1
    assert summary["totals"]["actualDollars"] == pytest.approx(5 * ONE_MESSAGE)
