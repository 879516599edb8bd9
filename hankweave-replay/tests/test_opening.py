"""``ReplayHarness.open_recording``: which log plays each codon, and what cannot be replayed."""

from __future__ import annotations

import json

import pytest
from replay_helpers import codon, loop

from hankweave_replay import RecordingError, ReplayHarness, ReplayRecording, unpack_recording

FILES = ["**"]


def unpacked(project, tmp_path, name="unpacked"):
    """The project's recording, exported and unpacked into a directory tests may edit."""
    root = tmp_path / name
    unpack_recording(project.export().path, root)
    return root


def manifest(root):
    return json.loads((root / "recording.json").read_text())


def write_manifest(root, data):
    (root / "recording.json").write_text(json.dumps(data))


def log_of(root, codon_id):
    entry = next(c for c in manifest(root)["codons"] if c["codonId"] == codon_id)
    return root / entry["log"]


def test_each_codon_maps_to_its_log(project, tmp_path):
    project.write_hank([codon("a"), loop("L", [codon("w")], limit=2)])
    project.record({})
    root = unpacked(project, tmp_path)

    recording = ReplayHarness.open_recording(root)

    assert isinstance(recording, ReplayRecording)
    assert sorted(recording.logs) == ["a", "w#0", "w#1"]
    assert recording.logs["w#1"] == log_of(root, "w#1")
    assert recording.hank_path == root / "hank" / "hank.json"
    assert recording.data_path == root / "data"
    assert recording.missing_logs(["a", "w#0", "w#1"]) == []
    assert issubclass(recording.harness, ReplayHarness)
    assert recording.harness.name == "replay"
    recording.close()
    assert root.exists()  # an unpacked recording given as the source is the user's


def test_a_loop_codon_recorded_under_its_base_id_plays_every_iteration(project, tmp_path):
    project.write_hank([codon("a")])
    project.record({})
    root = unpacked(project, tmp_path)
    data = manifest(root)
    data["codons"][0]["codonId"] = "w"  # an older recording of a loop, keyed by base id
    write_manifest(root, data)

    recording = ReplayHarness.open_recording(root)

    assert recording.missing_logs(["w#0", "w#1", "x"]) == ["x"]
    player = recording.harness.player
    assert player.playback_for("w#1").records == player.playback_for("w#0").records


def test_every_missing_log_is_listed(project, tmp_path):
    project.write_hank([codon("a"), codon("b"), codon("c")])
    project.record({})
    root = unpacked(project, tmp_path)
    log_of(root, "a").unlink()
    log_of(root, "c").unlink()

    recording = ReplayHarness.open_recording(root)

    assert recording.missing_logs(["a", "b", "c"]) == ["a", "c"]


def test_a_codon_added_to_the_hank_has_no_log(project, tmp_path):
    project.write_hank([codon("a"), codon("b")])
    project.record({})
    recording = ReplayHarness.open_recording(unpacked(project, tmp_path))
    assert recording.missing_logs(["a", "new", "b", "later"]) == ["new", "later"]


def test_an_unfinished_recording_needs_no_logs_after_where_it_stopped(project, tmp_path):
    project.write_hank([codon("a"), codon("b"), codon("c")])
    project.record({"b": {"result": "error", "errorText": "API Error: 401"}})
    recording = ReplayHarness.open_recording(unpacked(project, tmp_path))
    assert recording.missing_logs(["a", "b", "c"]) == []
    # ... but a codon planned before that point still needs one.
    assert recording.missing_logs(["a", "inserted", "b", "c"]) == ["inserted"]


def test_a_codon_that_never_started_an_agent_needs_no_log(project, tmp_path):
    project.write_hank([codon("a", rigSetup=[{"type": "command",
                                               "command": {"run": "exit 3"}}])])
    assert project.record({}).code != 0
    root = unpacked(project, tmp_path)
    assert manifest(root)["codons"][0]["log"] is None
    assert ReplayHarness.open_recording(root).missing_logs(["a"]) == []


def test_torn_and_unknown_lines_are_skipped_with_a_warning(project, tmp_path):
    project.write_hank([codon("a")])
    project.record({"a": {"messages": 2}})
    root = unpacked(project, tmp_path)
    log = log_of(root, "a")
    lines = log.read_text().splitlines()
    lines.insert(1, json.dumps({"type": "telemetry", "value": 1}))
    log.write_text("\n".join(lines) + "\n" + '{"type":"assistant","mess')

    recording = ReplayHarness.open_recording(root)

    text = "\n".join(recording.warnings)
    assert "line 2" in text and "telemetry" in text
    assert "torn last line" in text
    records = recording.harness.player.playback_for("a").records
    assert [r["type"] for r in records] == ["system", "assistant", "assistant", "result"]


def test_a_truncated_log_is_announced(project, tmp_path):
    project.write_hank([codon("a")])
    project.record({})
    root = unpacked(project, tmp_path)
    log = log_of(root, "a")
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:-1]))

    recording = ReplayHarness.open_recording(root)

    assert any("without a result record" in w for w in recording.warnings)


def test_a_newer_format_is_refused(project, tmp_path):
    project.write_hank([codon("a")])
    project.record({})
    root = unpacked(project, tmp_path)
    data = manifest(root)
    data["formatVersion"] = 99
    write_manifest(root, data)
    with pytest.raises(RecordingError, match=r"format version 99.*upgrade"):
        ReplayHarness.open_recording(root)


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "absent", "no such file or directory"),
    (lambda p: p, "neither an execution directory"),
])
def test_what_is_not_a_recording_is_refused(tmp_path, make, message):
    with pytest.raises(RecordingError, match=message):
        ReplayHarness.open_recording(make(tmp_path))


def test_an_unknown_speed_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown replay speed"):
        ReplayHarness.open_recording(tmp_path, speed="fast")


def test_an_archive_is_unpacked_and_removed_on_close(project):
    project.write_hank([codon("a")])
    project.record({})
    recording = ReplayHarness.open_recording(project.export().path)
    unpacked_root = recording.hank_path.parent.parent
    assert unpacked_root.exists()
    recording.close()
    assert not unpacked_root.exists()


def test_a_recorded_skip_is_announced_as_not_replayed(project, tmp_path):
    project.write_hank([codon("a")])
    project.record({})
    root = unpacked(project, tmp_path)
    data = manifest(root)
    data["codons"][0]["status"] = "skipped"
    write_manifest(root, data)

    recording = ReplayHarness.open_recording(root)

    assert any("skipped in the recorded run" in w for w in recording.warnings)
