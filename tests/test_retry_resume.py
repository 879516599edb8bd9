"""Retries counted in state: a resumed run carries on with a codon's attempts; a shutdown during
a retry's wait ends it at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from hankweave.runtime.failures import resumed_attempt
from hankweave.state.reducer import CRASH_REASON
from hankweave.state.types import FailureReason, HankweaveState
from tests.runtime_harness import Project, codon
from tests.state_builders import completed, failed, fresh_run, make_state, running

OVERLOADED = {"result": "error", "errorText": "API Error: 529 overloaded"}
RETRIABLE = FailureReason(type="api-error", retriable=True, message="API server error: 529")


def attempt_of(record, number: int, reason: FailureReason | None = None):
    update: dict[str, object] = {"attempt": number if number > 1 else None}
    if reason is not None:
        update["failure_reason"] = reason
    return record.model_copy(update=update)


def resumed(state: HankweaveState, *, max_attempts: int = 3, on_failure: str = "retry",
            codon_id: str = "a", run_id: str = "r-new") -> int:
    return resumed_attempt(state, codon_id, run_id, on_failure=on_failure,  # type: ignore[arg-type]
                           max_attempts=max_attempts)


def with_new_run(*earlier) -> HankweaveState:
    return make_state(fresh_run("r-new", status="running"), *earlier)


# ----- where a resumed run's first attempt starts -----


def test_a_resumed_run_continues_after_a_failure_that_was_due_a_retry() -> None:
    state = with_new_run(fresh_run("r1", attempt_of(failed("a"), 2, RETRIABLE), status="crashed"))

    assert resumed(state) == 3


def test_retries_that_ran_out_start_a_new_series() -> None:
    state = with_new_run(fresh_run("r1", attempt_of(failed("a"), 4, RETRIABLE), status="failed"))

    assert resumed(state, max_attempts=3) == 1


def test_an_attempt_killed_or_stopped_before_it_ended_runs_again_under_its_number() -> None:
    crashed = attempt_of(failed("a"), 3, CRASH_REASON)
    stopped = attempt_of(failed("a"), 3, FailureReason(type="unknown", retriable=True,
                                                        message="Interrupted: SIGTERM"))
    unfinished = attempt_of(running("a"), 3)

    for record in (crashed, stopped, unfinished):
        assert resumed(with_new_run(fresh_run("r1", record, status="crashed"))) == 3


def test_a_failure_no_policy_retries_starts_at_one() -> None:
    permanent = with_new_run(fresh_run("r1", attempt_of(failed("a"), 2), status="failed"))
    aborted = with_new_run(fresh_run("r1", attempt_of(failed("a"), 2, RETRIABLE),
                                     status="failed"))

    assert resumed(permanent) == 1
    assert resumed(aborted, on_failure="abort") == 1


def test_only_the_codon_the_earlier_run_ended_on_continues() -> None:
    state = with_new_run(fresh_run("r1", attempt_of(failed("a"), 2, RETRIABLE), completed("b"),
                                   status="crashed"))

    assert resumed(state) == 1
    assert resumed(state, codon_id="b") == 1


def test_runs_without_records_are_passed_over() -> None:
    # A recovery run killed before its first codon started left no record.
    state = with_new_run(fresh_run("r2", status="crashed"),
                         fresh_run("r1", attempt_of(failed("a"), 2, RETRIABLE), status="crashed"))

    assert resumed(state) == 3


def test_a_codon_that_already_ran_in_this_run_starts_a_new_series() -> None:
    state = make_state(fresh_run("r-new", completed("b"), status="running"),
                       fresh_run("r1", attempt_of(failed("a"), 2, RETRIABLE), status="crashed"))

    assert resumed(state) == 1


# ----- the runtime -----


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path)


def test_the_attempt_number_is_recorded_on_each_retry(project) -> None:
    project.write_hank([codon("a", onFailure="retry", retryConfig={"delayMs": 0,
                                                                   "maxAttempts": 2})])
    outcome = project.run({"a": OVERLOADED})

    assert [r.attempt for r in outcome.records("a")] == [None, 2, 3]
    assert "Retrying codon a (attempt 3/3)" in outcome.infos()


def test_a_shutdown_during_the_retry_wait_ends_it_at_once_and_the_resume_continues_the_count(
        project) -> None:
    project.write_hank([codon("a", onFailure="retry",
                              retryConfig={"delayMs": 30_000, "maxAttempts": 2}), codon("b")])
    stopped_after: list[float] = []

    async def stop_in_the_wait(runtime) -> None:
        while not any(c.status == "failed" for run in runtime.state.runs for c in run.codons):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the retry's 30 s wait has begun
        stopped_after.append(time.monotonic())
        runtime.commands.request_shutdown("SIGTERM")

    first = project.run_controlled(stop_in_the_wait, {"a": OVERLOADED}, timeout=25)
    ended = time.monotonic()

    assert ended - stopped_after[0] < 15  # not the 30 s wait (room for a loaded machine)
    assert [r.attempt for r in first.records("a")] == [None]
    assert [c.status for c in first.state.runs[0].codons] == ["failed"]

    # The resumed run makes the retry that was due (attempt 2), then the last one (3), no more.
    project.write_hank([codon("a", onFailure="retry",
                              retryConfig={"delayMs": 0, "maxAttempts": 2}), codon("b")])
    second = project.run({"a": OVERLOADED}, yes=True)

    assert second.code == 1
    assert [r.attempt for r in second.records("a")] == [None, 2, 3]
    assert not any(r.codon_id == "b" for run in second.state.runs for r in run.codons)
