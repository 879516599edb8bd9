"""The journal diet (hankweave.events.diet): Hankweave 0.11's format, byte for byte.

The fixtures follow the original's diet tests (in our own words): body-heavy ``file.updated``
and ``state.snapshot`` lines written as ``JSON.stringify`` writes them, torn, blank and corrupt
lines, the 4096-byte threshold, damaged diets and the runtime resuming a dieted execution.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from hankweave.events.diet import (
    DietError,
    diet_journal,
    is_dieted,
    js_stringify,
    restore_journal,
)
from hankweave.events.journal import journal_last_seq, read_journal
from tests.runtime_harness import Project, codon

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def body(seed: int, size: int) -> str:
    words, state = [], seed
    while sum(len(w) + 1 for w in words) < size:
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        words.append(WORDS[state % len(WORDS)])
    return " ".join(words)[:size]


def file_updated(ident: str, path: str, content: str) -> dict[str, object]:
    return {"id": ident, "timestamp": "2026-01-02T03:04:05.678Z", "type": "file.updated",
            "data": {"path": path, "filename": path.rsplit("/", 1)[-1], "action": "modified",
                     "content": content}}


def snapshot(ident: str, path: str, content: str) -> dict[str, object]:
    return {"id": ident, "timestamp": "2026-01-02T03:04:05.678Z", "type": "state.snapshot",
            "data": {"completedCodons": [], "fileTree": [], "totalCost": 0.125, "totalTime": 42,
                     "recentFileAccess": {"path": path, "content": content,
                                          "timestamp": "2026-01-02T03:04:05.678Z"},
                     "isRollingBack": False}}


def pong(ident: str) -> dict[str, object]:
    return {"id": ident, "timestamp": "2026-01-02T03:04:05.678Z", "type": "pong",
            "data": {"message": f"event {ident}", "timestamp": 0.00005}}


def write_journal(events_dir: Path, lines: list[object], tail: bytes = b"") -> bytes:
    events_dir.mkdir(parents=True, exist_ok=True)
    data = b"".join((item if isinstance(item, bytes) else js_stringify(item).encode()) + b"\n"
                    for item in lines) + tail
    (events_dir / "events.jsonl").write_bytes(data)
    return data


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def events_dir(tmp_path: Path) -> Path:
    return tmp_path / "exec" / ".hankweave" / "events"


def test_a_body_heavy_journal_round_trips_and_stores_each_body_once(events_dir: Path):
    a, b = body(1, 64 * 1024), body(2, 8 * 1024)
    original = write_journal(events_dir, [pong("ev-1"), file_updated("ev-2", "a.md", a),
                                          file_updated("ev-3", "s.md", body(3, 512)),
                                          file_updated("ev-4", "a.md", a),
                                          snapshot("ev-5", "b.md", b), pong("ev-6")])

    report = diet_journal(events_dir)

    assert (report.dieted, report.extracted_bodies, report.unique_bodies) == (True, 3, 2)
    assert report.total_events == 6 and report.original_sha256 == sha(original)
    assert is_dieted(events_dir) and not (events_dir / "events.jsonl").exists()
    assert sorted(p.name for p in (events_dir / "cas").rglob("*.zst")) == sorted(
        f"{sha(x.encode())}.zst" for x in (a, b))
    pointer = zstandard.ZstdDecompressor().stream_reader(
        (events_dir / "events.jsonl.zst").read_bytes()).read().split(b"\n")
    second = json.loads(pointer[1])
    assert list(second["data"]) == ["path", "filename", "action", "contentRef"]
    assert second["data"]["contentRef"] == {"sha256": sha(a.encode()), "bytes": len(a),
                                            "encoding": "utf-8", "ref": "cas"}
    manifest = json.loads((events_dir / "journal.meta.json").read_bytes())
    assert list(manifest) == ["schemaVersion", "dietVersion", "totalEvents", "originalSha256",
                              "originalBytes", "segments", "dietedAt"]
    assert report.dieted_bytes < len(original) / 5

    assert restore_journal(events_dir) == (True, len(original), sha(original))
    assert (events_dir / "events.jsonl").read_bytes() == original
    assert restore_journal(events_dir)[0] is False  # already restored: says so


def test_torn_blank_and_corrupt_lines_are_kept_exactly(events_dir: Path):
    big = body(4, 8192)
    torn = b'{"id":"torn","type":"file.updated","data":{"content":"' + b"x" * 9000
    original = write_journal(events_dir, [file_updated("ev-1", "a.md", big),
                                          b"%%% not json at all %%%", b"",
                                          snapshot("ev-2", "a.md", big)], tail=torn)

    report = diet_journal(events_dir)

    assert (report.extracted_bodies, report.unique_bodies, report.total_events) == (2, 1, 2)
    restore_journal(events_dir)
    assert (events_dir / "events.jsonl").read_bytes() == original


def test_the_threshold_is_4096_utf8_bytes(events_dir: Path):
    write_journal(events_dir, [file_updated("ev-1", "a.md", body(5, 4096)),
                               file_updated("ev-2", "b.md", body(6, 4095))])
    assert diet_journal(events_dir).extracted_bodies == 1


def test_a_line_javascript_would_write_differently_stays_inline(events_dir: Path):
    spaced = json.dumps(file_updated("ev-1", "a.md", body(7, 5000))).encode()  # ", " and ": "
    original = write_journal(events_dir, [spaced])
    assert diet_journal(events_dir).extracted_bodies == 0
    restore_journal(events_dir)
    assert (events_dir / "events.jsonl").read_bytes() == original


def test_an_empty_journal_diets_and_a_second_diet_is_a_no_op(events_dir: Path):
    write_journal(events_dir, [])
    assert diet_journal(events_dir).dieted
    again = diet_journal(events_dir)
    assert not again.dieted and again.total_events == 0


def test_a_damaged_diet_is_reported_and_nothing_is_written(events_dir: Path):
    a = body(8, 6000)
    write_journal(events_dir, [file_updated("ev-1", "a.md", a)])
    diet_journal(events_dir)
    entry = events_dir / "cas" / sha(a.encode())[:2] / f"{sha(a.encode())}.zst"
    entry.write_bytes(zstandard.ZstdCompressor().compress(b"other text"))

    with pytest.raises(DietError, match="corrupt"):
        restore_journal(events_dir)
    assert not (events_dir / "events.jsonl").exists()
    with pytest.raises(DietError, match="damaged"):
        diet_journal(events_dir)
    entry.unlink()
    with pytest.raises(DietError, match="missing"):
        restore_journal(events_dir)


def test_a_restore_never_overwrites_a_different_journal(events_dir: Path):
    write_journal(events_dir, [file_updated("ev-1", "a.md", body(9, 5000))])
    diet_journal(events_dir)
    (events_dir / "events.jsonl").write_bytes(b"someone else's\n")
    with pytest.raises(DietError, match="not overwriting it"):
        restore_journal(events_dir)
    assert (events_dir / "events.jsonl").read_bytes() == b"someone else's\n"


def test_a_directory_that_is_not_dieted_says_so(events_dir: Path):
    events_dir.mkdir(parents=True)
    with pytest.raises(DietError, match="not a dieted execution"):
        restore_journal(events_dir)
    with pytest.raises(DietError, match=r"no events\.jsonl"):
        diet_journal(events_dir)
    (events_dir / "journal.meta.json").write_text('{"schemaVersion": 999}')
    with pytest.raises(DietError, match="not a dieted execution"):
        restore_journal(events_dir)


# ----- an execution's journey: run, diet, read, restore, resume -----


def hankweave(project: Project, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hankweave", *map(str, args)], cwd=project.root,
                          env=project.env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_diet_read_restore_and_resume_an_execution(tmp_path: Path):
    project = Project(tmp_path)
    project.write_hank([codon("a"), codon("b")])
    assert project.run({"b": {"result": "error"}}).code != 0  # b is left to do
    journal = project.hankweave_dir / "events" / "events.jsonl"
    original = journal.read_bytes()
    events_before = [e.seq for e in read_journal(journal)]

    dieted = hankweave(project, "--diet-journal", project.exec_dir)

    assert dieted.returncode == 0 and dieted.stderr == "", dieted.stderr
    assert "Journal dieted:" in dieted.stdout
    assert f"hankweave --restore-journal {project.exec_dir}" in dieted.stdout
    assert not journal.exists()
    # Readers see the original.
    assert [e.seq for e in read_journal(journal)] == events_before
    assert [e.seq for e in read_journal(journal, after_seq=events_before[-3])] == \
        events_before[-2:]
    assert journal_last_seq(journal) == events_before[-1]
    shown = hankweave(project, "journal", "-e", project.exec_dir)
    assert shown.returncode == 0 and "RunFailed" in shown.stdout, shown.stderr
    followed = hankweave(project, "journal", "-e", project.exec_dir, "--follow", "--json")
    assert [json.loads(line)["seq"] for line in followed.stdout.splitlines()] == events_before

    restored = hankweave(project, "--restore-journal", project.exec_dir)
    assert restored.returncode == 0 and "verified byte for byte" in restored.stdout
    assert journal.read_bytes() == original
    assert "already restored" in hankweave(project, "--restore-journal",
                                           project.exec_dir).stdout

    # Diet again, then resume: the runtime restores, prunes the pair and appends.
    assert hankweave(project, "--diet-journal", project.exec_dir).returncode == 0
    resumed = project.run()  # in-process: the memory checkpoints live here
    assert resumed.code == 0, resumed.notices
    after = journal.read_bytes()
    assert after.startswith(original) and len(after) > len(original)
    assert not (project.hankweave_dir / "events" / "events.jsonl.zst").exists()
    assert not (project.hankweave_dir / "events" / "journal.meta.json").exists()


def test_diet_is_refused_while_a_runtime_holds_the_execution(tmp_path: Path):
    project = Project(tmp_path)
    project.write_hank([codon("a")])
    assert project.run().code == 0
    lock = project.hankweave_dir / "runtime.lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "lastHeartbeat": "2999-01-01T00:00:00Z",
                                "lockId": "x", "hostname": os.uname().nodename}))

    result = hankweave(project, "--diet-journal", project.exec_dir)

    assert result.returncode == 1 and "not dieting" in result.stderr
    assert "Traceback" not in result.stderr
    assert (project.hankweave_dir / "events" / "events.jsonl").exists()
    lock.write_text("@@@ not a lock @@@")
    garbled = hankweave(project, "--diet-journal", project.exec_dir)
    assert garbled.returncode == 1 and "not dieting" in garbled.stderr
    assert (project.hankweave_dir / "events" / "events.jsonl").exists()


# ----- killed at every point: the original or a verified diet, never neither -----


def test_a_diet_killed_anywhere_leaves_the_journal_or_a_verified_diet(tmp_path: Path):
    from hankweave.faults import KILL_AT_ENV, TRACE_ENV

    template = tmp_path / "template" / ".hankweave" / "events"
    bodies = [body(n, 6000) for n in range(3)]
    original = write_journal(template, [file_updated(f"ev-{n}", f"f{n % 3}.md", bodies[n % 3])
                                        for n in range(9)] + [pong("ev-9")])
    trace = tmp_path / "trace.txt"
    env = {**os.environ, TRACE_ENV: str(trace)}

    def diet(execution: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hankweave", "--diet-journal",
                               str(execution)], env={**env, **extra}, capture_output=True,
                              text=True, timeout=60)

    def copy(name: str) -> Path:
        import shutil

        execution = tmp_path / name
        shutil.copytree(template.parent.parent, execution)
        return execution

    assert diet(copy("traced"), {}).returncode == 0
    points = list(dict.fromkeys(trace.read_text().split()))
    assert {"diet.bodies", "diet.promoted", "diet.unlinking"} <= set(points)
    for index, point in enumerate(points):
        execution = copy(f"killed-{index}")
        events = execution / ".hankweave" / "events"
        killed = diet(execution, {KILL_AT_ENV: point, TRACE_ENV: ""})
        assert killed.returncode == -9, (point, killed.stderr)
        journal = events / "events.jsonl"
        if journal.exists():
            assert journal.read_bytes() == original, point
        else:
            assert is_dieted(events), point
            restore_journal(events)
            assert journal.read_bytes() == original, point
        # Readers see the original either way, and the diet can be done again.
        assert [e.data for e in read_journal(journal)] == [
            json.loads(line)["data"] for line in original.splitlines()], point
        assert diet(execution, {TRACE_ENV: ""}).returncode == 0, point
        restore_journal(events)
        assert journal.read_bytes() == original, point
        assert not [p.name for p in events.rglob("*") if ".tmp" in p.name], point


def test_a_restore_killed_after_it_linked_the_journal_is_complete(events_dir: Path):
    from hankweave.faults import KILL_AT_ENV

    original = write_journal(events_dir, [file_updated("ev-1", "a.md", body(11, 7000))])
    diet_journal(events_dir)
    execution = events_dir.parent.parent

    killed = subprocess.run([sys.executable, "-m", "hankweave", "--restore-journal",
                             str(execution)], env={**os.environ, KILL_AT_ENV: "restore.linked"},
                            capture_output=True, text=True, timeout=60)

    assert killed.returncode == -9, killed.stderr
    assert (events_dir / "events.jsonl").read_bytes() == original
    assert restore_journal(events_dir)[0] is False  # already restored, and the temp swept
    assert not [p.name for p in events_dir.iterdir() if ".tmp" in p.name]
