"""A ``kill -9`` while a run waits for a person (``--wait-for-answers``): the interruption it
acknowledged survives, ``hankweave answer`` records the answer, and the next run resumes the
interrupted codon with it, keeping the work done before the question (docs/human-in-the-loop.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from hankweave.exitcodes import EXIT_INTERRUPTED
from tests.crash.crash_hank import RUN_TIMEOUT_S, CrashProject

HANK = [
    {"id": "draft", "name": "Draft", "model": "fake", "continuationMode": "fresh",
     "promptText": "Draft it.", "askHuman": {"enabled": True}},
    {"id": "final", "name": "Final", "model": "fake", "continuationMode": "fresh",
     "promptText": "Finish it.", "approval": "before"},
]
SCRIPT = {"draft": {"messages": 2, "delayMs": 20, "writeFiles": {"draft.md": "v1\n"},
                    "askHuman": "Which title?"},
          "final": {"messages": 1, "writeFiles": {"final.md": "done\n"}}}


def prepare(project: CrashProject) -> None:
    (project.hank_dir / "hank.json").write_text(json.dumps({"hank": HANK}))
    project.script.write_text(json.dumps({"codons": SCRIPT}))


def hankweave(project: CrashProject, *args: str, wait: bool = True
              ) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    command = [sys.executable, "-m", "hankweave", *args]
    if not wait:
        return subprocess.Popen(command, cwd=project.root, env=project.env, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    return subprocess.run(command, cwd=project.root, env=project.env, text=True,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT_S,
                          check=False)


def run_args(project: CrashProject, *more: str) -> list[str]:
    return ["run", str(project.hank_dir), str(project.data), "-e", str(project.exec_dir),
            "--headless", *more]


def wait_for_pending(project: CrashProject, child: subprocess.Popen[str], kind: str) -> str:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        assert child.poll() is None, child.communicate()
        if (project.hankweave_dir / "state.json").exists() or \
                (project.hankweave_dir / "state.log").exists():
            found = [item.id for item in project.state().interruptions
                     if item.status == "pending" and item.kind == kind]
            if found:
                return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no pending {kind} interruption")


def kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=RUN_TIMEOUT_S)


def test_a_kill_while_waiting_loses_nothing_and_the_answer_resumes_the_run(backend, tmp_path):
    project = CrashProject(tmp_path, backend)
    prepare(project)
    child = hankweave(project, *run_args(project, "--wait-for-answers"), wait=False)
    assert isinstance(child, subprocess.Popen)
    question = wait_for_pending(project, child, "question")
    kill(child)

    state = project.state()
    assert state.interruption(question).status == "pending"
    assert (project.agent_root / "draft.md").read_text() == "v1\n"
    answered = hankweave(project, "answer", "-e", str(project.exec_dir), question, "Hello")
    assert answered.returncode == 0, answered.stderr

    # The resumed run reaches the next codon's gate and waits; `hankweave answer` sends the
    # approval to the running runtime, and the run goes on to the end.
    child = hankweave(project, *run_args(project, "--wait-for-answers"), wait=False)
    assert isinstance(child, subprocess.Popen)
    gate = wait_for_pending(project, child, "approval")
    sent = hankweave(project, "answer", "-e", str(project.exec_dir), gate, "--approve")
    assert sent.returncode == 0, sent.stderr
    assert "sent to the running runtime" in sent.stdout
    _, stderr = child.communicate(timeout=RUN_TIMEOUT_S)
    assert child.returncode == 0, stderr
    state = project.state()
    assert state.interruption(gate).answered_by.startswith("cli:")
    assert [item.status for item in state.interruptions] == ["answered", "answered"]
    assert (project.agent_root / "final.md").read_text() == "done\n"
    assert (project.agent_root / "draft.md").read_text() == "v1\n"
    draft = [record for run in reversed(state.runs) for record in run.codons
             if record.codon_id == "draft"]
    assert draft[-1].status == "completed"
    log = project.exec_dir / draft[-1].claude_log_path
    results = [block for line in log.read_text().splitlines()
               for block in (json.loads(line).get("message") or {}).get("content") or []
               if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results[-1]["content"] == "Hello"


def test_a_run_that_exits_interrupted_resumes_after_the_answer(backend, tmp_path):
    project = CrashProject(tmp_path, backend)
    prepare(project)
    first = hankweave(project, *run_args(project))
    assert first.returncode == EXIT_INTERRUPTED, first.stderr
    assert "hankweave answer" in first.stderr
    [question] = [item.id for item in project.state().interruptions]
    assert hankweave(project, "answer", "-e", str(project.exec_dir), question,
                     "Hello").returncode == 0
    second = hankweave(project, *run_args(project))
    assert second.returncode == EXIT_INTERRUPTED  # the gate of `final`
    gate = [item.id for item in project.state().interruptions if item.status == "pending"]
    assert hankweave(project, "answer", "-e", str(project.exec_dir), *gate,
                     "--reject").returncode == 0
    third = hankweave(project, *run_args(project))
    assert third.returncode == 0, third.stderr
    assert [(c.codon_id, c.status) for c in project.state().runs[0].codons] == [
        ("final", "skipped")]
    assert not (project.agent_root / "final.md").exists()
