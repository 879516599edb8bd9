"""Replay speed: a 50-codon recording with 2,000 codon-log lines, replayed in instant mode.

Generates the recording first (not timed): runs a 50-codon hank with FakeHarness agents on the
git checkpoint backend, in process (each codon sends 36 assistant messages and writes one file:
40 log lines), and exports it with ``hankweave_replay.export_recording``.  Then times one replay
of the archive through the kernel's launch path, from opening (unpacking) the recording to the
end of the run: every record parsed, every codon's files restored, every checkpoint committed.

Prints one JSON line with the total seconds and the seconds per 1,000 log lines.  Target: under
10 s in total.  Needs the replay plugin and the git backend:
pip install -e hankweave-replay -e plugins/hankweave-checkpoint-git
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 10.0


def build_project(root: Path, codons: int, messages: int) -> tuple[Path, Path]:
    hank_dir, data = root / "hank", root / "data"
    hank_dir.mkdir()
    data.mkdir()
    (data / "input.txt").write_text("input\n")
    items = [{"id": f"c{i:03d}", "name": f"Codon {i}", "model": "fake",
              "continuationMode": "fresh", "promptText": f"Write file {i}.",
              "checkpointedFiles": ["**"]} for i in range(codons)]
    (hank_dir / "hank.json").write_text(json.dumps({"hank": items}))
    script = {"codons": {f"c{i:03d}": {"messages": messages,
                                        "writeFiles": {f"out/file-{i:03d}.txt": f"file {i}\n"}}
                         for i in range(codons)}}
    (root / "script.json").write_text(json.dumps(script))
    return hank_dir, data


def environment(root: Path) -> dict[str, str]:
    # The fake agent reads its script from the process environment.
    os.environ["HANKWEAVE_FAKE_SCRIPT"] = str(root / "script.json")
    return {**os.environ, "HANKWEAVE_HOME": str(root / "home"),
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "git"}


def record(root: Path, hank_dir: Path, data: Path) -> Path:
    from hankweave_replay import export_recording

    from hankweave.app.launch import launch
    from hankweave.app.request import LaunchRequest

    env = environment(root)
    code = launch(LaunchRequest(hank=str(hank_dir), data=str(data),
                                execution=str(root / "recorded"), headless=True, cwd=root,
                                env=env, notify=lambda message: None))
    if code != 0:
        raise SystemExit(f"recording the benchmark hank failed (exit {code})")
    return export_recording(root / "recorded", root / "bench.hwrec.tar.gz", env=env,
                            cwd=root).path


def log_lines(execution_dir: Path) -> int:
    runs = execution_dir / ".hankweave" / "runs"
    return sum(len(log.read_bytes().splitlines()) for log in runs.rglob("*-claude.log"))


def replay(root: Path, source: Path) -> tuple[float, int, int]:
    from hankweave.app.launch import launch
    from hankweave.app.request import LaunchRequest

    env = environment(root)
    target = root / "replayed"
    started = time.perf_counter()
    code = launch(LaunchRequest(replay=str(source), replay_speed="instant",
                                execution=str(target), headless=True, cwd=root, env=env,
                                copy=True, notify=lambda message: None))
    elapsed = time.perf_counter() - started
    return elapsed, code, log_lines(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codons", type=int, default=50)
    parser.add_argument("--messages", type=int, default=36,
                        help="assistant messages per codon (plus init, a tool use, its result"
                             " and the final result: 40 lines at the default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hankweave-bench-replay-") as tmp:
        root = Path(tmp)
        hank_dir, data = build_project(root, args.codons, args.messages)
        source = record(root, hank_dir, data)
        recorded_lines = log_lines(root / "recorded")
        total, code, lines = replay(root, source)
        size = source.stat().st_size
    print(json.dumps({
        "benchmark": "replay", "codons": args.codons, "log_lines": lines,
        "recorded_log_lines": recorded_lines, "recording_bytes": size, "speed": "instant",
        "exit_code": code, "total_seconds": round(total, 3),
        "seconds_per_1000_lines": round(total / max(lines, 1) * 1000, 3),
        "target_total_seconds": TARGET_SECONDS,
        "meets_target": code == 0 and total < TARGET_SECONDS,
    }))


if __name__ == "__main__":
    main()
