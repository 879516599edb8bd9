"""The test-only fault switches (docs/crash-testing.md): kill points, disk faults, the trace;
and the clear error a full disk gives ``hankweave run``."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hankweave import faults
from hankweave.cli.run_cmd import storage_failure
from hankweave.faults import DISK_FAULT_ENV, KILL_AT_ENV, TRACE_ENV, disk_write, kill_point
from hankweave.state.store import PersistenceError
from tests.runtime_harness import Project, codon

REACH_THREE_TIMES = ("from hankweave.faults import kill_point\n"
                     "for n in range(3):\n"
                     "    kill_point('here')\n"
                     "    print(n, flush=True)\n")


@pytest.fixture(autouse=True)
def clean_faults(monkeypatch):
    for name in (KILL_AT_ENV, DISK_FAULT_ENV, TRACE_ENV):
        monkeypatch.delenv(name, raising=False)
    faults.reset()
    yield
    faults.reset()


def reach_three_times(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", REACH_THREE_TIMES], text=True,
                          capture_output=True, env={**os.environ, **env}, timeout=30)


def test_a_point_does_nothing_when_no_switch_is_set():
    kill_point("here")
    disk_write("/nowhere")


def test_a_kill_point_kills_the_process_the_nth_time_it_is_reached():
    result = reach_three_times(**{KILL_AT_ENV: "here@2"})
    assert result.returncode == -signal.SIGKILL
    assert result.stdout.split() == ["0"]
    assert "kill point here@2 reached" in result.stderr


def test_other_points_and_counts_never_kill():
    assert reach_three_times(**{KILL_AT_ENV: "elsewhere"}).returncode == 0
    assert reach_three_times(**{KILL_AT_ENV: "here@4"}).returncode == 0


def test_the_trace_lists_every_point_reached(tmp_path: Path):
    trace = tmp_path / "trace.txt"
    assert reach_three_times(**{TRACE_ENV: str(trace)}).returncode == 0
    assert trace.read_text().split() == ["here", "here", "here"]


def test_a_disk_fault_begins_at_its_point_and_stays(monkeypatch):
    monkeypatch.setenv(DISK_FAULT_ENV, "ENOSPC:here@2")
    kill_point("here")
    disk_write("/x/state.wal")
    kill_point("here")
    for _ in range(2):
        with pytest.raises(OSError) as raised:
            disk_write("/x/state.wal")
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == "/x/state.wal"


def test_a_disk_fault_can_begin_at_the_nth_write(monkeypatch):
    monkeypatch.setenv(DISK_FAULT_ENV, "EROFS:disk.write@2")
    disk_write("a")
    with pytest.raises(OSError, match="Read-only file system"):
        disk_write("b")


def test_a_storage_error_says_what_where_and_how_to_resume():
    cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    error = PersistenceError("cannot append to /x/.hankweave/state.wal: No space left on device")
    error.__cause__ = cause
    message = storage_failure(error, "/x")
    assert message == (
        "The run's records could not be written: cannot append to /x/.hankweave/state.wal: No"
        " space left on device. The run stopped; everything it recorded before is kept. Free"
        " some disk space, then resume with `hankweave run -e /x`.")
    assert storage_failure(RuntimeError("a bug"), "/x") is None


def test_a_full_disk_mid_run_exits_1_with_one_clear_paragraph(tmp_path: Path):
    project = Project(tmp_path)
    project.write_hank([codon("a"), codon("b")])
    env = {**project.env, DISK_FAULT_ENV: "ENOSPC:harness.message@2"}
    result = subprocess.run(
        [sys.executable, "-m", "hankweave", "run", str(project.hank_dir), str(project.data),
         "-e", str(project.exec_dir), "--headless"], cwd=tmp_path, env=env, text=True,
        capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert "No space left on device" in errors[0] and str(project.exec_dir) in errors[0]
    assert f"resume with `hankweave run -e {project.exec_dir}`" in errors[0]
