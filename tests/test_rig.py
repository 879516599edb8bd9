"""Rig setup: copy and command operations, failures, timeouts and throttled output."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from hankweave.config.hank import RigOperation
from hankweave.runtime.rig import CommandPolicy, RigFailure, RigResult, run_command, run_rig

OPS = TypeAdapter(list[RigOperation])


def ops(*items: dict[str, Any]) -> list[RigOperation]:
    return OPS.validate_python(list(items), by_alias=True)


def copy_op(src: str, to: str, **extra: Any) -> dict[str, Any]:
    return {"type": "copy", "copy": {"from": src, "to": to}, **extra}


def command_op(run: str, **extra: Any) -> dict[str, Any]:
    command = {"run": run}
    if "workingDirectory" in extra:
        command["workingDirectory"] = extra.pop("workingDirectory")
    return {"type": "command", "command": command, **extra}


@dataclass
class Recorder:
    outputs: list[tuple[int, str, str]] = field(default_factory=list)
    operations: list[tuple[int, int, str]] = field(default_factory=list)
    failures: list[RigFailure] = field(default_factory=list)


@dataclass
class Layout:
    hank_dir: Path
    agent_root: Path


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    hank_dir = tmp_path / "hank"
    agent_root = tmp_path / "exec" / "agentRoot"
    (hank_dir / "templates" / "app" / "src").mkdir(parents=True)
    (hank_dir / "templates" / "app" / "src" / "main.py").write_text("print('hi')\n")
    (hank_dir / "templates" / "readme.md").write_text("# Readme\n")
    agent_root.mkdir(parents=True)
    return Layout(hank_dir, agent_root)


def rig(
    layout: Layout,
    operations: Sequence[RigOperation],
    *,
    env: dict[str, str] | None = None,
    ignore_failures: bool = False,
    timeout_s: float | None = None,
) -> tuple[RigResult, Recorder]:
    recorder = Recorder()
    result = asyncio.run(
        run_rig(
            operations,
            agent_root=layout.agent_root,
            hank_dir=layout.hank_dir,
            env=env or {},
            ignore_failures=ignore_failures,
            timeout_s=timeout_s,
            on_output=lambda i, stream, line: recorder.outputs.append((i, stream, line)),
            on_operation=lambda i, n, text: recorder.operations.append((i, n, text)),
            on_failure=recorder.failures.append,
        )
    )
    return result, recorder


# ----- copy -----


def test_copy_a_file_into_agent_root(layout: Layout) -> None:
    result, recorder = rig(layout, ops(copy_op("templates/readme.md", "README.md")))

    assert result.ok and result.succeeded_count == 1
    assert (layout.agent_root / "README.md").read_text() == "# Readme\n"
    assert result.created_dirs == [layout.agent_root / "README.md"]
    assert recorder.operations == [(0, 1, "copy templates/readme.md → README.md")]


def test_copy_a_directory_tree(layout: Layout) -> None:
    result, _ = rig(layout, ops(copy_op("templates/app", "app")))

    assert result.ok
    assert (layout.agent_root / "app" / "src" / "main.py").read_text() == "print('hi')\n"


def test_copy_replaces_an_existing_target(layout: Layout) -> None:
    stale = layout.agent_root / "app"
    (stale / "old").mkdir(parents=True)
    (stale / "old" / "leftover.txt").write_text("stale")

    result, _ = rig(layout, ops(copy_op("templates/app", "app")))

    assert result.ok
    assert not (stale / "old").exists()
    assert (stale / "src" / "main.py").exists()


def test_copy_keeps_symlinks_inside_a_tree(layout: Layout) -> None:
    os.symlink("main.py", layout.hank_dir / "templates" / "app" / "src" / "link.py")

    result, _ = rig(layout, ops(copy_op("templates/app", "app")))

    copied = layout.agent_root / "app" / "src" / "link.py"
    assert result.ok and copied.is_symlink() and os.readlink(copied) == "main.py"


def test_copy_needs_the_target_parent_to_exist(layout: Layout) -> None:
    result, recorder = rig(layout, ops(copy_op("templates/readme.md", "docs/README.md")))

    assert result.failed is not None
    assert result.failed.message.startswith("Target parent directory does not exist")
    assert (result.failed.op_type, result.failed.failure_type) == ("copy", "other")
    assert result.failed.exit_code is None
    assert recorder.failures == [result.failed]


def test_copy_needs_the_source_to_exist(layout: Layout) -> None:
    result, _ = rig(layout, ops(copy_op("templates/missing.md", "README.md")))

    assert result.failed is not None
    assert result.failed.message.startswith("Source path does not exist")


def test_copy_target_may_not_leave_agent_root(layout: Layout) -> None:
    result, _ = rig(layout, ops(copy_op("templates/readme.md", "../escaped.md")))

    assert result.failed is not None
    assert result.failed.message == 'Invalid target path "../escaped.md"'
    assert not (layout.agent_root.parent / "escaped.md").exists()


# ----- commands -----


def test_command_runs_in_agent_root(layout: Layout) -> None:
    result, _ = rig(layout, ops(command_op("pwd > where.txt")))

    assert result.ok
    assert result.outcomes[0].exit_code == 0
    where = (layout.agent_root / "where.txt").read_text().strip()
    assert Path(where).resolve() == layout.agent_root.resolve()


def test_failing_command_reports_its_exit_code_and_stderr(layout: Layout) -> None:
    result, recorder = rig(layout, ops(command_op("echo broken >&2; exit 3")))

    failure = result.failed
    assert failure is not None
    assert (failure.index, failure.op_type, failure.failure_type) == (
        0,
        "command",
        "command_failed",
    )
    assert failure.exit_code == 3
    assert "exit code 3" in failure.message
    assert failure.stderr_tail.strip() == "broken"
    assert not failure.ignored
    assert recorder.failures == [failure]


def test_command_killed_by_a_signal_has_exit_code_minus_one(layout: Layout) -> None:
    result, _ = rig(layout, ops(command_op("kill -9 $$")))

    assert result.failed is not None and result.failed.exit_code == -1


def test_first_fatal_failure_stops_rig_setup(layout: Layout) -> None:
    result, recorder = rig(layout, ops(command_op("exit 1"), command_op("touch ran")))

    assert result.failed is not None and result.failed.index == 0
    assert not (layout.agent_root / "ran").exists()
    assert len(result.outcomes) == 1
    assert [op[0] for op in recorder.operations] == [0]


def test_last_copied_working_directory_is_the_last_copy_target(layout: Layout) -> None:
    result, _ = rig(
        layout,
        ops(
            copy_op("templates/app", "app"),
            command_op("pwd > where.txt", workingDirectory="lastCopied"),
        ),
    )

    assert result.ok
    where = (layout.agent_root / "app" / "where.txt").read_text().strip()
    assert Path(where).resolve() == (layout.agent_root / "app").resolve()


def test_last_copied_without_a_copy_runs_in_agent_root(layout: Layout) -> None:
    result, _ = rig(layout, ops(command_op("touch here", workingDirectory="lastCopied")))

    assert result.ok and (layout.agent_root / "here").exists()


def test_command_gets_the_codon_env_on_top_of_the_runtime_env(layout: Layout) -> None:
    result, _ = rig(
        layout,
        ops(command_op('printf "%s|%s" "$RIG_GREETING" "${PATH:+has-path}" > env.txt')),
        env={"RIG_GREETING": "hello"},
    )

    assert result.ok
    assert (layout.agent_root / "env.txt").read_text() == "hello|has-path"


def test_timeout_kills_the_command_and_reports_timeout(layout: Layout) -> None:
    started = time.monotonic()

    result, _ = rig(layout, ops(command_op("sleep 30")), timeout_s=0.3)

    assert time.monotonic() - started < 25  # not the command's 30 s (room for a loaded machine)
    failure = result.failed
    assert failure is not None
    assert failure.failure_type == "timeout"
    assert failure.exit_code == -1
    assert "timed out" in failure.message


def test_timeout_kills_the_whole_process_group(layout: Layout) -> None:
    pid_file = layout.agent_root / "child.pid"

    result, _ = rig(
        layout, ops(command_op(f"sleep 30 & echo $! > {pid_file}; wait")), timeout_s=0.5
    )

    assert result.failed is not None and result.failed.failure_type == "timeout"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the background child outlived the timeout")


def test_allow_failure_continues_and_marks_the_failure_ignored(layout: Layout) -> None:
    result, recorder = rig(
        layout, ops(command_op("exit 2", allowFailure=True), command_op("touch ran"))
    )

    assert result.ok
    assert (layout.agent_root / "ran").exists()
    assert (result.succeeded_count, result.failed_count) == (1, 1)
    assert len(recorder.failures) == 1 and recorder.failures[0].ignored


def test_ignore_failures_flag_treats_every_op_as_allowed_to_fail(layout: Layout) -> None:
    result, recorder = rig(
        layout,
        ops(copy_op("templates/missing", "x"), command_op("exit 1"), command_op("touch ran")),
        ignore_failures=True,
    )

    assert result.ok
    assert (layout.agent_root / "ran").exists()
    assert [failure.ignored for failure in recorder.failures] == [True, True]


def test_output_is_throttled_and_the_last_line_is_flushed(layout: Layout) -> None:
    result, recorder = rig(layout, ops(command_op("for i in $(seq 1 3000); do echo line$i; done")))

    assert result.ok
    stdout = [line for index, stream, line in recorder.outputs if stream == "stdout"]
    assert 1 <= len(stdout) <= 3
    assert stdout[-1] == "line3000"
    assert all(index == 0 for index, _, _ in recorder.outputs)


def test_output_lines_are_trimmed_to_500_characters(layout: Layout) -> None:
    _, recorder = rig(layout, ops(command_op("printf '%0900d\\n' 0 >&2")))

    assert recorder.outputs == [(0, "stderr", "0" * 500)]


def test_slow_output_reaches_the_callback_line_by_line(layout: Layout) -> None:
    _, recorder = rig(layout, ops(command_op("echo first; sleep 1.3; echo second")))

    assert [line for _, _, line in recorder.outputs] == ["first", "second"]


def test_run_command_returns_captured_output() -> None:
    result = asyncio.run(run_command("echo out; echo err >&2", cwd=Path("/"), env=dict(os.environ)))

    assert result.ok
    assert (result.stdout, result.stderr) == ("out\n", "err\n")


def test_run_command_does_not_hang_on_a_background_process_holding_the_pipe(
    tmp_path: Path,
) -> None:
    started = time.monotonic()

    result = asyncio.run(
        run_command("sleep 30 & echo $! > bg.pid", cwd=tmp_path, env=dict(os.environ))
    )

    os.kill(int((tmp_path / "bg.pid").read_text()), signal.SIGKILL)
    assert result.ok
    assert time.monotonic() - started < 25  # not the background process's 30 s


# ----- a replay's commands (CommandPolicy) -----


def test_skipped_commands_do_not_run_and_are_no_failure(layout: Layout) -> None:
    marker = layout.agent_root.parent / "ran"
    notices: list[str] = []
    result = asyncio.run(run_rig(
        ops(command_op(f"touch {marker}"), copy_op("templates/readme.md", "README.md"),
            command_op("exit 3")),
        agent_root=layout.agent_root, hank_dir=layout.hank_dir, env={},
        ignore_failures=False, timeout_s=None, on_output=lambda *a: None,
        on_operation=lambda *a: None, on_failure=lambda f: None,
        commands=CommandPolicy.SKIP, on_notice=notices.append))

    assert result.ok and result.failed_count == 0
    assert [o.skipped for o in result.outcomes] == [True, False, True]
    assert not marker.exists()
    assert (layout.agent_root / "README.md").read_text() == "# Readme\n"  # copies still run
    assert notices == [
        f"rig operation 1/3: `touch {marker}` skipped: a recording's commands are its"
        " author's code; pass --allow-commands to run them",
        "rig operation 3/3: `exit 3` skipped: a recording's commands are its author's code;"
        " pass --allow-commands to run them"]


def test_announced_commands_are_printed_then_run(layout: Layout) -> None:
    marker = layout.agent_root.parent / "ran"
    notices: list[str] = []
    result = asyncio.run(run_rig(
        ops(command_op(f"touch {marker}")), agent_root=layout.agent_root,
        hank_dir=layout.hank_dir, env={}, ignore_failures=False, timeout_s=None,
        on_output=lambda *a: None, on_operation=lambda *a: None, on_failure=lambda f: None,
        commands=CommandPolicy.ANNOUNCE, on_notice=notices.append))

    assert result.ok and marker.exists()
    assert notices == [f"rig operation 1/1: running `touch {marker}` (--allow-commands)"]
