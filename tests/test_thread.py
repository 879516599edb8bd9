"""The execution thread: history across continuation runs, failure, next codon, sessions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hankweave.state.thread as thread_module
from hankweave.state.reducer import apply_transition
from hankweave.state.thread import (
    ExecutionThread,
    ThreadTracker,
    analyze_execution_thread,
    find_continuation_session_id,
    get_next_codon_id,
)
from hankweave.state.transitions import (
    CodonStarted,
    CodonStartedData,
    InvalidTransitionError,
    MetadataValidationError,
)
from hankweave.state.types import HankweaveState, LoopContext
from tests import transition_builders as tb
from tests.state_builders import (
    Scenario,
    completed,
    continuation_run,
    failed,
    fresh_run,
    make_state,
    pending,
    plan,
    running,
    skipped,
)
from tests.test_state_properties import HAPPY_PATHS, TRANSITIONS

ABC = plan("a", "b", "c")


def ids(thread: ExecutionThread) -> list[tuple[str, str, str]]:
    """(codon id, status, run id) of every thread codon, newest first."""
    return [(tc.codon.codon_id, tc.codon.status, tc.run_id) for tc in thread.codons]


# ----- the walk -----


def test_no_runs_gives_an_empty_thread_that_is_not_failed() -> None:
    thread = analyze_execution_thread(HankweaveState(execution_plan=ABC))

    assert thread == ExecutionThread()
    assert not thread.failed
    assert get_next_codon_id(thread) is None


def test_fresh_run_lists_its_codons_newest_first_and_continues_with_the_plan_successor() -> None:
    state = make_state(
        fresh_run("r1", completed("a"), completed("b"), status="running"), plan_entries=ABC
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [("b", "completed", "r1"), ("a", "completed", "r1")]
    assert [tc.codon_index_in_run for tc in thread.codons] == [1, 0]
    assert [tc.run_index for tc in thread.codons] == [0, 0]
    assert thread.total_runs == 1
    assert not thread.has_running_codon
    assert not thread.failed
    assert get_next_codon_id(thread) == "c"


def test_fresh_run_without_codons_starts_at_the_first_plan_codon() -> None:
    state = make_state(fresh_run("r1", status="running"), plan_entries=ABC)

    assert analyze_execution_thread(state).next_codon_id == "a"


def test_run_context_is_copied_onto_each_thread_codon() -> None:
    state = make_state(
        fresh_run("r1", completed("a", previous_session=None), status="running"),
        plan_entries=ABC,
    )

    (tc,) = analyze_execution_thread(state).codons

    run = state.runs[0]
    assert (tc.run_status, tc.run_start_time, tc.run_end_time, tc.git_branch) == (
        "running",
        run.start_time,
        None,
        "run-r1",
    )
    assert tc.codon is run.codons[0]


def test_continuation_keeps_the_parent_codons_through_after_codon() -> None:
    # The seed's kill-and-resume capture: the resumed run reruns write-second.
    state = make_state(
        continuation_run(
            "r2",
            completed("write-second", previous_session="sess-1"),
            parent="r1",
            after="write-line",
            reason="rollback",
        ),
        fresh_run("r1", completed("write-line"), failed("write-second"), status="failed"),
        plan_entries=plan("write-line", "write-second"),
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [("write-second", "completed", "r2"), ("write-line", "completed", "r1")]
    assert [(tc.run_index, tc.codon_index_in_run) for tc in thread.codons] == [(0, 0), (1, 0)]
    assert thread.codons[0].continuation_session_id == "sess-1"
    assert thread.codons[1].continuation_session_id is None
    assert thread.total_runs == 2
    assert not thread.failed
    assert thread.next_codon_id is None  # every codon is done


def test_rig_setup_continuation_excludes_the_codon_that_runs_again() -> None:
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after="b", sha="rig-b"),
        fresh_run("r1", completed("a"), failed("b", rig="rig-b"), status="failed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [("a", "completed", "r1")]
    assert not thread.failed
    assert thread.next_codon_id == "b"


def test_continuation_from_the_beginning_keeps_no_parent_codons() -> None:
    state = make_state(
        continuation_run("r2", completed("a"), status="running", parent="r1", after=None),
        fresh_run("r1", completed("a"), failed("b"), status="failed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [("a", "completed", "r2")]
    assert thread.total_runs == 2
    assert thread.next_codon_id == "b"


def test_missing_parent_ends_the_chain() -> None:
    state = make_state(
        continuation_run("r2", completed("b"), status="running", parent="gone", after="a"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [("b", "completed", "r2")]
    assert thread.total_runs == 1
    assert thread.next_codon_id == "c"


def test_after_codon_absent_from_the_parent_keeps_all_parent_codons() -> None:
    state = make_state(
        continuation_run("r2", completed("c"), status="running", parent="r1", after="zzz"),
        fresh_run("r1", completed("a"), completed("b")),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [
        ("c", "completed", "r2"),
        ("b", "completed", "r1"),
        ("a", "completed", "r1"),
    ]


def test_continuation_cycle_visits_each_run_once() -> None:
    state = make_state(
        continuation_run("r2", completed("b"), status="running", parent="r1", after="a"),
        continuation_run("r1", completed("a"), parent="r2", after="b"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [("b", "completed", "r2"), ("a", "completed", "r1")]
    assert thread.total_runs == 2


def test_target_run_starts_the_walk_at_an_older_run() -> None:
    state = make_state(
        continuation_run("r2", completed("b"), status="running", parent="r1", after="a"),
        fresh_run("r1", completed("a"), failed("b"), status="failed"),
        plan_entries=ABC,
    )

    older = analyze_execution_thread(state, target_run_id="r1")

    assert ids(older) == [("b", "failed", "r1"), ("a", "completed", "r1")]
    assert older.failed
    assert analyze_execution_thread(state, target_run_id="nope") == ExecutionThread()


# ----- failure and running codons -----


def test_latest_codon_failed_fails_the_thread() -> None:
    state = make_state(
        fresh_run("r1", completed("a"), failed("b"), status="failed"), plan_entries=ABC
    )

    thread = analyze_execution_thread(state)

    assert thread.failed
    assert thread.next_codon_id is None


def test_run_crashed_with_an_in_flight_codon_fails_the_thread() -> None:
    state = make_state(
        fresh_run("r1", completed("a"), running("b"), status="crashed"), plan_entries=ABC
    )

    thread = analyze_execution_thread(state)

    assert thread.failed
    assert thread.has_running_codon
    assert thread.next_codon_id is None


@pytest.mark.parametrize("status", ["preparing", "starting", "initializing"])
def test_every_unfinished_status_counts_as_a_running_codon(status: str) -> None:
    state = make_state(
        fresh_run("r1", completed("a"), pending("b", status), status="running"), plan_entries=ABC
    )

    thread = analyze_execution_thread(state)

    assert thread.has_running_codon
    assert not thread.failed  # its run is still running
    assert thread.next_codon_id is None


def test_historical_failed_run_does_not_fail_the_thread() -> None:
    # r1 was marked failed by a shutdown after its codons had completed.
    state = make_state(
        continuation_run("r2", completed("b"), status="running", parent="r1", after="a"),
        fresh_run("r1", completed("a"), status="failed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert thread.codons[-1].run_status == "failed"
    assert not thread.failed
    assert thread.next_codon_id == "c"


def test_failed_start_run_has_no_next_codon_even_when_its_codons_completed() -> None:
    state = make_state(fresh_run("r1", completed("a"), status="failed"), plan_entries=ABC)

    thread = analyze_execution_thread(state)

    assert not thread.failed
    assert thread.next_codon_id is None


# ----- next codon of an empty continuation run -----


def test_empty_continuation_from_the_beginning_starts_at_the_first_plan_codon() -> None:
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after=None),
        fresh_run("r1", completed("a"), failed("b"), status="failed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert thread.codons == []
    assert thread.next_codon_id == "a"


def test_empty_rig_setup_continuation_reruns_the_same_codon() -> None:
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after="a", sha="rig-a"),
        fresh_run("r1", failed("a", rig="rig-a"), status="failed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert thread.codons == []
    assert thread.next_codon_id == "a"


def test_empty_normal_continuation_runs_the_codon_after_after_codon() -> None:
    # The parent contributes nothing (it recorded no codon), so the plan position of
    # afterCodon alone decides.
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after="a"),
        fresh_run("r1", status="crashed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert thread.codons == []
    assert thread.next_codon_id == "b"


def test_empty_continuation_after_a_kept_parent_codon_runs_its_successor() -> None:
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after="a"),
        fresh_run("r1", completed("a"), failed("b"), status="failed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [("a", "completed", "r1")]
    assert thread.total_runs == 2
    assert thread.next_codon_id == "b"


def test_empty_continuation_of_a_missing_run_has_no_next_codon() -> None:
    state = make_state(
        continuation_run("r2", status="running", parent="gone", after="a"), plan_entries=ABC
    )

    assert analyze_execution_thread(state).next_codon_id is None


def test_last_plan_codon_done_leaves_nothing_to_run() -> None:
    state = make_state(
        fresh_run("r1", completed("a"), completed("b"), completed("c"), status="running"),
        plan_entries=ABC,
    )

    assert analyze_execution_thread(state).next_codon_id is None


# ----- retries -----


def test_retried_after_codon_uses_its_last_record_in_the_parent() -> None:
    # b failed once, was retried in the same run and completed; then c failed.  The original
    # kept r1 only up to the first (failed) b, so this thread looked failed.
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after="b"),
        fresh_run("r1", completed("a"), failed("b"), completed("b"), failed("c"), status="failed"),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    assert ids(thread) == [
        ("b", "completed", "r1"),
        ("b", "failed", "r1"),
        ("a", "completed", "r1"),
    ]
    assert thread.codons[0].codon_index_in_run == 2
    assert not thread.failed
    assert thread.next_codon_id == "c"


def test_rig_setup_continuation_of_a_retried_codon_matches_its_last_record() -> None:
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after="b", sha="rig-b2"),
        fresh_run(
            "r1",
            completed("a"),
            failed("b", rig="rig-b1"),
            failed("b", rig="rig-b2"),
            status="failed",
        ),
        plan_entries=ABC,
    )

    thread = analyze_execution_thread(state)

    # The last attempt (index 2) is the one that reruns; earlier history stays.
    assert [tc.codon_index_in_run for tc in thread.codons] == [1, 0]


# ----- validated checkpoints -----


def test_validated_checkpoints_keep_only_shas_the_store_confirms() -> None:
    state = make_state(
        fresh_run(
            "r1",
            completed("a", rig="rig-a", sha="done-a"),
            failed("b", rig="rig-b", error_sha="err-b"),
            skipped("c", sha="skip-c"),
            completed("d", sha="done-d"),
            status="failed",
        ),
        plan_entries=plan("a", "b", "c", "d"),
    )
    store = {
        sha: {
            "message": f"checkpoint {sha}",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "branch": "run-r1",
        }
        for sha in ("rig-a", "done-a", "err-b", "skip-c")
    }

    thread = analyze_execution_thread(state, checkpoint_data=store)

    by_codon = {
        tc.codon.codon_id: [(cp.type, cp.sha) for cp in tc.validated_checkpoints]
        for tc in thread.codons
    }
    assert by_codon == {
        "a": [("rig-setup", "rig-a"), ("completed", "done-a")],
        "b": [("error", "err-b")],  # rig-b is not in the store
        "c": [("skipped", "skip-c")],
        "d": [],  # done-d is recorded in state but gone from the store
    }
    first = thread.codons[-1].validated_checkpoints[0]
    assert (first.message, first.timestamp, first.branch) == (
        "checkpoint rig-a",
        "2026-01-01T00:00:00.000Z",
        "run-r1",
    )


def test_validated_checkpoints_are_empty_without_checkpoint_data() -> None:
    state = make_state(fresh_run("r1", completed("a", rig="rig-a")), plan_entries=ABC)

    (tc,) = analyze_execution_thread(state).codons

    assert tc.validated_checkpoints == []


def test_terminal_checkpoint_counts_only_for_the_matching_status() -> None:
    # A running record that already carries an unknown completionCheckpoint key (kept as an
    # extra field) gets no "completed" checkpoint: the codon has not completed.
    record = running("a").model_copy(update={"completion_checkpoint": "done-a"})
    state = make_state(fresh_run("r1", record, status="running"), plan_entries=ABC)
    store = {"done-a": {"message": "m", "timestamp": "t", "branch": "b"}}

    (tc,) = analyze_execution_thread(state, checkpoint_data=store).codons

    assert tc.validated_checkpoints == []


# ----- continue-previous sessions -----

RESUMING = plan("a", "b", "c", continue_previous=["b"])


def test_continue_previous_resumes_the_newest_completed_record_with_a_session() -> None:
    state = make_state(
        continuation_run(
            "r2", completed("a", session="new"), status="running", parent="r1", after="a"
        ),
        fresh_run("r1", completed("a", session="old"), status="failed"),
        plan_entries=RESUMING,
    )

    assert find_continuation_session_id(analyze_execution_thread(state), "b", state) == "new"


def test_continue_previous_ignores_sessions_outside_the_thread() -> None:
    # r2 started from the beginning, so r1's completed "a" is not part of the thread.
    state = make_state(
        continuation_run("r2", status="running", parent="r1", after=None),
        fresh_run("r1", completed("a", session="old"), status="failed"),
        plan_entries=RESUMING,
    )

    assert find_continuation_session_id(analyze_execution_thread(state), "b", state) is None


def test_continue_previous_skips_a_completed_record_without_a_session() -> None:
    state = make_state(
        continuation_run(
            "r2", completed("a", session=None), status="running", parent="r1", after="a"
        ),
        fresh_run("r1", completed("a", session="old"), status="failed"),
        plan_entries=RESUMING,
    )

    assert find_continuation_session_id(analyze_execution_thread(state), "b", state) == "old"


def test_continue_previous_accepts_a_skipped_codon_that_produced_messages() -> None:
    state = make_state(
        fresh_run("r1", skipped("a", messages=3, session="sess-a"), status="running"),
        plan_entries=RESUMING,
    )

    assert find_continuation_session_id(analyze_execution_thread(state), "b", state) == "sess-a"


def test_continue_previous_rejects_a_skipped_codon_without_messages() -> None:
    state = make_state(
        fresh_run("r1", skipped("a", messages=0, session="sess-a"), status="running"),
        plan_entries=RESUMING,
    )

    assert find_continuation_session_id(analyze_execution_thread(state), "b", state) is None


def test_continue_previous_rejects_a_failed_previous_codon() -> None:
    state = make_state(
        fresh_run("r1", failed("a", session="sess-a"), status="failed"), plan_entries=RESUMING
    )

    assert find_continuation_session_id(analyze_execution_thread(state), "b", state) is None


def test_codon_that_does_not_continue_previous_has_no_session() -> None:
    state = make_state(
        fresh_run("r1", completed("a"), completed("b", session="sess-b"), status="running"),
        plan_entries=RESUMING,
    )
    thread = analyze_execution_thread(state)

    assert find_continuation_session_id(thread, "c", state) is None
    assert find_continuation_session_id(thread, "not-in-plan", state) is None


def test_first_plan_codon_has_no_previous_session() -> None:
    state = make_state(
        fresh_run("r1", status="running"), plan_entries=plan("a", continue_previous=["a"])
    )

    assert find_continuation_session_id(analyze_execution_thread(state), "a", state) is None


# ----- reducer-built history -----


def test_thread_of_a_retry_chain_built_by_the_reducer() -> None:
    s = Scenario(ABC)
    s.start_run("r1").complete("r1", "a").fail("r1", "b").end_run("r1", "failed")
    s.start_run("r2", parent="r1", after="a", reason="retry").complete("r2", "b")

    thread = analyze_execution_thread(s.state)

    assert ids(thread) == [("b", "completed", "r2"), ("a", "completed", "r1")]
    assert thread.next_codon_id == "c"
    assert not thread.failed


# ----- scale -----


def test_long_chain_is_walked_once_without_searching_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    runs_count, per_run = 20, 500
    codon_ids = [f"c{i}" for i in range(runs_count * per_run)]
    runs = []
    for k in range(runs_count):
        records = [completed(cid) for cid in codon_ids[k * per_run : (k + 1) * per_run]]
        if k == 0:
            runs.append(fresh_run("r0", *records))
        else:
            runs.append(
                continuation_run(
                    f"r{k}", *records, parent=f"r{k - 1}", after=codon_ids[k * per_run - 1]
                )
            )
    runs[-1] = runs[-1].model_copy(update={"status": "running", "end_time": None})
    state = make_state(*reversed(runs), plan_entries=plan(*codon_ids, "last"))

    lookups = []
    real_last_record = thread_module.last_record

    def counting_last_record(run, codon_id):  # type: ignore[no-untyped-def]
        lookups.append(codon_id)
        return real_last_record(run, codon_id)

    def forbidden(*args: object) -> None:
        raise AssertionError("the analyzer must index runs once, not search them")

    monkeypatch.setattr(thread_module, "last_record", counting_last_record)
    monkeypatch.setattr(HankweaveState, "run_by_id", forbidden)

    thread = analyze_execution_thread(state)

    assert len(thread.codons) == runs_count * per_run
    assert [tc.codon.codon_id for tc in thread.codons] == codon_ids[::-1]
    assert thread.codons[0].run_index == 0 and thread.codons[-1].run_index == runs_count - 1
    assert thread.total_runs == runs_count
    assert thread.next_codon_id == "last"
    # One afterCodon lookup per parent run, none per codon.
    assert len(lookups) == runs_count - 1


# ----- the tracker: the same answers, at the cost of what changed -----


def _looped_start(codon: str, run: str, iteration: int) -> CodonStarted:
    return CodonStarted(data=CodonStartedData(
        run_id=run, codon_id=codon,
        loop_context=LoopContext(loop_id="L", iteration=iteration, codon_index_in_loop=0)))


TRACKED_TRANSITIONS = st.one_of(
    TRANSITIONS,
    st.builds(_looped_start, st.sampled_from(["a", "b"]), st.sampled_from(["r1", "r2", "r3"]),
              st.integers(0, 2)),
)


def _answers(thread: ExecutionThread) -> tuple[object, ...]:
    iterations = {(loop, i): [tc.codon for tc in thread.iteration_codons(loop, i)]
                  for loop in ("L",) for i in range(3)}
    checkpoints = [[(c.type, c.sha) for c in tc.validated_checkpoints] for tc in thread.codons]
    return thread, iterations, checkpoints, thread.failed


@settings(max_examples=300)
@given(prefix=HAPPY_PATHS, transitions=st.lists(TRACKED_TRANSITIONS, max_size=40),
       confirmed_late=st.integers(0, 40))
def test_the_tracker_answers_as_a_full_analysis_after_every_transition(
        prefix, transitions, confirmed_late) -> None:
    data: dict[str, dict[str, str]] = {"1" * 40: {"message": "m", "timestamp": "t",
                                                  "branch": "b"}}
    tracker = ThreadTracker()
    state = HankweaveState(execution_plan=plan("a", "b", "a#0"))
    for step, transition in enumerate([*prefix, *transitions]):
        try:
            state = apply_transition(state, transition)
        except (InvalidTransitionError, MetadataValidationError):
            continue
        if step == confirmed_late:  # a checkpoint the store confirms later on
            data["2" * 40] = {"message": "m2", "timestamp": "t2", "branch": "b"}
        assert _answers(tracker.thread(state, data)) == _answers(
            analyze_execution_thread(state, data))


def test_a_stale_tracked_thread_still_answers_for_its_own_state() -> None:
    tracker = ThreadTracker()
    state = apply_transition(apply_transition(HankweaveState(), tb.run_started("r1")),
                             _looped_start("a", "r1", 0))
    before = tracker.thread(state)
    later = apply_transition(apply_transition(state, tb.moved("a", "preparing", "skipped", run_id="r1")),
                             _looped_start("b", "r1", 0))
    tracker.thread(later)

    assert [tc.codon.codon_id for tc in before.iteration_codons("L", 0)] == ["a"]


def test_a_record_that_changes_is_listed_once_in_its_iteration() -> None:
    tracker = ThreadTracker()
    state = apply_transition(apply_transition(HankweaveState(), tb.run_started("r1")),
                             _looped_start("a", "r1", 1))
    tracker.thread(state)
    moves = [*tb.lifecycle_to("a", "running", run_id="r1")[1:],
             tb.moved("a", "running", "completed", run_id="r1")]
    for transition in moves:
        state = apply_transition(state, transition)
        tracker.thread(state)

    (only,) = tracker.thread(state).iteration_codons("L", 1)
    assert only.codon.status == "completed"


def test_the_tracker_builds_only_the_thread_codons_of_records_that_changed(monkeypatch) -> None:
    built: list[int] = []
    real_segment = thread_module._segment

    def counting_segment(run, indices, run_index, checkpoint_data):  # type: ignore[no-untyped-def]
        for tc in real_segment(run, indices, run_index, checkpoint_data):
            built.append(tc.codon_index_in_run)
            yield tc

    monkeypatch.setattr(thread_module, "_segment", counting_segment)
    tracker = ThreadTracker()
    state = apply_transition(HankweaveState(), tb.run_started("r1"))
    for i in range(300):
        for transition in [_looped_start(f"a#{i}", "r1", i),
                           tb.moved(f"a#{i}", "preparing", "skipped", run_id="r1")]:
            state = apply_transition(state, transition)
            tracker.thread(state)

    # One thread codon when a record is added, one when it changes: none for the history.
    assert len(built) == 600
    assert len(tracker.thread(state).codons) == 300
