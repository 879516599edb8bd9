"""The Claude Code CLI, and every command its Bash tool runs, in the bubblewrap sandbox:
through ``hankweave run`` against the mock provider, what is not the agent's cannot be read
or changed, and its normal work completes.  (The CLI keeps the network: it talks to its
provider from inside; docs/sandbox.md.)  Skipped without bubblewrap unless
``HANKWEAVE_SANDBOX_REQUIRED=1`` (CI installs it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from claude_helpers import HankProject, codon

from hankweave.api import bubblewrap_problem

pytestmark = pytest.mark.skipif(
    bubblewrap_problem() is not None and os.environ.get("HANKWEAVE_SANDBOX_REQUIRED") != "1",
    reason=str(bubblewrap_problem()))


def test_the_cli_s_bash_cannot_touch_what_is_not_its_own(tmp_path: Path) -> None:
    home = tmp_path / "userhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY 42\n")
    project = HankProject(tmp_path / "project", env={"HOME": str(home)})
    (project.root / "other-execution").mkdir(parents=True)
    (project.root / "other-execution" / "notes.txt").write_text("not yours\n")
    tries = [f"cat {home}/.ssh/id_ed25519",
             f"echo hacked > {project.execution}/.hankweave/state.json",
             f"ls {project.root / 'other-execution'}",
             f"echo planted > {project.execution}/planted.txt"]
    project.write([codon("work", promptText="Do the work.")], {"rules": [{
        "name": "work", "when": {"lastUserMessage": "Do the work"},
        "steps": [*({"run": command} for command in tries),
                  {"write": {"path": "report.txt", "content": "done\n"}},
                  {"run": "cat report.txt read_only_data_source/input.txt"},
                  {"answer": "Done."}]}]})

    done = project.run()

    assert done.code == 0, done.stderr
    results = tool_results(project.execution)
    assert len(results) == len(tries) + 2
    for tried, result in zip(tries, results, strict=False):
        assert result.get("is_error") is True, (tried, result)
    said = json.dumps(results)
    assert "PRIVATE KEY" not in said and "not yours" not in said
    assert "Read-only file system" in said
    assert results[-1].get("is_error") is not True
    assert "apples 3" in json.dumps(results[-1])
    assert (project.execution / "agentRoot" / "report.txt").read_text() == "done\n"
    assert not (project.execution / "planted.txt").exists()
    assert "hacked" not in (project.execution / ".hankweave" / "state.json").read_text()
    assert "Agents run in a bubblewrap sandbox" in done.stderr
    # As root too, the CLI runs unattended inside the sandbox (IS_SANDBOX=1).
    assert "As root the Claude CLI refuses bypassPermissions" not in done.stderr


def tool_results(execution: Path) -> list[dict[str, object]]:
    [log] = execution.glob(".hankweave/runs/*/work-claude.log")
    return [block for line in log.read_text().splitlines() if line.strip()
            for block in (json.loads(line).get("message") or {}).get("content") or []
            if isinstance(block, dict) and block.get("type") == "tool_result"]
