"""Orchestration cost per iteration of a long loop: flat in the history, or growing with it?

Runs one loop codon for ``--iterations`` iterations (``terminateOn: iterationLimit``) with
FakeHarness agents (one assistant message each, one file written, no scripted delay) on the
snapshot checkpoint backend, in process, and measures each iteration's wall time from its
``CodonStarted`` transition to its ``codon.completed`` event (the fake agent's time is nil, so
this is the runtime's own cost: state, journal, thread analysis, checkpoint).

* ``growth``: mean of the last ``--window`` iterations / mean of the first ``--window``;
  target <= 1.3 (issue 14: per-codon cost flat in history);
* ``total_seconds``: the whole run.

Prints one JSON line.  Needs the snapshot backend:
pip install -e plugins/hankweave-checkpoint-snapshot

Usage: python benchmarks/long_loop.py [--iterations 2000] [--window 200]
"""

from __future__ import annotations

import argparse
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
        total, walls, code = run_hank(root, hank_dir, data, backend="snapshot")
    window = min(args.window, max(1, len(walls) // 2))
    first = statistics.mean(walls[:window]) if walls else float("nan")
    last = statistics.mean(walls[-window:]) if walls else float("nan")
    growth = last / first if walls else float("nan")
    print(json.dumps({
        "benchmark": "long_loop", "iterations": args.iterations, "completed": len(walls),
        "exit_code": code, "window": window, "first_ms": round(first * 1000, 3),
        "last_ms": round(last * 1000, 3), "growth": round(growth, 3),
        "total_seconds": round(total, 2), "target": 1.3, "meets_target": growth <= 1.3}))


if __name__ == "__main__":
    main()
