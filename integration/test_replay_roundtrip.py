"""Record with real ``hankweave run`` processes (FakeHarness agents, git checkpoints), export,
replay with ``hankweave replay``: state, work tree and checkpoints equal the recording's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

from hankweave_checkpoint_git import GitCheckpointStore

from hankweave.state.store import load_state
from hankweave.state.types import HankweaveState
from hankweave.testing.outcomes import codon_outcomes
from integration.conftest import codon

FILES = ["**"]


def export(project, output: Path | None = None, *extra: str) -> Path:
    output = output or project.root / "rec.hwrec.tar.gz"
    result = project.hw("export", "-e", str(project.exec_dir), "-o", str(output), *extra)
    assert result.returncode == 0, result.stderr + result.stdout
    return output


def replay(project, source: Path, name: str = "replayed", *extra: str):
    """``hankweave replay SOURCE -e <root>/<name> --headless``; returns (result, exec dir)."""
    target = project.root / name
    result = project.hw("replay", str(source), "-e", str(target), "--headless", *extra)
    return result, target


def state_of(exec_dir: Path) -> HankweaveState:
    return load_state(exec_dir / ".hankweave")[0]


facts = codon_outcomes  # the same facts for a recording and its replay


def work_tree(exec_dir: Path) -> dict[str, bytes]:
    root = exec_dir / "agentRoot"
    files = {}
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "read_only_data_source"]
        for name in filenames:
            path = Path(directory, name)
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def checkpoint_contents(exec_dir: Path, state: HankweaveState, scratch: Path) -> dict[str, Any]:
    """Each codon's end checkpoint, as {codon id: {path: bytes}}, read with the git backend."""
    store = GitCheckpointStore(exec_dir)
    out = {}
    try:
        for record in state.runs[0].codons:
            sha = getattr(record, "completion_checkpoint", None) or getattr(
                record, "error_checkpoint", None)
            if sha:
                target = scratch / f"{exec_dir.name}-{sha}"
                store.materialize(sha, target)
                out[record.codon_id] = {p.relative_to(target).as_posix(): p.read_bytes()
                                        for p in target.rglob("*") if p.is_file()}
    finally:
        store.close()
    return out


def assert_replays_the_recording(project, replayed_dir: Path, tmp_path: Path) -> None:
    recorded, replayed = state_of(project.exec_dir), state_of(replayed_dir)
    assert facts(replayed) == facts(recorded)
    assert work_tree(replayed_dir) == work_tree(project.exec_dir)
    assert checkpoint_contents(replayed_dir, replayed, tmp_path) == \
        checkpoint_contents(project.exec_dir, recorded, tmp_path)


def test_happy_path_round_trip(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=FILES), codon("b"), codon("c")])
    project.write_script({
        "a": {"messages": 2, "writeFiles": {"a.md": "alpha", "src/main.py": "print(1)"},
              "cost": 0.02},
        "b": {"writeFiles": {"b.md": "beta"}, "deleteFiles": ["a.md"]},
        "c": {"messages": 3, "usage": {"inputTokens": 900, "outputTokens": 80,
                                       "cacheReadInputTokens": 400}}})
    assert project.run().returncode == 0

    result, replayed = replay(project, export(project))

    assert result.returncode == 0, result.stderr
    assert "[REPLAY] Starting a fresh run" in result.stderr
    assert f"  hankweave inspect thread -e {replayed}" in result.stderr
    assert_replays_the_recording(project, replayed, tmp_path)


def test_a_loop_round_trip(project, tmp_path):
    project.write_hank([codon("setup", checkpointedFiles=FILES), {
        "type": "loop", "id": "L", "name": "Loop",
        "terminateOn": {"type": "iterationLimit", "limit": 2},
        "codons": [codon("work")]}])
    project.write_script({"setup": {"writeFiles": {"plan.md": "plan"}},
                          "work#0": {"writeFiles": {"log.md": "one"}},
                          "work#1": {"writeFiles": {"log.md": "one\ntwo"}, "messages": 2}})
    assert project.run().returncode == 0

    result, replayed = replay(project, export(project))

    assert result.returncode == 0, result.stderr
    assert [c.codon_id for c in state_of(replayed).runs[0].codons] == [
        "setup", "work#0", "work#1"]
    assert_replays_the_recording(project, replayed, tmp_path)


def test_a_failing_codon_round_trip(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=FILES), codon("b"), codon("c")])
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}},
                          "b": {"result": "error", "errorText": "API Error: 401 invalid x-api-key",
                                "writeFiles": {"half.md": "half"}}})
    recorded = project.run()
    assert recorded.returncode != 0

    result, replayed = replay(project, export(project))

    assert result.returncode == recorded.returncode, result.stderr
    assert_replays_the_recording(project, replayed, tmp_path)
    assert facts(state_of(replayed))["b"]["failure"][1].endswith("API Error: 401 invalid x-api-key")


def test_a_continue_previous_chain_round_trip(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=FILES),
                        codon("b", continuationMode="continue-previous"),
                        codon("c", continuationMode="continue-previous")])
    project.write_script({"a": {"sessionId": "sess-1", "writeFiles": {"a.md": "1"}},
                          "b": {"writeFiles": {"a.md": "2"}}, "c": {"messages": 2}})
    assert project.run().returncode == 0

    result, replayed = replay(project, export(project))

    assert result.returncode == 0, result.stderr
    assert_replays_the_recording(project, replayed, tmp_path)
    # Each continuing codon forked the session of the one before, as recorded.
    sessions = {codon_id: f["session"] for codon_id, f in facts(state_of(replayed)).items()}
    assert sessions["a"] == "sess-1" and len(set(sessions.values())) == 3, sessions


def test_an_execution_directory_replays_directly(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=FILES), codon("b")])
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}},
                          "b": {"writeFiles": {"b.md": "beta"}}})
    assert project.run().returncode == 0

    result, replayed = replay(project, project.exec_dir)

    assert result.returncode == 0, result.stderr
    assert_replays_the_recording(project, replayed, tmp_path)


def test_run_with_replay_is_the_same_as_replay(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=FILES)])
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}}})
    assert project.run().returncode == 0
    source = export(project)

    result = project.hw("run", "--replay", str(source), "--replay-speed", "instant",
                        "-e", str(project.root / "via-run"), "--headless")

    assert result.returncode == 0, result.stderr
    assert_replays_the_recording(project, project.root / "via-run", tmp_path)


def test_a_recording_holds_no_git_repository(project):
    project.write_hank([codon("a", checkpointedFiles=FILES)])
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}}})
    assert project.run().returncode == 0
    with tarfile.open(export(project)) as tar:
        names = tar.getnames()
    assert not [n for n in names if ".git" in n.split("/") or "hankweavecheckpoints" in n]
    assert [n for n in names if n.startswith("snapshots/") and n.endswith("/a.md")]


def test_a_replay_killed_mid_codon_resumes_from_the_recording_it_keeps(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=FILES), codon("b"), codon("c")])
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}},
                          "b": {"writeFiles": {"b.md": "beta"}, "messages": 4, "delayMs": 300},
                          "c": {"writeFiles": {"c.md": "gamma"}}})
    assert project.run().returncode == 0
    recorded_facts, recorded_files = facts(state_of(project.exec_dir)), work_tree(project.exec_dir)
    source = export(project)
    target = project.root / "replayed"
    child = subprocess.Popen(
        project.command("replay", str(source), "-e", str(target), "--headless",
                        "--replay-speed", "recorded"),
        cwd=project.root, env=project.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not any(c.codon_id == "b" and c.status == "running"
                  for run in state_of(target).runs for c in run.codons):
        assert time.monotonic() < deadline, "the replay never reached codon b"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    source.unlink()
    for folder in (project.exec_dir, project.hank_dir, project.data):
        shutil.rmtree(folder)

    result = project.hw("run", "-e", str(target), "--headless")

    assert result.returncode == 0, result.stderr
    assert "[REPLAY] Resuming the replay" in result.stderr
    state = state_of(target)
    assert [r.status for r in state.runs] == ["completed", "crashed"]
    assert facts(state) == recorded_facts
    assert work_tree(target) == recorded_files
