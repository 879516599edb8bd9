"""Cost and token aggregation: which field of which status counts, and the totals built on it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hankweave.state.costs import (
    CostLedger,
    codon_cost,
    codon_tokens,
    current_run_cost,
    resulting_state_summary,
    run_cost,
    run_tokens,
    sentinel_cost,
    total_cost,
    total_sentinel_cost,
    total_tokens,
)
from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import InvalidTransitionError, MetadataValidationError
from hankweave.state.types import HankweaveState, TokenUsage
from tests.state_builders import (
    Scenario,
    completed,
    failed,
    fresh_run,
    make_state,
    pending,
    plan,
    running,
    skipped,
    tokens,
)
from tests.test_state_properties import HAPPY_PATHS, TRANSITIONS


def test_completed_counts_its_final_cost_and_tokens_not_the_running_totals() -> None:
    record = completed("a", cost=0.5, used=tokens(10, 20)).model_copy(
        update={"current_cost": 0.1, "current_tokens": tokens(1, 2)}
    )

    assert codon_cost(record) == 0.5
    assert codon_tokens(record) == tokens(10, 20)


def test_failed_counts_its_partial_cost_and_tokens() -> None:
    record = failed("a", cost=0.25, used=tokens(3, 4))

    assert codon_cost(record) == 0.25
    assert codon_tokens(record) == tokens(3, 4)


def test_skipped_counts_zero_cost_even_with_a_partial_cost() -> None:
    record = skipped("a", cost=0.75, used=tokens(5, 6))

    assert codon_cost(record) == 0.0
    # Token totals still use what the skipped attempt consumed.
    assert codon_tokens(record) == tokens(5, 6)


@pytest.mark.parametrize("completing_sentinels", [False, True])
def test_running_and_completing_sentinels_count_their_current_cost(
    completing_sentinels: bool,
) -> None:
    record = running("a", cost=0.3, used=tokens(7, 8), completing_sentinels=completing_sentinels)

    assert codon_cost(record) == 0.3
    assert codon_tokens(record) == tokens(7, 8)


@pytest.mark.parametrize("status", ["preparing", "starting", "initializing"])
def test_codons_before_the_agent_runs_cost_nothing(status: str) -> None:
    record = pending("a", status)

    assert codon_cost(record) == 0.0
    assert codon_tokens(record) == TokenUsage()


def test_sentinel_cost_is_kept_apart_from_codon_and_run_totals() -> None:
    state = make_state(
        fresh_run(
            "r1",
            completed("a", cost=1.0, sentinel_cost=0.2),
            running("b", cost=0.5, sentinel_cost=0.05),
            status="running",
        )
    )
    a, b = state.runs[0].codons

    assert (codon_cost(a), sentinel_cost(a)) == (1.0, 0.2)
    assert (codon_cost(b), sentinel_cost(b)) == (0.5, 0.05)
    assert sentinel_cost(pending("c")) == 0.0
    assert total_cost(state) == 1.5
    assert total_sentinel_cost(state) == pytest.approx(0.25)


def test_run_and_total_sums_cover_every_record_of_every_run() -> None:
    older = fresh_run(
        "r1",
        completed("a", cost=1.0, used=tokens(10, 1, cache_read=100)),
        failed("b", cost=0.5, used=tokens(5, 1)),
        status="failed",
    )
    newer = fresh_run(
        "r2",
        failed("b", cost=0.25, used=tokens(2, 2)),  # a retry appends; both attempts cost money
        completed("b", cost=2.0, used=tokens(20, 2, cache_write=50)),
        skipped("c", cost=9.0, used=tokens(1, 1)),
        status="running",
    )
    state = make_state(newer, older)

    assert run_cost(older) == 1.5
    assert run_cost(newer) == 2.25
    assert run_tokens(older) == tokens(15, 2, cache_read=100)
    assert total_cost(state) == 3.75
    assert total_tokens(state) == tokens(38, 7, cache_read=100, cache_write=50)


def test_empty_state_totals_are_zero() -> None:
    state = HankweaveState()

    assert total_cost(state) == 0.0
    assert total_tokens(state) == TokenUsage()
    assert current_run_cost(state) == 0.0


def test_current_run_cost_covers_only_the_current_run_while_it_runs() -> None:
    s = Scenario(plan("a", "b"))
    s.start_run("r1").complete("r1", "a", cost=1.0).end_run("r1", "failed")
    s.start_run("r2", parent="r1", after="a").start_codon("r2", "b").spend("r2", "b", 0.4)

    assert current_run_cost(s.state) == 0.4
    assert total_cost(s.state) == 1.4


@pytest.mark.parametrize("ending", ["completed", "failed", "crashed"])
def test_current_run_cost_is_zero_once_the_run_ends(ending: str) -> None:
    s = Scenario(plan("a"))
    s.start_run("r1").start_codon("r1", "a").spend("r1", "a", 0.4)
    if ending == "completed":
        s.finish("r1", "a")
    elif ending == "failed":
        s.abort("r1", "a")
    s.end_run("r1", ending)  # a crash fails the in-flight codon with what it spent

    assert current_run_cost(s.state) == 0.0
    assert total_cost(s.state) == 0.4


def test_costs_built_by_the_reducer_follow_each_outcome() -> None:
    s = Scenario(plan("a", "b", "c"))
    s.start_run("r1")
    s.complete("r1", "a", cost=1.0, used=tokens(100, 10))
    s.fail("r1", "b", cost=0.5, used=tokens(50, 5))
    s.skip("r1", "c", cost=0.25, messages=2)

    run = s.state.runs[0]
    assert [codon_cost(c) for c in run.codons] == [1.0, 0.5, 0.0]
    assert run_cost(run) == 1.5
    assert run_tokens(run) == tokens(150, 15)


def test_resulting_state_summary_has_the_state_transition_event_shape() -> None:
    s = Scenario(plan("a", "b"))
    s.start_run("r1").complete("r1", "a", cost=1.0).end_run("r1", "completed")
    s.start_run("r2", parent="r1", after="a").start_codon("r2", "b").spend("r2", "b", 0.5)

    assert resulting_state_summary(s.state) == {
        "currentRunId": "r2",
        "runCount": 2,
        "totalCost": 1.5,
        "currentRunCost": 0.5,
    }
    assert resulting_state_summary(HankweaveState()) == {
        "currentRunId": None,
        "runCount": 0,
        "totalCost": 0.0,
        "currentRunCost": 0.0,
    }


@settings(max_examples=300)
@given(prefix=HAPPY_PATHS, transitions=st.lists(TRANSITIONS, max_size=40))
def test_the_ledger_gives_exactly_the_totals_after_every_transition(prefix, transitions):
    ledger = CostLedger()
    state = HankweaveState()
    for transition in [*prefix, *transitions]:
        try:
            state = apply_transition(state, transition)
        except (InvalidTransitionError, MetadataValidationError):
            continue
        assert ledger.total(state) == total_cost(state)
        assert resulting_state_summary(state, ledger) == resulting_state_summary(state)
