"""What the agents' sandbox costs (docs/sandbox.md): added wall time per ``bash`` call and per
codon, sandbox on against off, interleaved in one run (A B A B ...).

* **Per call** (``added_per_call_ms``): pi's ``bash`` tool (its real ``Toolbox``) running
  ``true`` in a workspace, with and without the sandbox, ``--calls`` times each; the median of
  each, and their difference.  Target: <= 15 ms.
* **Per codon** (``added_per_codon_ms``): ``hankweave run`` of a one-codon hank on the pi agent
  (real litellm) against the mock provider, whose agent makes one ``bash`` call, with
  ``--sandbox auto`` and ``--sandbox off``, ``--codons`` runs each; the codon's recorded
  duration (its start to its end in the state), medians and difference.  Target: <= 100 ms.

Needs bubblewrap and ``hankweave-harness-pi``.  Prints one JSON line.

Usage: python benchmarks/sandbox.py [--calls N] [--codons N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hankweave.api import Sandbox, bubblewrap_problem, load_state, parse_iso


def per_call(root: Path, calls: int) -> tuple[list[float], list[float]]:
    """Milliseconds of each bash call, sandboxed and not (interleaved)."""
    from hankweave_harness_pi.tools import Toolbox

    work = root / "exec" / "agentRoot"
    work.mkdir(parents=True)
    box = Sandbox.for_execution(root / "exec", work, data=None, home=Path.home(),
                                network=None)
    env = {"PATH": os.environ["PATH"], "HOME": str(Path.home())}
    tools = {True: Toolbox(work, env=env, sandbox=box), False: Toolbox(work, env=env)}
    times: dict[bool, list[float]] = {True: [], False: []}

    async def measure() -> None:
        for _ in range(calls):
            for sandboxed in (True, False):
                started = time.perf_counter()
                outcome = await tools[sandboxed].run("bash", {"command": "true"})
                times[sandboxed].append((time.perf_counter() - started) * 1000)
                assert not outcome.is_error, outcome

    asyncio.run(measure())
    return times[True], times[False]


def per_codon(root: Path, codons: int) -> tuple[list[float], list[float]]:
    """Milliseconds of a one-codon pi run's codon, sandboxed and not (interleaved)."""
    (root / "hank").mkdir()
    (root / "hank" / "hank.json").write_text(json.dumps({"hank": [
        {"id": "work", "name": "Work", "model": "gpt-5.2", "continuationMode": "fresh",
         "promptText": "Do the work."}]}))
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("input\n")
    script = root / "script.json"
    script.write_text(json.dumps({"rules": [{"when": {"lastUserMessage": "Do the work"},
                                             "steps": [{"run": "ls read_only_data_source"},
                                                       {"answer": "Done."}]}]}))
    env = {"PATH": os.environ["PATH"], "HOME": str(root / "home"),
           "HANKWEAVE_HOME": str(root / "executions"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.memory_checkpoints",
           "HANKWEAVE_LOAD_PLUGINS": "pi", "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory"}
    (root / "home").mkdir()
    times: dict[str, list[float]] = {"auto": [], "off": []}
    for n in range(codons):
        for mode in ("auto", "off"):
            execution = root / f"exec-{mode}-{n}"
            subprocess.run([sys.executable, "-m", "hankweave", "run", str(root / "hank"),
                            str(root / "data"), "-e", str(execution), "--headless",
                            "--mock-provider", str(script), "--sandbox", mode],
                           env=env, cwd=root, check=True, capture_output=True,
                           stdin=subprocess.DEVNULL)
            state, _ = load_state(execution / ".hankweave")
            record = state.runs[0].codons[0]
            took = parse_iso(record.end_time) - parse_iso(record.start_time)
            times[mode].append(took.total_seconds() * 1000)
    return times["auto"], times["off"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--codons", type=int, default=8)
    args = parser.parse_args()
    problem = bubblewrap_problem()
    if problem is not None:
        sys.exit(f"cannot measure the sandbox: {problem}")
    with tempfile.TemporaryDirectory(prefix="hankweave-sandbox-") as scratch:
        root = Path(scratch)
        (root / "calls").mkdir()
        (root / "codons").mkdir()
        on_call, off_call = per_call(root / "calls", args.calls)
        on_codon, off_codon = per_codon(root / "codons", args.codons)
    call = statistics.median(on_call) - statistics.median(off_call)
    codon = statistics.median(on_codon) - statistics.median(off_codon)
    result: dict[str, Any] = {
        "benchmark": "sandbox", "calls": args.calls, "codons": args.codons,
        "bash_call_ms_sandboxed_p50": round(statistics.median(on_call), 2),
        "bash_call_ms_unsandboxed_p50": round(statistics.median(off_call), 2),
        "added_per_call_ms": round(call, 2),
        "codon_ms_sandboxed_p50": round(statistics.median(on_codon), 1),
        "codon_ms_unsandboxed_p50": round(statistics.median(off_codon), 1),
        "added_per_codon_ms": round(codon, 1),
        "target_per_call_ms": 15, "target_per_codon_ms": 100,
        "ok": call <= 15 and codon <= 100,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
