"""A run killed between two attempts of a retrying codon: the resume makes exactly the attempts
that were left, as an uninterrupted run would have."""

from __future__ import annotations

import pytest

from hankweave.faults import KILL_AT_ENV
from integration.conftest import codon, records

OVERLOADED = {"result": "error", "errorText": "API Error: 529 overloaded"}


@pytest.mark.parametrize(("max_attempts", "left"), [(3, [3, 4]), (2, [3])])
def test_a_kill_after_two_failed_attempts_leaves_exactly_the_remaining_ones(
        project, max_attempts: int, left: list[int]) -> None:
    # maxAttempts counts retries, as in the original: 1 + maxAttempts attempts in all.
    project.write_hank([codon("a", onFailure="retry",
                              retryConfig={"delayMs": 0, "maxAttempts": max_attempts}),
                        codon("b")])
    project.write_script({"a": OVERLOADED})
    project.env[KILL_AT_ENV] = "retry.wait@2"  # the second failure is recorded, its retry waits
    killed = project.run()
    assert killed.returncode == -9, killed.stderr
    assert [r.attempt or 1 for r in records(project.state(), "a", "failed")] == [1, 2]

    del project.env[KILL_AT_ENV]
    resumed = project.run()

    assert resumed.returncode == 1, resumed.stderr
    state = project.state()
    assert [r.attempt for r in state.runs[0].codons] == left
    assert len(records(state, "a")) == 1 + max_attempts
    assert records(state, "b") == []
