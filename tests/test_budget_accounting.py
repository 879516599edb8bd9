"""What a resumed run's budget starts from: the money and time earlier runs recorded, and the
limits a codon then gets (docs/behaviour.md §3.9, Accounting)."""

from __future__ import annotations

from datetime import UTC, datetime

from hankweave.config.hank import HankFile
from hankweave.runtime.allocation import Limit
from hankweave.runtime.budget import (
    RunBudget,
    crash_ended,
    loop_seconds,
    run_seconds,
    spending_of,
)
from hankweave.runtime.planner import build_initial_plan
from hankweave.state.reducer import CRASH_REASON
from hankweave.state.types import CodonExecution, LoopContext, Run
from tests.state_builders import T0, completed, failed, fresh_run, make_state, running, skipped, ts


def at(record: CodonExecution, start: int, end: int | None = None) -> CodonExecution:
    update: dict[str, object] = {"start_time": ts(start)}
    if end is not None:
        update["end_time"] = ts(end)
    return record.model_copy(update=update)


def in_loop(record: CodonExecution, iteration: int) -> CodonExecution:
    return record.model_copy(update={"loop_context": LoopContext(
        loop_id="L", iteration=iteration, codon_index_in_loop=0)})


def crashed(record: CodonExecution, detected: int) -> CodonExecution:
    """A record crash repair closed: failed "Server crashed" at the time the crash was found."""
    return failed(record.codon_id, cost=getattr(record, "current_cost", 0.0)).model_copy(
        update={"start_time": record.start_time, "end_time": ts(detected), "exit_code": -1,
                "failure_reason": CRASH_REASON,
                "claude_log_path": getattr(record, "claude_log_path", None)})


def timed(run: Run, start: int, end: int | None) -> Run:
    return run.model_copy(update={"start_time": ts(start),
                                  "end_time": ts(end) if end is not None else None})


def epoch(seconds: int) -> float:
    return (T0 - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() + seconds


def test_every_records_money_counts_failed_attempts_and_skips_included():
    state = make_state(
        fresh_run("r2", skipped("c", cost=0.25), completed("b", cost=0.75)),
        fresh_run("r1", completed("a", cost=1.0), failed("b", cost=0.5)))

    ledger = spending_of(state)

    assert ledger.total == 2.5
    assert (ledger.of("a"), ledger.of("b"), ledger.of("c")) == (1.0, 1.25, 0.25)


def test_a_finished_run_counts_from_its_start_to_its_end():
    run = timed(fresh_run("r1", at(completed("a"), 5, 30)), 0, 95)

    assert run_seconds(run) == 95


def test_a_crashed_run_counts_to_its_last_sign_of_life_not_to_when_the_crash_was_found():
    cut = crashed(at(running("b", cost=0.1), 35), detected=5000)
    run = timed(fresh_run("r1", at(completed("a"), 5, 30), cut, status="crashed"), 0, 5000)

    assert crash_ended(cut)
    assert run_seconds(run) == 35  # b started at 35; nothing says it ran longer
    # Its agent log was written until 42 s: that is when the agent was last seen working.
    assert run_seconds(run, lambda record: epoch(42) if record.codon_id == "b" else None) == 42


def test_loop_time_runs_from_its_first_codon_to_its_last_in_each_run():
    run = timed(fresh_run("r1", at(completed("a"), 0, 9),
                          in_loop(at(completed("x#0"), 10, 20), 0),
                          in_loop(at(completed("x#1"), 21, 40), 1)), 0, 50)

    assert loop_seconds(run) == {"L": 30}


def hank_with_loop() -> HankFile:
    def codon(codon_id: str) -> dict[str, object]:
        return {"id": codon_id, "name": codon_id, "model": "fake", "continuationMode": "fresh",
                "promptText": "x"}

    return HankFile.model_validate({"hank": [
        codon("a"),
        {"type": "loop", "id": "L", "name": "L", "codons": [codon("x")],
         "terminateOn": {"type": "iterationLimit", "limit": 5},
         "budget": {"maxTimeSeconds": 100}},
        codon("b")]})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_resumed_run_starts_with_the_earlier_runs_money_and_time():
    hank = hank_with_loop()
    state = make_state(timed(fresh_run("r1", at(completed("a", cost=3.0), 0, 50),
                                       in_loop(at(failed("x#0", cost=1.0), 55, 85), 0),
                                       status="failed"), 0, 90))
    clock = Clock()
    budget = RunBudget(max_dollars=10, max_seconds=600, hank=hank, clock=clock).seed(state)

    assert (budget.total_spent(), budget.elapsed()) == (4.0, 90)
    limits = budget.track(build_initial_plan(hank), "x#0").limits
    assert limits.dollars == Limit(6.0, "shared pool of loop L")
    # The loop ran 30 s before: 70 s of its 100 s are left.
    assert limits.seconds == Limit(70, "loop L time left")

    clock.now += 20
    budget.record("x#0", 0.5)
    assert budget.track(build_initial_plan(hank), "x#0").limits.seconds == Limit(
        50, "loop L time left")
    assert budget.remaining_dollars() == 5.5
    assert budget.remaining_seconds() == 600 - 90 - 20
