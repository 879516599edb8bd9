"""The web dashboard: first render of a long execution's page, and live-event latency.

* **First render** (``first_render_p50_ms``, ``first_render_max_ms``): the server time of an
  execution page's data (``GET /api/executions/{id}``, everything the page shows first) for an
  execution of ``--records`` codon records (and as many plan entries) with an event journal of
  ``--events`` events, measured in a real ``hankweave dashboard`` process over HTTP on
  127.0.0.1 (the round trip, so the figure includes the transport).  The same execution with a
  journal of ``--events // 100`` events is measured alternately (A B A B …): ``journal_ratio``
  is big-journal time over small-journal time, ~1 when the page does not read the journal.
  Target: p50 and the first (cold) request <= 200 ms.  The budget panel (``…/budget``, which
  reads the journal's budget events once, then only what is new) is reported apart.
* **Live latency** (``emit_to_page_p99_ms``): a real ``hankweave run`` on the fake agent emits
  events at a steady pace; one client reads them straight from the runtime's WebSocket, another
  from the dashboard's event stream (what the page reads).  ``emit_to_page`` is from the event's
  timestamp (set when it is emitted) to its arrival through the dashboard;
  ``added_latency`` is its arrival through the dashboard minus its arrival over the WebSocket.
  Target: p99 emit to page <= 100 ms.

Prints one JSON line.  About a minute on 2 cores.

Usage: python benchmarks/dashboard.py [--records 1000] [--events 100000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from hankweave.events.catalogue import make_event
from hankweave.events.journal import encode_event
from hankweave.state.types import (
    CompletedCodon,
    ExecutionCodonEntry,
    FreshStart,
    HankweaveState,
    PlanCodon,
    Run,
    TokenUsage,
    dump_state,
)

RUN_ID = "1796000000000-bench"


def long_execution(path: Path, records: int, events: int) -> None:
    """An execution directory with ``records`` completed codons and ``events`` events."""
    hankweave = path / ".hankweave"
    (hankweave / "events").mkdir(parents=True)
    tokens = TokenUsage(input_tokens=25, output_tokens=654, cache_creation_tokens=683,
                        cache_read_tokens=56488)
    codons = [CompletedCodon(
        codon_id=f"step-{i}", start_time="2026-09-02T08:31:56.104Z", claude_pid=1,
        claude_log_path=f".hankweave/runs/{RUN_ID}/step-{i}-claude.log",
        claude_session_id="83b52eaa-5147-4130-aef4-818c9c663c77", current_cost=0.0105,
        current_tokens=tokens, assistant_message_count=3, extension_count=0,
        end_time="2026-09-02T08:32:08.079Z", final_cost=0.0105, final_tokens=tokens,
        result_message_received=True,
        completion_checkpoint="4ae2cf9d1a341fe1108487ddc2cea91ae4dd71ef") for i in range(records)]
    run = Run(run_id=RUN_ID, run_folder=str(hankweave / "runs" / RUN_ID),
              git_branch=f"run-{RUN_ID}", starting_conditions=FreshStart(), codons=codons,
              start_time="2026-09-02T08:31:56.071Z", end_time="2026-09-02T10:31:56.071Z",
              status="completed", server_pid=1)
    plan = [ExecutionCodonEntry(codon=PlanCodon(id=f"step-{i}", name=f"Step {i}"),
                                codon_id=f"step-{i}") for i in range(records)]
    state = HankweaveState(runs=[run], current_run_id=RUN_ID, execution_plan=plan)
    (hankweave / "state.json").write_bytes(dump_state(state))
    with open(hankweave / "events" / "events.jsonl", "wb") as journal:
        for seq in range(1, events + 1):
            event = make_event("assistant.action", {
                "codonId": f"step-{seq * records // (events + 1)}", "action": "message",
                "content": "Reading the file and changing what the task asks for."}, seq=seq)
            journal.write(encode_event(event))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def dashboard(home: Path, env: dict[str, str]) -> Any:
    process = subprocess.Popen(
        [sys.executable, "-m", "hankweave", "dashboard", "--home", str(home), "--port", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split(": ", 1)[1].strip()
        yield url.rstrip("/")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)


def first_render(root: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    home = root / "home"
    long_execution(home / "big", args.records, args.events)
    long_execution(home / "small", args.records, max(args.events // 100, 1))
    with dashboard(home, env) as url, httpx.Client(timeout=60) as client:
        rows = {row["name"]: row["id"] for row in client.get(f"{url}/api/executions").json()[
            "executions"]}

        def timed(name: str, suffix: str = "") -> float:
            start = time.perf_counter()
            response = client.get(f"{url}/api/executions/{rows[name]}{suffix}")
            elapsed = (time.perf_counter() - start) * 1000
            assert response.status_code == 200, response.text
            return elapsed

        cold = timed("big")
        big, small = [], []
        for _ in range(args.rounds):  # alternated, so drift hits both alike
            big.append(timed("big"))
            small.append(timed("small"))
        page = client.get(f"{url}/api/executions/{rows['big']}").json()
        assert len(page["plan"]) == args.records and page["lastSeq"] == args.events
        budget_cold = timed("big", "/budget")
        budget_warm = statistics.median(timed("big", "/budget") for _ in range(5))
    return {
        "records": args.records, "events": args.events,
        "first_render_cold_ms": round(cold, 1),
        "first_render_p50_ms": round(statistics.median(big), 1),
        "first_render_max_ms": round(max(big), 1),
        "small_journal_p50_ms": round(statistics.median(small), 1),
        "journal_ratio": round(statistics.median(big) / statistics.median(small), 3),
        "budget_cold_ms": round(budget_cold, 1), "budget_warm_ms": round(budget_warm, 1),
    }


def live_latency(root: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    hank, data, executions = root / "hank", root / "data", root / "executions"
    for folder in (hank, data, executions):
        folder.mkdir()
    (data / "input.txt").write_text("input\n")
    codons = ["warm", *(f"work-{i}" for i in range(args.codons))]
    (hank / "hank.json").write_text(json.dumps({"hank": [
        {"id": c, "name": c, "model": "fake", "continuationMode": "fresh", "promptText": c}
        for c in codons]}))
    script = {"warm": {"messages": 8, "delayMs": 250},  # the clients connect meanwhile
              **{c: {"messages": args.messages, "delayMs": args.delay_ms} for c in codons[1:]}}
    (hank / "script.json").write_text(json.dumps({"codons": script}))
    run_env = {**env, "HANKWEAVE_FAKE_SCRIPT": str(hank / "script.json")}
    execution = executions / "live"
    run = subprocess.Popen([sys.executable, "-m", "hankweave", "run", str(hank), str(data),
                            "-e", str(execution), "--headless", "--yes"], env=run_env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        with dashboard(executions, env) as url:
            arrivals = asyncio.run(_race(url, execution, run))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
    page = [a["page"] - a["emitted"] for a in arrivals]
    added = [a["page"] - a["socket"] for a in arrivals]
    return {"live_events": len(arrivals),
            "emit_to_page_p50_ms": round(_pct(page, 50), 1),
            "emit_to_page_p99_ms": round(_pct(page, 99), 1),
            "added_latency_p50_ms": round(_pct(added, 50), 1),
            "added_latency_p99_ms": round(_pct(added, 99), 1)}


async def _race(url: str, execution: Path, run: subprocess.Popen[bytes]) -> list[dict[str, float]]:
    from datetime import datetime

    from hankweave.api import ControlClient, NoServerError, server_address

    deadline = time.monotonic() + 60
    while True:
        try:
            address = server_address(execution)
            break
        except NoServerError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
    socket_at: dict[int, float] = {}
    page_at: dict[int, tuple[float, float]] = {}
    client = await ControlClient.connect(address.url)
    start_seq = client.last_seq
    async with httpx.AsyncClient(timeout=None) as http:
        rows = (await http.get(f"{url}/api/executions")).json()["executions"]
        ident = rows[0]["id"]

        async def direct() -> None:
            async for message in client.messages():
                if isinstance(message.get("seq"), int):
                    socket_at[message["seq"]] = time.time()

        async def through_dashboard() -> None:
            async with http.stream("GET", f"{url}/api/executions/{ident}/events",
                                   params={"afterSeq": start_seq}) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        event = json.loads(line[6:])
                        emitted = datetime.fromisoformat(event["timestamp"]).timestamp()
                        page_at[event["seq"]] = (time.time(), emitted)

        tasks = [asyncio.create_task(direct()), asyncio.create_task(through_dashboard())]
        while run.poll() is None:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
    skip = start_seq + 20  # the first events may come through both as history
    return [{"page": page_at[seq][0] * 1000, "emitted": page_at[seq][1] * 1000,
             "socket": socket_at[seq] * 1000}
            for seq in sorted(page_at) if seq > skip and seq in socket_at]


def _pct(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--codons", type=int, default=4)
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--delay-ms", type=int, default=50)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANKWEAVE_")}
    with tempfile.TemporaryDirectory(prefix="hankweave-bench-dashboard-") as scratch:
        root = Path(scratch)
        env.update({"HOME": scratch, "HANKWEAVE_HOME": str(root / "managed"),
                    "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness,"
                                                "hankweave.testing.memory_checkpoints",
                    "HANKWEAVE_LOAD_PLUGINS": "dashboard",
                    "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory"})
        result = {"benchmark": "dashboard", **first_render(root, args, env),
                  **live_latency(root, args, env)}
    result["targets_met"] = (result["first_render_p50_ms"] <= 200
                             and result["first_render_cold_ms"] <= 200
                             and result["emit_to_page_p99_ms"] <= 100)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
