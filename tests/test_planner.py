"""The execution plan: initial plan, lazy loop expansion and the questions asked about entries."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hankweave.config.hank import HankFile, parse_hank
from hankweave.runtime.planner import (
    Expansion,
    PlanError,
    base_codon_id,
    build_initial_plan,
    checkpoint_patterns_through,
    expand_after,
    is_context_exceeded_acceptable,
    loop_of,
    previous_plan_entry,
    validate_plan,
)
from hankweave.state.types import ExecutionCodonEntry, PlanCodon, plan_positions


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": codon_id,
        "name": codon_id.title(),
        "promptText": f"Do {codon_id}.",
        "model": "sonnet",
        "continuationMode": "fresh",
        **fields,
    }


def loop(loop_id: str, codons: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "type": "loop",
        "id": loop_id,
        "name": loop_id.title(),
        "terminateOn": {"type": "iterationLimit", "limit": 3},
        "codons": codons,
        **fields,
    }


def hank_of(*items: dict[str, Any]) -> HankFile:
    return parse_hank({"hank": list(items)})


def ids(plan: list[ExecutionCodonEntry]) -> list[str]:
    return [entry.codon_id for entry in plan]


def finish(
    plan: list[ExecutionCodonEntry],
    hank: HankFile,
    codon_id: str,
    *,
    context_exceeded: bool = False,
    budget_exceeded: bool = False,
) -> Expansion:
    return expand_after(
        plan,
        hank,
        codon_id,
        outcome="completed",
        context_exceeded=context_exceeded,
        budget_exceeded=budget_exceeded,
    )


def run_loop_to_end(hank: HankFile) -> tuple[list[str], Expansion]:
    """Finish every loop entry in plan order until the plan stops growing."""
    plan = build_initial_plan(hank)
    position = 0
    last: Expansion | None = None
    while position < len(plan):
        entry = plan[position]
        if entry.loop_context is not None:
            last = finish(plan, hank, entry.codon_id)
            plan = last.plan
        position += 1
    assert last is not None
    return ids(plan), last


# ----- initial plan -----


def test_initial_plan_has_top_level_codons_and_only_iteration_zero_of_each_loop() -> None:
    hank = hank_of(
        codon("setup"),
        loop("review", [codon("draft"), codon("critique")], budget={"maxDollars": 2}),
        codon("publish"),
    )

    plan = build_initial_plan(hank)

    assert ids(plan) == ["setup", "draft#0", "critique#0", "publish"]
    assert plan[0].loop_context is None
    context = plan[2].loop_context
    assert context is not None
    assert (context.loop_id, context.iteration, context.codon_index_in_loop) == ("review", 0, 1)
    assert context.loop_budget is not None and context.loop_budget.max_dollars == 2


def test_initial_plan_stores_the_codon_config_by_json_name() -> None:
    hank = hank_of(codon("setup", checkpointedFiles=["src/**"]))

    dumped = build_initial_plan(hank)[0].model_dump(by_alias=True, exclude_none=True)

    assert dumped["codonId"] == "setup"
    assert dumped["codon"]["checkpointedFiles"] == ["src/**"]
    assert dumped["codon"]["continuationMode"] == "fresh"
    assert "loopContext" not in dumped


def test_initial_plan_uses_the_given_plan_codon_builder() -> None:
    hank = hank_of(codon("setup"), loop("review", [codon("draft")]))

    plan = build_initial_plan(
        hank, lambda c: PlanCodon(id=c.id, name=c.name, model={"modelId": "resolved"})
    )

    assert [entry.codon.model for entry in plan] == [{"modelId": "resolved"}] * 2


def test_validate_plan_rejects_duplicate_runtime_ids() -> None:
    plan = build_initial_plan(hank_of(codon("a"), codon("b")))
    plan.append(plan[0].model_copy())

    with pytest.raises(PlanError, match="Duplicate codon IDs after loop expansion: a"):
        validate_plan(plan)


def test_validate_plan_rejects_a_loop_context_pointing_nowhere() -> None:
    hank = hank_of(loop("review", [codon("draft")]))
    plan = build_initial_plan(hank)
    assert plan[0].loop_context is not None
    plan[0].loop_context.codon_index_in_loop = 5

    with pytest.raises(PlanError, match="out of bounds for loop review"):
        validate_plan(plan, hank)


# ----- lazy expansion -----


def test_iteration_limit_three_runs_iterations_zero_one_and_two() -> None:
    hank = hank_of(loop("review", [codon("draft"), codon("critique")]), codon("publish"))

    final_ids, last = run_loop_to_end(hank)

    assert final_ids == [
        "draft#0",
        "critique#0",
        "draft#1",
        "critique#1",
        "draft#2",
        "critique#2",
        "publish",
    ]
    assert last.terminated_loop_id == "review"
    assert last.termination_reason == "iteration_limit"
    assert last.is_final


def test_last_codon_of_an_iteration_inserts_the_next_iteration_right_after_it() -> None:
    hank = hank_of(loop("review", [codon("draft"), codon("critique")]), codon("publish"))
    plan = build_initial_plan(hank)

    expansion = finish(plan, hank, "critique#0")

    assert ids(expansion.plan) == ["draft#0", "critique#0", "draft#1", "critique#1", "publish"]
    assert expansion.iteration_completed
    assert not expansion.is_final
    assert expansion.terminated_loop_id is None
    next_context = expansion.plan[2].loop_context
    assert next_context is not None and next_context.iteration == 1


def test_mid_iteration_codon_leaves_the_plan_unchanged_and_the_loop_running() -> None:
    hank = hank_of(loop("review", [codon("draft"), codon("critique")]))
    plan = build_initial_plan(hank)

    expansion = finish(plan, hank, "draft#0")

    assert expansion.plan is plan
    assert expansion.terminated_loop_id is None
    assert not expansion.iteration_completed


def test_context_exceeded_ends_the_loop_and_drops_the_rest_of_the_iteration() -> None:
    hank = hank_of(
        loop(
            "grow",
            [codon("a", continuationMode="continue-previous"), codon("b")],
            terminateOn={"type": "contextExceeded"},
        ),
        codon("after"),
    )
    plan = build_initial_plan(hank)

    expansion = finish(plan, hank, "a#0", context_exceeded=True)

    assert ids(expansion.plan) == ["a#0", "after"]
    assert expansion.terminated_loop_id == "grow"
    assert expansion.termination_reason == "context_exceeded"
    assert expansion.iteration_completed and expansion.is_final


def test_context_exceeded_in_an_iteration_limit_loop_does_not_end_the_loop() -> None:
    hank = hank_of(loop("review", [codon("draft"), codon("critique")]))
    plan = build_initial_plan(hank)

    expansion = finish(plan, hank, "draft#0", context_exceeded=True)

    assert expansion.plan is plan
    assert expansion.terminated_loop_id is None


def test_context_exceeded_loop_keeps_iterating_until_the_context_runs_out() -> None:
    hank = hank_of(loop("grow", [codon("a")], terminateOn={"type": "contextExceeded"}))
    plan = build_initial_plan(hank)

    expansion = finish(plan, hank, "a#0")

    assert ids(expansion.plan) == ["a#0", "a#1"]
    assert expansion.terminated_loop_id is None


def test_exceeded_budget_ends_the_loop_and_drops_the_rest_of_the_iteration() -> None:
    hank = hank_of(loop("review", [codon("draft"), codon("critique")]), codon("publish"))
    plan = build_initial_plan(hank)

    expansion = finish(plan, hank, "draft#0", budget_exceeded=True)

    assert ids(expansion.plan) == ["draft#0", "publish"]
    assert expansion.terminated_loop_id == "review"
    assert expansion.termination_reason == "budget_exceeded"
    assert expansion.is_final


def test_loop_counts_as_terminated_only_when_none_of_its_entries_remain_later() -> None:
    # 0.10.0 reported termination after every non-last codon ("the plan did not grow"); the
    # 0.12 rule looks at what is left of the loop.
    hank = hank_of(
        loop(
            "review",
            [codon("draft"), codon("critique")],
            terminateOn={"type": "iterationLimit", "limit": 1},
        )
    )
    plan = build_initial_plan(hank)

    after_first = finish(plan, hank, "draft#0")
    after_last = finish(plan, hank, "critique#0")

    assert after_first.terminated_loop_id is None
    assert after_last.terminated_loop_id == "review"
    assert after_last.termination_reason == "iteration_limit"


def test_failed_ignored_codon_expands_like_a_completed_one() -> None:
    hank = hank_of(loop("review", [codon("draft")]))
    plan = build_initial_plan(hank)

    expansion = expand_after(
        plan,
        hank,
        "draft#0",
        outcome="failed-ignored",
        context_exceeded=False,
        budget_exceeded=False,
    )

    assert ids(expansion.plan) == ["draft#0", "draft#1"]
    assert expansion.iteration_completed


def test_expansion_is_idempotent_for_the_same_codon() -> None:
    hank = hank_of(loop("review", [codon("draft")]))
    plan = finish(build_initial_plan(hank), hank, "draft#0").plan

    again = finish(plan, hank, "draft#0")

    assert ids(again.plan) == ["draft#0", "draft#1"]
    validate_plan(again.plan, hank)


def test_next_iteration_copies_the_plan_codons_of_the_finished_one() -> None:
    hank = hank_of(loop("review", [codon("draft")]))
    plan = build_initial_plan(hank, lambda c: PlanCodon(id=c.id, model={"modelId": "resolved"}))

    expansion = finish(plan, hank, "draft#0")

    assert expansion.plan[1].codon.model == {"modelId": "resolved"}
    assert expansion.plan[1].codon is not plan[0].codon


def test_top_level_codon_gives_no_loop_news() -> None:
    hank = hank_of(codon("setup"))
    plan = build_initial_plan(hank)

    expansion = finish(plan, hank, "setup")

    assert expansion == Expansion(plan=plan)


def test_expansion_of_an_unknown_codon_is_an_error() -> None:
    hank = hank_of(codon("setup"))

    with pytest.raises(PlanError, match="Codon not found in plan: nope"):
        finish(build_initial_plan(hank), hank, "nope")


# ----- questions about entries -----


def test_checkpoint_patterns_through_unions_earlier_entries_in_plan_order() -> None:
    hank = hank_of(
        codon("setup", checkpointedFiles=["src/**", "README.md"]),
        loop("review", [codon("draft", checkpointedFiles=["drafts/**", "src/**"])]),
        codon("publish", checkpointedFiles=["dist/**"]),
    )
    plan = build_initial_plan(hank)

    assert checkpoint_patterns_through(plan, "publish", include_self=False) == [
        "src/**",
        "README.md",
        "drafts/**",
    ]
    assert checkpoint_patterns_through(plan, "publish", include_self=True)[-1] == "dist/**"
    assert checkpoint_patterns_through(plan, "setup", include_self=False) == []


def test_checkpoint_patterns_through_counts_the_loop_codon_itself() -> None:
    hank = hank_of(loop("review", [codon("draft", checkpointedFiles=["drafts/**"])]))
    plan = build_initial_plan(hank)

    assert checkpoint_patterns_through(plan, "draft#0", include_self=True) == ["drafts/**"]


def test_previous_plan_entry_crosses_iterations_and_loop_boundaries() -> None:
    hank = hank_of(codon("setup"), loop("review", [codon("draft"), codon("critique")]))
    plan = finish(build_initial_plan(hank), hank, "critique#0").plan

    previous_of_first = previous_plan_entry(plan, "draft#0")
    previous_of_second_iteration = previous_plan_entry(plan, "draft#1")

    assert previous_of_first is not None and previous_of_first.codon_id == "setup"
    assert previous_of_second_iteration is not None
    assert previous_of_second_iteration.codon_id == "critique#0"
    assert previous_plan_entry(plan, "setup") is None


def test_base_codon_id_strips_only_the_iteration_suffix() -> None:
    assert base_codon_id("review#3") == "review"
    assert base_codon_id("review") == "review"
    assert base_codon_id("a#b#12") == "a#b"


def test_loop_of_finds_top_level_loops_only() -> None:
    hank = hank_of(codon("setup"), loop("review", [codon("draft")]))

    found = loop_of(hank, "review")

    assert found is not None and found.id == "review"
    assert loop_of(hank, "setup") is None


@pytest.mark.parametrize(
    ("items", "codon_id", "acceptable"),
    [
        ([codon("solo", exhaustWithPrompt="Go on.")], "solo", True),
        ([codon("solo")], "solo", False),
        (
            [
                loop(
                    "grow",
                    [codon("a", continuationMode="continue-previous")],
                    terminateOn={"type": "contextExceeded"},
                )
            ],
            "a#0",
            True,
        ),
        ([loop("review", [codon("a", exhaustWithPrompt="Go on.")])], "a#0", True),
        ([loop("review", [codon("a")])], "a#0", False),
    ],
    ids=[
        "top-level-exhaust",
        "top-level-plain",
        "context-exceeded-loop",
        "loop-codon-exhaust-quirk-16-fixed",
        "iteration-limit-loop-plain",
    ],
)
def test_context_exceeded_acceptable(
    items: list[dict[str, Any]], codon_id: str, acceptable: bool
) -> None:
    hank = hank_of(*items)
    plan = build_initial_plan(hank)
    entry = next(e for e in plan if e.codon_id == codon_id)

    assert is_context_exceeded_acceptable(hank, entry) is acceptable


def _entry(codon_id: str, patterns: list[str]) -> ExecutionCodonEntry:
    return ExecutionCodonEntry(codon_id=codon_id, codon=PlanCodon.model_validate(
        {"id": codon_id, "checkpointedFiles": patterns}))


PATTERNS = st.lists(st.sampled_from(["a/**", "b/**", "c.md", "d/*"]), max_size=3)


@settings(max_examples=200)
@given(edits=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.lists(PATTERNS,
                                                                                  max_size=3),
                                st.integers(0, 30)), min_size=1, max_size=12))
def test_checkpoint_patterns_through_a_plan_that_changes_equal_a_fresh_union(edits) -> None:
    # Plans are spliced as the reducer splices them (shared entries stay the same objects),
    # and each is asked about one entry: the answer is the union over the entries before it.
    plan: list[ExecutionCodonEntry] = []
    made = 0
    for at, remove, inserted, asked in edits:
        at = min(at, len(plan))
        new = []
        for patterns in inserted:
            new.append(_entry(f"c{made}", patterns))
            made += 1
        plan = [*plan[:at], *new, *plan[at + remove:]]
        if not plan:
            continue
        target = plan[min(asked, len(plan) - 1)].codon_id
        position = next(i for i, e in enumerate(plan) if e.codon_id == target)
        expected: list[str] = []
        for entry in plan[:position + 1]:
            for pattern in entry.codon.model_extra["checkpointedFiles"]:
                if pattern not in expected:
                    expected.append(pattern)
        assert checkpoint_patterns_through(plan, target, include_self=True) == expected


@settings(max_examples=200)
@given(edits=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3),
                                st.lists(st.sampled_from("abcdefgh"), max_size=4)),
                      min_size=1, max_size=12))
def test_plan_positions_of_a_plan_that_changes_equal_a_fresh_index(edits) -> None:
    plan: list[ExecutionCodonEntry] = []
    for at, remove, ids in edits:
        at = min(at, len(plan))
        plan = [*plan[:at], *(_entry(i, []) for i in ids), *plan[at + remove:]]
        expected: dict[str, int] = {}
        for position, entry in enumerate(plan):
            expected.setdefault(entry.codon_id, position)
        assert dict(plan_positions(plan)) == expected
