"""SIGKILL at random moments: every transition whose await returned survives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hankweave.state.reducer import apply_transition
from hankweave.state.store import load_state
from hankweave.state.types import HankweaveState
from tests.kill_writer import transition_at

KILLS = 30
WRITER = Path(__file__).with_name("kill_writer.py")


def run_until_killed(hw: Path, start: int, rng: random.Random, mode: str) -> int | None:
    """Start the writer at ``start``, SIGKILL it at a random moment, return its last ack."""
    extra = ["background"] if mode == "background" else []
    child = subprocess.Popen([sys.executable, str(WRITER), str(hw), str(start), *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    acks: list[int] = []
    first_ack = threading.Event()

    def read() -> None:
        for line in child.stdout:
            acks.append(int(line))
            first_ack.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first_ack.wait(30), child.stderr.read().decode()
    time.sleep(rng.uniform(0.0, 0.25 if mode == "inline" else 0.6))
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    reader.join(10)
    return acks[-1] if acks else None


@pytest.mark.parametrize("mode", ["inline", "background"])
def test_every_awaited_transition_survives_sigkill(tmp_path, mode):
    """``background``: the kills land before, during and after background folds (whose
    processes may outlive the writer: the next writer waits for them), each exactly once."""
    hw = tmp_path / ".hankweave"
    hw.mkdir()
    rng = random.Random(20261129)
    expected = HankweaveState()
    applied = 0  # transitions of the sequence known to be on disk
    total_acked = 0
    during_folds = 0
    for _ in range(KILLS):
        last_ack = run_until_killed(hw, applied, rng, mode)
        during_folds += (hw / "state.wal.folding").exists()  # a fold was under way
        assert last_ack is not None
        total_acked += last_ack + 1 - applied
        while applied <= last_ack:
            expected = apply_transition(expected, transition_at(applied))
            applied += 1
        loaded, report = load_state(hw)
        if loaded != expected:
            # The transition in flight at the kill may have reached the log unacknowledged.
            expected = apply_transition(expected, transition_at(applied))
            applied += 1
        assert loaded == expected, report.warnings
        assert not [i for i in report.issues if i.severity == "error"]
    assert total_acked > KILLS * 5
    if mode == "background":
        # Folds in other processes happened, and many kills landed while one was under way.
        assert (hw / "state.fold").exists() and during_folds >= KILLS // 4
