"""``hankweave cleanup``: what it shows, when it asks, and what it refuses to remove."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from hankweave.cli.cleanup_cmd import CANCELLED, cleanup_command, disk_usage, format_size
from hankweave.execution.setup import ExecutionSetup, SetupRequest, setup_execution
from hankweave.state.lock import LockInfo


@pytest.fixture(autouse=True)
def managed_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "managed"
    monkeypatch.setenv("HANKWEAVE_HOME", str(root))
    return root


@pytest.fixture
def data(tmp_path: Path) -> Path:
    source = tmp_path / "data"
    source.mkdir()
    (source / "input.txt").write_text("precious data\n")
    return source


@pytest.fixture
def execution(tmp_path: Path, data: Path) -> ExecutionSetup:
    hank = tmp_path / "hank.json"
    hank.write_text('{"hank": []}')
    setup = setup_execution(
        SetupRequest(data_path=data, hank_path=hank, execution_path=tmp_path / "exec")
    )
    (setup.agent_root / "report.md").write_text("x" * 2048)
    return setup


def cleanup(*args: str | Path, input: str | None = None) -> Result:
    group = click.Group("hankweave")
    group.add_command(cleanup_command)
    return CliRunner().invoke(group, ["cleanup", *map(str, args)], input=input)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_lock(setup: ExecutionSetup, pid: int, heartbeat_age_s: float = 0.0) -> LockInfo:
    now = datetime.now(UTC)
    lock = LockInfo(
        pid=pid,
        lockId="lock-1",
        runId="run-1",
        startTime=iso(now - timedelta(seconds=heartbeat_age_s + 30)),
        lastHeartbeat=iso(now - timedelta(seconds=heartbeat_age_s)),
    )
    setup.layout.lock_file.write_bytes(lock.to_json_bytes())
    return lock


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_cleanup_with_yes_describes_and_removes_the_execution(
    execution: ExecutionSetup, data: Path
) -> None:
    size, files = disk_usage(execution.execution_path)

    result = cleanup("-e", execution.execution_path, "-y")

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"Execution directory: {execution.execution_path}" in out
    assert f"hank:      {execution.meta.hank_path}" in out
    assert f"data:      {data} (symlink)" in out
    assert "created:   " in out and "last used: " in out
    assert f"size:      {format_size(size)} in {files} files" in out
    assert size >= 2048  # the agent's file, but not the linked data
    assert f"Removed {execution.execution_path}." in out
    assert not execution.execution_path.exists()
    # The data source was linked, never followed.
    assert (data / "input.txt").read_text() == "precious data\n"


def test_cleanup_without_yes_and_without_a_terminal_removes_nothing(
    execution: ExecutionSetup,
) -> None:
    result = cleanup("-e", execution.execution_path)

    assert result.exit_code == 1
    assert CANCELLED in result.stderr
    assert "pass -y to confirm" in result.stderr
    assert (execution.agent_root / "report.md").exists()


@pytest.mark.parametrize(("answer", "removed"), [("y\n", True), ("n\n", False), ("", False)])
def test_cleanup_asks_on_a_terminal(
    execution: ExecutionSetup, monkeypatch: pytest.MonkeyPatch, answer: str, removed: bool
) -> None:
    monkeypatch.setattr("hankweave.cli.run_cmd.interactive", lambda: True)

    result = cleanup("-e", execution.execution_path, input=answer)

    assert "and everything in it? [y/N]" in result.stderr
    assert result.exit_code == (0 if removed else 1)
    assert execution.execution_path.exists() is not removed


def test_cleanup_refuses_while_a_live_runtime_holds_the_lock(execution: ExecutionSetup) -> None:
    lock = write_lock(execution, os.getpid())

    result = cleanup("-e", execution.execution_path, "-y")

    assert result.exit_code == 2
    assert f"pid {os.getpid()}" in result.output
    assert f"started {lock.startTime}" in result.output
    assert execution.layout.lock_file.exists()
    assert (execution.agent_root / "report.md").exists()


@pytest.mark.parametrize("stale", ["dead process", "old heartbeat"])
def test_a_stale_lock_does_not_block_cleanup(execution: ExecutionSetup, stale: str) -> None:
    if stale == "dead process":
        write_lock(execution, dead_pid())
    else:
        write_lock(execution, os.getpid(), heartbeat_age_s=600)

    result = cleanup("-e", execution.execution_path, "-y")

    assert result.exit_code == 0, result.output
    assert "A stale runtime lock is left from pid" in result.stdout
    assert not execution.execution_path.exists()


def test_an_unreadable_lock_blocks_cleanup(execution: ExecutionSetup) -> None:
    execution.layout.lock_file.write_text("{not a lock")

    result = cleanup("-e", execution.execution_path, "-y")

    assert result.exit_code == 2
    assert "Cannot read the runtime lock" in result.output
    assert execution.execution_path.exists()


def test_cleanup_refuses_a_directory_that_is_not_an_execution(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hi')\n")

    result = cleanup("-e", project, "-y")

    assert result.exit_code == 2
    assert "is not an execution directory (it has no .hankweave/)" in result.output
    assert (project / "main.py").exists()


def test_cleanup_refuses_a_missing_directory(tmp_path: Path) -> None:
    result = cleanup("-e", tmp_path / "nope", "-y")

    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_cleanup_refuses_a_symlink_to_an_execution(
    execution: ExecutionSetup, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(execution.execution_path)

    result = cleanup("-e", link, "-y")

    assert result.exit_code == 2
    assert "is a symbolic link" in result.output
    assert execution.execution_path.exists()


def test_cleanup_refuses_the_managed_root_even_if_it_looks_like_an_execution(
    managed_root: Path,
) -> None:
    (managed_root / ".hankweave").mkdir(parents=True)

    result = cleanup("-e", managed_root, "-y")

    assert result.exit_code == 2
    assert "it is the managed executions root" in result.output
    assert managed_root.exists()


def test_cleanup_refuses_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".hankweave").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))

    result = cleanup("-e", home, "-y")

    assert result.exit_code == 2
    assert "it is your home directory" in result.output
    assert home.exists()


def test_cleanup_refuses_the_filesystem_root() -> None:
    result = cleanup("-e", "/", "-y")

    assert result.exit_code == 2
    assert "it is the root directory" in result.output


def test_cleanup_refuses_a_directory_containing_the_managed_root(
    tmp_path: Path, managed_root: Path
) -> None:
    (tmp_path / ".hankweave").mkdir()
    managed_root.mkdir()

    result = cleanup("-e", tmp_path, "-y")

    assert result.exit_code == 2
    assert "it contains the managed executions root" in result.output
    assert managed_root.exists()


@pytest.mark.parametrize(
    ("size", "text"), [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * 1024**3, "5.0 GiB")]
)
def test_sizes_are_shown_in_binary_units(size: int, text: str) -> None:
    assert format_size(size) == text


def test_cleanup_refuses_the_root_hankweave_json_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``executionBaseDir`` in ./hankweave.json is a managed root too, whatever HANKWEAVE_HOME
    says: cleanup of it would remove every execution launched from here."""
    project = tmp_path / "project"
    (project / "runs" / ".hankweave").mkdir(parents=True)
    (project / "hankweave.json").write_text('{"executionBaseDir": "runs"}')
    monkeypatch.chdir(project)

    result = cleanup("-e", project / "runs", "-y")

    assert result.exit_code == 2
    assert "it is the managed executions root" in result.output
    assert (project / "runs").exists()
