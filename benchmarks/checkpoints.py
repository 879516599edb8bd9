"""Checkpoint and restore latency of every installed checkpoint backend.

Prints one JSON line per backend.  Workload: an execution directory whose ``agentRoot/`` holds
1,000 small text files in nested directories, checkpointed with the patterns ``("**",)``.
For a codon that changed 1 file, then one that changed 100 files, each repetition:

1. rewrites that many files (different ones each time);
2. times ``create()`` of a ``completed`` checkpoint;
3. times ``restore()`` of the baseline checkpoint taken before the repetitions, which puts
   those files back.

Medians over ``--reps`` repetitions, after ``--warmup`` untimed ones.

Before the baseline the tree is left to settle for a few seconds: a codon's checkpoint mostly
sees files that have not changed for a while, and both git and the snapshot store re-hash files
modified within the last moments, whose timestamps cannot yet prove them unchanged.

Target: a 1-file checkpoint in <= 50 ms (median).

Backends are found as the runtime finds them, through the installed plugins (the snapshot
backend's ``hankweave-checkpoint-snapshot``, git's ``hankweave-checkpoint-git``).

Usage: python benchmarks/checkpoints.py [--files N] [--reps N] [--warmup N] [--backend NAME]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hankweave.checkpoints import Checkpoint, CheckpointStore
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry

TARGET_CHECKPOINT_1_FILE_MS = 50
SETTLE_SECONDS = 2.2
PATTERNS = ("**",)


def build_tree(root: Path, files: int) -> list[Path]:
    """``files`` text files of 200-400 bytes, ten per directory, two directory levels deep."""
    paths = []
    for i in range(files):
        path = root / f"pkg{i % 10}" / f"mod{(i // 10) % 10}" / f"file{i:04d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"line {i} of the original workspace\n" * (6 + i % 6), encoding="utf-8")
        paths.append(path)
    return paths


def checkpoint(store: CheckpointStore, codon: str) -> Checkpoint:
    return store.create(kind="completed", run_id="bench", codon_id=codon, codon_name=codon,
                        patterns=PATTERNS)


def measure(store: CheckpointStore, paths: list[Path], changed: int, baseline: Checkpoint,
            reps: int, warmup: int) -> tuple[float, float]:
    """Median milliseconds of (checkpoint, restore) for a codon that changed ``changed`` files."""
    create_ms: list[float] = []
    restore_ms: list[float] = []
    for rep in range(warmup + reps):
        start_index = rep * changed
        for k in range(changed):
            path = paths[(start_index + k) % len(paths)]
            path.write_text(f"edited in repetition {rep}\n" + path.read_text(encoding="utf-8"),
                            encoding="utf-8")
        start = time.perf_counter()
        checkpoint(store, f"changed-{changed}-{rep}")
        created = time.perf_counter()
        store.restore(baseline.id)
        restored = time.perf_counter()
        if rep >= warmup:
            create_ms.append((created - start) * 1000)
            restore_ms.append((restored - created) * 1000)
    return statistics.median(create_ms), statistics.median(restore_ms)


def bench_backend(name: str, store_class: type[CheckpointStore], files: int, reps: int,
                  warmup: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"hankweave-bench-{name}-") as tmp:
        execution_dir = Path(tmp)
        (execution_dir / ".hankweave").mkdir()
        paths = build_tree(execution_dir / "agentRoot", files)
        store = store_class(execution_dir)
        try:
            store.initialize()
            time.sleep(SETTLE_SECONDS)
            baseline = checkpoint(store, "baseline")
            one_create, one_restore = measure(store, paths, 1, baseline, reps, warmup)
            many_create, many_restore = measure(store, paths, 100, baseline, reps, warmup)
        finally:
            store.close()
    return {
        "benchmark": "checkpoints",
        "backend": name,
        "files": files,
        "checkpoint_1_file_ms_median": round(one_create, 2),
        "restore_1_file_ms_median": round(one_restore, 2),
        "checkpoint_100_files_ms_median": round(many_create, 2),
        "restore_100_files_ms_median": round(many_restore, 2),
        "target_checkpoint_1_file_ms": TARGET_CHECKPOINT_1_FILE_MS,
        "meets_target": one_create <= TARGET_CHECKPOINT_1_FILE_MS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--backend", action="append",
                        help="only this backend (repeatable); default: every installed one")
    args = parser.parse_args()

    backends = Registry(make_plugin_manager()).checkpoint_backends()
    names = args.backend or sorted(backends)
    missing = [name for name in names if name not in backends]
    if missing:
        parser.error(f"not installed: {', '.join(missing)} "
                     f"(installed: {', '.join(sorted(backends)) or 'none'})")
    for name in names:
        print(json.dumps(bench_backend(name, backends[name], args.files, args.reps,
                                       args.warmup)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
