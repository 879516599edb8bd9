"""Checkpoint and restore latency of every installed checkpoint backend, beside the git CLI.

Prints one JSON line.  Workload, at each tree size (1,000 and 20,000 files; 100,000 with
``--large``): an ``agentRoot/`` of small text files, ten per directory, checkpointed with the
patterns ``("**",)``.  Every contestant gets its own copy of the tree, and the repetitions
interleave them (git CLI, backend A, backend B, git CLI, ...), so a machine that slows down
part-way through slows all of them alike.  Each repetition, for a codon that changed 1 file and
then one that changed 100 files:

1. rewrites that many files (different ones each time);
2. times the checkpoint: for the git CLI, what the original runs (``git add -A`` and
   ``git commit``); for a backend, ``create()``;
3. times the restore of the baseline checkpoint taken before the repetitions, which puts those
   files back: ``git checkout <baseline> -- .``, or ``restore()``.

Then, for each backend that accepts change hints, the same 1-file codon as the runtime runs it:
a workspace watcher is drained before the checkpoint and before the restore, and the store gets
what it saw (``*_hinted_ms``; after each restore an untimed checkpoint starts the next chain,
as the codon after a rollback does).

Medians over ``--reps`` repetitions, after ``--warmup`` untimed ones, and each backend's ratio
to the git CLI.  Before the baseline the trees are left to settle for a few seconds: a codon's
checkpoint mostly sees files that have not changed for a while, and git and the backends look
again at files changed within the last moments, whose timestamps cannot yet prove them
unchanged.

Targets (1-file checkpoint and restore at 20,000 files): the ``git`` backend at most 1.0x the
git CLI, the ``snapshot`` backend at most 0.5x; a hinted 1-file checkpoint at most 20 ms at
100,000 files.

Backends are found as the runtime finds them, through the installed plugins.

Usage: python benchmarks/checkpoints.py [--sizes N,N] [--large] [--reps N] [--warmup N]
       [--backend NAME]
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
from collections.abc import Callable
from pathlib import Path

from hankweave.checkpoints import ChangeHint, CheckpointStore
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry
from hankweave.workspace_watch import WorkspaceWatcher

SETTLE_SECONDS = 2.2
PATTERNS = ("**",)
TARGET_SIZE = 20_000
TARGET_RATIOS = {"git": 1.0, "snapshot": 0.5}
LARGE_SIZE = 100_000
TARGET_HINTED_LARGE_MS = 20
GIT_CLI = "git CLI"


def build_tree(root: Path, files: int) -> list[Path]:
    """``files`` text files of 200-400 bytes, ten per directory, in nested directories."""
    paths = []
    for i in range(files):
        path = (root / f"pkg{i % 10}" / f"mod{(i // 10) % 10}" / f"sub{i // 1000}"
                / f"file{i:06d}.txt")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"line {i} of the original workspace\n" * (6 + i % 6), encoding="utf-8")
        paths.append(path)
    return paths


class Contestant:
    """One way of checkpointing a tree: ``checkpoint()`` and ``restore_baseline()``."""

    name: str

    def __init__(self, execution_dir: Path, paths: list[Path]) -> None:
        self.execution_dir = execution_dir
        self.work_tree = execution_dir / "agentRoot"
        self.paths = paths

    def start(self) -> None: ...
    def baseline(self) -> None: ...
    def checkpoint(self, label: str) -> None: ...
    def restore_baseline(self) -> None: ...
    def close(self) -> None: ...


class GitCli(Contestant):
    """The original's checkpoints: ``git add -A`` + ``git commit`` in a separate git dir."""

    name = GIT_CLI

    def start(self) -> None:
        git_dir = self.execution_dir / "cli.git"
        home = self.execution_dir / "cli-home"
        home.mkdir()
        self.env = {**os.environ, "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(self.work_tree),
                    "HOME": str(home), "GIT_CONFIG_GLOBAL": os.devnull,
                    "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "bench",
                    "GIT_AUTHOR_EMAIL": "bench@invalid", "GIT_COMMITTER_NAME": "bench",
                    "GIT_COMMITTER_EMAIL": "bench@invalid"}
        self.git("init", "-q")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], env=self.env, cwd=self.work_tree, check=True,
                              capture_output=True, text=True).stdout

    def baseline(self) -> None:
        self.checkpoint("baseline")
        self.base = self.git("rev-parse", "HEAD").strip()

    def checkpoint(self, label: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", label)

    def restore_baseline(self) -> None:
        self.git("checkout", "-q", self.base, "--", ".")


class Backend(Contestant):
    """A checkpoint backend plugin, driven as the runtime drives it."""

    store_class: type[CheckpointStore]
    watcher: WorkspaceWatcher | None = None

    def start(self) -> None:
        (self.execution_dir / ".hankweave").mkdir()
        self.store = self.store_class(self.execution_dir)
        self.store.initialize()

    def baseline(self) -> None:
        self.base = self._create("baseline")

    def _hint(self) -> dict[str, ChangeHint]:
        return {"changes": self.watcher.drain()} if self.watcher is not None else {}

    def _create(self, label: str) -> str:
        return self.store.create(kind="completed", run_id="bench", codon_id=label,
                                 codon_name=label, patterns=PATTERNS, **self._hint()).id

    def checkpoint(self, label: str) -> None:
        self._create(label)

    def restore_baseline(self) -> None:
        self.store.restore(self.base, **self._hint())

    def watch(self) -> bool:
        """Start handing the store change hints; False if it takes none (or no watcher)."""
        if not self.store_class.accepts_change_hints:
            return False
        self.watcher = WorkspaceWatcher.start(self.work_tree)
        if self.watcher is None:
            return False
        self._create("chain-start")  # a full scan: the first capture the hints continue
        return True

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
        self.store.close()


def measure_hinted(backend: Backend, reps: int, warmup: int) -> tuple[float, float]:
    """Median ms of a hinted 1-file checkpoint and of the hinted restore that follows it."""
    create_ms: list[float] = []
    restore_ms: list[float] = []
    for rep in range(warmup + reps):
        edit(backend.paths, 10_000 + rep, 1)
        start = time.perf_counter()
        backend.checkpoint(f"hinted-{rep}")
        created = time.perf_counter()
        backend.restore_baseline()
        restored = time.perf_counter()
        backend.checkpoint(f"after-restore-{rep}")  # untimed: a scan that restarts the chain
        if rep >= warmup:
            create_ms.append((created - start) * 1000)
            restore_ms.append((restored - created) * 1000)
    return statistics.median(create_ms), statistics.median(restore_ms)


def backend(name: str, store_class: type[CheckpointStore]) -> type[Backend]:
    return type(f"Backend_{name}", (Backend,), {"name": name, "store_class": store_class})


def edit(paths: list[Path], rep: int, changed: int) -> None:
    for k in range(changed):
        path = paths[(rep * changed + k) % len(paths)]
        path.write_text(f"edited in repetition {rep}\n" + path.read_text(encoding="utf-8"),
                        encoding="utf-8")


def measure(contestants: list[Contestant], changed: int, reps: int, warmup: int
            ) -> dict[str, tuple[float, float]]:
    """Median ms of (checkpoint, restore) per contestant, repetitions interleaved."""
    timings: dict[str, tuple[list[float], list[float]]] = {
        c.name: ([], []) for c in contestants}
    for rep in range(warmup + reps):
        for contestant in contestants:
            edit(contestant.paths, rep, changed)
            start = time.perf_counter()
            contestant.checkpoint(f"changed-{changed}-{rep}")
            created = time.perf_counter()
            contestant.restore_baseline()
            restored = time.perf_counter()
            if rep >= warmup:
                timings[contestant.name][0].append((created - start) * 1000)
                timings[contestant.name][1].append((restored - created) * 1000)
    return {name: (statistics.median(c), statistics.median(r))
            for name, (c, r) in timings.items()}


def bench_size(files: int, kinds: list[Callable[[Path, list[Path]], Contestant]], reps: int,
               warmup: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="hankweave-bench-checkpoints-") as tmp:
        template = Path(tmp) / "template"
        build_tree(template, files)
        contestants = []
        for number, kind in enumerate(kinds):
            execution_dir = Path(tmp) / f"contestant{number}"
            shutil.copytree(template, execution_dir / "agentRoot", symlinks=True)
            paths = sorted(p for p in (execution_dir / "agentRoot").rglob("*.txt"))
            contestant = kind(execution_dir, paths)
            contestant.start()
            contestants.append(contestant)
        shutil.rmtree(template)
        try:
            time.sleep(SETTLE_SECONDS)
            for contestant in contestants:
                contestant.baseline()
            one = measure(contestants, 1, reps, warmup)
            many = measure(contestants, 100, reps, warmup)
            hinted = {c.name: measure_hinted(c, reps, warmup) for c in contestants
                      if isinstance(c, Backend) and c.watch()}
        finally:
            for contestant in contestants:
                contestant.close()
    cli_create, cli_restore = one[GIT_CLI]
    result: dict[str, object] = {}
    for name in one:
        entry = {
            "checkpoint_1_file_ms": round(one[name][0], 2),
            "restore_1_file_ms": round(one[name][1], 2),
            "checkpoint_100_files_ms": round(many[name][0], 2),
            "restore_100_files_ms": round(many[name][1], 2),
        }
        if name != GIT_CLI:
            entry["checkpoint_1_file_ratio"] = round(one[name][0] / cli_create, 2)
            entry["restore_1_file_ratio"] = round(one[name][1] / cli_restore, 2)
        if name in hinted:
            entry["checkpoint_1_file_hinted_ms"] = round(hinted[name][0], 2)
            entry["restore_1_file_hinted_ms"] = round(hinted[name][1], 2)
            entry["checkpoint_1_file_hinted_ratio"] = round(hinted[name][0] / cli_create, 2)
            entry["restore_1_file_hinted_ratio"] = round(hinted[name][1] / cli_restore, 2)
        result[name] = entry
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,20000",
                        help="tree sizes, comma-separated (default 1000,20000)")
    parser.add_argument("--large", action="store_true", help="also 100,000 files (slow to build)")
    parser.add_argument("--reps", type=int, default=11)
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
    if shutil.which("git") is None:
        parser.error("the git CLI, the baseline of this benchmark, is not installed")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.large:
        sizes.append(LARGE_SIZE)
    kinds: list[Callable[[Path, list[Path]], Contestant]] = [
        GitCli, *(backend(name, backends[name]) for name in names)]
    by_size = {str(files): bench_size(files, kinds, args.reps, args.warmup) for files in sizes}

    checks: dict[str, bool] = {}
    at_target = by_size.get(str(TARGET_SIZE), {})
    for name, limit in TARGET_RATIOS.items():
        figures = at_target.get(name)
        if isinstance(figures, dict):
            checks[name] = (figures["checkpoint_1_file_ratio"] <= limit
                            and figures["restore_1_file_ratio"] <= limit)
            if "checkpoint_1_file_hinted_ratio" in figures:
                checks[f"{name} hinted"] = (figures["checkpoint_1_file_hinted_ratio"] <= limit
                                            and figures["restore_1_file_hinted_ratio"] <= limit)
    for name, figures in by_size.get(str(LARGE_SIZE), {}).items():
        if isinstance(figures, dict) and "checkpoint_1_file_hinted_ms" in figures:
            checks[f"{name} hinted at {LARGE_SIZE} files"] = (
                figures["checkpoint_1_file_hinted_ms"] <= TARGET_HINTED_LARGE_MS)
    print(json.dumps({
        "benchmark": "checkpoints",
        "sizes": by_size,
        "target_ratio_at_20000_files": TARGET_RATIOS,
        "target_hinted_checkpoint_ms_at_100000_files": TARGET_HINTED_LARGE_MS,
        "meets_targets": checks,
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
