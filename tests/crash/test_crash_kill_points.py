"""SIGKILL at chosen points inside the runtime, then ``hankweave run -e`` until done.

Each scenario kills the runtime where the issue asks (during rig setup, between agent
messages, inside a checkpoint commit, inside a state save or fold, during the output copy,
during a rollback), resuming after each kill; the kill must come from the named point
(``HANKWEAVE_TEST_KILL_AT``), never by luck.  After every process the invariants of
:func:`check_after_kill` hold; at the end the execution equals an uninterrupted run.
"""

from __future__ import annotations

import pytest

from tests.crash.crash_hank import (
    CODON_IDS,
    SCRIPT,
    CrashProject,
    Progress,
    check_after_kill,
    check_finished,
)


def records_of(codon_id: str) -> int:
    """How many records the fake agent of ``codon_id`` yields: init, messages, a tool use and
    its result per file written, the result."""
    attempt = SCRIPT[codon_id]
    return 1 + attempt["messages"] + 2 * len(attempt["writeFiles"]) + 1


def message_point(codon_id: str, records: int) -> str:
    """The ``harness.message`` point reached after ``records`` records of ``codon_id``, in a
    run from the start."""
    before = sum(records_of(other) for other in CODON_IDS[:CODON_IDS.index(codon_id)])
    return f"harness.message@{before + records}"


# After review#1 rewrote both its files: the rollback has files to write back.
MID_REVIEW = message_point("review#1", records_of("review#1") - 1)

SCENARIOS: dict[str, list[str]] = {
    "rig-command": ["rig.command"],
    "between-messages": [message_point("write", 3), message_point("write", 9)],
    "checkpoint-commit": ["checkpoint.commit@4", "checkpoint.commit@2"],
    "state-log-append": ["state.append@60", "state.append@1"],
    "fold-log-written": ["state.fold@1"],
    "fold-before-rename": ["replace.state.json@1"],
    "fold-state-replaced": ["state.fold.swap@1"],
    "output-copy": ["outputs.copy@2"],
    "sentinel-output": ["sentinel.output@2"],  # write's sentinel wrote, its cost unrecorded
    "before-output-copy": ["codon.recorded@3"],  # publish is done, its copy not begun
    "before-next-iteration": ["codon.recorded@5"],  # review#0 is done, draft#1 not planned

    "rollback": [MID_REVIEW, "rollback.restored"],
    # git restores in one read-tree (one point, after its removals); the snapshot store writes
    # file by file (a point before each), so @2 kills it between two files.
    "checkpoint-restore": [MID_REVIEW, "checkpoint.restore@1", "checkpoint.restore@{between}"],
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_kill_at_a_chosen_point_loses_nothing(project: CrashProject, reference, scenario):
    between = 2 if project.backend == "snapshot" else 1
    progress = Progress()
    for spec in SCENARIOS[scenario]:
        spec = spec.format(between=between)
        ending = project.run(kill_at=spec)
        assert ending.killed_at(spec), (
            f"{spec} did not kill the run (exit {ending.returncode}):\n{ending.stderr[-2000:]}")
        progress = check_after_kill(project, progress)
    project.run_to_completion()
    check_after_kill(project, progress)
    check_finished(project, reference.trees)
