"""Playing one codon: the recorded records in order, the pacing, and the workspace effects."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from replay_helpers import codon

import hankweave_replay
from hankweave.api import CodonRequest
from hankweave.testing import attempt_context
from hankweave.testing.fake_harness import FAKE_MODEL
from hankweave_replay import ReplayHarness, apply_snapshot, unpack_recording


def request(work_dir, codon_id="a"):
    return CodonRequest(prompt="p", system_prompt=None, model=FAKE_MODEL, work_dir=work_dir,
                        codon_id=codon_id, run_id="r1")


def play(harness_class, req):
    async def collect():
        context = attempt_context(req.work_dir.parent, req)
        return [record async for record in harness_class().run_codon(req, context)]
    return asyncio.run(collect())


def recorded_lines(project, codon_id="a"):
    record = next(c for c in project_state(project).runs[0].codons if c.codon_id == codon_id)
    path = project.exec_dir / record.claude_log_path
    return [json.loads(line) for line in path.read_text().splitlines()]


def project_state(project):
    from hankweave.api import load_state

    return load_state(project.exec_dir / ".hankweave")[0]


@pytest.fixture
def work(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


def test_records_are_streamed_unchanged_and_files_appear_before_the_result(project, work):
    project.write_hank([codon("a", checkpointedFiles=["**"])])
    project.record({"a": {"messages": 2, "writeFiles": {"out.md": "written"}}})
    recording = ReplayHarness.open_recording(project.export().path)
    seen_before_result = []

    async def collect():
        out = []
        req = request(work)
        async for record in recording.harness().run_codon(req, attempt_context(work.parent, req)):
            if record["type"] in ("assistant", "result"):
                seen_before_result.append((work / "out.md").exists())
            out.append(record)
        return out

    try:
        records = asyncio.run(collect())
    finally:
        recording.close()

    assert records == recorded_lines(project)
    assert seen_before_result[-1] is True and not any(seen_before_result[:-1])
    assert (work / "out.md").read_text() == "written"


def error_during_execution(session_id):
    """The result the real Claude CLI can write after a pass's success result."""
    return {"type": "result", "subtype": "error_during_execution", "is_error": True,
            "result": "Error: Claude Code process exited with code 1",
            "session_id": session_id}


def with_a_trailing_error_result(project, root):
    """The project's recording, unpacked into ``root``, its log of codon a ending with an
    ``error_during_execution`` result after the last pass's success."""
    unpack_recording(project.export().path, root)
    manifest = json.loads((root / "recording.json").read_text())
    log = root / next(c["log"] for c in manifest["codons"] if c["codonId"] == "a")
    first = json.loads(log.read_text().splitlines()[0])
    with log.open("a") as out:
        out.write(json.dumps(error_during_execution(first["session_id"])) + "\n")
    return root


def test_results_after_the_passs_result_are_not_played_and_the_files_still_appear(
        project, work, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=["**"])])
    project.record({"a": {"writeFiles": {"out.md": "written"}}})
    lines = recorded_lines(project)
    assert [line["type"] for line in lines] == ["system", "assistant", "assistant", "user",
                                                "result"]
    recording = ReplayHarness.open_recording(with_a_trailing_error_result(project,
                                                                         tmp_path / "rec"))

    played = play(recording.harness, request(work))
    recording.close()

    assert played == lines
    assert (work / "out.md").read_text() == "written"


def test_a_codon_whose_log_goes_on_after_its_result_replays_completed_with_its_files(
        project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=["**"])])
    recorded = project.record({"a": {"writeFiles": {"out.md": "written"}}})

    replayed = project.replay(with_a_trailing_error_result(project, tmp_path / "rec"))

    assert replayed.code == 0, replayed.notices
    assert [(c.codon_id, c.status) for c in replayed.state.runs[0].codons] == [
        ("a", "completed")]
    assert replayed.work_tree == recorded.work_tree == {"out.md": b"written"}


def test_an_extended_log_makes_its_effects_happen_in_its_last_pass(project, work, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=["**"], exhaustWithPrompt="More.",
                              maxExtensions=3)])
    project.record({"a": [{"writeFiles": {"one.md": "1"}},
                          {"writeFiles": {"two.md": "2"}, "contextExceeded": True}]})
    recording = ReplayHarness.open_recording(with_a_trailing_error_result(project,
                                                                         tmp_path / "rec"))

    first = play(recording.harness, request(work))
    after_first = sorted(p.name for p in work.iterdir())
    second = play(recording.harness, request(work))
    recording.close()

    assert first[-1]["subtype"] == second[-1]["subtype"] == "success"
    assert after_first == []
    assert sorted(p.name for p in work.iterdir()) == ["one.md", "two.md"]


def test_instant_speed_never_sleeps_and_recorded_speed_waits_capped_gaps(project, work,
                                                                          monkeypatch):
    project.write_hank([codon("a")])
    project.record({"a": {"messages": 3}})
    source = project.export().path
    lines = recorded_lines(project)
    naps: list[float] = []

    async def nap(seconds):
        naps.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", nap)
    instant = ReplayHarness.open_recording(source)
    play(instant.harness, request(work))
    instant.close()
    assert naps == []

    for number, line in enumerate(lines):  # one minute between records, as recorded
        line["timestamp"] = f"2026-01-01T00:{number:02d}:00.000Z"
    paced = ReplayHarness.open_recording(source, speed="recorded", max_delay_ms=250)
    paced.harness.player.playback_for("a").records[:] = lines
    play(paced.harness, request(work))
    paced.close()
    assert naps == [0.25] * (len(lines) - 1)


def test_a_missing_or_bad_timestamp_waits_a_short_default(project, work, monkeypatch):
    project.write_hank([codon("a")])
    project.record({"a": {"messages": 1}})
    naps: list[float] = []

    async def nap(seconds):
        naps.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", nap)
    recording = ReplayHarness.open_recording(project.export().path, speed="recorded")
    records = recording.harness.player.playback_for("a").records
    del records[1]["timestamp"]
    records[2]["timestamp"] = "yesterday"
    play(recording.harness, request(work))
    recording.close()
    assert naps[:2] == [hankweave_replay.UNTIMED_GAP_MS / 1000] * 2


def test_an_extension_continues_after_the_previous_result(project, work):
    project.write_hank([codon("a", exhaustWithPrompt="More.", maxExtensions=3)])
    project.record({"a": [{"messages": 1}, {"messages": 1, "contextExceeded": True}]})
    recording = ReplayHarness.open_recording(project.export().path)
    lines = recorded_lines(project)
    first = play(recording.harness, request(work))
    second = play(recording.harness, request(work))
    third = play(recording.harness, request(work))  # a new attempt starts over
    recording.close()
    assert first + second == lines
    assert first[-1]["type"] == "result" and second[-1]["type"] == "result"
    assert third == first


def test_the_registered_harness_without_a_recording_fails_the_codon(work):
    records = play(ReplayHarness, request(work))
    assert records[-1]["type"] == "result" and records[-1]["is_error"] is True
    assert "only plays recordings" in records[-1]["result"]


def test_a_codon_the_recording_never_reached_fails_without_going_live(project, work):
    project.write_hank([codon("a")])
    project.record({})
    recording = ReplayHarness.open_recording(project.export().path)
    records = play(recording.harness, request(work, codon_id="other"))
    recording.close()
    assert len(records) == 1 and records[0]["subtype"] == "error"
    assert "no log for codon other" in records[0]["result"]


# ----- apply_snapshot -----


def tree(root):
    out = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            out[rel] = ("->" + os.readlink(path)) if os.path.islink(path) else \
                Path(path).read_text()
    return out


def test_covered_files_become_exactly_the_snapshots(tmp_path, work):
    snapshot = tmp_path / "snap"
    (snapshot / "notes").mkdir(parents=True)
    (snapshot / "notes" / "a.md").write_text("new a")
    (snapshot / "run.sh").write_text("#!/bin/sh\n")
    (snapshot / "run.sh").chmod(0o755)
    (snapshot / "notes" / "link").symlink_to("a.md")
    (work / "notes" / "old").mkdir(parents=True)
    (work / "notes" / "a.md").write_text("old a")
    (work / "notes" / "old" / "gone.md").write_text("deleted by the agent")
    (work / "scratch.txt").write_text("not covered")

    apply_snapshot(snapshot, ["notes/**", "run.sh"], work)

    assert tree(work) == {"notes/a.md": "new a", "notes/link": "->a.md",
                          "run.sh": "#!/bin/sh\n", "scratch.txt": "not covered"}
    assert os.access(work / "run.sh", os.X_OK)
    assert not (work / "notes" / "old").exists()  # emptied by the deletion


def test_ignored_files_and_the_data_link_are_left_alone(tmp_path, work):
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / ".gitignore").write_text("*.log\n")
    (work / "debug.log").write_text("ignored")
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("data")
    (work / "read_only_data_source").symlink_to(data)

    apply_snapshot(snapshot, ["**"], work)

    assert (work / "debug.log").read_text() == "ignored"
    assert (data / "in.txt").read_text() == "data"


def test_effects_never_write_or_delete_through_a_symlinked_directory(tmp_path, work):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.md").write_text("keep me")
    (work / "notes").symlink_to(outside, target_is_directory=True)
    snapshot = tmp_path / "snap"
    (snapshot / "notes").mkdir(parents=True)
    (snapshot / "notes" / "a.md").write_text("a")

    apply_snapshot(snapshot, ["notes/**", "**"], work)

    assert (outside / "victim.md").read_text() == "keep me"
    assert not (outside / "a.md").exists()
    assert (work / "notes").is_dir() and not (work / "notes").is_symlink()
    assert (work / "notes" / "a.md").read_text() == "a"


def test_a_file_in_place_of_a_directory_is_replaced(tmp_path, work):
    (work / "notes").write_text("was a file")
    snapshot = tmp_path / "snap"
    (snapshot / "notes").mkdir(parents=True)
    (snapshot / "notes" / "a.md").write_text("a")
    apply_snapshot(snapshot, ["notes/**"], work)
    assert (work / "notes" / "a.md").read_text() == "a"
