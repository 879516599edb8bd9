"""A SIGTERM that lands before the run's event loop handles it stops the launch cleanly.

Each case runs in a child process (a SIGTERM that is not held would end it, not the test run):
the signal is sent at one step of the launch, and the child reports what it saw.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hankweave.state.store import load_state

CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, sys.argv[1])
from runtime_harness import Project, codon
from hankweave.app import launch as launch_module
from hankweave.app.stop_latch import StopLatch
from hankweave.state import boot

phase, root = sys.argv[2], Path(sys.argv[3])
project = Project(root)
project.write_hank([codon("a"), codon("b")])
notices = []

def terminate():
    os.kill(os.getpid(), signal.SIGTERM)

def after(function):
    def wrapped(*args, **kwargs):
        result = function(*args, **kwargs)
        terminate()
        return result
    return wrapped

async def owning(layout_dir, **options):
    owned = await real_take_ownership(layout_dir, **options)
    terminate()
    return owned

real_take_ownership = boot.take_ownership
request = project.request([], notices)
seen = {}
if phase == "prepare":
    with mock.patch.object(launch_module, "prepare", after(launch_module.prepare)):
        code = launch_module.launch(request)
elif phase == "ownership":
    with mock.patch.object(boot, "take_ownership", owning):
        code = launch_module.launch(request)
elif phase == "around":  # an executor's task: before and after its launch
    with StopLatch() as latch:
        code = launch_module.launch(request)
        terminate()
        seen["heldAfter"] = latch.pending
        seen["handlerAfter"] = signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    seen["restored"] = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
print(json.dumps({"code": code, "notices": notices, **seen}))
"""


def _launch_stopped_at(phase: str, tmp_path: Path) -> dict[str, object]:
    tests_dir = Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", CHILD, str(tests_dir), phase, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("phase", ["prepare", "ownership"])
def test_a_sigterm_while_the_launch_prepares_stops_it_before_any_run(
        phase: str, tmp_path: Path) -> None:
    result = _launch_stopped_at(phase, tmp_path)

    assert result["code"] == 143
    assert "Stopped by SIGTERM before the run started; nothing ran" in result["notices"]
    hankweave_dir = tmp_path / "exec" / ".hankweave"
    assert not (hankweave_dir / "runtime.lock").exists()  # given back
    if (hankweave_dir / "state.json").exists():
        assert not load_state(hankweave_dir)[0].runs


def test_a_latch_around_a_launch_holds_a_sigterm_after_it_and_is_given_back(
        tmp_path: Path) -> None:
    result = _launch_stopped_at("around", tmp_path)

    assert result["code"] == 0  # the run itself was not stopped
    # The event loop had reset SIGTERM to its default when it let go; the latch took it back.
    assert result["heldAfter"] == "SIGTERM" and result["handlerAfter"]
    assert result["restored"]
    state = load_state(tmp_path / "exec" / ".hankweave")[0]
    assert [run.status for run in state.runs] == ["completed"]
