"""``hankweave init``'s hank, dry-run on the Claude Code CLI with the script init wrote: the
same neutral script completes it on the pi harness (hankweave-harness-pi/tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from claude_helpers import offline_env

from hankweave.testing.mock_provider import (
    INIT_DRY_RUN_REPORT,
    INIT_DRY_RUN_STEPS,
    MockProviderLog,
)


def test_the_init_hank_s_dry_run_completes_on_the_claude_cli(tmp_path: Path) -> None:
    env = offline_env({}, HANKWEAVE_HOME=str(tmp_path / "home"))
    hank, execution = tmp_path / "my-hank", tmp_path / "exec"

    def hankweave(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hankweave", *map(str, args)], env=env,
                              cwd=tmp_path, text=True, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=180, check=False)

    assert hankweave("init", hank).returncode == 0
    done = hankweave("run", hank, hank / "data", "-e", execution, "--headless",
                     "--mock-provider", hank / "dry-run.json")

    assert done.returncode == 0, done.stderr
    assert (execution / "agentRoot/report/report.md").read_text() == INIT_DRY_RUN_REPORT
    log = MockProviderLog(execution / ".hankweave/mock-provider/requests.jsonl")
    asked = log.requests(path="/v1/messages")
    assert [(r.rule.split(" ")[1].strip("()") if r.rule else None, r.step) for r in asked] == \
        INIT_DRY_RUN_STEPS
    # The Claude CLI's own tools, in its own spelling.
    assert [r.tool_calls for r in asked[:4]] == [["Read"], ["Read"], ["Edit"], []]
    assert asked[2].entry["reply"]["toolCalls"][0]["input"]["file_path"] == "report/report.md"
    assert all(r.status == 200 for r in asked)
