"""Issue 34 item 1: a recording someone sends you carries its author's shell commands (rig
``command`` operations, ``outputFiles[].beforeCopy``).  ``hankweave replay`` must not run them
unless the person asks with ``--allow-commands``, and a resumed replay keeps that choice."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from tests.security.support import Project, codon, needs, record_and_export, repack_recording


def planted(project: Project) -> tuple[Path, Path, Path]:
    """A recording of a -> b, repacked so that b's rig setup and b's output copy each run a
    command that writes a marker outside any workspace; (archive, rig marker, copy marker)."""
    needs("git", "replay")
    source = record_and_export(
        project, [codon("a", checkpointedFiles=["**"]), codon("b")],
        {"a": {"writeFiles": {"a.md": "alpha"}}, "b": {"writeFiles": {"b.md": "beta"}}})
    rig_marker, copy_marker = project.root / "pwned-rig", project.root / "pwned-copy"

    def plant(root: Path) -> None:
        hank_file = root / json.loads((root / "recording.json").read_text())["hank"]
        hank = json.loads(hank_file.read_text())
        b = next(item for item in hank["hank"] if item.get("id") == "b")
        b["rigSetup"] = [{"type": "command", "command": {"run": f"touch {rig_marker}"}}]
        b["outputFiles"] = [{"copy": ["b.md"], "beforeCopy": [
            {"type": "command", "command": {"run": f"touch {copy_marker}"}}]}]
        hank_file.write_text(json.dumps(hank))

    archive = repack_recording(source, project.root / "planted.hwrec.tar.gz", plant)
    return archive, rig_marker, copy_marker


def work_tree(exec_dir: Path) -> dict[str, bytes]:
    root = exec_dir / "agentRoot"
    files = {}
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "read_only_data_source"]
        for name in filenames:
            path = Path(directory, name)
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def replay(project: Project, archive: Path, name: str, *extra: str):
    target = project.root / name
    return project.hw("replay", str(archive), "-e", str(target), "-o",
                      str(project.root / f"{name}-out"), "--headless", *extra), target


def test_a_replay_runs_none_of_the_recordings_commands(project):
    archive, rig_marker, copy_marker = planted(project)

    result, target = replay(project, archive, "replayed")

    assert result.returncode == 0, result.stderr
    assert not rig_marker.exists()
    assert not copy_marker.exists()
    assert work_tree(target) == work_tree(project.exec_dir)
    # The copy itself still happens: only the command before it is skipped.
    assert (project.root / "replayed-out" / "b.md").read_bytes() == b"beta"


def test_the_printed_hint_replays_with_the_commands(project):
    archive, rig_marker, copy_marker = planted(project)

    result, _ = replay(project, archive, "replayed")
    hint = next(line.split(": ", 1)[1] for line in result.stderr.splitlines()
                if line.startswith("Read them; to replay with them: "))
    words = shlex.split(hint)
    assert words[:2] == ["hankweave", "replay"]
    pasted = project.hw(*words[1:], "--headless")

    assert pasted.returncode == 0, pasted.stderr
    assert rig_marker.exists()
    assert copy_marker.exists()


def test_allow_commands_runs_them(project):
    archive, rig_marker, copy_marker = planted(project)

    result, target = replay(project, archive, "replayed", "--allow-commands")

    assert result.returncode == 0, result.stderr
    assert rig_marker.exists()
    assert copy_marker.exists()
    assert work_tree(target) == work_tree(project.exec_dir)


def test_run_with_replay_runs_none_of_them_either(project):
    archive, rig_marker, copy_marker = planted(project)

    result = project.hw("run", "--replay", str(archive), "-e", str(project.root / "replayed"),
                        "-o", str(project.root / "out"), "--headless")

    assert result.returncode == 0, result.stderr
    assert not rig_marker.exists()
    assert not copy_marker.exists()


def stopped_replay(project: Project, archive: Path, *extra: str) -> Path:
    """A replay killed once codon a is recorded: codon b (with the commands) is still to run."""
    result, target = replay(project, archive, "replayed", *extra)
    # Killed by the test-only kill point, not by any failure of the replay.
    assert result.returncode != 0
    return target


def test_a_resumed_replay_keeps_the_choice_not_to_run_commands(project):
    archive, rig_marker, copy_marker = planted(project)
    project.env["HANKWEAVE_TEST_KILL_AT"] = "codon.recorded@1"
    target = stopped_replay(project, archive)
    del project.env["HANKWEAVE_TEST_KILL_AT"]
    assert not (target / "agentRoot" / "b.md").exists()

    resumed = project.hw("run", "-e", str(target), "-o", str(project.root / "out"),
                         "--headless")

    assert resumed.returncode == 0, resumed.stderr
    assert (target / "agentRoot" / "b.md").read_bytes() == b"beta"  # b was replayed
    assert not rig_marker.exists()
    assert not copy_marker.exists()


def test_allow_commands_given_to_a_resume_runs_them(project):
    archive, rig_marker, copy_marker = planted(project)
    project.env["HANKWEAVE_TEST_KILL_AT"] = "codon.recorded@1"
    target = stopped_replay(project, archive)
    del project.env["HANKWEAVE_TEST_KILL_AT"]

    resumed = project.hw("run", "-e", str(target), "-o", str(project.root / "out"),
                         "--headless", "--allow-commands")

    assert resumed.returncode == 0, resumed.stderr
    assert rig_marker.exists()
    assert copy_marker.exists()


def test_a_resumed_replay_keeps_the_choice_to_run_commands(project):
    archive, rig_marker, copy_marker = planted(project)
    project.env["HANKWEAVE_TEST_KILL_AT"] = "codon.recorded@1"
    target = stopped_replay(project, archive, "--allow-commands")
    del project.env["HANKWEAVE_TEST_KILL_AT"]
    assert not rig_marker.exists()

    resumed = project.hw("run", "-e", str(target), "-o", str(project.root / "out"),
                         "--headless")

    assert resumed.returncode == 0, resumed.stderr
    assert rig_marker.exists()
    assert copy_marker.exists()
