"""The durable state store: ordering, durability, folding, the recovery ladder, crash detection."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hankweave.state import store as store_module
from hankweave.state.store import (
    BACKUP_FILE,
    PREVIOUS_WAL_FILE,
    STATE_FILE,
    WAL_FILE,
    PersistenceError,
    StateStore,
    StateStoreBusyError,
    load_state,
)
from hankweave.state.transitions import InvalidTransitionError
from hankweave.state.types import HankweaveState, dump_state, parse_state
from tests.transition_builders import (
    codon_started,
    costs,
    lifecycle_to,
    messages,
    moved,
    run_completed,
    run_started,
)


@pytest.fixture
def hw(tmp_path: Path) -> Path:
    path = tmp_path / "exec" / ".hankweave"
    path.mkdir(parents=True)
    return path


def apply(hw: Path, *transitions, close: bool = True, **options) -> StateStore:
    store = StateStore.open(hw, **options)

    async def go() -> None:
        for transition in transitions:
            await store.transition(transition)
        if close:
            await store.close()

    asyncio.run(go())
    return store


def abandon(store: StateStore) -> None:
    """Drop the store's files without folding, as a killed process would."""
    store._shutdown()


def on_disk(hw: Path) -> HankweaveState:
    return parse_state((hw / STATE_FILE).read_bytes())


def test_an_acknowledged_transition_is_visible_to_a_fresh_reader(hw):
    store = apply(hw, run_started(), codon_started("a"), close=False)
    state, report = load_state(hw)
    assert state == store.state
    assert report.wal_applied >= 1 and report.method == "primary"


def test_listeners_fire_after_the_change_is_durable(hw):
    store = StateStore.open(hw)
    seen: list[tuple[str, int]] = []

    def listener(transition, state):
        from_disk, _ = load_state(hw)
        seen.append((transition.type, len(from_disk.runs[0].codons) if from_disk.runs else -1))

    store.add_listener(listener)

    async def go():
        await store.transition(run_started())
        await store.transition(codon_started("a"))

    asyncio.run(go())
    assert seen == [("RunStarted", 0), ("CodonStarted", 1)]


def test_a_failing_listener_does_not_break_the_writer(hw):
    store = StateStore.open(hw)
    store.add_listener(lambda t, s: 1 / 0)

    async def go():
        await store.transition(run_started())

    asyncio.run(go())
    assert store.state.current_run_id is not None


def test_concurrent_callers_are_applied_in_call_order(hw):
    store = StateStore.open(hw)

    async def go():
        await store.transition(run_started())
        for t in lifecycle_to("a", "running"):
            await store.transition(t)
        await asyncio.gather(*(store.transition(messages("a", n)) for n in range(1, 51)))

    asyncio.run(go())
    assert store.state.runs[0].codons[-1].assistant_message_count == 50
    assert load_state(hw)[0] == store.state


def test_an_invalid_transition_writes_nothing(hw):
    store = apply(hw, run_started(), close=False)
    size = (hw / WAL_FILE).stat().st_size

    async def go():
        with pytest.raises(InvalidTransitionError):
            await store.transition(moved("a", "running", "completed"))

    asyncio.run(go())
    assert (hw / WAL_FILE).stat().st_size == size


def test_high_frequency_updates_append_without_rewriting_state_json(hw, monkeypatch):
    # (No fold comes due: that is when the log is large relative to the state.)
    store = apply(hw, run_started(), *lifecycle_to("a", "running"), close=False,
                  fold_min_bytes=10**9)
    asyncio.run(store.fold())
    before = (hw / STATE_FILE).read_bytes()
    syncs = []
    monkeypatch.setattr(store_module.os, "fdatasync", lambda fd: syncs.append(fd))

    async def go():
        for n in range(1, 200):
            await store.transition(costs("a", 0.01))
            await store.transition(messages("a", n))

    asyncio.run(go())
    assert (hw / STATE_FILE).read_bytes() == before
    assert syncs == []
    assert load_state(hw)[0].runs[0].codons[-1].assistant_message_count == 199


def test_lifecycle_transitions_are_fsynced(hw, monkeypatch):
    store = StateStore.open(hw)
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(store_module.os, "fdatasync", lambda fd: (syncs.append(fd), real(fd)))

    async def go():
        await store.transition(run_started())
        await store.transition(codon_started("a"))

    asyncio.run(go())
    assert len(syncs) == 2


def test_close_folds_the_log_so_state_json_alone_is_complete(hw):
    store = apply(hw, run_started(), *lifecycle_to("a", "running"), costs("a", 0.5))
    assert on_disk(hw) == store.state
    header, *entries = (hw / WAL_FILE).read_text().splitlines()
    assert entries == [] and json.loads(header)["wal"] == 2


def test_the_previous_state_is_kept_as_backup(hw):
    apply(hw, run_started())
    first = (hw / STATE_FILE).read_bytes()
    apply(hw, codon_started("a"))
    assert (hw / BACKUP_FILE).read_bytes() == first


def test_state_json_is_written_in_the_original_format(hw):
    apply(hw, run_started())
    text = (hw / STATE_FILE).read_text()
    assert text.startswith('{\n  "runs": [')
    assert '"currentRunId": "run-1"' in text and '"executionPlan": []' in text


def test_timer_folds_the_log_shortly_after_changes(hw):
    store = StateStore.open(hw, fold_interval=0.05)

    async def go():
        await store.transition(run_started())
        # Polled, not a fixed sleep: a loaded machine (CI runs two tox envs at once) may fold
        # later than the interval.
        deadline = time.monotonic() + 30
        while on_disk(hw) != store.state and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    asyncio.run(go())
    assert on_disk(hw) == store.state


def test_a_large_log_is_folded_without_waiting(hw):
    store = apply(hw, run_started(), *lifecycle_to("a", "running"), close=False,
                  fold_min_bytes=2_000, fold_interval=3600)
    asyncio.run(store.fold())

    async def go():
        for n in range(60):
            await store.transition(messages("a", n + 1))

    asyncio.run(go())
    assert (hw / WAL_FILE).stat().st_size < 2_000 + 500
    assert on_disk(hw).runs[0].codons[-1].assistant_message_count > 0


def test_synchronous_api_matches_the_async_one(hw):
    store = StateStore.open(hw)
    for t in (run_started(), *lifecycle_to("a", "running"), costs("a", 0.5)):
        store.transition_sync(t)
    store.close_sync()
    assert on_disk(hw) == store.state


def test_a_closed_store_refuses_transitions(hw):
    store = apply(hw, run_started())
    with pytest.raises(PersistenceError):
        store.transition_sync(codon_started("a"))


def test_a_failed_append_leaves_the_state_unchanged(hw, monkeypatch):
    store = apply(hw, run_started(), close=False)
    before = store.state

    def broken_write(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module.os, "write", broken_write)
    with pytest.raises(PersistenceError, match="No space left"):
        store.transition_sync(codon_started("a"))
    assert store.state is before


# ----- the log across crashes -----


def test_a_torn_last_log_line_is_ignored_with_a_warning(hw):
    store = apply(hw, run_started(), codon_started("a"), close=False)
    with open(hw / WAL_FILE, "ab") as wal:
        wal.write(b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"CodonTrans')
    state, report = load_state(hw)
    assert state == store.state
    assert any("torn" in w for w in report.warnings)


def test_the_next_writer_cuts_a_torn_last_line_before_it_appends(hw):
    abandon(apply(hw, run_started(), codon_started("a"), close=False))
    with open(hw / WAL_FILE, "ab") as wal:
        wal.write(b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"CodonTrans')
    store = apply(hw, moved("a", "preparing", "starting"), close=False)
    state, report = load_state(hw)
    assert state == store.state and state.runs[0].codons[0].status == "starting"
    assert report.wal_skipped == 0


def test_a_failed_partial_append_is_taken_back_so_the_next_one_survives(hw, monkeypatch):
    store = apply(hw, run_started(), close=False)
    real_write = os.write

    def half_then_full(fd, data):
        monkeypatch.setattr(store_module.os, "write", real_write)
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module.os, "write", half_then_full)
    with pytest.raises(PersistenceError, match="No space left"):
        store.transition_sync(codon_started("a"))
    store.transition_sync(codon_started("b"))
    state, report = load_state(hw)
    assert state == store.state and [c.codon_id for c in state.runs[0].codons] == ["b"]
    assert report.wal_skipped == 0 and not any("torn" in w for w in report.warnings)


def test_a_log_already_folded_is_not_replayed_twice(hw):
    """A crash after the fold renamed state.json but before it replaced the log."""
    store = apply(hw, run_started(), *lifecycle_to("a", "running"), costs("a", 0.25),
                  close=False)
    stale_log = (hw / WAL_FILE).read_bytes()
    asyncio.run(store.close())
    (hw / WAL_FILE).write_bytes(stale_log)
    state, _ = load_state(hw)
    assert state.runs[0].codons[-1].current_cost == 0.25


def test_a_log_whose_fold_never_happened_is_replayed(hw):
    """A crash before the fold replaced state.json: the old file plus the old log."""
    store = apply(hw, run_started(), close=False)
    asyncio.run(store.fold())
    base = (hw / STATE_FILE).read_bytes()
    asyncio.run(store.transition(codon_started("a")))
    log_bytes = (hw / WAL_FILE).read_bytes()
    asyncio.run(store.close())
    (hw / STATE_FILE).write_bytes(base)
    (hw / WAL_FILE).write_bytes(log_bytes)
    assert load_state(hw)[0] == store.state


def test_reopening_continues_the_same_log(hw):
    first = apply(hw, run_started(), codon_started("a"), close=False)
    abandon(first)
    second = apply(hw, moved("a", "preparing", "starting"), close=False)
    assert second.state.runs[0].codons[0].status == "starting"
    assert load_state(hw)[0] == second.state
    assert first.state.runs[0].codons[0].status == "preparing"


def test_a_second_writer_is_refused_while_the_first_is_open(hw):
    first = StateStore.open(hw)
    with pytest.raises(StateStoreBusyError, match="already being written"):
        StateStore.open(hw)
    first.close_sync()
    StateStore.open(hw).close_sync()


def test_a_second_writer_in_another_process_is_refused(hw):
    store = StateStore.open(hw)
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys; from hankweave.state.store import StateStore, StateStoreBusyError\n"
         "try:\n    StateStore.open(sys.argv[1])\nexcept StateStoreBusyError:\n    sys.exit(3)",
         str(hw)], capture_output=True, text=True)
    store.close_sync()
    assert probe.returncode == 3, probe.stderr


# ----- the recovery ladder -----


def test_a_corrupt_state_json_is_rebuilt_from_the_backup_and_the_retired_log(hw):
    apply(hw, run_started())
    store = apply(hw, codon_started("a"))
    (hw / STATE_FILE).write_text("{ not json")
    state, report = load_state(hw)
    assert report.method == "backup" and not report.data_loss
    assert [i.type for i in report.issues] == ["corrupted_data"]
    assert state == store.state and state.runs[0].codons[0].codon_id == "a"


def test_a_corrupt_state_json_without_the_retired_log_falls_back_to_the_backup(hw):
    apply(hw, run_started())
    apply(hw, codon_started("a"))
    (hw / STATE_FILE).write_text("{ not json")
    (hw / PREVIOUS_WAL_FILE).unlink()
    state, report = load_state(hw)
    assert report.method == "backup" and report.data_loss
    assert state.current_run_id == "run-1" and state.runs[0].codons == []


def test_a_state_json_with_the_wrong_shape_is_corrupted_data(hw):
    apply(hw, run_started())
    apply(hw, codon_started("a"))
    (hw / STATE_FILE).write_text(json.dumps({"runs": "nope", "executionPlan": []}))
    _, report = load_state(hw)
    assert report.method == "backup"
    assert report.issues[0].type == "corrupted_data" and "state.json" in report.issues[0].message


def test_both_files_corrupt_start_fresh_in_memory_and_write_nothing(hw):
    apply(hw, run_started())
    apply(hw, codon_started("a"))
    (hw / STATE_FILE).write_text("garbage")
    (hw / BACKUP_FILE).write_text("garbage too")
    listing = sorted(p.name for p in hw.iterdir())
    store = StateStore.open(hw)
    assert store.state == HankweaveState()
    assert store.report.method == "fresh" and store.report.data_loss
    assert any("Backup also corrupted" in w for w in store.report.warnings)
    assert sorted(p.name for p in hw.iterdir()) == listing


def test_after_a_fresh_start_the_corrupt_files_are_kept_aside(hw):
    apply(hw, run_started())
    apply(hw, codon_started("a"))
    (hw / STATE_FILE).write_text("garbage")
    (hw / BACKUP_FILE).write_text("garbage too")
    apply(hw, run_started("run-2"))
    kept = sorted(p.name for p in hw.iterdir() if ".corrupt-" in p.name)
    assert any(name.startswith("state.json.corrupt-") for name in kept)
    assert any(name.startswith("state.json.bak.corrupt-") for name in kept)
    assert on_disk(hw).runs[0].run_id == "run-2"


def test_a_leftover_temp_file_is_ignored_and_reported(hw):
    store = apply(hw, run_started())
    (hw / f"{STATE_FILE}.tmp-4242").write_text("{half")
    state, report = load_state(hw)
    assert state == store.state
    assert any("state.json.tmp-4242" in w for w in report.warnings)


def test_recover_writes_the_loaded_state_and_reports_the_cost(hw):
    apply(hw, run_started())
    (hw / STATE_FILE).write_text("garbage")
    (hw / BACKUP_FILE).write_text("garbage")
    result = StateStore.open(hw).recover()
    assert result.to_json() == {"success": True, "method": "fresh", "dataLoss": True,
                                "message": "Started with fresh state"}
    assert on_disk(hw) == HankweaveState()


def test_recover_of_a_healthy_state_loses_nothing(hw):
    apply(hw, run_started())
    result = StateStore.open(hw).recover()
    assert (result.method, result.data_loss) == ("primary", False)


# ----- load validation -----


def test_missing_run_and_orphaned_folder_are_reported(hw):
    state = HankweaveState(current_run_id="ghost")
    (hw / STATE_FILE).write_bytes(dump_state(state))
    (hw / "runs" / "stray-run").mkdir(parents=True)
    _, report = load_state(hw)
    kinds = {(i.severity, i.type) for i in report.issues}
    assert kinds == {("error", "missing_run"), ("warning", "orphaned_folder")}


def test_the_seed_state_file_loads_and_round_trips(hw):
    seed = Path(__file__).parent / "fixtures" / "state" / "seed-minimal-single-provider.json"
    (hw / STATE_FILE).write_bytes(seed.read_bytes())
    state, report = load_state(hw)
    assert report.method == "primary" and report.issues == []
    assert json.loads(dump_state(state)) == json.loads(seed.read_bytes())
    assert parse_state(dump_state(state)) == state


# ----- crash detection -----


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_running_run_whose_server_died_is_marked_crashed(hw):
    apply(hw, run_started(pid=dead_pid()), *lifecycle_to("a", "running"))
    store = StateStore.open(hw)
    crashed = asyncio.run(store.detect_crashed_runs())
    assert crashed == ["run-1"]
    run = store.state.runs[0]
    assert run.status == "crashed" and run.codons[-1].status == "failed"
    assert run.codons[-1].exit_code == -1


def test_a_running_run_of_a_live_server_is_left_alone(hw):
    apply(hw, run_started(pid=os.getppid()))
    store = StateStore.open(hw)
    assert asyncio.run(store.detect_crashed_runs()) == []
    assert store.state.runs[0].status == "running"


def test_finished_runs_are_never_marked_crashed(hw):
    apply(hw, run_started(pid=dead_pid()), run_completed())
    store = StateStore.open(hw)
    assert asyncio.run(store.detect_crashed_runs()) == []
