"""Taking ownership of an execution directory: lock, store and crash repair together."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from hankweave.state.boot import take_ownership
from hankweave.state.lock import LockHeldError, RuntimeLock
from hankweave.state.store import StateStore, load_state
from tests.transition_builders import lifecycle_to, run_started


def seed_running_run(hw, pid):
    store = StateStore.open(hw)
    for transition in (run_started("old", pid=pid), *lifecycle_to("a", "running", run_id="old")):
        store.transition_sync(transition)
    store.close_sync()


def test_a_stale_lock_is_reclaimed_and_its_run_marked_crashed(tmp_path):
    hw = tmp_path / ".hankweave"
    hw.mkdir()
    seed_running_run(hw, pid=os.getppid())  # a live process, but not this run's runtime
    (hw / "runtime.lock").write_text(json.dumps({
        "pid": os.getppid(), "lockId": "x", "runId": "old",
        "startTime": "2026-01-01T00:00:00.000Z", "lastHeartbeat": "2026-01-01T00:00:00.000Z"}))

    async def go():
        owned = await take_ownership(hw)
        assert owned.acquired.reclaimed_run_id == "old"
        assert owned.crashed_run_ids == ["old"]
        await owned.release()

    asyncio.run(go())
    state, _ = load_state(hw)
    assert state.runs[0].status == "crashed"
    assert state.runs[0].codons[-1].failure_reason.message == "Server crashed"
    assert not (hw / "runtime.lock").exists()


def test_a_live_lock_refuses_a_second_owner(tmp_path):
    hw = tmp_path / ".hankweave"
    holder = RuntimeLock(hw)
    holder.acquire("current")
    with pytest.raises(LockHeldError, match=str(os.getpid())):
        asyncio.run(take_ownership(hw))
    holder.release()


def test_ownership_of_a_clean_directory_repairs_nothing(tmp_path):
    async def go():
        owned = await take_ownership(tmp_path / ".hankweave")
        assert owned.crashed_run_ids == [] and owned.acquired.reclaimed is None
        await owned.release()

    asyncio.run(go())
