"""Who may touch an execution directory: a live runtime's lock keeps `-n -f` out, unreadable
state is refused rather than silently started over, and the printed hints paste (issue 33)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from integration.conftest import Project, codon, records

CORRUPT = b'{"runs": [ this is not json\n'


def _state_files(project: Project) -> dict[str, bytes]:
    """Every file the state and the journal are read from, with its bytes."""
    hw = project.exec_dir / ".hankweave"
    found = {p.name: p.read_bytes() for p in hw.glob("state.*") if p.is_file()}
    found["events.jsonl"] = (hw / "events" / "events.jsonl").read_bytes()
    return found


def _codon_logs(project: Project) -> list[str]:
    runs = project.exec_dir / ".hankweave" / "runs"
    return sorted(str(p.relative_to(runs)) for p in runs.rglob("*") if p.is_file())


def test_new_force_against_a_live_run_is_refused_and_the_run_completes_untouched(
        project: Project) -> None:
    project.write_hank([codon("a"), codon("b")])
    project.write_script({"a": {"write_files": {"a.txt": "from a\n"}},
                          "b": {"delay_ms": 4000, "write_files": {"b.txt": "from b\n"}}})
    live = project.start()
    try:
        project.wait_for(lambda state: bool(records(state, "b", "running")))
        refused = project.run("-n", "-f")
        assert refused.returncode != 0
        assert "in use by another hankweave runtime" in refused.stderr
        assert f"pid {live.pid}" in refused.stderr
        # Nothing moved or wiped while the live runtime works.
        assert not list(project.exec_dir.glob(".hankweave.backup-*"))
        assert (project.exec_dir / "agentRoot" / "a.txt").read_text() == "from a\n"
        _, stderr = live.communicate(timeout=60)
    finally:
        if live.poll() is None:
            live.kill()
    assert live.returncode == 0, stderr
    assert (project.exec_dir / "agentRoot" / "a.txt").read_text() == "from a\n"
    assert (project.exec_dir / "agentRoot" / "b.txt").read_text() == "from b\n"
    assert not list(project.exec_dir.glob(".hankweave.backup-*"))
    state = project.state()
    assert len(state.runs) == 1
    assert records(state, "a", "completed") and records(state, "b", "completed")


def test_new_force_after_the_run_ended_starts_over(project: Project) -> None:
    """The lock check does not block -n -f once the runtime is gone."""
    project.write_hank([codon("a")])
    project.write_script({"a": {"write_files": {"a.txt": "from a\n"}}})
    assert project.run().returncode == 0
    again = project.run("-n", "-f")
    assert again.returncode == 0, again.stderr
    (backup,) = project.exec_dir.glob(".hankweave.backup-*")
    assert (backup / "state.json").is_file()
    assert not (backup / "runtime.lock").exists()
    assert len(project.state().runs) == 1


def test_new_without_force_prints_a_resume_command_that_works_when_pasted(
        project: Project) -> None:
    project.write_hank([codon("a"), codon("b")])
    project.write_script({"a": {}, "b": {"result": "error"}})
    assert project.run().returncode != 0
    assert not records(project.state(), "b", "completed")
    project.write_script({"a": {}, "b": {}})

    refused = project.run("-n")
    assert refused.returncode == 2
    hint = re.search(r"\((hankweave run -e [^)]*)\)", refused.stderr)
    assert hint is not None, refused.stderr
    words = shlex.split(hint.group(1))
    assert words[0] == "hankweave"
    # Pasted from another directory, as a user would: the execution records its hank.
    elsewhere = project.root / "elsewhere"
    elsewhere.mkdir()
    pasted = subprocess.run([sys.executable, "-m", "hankweave", *words[1:]], cwd=elsewhere,
                            env=project.env, text=True, capture_output=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert pasted.returncode == 0, pasted.stderr
    assert records(project.state(), "b", "completed")


def test_unreadable_state_and_backup_refuse_to_run_then_start_fresh_keeps_them(
        project: Project) -> None:
    project.write_hank([codon("a")])
    project.write_script({"a": {"write_files": {"a.txt": "from a\n"}}})
    assert project.run().returncode == 0
    hw = project.exec_dir / ".hankweave"
    (hw / "state.json").write_bytes(CORRUPT)
    (hw / "state.json.bak").write_bytes(b"[1, 2, 3]\n")  # JSON, but not a state
    (project.exec_dir / "agentRoot" / "a.txt").write_text("edited by the user\n")
    before, logs = _state_files(project), _codon_logs(project)

    refused = project.run()
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert str(hw / "state.json") in refused.stderr
    assert str(hw / "state.json.bak") in refused.stderr
    assert f"hankweave run -e {project.exec_dir} --start-fresh" in refused.stderr
    # Nothing ran (no new codon log, the agent's file as it was) and nothing was rewritten.
    assert _state_files(project) == before
    assert _codon_logs(project) == logs
    assert (project.exec_dir / "agentRoot" / "a.txt").read_text() == "edited by the user\n"
    assert not list(hw.glob("damaged-*"))

    fresh = project.run("--start-fresh")
    assert fresh.returncode == 0, fresh.stderr
    (damaged,) = hw.glob("damaged-*")
    assert str(damaged) in fresh.stderr
    assert (damaged / "state.json").read_bytes() == CORRUPT
    assert (damaged / "state.json.bak").read_bytes() == b"[1, 2, 3]\n"
    state = project.state()
    assert len(state.runs) == 1 and records(state, "a", "completed")
    # The journal is kept and appended to.
    journal = (hw / "events" / "events.jsonl").read_bytes()
    assert journal.startswith(before["events.jsonl"]) and len(journal) > len(
        before["events.jsonl"])


def test_unreadable_state_without_backup_is_refused_too(project: Project) -> None:
    project.write_hank([codon("a")])
    assert project.run().returncode == 0
    hw = project.exec_dir / ".hankweave"
    (hw / "state.json").write_bytes(CORRUPT)
    (hw / "state.json.bak").unlink(missing_ok=True)
    before = _state_files(project)
    refused = project.run()
    assert refused.returncode == 2
    assert "--start-fresh" in refused.stderr
    assert _state_files(project) == before


def test_a_recoverable_state_still_resumes(project: Project) -> None:
    """Only a state the ladder cannot load is refused: a usable backup resumes as before."""
    project.write_hank([codon("a"), codon("b")])
    project.write_script({"a": {}, "b": {"result": "error"}})
    assert project.run().returncode != 0
    hw = project.exec_dir / ".hankweave"
    state_bytes = (hw / "state.json").read_bytes()
    (hw / "state.json.bak").write_bytes(state_bytes)
    (hw / "state.json").write_bytes(CORRUPT)
    project.write_script({"a": {}, "b": {}})
    resumed = project.run()
    assert resumed.returncode == 0, resumed.stderr
    assert not list(hw.glob("damaged-*"))
    assert records(project.state(), "b", "completed")
