"""The runtime lock (`<exec>/.hankweave/runtime.lock`) and the durable-file helpers under it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hankweave.fsutil import atomic_write_bytes, parse_iso, pid_alive, process_running, utc_now_iso
from hankweave.state.lock import (
    LOCK_FILE_NAME,
    STALE_AFTER_S,
    LockCorruptError,
    LockHeldError,
    LockInfo,
    LockLostError,
    RuntimeLock,
    heartbeat_forever,
    live_runtime_lock,
    read_lock,
    this_host,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
ISO_MS_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def hw_dir(tmp_path: Path) -> Path:
    """An execution's `.hankweave` directory, not created yet (acquire creates it)."""
    return tmp_path / "exec" / ".hankweave"


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The pid of another process that stays alive for the whole test."""
    proc = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-S", "-c", ""])
    proc.wait()
    return proc.pid


def iso_ago(seconds: float) -> str:
    ts = datetime.now(UTC) - timedelta(seconds=seconds)
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_raw_lock(hw_dir: Path, content: str | dict) -> Path:
    hw_dir.mkdir(parents=True, exist_ok=True)
    path = hw_dir / "runtime.lock"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def foreign_lock(pid: int, *, heartbeat_age_s: float = 0.0, run_id: str | None = "run-old") -> dict:
    return {
        "pid": pid,
        "lockId": str(uuid.uuid4()),
        "runId": run_id,
        "startTime": iso_ago(heartbeat_age_s + 60),
        "lastHeartbeat": iso_ago(heartbeat_age_s),
        "port": None,
        "token": "t",
    }


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# -- acquire / release ------------------------------------------------------------------------


def test_acquire_writes_a_private_lock_and_release_removes_it(hw_dir: Path) -> None:
    lock = RuntimeLock(hw_dir)
    result = lock.acquire(run_id="run-1")

    path = hw_dir / "runtime.lock"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    on_disk = json.loads(path.read_text())
    assert list(on_disk) == [
        "pid", "lockId", "runId", "startTime", "lastHeartbeat", "port", "proxyPort", "token",
        "host",
    ]
    assert on_disk["host"] == this_host()
    assert on_disk["pid"] == os.getpid()
    assert uuid.UUID(on_disk["lockId"]).version == 4
    assert on_disk["runId"] == "run-1"
    assert ISO_MS_Z.match(on_disk["startTime"]) and ISO_MS_Z.match(on_disk["lastHeartbeat"])
    assert len(on_disk["token"]) >= 40
    assert result.lock == read_lock(hw_dir) == lock.info
    assert lock.token == on_disk["token"]
    assert result.reclaimed is None and not result.reclaimed_stale
    assert not list(hw_dir.glob("runtime.lock.tmp-*"))

    assert lock.release() is True
    assert not path.exists()
    assert read_lock(hw_dir) is None
    assert lock.release() is False


def test_second_acquire_in_the_same_process_is_refused(hw_dir: Path) -> None:
    first = RuntimeLock(hw_dir)
    first.acquire(run_id="run-1")

    with pytest.raises(LockHeldError) as refused:
        RuntimeLock(hw_dir).acquire(run_id="run-2")
    assert f"pid {os.getpid()}" in str(refused.value)
    assert refused.value.holder.runId == "run-1"
    with pytest.raises(LockHeldError):
        first.acquire(run_id="run-3")
    assert read_lock(hw_dir) == first.info


def test_update_changes_fields_and_keeps_lock_id_and_mode(hw_dir: Path) -> None:
    lock = RuntimeLock(hw_dir)
    acquired = lock.acquire(run_id=None).lock

    lock.update(run_id="run-2")
    updated = lock.update(port=51234, proxy_port=51235)

    assert updated == read_lock(hw_dir)
    assert updated.lockId == acquired.lockId and updated.token == acquired.token
    assert updated.startTime == acquired.startTime
    assert (updated.runId, updated.port, updated.proxyPort) == ("run-2", 51234, 51235)
    assert stat.S_IMODE((hw_dir / "runtime.lock").stat().st_mode) == 0o600


def test_token_is_kept_out_of_repr(hw_dir: Path) -> None:
    lock = RuntimeLock(hw_dir)
    info = lock.acquire().lock
    assert info.token and info.token not in repr(info)


# -- contention between real processes --------------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from hankweave.state.lock import RuntimeLock
RuntimeLock(Path(sys.argv[1])).acquire(run_id="run-child")
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are told by /proc")
def test_a_killed_holder_not_yet_reaped_holds_nothing(hw_dir: Path) -> None:
    """A killed runtime whose parent has not reaped it (a worker's pool child, a container
    whose init does not reap) is a zombie: kill(pid, 0) still answers, yet it holds nothing."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(hw_dir)], stdout=subprocess.PIPE, text=True,
        env=child_env(),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while process_running(child.pid):  # not reaped on purpose: no wait() yet
            assert time.monotonic() < deadline, "the child did not die"
            time.sleep(0.01)
        assert pid_alive(child.pid)  # still a zombie

        assert live_runtime_lock(hw_dir) is None
        result = RuntimeLock(hw_dir).acquire(run_id="run-parent")
        assert result.reclaimed_run_id == "run-child"
        assert result.reclaim_reason == "process not running"
    finally:
        child.kill()
        child.wait()


def test_a_live_process_holds_the_lock_until_it_is_killed(hw_dir: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(hw_dir)], stdout=subprocess.PIPE, text=True,
        env=child_env(),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        holder = read_lock(hw_dir)
        assert holder is not None and holder.pid == child.pid

        lock = RuntimeLock(hw_dir)
        with pytest.raises(LockHeldError) as refused:
            lock.acquire(run_id="run-parent")
        message = str(refused.value)
        assert f"pid {child.pid}" in message
        assert f"started {holder.startTime}" in message
        assert "stop it first or wait for it to exit" in message

        child.send_signal(signal.SIGKILL)
        # Reap it: an unreaped zombie still answers kill(pid, 0).
        child.wait()

        result = lock.acquire(run_id="run-parent")
        assert result.reclaimed_stale
        assert result.reclaimed_run_id == "run-child"
        assert result.reclaim_reason == "process not running"
        assert read_lock(hw_dir) == result.lock
        assert result.lock.pid == os.getpid()
    finally:
        child.kill()
        child.wait()


RACER = """
import sys, time
from pathlib import Path
from hankweave.state.lock import LockHeldError, RuntimeLock
hw_dir = Path(sys.argv[1])
lock = None
print("ready", flush=True)
for line in sys.stdin:
    command, *args = line.split()
    if command == "go":
        start_at = float(args[0])
        while time.time() < start_at:
            pass
        lock = RuntimeLock(hw_dir)
        try:
            lock.acquire(run_id="run-race")
            print("won", flush=True)
        except LockHeldError as exc:
            print("refused", exc.holder.pid, flush=True)
        except Exception as exc:
            print("error", repr(exc), flush=True)
    elif command == "release":
        if lock is not None and lock.held:
            lock.release()
        print("released", flush=True)
"""


def test_two_processes_racing_to_acquire_exactly_one_wins(hw_dir: Path) -> None:
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(hw_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
        )
        for _ in range(2)
    ]

    def send(proc: subprocess.Popen[str], line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    def receive(proc: subprocess.Popen[str]) -> list[str]:
        assert proc.stdout is not None
        return proc.stdout.readline().split()

    try:
        assert [receive(p) for p in racers] == [["ready"], ["ready"]]
        for _ in range(10):
            start_at = time.time() + 0.03
            for proc in racers:
                send(proc, f"go {start_at}")
            outcomes = [receive(proc) for proc in racers]

            winners = [p for p, out in zip(racers, outcomes, strict=True) if out == ["won"]]
            assert len(winners) == 1, outcomes
            loser_outcome = next(out for out in outcomes if out != ["won"])
            assert loser_outcome == ["refused", str(winners[0].pid)]
            holder = read_lock(hw_dir)
            assert holder is not None and holder.pid == winners[0].pid

            for proc in racers:
                send(proc, "release")
            assert [receive(p) for p in racers] == [["released"], ["released"]]
            assert read_lock(hw_dir) is None
    finally:
        for proc in racers:
            proc.kill()
            proc.wait()


# -- stale and legacy locks -------------------------------------------------------------------


def test_a_stale_heartbeat_is_reclaimed_even_if_the_pid_is_alive(hw_dir: Path, live_pid: int) -> None:
    write_raw_lock(hw_dir, foreign_lock(live_pid, heartbeat_age_s=121, run_id="run-stale"))

    result = RuntimeLock(hw_dir).acquire(run_id="run-new")

    assert result.reclaimed_stale and result.reclaim_reason == "heartbeat stale"
    assert result.reclaimed_run_id == "run-stale"
    assert read_lock(hw_dir) == result.lock


def test_a_fresh_heartbeat_with_a_live_pid_is_refused(hw_dir: Path, live_pid: int) -> None:
    write_raw_lock(hw_dir, foreign_lock(live_pid, heartbeat_age_s=100))

    with pytest.raises(LockHeldError, match=f"pid {live_pid}"):
        RuntimeLock(hw_dir).acquire()


def test_stale_after_can_be_shortened(hw_dir: Path, live_pid: int) -> None:
    write_raw_lock(hw_dir, foreign_lock(live_pid, heartbeat_age_s=2))

    assert RuntimeLock(hw_dir, stale_after_s=1).acquire().reclaimed_stale


def test_a_dead_pid_is_reclaimed_even_with_a_fresh_heartbeat(hw_dir: Path, dead_pid: int) -> None:
    write_raw_lock(hw_dir, foreign_lock(dead_pid, heartbeat_age_s=0, run_id="run-dead"))

    result = RuntimeLock(hw_dir).acquire(run_id="run-new")

    assert result.reclaim_reason == "process not running"
    assert result.reclaimed_run_id == "run-dead"
    assert result.reclaimed is not None and result.reclaimed.pid == dead_pid


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "empty"),
        ("{not json", "not JSON"),
        ("[4242]", "expected a JSON object or a bare pid"),
        ('{"lockId": "x"}', "pid"),
        ('{"pid": -3}', "pid"),
        ('{"pid": "abc"}', "pid"),
        ('{"pid": 4242, "lastHeartbeat": "yesterday"}', "lastHeartbeat"),
    ],
)
def test_an_unreadable_lock_is_refused_and_left_untouched(
    hw_dir: Path, content: str, reason: str
) -> None:
    path = write_raw_lock(hw_dir, content)

    with pytest.raises(LockCorruptError) as refused:
        RuntimeLock(hw_dir).acquire()
    assert str(path) in str(refused.value) and reason in str(refused.value)
    assert "delete the file" in str(refused.value)
    assert path.read_text() == content
    with pytest.raises(LockCorruptError):
        read_lock(hw_dir)


@pytest.mark.parametrize("render", [str, lambda pid: json.dumps(str(pid)), lambda pid: f"{pid}\n"])
def test_a_legacy_bare_pid_lock_is_understood(hw_dir: Path, live_pid: int, dead_pid: int, render) -> None:
    write_raw_lock(hw_dir, render(live_pid))
    legacy = read_lock(hw_dir)
    assert legacy == LockInfo(pid=live_pid)
    assert legacy.lastHeartbeat is None and legacy.lockId is None
    # Unknown heartbeat and a live pid: presumed running.
    with pytest.raises(LockHeldError, match=f"pid {live_pid}, start time unknown"):
        RuntimeLock(hw_dir).acquire()

    write_raw_lock(hw_dir, render(dead_pid))
    result = RuntimeLock(hw_dir).acquire(run_id="run-new")
    assert result.reclaimed == LockInfo(pid=dead_pid)
    assert result.reclaimed_run_id is None


def test_a_maintenance_lock_is_understood(hw_dir: Path, live_pid: int) -> None:
    beat = iso_ago(5)
    write_raw_lock(hw_dir, {"pid": live_pid, "lastHeartbeat": beat})

    assert read_lock(hw_dir) == LockInfo(pid=live_pid, lastHeartbeat=beat)
    with pytest.raises(LockHeldError):
        RuntimeLock(hw_dir).acquire()


def test_our_own_pid_left_by_an_earlier_process_is_reclaimed_only_when_stale(hw_dir: Path) -> None:
    write_raw_lock(hw_dir, foreign_lock(os.getpid(), heartbeat_age_s=10))
    with pytest.raises(LockHeldError, match=f"pid {os.getpid()}"):
        RuntimeLock(hw_dir).acquire()

    write_raw_lock(hw_dir, foreign_lock(os.getpid(), heartbeat_age_s=200, run_id="run-recycled"))
    result = RuntimeLock(hw_dir).acquire()
    assert result.reclaim_reason == "recycled pid"
    assert result.reclaimed_run_id == "run-recycled"


# -- heartbeat and fencing --------------------------------------------------------------------


def test_heartbeat_refreshes_last_heartbeat_only(hw_dir: Path) -> None:
    lock = RuntimeLock(hw_dir)
    before = lock.acquire(run_id="run-1").lock
    time.sleep(0.005)

    after = lock.heartbeat()

    assert parse_iso(after.lastHeartbeat) > parse_iso(before.lastHeartbeat)
    assert after.model_dump(exclude={"lastHeartbeat"}) == before.model_dump(exclude={"lastHeartbeat"})
    assert read_lock(hw_dir) == after


def test_heartbeat_is_fenced_when_another_runtime_replaced_the_lock(hw_dir: Path, live_pid: int) -> None:
    lock = RuntimeLock(hw_dir)
    lock.acquire(run_id="run-1")
    successor = foreign_lock(live_pid, run_id="run-2")
    path = write_raw_lock(hw_dir, successor)

    with pytest.raises(LockLostError, match=f"now belongs to pid {live_pid}") as lost:
        lock.heartbeat()
    assert lost.value.found is not None and lost.value.found.lockId == successor["lockId"]
    assert not lock.held
    with pytest.raises(LockLostError):
        lock.update(port=1)
    assert json.loads(path.read_text()) == successor


def test_heartbeat_is_fenced_when_the_lock_file_was_removed(hw_dir: Path) -> None:
    lock = RuntimeLock(hw_dir)
    lock.acquire()
    (hw_dir / "runtime.lock").unlink()

    with pytest.raises(LockLostError, match="was removed"):
        lock.heartbeat()
    assert not (hw_dir / "runtime.lock").exists()


def test_release_does_not_remove_someone_elses_lock(hw_dir: Path, live_pid: int) -> None:
    lock = RuntimeLock(hw_dir)
    lock.acquire()
    successor = foreign_lock(live_pid)
    path = write_raw_lock(hw_dir, successor)

    assert lock.release() is False
    assert json.loads(path.read_text()) == successor


def test_heartbeat_if_due_waits_for_the_interval(hw_dir: Path) -> None:
    lock = RuntimeLock(hw_dir, heartbeat_interval_s=0.05)
    lock.acquire()

    assert lock.heartbeat_if_due() is False
    time.sleep(0.06)
    assert lock.heartbeat_if_due() is True
    assert lock.heartbeat_if_due() is False


def test_heartbeat_forever_refreshes_until_cancelled(hw_dir: Path) -> None:
    lock = RuntimeLock(hw_dir)
    first = lock.acquire().lock

    async def scenario() -> None:
        task = asyncio.create_task(heartbeat_forever(lock, 0.01))
        await asyncio.sleep(0.08)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    latest = read_lock(hw_dir)
    assert latest is not None and latest.lockId == first.lockId
    assert parse_iso(latest.lastHeartbeat) > parse_iso(first.lastHeartbeat)


def test_heartbeat_forever_calls_on_lost_once_and_stops(hw_dir: Path, live_pid: int) -> None:
    lock = RuntimeLock(hw_dir)
    lock.acquire()
    write_raw_lock(hw_dir, foreign_lock(live_pid))
    lost: list[LockLostError] = []

    async def on_lost(exc: LockLostError) -> None:
        lost.append(exc)

    asyncio.run(asyncio.wait_for(heartbeat_forever(lock, 0.01, on_lost=on_lost), timeout=30))

    assert len(lost) == 1 and lost[0].found is not None and lost[0].found.pid == live_pid


# -- fsutil -----------------------------------------------------------------------------------


def test_atomic_write_keeps_a_backup_of_the_previous_content(tmp_path: Path) -> None:
    path, backup = tmp_path / "state.json", tmp_path / "state.json.bak"
    atomic_write_bytes(path, b"one", backup=backup)
    assert path.read_bytes() == b"one" and not backup.exists()

    atomic_write_bytes(path, b"two", backup=backup)

    assert path.read_bytes() == b"two" and backup.read_bytes() == b"one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.bak"]


def test_atomic_write_sets_the_mode_and_otherwise_keeps_the_existing_one(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    atomic_write_bytes(path, b"a", mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    atomic_write_bytes(path, b"b")

    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == b"b"


def test_utc_now_iso_looks_like_javascript_to_iso_string() -> None:
    stamp = utc_now_iso()
    assert ISO_MS_Z.match(stamp)
    assert abs((datetime.now(UTC) - parse_iso(stamp)).total_seconds()) < 5


def test_parse_iso_returns_aware_utc() -> None:
    assert parse_iso("2026-09-02T08:31:56.104Z") == datetime(2026, 9, 2, 8, 31, 56, 104000, tzinfo=UTC)
    assert parse_iso("2026-09-02T10:31:56+02:00") == datetime(2026, 9, 2, 8, 31, 56, tzinfo=UTC)
    assert parse_iso("2026-09-02T08:31:56").tzinfo is UTC
    with pytest.raises(ValueError):
        parse_iso("yesterday")


def test_pid_alive(dead_pid: int) -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid)
    assert not pid_alive(0) and not pid_alive(-1)


# ----- locks of another host (a shared filesystem) -----


def _foreign_lock(hw_dir, *, heartbeat_age_s: float) -> None:
    """A lock written on another machine, by a pid that does not exist here."""
    beat = (datetime.now(UTC) - timedelta(seconds=heartbeat_age_s)).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
    hw_dir.mkdir(parents=True, exist_ok=True)
    (hw_dir / LOCK_FILE_NAME).write_text(json.dumps({
        "pid": 4_000_000, "lockId": str(uuid.uuid4()), "startTime": beat,
        "lastHeartbeat": beat, "host": "another-machine"}))


def test_a_lock_of_another_host_is_live_while_its_heartbeat_is_fresh(hw_dir):
    _foreign_lock(hw_dir, heartbeat_age_s=5)

    assert live_runtime_lock(hw_dir) is not None  # its pid is not ours to probe
    with pytest.raises(LockHeldError):
        RuntimeLock(hw_dir).acquire()


def test_a_lock_of_another_host_with_a_stale_heartbeat_is_reclaimed(hw_dir):
    _foreign_lock(hw_dir, heartbeat_age_s=STALE_AFTER_S + 5)

    assert live_runtime_lock(hw_dir) is None
    result = RuntimeLock(hw_dir).acquire()
    assert result.reclaim_reason == "heartbeat stale (another host)"
    assert result.lock.host == this_host()


def test_hankweave_host_names_the_machine(monkeypatch):
    monkeypatch.setenv("HANKWEAVE_HOST", "worker-7")
    assert this_host() == "worker-7"
