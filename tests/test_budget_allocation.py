"""The allocation rules (docs/behaviour.md §3.9): each plan entry's limits and their sources,
resolved from a plan, the container budgets and what was spent, with exact figures."""

from __future__ import annotations

from typing import Any

import pytest

from hankweave.config.hank import HankFile
from hankweave.runtime.allocation import (
    BudgetPlan,
    Ledger,
    Limit,
    Pool,
    Progress,
    money,
)
from hankweave.runtime.planner import build_initial_plan


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": codon_id, "name": codon_id, "model": "fake", "continuationMode": "fresh",
            "promptText": "x", **fields}


def loop(loop_id: str, codons: list[dict[str, Any]], limit: int = 3,
         **fields: Any) -> dict[str, Any]:
    return {"type": "loop", "id": loop_id, "name": loop_id, "codons": codons,
            "terminateOn": {"type": "iterationLimit", "limit": limit}, **fields}


def plan_of(items: list[dict[str, Any]], **ceiling: Any) -> BudgetPlan:
    hank = HankFile.model_validate({"hank": items})
    return BudgetPlan(build_initial_plan(hank), Pool(**ceiling))


def spent(started: tuple[str, ...] = (), elapsed: float = 0.0,
          loop_elapsed: dict[str, float] | None = None, **by_entry: float) -> Progress:
    """What happened: dollars per entry (loop entries as ``x_0`` for ``x#0``)."""
    ledger = Ledger()
    names = set(started)
    for name, dollars in by_entry.items():
        codon_id = name.replace("_", "#")
        loop_id = "L" if "#" in codon_id else None
        ledger.add(codon_id, loop_id, dollars)
        names.add(codon_id)
    return Progress(ledger=ledger, started=frozenset(names), elapsed=elapsed,
                    loop_elapsed=loop_elapsed or {})


def dollars(plan: BudgetPlan, codon_id: str, progress: Progress | None = None) -> Limit | None:
    return plan.resolve(codon_id, progress or Progress()).dollars


# ----- shared -----


def test_shared_mode_gives_what_the_pool_has_left():
    plan = plan_of([codon("a"), codon("b")], max_dollars=10)

    assert dollars(plan, "a") == Limit(10, "shared pool")
    assert dollars(plan, "b", spent(a=3.5)) == Limit(6.5, "shared pool")


def test_a_spent_pool_leaves_zero_never_a_negative_limit():
    plan = plan_of([codon("a"), codon("b")], max_dollars=1)

    assert dollars(plan, "b", spent(a=1.5)) == Limit(0, "shared pool")


def test_without_a_ceiling_only_a_codon_cap_limits_dollars():
    plan = plan_of([codon("a", budget={"maxDollars": 2}), codon("b")])

    assert dollars(plan, "a") == Limit(2, "codon cap")
    assert dollars(plan, "b") is None


def test_a_codon_cap_under_a_ceiling_is_bounded_by_the_pool():
    plan = plan_of([codon("a"), codon("b", budget={"maxDollars": 4})], max_dollars=10)

    assert dollars(plan, "b", spent(a=3)) == Limit(4, "codon cap")
    assert dollars(plan, "b", spent(a=7)) == Limit(3, "shared pool")


# ----- proportional -----


def test_a_share_is_that_part_of_the_ceiling():
    plan = plan_of([codon("a"), codon("b")], max_dollars=10, allocation="proportional",
                   shares={"a": 0.25})

    assert dollars(plan, "a") == Limit(2.5, "proportional share (25% of $10.00)")


def test_a_share_is_capped_by_the_money_left():
    plan = plan_of([codon("a"), codon("b")], max_dollars=10, allocation="proportional",
                   shares={"a": 0.25, "b": 0.75})

    # a overspent through retries (their money counts): b cannot have its whole share.
    assert dollars(plan, "b", spent(a=9)) == Limit(1, "run remaining ($1.00 of $10.00)")


def test_entries_without_share_or_cap_split_the_unallocated_part_evenly():
    plan = plan_of([codon("a"), codon("b"), codon("c"), codon("d")], max_dollars=10,
                   allocation="proportional", shares={"a": 0.4})

    # At the start: $6 unallocated among b, c and d.
    assert dollars(plan, "b") == Limit(2, "uniform split (1/3 of $6.00 unallocated)")
    # Once b started, c shares with d only; what b left unspent flows on.
    assert dollars(plan, "c", spent(a=4, b=1)) == Limit(
        3, "uniform split (1/2 of $6.00 unallocated)")
    assert dollars(plan, "d", spent(a=4, b=1, c=3)) == Limit(
        2, "run remaining ($2.00 of $10.00)")


def test_the_uniform_split_does_not_count_entries_with_a_cap():
    plan = plan_of([codon("a"), codon("b", budget={"maxDollars": 1}), codon("c")],
                   max_dollars=9, allocation="proportional")

    assert dollars(plan, "a") == Limit(4.5, "uniform split (1/2 of $9.00 unallocated)")
    assert dollars(plan, "b") == Limit(1, "codon cap")


def test_a_share_and_a_cap_take_the_smaller():
    plan = plan_of([codon("a", budget={"maxDollars": 1}), codon("b", budget={"maxDollars": 8})],
                   max_dollars=10, allocation="proportional", shares={"a": 0.5, "b": 0.5})

    assert dollars(plan, "a") == Limit(1, "codon cap")
    assert dollars(plan, "b") == Limit(5, "proportional share (50% of $10.00)")


def test_shares_that_take_everything_leave_zero_for_the_others():
    plan = plan_of([codon("a"), codon("b")], max_dollars=10, allocation="proportional",
                   shares={"a": 1.0})

    assert dollars(plan, "b") == Limit(0, "uniform split (1/1 of $0.00 unallocated)")


# ----- proportional-strict -----


def strict_plan(allocation: str) -> BudgetPlan:
    return plan_of([codon("b"), codon("a"), codon("c")], max_dollars=10, allocation=allocation,
                   shares={"a": 0.4})


def test_unspent_shares_flow_on_under_proportional():
    assert dollars(strict_plan("proportional"), "c", spent(b=1, a=1)) == Limit(
        6, "uniform split (1/1 of $6.00 unallocated)")


def test_unspent_shares_evaporate_under_proportional_strict():
    # a reserved $4 and spent $1: its $3 is lost; b's unspent split still flows on.
    assert dollars(strict_plan("proportional-strict"), "c", spent(b=1, a=1)) == Limit(
        5, "strict remaining ($5.00 after earlier shares)")


def test_strict_also_bounds_a_capped_entry():
    plan = plan_of([codon("a"), codon("d", budget={"maxDollars": 9})], max_dollars=10,
                   allocation="proportional-strict", shares={"a": 0.5})

    assert dollars(plan, "d", spent(a=1)) == Limit(
        5, "strict remaining ($5.00 after earlier shares)")
    loose = plan_of([codon("a"), codon("d", budget={"maxDollars": 9})], max_dollars=10,
                    allocation="proportional", shares={"a": 0.5})
    assert dollars(loose, "d", spent(a=1)) == Limit(9, "codon cap")


# ----- loops -----


def test_a_loop_budget_is_its_cap_within_the_hank_pool():
    plan = plan_of([codon("a"), loop("L", [codon("x")], budget={"maxDollars": 4})],
                   max_dollars=10)

    limits = plan.resolve_loop("L", spent(a=1))
    assert limits.dollars == Limit(4, "loop cap")
    assert plan.resolve_loop("L", spent(a=8)).dollars == Limit(2, "shared pool")


def test_a_loop_codon_draws_from_the_loop_and_the_run():
    plan = plan_of([codon("a"), loop("L", [codon("x")], budget={"maxDollars": 4})],
                   max_dollars=10)

    assert dollars(plan, "x#0", spent(a=1)) == Limit(4, "shared pool of loop L")
    assert dollars(plan, "x#0", spent(a=1, x_0=3)) == Limit(1, "shared pool of loop L")
    # The loop's own dollars do not shrink as the loop spends them.
    assert plan.resolve_loop("L", spent(a=1, x_0=3)).dollars == Limit(4, "loop cap")


def test_a_loop_gets_no_more_than_the_run_has_left_when_it_begins():
    plan = plan_of([codon("a"), loop("L", [codon("x")], budget={"maxDollars": 4})],
                   max_dollars=10)

    assert plan.resolve_loop("L", spent(a=8.5)).dollars == Limit(1.5, "shared pool")
    assert dollars(plan, "x#0", spent(a=8.5)) == Limit(1.5, "shared pool of loop L")


def test_loop_shares_are_keyed_by_the_loops_codon_ids():
    plan = plan_of([loop("L", [codon("x"), codon("y"), codon("z")], budget={
        "maxDollars": 4, "allocation": "proportional", "shares": {"x": 0.25}})])

    assert dollars(plan, "x#0") == Limit(1, "proportional share (25% of loop L's $4.00)")
    assert dollars(plan, "y#0") == Limit(
        1.5, "uniform split (1/2 of loop L's $3.00 unallocated)")


def test_a_strict_loop_loses_an_iterations_unspent_shares():
    items = [loop("L", [codon("x"), codon("y")], budget={
        "maxDollars": 4, "allocation": "proportional-strict", "shares": {"x": 0.5, "y": 0.5}})]
    plan = plan_of(items)
    assert dollars(plan, "y#0", spent(x_0=0.5)) == Limit(
        2, "proportional share (50% of loop L's $4.00)")

    hank = HankFile.model_validate({"hank": items})
    first = build_initial_plan(hank)
    second = [*first, *(e.model_copy(update={
        "codon_id": e.codon_id.replace("#0", "#1"),
        "loop_context": e.loop_context.model_copy(update={"iteration": 1})})
        for e in first if e.loop_context)]
    plan = BudgetPlan(second, Pool())
    # Iteration 0 reserved its shares whole: nothing is left for iteration 1.
    assert dollars(plan, "x#1", spent(x_0=0.5, y_0=0.5)) == Limit(
        0, "strict remaining ($0.00 of loop L after earlier shares)")


def test_a_loop_with_a_hank_share_gets_that_share():
    plan = plan_of([codon("a"), loop("L", [codon("x")], budget={"maxTimeSeconds": 60})],
                   max_dollars=10, allocation="proportional", shares={"L": 0.3})

    assert plan.resolve_loop("L", Progress()).dollars == Limit(
        3, "proportional share (30% of $10.00)")
    assert dollars(plan, "a") == Limit(7, "uniform split (1/1 of $7.00 unallocated)")


def test_a_budgeted_loop_without_a_share_is_one_member_of_the_uniform_split():
    plan = plan_of([codon("a"), loop("L", [codon("x"), codon("y")], budget={
        "maxTimeSeconds": 60}), codon("b")], max_dollars=9, allocation="proportional")

    assert dollars(plan, "a") == Limit(3, "uniform split (1/3 of $9.00 unallocated)")
    assert plan.resolve_loop("L", spent(a=1)).dollars == Limit(
        4.5, "uniform split (1/2 of $9.00 unallocated)")


def test_codons_of_a_loop_without_budget_or_share_split_the_hank_pool_one_by_one():
    plan = plan_of([codon("a"), loop("L", [codon("x"), codon("y")]), codon("b")],
                   max_dollars=8, allocation="proportional")

    assert dollars(plan, "x#0") == Limit(2, "uniform split (1/4 of $8.00 unallocated)")


def test_a_loop_with_a_hank_share_but_no_budget_block_gets_its_share():
    plan = plan_of([codon("a"), loop("L", [codon("x")])], max_dollars=10,
                   allocation="proportional", shares={"L": 0.5})

    assert plan.resolve_loop("L", Progress()).dollars == Limit(
        5, "proportional share (50% of $10.00)")
    assert dollars(plan, "x#0") == Limit(5, "shared pool of loop L")


# ----- time, tokens, onExceeded -----


def test_time_is_the_least_of_the_codon_the_run_and_the_loop():
    plan = plan_of([codon("a", budget={"maxTimeSeconds": 100}),
                    loop("L", [codon("x", budget={"maxTimeSeconds": 500})],
                         budget={"maxTimeSeconds": 300})], max_seconds=1000)

    assert plan.resolve("a", Progress()).seconds == Limit(100, "codon cap")
    assert plan.resolve("a", spent(elapsed=950)).seconds == Limit(50, "run time left")
    progress = spent(elapsed=200, loop_elapsed={"L": 120})
    assert plan.resolve("x#0", progress).seconds == Limit(180, "loop L time left")
    assert plan.resolve("x#0", spent(elapsed=1200)).seconds == Limit(0, "run time left")


def test_a_loops_time_is_capped_by_the_hank_time_left_when_it_began():
    plan = plan_of([codon("a"), loop("L", [codon("x")], budget={"maxTimeSeconds": 300})],
                   max_seconds=400)

    progress = spent(elapsed=250, loop_elapsed={"L": 50})  # began at 200 s: 200 s were left
    assert plan.resolve_loop("L", progress).seconds == Limit(200, "run time left")


def test_token_caps_are_the_codons_own():
    plan = plan_of([codon("a", budget={"maxOutputTokens": 500, "maxContextTokens": 9000})])

    limits = plan.resolve("a", Progress())
    assert (limits.output_tokens, limits.context_tokens) == (500, 9000)


@pytest.mark.parametrize(("codon_rule", "loop_rule", "hank_rule", "expected"), [
    ("fail", "complete", "complete", ("fail", "codon")),
    (None, "fail", "complete", ("fail", "loop L")),
    (None, None, "fail", ("fail", "hank")),
    (None, None, None, ("complete", "default")),
])
def test_on_exceeded_comes_from_the_codon_then_its_loop_then_the_hank(
        codon_rule, loop_rule, hank_rule, expected):
    own = {"budget": {"onExceeded": codon_rule}} if codon_rule else {}
    loop_budget = {"maxTimeSeconds": 60, **({"onExceeded": loop_rule} if loop_rule else {})}
    plan = plan_of([loop("L", [codon("x", **own)], budget=loop_budget)],
                   on_exceeded=hank_rule)

    limits = plan.resolve("x#0", Progress())
    assert (limits.on_exceeded, limits.on_exceeded_source) == expected


# ----- a loop's budget reached -----


def test_a_loop_is_over_budget_once_it_spent_its_dollars():
    plan = plan_of([loop("L", [codon("x")], budget={"maxDollars": 1})])

    assert plan.loop_breach("L", spent(x_0=0.99)) is None
    breach = plan.loop_breach("L", spent(x_0=0.6, x_1=0.4))
    assert breach is not None and (breach.currency, breach.limit, breach.used) == ("cost", 1, 1)
    assert breach.message == "cost limit $1.00 (loop L: loop cap) reached: $1.00 spent"


def test_a_loop_is_over_budget_once_its_time_is_used():
    plan = plan_of([loop("L", [codon("x")], budget={"maxTimeSeconds": 30})])

    assert plan.loop_breach("L", spent(loop_elapsed={"L": 29.5})) is None
    breach = plan.loop_breach("L", spent(loop_elapsed={"L": 31}))
    assert breach is not None and (breach.currency, breach.limit, breach.used) == (
        "duration", 30, 31)


def test_a_zero_dollar_loop_needs_a_positive_cost_to_be_over():
    plan = plan_of([codon("a"), loop("L", [codon("x")], budget={"maxTimeSeconds": 60})],
                   max_dollars=10, allocation="proportional", shares={"a": 1.0})

    assert plan.resolve_loop("L", Progress()).dollars == Limit(
        0, "uniform split (1/1 of $0.00 unallocated)")
    assert plan.loop_breach("L", spent(a=1)) is None
    assert plan.loop_breach("L", spent(a=1, x_0=0.01)) is not None


# ----- the whole plan at the start (what validate prints) -----


def test_the_plan_at_the_start_with_nothing_spent():
    plan = plan_of([codon("a", budget={"maxTimeSeconds": 60}),
                    loop("L", [codon("x", budget={"maxOutputTokens": 1000})],
                         budget={"maxTimeSeconds": 600, "onExceeded": "complete"}),
                    codon("b"), codon("c", budget={"maxDollars": 0.5})],
                   max_dollars=10, max_seconds=3600, allocation="proportional",
                   shares={"a": 0.25, "L": 0.5}, on_exceeded="fail")

    assert [limits.to_json() for limits in plan.resolve_all(Progress())] == [
        {"codonId": "a", "maxDollars": 2.5, "dollarsSource": "proportional share (25% of $10.00)",
         "maxTimeSeconds": 60, "timeSource": "codon cap", "onExceeded": "fail",
         "onExceededSource": "hank"},
        {"codonId": "x#0", "loopId": "L", "maxDollars": 5, "dollarsSource":
         "shared pool of loop L", "maxTimeSeconds": 600, "timeSource": "loop L time left",
         "maxOutputTokens": 1000, "onExceeded": "complete", "onExceededSource": "loop L"},
        {"codonId": "b", "maxDollars": 2.5,
         "dollarsSource": "uniform split (1/1 of $2.50 unallocated)", "maxTimeSeconds": 3600,
         "timeSource": "run time left", "onExceeded": "fail", "onExceededSource": "hank"},
        {"codonId": "c", "maxDollars": 0.5, "dollarsSource": "codon cap",
         "maxTimeSeconds": 3600, "timeSource": "run time left", "onExceeded": "fail",
         "onExceededSource": "hank"},
    ]
    assert plan.resolve_loop("L", Progress()).to_json() == {
        "loopId": "L", "maxDollars": 5, "dollarsSource": "proportional share (50% of $10.00)",
        "maxTimeSeconds": 600, "timeSource": "loop cap", "onExceeded": "complete"}


def test_money_in_sources_shows_cents_or_the_digits_below_them():
    assert [money(v) for v in (10, 0.5, 0.0002, 0.00006, 0)] == [
        "$10.00", "$0.50", "$0.0002", "$0.00006", "$0.00"]
