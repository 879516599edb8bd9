"""A run killed partway through a budgeted hank: the resumed run's limits count what the killed
run spent, so the ceiling holds across the kill."""

from __future__ import annotations

import pytest

from hankweave.faults import KILL_AT_ENV
from integration.conftest import codon


def limits_of(events: list[dict], codon_id: str) -> list[dict]:
    return [e["data"] for e in events
            if e["type"] == "budget.limits" and e["data"]["codonId"] == codon_id]


@pytest.mark.parametrize("backend", ["git", "snapshot"])
def test_a_killed_run_s_spending_counts_against_the_ceiling_of_the_resume(
        project, backend: str) -> None:
    project.env["HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND"] = backend
    project.write_hank([codon("a"), codon("b"), codon("c")],
                       overrides={"budget": {"maxDollars": 1.0}})
    project.write_script({"a": {"cost": 0.4}, "b": {"cost": 0.4, "messages": 3},
                          "c": {"cost": 0.4}})
    # Killed in b, after a's $0.40 was recorded: b's limit was what a left.
    project.env[KILL_AT_ENV] = "harness.message@5"
    killed = project.run()
    assert killed.returncode == -9, killed.stderr
    first = limits_of(project.events(), "b")
    assert [round(e["limits"]["maxDollars"], 6) for e in first] == [0.6]

    del project.env[KILL_AT_ENV]
    resumed = project.run()
    assert resumed.returncode == 0, resumed.stderr

    events = project.events()
    b_again, c = limits_of(events, "b")[-1], limits_of(events, "c")[-1]
    assert b_again["limits"]["maxDollars"] == pytest.approx(1.0 - b_again["spentDollars"])
    assert b_again["spentDollars"] >= 0.4  # a's spending in the killed run is counted
    # c starts with what a and the resumed b left, at most $0.20.
    assert c["limits"]["maxDollars"] == pytest.approx(1.0 - c["spentDollars"])
    assert c["spentDollars"] >= 0.8
    summary = next(e["data"] for e in reversed(events) if e["type"] == "budget.summary")
    assert summary["totals"]["actualDollars"] == pytest.approx(c["spentDollars"] + 0.4)
