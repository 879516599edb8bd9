"""A large state stays out of the garbage collector's full collections while its store is open,
and the collector gets the whole heap back when the store closes; loading collects nothing."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from hankweave.state import heap
from hankweave.state.store import StateStore, load_state
from tests.transition_builders import lifecycle_to, run_started

LARGE = {"inline_fold_max_bytes": 0}
"""Every state counts as large."""


class Cycle:
    """Garbage only the cyclic collector can free."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def no_holders_left():
    assert not heap.holding()
    yield
    assert not heap.holding(), "a store was left holding the heap"
    assert gc.get_freeze_count() == 0


def started(hw: Path, **options) -> StateStore:
    store = StateStore.open(hw, **options)
    for transition in [run_started(), *lifecycle_to("a", "running")]:
        store.transition_sync(transition)
    return store


def test_a_large_state_is_frozen_after_each_full_collection_while_its_store_is_open(tmp_path):
    store = started(tmp_path / "exec", **LARGE)
    store.close_sync()  # state.json now holds the run: reopening loads a (large) state
    store = StateStore.open(tmp_path / "exec", **LARGE)
    try:
        assert heap.holding()
        records = store.state.runs[0].codons
        frozen = gc.get_freeze_count()
        assert frozen > 0  # opening collected once and froze what survived, the state with it
        assert not any(record is obj for obj in gc.get_objects() for record in records)
        young = [Cycle() for _ in range(100)]
        gc.collect()
        assert gc.get_freeze_count() >= frozen + len(young)  # survivors of this one too
    finally:
        asyncio.run(store.close())
    assert not heap.holding() and gc.get_freeze_count() == 0


def test_cyclic_garbage_made_while_frozen_is_collected_once_the_store_closes(tmp_path):
    store = started(tmp_path / "exec", **LARGE)
    cycle = Cycle()
    gc.collect()  # the cycle, still alive, is frozen
    del cycle
    assert gc.collect() == 0  # frozen: the collector cannot see it is garbage
    store.close_sync()
    assert gc.collect() >= 1  # unfrozen with the close, and collected


def test_a_small_state_leaves_the_collector_alone(tmp_path):
    store = started(tmp_path / "exec")
    try:
        gc.collect()
        assert not heap.holding() and gc.get_freeze_count() == 0
    finally:
        store.close_sync()


def test_a_state_that_grows_large_holds_the_heap_from_its_next_fold(tmp_path):
    store = started(tmp_path / "exec", inline_fold_max_bytes=500)
    try:
        assert not heap.holding()  # nothing on disk yet
        asyncio.run(store.fold())
        assert store._state_size > 500 and heap.holding()
    finally:
        store.close_sync()


def test_two_stores_hold_the_heap_until_both_close(tmp_path):
    first, second = started(tmp_path / "a", **LARGE), started(tmp_path / "b", **LARGE)
    first.close_sync()
    first.close_sync()  # closing twice releases once
    assert heap.holding()
    second.close_sync()
    assert not heap.holding()


def test_loading_pauses_collections_and_restores_the_collector(tmp_path, monkeypatch):
    started(tmp_path / "exec").close_sync()
    seen = []
    monkeypatch.setattr(gc, "callbacks", [*gc.callbacks, lambda phase, info: seen.append(phase)])
    gc.collect()
    seen.clear()
    load_state(tmp_path / "exec")
    assert seen == [] and gc.isenabled()
    gc.disable()
    try:
        load_state(tmp_path / "exec")
        assert not gc.isenabled()  # a caller's disabled collector stays disabled
    finally:
        gc.enable()
