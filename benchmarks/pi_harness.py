"""The pi harness's own cost: agent-loop overhead per turn, and validating a hank of pi models.

* ``overhead_ms_per_turn``: a 20-turn tool conversation (each turn one ``ls`` call, then a
  final answer) against the mock provider, run by the harness directly (no kernel runner);
  the time in the harness outside the provider call (the ``acompletion`` request and its
  stream, litellm's own processing of it included), divided by the turns.  Putting the
  streamed chunks together, the tool, the records and saving the session count as overhead;
  the mock runs in a process of its own.  Median of ``--runs`` conversations after a warm-up.
  Target <= 5 ms.
* ``validate_s``: ``hankweave validate`` of a hank whose codons name pi models, as a process,
  median of 5 (litellm must not be imported).  Target <= 0.5 s.

Prints one JSON line.  Needs hankweave and hankweave-harness-pi (with litellm); offline.

Usage: python benchmarks/pi_harness.py [--turns N] [--runs N] [--quick]
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

# The mock provider benchmark's way of serving the mock in its own process (this folder is
# on sys.path when a benchmark runs as a script).
from mock_provider import _serve_process

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def script(turns: int) -> dict[str, Any]:
    return {"rules": [
        {"name": "final", "when": {"turn": turns + 1}, "reply": {"text": "Done."}},
        {"name": "tool", "reply": {"toolCalls": [{"name": "ls", "input": {}}],
                                   "usage": {"inputTokens": 900, "outputTokens": 20}}},
    ]}


async def conversation(base: Path, mock_env: dict[str, str], index: int) -> dict[str, float]:
    from hankweave_harness_pi import PiHarness, agent

    from hankweave.api import AGENT_MARKER_ENV, CodonRequest, get_registry
    from hankweave.testing import attempt_context

    root = base / f"conversation-{index}"
    work = root / "agentRoot"
    work.mkdir(parents=True)
    (work / "notes.md").write_text("hello\n")
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}, **mock_env,
           AGENT_MARKER_ENV: f"bench/{index}"}
    request = CodonRequest(prompt="Look around.", system_prompt=None,
                           model=get_registry().resolve_model("gpt-5.2"), work_dir=work,
                           env=env, env_overlay=mock_env, codon_id="c", run_id="bench")
    provider_s = 0.0
    assembly_s = 0.0
    complete = agent.AgentPass._complete
    add_chunk = agent.StreamedReply.add

    async def timed_complete(self: Any) -> Any:
        nonlocal provider_s
        started = time.perf_counter()
        try:
            return await complete(self)
        finally:
            provider_s += time.perf_counter() - started

    def timed_add(self: Any, chunk: Any) -> None:
        nonlocal assembly_s
        started = time.perf_counter()
        try:
            add_chunk(self, chunk)
        finally:
            assembly_s += time.perf_counter() - started

    agent.AgentPass._complete = timed_complete  # type: ignore[method-assign]
    agent.StreamedReply.add = timed_add  # type: ignore[method-assign]
    try:
        harness = PiHarness()
        context = attempt_context(root, request, harness="pi")
        started = time.perf_counter()
        records = [r async for r in harness.run_codon(request, context)]
        total = time.perf_counter() - started
        context.stderr.close()
    finally:
        agent.AgentPass._complete = complete  # type: ignore[method-assign]
        agent.StreamedReply.add = add_chunk  # type: ignore[method-assign]
    turns = sum(1 for r in records if r.get("type") == "assistant")
    assert records[-1].get("subtype") == "success", records[-1]
    # Putting the chunks together runs inside _complete but is the harness's work.
    overhead = total - (provider_s - assembly_s)
    return {"turns": turns, "total_s": total, "overhead_s": overhead}


def validate_times(base: Path, runs: int) -> list[float]:
    hank = base / "pi-hank"
    hank.mkdir()
    codons = [{"id": f"c{i}", "name": f"C{i}", "model": spec, "continuationMode": "fresh",
               "promptText": "Do it."}
              for i, spec in enumerate(["gpt-5.2", "pi/deepseek/deepseek-chat",
                                        "pi/google/gemini-2.5-flash", "gemini-2.5-flash",
                                        "pi/anthropic/claude-haiku-4-5"])]
    (hank / "hank.json").write_text(json.dumps({"hank": codons}))
    data = base / "pi-data"  # a small data folder: validate hashes it
    data.mkdir()
    (data / "input.txt").write_text("one line\n")
    env = {**os.environ, "HANKWEAVE_HOME": str(base / "home")}
    times = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "hankweave", "validate", str(hank),
                               str(data)], capture_output=True, text=True, check=False,
                              cwd=base, env=env)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"validate failed: {done.stdout}{done.stderr}")
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 conversations")
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    from hankweave.mock_provider.server import client_env

    with tempfile.TemporaryDirectory(prefix="hankweave-pi-bench-") as tmp:
        base = Path(tmp)
        # First, while this process has not loaded litellm (its threads would compete).
        validate = validate_times(base, 5)
        script_path = base / "script.json"
        script_path.write_text(json.dumps(script(args.turns)))
        # The mock in its own process: its work must not count as the harness's.
        server, base_url = _serve_process(script_path, None)
        try:
            env = client_env(base_url)
            asyncio.run(conversation(base, env, -1))  # warm-up: imports, first request
            results = [asyncio.run(conversation(base, env, i)) for i in range(runs)]
        finally:
            server.terminate()
            server.wait(timeout=10)
        per_turn = [r["overhead_s"] / r["turns"] * 1000 for r in results]
    overhead = statistics.median(per_turn)
    validate_s = statistics.median(validate)
    print(json.dumps({
        "benchmark": "pi_harness", "turns": results[0]["turns"], "conversations": runs,
        "overhead_ms_per_turn": round(overhead, 3),
        "overhead_ms_per_turn_max": round(max(per_turn), 3),
        "conversation_s_median": round(statistics.median(r["total_s"] for r in results), 3),
        "validate_s": round(validate_s, 3), "targets": {"overhead_ms_per_turn": 5.0,
                                                         "validate_s": 0.5},
        "meets_targets": overhead <= 5.0 and validate_s <= 0.5}))


if __name__ == "__main__":
    main()
