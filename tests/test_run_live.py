"""The live view of ``hankweave run`` and its final summary (issue 37, item 3).

The view shows the plan (done, running, pending, loop iterations), the running codon's latest
action, rig output, sentinel findings and budget use, within 80x24; the run ends with a
summary (status, codons, cost, tokens, time, budget, outputs, next commands).  Frames and
summaries are rendered from the events and state of real runs (the fake harness) with rich's
recording console and compared as text snapshots (tests/snapshots/; rewrite them with
``HANKWEAVE_UPDATE_SNAPSHOTS=1``).  The keys drive a real ``hankweave run`` in tmux at 80x24.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hankweave.cli.progress import LiveView
from hankweave.cli.run_keys import FOOTER, KeyReader
from hankweave.cli.run_summary import summarize_run, summary_lines, summary_text
from hankweave.exitcodes import EXIT_INTERRUPTED
from hankweave.state.types import HankweaveState
from hankweave.testing.fake_harness import use_script
from hankweave.testing.project import TEST_PLUGINS
from tests.runtime_harness import Outcome, Project, codon, loop, wait_for_status
from tests.snapshot import assert_snapshot, normalized

PLUGINS = ",".join((*TEST_PLUGINS, "tests.sentinel_test_plugins"))
TALLY = {"sentinelConfig": {"id": "tally", "name": "Tally", "kind": "tally",
                            "trigger": {"type": "every-nth", "n": 4, "of": "state.transition"},
                            "execution": {"strategy": "immediate"}}}
RIG = [{"type": "command", "command": {"run": "echo fetching sources; sleep 1.2;"
                                              " echo rig ready"}}]
"""Two lines a second apart: the rig sends at most a line a second per stream."""


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    project.env["HANKWEAVE_PLUGIN_MODULES"] = PLUGINS
    yield project
    use_script(None)


def full_run(project: Project) -> tuple[Outcome, HankweaveState]:
    """A run with rig output, a sentinel, a loop and budgets; and the state it started from."""
    project.write_hank([
        codon("survey", rigSetup=RIG, sentinels=[TALLY]),
        codon("draft"),
        loop("polish", [codon("proofread")], {"type": "iterationLimit", "limit": 2}),
        codon("publish")])
    starts: list[HankweaveState] = []
    outcome = project.run(
        {"survey": {"messages": 3, "tools": [{"name": "Write"}], "cost": 0.01}},
        max_cost=0.5, max_time=600, on_start=lambda state, _: starts.append(state))
    assert outcome.code == 0
    return outcome, starts[0]


def recording(width: int, height: int = 24) -> Console:
    return Console(record=True, file=io.StringIO(), width=width, height=height,
                   force_terminal=False)


def frame(outcome: Outcome, start: HankweaveState, until: int, width: int,
          *, footer: bool = True) -> str:
    """The live panel after the first ``until`` events, as a terminal ``width`` wide shows it."""
    console = recording(width)
    view = LiveView(console)
    view.seed(start)
    if footer:
        view.footer = FOOTER
    for event in outcome.events[:until]:
        view.tracker.update(event)
    console.print(view.panel())
    return console.export_text()


def masked(text: str, project: Project) -> str:
    text = re.sub(r"elapsed \d+s", lambda m: "elapsed " + "n" * (len(m.group(0)) - 9) + "s",
                  text)
    text = re.sub(r"\d+s of 600s", lambda m: "n" * (len(m.group(0)) - 8) + "s of 600s", text)
    return normalized(text, str(project.exec_dir))


def survey_finishing(outcome: Outcome) -> int:
    """The index of the event that ends survey's work (its agent and sentinel have reported)."""
    return next(i for i, e in enumerate(outcome.events) if e["type"] == "state.transition"
                and e["data"]["transitionType"] == "CodonTransitioned"
                and e["data"]["transition"]["data"]["codonId"] == "survey"
                and e["data"]["transition"]["data"]["to"] in ("completing-sentinels",
                                                               "completed"))


@pytest.mark.parametrize("width", [80, 120])
def test_the_live_view_shows_plan_action_rig_findings_and_budget(project, width):
    outcome, start = full_run(project)

    shown = frame(outcome, start, survey_finishing(outcome), width)

    lines = shown.splitlines()
    assert lines[0].startswith("plan  ▶ survey  · draft  · proofread#0"), shown
    assert lines[1].startswith("▶ survey  running"), shown
    assert lines[2] == "  tool: Write"
    assert [line for line in lines if line.startswith("rig ")] == [
        "rig       survey stdout: fetching sources", "rig       survey stdout: rig ready"]
    assert any(line.startswith("sentinel  tally: ") for line in lines), shown
    assert any(line.startswith("budget    $0.") and " of $0.5000" in line for line in lines)
    assert lines[-1] == FOOTER
    assert len(lines) <= 24 and all(len(line) <= width for line in lines)
    assert_snapshot(f"run-live-{width}", masked(shown, project))


def test_a_long_plan_folds_into_counts_at_80_columns(project):
    project.write_hank([codon(f"step-{n:02d}") for n in range(14)])
    starts: list[HankweaveState] = []
    outcome = project.run({"step-05": {"messages": 2}}, on_start=lambda s, _: starts.append(s))
    at = next(i for i, e in enumerate(outcome.events) if e["type"] == "codon.started"
              and e["data"]["codonId"] == "step-05")

    narrow = frame(outcome, starts[0], at + 1, 80).splitlines()
    wide = frame(outcome, starts[0], at + 1, 200).splitlines()

    assert narrow[0] == "plan  5 done, ▶ step-05, 8 pending of 14"
    assert wide[0].startswith("plan  ✔ step-00  ✔ step-01") and "▶ step-05  · step-06" in wide[0]


def test_a_resumed_run_shows_what_earlier_runs_finished(project):
    project.write_hank([codon("a"), codon("b"), codon("c")])
    project.run({"b": {"result": "error", "errorText": "API Error: 500 internal"}})
    starts: list[HankweaveState] = []
    resumed = project.run({"b": {"messages": 1}}, on_start=lambda s, _: starts.append(s))
    at = next(i for i, e in enumerate(resumed.events) if e["type"] == "codon.started")

    first = frame(resumed, starts[0], at + 1, 80).splitlines()[0]

    assert first == "plan  ✔ a  ▶ b  · c", first


@pytest.mark.parametrize("width", [80, 120])
def test_the_summary_of_a_finished_run(project, width):
    outcome, _ = full_run(project)
    summary = summarize_run(outcome.state, events=outcome.events, exit_code=outcome.code)
    console = recording(width, 40)

    console.print(summary_text(summary, project.exec_dir, files=True), soft_wrap=True)

    shown = console.export_text()
    assert shown.startswith("Completed\n  codons    5 done (of 5 planned)\n"), shown
    assert "  dollars" in shown and "$0.5000" in shown and "600.0s" in shown.replace("10m00s",
                                                                                     "600.0s")
    assert f"hankweave export -e {project.exec_dir}" in shown
    assert_snapshot(f"run-summary-{width}", masked(shown, project))


def test_the_summary_of_a_failure_says_where_and_why(project):
    project.write_hank([codon("survey"), codon("draft")])
    outcome = project.run({"survey": {"result": "error",
                                      "errorText": "API Error: 500 internal"}})

    lines = [line for line, _ in summary_lines(summarize_run(outcome.state), project.exec_dir)]

    assert lines[0].startswith("Failed at survey: "), lines
    assert "  codons    0 done, 1 failed, 1 pending (of 2 planned)" in lines
    assert f"  hankweave run -e {project.exec_dir}    # resume" in lines


def test_the_summary_of_a_run_waiting_for_a_person_gives_the_answer_command(project):
    project.write_hank([codon("survey")])
    outcome = project.run({"survey": {"askHuman": "Which format?"}})
    assert outcome.code == EXIT_INTERRUPTED

    lines = [line for line, _ in summary_lines(summarize_run(outcome.state), project.exec_dir)]

    (item,) = outcome.state.interruptions
    assert lines[0] == "Waiting for a person"
    assert f"  waiting   {item.id}  survey: Which format?" in lines
    assert f"  hankweave answer -e {project.exec_dir} {item.id} '<your answer>'" in lines
    assert f"  hankweave run -e {project.exec_dir}    # resume" in lines


def test_the_summary_of_a_stopped_run(project):
    project.write_hank([codon("survey"), codon("draft")])

    async def ctrl_c(runtime):
        await wait_for_status(runtime, "survey", "running")
        runtime.commands.request_shutdown("SIGINT")

    outcome = project.run_controlled(ctrl_c, {"survey": {"hang": True}})
    summary = summarize_run(outcome.state, exit_code=outcome.code)

    assert summary.headline == "Stopped by Ctrl-C (SIGINT) at survey", summary
    assert summary.failure is None


def test_headless_runs_end_with_the_summary_as_plain_lines(project, tmp_path):
    project.write_hank([codon("survey")])
    env = cli_env(project, tmp_path, {})

    done = subprocess.run([sys.executable, "-m", "hankweave", "run", str(project.hank_dir),
                           str(project.data), "-e", str(project.exec_dir), "--headless"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)

    assert done.returncode == 0, done.stderr
    tail = done.stderr[done.stderr.index("\nCompleted\n"):]
    assert "  codons    1 done (of 1 planned)\n" in tail
    assert f"Execution directory: {project.exec_dir}\n" in tail
    assert f"  hankweave inspect thread -e {project.exec_dir}\n" in tail
    assert "\x1b[" not in tail  # plain lines


def cli_env(project: Project, tmp_path: Path, script: dict[str, Any]) -> dict[str, str]:
    """The environment of ``python -m hankweave`` with the fake agent playing ``script`` and
    the in-memory checkpoints, loaded by module (the kernel's tox env has no git backend)."""
    (tmp_path / "script.json").write_text(json.dumps({"codons": script}))
    return {**project.env, "HANKWEAVE_PLUGIN_MODULES": ",".join(TEST_PLUGINS),
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
            "HANKWEAVE_FAKE_SCRIPT": str(tmp_path / "script.json"),
            "PYTHONPATH": os.environ.get("PYTHONPATH", "")}


def test_keys_are_not_read_when_stdin_is_not_a_terminal():
    read, write = os.pipe()
    with os.fdopen(read) as stream, os.fdopen(write, "w") as writer:
        writer.write("s")
        writer.flush()
        pressed: list[str] = []
        with KeyReader(stream, pressed.append) as reader:
            time.sleep(0.3)
            assert not reader.active
        assert pressed == []


# ----- the keys, in a terminal -----

tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


class Terminal:
    """``hankweave run`` in a detached tmux session of 80x24; ``stty -a`` before and after."""

    def __init__(self, project: Project, tmp_path: Path, script: dict[str, Any]) -> None:
        self.project = project
        self.name = f"hw-live-{os.getpid()}-{tmp_path.name}"[:60]
        self.done = tmp_path / "run.exit"
        self.stty = (tmp_path / "stty.before", tmp_path / "stty.after")
        env = cli_env(project, tmp_path, script)
        # The shell survives a Ctrl-C sent to the pane (a trap, unlike an ignored signal, is
        # not inherited: the run gets the SIGINT as usual) to write the exit code and stty.
        command = (f"trap true INT; stty -a > {self.stty[0]}; {sys.executable} -m hankweave run"
                   f" {project.hank_dir} {project.data} -e {project.exec_dir};"
                   f" echo $? > {self.done}; stty -a > {self.stty[1]}; sleep 60")
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "80", "-y", "24",
                        "env", *[f"{k}={v}" for k, v in env.items()], "sh", "-c", command],
                       check=True, cwd=tmp_path)

    def screen(self) -> str:
        """The pane and what scrolled off it."""
        return subprocess.run(["tmux", "capture-pane", "-p", "-S", "-200", "-t", self.name],
                              check=True, capture_output=True, text=True).stdout

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while text not in (shown := self.screen()):
            assert time.monotonic() < deadline, f"{text!r} never shown:\n{shown}"
            time.sleep(0.2)
        return shown

    def press(self, key: str, then: str) -> str:
        subprocess.run(["tmux", "send-keys", "-t", self.name, "-l", key], check=True)
        return self.wait_for(then)

    def exit_code(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while not self.done.exists() or not self.done.read_text().strip():
            assert time.monotonic() < deadline, f"the run did not end:\n{self.screen()}"
            time.sleep(0.2)
        return int(self.done.read_text())

    def mode_restored(self) -> bool:
        deadline = time.monotonic() + 60
        while not self.stty[1].exists() or not self.stty[1].read_text():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        return self.stty[0].read_text() == self.stty[1].read_text()

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def records(project: Project) -> list[tuple[str, str]]:
    """(codon, status) of every record, oldest run first."""
    return [(c.codon_id, c.status) for run in reversed(project.state().runs) for c in run.codons]


@tmux
def test_the_keys_skip_force_stop_and_roll_back_a_real_run(project, tmp_path):
    tracked = {"checkpointedFiles": ["**/*.md"]}
    rig = [{"type": "command", "command": {"run": "echo ready"}}]
    project.write_hank([codon("survey", rigSetup=rig, **tracked), codon("slow", **tracked),
                        codon("stuck", **tracked), codon("publish", **tracked)])
    term = Terminal(project, tmp_path, {"survey": {"writeFiles": {"survey.md": "surveyed"}},
                                        "slow": {"hang": True}, "stuck": {"hang": True}})
    try:
        term.wait_for("▶ slow  running")
        assert FOOTER in term.screen()
        term.press("s", "▶ stuck  running")
        assert ("slow", "skipped") in records(project)

        term.press("f", "waiting for a command")
        stuck = [c for run in project.state().runs for c in run.codons if c.codon_id == "stuck"]
        assert stuck[0].status == "failed"
        assert stuck[0].failure_reason.message.startswith("Force stopped")

        menu = term.press("r", "Roll back to which checkpoint?")
        (choice,) = re.findall(r"^  (\d)  survey  before it ran", menu, re.MULTILINE)
        assert (project.exec_dir / "agentRoot" / "survey.md").read_bytes() == b"surveyed"
        term.press(choice, "y/N")
        term.press("y", "r: Rolled back to survey")

        assert not (project.exec_dir / "agentRoot" / "survey.md").exists()
        newest = project.state().runs[0]
        assert newest.starting_conditions.reason == "rollback"
        term.press("q", "Next:")
        assert term.exit_code() == 130
        assert term.mode_restored()
    finally:
        term.close()


@tmux
def test_a_refused_key_says_why_and_ctrl_c_stops_the_run_with_the_terminal_restored(
        project, tmp_path):
    project.write_hank([codon("survey")])
    term = Terminal(project, tmp_path, {"survey": {"hang": True}})
    try:
        term.wait_for("▶ survey  running")
        term.press("n", "n: Codon already running")
        subprocess.run(["tmux", "send-keys", "-t", term.name, "C-c"], check=True)
        shown = term.wait_for("Next:")
        assert "Stopped by Ctrl-C (SIGINT) at survey" in shown
        assert term.exit_code() == 130
        assert term.mode_restored()
    finally:
        term.close()
