"""``hankweave attach`` fits the terminal and ends as a person expects.

Its frame, rendered from the journal of a real run (the fake harness) at 80x24 and 120x40,
is compared as a text snapshot (tests/snapshots/): during the run and after it.  In a real
terminal (tmux, 80x24), ``q`` detaches with exit 0, and attach exits by itself with the run's
summary when the run ends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hankweave.cli.attach_cmd import AttachView, render_attach
from hankweave.cli.run_summary import summarize_run, summary_text
from hankweave.testing.fake_harness import use_script
from hankweave.testing.project import TEST_PLUGINS
from tests.runtime_harness import Project, codon
from tests.snapshot import assert_snapshot, normalized

SIZES = ((80, 24), (120, 40))
CODONS = ["survey", "extract-tables", "extract-figures", "cross-check", "draft-summary",
          "review-draft", "fix-citations", "polish", "final-read", "publish"]
TEXT = ("Reading the quarterly figures and noting which of the three files each number"
        " comes from, so the report can cite its sources.")


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    project = Project(tmp_path_factory.mktemp("attach") / "project")
    project.write_hank([codon(c) for c in CODONS], overrides={"budget": {"maxDollars": 1}})
    try:
        project.run({c: {"messages": 4, "text": TEXT, "writeFiles": {f"{c}.md": "done"}}
                     for c in CODONS})
    finally:
        use_script(None)
    return project.exec_dir, project.journal()


def watched(events: list[dict[str, Any]], exec_dir: Path) -> AttachView:
    view = AttachView()
    view.handle({"type": "handshake.response", "data": {"mode": "readonly"}})
    # A fixed path: the frame's title is centred, so its length would move the border.
    view.handle({"type": "server.ready", "data": {"executionPath": "/work/exec"}})
    view.handle({"type": "history.batch", "data": {"events": events, "hasMore": False}})
    view.url = "ws://127.0.0.1:40000"
    return view


def frame(view: AttachView, width: int, height: int, at: str) -> str:
    console = Console(width=width, height=height, record=True, color_system=None)
    now = datetime.fromisoformat(at.replace("Z", "+00:00"))
    console.print(render_attach(view, height=height, now=now))
    return console.export_text()


def midway(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The journal up to the second message of the sixth codon."""
    started = next(i for i, e in enumerate(events) if e["type"] == "codon.started"
                   and e["data"]["codonId"] == CODONS[5])
    messages = [i for i, e in enumerate(events) if i > started
                and e["type"] == "assistant.action"]
    return events[:messages[1] + 1]


@pytest.mark.parametrize(("width", "height"), SIZES)
@pytest.mark.parametrize("moment", ["during", "after"])
def test_the_frame_fits_the_terminal(journal, moment: str, width: int, height: int) -> None:
    exec_dir, events = journal
    shown = midway(events) if moment == "during" else events
    text = frame(watched(shown, exec_dir), width, height, shown[-1]["timestamp"])

    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= height, text
    assert lines[0].startswith("╭") and lines[-1].startswith("╰"), text  # whole, not cut
    assert "q detach" in lines[-1]
    assert_snapshot(f"attach-{moment}-{width}x{height}", normalized(text))


def test_a_short_terminal_keeps_the_running_codon_in_the_plan(journal) -> None:
    exec_dir, events = journal
    shown = midway(events)
    text = frame(watched(shown, exec_dir), 80, 24, shown[-1]["timestamp"])

    assert f"▶  {CODONS[5]}" in text
    assert f"✔  {CODONS[4]}" in text  # the one before it, for context
    assert "4 more above" in text


def test_the_summary_of_the_finished_run(journal) -> None:
    exec_dir, events = journal
    view = watched(events, exec_dir)
    console = Console(width=80, record=True, color_system=None)
    console.print(summary_text(summarize_run(view.state), "/work/exec"))

    assert_snapshot("attach-summary", normalized(console.export_text()))


# ----- in a terminal -----

tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
SLOW = {"messages": 8, "delayMs": 400, "text": TEXT}


def start_run(tmp_path: Path, script: dict[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
    """``hankweave run`` as a subprocess with the fake harness; returns once its runtime
    serves (its runtime.lock names a port)."""
    hank = tmp_path / "hank"
    hank.mkdir()
    (hank / "hank.json").write_text(json.dumps({"hank": [codon(c) for c in CODONS[:3]]}))
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("figures\n")
    (tmp_path / "script.json").write_text(json.dumps({"codons": {}, "default": script}))
    exec_dir = tmp_path / "exec"
    # The fake agent and the in-memory checkpoints, loaded by module: the kernel's tox env
    # has no sibling package (no git backend).
    env = {**os.environ, "HANKWEAVE_PLUGIN_MODULES": ",".join(TEST_PLUGINS),
           "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
           "HANKWEAVE_FAKE_SCRIPT": str(tmp_path / "script.json"),
           "HANKWEAVE_HOME": str(tmp_path / "home")}
    run = subprocess.Popen([sys.executable, "-m", "hankweave", "run", str(hank), str(data),
                            "-e", str(exec_dir), "--headless"], env=env, cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = exec_dir / ".hankweave" / "runtime.lock"
    deadline = time.monotonic() + 60
    while not isinstance(_lock_port(lock), int):  # the lock says "port": null until it serves
        assert run.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.1)
    return run, exec_dir


def _lock_port(lock: Path) -> object:
    try:
        return json.loads(lock.read_text()).get("port")
    except (OSError, ValueError):
        return None  # not written yet, or written as we read it


class Pane:
    """``hankweave attach`` in a detached tmux session of 80x24."""

    def __init__(self, tmp_path: Path, exec_dir: Path) -> None:
        self.name = f"hw-attach-{os.getpid()}-{tmp_path.name}"[:60]
        self.done = tmp_path / "attach.exit"
        command = (f"{sys.executable} -m hankweave attach -e {exec_dir};"
                   f" echo $? > {self.done}; sleep 30")
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "80", "-y", "24",
                        "env", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}", "sh", "-c",
                        command], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], check=True,
                              capture_output=True, text=True).stdout

    def words(self) -> str:
        """The screen's text with line breaks as spaces (long commands wrap at 80)."""
        return " ".join(self.screen().split())

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while text not in (shown := self.screen()):
            assert time.monotonic() < deadline, f"{text!r} never shown:\n{shown}"
            time.sleep(0.2)
        return shown

    def exit_code(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while not self.done.exists() or not self.done.read_text().strip():
            assert time.monotonic() < deadline, f"attach did not exit:\n{self.screen()}"
            time.sleep(0.1)
        return int(self.done.read_text())

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@tmux
def test_q_detaches_and_the_run_goes_on(tmp_path: Path) -> None:
    # About 24 s of run: still going when attach has exited, even if a loaded machine (CI runs
    # two tox envs at once) makes that slow.
    run, exec_dir = start_run(tmp_path, {**SLOW, "messages": 20})
    pane = Pane(tmp_path, exec_dir)
    try:
        pane.wait_for("(running)")
        subprocess.run(["tmux", "send-keys", "-t", pane.name, "q"], check=True)

        assert pane.exit_code() == 0
        shown = pane.words()
        assert "Detached; the run goes on." in shown
        assert f"hankweave attach -e {exec_dir}" in shown
        assert run.poll() is None  # the run goes on
        assert run.wait(timeout=120) == 0
    finally:
        pane.close()
        if run.poll() is None:
            run.kill()


@tmux
def test_attach_exits_with_the_summary_when_the_run_ends(tmp_path: Path) -> None:
    run, exec_dir = start_run(tmp_path, {**SLOW, "messages": 3})
    pane = Pane(tmp_path, exec_dir)
    try:
        pane.wait_for("q detach")
        assert run.wait(timeout=60) == 0

        assert pane.exit_code() == 0
        shown = pane.words()
        assert "Completed" in shown
        assert "codons 3 done (of 3 planned)" in shown
        assert f"hankweave inspect state -e {exec_dir}" in shown
        assert "╭" not in shown  # the live frame gave way to the summary
    finally:
        pane.close()
        if run.poll() is None:
            run.kill()
