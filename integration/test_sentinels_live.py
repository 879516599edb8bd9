"""Sentinels in a real ``hankweave run --mock-provider``: a Claude codon (the real Claude Code
CLI) watched by an LLM sentinel (real litellm, answered by the same mock) and by the example
``command`` sentinel plugin (installed, found through its entry point), then exported and
replayed, which runs no sentinel."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from integration.test_live_harnesses import hankweave
from integration.test_replay_quickstart import execution_dir, offline_env
from integration.test_replay_roundtrip import state_of

REVIEWER = {
    "id": "reviewer", "name": "Reviewer",
    "trigger": {"type": "event", "on": ["codon.completed"],
                "conditions": [{"path": "success", "operator": "equals", "value": True}]},
    "execution": {"strategy": "immediate"}, "model": "openai/gpt-5-mini",
    "systemPromptText": "You review finished codons.",
    "userPromptText": "Review codon <%= it.codon.id %>: <%= it.events.length %> event(s).",
}
LINTER = {
    "id": "markdown-lint", "name": "Markdown lint", "kind": "command",
    "trigger": {"type": "event", "on": ["codon.completed"]},
    "execution": {"strategy": "immediate"},
    "options": {"command": [sys.executable, "-c",
                            "import sys\nfor p in sys.argv[1:]:\n"
                            "    t = open(p).read()\n"
                            "    print(p + (': ok' if t.startswith('# ') else ': no title'))"],
                "files": ["**/*.md"]},
}
SCRIPT = {"rules": [
    {"name": "review", "when": {"lastUserMessage": "Review codon"},
     "reply": {"text": "The survey wrote its findings.",
               "usage": {"inputTokens": 300, "outputTokens": 30}}},
    {"name": "survey", "when": {"lastUserMessage": "Survey the data", "turn": 1},
     "reply": {"text": "Writing.", "toolCalls": [{"name": "Write", "input": {
         "file_path": "findings.md", "content": "# Findings\n\n- 3 apples\n"}}],
               "usage": {"inputTokens": 1200, "outputTokens": 80}}},
    {"name": "survey-done", "when": {"toolResult": {"regex": "(?i)(created|wrote|success)"}},
     "reply": {"text": "Done.", "usage": {"inputTokens": 1350, "outputTokens": 20}}},
], "default": {"text": "OK."}}


def test_sentinels_run_live_against_the_mock_and_a_replay_runs_none(tmp_path: Path) -> None:
    hank = tmp_path / "hank"
    (hank / "sentinels").mkdir(parents=True)
    (hank / "sentinels" / "reviewer.json").write_text(json.dumps(REVIEWER))
    (hank / "hank.json").write_text(json.dumps({"hank": [{
        "id": "survey", "name": "Survey", "model": "sonnet", "continuationMode": "fresh",
        "promptText": "Survey the data and write findings.md.",
        "checkpointedFiles": ["findings.md"],
        "sentinels": [{"sentinelConfig": "sentinels/reviewer.json",
                       "settings": {"failCodonIfNotLoaded": True,
                                    "outputPaths": {"lastValueFile": "review.md"}}},
                      {"sentinelConfig": LINTER}]}]}))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "fruit.txt").write_text("3 apples\n")
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    env = {**offline_env(tmp_path / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    execution = tmp_path / "exec"

    # No key: the run below is on the mock provider, which needs none.
    validated = hankweave("validate", str(hank), "--offline", env=env, cwd=tmp_path)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    live = hankweave("run", str(hank), str(tmp_path / "data"), "-e", str(execution),
                     "--headless", "--mock-provider", "script.json", env=env, cwd=tmp_path)

    assert live.returncode == 0, live.stderr
    (record,) = state_of(execution).runs[0].codons
    assert record.status == "completed"
    states = {s.id: s for s in record.sentinels.executed}
    assert states["reviewer"].llm_call_count == 1
    # gpt-5-mini's catalogue prices: $0.25 / $2 per million tokens.
    assert states["reviewer"].total_cost == (300 * 0.25 + 30 * 2.0) / 1_000_000
    assert states["markdown-lint"].total_triggers == 1
    outputs = execution / ".hankweave" / "sentinels" / "outputs"
    assert (outputs / "reviewer" / "review.md").read_text() == "The survey wrote its findings."
    (lint_log,) = (outputs / "markdown-lint").glob("*.md")
    assert "findings.md: ok" in lint_log.read_text()
    requests = [json.loads(line) for line in
                (execution / ".hankweave/mock-provider/requests.jsonl").read_text().splitlines()]
    assert [r["rule"] for r in requests if "review" in r["rule"]] == ["rules[0] (review)"]
    journal = [json.loads(line) for line in
               (execution / ".hankweave/events/events.jsonl").read_text().splitlines()]
    kinds = [e["type"] for e in journal if e["type"].startswith("sentinel.")]
    assert kinds.count("sentinel.output") == 2 and kinds.count("sentinel.unloaded") == 2

    exported = hankweave("export", "-e", str(execution), "-o", "rec.hwrec.tar.gz", env=env,
                         cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    replayed = hankweave("replay", "rec.hwrec.tar.gz", "--headless", env=env, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    again = execution_dir(replayed.stderr)
    replay_journal = (again / ".hankweave/events/events.jsonl").read_text()
    assert '"sentinel.' not in replay_journal
    assert (again / "agentRoot/findings.md").read_text().startswith("# Findings")
