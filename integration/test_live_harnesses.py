"""Both agent harnesses live in one run: the mock-provider example dry-runs a Claude codon
(the real Claude Code CLI) and a pi codon (real litellm) against its script, then the
execution exports and replays offline as any other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from integration.test_replay_quickstart import execution_dir, offline_env
from integration.test_replay_roundtrip import facts, state_of, work_tree

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "mock-provider"


def hankweave(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=cwd, env=env,
                          text=True, capture_output=True, timeout=240, stdin=subprocess.DEVNULL)


def test_a_dry_run_on_both_harnesses_records_and_replays(tmp_path: Path) -> None:
    env = {**offline_env(tmp_path / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    execution = tmp_path / "exec"

    live = hankweave("run", str(EXAMPLE), str(EXAMPLE / "data"), "-e", str(execution),
                     "--headless", "--mock-provider", str(EXAMPLE / "script.json"),
                     env=env, cwd=tmp_path)

    assert live.returncode == 0, live.stderr
    state = state_of(execution)
    statuses = [(c.codon_id, c.status) for c in state.runs[0].codons]
    # polish is answered "overloaded" once: its retry completes.
    assert statuses == [("survey", "completed"), ("polish", "failed"), ("polish", "completed")]
    logs = {p.name: p.read_text() for p in (execution / ".hankweave/runs").rglob("*-claude.log")}
    assert '"claude_code_version"' in logs["survey-claude.log"]  # the Claude Code CLI
    assert '"model":"openai/gpt-5.2"' in logs["polish-claude.log"]  # the pi agent
    assert (execution / "agentRoot/findings.md").read_text().startswith("# Findings")
    assert all(f["cost"] for f in facts(state).values() if f["status"] == "completed")

    exported = hankweave("export", "-e", str(execution), "-o", "rec.hwrec.tar.gz", env=env,
                         cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    replayed = hankweave("replay", "rec.hwrec.tar.gz", "--headless", env=env, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    again = execution_dir(replayed.stderr)
    assert facts(state_of(again)) == facts(state)
    assert work_tree(again) == work_tree(execution)
