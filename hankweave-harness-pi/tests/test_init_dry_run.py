"""``hankweave init``'s hank, dry-run on the pi harness (real litellm) with the script init
wrote for the Claude Code CLI's hank: its neutral steps become pi's own tool calls."""

from __future__ import annotations

from pathlib import Path

from pi_helpers import PiProject

from hankweave.testing.mock_provider import (
    INIT_DRY_RUN_REPORT,
    INIT_DRY_RUN_STEPS,
    MockProviderLog,
)


def test_the_init_hank_s_dry_run_completes_on_the_pi_harness(tmp_path: Path) -> None:
    project = PiProject(tmp_path, {"rules": []})  # the script is init's
    hank = tmp_path / "my-hank"
    assert project.hankweave("init", str(hank)).code == 0

    done = project.hankweave("run", str(hank), str(hank / "data"), "-e", str(project.exec_dir),
                             "--headless", "--mock-provider", str(hank / "dry-run.json"),
                             "-m", "gemini-2.5-flash")

    assert done.code == 0, done.stderr
    report = project.exec_dir / "agentRoot/report/report.md"
    assert report.read_text() == INIT_DRY_RUN_REPORT
    log = MockProviderLog(project.exec_dir / ".hankweave/mock-provider/requests.jsonl")
    asked = log.requests(path="/v1/chat/completions")
    assert [(r.rule.split(" ")[1].strip("()") if r.rule else None, r.step) for r in asked] == \
        INIT_DRY_RUN_STEPS
    # pi's own tools, in its own spelling.
    assert [r.tool_calls for r in asked[:4]] == [["read"], ["read"], ["edit"], []]
    assert asked[2].entry["reply"]["toolCalls"][0]["input"]["path"] == "report/report.md"
    assert all(r.status == 200 for r in asked)
