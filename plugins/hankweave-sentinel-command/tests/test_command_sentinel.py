"""The command sentinel kind: its options, its load-time check, and its firings, each running a
real process (a Python one-liner or the tests' tiny linter)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from command_helpers import (
    ECHO_ARGS,
    ECHO_STDIN,
    LINTER,
    body,
    build,
    fire,
    firing,
    python,
    report,
    write,
)
from hankweave_sentinel_command import CommandOptions, CommandSentinel
from pydantic import ValidationError

from hankweave.api import SentinelError, SentinelFatalError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "exec" / "agentRoot"
    root.mkdir(parents=True)
    return root


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for_file(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def gone(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.01)
    return False


def sleeper_with_child(pid_file: Path) -> list[str]:
    """A command that starts a child which sleeps, writes the child's pid, and sleeps too."""
    return python("import subprocess, sys, time\n"
                  "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                  f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
                  "time.sleep(60)\n")


# ----- options -----


def test_options_default_to_a_linter_over_every_file():
    options = CommandOptions.model_validate({"command": ["ruff", "check"]})
    assert options.files == ["**/*"] and options.exclude == []
    assert (options.timeout_seconds, options.max_output_bytes) == (60, 64 * 1024)
    assert (options.pass_files, options.run_when_no_changes, options.fail_on_exit_code) == (
        "args", False, False)


def test_options_are_camel_case():
    options = CommandOptions.model_validate({
        "command": ["x"], "timeoutSeconds": 5, "maxOutputBytes": 10, "passFiles": "stdin",
        "runWhenNoChanges": True, "failOnExitCode": True})
    assert (options.timeout_seconds, options.max_output_bytes, options.pass_files) == (
        5, 10, "stdin")
    assert options.run_when_no_changes and options.fail_on_exit_code


@pytest.mark.parametrize("options, where", [
    ({}, "command"),
    ({"command": []}, "command"),
    ({"command": "ruff check"}, "command"),
    ({"command": [""]}, "command.0"),
    ({"command": ["x"], "timeoutSeconds": 0}, "timeoutSeconds"),
    ({"command": ["x"], "maxOutputBytes": 0}, "maxOutputBytes"),
    ({"command": ["x"], "passFiles": "env"}, "passFiles"),
    ({"command": ["x"], "runWhenNoChanges": "yes"}, "runWhenNoChanges"),
    ({"command": ["x"], "files": []}, "files"),
    ({"command": ["x"], "shell": True}, "shell"),
])
def test_invalid_options_are_refused_at_their_key(options, where):
    with pytest.raises(ValidationError) as raised:
        CommandOptions.model_validate(options)
    assert [".".join(map(str, error["loc"])) for error in raised.value.errors()] == [where]


# ----- the check when the config loads -----


def check(command: list[str], tmp_path: Path) -> None:
    CommandSentinel.check(SimpleNamespace(options={"command": command}), tmp_path)


def test_a_program_on_path_or_an_executable_path_passes_the_check(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    check([os.path.basename(sys.executable), "-m", "py_compile"], tmp_path)
    check([sys.executable], tmp_path)


def test_a_program_missing_from_path_fails_the_check(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match=re.escape("options.command: 'no-such-linter' is not on PATH")):
        check(["no-such-linter", "--check"], tmp_path)


def test_an_absolute_path_that_is_not_executable_fails_the_check(tmp_path):
    script = tmp_path / "lint.sh"
    script.write_text("#!/bin/sh\n")
    for missing in (script, tmp_path / "absent"):
        with pytest.raises(ValueError, match="is not an executable file"):
            check([str(missing)], tmp_path)


def test_a_relative_path_passes_the_check_it_resolves_in_the_agent_root_later(tmp_path):
    check(["./tools/lint.sh"], tmp_path)
    check(["tools/lint"], tmp_path)


# ----- firing -----


def test_nothing_changed_writes_nothing_and_runs_nothing(root):
    marker = root.parent / "ran"
    sentinel = build(root, command=python(f"open({str(marker)!r}, 'w')"))
    assert fire(sentinel) is None
    assert not marker.exists()


def test_run_when_no_changes_runs_the_command_all_the_same(root):
    sentinel = build(root, command=ECHO_ARGS, runWhenNoChanges=True)
    text = report(sentinel)
    assert "changed files: 0 (0 created, 0 modified, 0 deleted)" in text
    assert json.loads(body(text)) == []


def test_the_changed_files_are_the_arguments_and_deleted_ones_are_only_reported(root):
    write(root, {"keep.py": "k = 1\n", "edit.py": "e = 1\n", "gone.py": "g = 1\n"})
    sentinel = build(root, command=ECHO_ARGS)
    write(root, {"edit.py": "e = 22\n", "pkg/new.py": "n = 1\n"})
    (root / "gone.py").unlink()
    text = report(sentinel)
    assert json.loads(body(text)) == ["edit.py", "pkg/new.py"]
    header = text.split("\n\n")[0].splitlines()
    assert header[0].endswith("(+2 changed files as arguments)")
    assert header[1].startswith("exit code: 0 after ")
    assert header[2:] == ["changed files: 3 (1 created, 1 modified, 1 deleted)",
                          "checked: edit.py, pkg/new.py", "deleted: gone.py"]


def test_each_firing_reports_what_changed_since_the_previous_one(root):
    sentinel = build(root, command=ECHO_ARGS)
    write(root, {"a.py": "a = 1\n"})
    assert json.loads(body(report(sentinel, 1))) == ["a.py"]
    assert fire(sentinel, 2) is None
    write(root, {"b.py": "b = 1\n"})
    assert json.loads(body(report(sentinel, 3))) == ["b.py"]


def test_only_selected_files_count_as_changes(root):
    sentinel = build(root, command=ECHO_ARGS, files=["**/*.py"], exclude=["gen/**"])
    write(root, {"notes.md": "n", "gen/out.py": "x = 1\n"})
    assert fire(sentinel) is None
    write(root, {"src/a.py": "a = 1\n"})
    assert json.loads(body(report(sentinel))) == ["src/a.py"]


def test_a_path_that_looks_like_an_option_is_passed_as_a_path(root):
    sentinel = build(root, command=ECHO_ARGS)
    write(root, {"-rf.py": ""})
    assert json.loads(body(report(sentinel))) == ["./-rf.py"]


def test_pass_files_stdin_writes_one_path_a_line(root):
    sentinel = build(root, command=ECHO_STDIN, passFiles="stdin")
    write(root, {"b.py": "", "a.py": ""})
    text = report(sentinel)
    assert json.loads(body(text)) == "a.py\nb.py\n"
    assert text.startswith("$ ") and "(2 changed files on stdin)" in text.splitlines()[0]


def test_pass_files_none_gives_the_command_neither(root):
    code = "import json, sys; print(json.dumps([sys.argv[1:], sys.stdin.read()]))"
    sentinel = build(root, command=python(code), passFiles="none")
    write(root, {"a.py": ""})
    assert json.loads(body(report(sentinel))) == [[], ""]


def test_the_command_runs_in_the_agent_root_with_the_setup_environment(root):
    code = "import json, os; print(json.dumps([os.getcwd(), os.environ.get('LINT_LEVEL'), " \
           "os.environ.get('ONLY_IN_THE_TEST_PROCESS')]))"
    os.environ["ONLY_IN_THE_TEST_PROCESS"] = "1"
    try:
        sentinel = build(root, command=python(code), env={"LINT_LEVEL": "strict"},
                         runWhenNoChanges=True)
        assert json.loads(body(report(sentinel))) == [str(root.resolve()), "strict", None]
    finally:
        del os.environ["ONLY_IN_THE_TEST_PROCESS"]


def test_a_linter_finding_is_the_output_of_a_non_zero_exit(root):
    sentinel = build(root, command=LINTER, files=["**/*.py"])
    write(root, {"bad.py": "def f(:\n", "good.py": "x = 1\n"})
    answer = fire(sentinel)
    assert answer is not None and isinstance(answer.content, str)
    assert "exit code: 1 after" in answer.content
    assert body(answer.content) == "bad.py:1: invalid syntax"
    assert (answer.cost, answer.llm_call, answer.structured) == (0.0, False, False)


def test_a_clean_run_says_so(root):
    sentinel = build(root, command=LINTER, files=["**/*.py"])
    write(root, {"good.py": "x = 1\n"})
    text = report(sentinel)
    assert "exit code: 0 after" in text and body(text) == "(no output)"


def test_stdout_and_stderr_are_both_kept(root):
    code = "import sys; print('to stdout', flush=True); print('to stderr', file=sys.stderr)"
    sentinel = build(root, command=python(code), runWhenNoChanges=True)
    assert body(report(sentinel)).splitlines() == ["to stdout", "to stderr"]


def test_fail_on_exit_code_makes_a_non_zero_exit_a_failure_and_checks_again(root):
    sentinel = build(root, command=LINTER, files=["**/*.py"], failOnExitCode=True)
    write(root, {"bad.py": "def f(:\n"})
    for number in (1, 2):  # the failed firing did not advance the snapshot
        with pytest.raises(SentinelError, match=re.escape("exited with code 1: bad.py:1: invalid syntax")):
            fire(sentinel, number)
    write(root, {"bad.py": "def f(): pass\n"})
    assert "exit code: 0" in report(sentinel, 3)
    assert fire(sentinel, 4) is None


def test_a_long_output_is_cut_with_a_note(root):
    sentinel = build(root, command=python("print('x' * 10000)"), runWhenNoChanges=True,
                     maxOutputBytes=100)
    output = body(report(sentinel))
    assert output == "x" * 100 + "\n[output truncated: the first 100 of 10001 bytes are shown]"


def test_a_command_past_its_timeout_is_killed_with_its_children(root):
    pid_file = root.parent / "child.pid"
    sentinel = build(root, command=sleeper_with_child(pid_file), timeoutSeconds=1)
    write(root, {"a.py": ""})
    started = time.monotonic()
    with pytest.raises(SentinelError, match=r"timed out after 1s") as raised:
        fire(sentinel)
    assert not isinstance(raised.value, SentinelFatalError)
    assert time.monotonic() - started < 30  # not the 60 s sleep (room for a loaded machine)
    assert gone(int(pid_file.read_text()))


def test_a_child_left_holding_the_output_is_killed_at_the_timeout(root):
    """The program exits at once; its child keeps the output pipe open and sleeps."""
    pid_file = root.parent / "child.pid"
    code = ("import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n")
    sentinel = build(root, command=python(code), timeoutSeconds=1, runWhenNoChanges=True)
    with pytest.raises(SentinelError, match="timed out after 1s"):
        fire(sentinel)
    assert gone(int(pid_file.read_text()))


def test_a_timed_out_firing_checks_the_same_files_next_time(root):
    flag = root.parent / "slow"
    flag.write_text("")
    code = (f"import os, sys, time\nif os.path.exists({str(flag)!r}): time.sleep(30)\n"
            "print(sys.argv[1:])")
    sentinel = build(root, command=python(code), timeoutSeconds=0.5)
    write(root, {"a.py": ""})
    with pytest.raises(SentinelError, match="timed out"):
        fire(sentinel, 1)
    flag.unlink()
    assert body(report(sentinel, 2)) == "['a.py']"


def test_a_missing_program_unloads_the_sentinel_as_a_configuration_error(root):
    sentinel = build(root, command=["./tools/missing-linter"], runWhenNoChanges=True)
    with pytest.raises(SentinelFatalError, match="cannot be started") as raised:
        fire(sentinel)
    assert raised.value.fatal_type == "configuration"


def test_a_program_that_is_not_executable_is_a_configuration_error(root):
    (root / "lint.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "lint.sh").chmod(stat.S_IRUSR | stat.S_IWUSR)
    sentinel = build(root, command=["./lint.sh"], runWhenNoChanges=True)
    with pytest.raises(SentinelFatalError) as raised:
        fire(sentinel)
    assert raised.value.fatal_type == "configuration"


def test_a_command_line_too_long_to_start_is_a_failure_that_names_the_fix(root):
    sentinel = build(root, command=[sys.executable, "-c", "pass", "x" * 200_000])
    write(root, {"a.py": ""})
    with pytest.raises(SentinelError, match='command line is too long with 1 changed files as'
                                            ' arguments') as raised:
        fire(sentinel)
    assert not isinstance(raised.value, SentinelFatalError)


def test_a_cancelled_firing_kills_its_command(root):
    pid_file = root.parent / "child.pid"
    sentinel = build(root, command=sleeper_with_child(pid_file), runWhenNoChanges=True)

    async def scenario() -> int:
        task = asyncio.create_task(sentinel.fire(firing()))
        child = int(await asyncio.to_thread(wait_for_file, pid_file))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return child

    assert gone(asyncio.run(scenario()))


def test_closing_the_sentinel_kills_the_command_of_a_firing_in_progress(root):
    pid_file = root.parent / "child.pid"
    sentinel = build(root, command=sleeper_with_child(pid_file), runWhenNoChanges=True)

    async def scenario() -> int:
        task = asyncio.create_task(sentinel.fire(firing()))
        child = int(await asyncio.to_thread(wait_for_file, pid_file))
        await sentinel.aclose()
        with pytest.raises(SentinelError, match="the sentinel unloaded"):
            await asyncio.wait_for(task, 10)
        return child

    assert gone(asyncio.run(scenario()))
