"""Orchestration cost per iteration of a long loop: flat in the history, or growing with it?

Runs one loop codon for ``--iterations`` iterations (``terminateOn: iterationLimit``) with
FakeHarness agents (one assistant message each, one file written, no scripted delay) on the
snapshot checkpoint backend, in process.  The fake agent's time is nil, so what is measured is
the runtime's own cost: state, journal, thread analysis, planning, checkpoint.

* ``growth``: an iteration's cost is the time from one ``codon.completed`` to the next (all of
  it: the codon, the loop's expansion, picking the next codon); the mean over the last
  ``--window`` iterations / the mean over the first ``--window``, target <= 1.3
  (issue 14: per-codon cost flat in history);
* ``codon_growth``: the same for the time from a codon's ``CodonStarted`` to its
  ``codon.completed`` only;
* ``total_seconds``: the whole run.

Prints one JSON line.  Needs the snapshot backend:
pip install -e plugins/hankweave-checkpoint-snapshot

Usage: python benchmarks/long_loop.py [--iterations 2000] [--window 200]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from pathlib import Path

# The per-codon timing of the run overhead benchmark (this folder is on sys.path when a
# benchmark runs as a script).
from run_overhead import run_hank


def build_project(root: Path, iterations: int) -> tuple[Path, Path]:
    hank_dir, data = root / "hank", root / "data"
    hank_dir.mkdir()
    data.mkdir()
    (data / "input.txt").write_text("input\n")
    loop = {"type": "loop", "id": "grow", "name": "Grow",
            "terminateOn": {"type": "iterationLimit", "limit": iterations},
            "codons": [{"id": "step", "name": "Step", "model": "fake",
                        "continuationMode": "fresh", "promptText": "Add a line.",
                        "checkpointedFiles": ["out/**"]}]}
    (hank_dir / "hank.json").write_text(json.dumps({"hank": [loop]}))
    script = {"default": {"messages": 1, "writeFiles": {"out/last.txt": "step\n"}}}
    (root / "script.json").write_text(json.dumps(script))
    return hank_dir, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--window", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hankweave-long-loop-") as tmp:
        root = Path(tmp)
        hank_dir, data = build_project(root, args.iterations)
        completed_at: list[float] = []
        total, walls, code = run_hank(root, hank_dir, data, backend="snapshot",
                                      completed_at=completed_at)
    iterations = [later - earlier for earlier, later in itertools.pairwise(completed_at)]
    window = min(args.window, max(1, len(iterations) // 2))
    first, last, growth = _growth(iterations, window)
    _, _, codon_growth = _growth(walls, window)
    print(json.dumps({
        "benchmark": "long_loop", "iterations": args.iterations, "completed": len(walls),
        "exit_code": code, "window": window, "first_ms": round(first * 1000, 3),
        "last_ms": round(last * 1000, 3), "growth": round(growth, 3),
        "codon_growth": round(codon_growth, 3), "total_seconds": round(total, 2),
        "target": 1.3, "meets_target": growth <= 1.3}))


def _growth(samples: list[float], window: int) -> tuple[float, float, float]:
    """(mean of the first window, of the last, last / first); NaN when there are no samples."""
    if not samples:
        return float("nan"), float("nan"), float("nan")
    first = statistics.mean(samples[:window])
    last = statistics.mean(samples[-window:])
    return first, last, last / first


if __name__ == "__main__":
    main()
