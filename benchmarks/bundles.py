"""What bundles and the journal diet cost (docs/bundles.md, docs/cli.md "Dieting a journal").

* **Pack** (``pack_ms``): ``hankweave pack`` of a hank with ``--files`` prompt files of 8 KiB
  (``--files`` / 2 of them in a copied directory), median of ``--rounds``.
* **Opening a bundle** (``validate_bundle_ms`` against ``validate_dir_ms``): ``hankweave
  validate`` of the bundle (verified against its lock, its extraction reused) and of the hank
  directory, interleaved (A B A B ...), medians; ``bundle_overhead_ms`` is the difference.
  ``first_open_ms``: the first validate of the bundle, which also extracts it.
* **Diet** (``diet_ms``, ``restore_ms``, ``diet_ratio``): ``hankweave --diet-journal`` and
  ``--restore-journal`` of a journal of ``--events`` events, a third of them ``file.updated``
  lines carrying one of 20 bodies of 32 KiB; the dieted size over the original.

Prints one JSON line. Usage: python benchmarks/bundles.py [--files N] [--events N] [--rounds N]
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


def hankweave(*args: str | Path, cwd: Path, env: dict[str, str]) -> float:
    """Milliseconds ``hankweave ARGS`` took; it must succeed."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hankweave", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"hankweave {' '.join(map(str, args))} failed:\n{done.stderr}")
    return elapsed


def make_hank(root: Path, files: int) -> Path:
    hank = root / "hank"
    (hank / "prompts").mkdir(parents=True)
    (hank / "tpl").mkdir()
    codons = []
    for index in range(files // 2):
        (hank / "prompts" / f"p{index}.md").write_text(f"Prompt {index}.\n" * 700)
        (hank / "tpl" / f"t{index}.txt").write_text(f"Template {index}.\n" * 500)
        if index < 20:
            codons.append({"id": f"c{index}", "name": f"C{index}", "model": "haiku",
                           "continuationMode": "fresh", "promptFile": f"prompts/p{index}.md"})
    codons[0]["rigSetup"] = [{"type": "copy", "copy": {"from": "tpl", "to": "tpl"}}]
    for index in range(20, files // 2):  # every prompt is referenced
        codons[index % 20].setdefault("appendSystemPromptFile", []).append(
            f"prompts/p{index}.md")
    (hank / "hank.json").write_text(json.dumps({"meta": {"name": "bench", "version": "1.0.0"},
                                                "hank": codons}))
    (root / "data").mkdir()
    (root / "data" / "in.txt").write_text("x\n")
    return hank


def js_line(event: dict[str, object]) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def make_journal(root: Path, events: int) -> Path:
    execution = root / "exec"
    (execution / ".hankweave" / "events").mkdir(parents=True)
    bodies = [(f"body {n} " * 4000)[:32768] for n in range(20)]
    with open(execution / ".hankweave" / "events" / "events.jsonl", "wb") as journal:
        for seq in range(1, events + 1):
            if seq % 3 == 0:
                event = {"seq": seq, "id": f"e{seq}", "timestamp": "2026-12-05T10:00:00.000Z",
                         "type": "file.updated", "data": {"path": f"f{seq % 20}.md",
                                                          "action": "modified",
                                                          "content": bodies[seq % 20]}}
            else:
                event = {"seq": seq, "id": f"e{seq}", "timestamp": "2026-12-05T10:00:00.000Z",
                         "type": "info", "data": {"message": f"step {seq}"}}
            journal.write(js_line(event))
    return execution


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "HANKWEAVE_HOME": str(root / "home"),
               "ANTHROPIC_API_KEY": "sk-ant-bench-not-a-key"}
        hank = make_hank(root, args.files)
        pack = [hankweave("pack", hank, "-o", "b.hank", cwd=root, env=env)
                for _ in range(args.rounds)]
        first = hankweave("validate", "b.hank", "data", "--offline", cwd=root, env=env)
        bundle, directory = [], []
        for _ in range(args.rounds):
            bundle.append(hankweave("validate", "b.hank", "data", "--offline", cwd=root, env=env))
            directory.append(hankweave("validate", hank, "data", "--offline", cwd=root, env=env))
        execution = make_journal(root, args.events)
        journal = execution / ".hankweave" / "events" / "events.jsonl"
        original = journal.stat().st_size
        diet = hankweave("--diet-journal", execution, cwd=root, env=env)
        events_dir = journal.parent
        dieted = sum(p.stat().st_size for p in events_dir.rglob("*") if p.is_file())
        restore = hankweave("--restore-journal", execution, cwd=root, env=env)
    print(json.dumps({
        "benchmark": "bundles", "files": args.files, "events": args.events,
        "pack_ms": round(statistics.median(pack), 1),
        "first_open_ms": round(first, 1),
        "validate_bundle_ms": round(statistics.median(bundle), 1),
        "validate_dir_ms": round(statistics.median(directory), 1),
        "bundle_overhead_ms": round(statistics.median(bundle) - statistics.median(directory), 1),
        "journal_bytes": original, "dieted_bytes": dieted,
        "diet_ratio": round(dieted / original, 4),
        "diet_ms": round(diet, 1), "restore_ms": round(restore, 1)}))


if __name__ == "__main__":
    main()
