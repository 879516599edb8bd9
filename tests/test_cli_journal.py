"""``hankweave journal``: formats, filters, corrupt lines, and --follow."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from hankweave.cli.journal_cmd import journal_command
from hankweave.events.catalogue import make_event
from hankweave.events.journal import EventJournal, journal_path
from hankweave.fsutil import utc_now_iso
from hankweave.state.lock import LockInfo

EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("info", {"message": "Runtime started"}),
    (
        "codon.started",
        {
            "codonId": "survey",
            "codonName": "Survey the data",
            "sessionId": "sess-1",
            "startTime": "2026-02-05T10:00:00.000Z",
        },
    ),
    (
        "state.transition",
        {
            "transitionType": "CodonStarted",
            "runId": "run-1",
            "codonId": "survey",
            "transition": {"type": "CodonStarted", "data": {"codonId": "survey"}},
            "resultingState": {
                "currentRunId": "run-1",
                "runCount": 1,
                "totalCost": 0,
                "currentRunCost": 0,
            },
        },
    ),
    (
        "assistant.action",
        {"codonId": "survey", "action": "message", "content": "Reading the harbour log\nnow."},
    ),
    (
        "assistant.action",
        {
            "codonId": "survey",
            "action": "tool_use",
            "content": "",
            "toolName": "Read",
            "toolInput": {"file_path": "data/sample.txt"},
            "toolUseId": "toolu_1",
        },
    ),
    (
        "token.usage",
        {
            "codonId": "survey",
            "inputTokens": 120,
            "outputTokens": 45,
            "cacheCreationTokens": 0,
            "cacheReadTokens": 300,
            "totalCost": 0.0123,
        },
    ),
    (
        "codon.completed",
        {
            "codonId": "survey",
            "success": True,
            "cost": 0.0123,
            "duration": 4200,
            "exitStatus": {"type": "success"},
        },
    ),
    (
        "codon.started",
        {
            "codonId": "polish#0",
            "codonName": "Polish",
            "sessionId": "sess-2",
            "startTime": "2026-02-05T10:01:00.000Z",
        },
    ),
    ("error", {"message": "Provider overloaded", "codon": "polish#1", "fatal": False}),
]


def append(path: Path, events: list[tuple[str, dict[str, Any]]]) -> None:
    with EventJournal(path) as journal:
        for event_type, data in events:
            journal.append(make_event(event_type, data, seq=journal.next_seq))


@pytest.fixture
def exec_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "exec"
    append(journal_path(directory), EVENTS)
    return directory


def journal(*args: str | Path) -> Result:
    group = click.Group("hankweave")
    group.add_command(journal_command)
    return CliRunner().invoke(group, ["journal", *map(str, args)])


def seqs(output: str) -> list[int]:
    return [int(line.split()[0]) for line in output.splitlines()]


def test_human_format_prints_one_line_per_event_with_a_summary(exec_dir: Path) -> None:
    result = journal("-e", exec_dir)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert seqs(result.stdout) == list(range(1, len(EVENTS) + 1))
    started = lines[1].split()
    assert started[0] == "2"
    assert started[3:6] == ["codon.started", "survey", "Survey"]
    assert "CodonStarted  run run-1" in lines[2]
    assert "message: Reading the harbour log now." in lines[3]
    assert 'tool Read {"file_path": "data/sample.txt"}' in lines[4]
    assert "in 120 out 45 cache read 300 write 0  $0.0123" in lines[5]
    assert "completed  $0.0123  4.2s" in lines[6]
    assert lines[8].split()[4] == "polish#1"
    assert "Provider overloaded" in lines[8]
    assert result.stderr == ""


def test_json_prints_each_event_exactly_as_journaled(exec_dir: Path) -> None:
    result = journal("-e", exec_dir, "--json")

    assert result.exit_code == 0, result.output
    assert result.stdout == journal_path(exec_dir).read_text()


def test_type_filter_takes_exact_types_and_prefixes(exec_dir: Path) -> None:
    exact = journal("-e", exec_dir, "--type", "info", "--type", "error")
    prefix = journal("-e", exec_dir, "--type", "codon.*")

    assert seqs(exact.stdout) == [1, 9]
    assert seqs(prefix.stdout) == [2, 7, 8]


def test_an_unknown_type_is_warned_about(exec_dir: Path) -> None:
    result = journal("-e", exec_dir, "--type", "codon.finished")

    assert result.exit_code == 0
    assert result.stdout == ""
    assert "'codon.finished' is not an event type" in result.stderr


def test_codon_filter_matches_every_iteration_of_a_loop_codon(exec_dir: Path) -> None:
    loop_codon = journal("-e", exec_dir, "--codon", "polish")
    iteration = journal("-e", exec_dir, "--codon", "polish#1")
    top_level = journal("-e", exec_dir, "--codon", "survey")

    assert seqs(loop_codon.stdout) == [8, 9]
    assert seqs(iteration.stdout) == [9]
    assert seqs(top_level.stdout) == [2, 3, 4, 5, 6, 7]


def test_run_filter_keeps_only_the_events_that_name_that_run(exec_dir: Path) -> None:
    append(
        journal_path(exec_dir),
        [
            ("info", {"message": "Runtime resumed"}),
            (
                "state.transition",
                {
                    "transitionType": "CodonStarted",
                    "runId": "run-2",
                    "codonId": "polish#0",
                    "transition": {"type": "CodonStarted", "data": {"codonId": "polish#0"}},
                    "resultingState": {
                        "currentRunId": "run-2",
                        "runCount": 2,
                        "totalCost": 0,
                        "currentRunCost": 0,
                    },
                },
            ),
        ],
    )

    first = journal("-e", exec_dir, "--run", "run-1")
    second = journal("-e", exec_dir, "--run", "run-2")
    unknown = journal("-e", exec_dir, "--run", "run-9")

    assert seqs(first.stdout) == [3]
    assert seqs(second.stdout) == [11]
    assert unknown.exit_code == 0 and unknown.stdout == ""


def test_after_seq_prints_only_later_events(exec_dir: Path) -> None:
    result = journal("-e", exec_dir, "--after-seq", "6", "--json")

    assert result.exit_code == 0
    assert [line[:9] for line in result.stdout.splitlines()] == [
        '{"seq":7,',
        '{"seq":8,',
        '{"seq":9,',
    ]


def test_a_corrupt_line_is_reported_and_reading_goes_on(exec_dir: Path) -> None:
    path = journal_path(exec_dir)
    with path.open("ab") as handle:
        handle.write(b"this is not json\n")
    append(path, [("info", {"message": "after the damage"})])

    result = journal("-e", exec_dir)

    assert result.exit_code == 0
    assert "skipped line 10 (byte " in result.stderr
    assert "not JSON" in result.stderr
    assert seqs(result.stdout) == [*range(1, 10), 10]
    assert "after the damage" in result.stdout.splitlines()[-1]


def test_a_torn_last_line_is_ignored_quietly(exec_dir: Path) -> None:
    with journal_path(exec_dir).open("ab") as handle:
        handle.write(b'{"seq":10,"schemaVersion":1,"id":"x","timestamp":"2026-')

    result = journal("-e", exec_dir)

    assert result.exit_code == 0
    assert seqs(result.stdout) == list(range(1, 10))
    assert result.stderr == ""


def test_follow_stops_by_itself_when_no_runtime_holds_the_execution(exec_dir: Path) -> None:
    started = time.monotonic()

    result = journal("-e", exec_dir, "--follow", "--follow-timeout", "60")

    assert result.exit_code == 0, result.output
    assert seqs(result.stdout) == list(range(1, 10))
    assert time.monotonic() - started < 30  # not the 60 s timeout (a loaded machine: CI runs
    # two tox envs at once)


def test_follow_prints_events_written_while_following(exec_dir: Path) -> None:
    # A live lock (this process, fresh heartbeat): only the timeout ends the follow.
    now = utc_now_iso()
    lock = LockInfo(pid=os.getpid(), lockId="l", startTime=now, lastHeartbeat=now)
    (exec_dir / ".hankweave" / "runtime.lock").write_bytes(lock.to_json_bytes())

    def write_later() -> None:
        time.sleep(0.5)
        append(journal_path(exec_dir), [("info", {"message": "written while following"})])

    writer = threading.Thread(target=write_later)
    writer.start()
    started = datetime.now(UTC)
    # The write comes 0.5 s in: 4.5 s of room before the timeout, for a loaded machine (CI runs
    # two tox envs at once).
    result = journal("-e", exec_dir, "-f", "--type", "info", "--follow-timeout", "5")
    writer.join()

    assert result.exit_code == 0, result.output
    assert seqs(result.stdout) == [1, 10]
    assert "written while following" in result.stdout
    assert (datetime.now(UTC) - started).total_seconds() >= 4.5


def test_a_missing_execution_directory_is_one_error_line(tmp_path: Path) -> None:
    result = journal("-e", tmp_path / "nope")

    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "does not exist" in result.output


def test_a_missing_journal_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "exec" / ".hankweave").mkdir(parents=True)

    result = journal("-e", tmp_path / "exec", "--follow")

    assert result.exit_code == 2
    assert "no event journal" in result.output
    assert result.output.strip().count("\n") == 0
