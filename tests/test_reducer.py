"""The reducer's documented semantics, one rule per test."""

from __future__ import annotations

import contextlib
from functools import reduce

import pytest

from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import (
    ExecutionPlanData,
    ExecutionPlanUpdated,
    InitialCheckpointData,
    InitialCheckpointSet,
    InvalidTransitionError,
)
from hankweave.state.types import (
    ExecutedSentinels,
    ExecutionCodonEntry,
    HankweaveState,
    PlanCodon,
    TokenUsage,
    dump_state,
    last_record,
)
from tests.transition_builders import (
    RUN,
    checkpoint,
    codon_started,
    costs,
    costs_set,
    extensions,
    final_cost,
    lifecycle_to,
    messages,
    moved,
    run_completed,
    run_crashed,
    run_failed,
    run_started,
    sentinels,
)


def play(*transitions, state: HankweaveState | None = None) -> HankweaveState:
    return reduce(apply_transition, transitions, state or HankweaveState())


def codon(state: HankweaveState, codon_id: str = "a", run_index: int = 0):
    return last_record(state.runs[run_index], codon_id)[1]


def running(codon_id: str = "a") -> HankweaveState:
    return play(run_started(), *lifecycle_to(codon_id, "running"))


# ----- costs and counters only while running -----


def test_cost_increments_accumulate_while_running():
    state = play(costs("a", 0.25, 100), costs("a", 0.5, 10), state=running())
    assert codon(state).current_cost == pytest.approx(0.75)
    assert codon(state).current_tokens.input_tokens == 110


def test_costs_updated_replaces_the_totals():
    state = play(costs("a", 0.25), costs_set("a", 2.0), state=running())
    assert codon(state).current_cost == 2.0
    assert codon(state).current_tokens == TokenUsage(input_tokens=7)


@pytest.mark.parametrize("status", ["preparing", "starting", "initializing", "completing-sentinels"])
def test_cost_updates_outside_running_change_nothing(status):
    state = play(run_started(), *lifecycle_to("a", status))
    for update in (costs("a", 1.0), costs_set("a", 1.0), final_cost("a", 1.0),
                   messages("a", 3), extensions("a", 2)):
        assert apply_transition(state, update) is state


def test_final_cost_overwrites_the_running_sums_and_becomes_final():
    state = play(costs("a", 0.25), final_cost("a", 0.9), moved("a", "running", "completed"),
                 state=running())
    done = codon(state)
    assert done.final_cost == 0.9
    assert done.final_tokens == TokenUsage(output_tokens=99)


def test_message_and_extension_counts_are_set_while_running():
    state = play(messages("a", 4), extensions("a", 2), state=running())
    assert codon(state).assistant_message_count == 4
    assert codon(state).extension_count == 2


def test_running_entry_zeroes_the_counters():
    entered = codon(running())
    assert (entered.current_cost, entered.assistant_message_count, entered.extension_count) == (
        0.0, 0, 0)
    assert entered.current_tokens == TokenUsage()


# ----- terminal records are immutable -----


@pytest.mark.parametrize("outcome", ["completed", "failed", "skipped"])
def test_updates_after_a_terminal_status_are_ignored(outcome):
    state = play(moved("a", "running", outcome), state=running())
    for late in (costs("a", 5.0), costs_set("a", 5.0), final_cost("a", 5.0), messages("a", 9),
                 extensions("a", 9)):
        assert apply_transition(state, late) is state


@pytest.mark.parametrize("outcome", ["completed", "failed", "skipped"])
def test_sentinel_updates_after_a_terminal_status_record_the_executed_sentinels(outcome):
    # The drain after codon.completed and the unload come after the final transition.
    state = play(moved("a", "running", outcome), state=running())
    done = codon(apply_transition(state, sentinels("a")))
    assert isinstance(done.sentinels, ExecutedSentinels)
    assert done.status == outcome


def test_a_terminal_record_cannot_transition_again():
    state = play(moved("a", "running", "completed"), state=running())
    with pytest.raises(InvalidTransitionError):
        apply_transition(state, moved("a", "completed", "failed"))


# ----- completion, failure, skip -----


def test_completed_keeps_the_running_fields_and_records_the_checkpoint():
    state = play(costs("a", 0.5), messages("a", 3), moved("a", "running", "completed",
                 checkpoint_sha="d" * 40), state=running())
    done = codon(state)
    assert done.status == "completed" and done.exit_code == 0
    assert done.completion_checkpoint == "d" * 40
    assert done.final_cost == 0.5 and done.current_cost == 0.5
    assert done.assistant_message_count == 3 and done.claude_session_id == "session-1"
    assert done.result_message_received is True and done.end_time


def test_initializing_can_complete_without_a_session():
    state = play(run_started(), *lifecycle_to("a", "initializing"),
                 moved("a", "initializing", "completed"))
    done = codon(state)
    assert done.status == "completed" and done.claude_session_id is None
    assert done.final_cost == 0.0


def test_completed_records_budget_exceeded():
    budget = {"currency": "cost", "limit": 1.0, "used": 1.02}
    state = play(moved("a", "running", "completed", budget_exceeded=budget), state=running())
    assert codon(state).budget_exceeded.model_dump() == budget


def test_failed_moves_current_costs_to_partial():
    state = play(costs("a", 0.4, 30), moved("a", "running", "failed", checkpoint_sha="e" * 40),
                 state=running())
    failed = codon(state)
    assert failed.partial_cost == pytest.approx(0.4)
    assert failed.partial_tokens.input_tokens == 30
    assert failed.error_checkpoint == "e" * 40
    assert failed.failure_reason.type == "api-error" and failed.exit_code == 1
    assert failed.failed_during == "running"


def test_skipped_copies_accumulated_tokens_into_partial_tokens():
    state = play(costs("a", 0.3, 50), messages("a", 2),
                 moved("a", "running", "skipped", checkpoint_sha="f" * 40), state=running())
    skipped = codon(state)
    assert skipped.partial_tokens.input_tokens == 50
    assert skipped.partial_cost == pytest.approx(0.3)
    assert skipped.assistant_message_count == 2
    assert skipped.skip_checkpoint == "f" * 40
    assert skipped.skipped_during == "running"


@pytest.mark.parametrize("outcome", ["completed", "failed", "skipped"])
def test_sentinels_loaded_becomes_executed_on_every_terminal_status(outcome):
    state = play(sentinels("a", 0.7), moved("a", "running", outcome), state=running())
    finished = dump_state(state).decode()
    assert '"executed"' in finished and '"loaded"' not in finished
    assert codon(state).sentinels.total_cost == 0.7


def test_sentinel_states_are_stored_while_the_codon_is_live():
    state = play(run_started(), *lifecycle_to("a", "starting"), sentinels("a", 0.1))
    assert codon(state).sentinels.loaded[0].id == "quality"


# ----- checkpoints -----


def test_rig_setup_checkpoint_is_back_patched_while_preparing_and_kept():
    state = play(run_started(), codon_started("a"), checkpoint("a", "rig-setup", "r" * 40),
                 moved("a", "preparing", "starting"))
    assert codon(state).rig_setup_checkpoint == "r" * 40


def test_rig_setup_checkpoint_from_the_starting_transition():
    state = play(run_started(), codon_started("a"),
                 moved("a", "preparing", "starting", checkpoint_sha="r" * 40))
    assert codon(state).rig_setup_checkpoint == "r" * 40


def test_rig_setup_checkpoint_is_ignored_once_running():
    state = running()
    assert apply_transition(state, checkpoint("a", "rig-setup", "r" * 40)) is state


@pytest.mark.parametrize(("kind", "status"), [("completed", "running"), ("error", "running"),
                                               ("skipped", "starting")])
def test_end_checkpoints_before_the_matching_status_are_ignored(kind, status):
    state = play(run_started(), *lifecycle_to("a", status))
    assert apply_transition(state, checkpoint("a", kind, "9" * 40)) is state


def test_error_checkpoint_fills_an_empty_field_on_a_failed_record():
    state = play(moved("a", "running", "failed"), checkpoint("a", "error", "9" * 40),
                 state=running())
    assert codon(state).error_checkpoint == "9" * 40


def test_end_checkpoint_never_overwrites_a_recorded_one():
    state = play(moved("a", "running", "completed", checkpoint_sha="1" * 40), state=running())
    assert apply_transition(state, checkpoint("a", "completed", "2" * 40)) is state


def test_initial_checkpoint_is_set():
    state = apply_transition(HankweaveState(), InitialCheckpointSet(
        data=InitialCheckpointData(sha="0" * 40)))
    assert state.initial_checkpoint == "0" * 40


# ----- runs -----


def test_runs_are_kept_newest_first_and_current_run_is_set():
    state = play(run_started("r1"), run_completed("r1"), run_started("r2"))
    assert [r.run_id for r in state.runs] == ["r2", "r1"]
    assert state.current_run_id == "r2"


@pytest.mark.parametrize(("end", "status"), [(run_completed, "completed"), (run_failed, "failed")])
def test_run_end_sets_end_time_and_clears_the_current_run(end, status):
    state = play(run_started(), end())
    assert state.runs[0].status == status and state.runs[0].end_time
    assert state.current_run_id is None


def test_a_finished_run_cannot_change():
    state = play(run_started(), run_completed())
    for late in (run_completed(), run_failed(), run_crashed(), codon_started("a")):
        with pytest.raises(InvalidTransitionError):
            apply_transition(state, late)


def test_only_one_run_can_be_running():
    with pytest.raises(InvalidTransitionError, match="still running"):
        play(run_started("r1"), run_started("r2"))


def test_run_ids_are_unique():
    with pytest.raises(InvalidTransitionError, match="already exists"):
        play(run_started("r1"), run_completed("r1"), run_started("r1"))


def test_unknown_run_is_refused():
    with pytest.raises(InvalidTransitionError, match="unknown run"):
        play(run_started("r1"), codon_started("a", run_id="nope"))


def test_run_crashed_fails_the_in_flight_codon():
    state = play(costs("a", 0.2), sentinels("a"), run_crashed(), state=running())
    run = state.runs[0]
    assert run.status == "crashed" and run.end_time == "2026-01-01T00:00:00.000Z"
    crashed = codon(state)
    assert crashed.status == "failed" and crashed.exit_code == -1
    assert crashed.failure_reason.model_dump(exclude_none=True) == {
        "type": "unknown", "retriable": False, "message": "Server crashed"}
    assert crashed.failed_during == "running" and crashed.partial_cost == pytest.approx(0.2)
    assert crashed.sentinels.executed
    assert state.current_run_id is None


def test_at_most_one_unfinished_codon_per_run():
    with pytest.raises(InvalidTransitionError, match="still preparing"):
        play(run_started(), codon_started("a"), codon_started("b"))


def test_fresh_run_carries_its_plan_and_a_plan_update_replaces_it():
    plan = [ExecutionCodonEntry(codon=PlanCodon(id="a"), codon_id="a")]
    started = run_started()
    started.data.execution_plan = plan
    state = play(started)
    assert [e.codon_id for e in state.execution_plan] == ["a"]
    added = [ExecutionCodonEntry(codon=PlanCodon(id="b"), codon_id="b")]
    state = apply_transition(state, ExecutionPlanUpdated(data=ExecutionPlanData(
        position=1, entries=added)))
    assert [e.codon_id for e in state.execution_plan] == ["a", "b"]


def test_a_plan_splice_inserts_and_removes_entries():
    plan = [ExecutionCodonEntry(codon=PlanCodon(id=c), codon_id=c) for c in "abcd"]
    started = run_started()
    started.data.execution_plan = plan
    state = play(started)
    new = [ExecutionCodonEntry(codon=PlanCodon(id="x"), codon_id="x")]
    state = apply_transition(state, ExecutionPlanUpdated(data=ExecutionPlanData(
        position=1, remove=2, entries=new)))
    assert [e.codon_id for e in state.execution_plan] == ["a", "x", "d"]
    with pytest.raises(InvalidTransitionError, match="outside"):
        apply_transition(state, ExecutionPlanUpdated(data=ExecutionPlanData(position=2,
                                                                            remove=5)))


def test_plan_splice_finds_the_smallest_change():
    from hankweave.state.reducer import plan_splice

    def entries(ids: str) -> list[ExecutionCodonEntry]:
        return [ExecutionCodonEntry(codon=PlanCodon(id=c), codon_id=c) for c in ids]

    position, remove, added = plan_splice(entries("abcd"), entries("abXYcd"))
    assert (position, remove, [e.codon_id for e in added]) == (2, 0, ["X", "Y"])
    position, remove, added = plan_splice(entries("abcd"), entries("ad"))
    assert (position, remove, added) == (1, 2, [])


# ----- retried codons: the last record counts -----


def retried() -> HankweaveState:
    """Codon "a" failed once in this run and is now running again."""
    return play(run_started(), *lifecycle_to("a", "running"), moved("a", "running", "failed"),
                *lifecycle_to("a", "running"))


def test_updates_act_on_the_last_attempt_not_the_first():
    state = play(costs_set("a", 0.5), costs("a", 0.25), messages("a", 2), extensions("a", 1),
                 state=retried())
    first, second = state.runs[0].codons
    assert first.status == "failed" and first.partial_cost == 0.0
    assert second.current_cost == 0.75 and second.assistant_message_count == 2
    assert second.extension_count == 1


def test_transitions_and_checkpoints_act_on_the_last_attempt():
    state = play(moved("a", "running", "skipped"), checkpoint("a", "skipped", "5" * 40),
                 state=retried())
    first, second = state.runs[0].codons
    assert first.status == "failed" and first.error_checkpoint is None
    assert second.status == "skipped" and second.skip_checkpoint == "5" * 40


# ----- purity -----


def test_the_reducer_never_mutates_its_input():
    state = play(costs("a", 0.1), sentinels("a"), state=running())
    before = dump_state(state)
    for transition in (costs("a", 1.0), messages("a", 5), moved("a", "running", "completed"),
                       run_crashed(), codon_started("b")):
        with contextlib.suppress(InvalidTransitionError):
            apply_transition(state, transition)
    assert dump_state(state) == before


def test_records_carry_the_run_and_codon_ids_from_the_transition():
    state = running()
    assert state.runs[0].run_id == RUN and codon(state).codon_id == "a"


@pytest.mark.parametrize("update", [
    {},
    {"current_cost": 1.5},
    {"current_cost": 2.0, "current_tokens": TokenUsage(input_tokens=3)},
    {"futureField": [1, 2]},  # not a field: an extra, as model_copy keeps it
])
def test_the_reducers_copy_is_model_copy(update):
    from hankweave.state.reducer import _evolve
    from hankweave.state.types import parse_state

    record = parse_state(
        '{"runs": [{"runId": "r", "runFolder": "f", "gitBranch": "b", "startTime": "t",'
        ' "serverPid": 1, "startingConditions": {"type": "fresh"}, "status": "running",'
        ' "codons": [{"codonId": "c", "status": "running", "startTime": "t", "claudePid": 1,'
        ' "claudeLogPath": "l", "claudeSessionId": "s", "currentCost": 0.5,'
        ' "keptUnknown": {"a": 1}}]}]}'
    ).runs[0].codons[0]
    expected, got = record.model_copy(update=update), _evolve(record, update)
    assert type(got) is type(expected)
    assert got.__dict__ == expected.__dict__
    assert got.model_extra == expected.model_extra
    assert got.model_fields_set == expected.model_fields_set
    assert got.model_dump_json() == expected.model_dump_json()
    assert record.model_extra == {"keptUnknown": {"a": 1}}  # the original is untouched
    assert "current_cost" not in update or record.current_cost == 0.5
