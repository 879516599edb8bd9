"""Orchestration overhead per codon, against the cost of the git commit each codon needs.

Runs a 100-codon hank with FakeHarness agents (each codon writes one file and sends 20
assistant messages with usage; the fake's scripted time is zero) on the git checkpoint backend,
in process, and measures each codon's wall time from its ``CodonStarted`` transition to its
``codon.completed`` event.  Overhead = wall time - scripted agent time.  The floor is the git
checkpoint of one changed file in the same work tree, measured in the same run.  Also times
``hankweave --help`` in fresh processes, with every installed plugin loading: the median
(``help_s``) and the fastest (``help_min_s``) of ``--help-runs`` runs after one warm-up.

Prints one JSON line.  Targets: median overhead <= 3x the commit floor; --help <= 0.3 s.
``--help-only`` times --help alone (a few seconds).
Needs the git backend: pip install -e plugins/hankweave-checkpoint-git
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def build_project(root: Path, codons: int, messages: int) -> tuple[Path, Path]:
    hank_dir, data = root / "hank", root / "data"
    hank_dir.mkdir()
    data.mkdir()
    (data / "input.txt").write_text("input\n")
    items = [{"id": f"c{i:03d}", "name": f"Codon {i}", "model": "fake",
              "continuationMode": "fresh", "promptText": f"Write file {i}.",
              "checkpointedFiles": ["**"]} for i in range(codons)]
    (hank_dir / "hank.json").write_text(json.dumps({"hank": items}))
    script = {"default": {"messages": messages, "writeFiles": {}},
              "codons": {f"c{i:03d}": {"messages": messages,
                                        "writeFiles": {f"out/file-{i:03d}.txt": f"file {i}\n"}}
                         for i in range(codons)}}
    (root / "script.json").write_text(json.dumps(script))
    return hank_dir, data


def run_hank(root: Path, hank_dir: Path, data: Path, *, backend: str = "git",
             completed_at: list[float] | None = None) -> tuple[float, list[float], int]:
    """Run the hank in process: total seconds, each codon's wall time, the exit code; the
    ``perf_counter`` time of each ``codon.completed`` goes to ``completed_at`` if given."""
    from hankweave.app.launch import launch
    from hankweave.app.request import LaunchRequest

    starts: dict[str, float] = {}
    walls: list[float] = []

    def on_event(event: dict[str, Any]) -> None:
        now = time.perf_counter()
        data_ = event.get("data", {})
        if event["type"] == "state.transition" and data_.get("transitionType") == "CodonStarted":
            starts[data_["codonId"]] = now
        elif event["type"] == "codon.completed":
            walls.append(now - starts[data_["codonId"]])
            if completed_at is not None:
                completed_at.append(now)

    # The fake agent reads its script from the process environment.
    os.environ["HANKWEAVE_FAKE_SCRIPT"] = str(root / "script.json")
    env = {**os.environ, "HANKWEAVE_HOME": str(root / "home"),
           "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
           "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": backend}
    request = LaunchRequest(hank=str(hank_dir), data=str(data), execution=str(root / "exec"),
                            headless=True, cwd=root, env=env, on_event=on_event,
                            notify=lambda message: None)
    started = time.perf_counter()
    code = launch(request)
    return time.perf_counter() - started, walls, code


def commit_floor(execution_dir: Path, samples: int) -> float:
    """Median seconds of one git checkpoint of one changed file in this work tree."""
    from hankweave_checkpoint_git import GitCheckpointStore

    store = GitCheckpointStore(execution_dir)
    store.initialize()
    target = execution_dir / "agentRoot" / "out" / "floor.txt"
    times = []
    for i in range(samples):
        target.write_text(f"floor {i}\n")
        started = time.perf_counter()
        store.create(kind="completed", run_id="floor", codon_id=f"floor{i}",
                     codon_name="Floor", patterns=["**"])
        times.append(time.perf_counter() - started)
    store.close()
    return statistics.median(times)


def help_times(runs: int) -> list[float]:
    """Seconds of ``runs`` fresh ``hankweave --help`` processes, after one warm-up run."""
    with tempfile.TemporaryDirectory(prefix="hankweave-bench-pyc-") as pycache:
        # An installed package has its bytecode compiled; an editable checkout under
        # PYTHONDONTWRITEBYTECODE would compile every module on every start instead.  A private
        # cache, filled by the warm-up, measures the former without writing into the checkout.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        times = []
        for _ in range(runs + 1):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hankweave", "--help"], check=True,
                           capture_output=True, env=env)
            times.append(time.perf_counter() - started)
    return times[1:]


def help_figures(runs: int) -> dict[str, Any]:
    times = help_times(runs)
    return {"help_s": round(statistics.median(times), 3), "help_min_s": round(min(times), 3),
            "help_runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codons", type=int, default=100)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--help-runs", type=int, default=7,
                        help="timed --help processes (after one warm-up)")
    parser.add_argument("--help-only", action="store_true",
                        help="time --help alone, without the 100-codon run")
    args = parser.parse_args()
    if args.help_only:
        figures = help_figures(args.help_runs)
        print(json.dumps({"benchmark": "run_overhead", **figures,
                          "targets": {"help_s_max": 0.3},
                          "meets_targets": figures["help_s"] <= 0.3}))
        return
    with tempfile.TemporaryDirectory(prefix="hankweave-bench-") as tmp:
        root = Path(tmp)
        hank_dir, data = build_project(root, args.codons, args.messages)
        total, walls, code = run_hank(root, hank_dir, data)
        floor = commit_floor(root / "exec", samples=20)
    overhead = statistics.median(walls)  # the fake agent's scripted time is 0
    figures = help_figures(args.help_runs)
    print(json.dumps({
        "benchmark": "run_overhead", "codons": args.codons,
        "messages_per_codon": args.messages, "exit_code": code,
        "total_seconds": round(total, 2),
        "median_overhead_ms_per_codon": round(overhead * 1000, 1),
        "git_commit_floor_ms": round(floor * 1000, 1),
        "overhead_to_floor_ratio": round(overhead / floor, 2),
        **figures,
        "targets": {"ratio_max": 3.0, "help_s_max": 0.3},
        "meets_targets": overhead / floor <= 3.0 and figures["help_s"] <= 0.3,
    }))


if __name__ == "__main__":
    main()
