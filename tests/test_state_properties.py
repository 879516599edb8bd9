"""Properties: no sequence of transitions, legal or not, leaves a state that fails validation;
what the store writes loads back equal to what it holds in memory; and damage to the files
(a ``state.json`` truncated to any length, a log cut anywhere) recovers through the ladder
without losing anything acknowledged that the damage did not itself destroy."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hankweave.state.reducer import apply_transition
from hankweave.state.store import STATE_FILE, WAL_FILE, StateStore, load_state
from hankweave.state.transitions import (
    InitialCheckpointData,
    InitialCheckpointSet,
    InvalidTransitionError,
    MetadataValidationError,
)
from hankweave.state.types import CODON_STATUSES, HankweaveState, dump_state, parse_state
from hankweave.state.validation import validate_state
from tests import transition_builders as tb

RUNS = st.sampled_from(["r1", "r2", "r3"])
CODONS = st.sampled_from(["a", "b", "a#0"])
STATUSES = st.sampled_from(CODON_STATUSES)
SHAS = st.sampled_from(["1" * 40, "2" * 40, "3" * 40])
KINDS = st.sampled_from(["rig-setup", "completed", "error", "skipped"])
MONEY = st.floats(min_value=0, max_value=5, allow_nan=False)


def _run_started(run, parent, after, sha):
    if parent is None:
        return tb.run_started(run)
    return tb.run_started(run, continuation_of=parent, after=after, sha=sha)


TRANSITIONS = st.one_of(
    st.builds(_run_started, RUNS, st.none() | RUNS, st.none() | CODONS, SHAS),
    st.builds(tb.run_completed, RUNS),
    st.builds(tb.run_failed, RUNS),
    st.builds(tb.run_crashed, RUNS),
    st.builds(lambda c, r: tb.codon_started(c, run_id=r), CODONS, RUNS),
    st.builds(lambda c, f, t, r: tb.moved(c, f, t, run_id=r), CODONS, STATUSES, STATUSES, RUNS),
    st.builds(lambda c, f, t, r: tb.bare_move(c, f, t, run_id=r), CODONS, STATUSES, STATUSES,
              RUNS),
    st.builds(lambda c, m, r: tb.costs(c, m, run_id=r), CODONS, MONEY, RUNS),
    st.builds(lambda c, m, r: tb.costs_set(c, m, run_id=r), CODONS, MONEY, RUNS),
    st.builds(lambda c, m, r: tb.final_cost(c, m, run_id=r), CODONS, MONEY, RUNS),
    st.builds(lambda c, n, r: tb.messages(c, n, run_id=r), CODONS, st.integers(0, 50), RUNS),
    st.builds(lambda c, n, r: tb.extensions(c, n, run_id=r), CODONS, st.integers(0, 5), RUNS),
    st.builds(lambda c, k, s, r: tb.checkpoint(c, k, s, run_id=r), CODONS, KINDS, SHAS, RUNS),
    st.builds(lambda c, m, r: tb.sentinels(c, m, run_id=r), CODONS, MONEY, RUNS),
    st.builds(lambda s: InitialCheckpointSet(data=InitialCheckpointData(sha=s)), SHAS),
)

# Bias towards sequences that get somewhere: the lifecycle of a codon in the current run.
HAPPY_PATHS = st.builds(
    lambda c, s: [tb.run_started("r1"), *tb.lifecycle_to(c, s, run_id="r1")],
    CODONS,
    st.sampled_from(["preparing", "starting", "initializing", "running", "completing-sentinels"]),
)


def assert_valid(state: HankweaveState) -> None:
    errors = [issue for issue in validate_state(state) if issue.severity == "error"]
    assert errors == []


@given(prefix=HAPPY_PATHS, transitions=st.lists(TRANSITIONS, max_size=40))
def test_random_transitions_keep_the_state_valid_and_round_trippable(prefix, transitions):
    state = HankweaveState()
    for transition in [*prefix, *transitions]:
        try:
            state = apply_transition(state, transition)
        except (InvalidTransitionError, MetadataValidationError):
            continue
        assert_valid(state)
    assert parse_state(dump_state(state)) == state


@given(prefix=HAPPY_PATHS, transitions=st.lists(TRANSITIONS, max_size=25))
def test_the_store_persists_exactly_what_it_holds(prefix, transitions):
    with tempfile.TemporaryDirectory() as tmp:
        hw = Path(tmp)
        store = StateStore.open(hw)
        for transition in [*prefix, *transitions]:
            try:
                store.transition_sync(transition)
            except (InvalidTransitionError, MetadataValidationError):
                continue
        assert load_state(hw)[0] == store.state
        store.close_sync()
        reloaded, report = load_state(hw)
        assert reloaded == store.state
        assert report.wal_applied == 0


def _acknowledge(store: StateStore, transitions: list) -> list[HankweaveState]:
    """Apply what the store accepts; the state after each acknowledged transition."""
    states = [store.state]
    for transition in transitions:
        try:
            states.append(store.transition_sync(transition))
        except (InvalidTransitionError, MetadataValidationError):
            continue
    return states


def _cut(path: Path, fraction: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * fraction)])


@given(prefix=HAPPY_PATHS, batches=st.lists(st.lists(TRANSITIONS, max_size=8), min_size=1,
                                           max_size=4),
       cut=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_a_truncated_state_json_is_rebuilt_with_nothing_acknowledged_lost(prefix, batches, cut):
    """Folds after each batch (a restart each), then a kill; then state.json is cut short."""
    with tempfile.TemporaryDirectory() as tmp:
        hw = Path(tmp)
        store = StateStore.open(hw)
        _acknowledge(store, prefix)
        for batch in batches:
            asyncio.run(store.fold())
            _acknowledge(store, batch)
        store._shutdown()  # killed: the last batch is only in the log
        _cut(hw / STATE_FILE, cut)
        state, report = load_state(hw)
        assert state == store.state, report.warnings
        assert report.method == "backup" and not report.data_loss


@given(prefix=HAPPY_PATHS, transitions=st.lists(TRANSITIONS, max_size=20),
       cut=st.floats(min_value=0, max_value=1))
def test_a_log_cut_anywhere_keeps_what_precedes_the_cut_and_the_next_writer_loses_nothing(
        prefix, transitions, cut):
    with tempfile.TemporaryDirectory() as tmp:
        hw = Path(tmp)
        store = StateStore.open(hw)
        _acknowledge(store, prefix)
        asyncio.run(store.fold())
        states = _acknowledge(store, transitions)
        store._shutdown()
        _cut(hw / WAL_FILE, cut)
        assert load_state(hw)[0] in states  # exactly what the log held before the cut

        after = StateStore.open(hw)
        _acknowledge(after, [InitialCheckpointSet(data=InitialCheckpointData(sha="4" * 40))])
        after._shutdown()
        assert load_state(hw)[0] == after.state
