"""Background folds: the log is rotated at the fold point and folded by another process, so
transitions never wait for a fold; a fold cut at any point loses nothing and replays nothing
twice; a failed fold keeps both logs and is tried again."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from hankweave.state import fold as fold_module
from hankweave.state import store as store_module
from hankweave.state.fold import fold_segment
from hankweave.state.reducer import apply_transition
from hankweave.state.store import (
    BACKUP_FILE,
    FOLD_MARKER_FILE,
    FOLDING_WAL_FILE,
    PREVIOUS_WAL_FILE,
    STATE_FILE,
    WAL_FILE,
    StateStore,
    load_state,
)
from hankweave.state.types import HankweaveState, parse_state
from tests.transition_builders import costs, lifecycle_to, messages, run_started

BACKGROUND = {"inline_fold_max_bytes": 0, "fold_min_bytes": 4_000}
"""Every fold a background fold, after about 4 KB of log."""
BY_HAND = {**BACKGROUND, "fold_min_bytes": 10**9}
"""No fold comes due: the test takes each step itself."""


@pytest.fixture
def hw(tmp_path: Path) -> Path:
    path = tmp_path / "exec" / ".hankweave"
    path.mkdir(parents=True)
    return path


def updates(count: int, start: int = 1) -> list:
    return [costs("a", 0.001) if n % 2 else messages("a", n) for n in range(start, start + count)]


def replayed(transitions: list) -> HankweaveState:
    state = HankweaveState()
    for transition in transitions:
        state = apply_transition(state, transition)
    return state


async def started(hw: Path, **options) -> tuple[StateStore, list]:
    store = StateStore.open(hw, **{**BACKGROUND, **options})
    sent = [run_started(), *lifecycle_to("a", "running")]
    for transition in sent:
        await store.transition(transition)
    await store.fold()  # state.json holds the start; the log is empty
    return store, sent


def test_transitions_go_on_while_a_background_fold_runs(hw: Path) -> None:
    async def go() -> None:
        store, sent = await started(hw)
        during = 0
        deadline = time.monotonic() + 60
        number = 1
        while store.folds < 5:  # one fold here, then several in the background, back to back
            assert time.monotonic() < deadline, "the background folds did not happen"
            for transition in updates(20, start=number):
                await store.transition(transition)
                sent.append(transition)
                if store._fold_task is not None:
                    during += 1
                    # A reader sees every acknowledged transition, whatever the fold is doing.
                    if during % 50 == 1:
                        assert load_state(hw)[0] == store.state
            number += 20
            await asyncio.sleep(0.005)
        await store._settle()
        assert store._fold_failed_at is None and during > 20  # acknowledged meanwhile
        assert load_state(hw)[0] == store.state == replayed(sent)
        await store.close()
        assert parse_state((hw / STATE_FILE).read_bytes()) == replayed(sent)

    asyncio.run(go())


class Cut(Exception):
    """The process 'dies' at a kill point."""


CUT_POINTS = ["state.rotate", "state.rotate.swap", "state.fold.marker", "state.fold.replaced",
              "retire"]


def fold_cut_at(hw: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> list:
    """Transitions, a rotation, more transitions while the fold runs, the fold's process and
    the retirement, with the writer (and the fold) 'dying' at ``point``; what was sent."""
    def cut_at(name: str) -> None:
        if name == point:
            raise Cut(name)

    monkeypatch.setattr(store_module, "kill_point", cut_at)
    monkeypatch.setattr(fold_module, "kill_point", cut_at)

    async def go() -> list:
        store, sent = await started(hw, **BY_HAND)
        for transition in updates(40):
            await store.transition(transition)
            sent.append(transition)
        try:
            store._rotate()  # what a due fold does first, under the store's lock
            for transition in updates(20, start=41):  # appended while the fold runs
                await store.transition(transition)
                sent.append(transition)
            fold_segment(hw)  # the other process's work
            if point == "retire":
                raise Cut(point)
            store._retire_folding()
        except Cut:
            pass
        store._shutdown()  # the writer dies here: nothing more is written
        return sent

    sent = asyncio.run(go())
    monkeypatch.undo()  # the next writer runs normally
    return sent


@pytest.mark.parametrize("point", CUT_POINTS)
def test_a_fold_cut_at_any_point_loses_nothing_and_applies_nothing_twice(
        hw: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = replayed(fold_cut_at(hw, point, monkeypatch))
    loaded, report = load_state(hw)
    assert loaded == expected, report.warnings
    # The next writer continues from there, and its fold makes state.json complete.
    reopened = StateStore.open(hw, **BACKGROUND)
    assert reopened.state == expected
    more = costs("a", 0.5)

    async def finish() -> None:
        await reopened.transition(more)
        await reopened.close()

    asyncio.run(finish())
    assert parse_state((hw / STATE_FILE).read_bytes()) == apply_transition(expected, more)
    assert not (hw / FOLDING_WAL_FILE).exists()


@pytest.mark.parametrize("point", ["state.fold.marker", "state.fold.replaced", "retire"])
def test_a_damaged_state_json_after_a_fold_is_rebuilt_from_the_backup(
        hw: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = fold_cut_at(hw, point, monkeypatch)
    (hw / STATE_FILE).write_text("{torn")
    loaded, report = load_state(hw)
    assert loaded == replayed(sent), report.warnings
    assert not report.data_loss


def test_a_failed_background_fold_keeps_both_logs_and_is_tried_again(
        hw: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fold's process finds the disk full: every write it makes fails (ENOSPC).
    full = tmp_path / "python-on-a-full-disk"
    full.write_text(f"#!/bin/sh\nHANKWEAVE_TEST_DISK_FAULT=ENOSPC:disk.write@1"
                    f" exec {sys.executable} \"$@\"\n")
    full.chmod(0o755)
    monkeypatch.setattr(store_module, "FOLD_RETRY_S", 0.0)
    python = sys.executable

    async def go() -> None:
        store, sent = await started(hw)
        before = (hw / STATE_FILE).read_bytes()
        monkeypatch.setattr(store_module.sys, "executable", str(full))
        for transition in updates(60):
            await store.transition(transition)
            sent.append(transition)
        await store._settle()
        assert store._fold_failed_at is not None
        assert (hw / STATE_FILE).read_bytes() == before  # the previous state.json, intact
        assert (hw / FOLDING_WAL_FILE).exists() and (hw / WAL_FILE).exists()
        assert load_state(hw)[0] == replayed(sent)
        monkeypatch.setattr(store_module.sys, "executable", python)  # space again
        for transition in updates(40, start=61):
            await store.transition(transition)
            sent.append(transition)
        await store._settle()
        assert store.folds >= 2 and store._fold_failed_at is None
        assert parse_state((hw / STATE_FILE).read_bytes()) != parse_state(before)
        assert load_state(hw)[0] == replayed(sent)
        await store.close()
        assert parse_state((hw / STATE_FILE).read_bytes()) == replayed(sent)

    asyncio.run(go())


def test_a_fold_writes_the_state_once_and_keeps_the_old_one_as_a_link(hw: Path) -> None:
    async def go() -> None:
        store, _ = await started(hw)
        old = os.stat(hw / STATE_FILE)
        for transition in updates(80):
            await store.transition(transition)
        await store._settle()
        assert store.folds >= 2
        # The backup is the previous state.json itself (a hard link), not a copy of it.
        assert os.stat(hw / BACKUP_FILE).st_ino != old.st_ino or store.folds > 2
        assert (hw / PREVIOUS_WAL_FILE).exists() and (hw / FOLD_MARKER_FILE).exists()
        await store.close()

    asyncio.run(go())


def test_a_writer_waits_for_a_fold_its_predecessor_left_running(hw: Path) -> None:
    import fcntl
    import threading

    async def go() -> None:
        store, _ = await started(hw, **BY_HAND)
        for transition in updates(20):
            await store.transition(transition)
        store._rotate()
        store._shutdown()  # the writer died; its fold still runs (it holds the lock)

    asyncio.run(go())
    held = os.open(hw / FOLDING_WAL_FILE, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    opened: list[StateStore] = []
    opener = threading.Thread(target=lambda: opened.append(StateStore.open(hw, **BACKGROUND)))
    opener.start()
    opener.join(0.5)
    assert not opened  # still waiting
    fold_segment(hw)  # the orphaned fold finishes, then lets go
    os.close(held)
    opener.join(10)
    assert opened and opened[0].state == load_state(hw)[0]
    asyncio.run(opened[0].close())


def test_a_background_fold_writes_state_json_a_synced_chunk_at_a_time(hw: Path, monkeypatch):
    from hankweave import fsutil

    async def go() -> tuple[list[int], int]:
        store, sent = await started(hw, **BY_HAND)
        for transition in updates(200):
            await store.transition(transition)
            sent.append(transition)
        monkeypatch.setattr(fold_module, "SYNC_CHUNK_BYTES", 100)
        written: list[int] = []
        real = fsutil.write_fully
        monkeypatch.setattr(fsutil, "write_fully", lambda fd, data: (
            written.append(len(data)), real(fd, data))[1])
        store._rotate()
        assert fold_module.fold_segment(hw)
        store._retire_folding()
        assert load_state(hw)[0] == store.state == replayed(sent)
        folded = (hw / STATE_FILE).read_bytes()
        assert folded == fold_module.dump_state(store.state)
        await store.close()
        return written, len(folded)

    written, size = asyncio.run(go())
    assert size > 500 and written.count(100) == size // 100  # state.json, 100 bytes at a time
