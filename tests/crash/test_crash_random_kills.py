"""SIGKILL at random: from outside after a random delay, or at a random count of a random point.

Each backend gets half of ``--crash-kills`` kills (default 40 in all).  An execution is
resumed after every kill; when a run finishes before its kill came, the execution is checked
against an uninterrupted run and the next kills go to a new execution.  The seed is fixed
(``HANKWEAVE_CRASH_SEED`` picks another, for long runs), and a failure names the kills that
led to it.
"""

from __future__ import annotations

import os
import random
from collections import Counter

from tests.crash.crash_hank import CrashProject, Progress, check_after_kill, check_finished

SEED = os.environ.get("HANKWEAVE_CRASH_SEED", "20261201")
OUTSIDE_KILL_SHARE = 0.4
OUTSIDE_DELAY_S = (0.1, 3.0)


def killable_points(reached: Counter[str]) -> list[str]:
    """The points a whole run reaches, less the atomic writes of files named by a hash (the
    snapshot store's manifests: their names change with every run)."""
    return sorted(point for point in reached
                  if not (point.startswith("replace.") and point.count(".") == 2
                          and len(point.split(".")[1]) == 40))


def test_random_kills_lose_nothing(backend, reference, crash_kills, tmp_path):
    rng = random.Random(f"{SEED}-{backend}")
    points = killable_points(reference.reached)
    kills, executions = 0, 0
    while kills < crash_kills // 2:
        executions += 1
        project = CrashProject(tmp_path / f"execution-{executions}", backend)
        progress, reached, history = Progress(), Counter[str](), []
        while kills < crash_kills // 2:
            if rng.random() < OUTSIDE_KILL_SHARE:
                delay = round(rng.uniform(*OUTSIDE_DELAY_S), 2)
                history.append(f"after {delay}s")
                ending = project.run(kill_after=delay)
            else:
                point = rng.choice(points)
                # Never more than the run has left, so the point is reached.
                left = max(1, reference.reached[point] - reached[point])
                history.append(spec := f"{point}@{rng.randint(1, left)}")
                ending = project.run(kill_at=spec)
            reached += ending.reached
            progress = _checked(project, progress, history)
            if not ending.killed:
                assert ending.returncode == 0, (history, ending.stderr[-2000:])
                break
            kills += 1
        else:
            project.run_to_completion()
            progress = _checked(project, progress, history)
        _checked(project, progress, history, finished=reference.trees)


def _checked(project: CrashProject, progress: Progress, history: list[str], *,
             finished: dict[str, dict[str, str]] | None = None) -> Progress:
    """The invariants (and, given the reference trees, the finished execution), with the
    kills that led here named in a failure."""
    try:
        if finished is not None:
            check_finished(project, finished)
            return progress
        return check_after_kill(project, progress)
    except AssertionError as exc:
        raise AssertionError(f"after the kills {history}: {exc}") from exc
