"""What the runtime adds to one Claude Code session: a 1-codon hank through ``hankweave run``
against a bare ``claude_agent_sdk.query()`` of the same prompt, against the same mock provider.

Both sides are what a user would start, timed from process start to exit:

* A: ``hankweave run HANK DATA -e NEW_DIR --headless`` with the Claude harness (state, event
  journal, git checkpoints, the codon log, the CLI started and ended);
* B: ``python -c "...query(prompt=..., options=...)"``: the SDK's own ``query()`` with the
  same model, workspace folder, permission mode and environment, read to its result.

The mock provider (``hankweave mock-provider serve``) runs in its own process for the whole
benchmark and answers both with the same reply.  Runs alternate A B A B ... after one warm-up
pair; the figure is the median of the per-pair ratios A/B.  Target: ``ratio`` <= 1.3.

Prints one JSON line.  Needs hankweave, hankweave-harness-claude (with claude-agent-sdk) and the
git checkpoint backend installed; offline.

Usage: python benchmarks/claude_harness.py [--pairs N] [--quick]
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

# The sibling benchmark's way of serving the mock in its own process (this folder is on
# sys.path when a benchmark runs as a script).
from mock_provider import _serve_process

PROMPT = "Say hello to the benchmark."
SCRIPT = {"rules": [{"name": "hello", "when": {"lastUserMessage": "Say hello"},
                     "reply": {"text": "Hello, benchmark!",
                               "usage": {"inputTokens": 1000, "outputTokens": 20}}}]}
MODEL = "claude-haiku-4-5"

BARE = """
import asyncio, os, sys
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

async def main():
    options = ClaudeAgentOptions(
        model=sys.argv[1], cwd=sys.argv[2], permission_mode="acceptEdits",
        allowed_tools=["Bash", "Edit", "Write", "Read"],
        system_prompt={"type": "preset", "preset": "claude_code"},
        setting_sources=["user"], env=dict(os.environ))
    async for message in query(prompt=sys.argv[3], options=options):
        if isinstance(message, ResultMessage):
            assert message.subtype == "success", message
    return 0

sys.exit(asyncio.run(main()))
"""


def _env(base_url: str, folder: Path) -> dict[str, str]:
    """This process's environment without any real key, pointed at the mock, with the CLI's
    folders under ``folder`` for the bare side (the harness makes its own)."""
    from hankweave.mock_provider.server import client_env

    env = {name: value for name, value in os.environ.items()
           if not name.endswith(("_API_KEY", "_AUTH_TOKEN"))
           and not name.startswith(("ANTHROPIC_", "CLAUDE_", "HANKWEAVE_"))}
    for name in ("config", "tmp"):
        (folder / name).mkdir(parents=True, exist_ok=True, mode=0o700)
    return {**env, **client_env(base_url), "CLAUDE_CONFIG_DIR": str(folder / "config"),
            "TMPDIR": str(folder / "tmp"), "CLAUDE_CODE_TMPDIR": str(folder / "tmp"),
            "XDG_RUNTIME_DIR": str(folder / "tmp")}


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def run(pairs: int, workdir: Path) -> dict[str, Any]:
    script_path = workdir / "script.json"
    script_path.write_text(json.dumps(SCRIPT))
    hank = workdir / "hank"
    hank.mkdir()
    (hank / "hank.json").write_text(json.dumps({
        "meta": {"name": "claude-bench", "version": "1.0.0"},
        "hank": [{"id": "hello", "name": "Hello", "model": MODEL, "continuationMode": "fresh",
                  "promptText": PROMPT}]}))
    data = workdir / "data"
    data.mkdir()
    (data / "input.txt").write_text("one line\n")
    server, base_url = _serve_process(script_path, None)
    try:
        env = _env(base_url, workdir / "bare")
        run_env = {**env, "HANKWEAVE_HOME": str(workdir / "home")}
        bare_cwd = workdir / "bare-workspace"
        bare_cwd.mkdir()

        def hankweave_once(index: int) -> float:
            return _timed([sys.executable, "-m", "hankweave", "run", str(hank), str(data),
                           "-e", str(workdir / f"exec-{index}"), "--headless"], run_env)

        def bare_once() -> float:
            return _timed([sys.executable, "-c", BARE, MODEL, str(bare_cwd), PROMPT], env)

        hankweave_once(-1)
        bare_once()
        a_times, b_times, ratios = [], [], []
        for index in range(pairs):
            a = hankweave_once(index)
            b = bare_once()
            a_times.append(a)
            b_times.append(b)
            ratios.append(a / b)
    finally:
        server.terminate()
        server.wait(timeout=10)
    ratio = statistics.median(ratios)
    return {"benchmark": "claude_harness", "pairs": pairs,
            "hankweave_run_s_median": round(statistics.median(a_times), 3),
            "bare_query_s_median": round(statistics.median(b_times), 3),
            "ratio": round(ratio, 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3), "target": 1.3, "meets_target": ratio <= 1.3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 pairs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hankweave-claude-bench-") as tmp:
        print(json.dumps(run(3 if args.quick else args.pairs, Path(tmp))))


if __name__ == "__main__":
    main()
