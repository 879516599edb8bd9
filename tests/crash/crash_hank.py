"""The crash suite's hank, the processes that run it, and the checks made after every kill.

The hank has ten codon executions: a codon with rig setup (a copy and a shell command), one
that writes a report, one that copies it out (``outputFiles``), a loop of two codons run three
times, and a last codon that deletes a file.  Every agent is a FakeHarness script with paced
messages and file writes, so a run takes about two seconds and its work tree is known.  Each
run is a real ``hankweave run`` process, killed at a moment the test chooses
(``HANKWEAVE_TEST_KILL_AT``, docs/crash-testing.md) or by a SIGKILL from outside.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from hankweave.events.journal import JournalReadReport, read_journal
from hankweave.faults import DISK_FAULT_ENV, KILL_AT_ENV, TRACE_ENV
from hankweave.registry import get_registry
from hankweave.state.store import load_state
from hankweave.state.types import HankweaveState, referenced_checkpoint_ids
from hankweave.workspace import DATA_LINK

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ("git", "snapshot")
RUN_TIMEOUT_S = 60


def _codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
            "continuationMode": "fresh", "promptText": f"Do {codon_id}.",
            "checkpointedFiles": ["**"], "onFailure": "retry", **fields}


HANK: list[dict[str, Any]] = [
    _codon("rig", rigSetup=[
        {"type": "copy", "copy": {"from": "templates", "to": "src"}},
        # Prints first, so the rig.command point is reached while the command still runs.
        {"type": "command", "command": {"run": "echo rigging; sleep 0.2; cat src/seed.txt"
                                               " > rig.txt"}}]),
    # Watched by a sentinel (no LLM: the test plugin's tally kind), so kills also land while
    # it records its findings and costs.
    _codon("write", sentinels=[{"sentinelConfig": {
        "id": "tally", "name": "Tally", "kind": "tally",
        "trigger": {"type": "event", "on": ["assistant.action"]},
        "execution": {"strategy": "immediate"}}}]),
    _codon("publish", outputFiles=[{"copy": ["report/**"]}]),
    {"type": "loop", "id": "polish", "name": "Polish",
     "terminateOn": {"type": "iterationLimit", "limit": 3},
     "codons": [_codon("draft"), _codon("review")]},
    _codon("final"),
]
"""Ten codon executions: rig, write, publish, draft#0..2 and review#0..2, final."""


def _attempt(messages: int, files: dict[str, str], **more: Any) -> dict[str, Any]:
    return {"messages": messages, "delayMs": 20, "writeFiles": files, **more}


SCRIPT: dict[str, Any] = {
    "rig": _attempt(3, {"notes/rig.md": "rig notes\n"}),
    "write": _attempt(4, {"report/a.md": "A\n", "report/b.md": "B\n", "report/c.md": "C\n"}),
    "publish": _attempt(2, {"report/summary.md": "summary\n"}),
    # Each iteration rewrites the same files, so a rollback has files to write back.
    **{f"draft#{i}": _attempt(2, {"draft.md": f"draft {i}\n"}) for i in range(3)},
    **{f"review#{i}": _attempt(3, {"review.md": f"review {i}\n", "report/b.md": f"B{i}\n"})
       for i in range(3)},
    "final": _attempt(2, {"final.md": "final\n"}, deleteFiles=["draft.md"]),
}

CODON_IDS = ("rig", "write", "publish", *(f"{c}#{i}" for i in range(3) for c in ("draft",
             "review")), "final")


@dataclass
class Ending:
    """How one ``hankweave run`` process ended."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    reached: Counter[str] = field(default_factory=Counter)
    """The kill points the process reached, and how often."""

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def killed_at(self, spec: str) -> bool:
        """Whether the kill point ``spec`` (``point`` or ``point@N``) killed the process."""
        point, _, count = spec.partition("@")
        return self.killed and f"kill point {point}@{count or 1} reached" in self.stderr


@dataclass
class KillTally:
    """Every kill the suite made, for its closing summary (and the CI floor)."""

    at_points: int = 0
    at_random_moments: int = 0
    runs: int = 0
    began: float | None = None
    ended: float = 0.0

    @property
    def total(self) -> int:
        return self.at_points + self.at_random_moments

    @property
    def seconds(self) -> float:
        """From the suite's first run to its last."""
        return self.ended - self.began if self.began is not None else 0.0

    def count(self, ending: Ending, *, chosen_point: bool) -> None:
        self.runs += 1
        self.ended = time.monotonic()
        if self.began is None:
            self.began = self.ended - ending.seconds
        if ending.killed:
            if chosen_point:
                self.at_points += 1
            else:
                self.at_random_moments += 1


TALLY = KillTally()


@dataclass
class Progress:
    """What an execution had recorded when its last process ended."""

    completed: dict[str, int] = field(default_factory=dict)
    """Each completed codon id and how many records of it exist (in every run)."""
    attempts: dict[str, int] = field(default_factory=dict)
    """How many times the fake agent was started for each codon id (FakeHarness's count)."""
    had_state: bool = False


class CrashProject:
    """A hank, its data, an execution directory and an output directory under ``root``."""

    def __init__(self, root: Path, backend: str) -> None:
        self.root = root
        self.backend = backend
        self.hank_dir = root / "hank"
        self.data = root / "data"
        self.exec_dir = root / "exec"
        self.out_dir = root / "out"
        self.script = root / "script.json"
        (self.hank_dir / "templates").mkdir(parents=True)
        (self.hank_dir / "templates" / "seed.txt").write_text("seeded\n")
        (self.hank_dir / "hank.json").write_text(json.dumps({"hank": HANK}, indent=2))
        self.data.mkdir()
        (self.data / "input.txt").write_text("some input\n")
        self.script.write_text(json.dumps({"codons": SCRIPT}))
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith("HANKWEAVE_") and key != "CI"}
        self.env.update({
            "HANKWEAVE_HOME": str(root / "home"),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness,"
                                        "tests.sentinel_test_plugins",
            "HANKWEAVE_FAKE_SCRIPT": str(self.script),
            "HANKWEAVE_STRICT_PLUGINS": "1",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": backend,
            "HANKWEAVE_LOAD_PLUGINS": f"checkpoint-{backend}",  # no harness plugin to import
            # The sentinel's test plugin lives in this repository's tests package.
            "PYTHONPATH": os.pathsep.join(
                part for part in (str(REPO), os.environ.get("PYTHONPATH", "")) if part),
        })

    @property
    def hankweave_dir(self) -> Path:
        return self.exec_dir / ".hankweave"

    @property
    def agent_root(self) -> Path:
        return self.exec_dir / "agentRoot"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "hankweave", "run", str(self.hank_dir), str(self.data),
                "-e", str(self.exec_dir), "-o", str(self.out_dir), "--headless"]

    def start(self, *, kill_at: str | None = None, disk_fault: str | None = None,
              prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
        """Start ``hankweave run`` (behind the ``prefix`` command, if any)."""
        env = dict(self.env)
        env[TRACE_ENV] = str(self._trace())
        if kill_at is not None:
            env[KILL_AT_ENV] = kill_at
        if disk_fault is not None:
            env[DISK_FAULT_ENV] = disk_fault
        return subprocess.Popen([*prefix, *self.command()], cwd=self.root, env=env, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

    def _trace(self) -> Path:
        return self.root / f"trace-{TALLY.runs}.txt"

    def run(self, *, kill_at: str | None = None, kill_after: float | None = None,
            disk_fault: str | None = None) -> Ending:
        """One ``hankweave run`` to its end: killed at the point ``kill_at`` names, by a
        SIGKILL ``kill_after`` seconds after it started, or finished by itself."""
        began = time.monotonic()
        child = self.start(kill_at=kill_at, disk_fault=disk_fault)
        return self.wait(child, began, kill_after=kill_after, chosen_point=kill_at is not None)

    def wait(self, child: subprocess.Popen[str], began: float, *,
             kill_after: float | None = None, chosen_point: bool = False) -> Ending:
        """Wait for a started run (SIGKILL it after ``kill_after`` seconds) and count it."""
        trace = self._trace()
        try:
            stdout, stderr = child.communicate(timeout=kill_after)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            stdout, stderr = child.communicate(timeout=RUN_TIMEOUT_S)
        except BaseException:
            child.kill()
            child.wait()
            raise
        ending = Ending(child.returncode, stdout, stderr, time.monotonic() - began,
                        Counter(trace.read_text().split()) if trace.exists() else Counter())
        trace.unlink(missing_ok=True)
        TALLY.count(ending, chosen_point=chosen_point)
        return ending

    def run_to_completion(self) -> Ending:
        ending = self.run(kill_after=RUN_TIMEOUT_S)
        assert ending.returncode == 0, (
            f"the resumed run did not finish (exit {ending.returncode}):\n{ending.stderr}")
        return ending

    # ----- what it left -----

    def state(self) -> HankweaveState:
        return load_state(self.hankweave_dir)[0]

    def attempts(self) -> dict[str, int]:
        counter = self.script.with_name(self.script.name + ".attempts.json")
        return json.loads(counter.read_text()) if counter.exists() else {}

    def checkpoint_ids(self) -> set[str]:
        store = get_registry().checkpoint_backend(self.backend)(self.exec_dir)
        listed = store.list_read_only()
        assert listed is not None, f"the {self.backend} backend cannot list read-only"
        return {checkpoint.id for checkpoint in listed}

    def result_trees(self) -> dict[str, dict[str, str]]:
        """The agent's work tree and the output directory, by relative path (hankweave's own
        link to the data directory left out)."""
        return {"agentRoot": tree(self.agent_root, skip={DATA_LINK}),
                "outputs": tree(self.out_dir)}


def tree(root: Path, skip: frozenset[str] | set[str] = frozenset()) -> dict[str, str]:
    """``{relative path: content}`` of every file and symlink below ``root``."""
    found: dict[str, str] = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative.split("/")[0] in skip:
            continue
        if path.is_symlink():
            found[relative] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[relative] = path.read_text()
    return found


# ----- the invariants -----


def check_after_kill(project: CrashProject, before: Progress) -> Progress:
    """What must hold whenever a process of the execution has ended, killed or not.

    The state loads without losing anything; every codon completed before is still completed,
    with no new record and no new agent start (it never ran again); every checkpoint the state
    refers to exists in the backend; the journal parses, with strictly increasing ``seq``.
    """
    state, report = load_state(project.hankweave_dir)
    if before.had_state:
        assert report.method == "primary", (report.method, report.warnings)
    assert report.method in ("primary", "new") and not report.data_loss, report.warnings
    errors = [issue.message for issue in report.issues if issue.severity == "error"]
    assert errors == []

    records = Counter(codon.codon_id for run in state.runs for codon in run.codons)
    completed = {codon.codon_id for run in state.runs for codon in run.codons
                 if codon.status == "completed"}
    attempts = project.attempts()
    for codon_id, count in before.completed.items():
        assert codon_id in completed, f"{codon_id} was completed before the kill, not now"
        assert records[codon_id] == count, f"{codon_id} got a new record: it ran again"
        assert attempts.get(codon_id) == before.attempts.get(codon_id), (
            f"{codon_id}'s agent was started again after it completed")

    if project.hankweave_dir.exists():
        missing = referenced_checkpoint_ids(state) - project.checkpoint_ids()
        assert not missing, f"state refers to checkpoints the store lacks: {sorted(missing)}"
        check_journal(project.hankweave_dir / "events" / "events.jsonl")
    return Progress({codon_id: records[codon_id] for codon_id in completed}, attempts,
                    had_state=bool(state.runs))


def check_journal(path: Path) -> None:
    """The journal parses (a torn last line tolerated) and its ``seq`` strictly increases."""
    if not path.exists():
        return
    report = JournalReadReport(path)
    seqs = [event.seq for event in read_journal(path, report=report)]
    assert report.clean, [str(line) for line in report.corrupt_lines]
    assert all(isinstance(seq, int) for seq in seqs)
    assert all(a < b for a, b in pairwise(seqs)), "seq does not increase"


def check_finished(project: CrashProject, reference: dict[str, dict[str, str]]) -> None:
    """The execution is done: every codon completed exactly once, and the work tree and the
    outputs are those of an uninterrupted run."""
    state = project.state()
    for codon_id in CODON_IDS:
        done = [codon for run in state.runs for codon in run.codons
                if codon.codon_id == codon_id and codon.status == "completed"]
        assert len(done) == 1, f"{codon_id} completed {len(done)} times"
    trees = project.result_trees()
    for name, expected in reference.items():
        differ = sorted(path for path in expected.keys() | trees[name].keys()
                        if expected.get(path) != trees[name].get(path))
        assert not differ, (f"{name} differs from an uninterrupted run's: "
                            + ", ".join(f"{path}: {trees[name].get(path)!r} instead of"
                                        f" {expected.get(path)!r}" for path in differ))
