"""What an extension raises (docs/budgets.md): each limit knows whose ceiling it is, and a
granted extension raises that ceiling, and only that one, for the rest of the execution."""

from __future__ import annotations

from typing import Any

import pytest

from hankweave.config.hank import HankFile
from hankweave.runtime.allocation import Breach, EntryLimits, Limit
from hankweave.runtime.budget import Carried, CodonBudget, Grant, RunBudget, grants_of
from hankweave.runtime.planner import build_initial_plan
from hankweave.state.interruptions import AnswerError, parse_extension
from hankweave.state.types import Interruption
from tests.state_builders import completed, fresh_run, make_state


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": codon_id, "name": codon_id, "model": "fake", "continuationMode": "fresh",
            "promptText": "x", **fields}


def hank(*items: dict[str, Any]) -> HankFile:
    return HankFile.model_validate({"hank": list(items)})


def looped(budget: dict[str, Any]) -> HankFile:
    return hank(codon("a"), {"type": "loop", "id": "L", "name": "L", "codons": [codon("x")],
                             "terminateOn": {"type": "iterationLimit", "limit": 3},
                             "budget": budget})


def limits_of(budget: RunBudget, the_hank: HankFile, codon_id: str) -> EntryLimits:
    return budget.track(build_initial_plan(the_hank), codon_id).limits


# ----- whose ceiling a limit is -----


def test_a_codon_cap_is_the_codons_own_and_the_shared_pool_is_the_runs():
    the_hank = hank(codon("a", budget={"maxDollars": 1.0}), codon("b"))

    capped = limits_of(RunBudget(max_dollars=10, hank=the_hank), the_hank, "a").dollars
    pooled = limits_of(RunBudget(max_dollars=10, hank=the_hank), the_hank, "b").dollars

    assert (capped.source, capped.scope) == ("codon cap", "codon")
    assert (pooled.source, pooled.scope) == ("shared pool", "run")


def test_a_loops_pool_is_the_loops_and_the_runs_time_is_the_runs():
    the_hank = looped({"maxDollars": 2.0})
    limits = limits_of(RunBudget(max_dollars=10, max_seconds=600, hank=the_hank), the_hank,
                       "x#0")

    assert (limits.dollars.source, limits.dollars.scope, limits.dollars.loop_id) == (
        "shared pool of loop L", "loop", "L")
    assert (limits.seconds.source, limits.seconds.scope) == ("run time left", "run")


def test_a_proportional_share_is_the_members_own():
    the_hank = hank(codon("a"), codon("b"))
    budget = RunBudget(max_dollars=10, allocation="proportional", shares={"a": 0.25},
                       hank=the_hank)

    share = limits_of(budget, the_hank, "a").dollars
    assert share.scope == "codon" and share.source.startswith("proportional share")


# ----- what a grant raises -----


def test_a_codon_grant_raises_only_that_entrys_cap():
    the_hank = hank(codon("a", budget={"maxDollars": 1.0}),
                    codon("b", budget={"maxDollars": 1.0}))
    budget = RunBudget(hank=the_hank, grants=[Grant("codon", "cost", 0.5, "a")])

    assert limits_of(budget, the_hank, "a").dollars.value == 1.5
    assert limits_of(budget, the_hank, "b").dollars.value == 1.0


def test_a_codon_grant_at_a_share_adds_to_the_share_not_to_the_pool():
    the_hank = hank(codon("a"), codon("b"))
    budget = RunBudget(max_dollars=10, allocation="proportional", shares={"a": 0.25},
                       hank=the_hank, grants=[Grant("codon", "cost", 1.0, "a")])

    assert limits_of(budget, the_hank, "a").dollars.value == pytest.approx(3.5)
    assert budget.ceiling_dollars == 10


def test_a_run_grant_raises_the_ceiling_for_every_later_codon():
    the_hank = hank(codon("a"), codon("b"))
    state = make_state(fresh_run("r1", completed("a", cost=2.0)))
    budget = RunBudget(max_dollars=2.0, hank=the_hank).seed(state)
    assert budget.exhausted()

    budget.grant("a", Breach("cost", 2.0, 2.0, "shared pool", "run"), 1.5)

    assert not budget.exhausted() and budget.remaining_dollars() == pytest.approx(1.5)
    assert limits_of(budget, the_hank, "b").dollars.value == pytest.approx(1.5)


def test_a_loop_grant_raises_the_loops_budget():
    the_hank = looped({"maxDollars": 2.0, "maxTimeSeconds": 60})
    budget = RunBudget(hank=the_hank, grants=[Grant("loop", "cost", 1.0, "x#0", "L"),
                                              Grant("loop", "duration", 30, "x#0", "L")])

    limits = limits_of(budget, the_hank, "x#0")
    assert limits.dollars.value == 3.0
    assert limits.seconds.value == pytest.approx(90, abs=0.1)


def test_grants_are_read_from_the_answered_budget_interruptions():
    def ask(answer: Any, status: str = "answered") -> Interruption:
        return Interruption.model_validate({
            "id": f"int-{len(str(answer))}", "runId": "r1", "codonId": "a", "kind": "budget",
            "question": "extend by?", "createdAt": "2026-12-06T00:00:00.000Z",
            "status": status, "answer": answer,
            "budget": {"scope": "codon", "currency": "cost", "limit": 1, "used": 1.1,
                       "source": "codon cap"}})

    state = make_state(fresh_run("r1")).model_copy(update={"interruptions": [
        ask({"extend": 0.5}), ask("reject"), ask(None, "pending"), ask({"extend": True})]})

    assert grants_of(state) == [Grant("codon", "cost", 0.5, "a")]


# ----- in the attempt -----


def test_an_extension_raises_the_breached_limit_and_clears_the_breach():
    the_hank = hank(codon("a", budget={"maxDollars": 1.0}))
    run = RunBudget(hank=the_hank)
    budget = run.track(build_initial_plan(the_hank), "a")
    assert budget.add_usage(1.2, None) is not None
    run.grant("a", budget.breach, 0.5)

    budget.extend()

    assert budget.breach is None and budget.limits.dollars.value == 1.5
    assert budget.add_usage(0.2, None) is None
    assert budget.add_usage(0.2, None) is not None  # 1.6 >= 1.5


def test_what_the_interrupted_attempt_used_counts_against_the_codons_own_limits_only():
    the_hank = hank(codon("a", budget={"maxDollars": 2.0}), codon("b"))
    clock = [0.0]
    budget = RunBudget(max_dollars=10, max_seconds=100, hank=the_hank, clock=lambda: clock[0])
    attempt = budget.track(build_initial_plan(the_hank), "a", Carried(1.5, 0, 90))

    assert attempt.seconds_left() == 100  # the run's clock counted those 90 s already
    assert attempt.limits.dollars.value == pytest.approx(0.5)  # $2.00, $1.50 of it used
    assert attempt.add_usage(0.4, None) is None
    breached = attempt.add_usage(0.1, None)
    assert breached is not None  # 1.5 + 0.5 >= 2.0
    assert attempt.ceiling_of(attempt.breach) == pytest.approx((2.0, 2.0))  # as a person knows it


def test_the_tighter_of_the_codons_cap_and_the_runs_pool_holds_across_a_pause():
    """$0.0004 of the codon's own, $0.00022 of it used before the pause; the run has $0.00028
    left: the codon's $0.00018 is the tighter."""
    the_hank = hank(codon("a", budget={"maxDollars": 0.0004}))
    budget = RunBudget(max_dollars=0.0005, hank=the_hank).seed(
        make_state(fresh_run("r1", completed("x", cost=0.00022))))

    attempt = budget.track(build_initial_plan(the_hank), "a", Carried(0.0, 0, 0.0))
    carried = budget.track(build_initial_plan(the_hank), "a", Carried(0.00022, 0, 0.0))

    assert attempt.limits.dollars.value == pytest.approx(0.00028)
    assert carried.limits.dollars.value == pytest.approx(0.00018)
    assert carried.limits.dollars.scope == "codon"


def test_an_extension_in_place_keeps_every_other_limit():
    """The codon's own cap asked and was raised; the run's ceiling still holds."""
    the_hank = hank(codon("a", budget={"maxDollars": 0.0002, "onExceeded": "ask"}))
    budget = RunBudget(max_dollars=0.0005, hank=the_hank)
    attempt = budget.track(build_initial_plan(the_hank), "a")
    assert attempt.add_usage(0.00022, None) is not None
    budget.grant("a", attempt.breach, 0.01)

    attempt.extend()

    assert attempt.limits.dollars.value == pytest.approx(0.0005)
    assert attempt.limits.dollars.scope == "run"
    assert attempt.add_usage(0.0003, None) is not None  # $0.00052 >= the run's $0.0005


def test_waiting_for_a_person_is_not_counted_as_time():
    clock = [0.0]
    paused: list[float] = []
    budget = CodonBudget("a", EntryLimits(codon_id="a", seconds=Limit(60, "codon cap")),
                         started=0.0, clock=lambda: clock[0], on_pause=paused.append)
    clock[0] = 3600.0
    budget.pause(3590.0)

    assert budget.seconds_left() == 50 and paused == [3590.0]


# ----- the amounts people type -----


@pytest.mark.parametrize(("given", "currency", "amount"), [
    ("1.50", "cost", 1.5), ("$2", "cost", 2.0), (" 5 ", "cost", 5.0), ("90", "duration", 90.0),
    ("90s", "duration", 90.0), ("5m", "duration", 300.0), ("1h", "duration", 3600.0),
    ("20_000", "outputTokens", 20000.0), ("1500.4", "contextTokens", 1500.0)])
def test_an_extension_is_read_in_the_ceilings_unit(given, currency, amount):
    assert parse_extension(given, currency) == amount


@pytest.mark.parametrize("given", ["0", "-1", "$-1", "nan", "inf", "", "5m", True, "1e400",
                                   "1e308", "1,5", "\uff11\uff12"])  # the last: fullwidth 12
def test_an_extension_that_is_not_a_positive_amount_is_refused(given):
    with pytest.raises(AnswerError, match="positive amount in dollars"):
        parse_extension(given, "cost")


def test_a_token_extension_that_rounds_to_nothing_is_refused():
    with pytest.raises(AnswerError, match="positive amount in tokens"):
        parse_extension("0.4", "outputTokens")


def test_the_websocket_refuses_a_boolean_extension():
    from pydantic import ValidationError

    from hankweave.server.protocol import InterruptionAnswerData

    with pytest.raises(ValidationError):
        InterruptionAnswerData.model_validate({"interruptionId": "int-1", "extend": True})
    assert InterruptionAnswerData.model_validate(
        {"interruptionId": "int-1", "extend": 1.5}).extend == 1.5
