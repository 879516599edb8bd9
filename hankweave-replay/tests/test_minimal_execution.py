"""An execution that records only what replay needs replays: the shape Hankweave 0.10.0's replay
reads (and its own test fixtures write): ``state.json`` runs of codons with their ids and logs,
and an ``execution-meta.json`` naming the hank; no run folders, branches, times or checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from replay_helpers import Project, codon

from hankweave.api import LaunchError, load_state
from hankweave_replay import RecordingError, ReplayHarness

RUN_ID = "replay-1"
COSTS = {"a": 0.25, "b": 0.125}


def log_lines(codon_id: str, cost: float) -> list[dict]:
    """A codon log as the Claude CLI writes it: init, assistant text, a success result."""
    session = f"session-{codon_id}"
    usage = {"input_tokens": 100, "output_tokens": 20}
    return [
        {"type": "system", "subtype": "init", "session_id": session, "tools": [],
         "mcp_servers": []},
        {"type": "assistant", "session_id": session, "message": {
            "id": f"msg_{codon_id}1", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": f"Working on {codon_id}."}], "usage": usage}},
        {"type": "assistant", "session_id": session, "message": {
            "id": f"msg_{codon_id}2", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": "Done."}], "usage": usage}},
        {"type": "result", "subtype": "success", "is_error": False, "result": "Done.",
         "session_id": session, "num_turns": 2, "duration_ms": 10, "total_cost_usd": cost,
         "usage": usage},
    ]


def minimal_execution(project: Project, logs: dict[str, list[dict]] | None = None,
                      **codon_fields: object) -> Path:
    """The recorded execution, in ``project.exec_dir``, of a hank of codons a and b (or of the
    codons of ``logs``, each recorded with its log lines)."""
    logs = logs if logs is not None else {c: log_lines(c, cost) for c, cost in COSTS.items()}
    project.write_hank([codon(codon_id, **codon_fields) for codon_id in logs])
    data = project.root / "data.txt"
    data.write_text("input\n")
    hankweave_dir = project.exec_dir / ".hankweave"
    (hankweave_dir / "runs" / RUN_ID).mkdir(parents=True)
    codons = []
    for codon_id, lines in logs.items():
        log = f".hankweave/runs/{RUN_ID}/{codon_id}-claude.log"
        (project.exec_dir / log).write_text("".join(json.dumps(line) + "\n" for line in lines))
        codons.append({"codonId": codon_id, "status": "completed", "claudeLogPath": log})
    write_json(hankweave_dir / "state.json", {
        "runs": [{"runId": RUN_ID, "status": "completed",
                  "startingConditions": {"type": "fresh"}, "codons": codons}],
        "currentRunId": None, "executionPlan": []})
    write_json(hankweave_dir / "execution-meta.json", {
        "version": "1.1.0", "readOnlySourceDataPath": str(data),
        "readOnlySourceResolvedDataPath": str(data), "dataHash": "replayfixture",
        "hankPath": str(project.hank_dir / "hank.json"), "linkType": "copy",
        "createdAt": "2026-01-01T00:00:00.000Z", "lastUsed": "2026-01-01T00:00:00.000Z",
        "hankweaveVersion": "0.0.0-replay-fixture"})
    return project.exec_dir


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2))


def edit_state(exec_dir: Path, change) -> None:
    path = exec_dir / ".hankweave" / "state.json"
    state = json.loads(path.read_text())
    change(state)
    write_json(path, state)


def replay_cli(project: Project, source: Path, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hankweave", "replay", str(source), "-e", str(target),
         "--headless"], cwd=project.root, env=project.env, text=True, capture_output=True,
        timeout=120, stdin=subprocess.DEVNULL)


def statuses_and_costs(exec_dir: Path) -> dict[str, tuple[str, float | None]]:
    run = load_state(exec_dir / ".hankweave")[0].runs[0]
    return {c.codon_id: (c.status, getattr(c, "final_cost", None)) for c in run.codons}


def test_a_minimal_execution_replays_with_the_costs_of_its_logs(project):
    source = minimal_execution(project)

    replayed = project.replay(source)

    assert replayed.code == 0, replayed.notices
    assert statuses_and_costs(replayed.exec_dir) == {
        codon_id: ("completed", cost) for codon_id, cost in COSTS.items()}
    for record in replayed.state.runs[0].codons:
        lines = (replayed.exec_dir / record.claude_log_path).read_text().splitlines()
        assert [json.loads(line)["type"] for line in lines] == [
            "system", "assistant", "assistant", "result"]


def test_a_minimal_execution_has_no_checkpoints_and_says_its_files_are_not_replayed(project):
    source = minimal_execution(project)

    replayed = project.replay(source)

    assert replayed.code == 0, replayed.notices
    warnings = [n for n in replayed.notices if "no end-of-codon checkpoint" in n]
    assert len(warnings) == 1 and "codon(s) a, b" in warnings[0], replayed.notices
    assert "file changes are not" in warnings[0]


def test_a_minimal_execution_replays_through_the_command_line(project):
    source = minimal_execution(project)
    target = project.root / "replayed"

    result = replay_cli(project, source, target)

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert statuses_and_costs(target) == {
        codon_id: ("completed", cost) for codon_id, cost in COSTS.items()}


def test_a_codon_without_its_log_path_is_a_clear_error(project):
    source = minimal_execution(project)
    edit_state(source, lambda state: state["runs"][0]["codons"][1].pop("claudeLogPath"))
    target = project.root / "replayed"

    result = replay_cli(project, source, target)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{source / '.hankweave' / 'state.json'}: codon b (run {RUN_ID}) has no" \
           " claudeLogPath" in result.stderr
    assert not (target / ".hankweave" / "state.json").exists()


@pytest.mark.parametrize(("change", "message"), [
    (lambda state: state["runs"][0]["codons"][0].pop("codonId"),
     f"codon 1 of run {RUN_ID} has no codonId"),
    (lambda state: state["runs"][0].update(codons=[]), r"no run with codons"),
    (lambda state: state.update(runs="none"), r"no run with codons"),
])
def test_what_replay_cannot_do_without_is_named(project, change, message):
    source = minimal_execution(project)
    edit_state(source, change)
    with pytest.raises(RecordingError, match=message):
        ReplayHarness.open_recording(source)


def test_a_minimal_execution_must_name_an_existing_hank(project):
    source = minimal_execution(project)
    (project.hank_dir / "hank.json").unlink()
    with pytest.raises(LaunchError, match=r"Cannot replay .*hank file .* no longer exists"):
        project.replay(source)


def test_metadata_naming_only_the_hank_is_enough(project):
    source = minimal_execution(project)
    write_json(source / ".hankweave" / "execution-meta.json",
               {"hankPath": str(project.hank_dir / "hank.json")})

    replayed = project.replay(source)

    assert replayed.code == 0, replayed.notices
    assert statuses_and_costs(replayed.exec_dir)["a"] == ("completed", COSTS["a"])


def test_metadata_that_does_not_name_the_hank_is_refused(project):
    source = minimal_execution(project)
    write_json(source / ".hankweave" / "execution-meta.json", {"dataHash": "x"})
    with pytest.raises(RecordingError, match=r"does not name the hank file \(hankPath\)"):
        ReplayHarness.open_recording(source)
