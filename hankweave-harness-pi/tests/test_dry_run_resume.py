"""A dry run resumed by pasting the commands it printed: real ``hankweave`` processes whose pi
agents (real litellm) talk to the mock provider each run serves on 127.0.0.1, with no
provider key anywhere.  The run's intent (``--mock-provider``, ``-m``) belongs to the
execution: ``hankweave run -e DIR`` as printed resumes on the same mock with the same model,
and only ``--no-mock-provider`` leaves it."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from pi_helpers import Done, PiProject

MODEL = "gemini-2.5-flash"
"""The ``-m`` override: not the hank's model, so the request log shows which one ran."""
SCRIPT = {"rules": [
    {"name": "ask", "when": {"lastUserMessage": "Pick a colour", "afterToolResult": False},
     "reply": {"text": "I need to ask.", "toolCalls": [
         {"name": "ask_human", "id": "call_ask",
          "input": {"question": "Which colour?", "options": ["red", "blue"]}}]}},
    {"name": "answered", "when": {"lastUserMessage": "Pick a colour", "afterToolResult": True},
     "reply": {"text": "Blue it is."}},
]}


def dry_run(tmp_path: Path) -> tuple[PiProject, Done]:
    """A project under a path with a space, and its first run: ``--mock-provider`` and ``-m``,
    which stops at the agent's question (exit 3)."""
    project = PiProject(tmp_path / "dry run", SCRIPT)
    project.write_hank([{"id": "colour", "name": "Colour", "model": "gpt-5.2",
                         "continuationMode": "fresh", "promptText": "Pick a colour."}])
    first = project.hankweave("run", str(project.hank_dir), str(project.data), "-e",
                              str(project.exec_dir), "--headless", "--mock-provider",
                              str(project.script), "-m", MODEL)
    assert first.code == 3, first.stderr
    assert [r.model for r in project.model_requests()] == [MODEL]
    return project, first


def hint(text: str, marker: str) -> list[str]:
    """The printed command on the line that holds ``marker``, split as a shell would split
    it (a trailing ``# comment`` dropped)."""
    (line,) = [line for line in text.splitlines() if marker in line]
    argv = shlex.split(line[line.index("hankweave "):], comments=True)
    assert argv[0] == "hankweave", line
    return argv


def paste(project: PiProject, argv: list[str], cwd: Path) -> Done:
    """Run a printed command as a shell would, from ``cwd``, with the project's environment
    (no provider key, no endpoint)."""
    done = subprocess.run([sys.executable, "-m", "hankweave", *argv[1:]], env=project.env,
                          cwd=cwd, text=True, capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=120, check=False)
    return Done(done.returncode, done.stdout, done.stderr)


def pending(project: PiProject) -> dict[str, Any]:
    (item,) = [i for i in project.state()["interruptions"] if i["status"] == "pending"]
    return item


def test_the_printed_resume_hint_resumes_on_the_mock_with_the_model_override(
        tmp_path: Path) -> None:
    project, first = dry_run(tmp_path)
    assert project.answer(pending(project)["id"], "blue").code == 0
    # The execution keeps its own copy of the script: the original may go, the resume may
    # start anywhere.
    script = project.script.read_bytes()
    project.script.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    resumed = paste(project, hint(first.stderr, "# resume"), elsewhere)

    assert resumed.code == 0, resumed.stderr
    assert project.state()["runs"][0]["status"] == "completed"
    requests = project.model_requests()
    assert [(r.model, r.rule) for r in requests[1:]] == [(MODEL, "rules[1] (answered)")]
    assert {r.entry["auth"] for r in requests} == {"mock"}
    copy = project.hankweave_dir / "mock-provider" / "script.json"
    assert copy.read_bytes() == script
    intent_file = project.hankweave_dir / "run-intent.json"
    intent = json.loads(intent_file.read_text())
    assert intent["model"] == MODEL
    assert intent["mockProvider"]["source"] == str(project.script)
    for path in (intent_file, copy):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_leaving_the_mock_provider_without_the_real_key_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    project, _ = dry_run(tmp_path)
    assert project.answer(pending(project)["id"], "blue").code == 0
    before = (project.hankweave_dir / "run-intent.json").read_bytes()

    left = project.hankweave("run", "-e", str(project.exec_dir), "--headless",
                             "--no-mock-provider")

    # No key for the real provider of the recorded model: the preflight refuses the run before
    # anything starts, names the key, and the recorded intent is left as it was.
    assert left.code == 2, left.stderr
    assert "GEMINI_API_KEY" in left.stderr
    assert len(project.model_requests()) == 1  # nothing more reached the mock
    assert (project.hankweave_dir / "run-intent.json").read_bytes() == before


def test_the_printed_answer_hint_with_an_option_is_accepted(tmp_path: Path) -> None:
    project, first = dry_run(tmp_path)
    item = pending(project)
    answer = hint(first.stderr, "hankweave answer ")
    assert answer[:5] == ["hankweave", "answer", "-e", str(project.exec_dir), item["id"]]
    assert answer[5] in item["options"]

    answered = paste(project, [*answer[:5], "blue"], tmp_path)

    assert answered.code == 0, answered.stderr
    (done,) = project.state()["interruptions"]
    assert (done["status"], done["answer"]) == ("answered", "blue")
    resumed = paste(project, hint(answered.stdout, "Resume with:"), tmp_path)
    assert resumed.code == 0, resumed.stderr
    assert [r.model for r in project.model_requests()] == [MODEL, MODEL]
