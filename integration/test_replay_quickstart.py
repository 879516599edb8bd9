"""The bundled quickstart: its recording replays offline, as the README says, and is current."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from integration.test_replay_roundtrip import facts, state_of, work_tree

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
RECORDING = QUICKSTART / "recording.hwrec.tar.gz"


def offline_env(home: Path) -> dict[str, str]:
    """This environment with nothing a test plugin or a provider could use."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HANKWEAVE_", "ANTHROPIC_", "OPENAI_", "GEMINI_"))}
    env.update(HANKWEAVE_HOME=str(home), HANKWEAVE_STRICT_PLUGINS="1")
    env.pop("CI", None)
    return env


def hankweave(*args: str, env: dict[str, str], cwd: Path = REPO,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=cwd, env=env,
                          text=True, capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def execution_dir(stderr: str) -> Path:
    found = re.search(r"^Execution directory: (.+)$", stderr, re.MULTILINE)
    assert found, stderr
    return Path(found.group(1).strip())


def test_the_readme_command_replays_the_quickstart_offline(tmp_path):
    env = offline_env(tmp_path / "home")

    # Exactly the README's command (headless because the output is not a terminal).
    result = hankweave("replay", "examples/quickstart/recording.hwrec.tar.gz", env=env)

    assert result.returncode == 0, result.stderr
    assert "[REPLAY] Starting a fresh run" in result.stderr
    replayed = execution_dir(result.stderr)
    for where in ("state.json", "events.jsonl", "-claude.log", "checkpoints",
                  f"  hankweave inspect thread -e {replayed}"):
        assert where in result.stderr
    state = state_of(replayed)
    assert [(c.codon_id, c.status) for c in state.runs[0].codons] == [
        ("triage", "completed"), ("draft", "completed"), ("proofread#0", "completed"),
        ("proofread#1", "completed")]
    files = work_tree(replayed)
    assert files["notes/RELEASE_NOTES.md"].decode() == written_by("proofread-2")
    assert files["notes/triage.md"].decode() == written_by("triage")
    assert all(f["cost"] > 0 for f in facts(state).values())  # as the Claude CLI priced them

    inspected = hankweave("inspect", "thread", "-e", str(replayed), env=env)
    assert inspected.returncode == 0, inspected.stderr


def written_by(rule: str) -> str:
    """What the mock script's rule ``rule`` has the agent write (its Write tool call)."""
    rules = json.loads((QUICKSTART / "mock-script.json").read_text())["rules"]
    (reply,) = [r["reply"] for r in rules if r["name"] == rule]
    (call,) = reply["toolCalls"]
    return call["input"]["content"]


def test_the_bundled_recording_is_a_live_claude_run():
    """Recorded by the Claude Code CLI itself (record.py), not by a scripted fake agent."""
    with tarfile.open(RECORDING) as tar:
        log = tar.extractfile(next(m for m in tar if m.name.endswith("triage-claude.log")))
        first = json.loads(log.read().decode().splitlines()[0])
    assert first["type"] == "system" and first["subtype"] == "init"
    assert first["claude_code_version"] and "Write" in first["tools"]


def test_the_bundled_recording_holds_the_current_hank():
    """Editing the example without re-recording it (python examples/quickstart/record.py)
    would make the replay show something else than the hank says."""
    with tarfile.open(RECORDING) as tar:
        recorded = {m.name.removeprefix("hank/"): tar.extractfile(m).read()
                    for m in tar if m.isfile() and m.name.startswith("hank/")}
    current = {p.relative_to(QUICKSTART).as_posix(): p.read_bytes()
               for p in QUICKSTART.rglob("*") if p.is_file() and p != RECORDING
               and "__pycache__" not in p.parts and not any(part.startswith(".") for part in p.parts)}
    assert recorded == current, "re-record the quickstart: python examples/quickstart/record.py"


def test_a_replayed_quickstart_is_complete_once_its_recording_is_gone(tmp_path):
    """The replay keeps what it ran from: it exports, inspects and resumes without the file."""
    env = offline_env(tmp_path / "home")
    recording = tmp_path / "recording.hwrec.tar.gz"
    shutil.copy(RECORDING, recording)
    first = hankweave("replay", str(recording), "--headless", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    replayed = execution_dir(first.stderr)
    recording.unlink()

    exported = hankweave("export", "-e", str(replayed), "-o", "rec.tar.gz", env=env,
                         cwd=tmp_path)
    inspected = hankweave("inspect", "thread", "-e", str(replayed), env=env, cwd=tmp_path)
    resumed = hankweave("run", "-e", str(replayed), "--headless", env=env, cwd=tmp_path)
    again = hankweave("replay", "rec.tar.gz", "--headless", env=env, cwd=tmp_path)

    assert exported.returncode == 0, exported.stderr
    assert inspected.returncode == 0, inspected.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert "Nothing to do" in resumed.stderr and "Traceback" not in resumed.stderr
    assert again.returncode == 0, again.stderr
    second = execution_dir(again.stderr)
    assert facts(state_of(second)) == facts(state_of(replayed))
    assert work_tree(second) == work_tree(replayed)


@pytest.mark.slow
def test_regenerating_the_recording_gives_the_same_replay(tmp_path):
    fresh = tmp_path / "fresh.hwrec.tar.gz"
    made = subprocess.run([sys.executable, str(QUICKSTART / "record.py"), str(fresh)],
                          cwd=tmp_path, env={**os.environ, "HANKWEAVE_HOME": str(tmp_path)},
                          text=True, capture_output=True, timeout=180)
    assert made.returncode == 0, made.stderr
    env = offline_env(tmp_path / "home")

    bundled = hankweave("replay", str(RECORDING), "--headless", env=env)
    regenerated = hankweave("replay", str(fresh), "--headless", env=env)

    assert bundled.returncode == regenerated.returncode == 0
    old, new = execution_dir(bundled.stderr), execution_dir(regenerated.stderr)
    # A live run: the CLI draws new session ids; the rest is the same.
    assert without_sessions(facts(state_of(new))) == without_sessions(facts(state_of(old)))
    assert work_tree(new) == work_tree(old)


def without_sessions(outcomes: dict[str, dict]) -> dict[str, dict]:
    return {codon: {k: v for k, v in fact.items() if k != "session"}
            for codon, fact in outcomes.items()}
