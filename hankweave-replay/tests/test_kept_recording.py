"""A replayed execution is complete: it keeps the recording it plays, so it can be exported,
inspected and resumed once the recording and everything it was made from are gone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from replay_helpers import Outcome, Project, codon, facts, loop

import hankweave_replay
from hankweave.api import LaunchError, load_execution_meta

FILES = ["**"]


def recorded_project(project: Project) -> Outcome:
    """A hank with a prompt file and a loop, recorded with the fake agent."""
    (project.hank_dir / "prompts").mkdir()
    (project.hank_dir / "prompts" / "a.md").write_text("Do a.")
    project.write_hank([codon("a", checkpointedFiles=FILES, promptText=None,
                              promptFile="prompts/a.md"),
                        codon("b"), loop("L", [codon("w")], limit=2)])
    recorded = project.record({
        "a": {"writeFiles": {"a.md": "alpha", "src/keep.txt": "k"}, "cost": 0.5},
        "b": {"writeFiles": {"b.md": "beta"}, "deleteFiles": ["a.md"], "cost": 0.25,
              "messages": 3, "delayMs": 100},
        "w#0": {"writeFiles": {"log.md": "first"}},
        "w#1": {"writeFiles": {"log.md": "first\nsecond"}, "cost": 0.125}})
    assert recorded.code == 0, recorded.notices
    return recorded


def remove_sources(project: Project, recording: Path) -> None:
    """Delete the recording and everything it was made from."""
    recording.unlink()
    for folder in (project.exec_dir, project.hank_dir, project.data):
        shutil.rmtree(folder)


def statuses_and_costs(outcome: Outcome) -> dict[str, tuple[str, float | None]]:
    return {codon_id: (fact["status"], fact["cost"])
            for codon_id, fact in facts(outcome.state).items()}


def interrupt_at(codon_id: str):
    """An event watcher that presses Ctrl-C once ``codon_id`` has started."""
    def watch(event: dict) -> None:
        if event["type"] == "codon.started" and event["data"]["codonId"] == codon_id:
            os.kill(os.getpid(), signal.SIGINT)

    return watch


def interrupted_replay(project: Project, source: Path) -> Outcome:
    """A replay stopped by Ctrl-C in the middle of codon b (paced, so b takes a while)."""
    stopped = project.replay(source, replay_speed="recorded", watch=interrupt_at("b"))
    assert stopped.code == 130, stopped.notices
    assert [(c.codon_id, c.status) for c in stopped.state.runs[0].codons] == [
        ("a", "completed"), ("b", "failed")]
    return stopped


def hankweave(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=project.root,
                          env=project.env, text=True, capture_output=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_a_replay_runs_from_a_copy_of_its_recording_inside_its_execution(project):
    recorded_project(project)

    replayed = project.replay()

    assert replayed.code == 0, replayed.notices
    kept = replayed.exec_dir / ".hankweave" / "recording"
    meta = load_execution_meta(replayed.exec_dir / ".hankweave" / "execution-meta.json")
    assert meta.recording == ".hankweave/recording"
    assert meta.hank_path == str(kept / "hank" / "hank.json")
    assert meta.read_only_source_data_path == str(kept / "data")
    assert (kept / "hank" / "prompts" / "a.md").read_text() == "Do a."
    assert meta.link_type == "copy"
    data_link = replayed.exec_dir / "agentRoot" / "read_only_data_source"
    assert not data_link.is_symlink() and (data_link / "input.txt").read_text() == "some input\n"


def test_a_replay_exported_after_its_sources_are_gone_replays_the_same(project, tmp_path):
    recorded = recorded_project(project)
    source = project.export().path
    first = project.replay(source)
    assert first.code == 0, first.notices
    assert first.work_tree == recorded.work_tree
    remove_sources(project, source)

    exported = hankweave_replay.export_recording(
        first.exec_dir, tmp_path / "again.hwrec.tar.gz", env=project.env, cwd=project.root)
    again = project.replay(exported.path)

    assert again.code == 0, again.notices
    assert statuses_and_costs(again) == statuses_and_costs(first)
    assert list(statuses_and_costs(again)) == ["a", "b", "w#0", "w#1"]
    assert again.work_tree == first.work_tree
    assert again.work_tree["log.md"] == b"first\nsecond" and "a.md" not in again.work_tree


def test_a_finished_replay_can_be_inspected_and_resumed_once_its_sources_are_gone(project):
    recorded_project(project)
    source = project.export().path
    replayed = project.replay(source)
    assert replayed.code == 0, replayed.notices
    remove_sources(project, source)

    inspected = hankweave(project, "inspect", "thread", "-e", str(replayed.exec_dir))
    resumed = hankweave(project, "run", "-e", str(replayed.exec_dir), "--headless")

    assert inspected.returncode == 0, inspected.stderr
    assert "w#1" in inspected.stdout
    assert resumed.returncode == 0, resumed.stderr
    assert "Nothing to do: every codon" in resumed.stderr
    assert "Traceback" not in resumed.stderr + resumed.stdout
    assert len(replayed.state.runs) == 1


def test_an_interrupted_replay_resumes_from_the_recording_it_keeps(project):
    recorded = recorded_project(project)
    recorded_facts, recorded_files = facts(recorded.state), recorded.work_tree
    source = project.export().path
    stopped = interrupted_replay(project, source)
    remove_sources(project, source)

    resumed = project.resume(stopped.exec_dir)

    assert resumed.code == 0, resumed.notices
    assert any("Resuming the replay" in notice for notice in resumed.notices)
    assert len(resumed.state.runs) == 2
    assert facts(resumed.state) == recorded_facts
    assert resumed.work_tree == recorded_files


def test_a_replay_whose_kept_recording_is_gone_never_resumes_live(project):
    recorded_project(project)
    stopped = interrupted_replay(project, project.export().path)
    shutil.rmtree(stopped.exec_dir / ".hankweave" / "recording")

    with pytest.raises(LaunchError, match=r"Cannot resume the replay in .*no such file"):
        project.resume(stopped.exec_dir)
    assert len(stopped.state.runs) == 1


def test_an_export_of_a_replay_does_not_name_its_kept_recording(project, tmp_path):
    recorded_project(project)
    replayed = project.replay()

    exported = hankweave_replay.export_recording(
        replayed.exec_dir, tmp_path / "again.hwrec.tar.gz", env=project.env, cwd=project.root)

    root = tmp_path / "unpacked"
    hankweave_replay.unpack_recording(exported.path, root)
    meta = json.loads((root / "execution-meta.json").read_text())
    assert "recording" not in meta
    assert meta["hankPath"] == "hank/hank.json"
    assert (root / "hank" / "prompts" / "a.md").read_text() == "Do a."
