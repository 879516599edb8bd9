"""What ``hankweave fork`` and ``hankweave compare`` cost on a large execution (docs/fork.md).

An execution of ``--codons`` codons (default 50) over a workspace of ``--files`` files (default
20,000: the first codon's rig copies them in; every codon then writes one file of its own) is
made on each checkpoint backend with the kernel's scripted agent.  Then, per backend:

* ``fork_ms``: ``hankweave fork -e SRC --at c<codons/2> --no-start`` (the whole command: state,
  journal, checkpoint store, workspace restore), median of ``--rounds`` forks;
* ``compare_ms``: ``hankweave compare SRC FORK --json`` once the fork has run the second half
  with other content (every codon after the fork point differs: each is a full workspace
  diff), median of ``--rounds``;
* ``compare_same_ms``: ``compare`` of the source with a fork that ran the second half again
  with the same content (other checkpoints, the same files: every codon after the fork point
  is compared and found equal).

Before each timed command the file system is synced and left ``--settle`` seconds (default
10): on this VM's disk, the writeback of a run's or a fork's 20,000 new files slows the next
command's file creation two- to five-fold for seconds after, which would measure the previous
command.  The projects are removed at the end, not between backends, for the same reason.
Each figure is the median of the rounds; ``*_min_ms`` is the fastest.

Targets: fork ≤ 2 s and compare ≤ 3 s on each backend.  Prints one JSON line.
Usage: python benchmarks/fork.py [--files N] [--codons N] [--rounds N] [--settle S]
       [--backends git,snapshot]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def hankweave(*args: str | Path, cwd: Path, env: dict[str, str], settle: float = 0
              ) -> float:
    """Milliseconds ``hankweave ARGS`` took; it must succeed.  ``settle``: seconds to let
    the file system rest first, after a sync (see the module docstring)."""
    if settle:
        os.sync()
        time.sleep(settle)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hankweave", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"hankweave {' '.join(map(str, args))} failed:\n{done.stderr}")
    return elapsed


def make_project(root: Path, files: int, codons: int) -> None:
    tree = root / "hank" / "tree"
    for index in range(files):
        folder = tree / f"d{index // 500:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index:05d}.txt").write_text(f"file {index}\n" * 4)
    items = [{"id": f"c{i}", "name": f"C{i}", "model": "fake", "continuationMode": "fresh",
              "promptText": f"Codon {i}.", "checkpointedFiles": ["**"]} for i in range(codons)]
    items[0]["rigSetup"] = [{"type": "copy", "copy": {"from": "tree", "to": "tree"}}]
    (root / "hank" / "hank.json").write_text(json.dumps({"hank": items}))
    (root / "data").mkdir()
    (root / "data" / "in.txt").write_text("x\n")


def write_script(path: Path, codons: int, flavour: str) -> None:
    path.write_text(json.dumps({"codons": {
        f"c{i}": {"messages": 1, "writeFiles": {f"out/c{i}.md": f"{flavour} {i}\n"}}
        for i in range(codons)}}))


def measure(root: Path, backend: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "HANKWEAVE_HOME": str(root / "home"),
           "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
           "HANKWEAVE_FAKE_SCRIPT": str(root / "script.json"),
           "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": backend}
    env.pop("CI", None)
    write_script(root / "script.json", args.codons, "first")
    made = hankweave("run", "hank", "data", "-e", "src", "--headless", cwd=root, env=env)
    at = f"c{args.codons // 2 - 1}"
    forks = []
    for round_ in range(args.rounds):
        forks.append(hankweave("fork", "-e", "src", "--at", at, "-o", f"fork{round_}",
                               "--no-start", cwd=root, env=env, settle=args.settle))
    (root / "script.json.attempts.json").unlink(missing_ok=True)
    hankweave("run", "-e", "fork0", "--headless", cwd=root, env=env)  # same content
    write_script(root / "script.json", args.codons, "second")
    (root / "script.json.attempts.json").unlink(missing_ok=True)
    hankweave("run", "-e", "fork1", "--headless", cwd=root, env=env)  # other content
    compares, same = [], []
    for _ in range(args.rounds):  # interleaved: A B A B
        compares.append(hankweave("compare", "src", "fork1", "--json", cwd=root, env=env,
                                  settle=args.settle))
        same.append(hankweave("compare", "src", "fork0", "--json", cwd=root, env=env,
                              settle=args.settle))
    return {"made_s": round(made / 1000, 1),
            "fork_ms": round(statistics.median(forks)), "fork_min_ms": round(min(forks)),
            "compare_ms": round(statistics.median(compares)),
            "compare_min_ms": round(min(compares)),
            "compare_same_ms": round(statistics.median(same))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--codons", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--backends", default="git,snapshot")
    args = parser.parse_args()
    args.rounds = max(args.rounds, 2)  # fork0 and fork1 are both needed
    result: dict[str, object] = {"benchmark": "fork", "files": args.files,
                                 "codons": args.codons, "rounds": args.rounds}
    roots: list[Path] = []
    try:
        for backend in args.backends.split(","):
            roots.append(Path(tempfile.mkdtemp(prefix=f"hankweave-fork-bench-{backend}-")))
            make_project(roots[-1], args.files, args.codons)
            result[backend] = measure(roots[-1], backend, args)
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    result["targets"] = {"fork_ms": 2000, "compare_ms": 3000}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
