"""The pi agent's ``bash`` in the bubblewrap sandbox, through ``hankweave run`` with real
litellm against the mock provider: what is not the agent's cannot be read, changed or reached,
and its normal work completes.  Skipped without bubblewrap unless
``HANKWEAVE_SANDBOX_REQUIRED=1`` (CI installs it)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from pi_helpers import PiProject

from hankweave.api import bubblewrap_problem


def attempts(home: Path, project: PiProject, port: int) -> list[str]:
    """What a hostile agent tries: a secret in the home directory, its own state, another
    execution, a file beside its workspace, a socket."""
    return [
        f"cat {home}/.ssh/id_ed25519",
        "echo hacked > ../.hankweave/state.json",
        f"ls {project.root / 'other-execution'}",
        f"echo planted > {project.exec_dir}/planted.txt",
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'",
    ]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "userhome"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_ed25519").write_text("PRIVATE KEY 42\n")
    return folder


def sandboxed_run(tmp_path: Path, home: Path, *extra: str) -> tuple[PiProject, list[str]]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        project = PiProject(tmp_path / "project", {"rules": []})
        tries = attempts(home, project, port)
        project.script.write_text(json.dumps({"rules": [{
            "name": "work", "when": {"lastUserMessage": "Do the work"},
            "steps": [*({"run": command} for command in tries),
                      {"write": {"path": "report.txt", "content": "done\n"}},
                      {"run": "cat report.txt read_only_data_source/input.txt"},
                      {"answer": "Done."}]}]}))
        (project.root / "other-execution").mkdir()
        (project.root / "other-execution" / "notes.txt").write_text("not yours\n")
        project.env["HOME"] = str(home)
        project.write_hank([{"id": "work", "name": "Work", "model": "gpt-5.2",
                             "continuationMode": "fresh", "promptText": "Do the work."}])
        done = project.hankweave("run", str(project.hank_dir), str(project.data), "-e",
                                 str(project.exec_dir), "--headless", "--mock-provider",
                                 str(project.script), *extra)
        assert done.code == 0, done.stderr
        return project, [done.stderr, *tries]


def tool_results(project: PiProject) -> list[dict[str, object]]:
    [log] = project.hankweave_dir.glob("runs/*/work-claude.log")
    return [block for line in log.read_text().splitlines() if line.strip()
            for block in (json.loads(line).get("message") or {}).get("content") or []
            if isinstance(block, dict) and block.get("type") == "tool_result"]


@pytest.mark.skipif(bubblewrap_problem() is not None and
                    os.environ.get("HANKWEAVE_SANDBOX_REQUIRED") != "1",
                    reason=str(bubblewrap_problem()))
def test_the_agent_s_bash_cannot_touch_what_is_not_its_own(tmp_path: Path, home: Path) -> None:
    project, (stderr, *tries) = sandboxed_run(tmp_path, home)

    results = tool_results(project)
    assert len(results) == len(tries) + 2
    for tried, result in zip(tries, results, strict=False):
        assert result.get("is_error") is True, (tried, result)
    said = json.dumps(results)
    assert "PRIVATE KEY" not in said and "not yours" not in said
    assert "Read-only file system" in said  # the state and the planted file
    # Its own work: the file tool, and bash in the workspace and on the data.
    assert results[-1].get("is_error") is not True
    assert (project.agent_root / "report.txt").read_text() == "done\n"
    assert "done" in str(results[-1]["content"]) and "some input" in str(results[-1]["content"])
    assert not (project.exec_dir / "planted.txt").exists()
    assert "hacked" not in (project.hankweave_dir / "state.json").read_text()
    assert "Agents run in a bubblewrap sandbox" in stderr


def test_required_without_bubblewrap_fails_before_any_codon(tmp_path: Path, home: Path) -> None:
    project = PiProject(tmp_path / "project", {"rules": [{"reply": {"text": "hi"}}]})
    project.write_hank([{"id": "work", "name": "Work", "model": "gpt-5.2",
                         "continuationMode": "fresh", "promptText": "Do the work."}])
    bare = tmp_path / "bin"  # a PATH with python and bash, without bwrap
    bare.mkdir()
    for tool in ("python3", "bash", "sh", "git"):
        found = next((Path(d) / tool for d in os.environ["PATH"].split(os.pathsep)
                      if (Path(d) / tool).exists()), None)
        if found is not None:
            (bare / tool).symlink_to(found)
    project.env["PATH"] = str(bare)
    done = project.hankweave("run", str(project.hank_dir), str(project.data), "-e",
                             str(project.exec_dir), "--headless", "--mock-provider",
                             str(project.script), "--sandbox", "required")
    assert done.code == 2, done.stderr
    assert "a sandbox is required, but bubblewrap (bwrap) is not installed" in done.stderr
    assert "Traceback" not in done.stderr
    assert not project.model_requests()  # nothing ran
