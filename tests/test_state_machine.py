"""The codon state machine: every edge of the transition map and every metadata guard."""

from __future__ import annotations

import itertools
from functools import reduce

import pytest

from hankweave.state.reducer import apply_transition
from hankweave.state.transitions import (
    CODON_TRANSITIONS,
    CodonMetadata,
    InvalidTransitionError,
    MetadataValidationError,
)
from hankweave.state.types import CODON_STATUSES, FailureReason, HankweaveState, last_record
from tests.transition_builders import bare_move, lifecycle_to, moved, run_started

NON_TERMINAL = ["preparing", "starting", "initializing", "running", "completing-sentinels"]


def state_with_codon_in(status: str) -> HankweaveState:
    """A running run whose codon "a" is in ``status`` (terminal statuses via a legal path)."""
    if status in NON_TERMINAL:
        steps = lifecycle_to("a", status)
    else:
        source = "running"
        steps = [*lifecycle_to("a", source), moved("a", source, status)]
    return reduce(apply_transition, [run_started(), *steps], HankweaveState())


def record(state: HankweaveState):
    return last_record(state.runs[0], "a")[1]


LEGAL = [(frm, to) for frm, targets in CODON_TRANSITIONS.items() for to in targets]
ILLEGAL = [
    (frm, to)
    for frm, to in itertools.product(CODON_STATUSES, CODON_STATUSES)
    if to not in CODON_TRANSITIONS[frm]
]


def test_the_map_matches_the_original():
    assert CODON_TRANSITIONS == {
        "preparing": ("starting", "failed", "skipped"),
        "starting": ("initializing", "failed", "skipped"),
        "initializing": ("running", "completed", "failed", "skipped"),
        "running": ("completing-sentinels", "completed", "failed", "skipped"),
        "completing-sentinels": ("completed", "failed", "skipped"),
        "completed": (),
        "failed": (),
        "skipped": (),
    }


@pytest.mark.parametrize(("frm", "to"), LEGAL)
def test_legal_edge_is_applied(frm, to):
    state = apply_transition(state_with_codon_in(frm), moved("a", frm, to))
    assert record(state).status == to


@pytest.mark.parametrize(("frm", "to"), ILLEGAL)
def test_illegal_edge_is_refused_and_changes_nothing(frm, to):
    before = state_with_codon_in(frm)
    with pytest.raises(InvalidTransitionError):
        apply_transition(before, moved("a", frm, to))
    assert record(before).status == frm


def test_from_must_match_the_records_status():
    state = state_with_codon_in("starting")
    with pytest.raises(InvalidTransitionError, match="is starting, not preparing"):
        apply_transition(state, moved("a", "preparing", "starting"))


def test_unknown_codon_is_refused():
    state = state_with_codon_in("running")
    with pytest.raises(InvalidTransitionError, match="no record"):
        apply_transition(state, moved("zzz", "running", "completed"))


GUARDS = {
    "initializing": ("starting", ["claude_pid", "claude_log_path"]),
    "running": ("initializing", ["claude_session_id"]),
    "completed": ("running", ["checkpoint_sha"]),
    "failed": ("running", ["exit_code", "failure_reason", "failed_during"]),
    "skipped": ("running", ["skipped_during"]),
}


@pytest.mark.parametrize(
    ("to", "missing"), [(to, key) for to, (_, keys) in GUARDS.items() for key in keys]
)
def test_guard_requires_each_metadata_key(to, missing):
    frm = GUARDS[to][0]
    transition = moved("a", frm, to, **{missing: None})
    with pytest.raises(MetadataValidationError):
        apply_transition(state_with_codon_in(frm), transition)


@pytest.mark.parametrize("to", list(GUARDS))
def test_guard_refuses_a_transition_without_metadata(to):
    frm = GUARDS[to][0]
    with pytest.raises(MetadataValidationError):
        apply_transition(state_with_codon_in(frm), bare_move("a", frm, to))


@pytest.mark.parametrize("to", ["starting", "completing-sentinels"])
def test_targets_without_guards_need_no_metadata(to):
    frm = {"starting": "preparing", "completing-sentinels": "running"}[to]
    state = apply_transition(state_with_codon_in(frm), bare_move("a", frm, to))
    assert record(state).status == to


def test_completed_requires_a_non_empty_checkpoint_sha():
    with pytest.raises(MetadataValidationError, match="checkpointSha"):
        apply_transition(state_with_codon_in("running"),
                         moved("a", "running", "completed", checkpoint_sha=""))


def test_failed_during_must_be_a_non_terminal_status():
    with pytest.raises(MetadataValidationError, match="failedDuring"):
        apply_transition(state_with_codon_in("running"),
                         moved("a", "running", "failed", failed_during="completed"))


def test_guard_messages_use_the_on_disk_names():
    meta = CodonMetadata(exit_code=1, failure_reason=FailureReason(type="unknown", retriable=False))
    with pytest.raises(MetadataValidationError, match="failedDuring"):
        apply_transition(state_with_codon_in("running"),
                         bare_move("a", "running", "failed", metadata=meta))
