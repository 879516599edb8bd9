"""Throughput and time to first byte of the scripted mock provider under 8 concurrent clients.

The mock runs as ``hankweave mock-provider serve`` runs it, in its own process (``--server
thread``: in a background thread of this process instead, as ``start_mock_provider`` runs it
in tests), with its JSONL request log on (``--no-log`` turns it off).  ``--clients`` aiohttp
sessions in this process, each with one keep-alive connection, ask in a loop for a streamed
Anthropic reply (``POST /v1/messages?beta=true``, ``stream: true``) of ``--chars`` characters
of text (~24 characters per ``text_delta``) and read each stream to its ``message_stop``.
``--warmup`` replies first are not counted.

* ``replies_per_s``: measured replies / wall time from the first request to the last reply;
* ``ttfb_p50_ms`` / ``ttfb_p99_ms``: from sending a request until its first event
  (``message_start``) arrived, over every measured reply.

Prints one JSON line.  Targets: ``replies_per_s`` >= 300 and ``ttfb_p99_ms`` <= 20.

Usage: python benchmarks/mock_provider.py [--replies N] [--clients N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

TEXT = "The plan is written: survey the data, write the findings, then polish them. "


def script(chars: int) -> dict[str, Any]:
    text = (TEXT * (chars // len(TEXT) + 1))[:chars]
    return {"rules": [{"name": "reply", "reply": {
        "text": text, "usage": {"inputTokens": 1200, "outputTokens": 80}}}]}


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index]


BODY = json.dumps({"model": "claude-mock", "max_tokens": 1024, "stream": True,
                   "messages": [{"role": "user", "content": "Write a plan"}]}).encode()
HEADERS = {"content-type": "application/json", "x-api-key": "mock",
           "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219"}


async def _one_reply(session: aiohttp.ClientSession, url: str) -> tuple[float, int]:
    """(seconds to the first event, events received) of one streamed reply."""
    sent = time.perf_counter()
    first: float | None = None
    buffer = b""
    async with session.post(url, data=BODY, headers=HEADERS) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {await response.text()}")
        async for data in response.content.iter_any():
            if first is None:
                first = time.perf_counter()
            buffer += data
    if not buffer.rstrip().endswith(b'{"type":"message_stop"}'):
        raise RuntimeError("the stream did not end with message_stop")
    assert first is not None
    return first - sent, buffer.count(b"\n\n")


async def _client(url: str, count: int, ttfbs: list[float], events: list[int]) -> None:
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(count):
            ttfb, received = await _one_reply(session, url)
            ttfbs.append(ttfb)
            events.append(received)


async def _measure(base_url: str, clients: int, replies: int, warmup: int) -> dict[str, Any]:
    url = f"{base_url}/v1/messages?beta=true"
    await asyncio.gather(*(_client(url, max(1, warmup // clients), [], [])
                           for _ in range(clients)))
    per_client = max(1, replies // clients)
    ttfbs: list[float] = []
    events: list[int] = []
    started = time.perf_counter()
    await asyncio.gather(*(_client(url, per_client, ttfbs, events) for _ in range(clients)))
    elapsed = time.perf_counter() - started
    ttfbs.sort()
    return {"replies": len(ttfbs), "events_per_reply": events[0] if events else None,
            "elapsed_s": round(elapsed, 3), "replies_per_s": round(len(ttfbs) / elapsed, 1),
            "ttfb_p50_ms": round(_percentile(ttfbs, 0.5) * 1000, 2),
            "ttfb_p99_ms": round(_percentile(ttfbs, 0.99) * 1000, 2),
            "ttfb_max_ms": round(ttfbs[-1] * 1000, 2) if ttfbs else None}


def _serve_process(script_path: Path, log_path: Path | None) -> tuple[subprocess.Popen[str], str]:
    args = ["serve", "--script", str(script_path)]
    if log_path is not None:
        args += ["--log", str(log_path)]
    code = ("from hankweave.cli.mock_provider_cmd import mock_provider_group; "
            f"mock_provider_group({args!r})")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("Mock provider listening on "):
        process.kill()
        raise RuntimeError(f"the mock provider did not start: {line!r}")
    return process, line.split()[-1]


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    script_path = workdir / "script.json"
    script_path.write_text(json.dumps(script(args.chars)))
    log_path = None if args.no_log else workdir / "requests.jsonl"
    if args.server == "thread":
        from hankweave.testing.mock_provider import start_mock_provider

        with start_mock_provider(script_path, log_path=log_path) as mock:
            figures = asyncio.run(_measure(mock.base_url, args.clients, args.replies,
                                           args.warmup))
    else:
        process, base_url = _serve_process(script_path, log_path)
        try:
            client_cpu, server_cpu = time.process_time(), _cpu_s(process.pid)
            figures = asyncio.run(_measure(base_url, args.clients, args.replies, args.warmup))
            # Warm-up included: the CPU each side spent per reply, to tell which side is busy.
            total = args.replies + args.warmup
            figures["client_cpu_ms_per_reply"] = round(
                (time.process_time() - client_cpu) * 1000 / total, 3)
            server_end = _cpu_s(process.pid)
            if server_cpu is not None and server_end is not None:
                figures["server_cpu_ms_per_reply"] = round(
                    (server_end - server_cpu) * 1000 / total, 3)
        finally:
            process.terminate()
            process.wait(timeout=10)
    logged = (sum(1 for _ in log_path.open()) if log_path is not None else None)
    return {"benchmark": "mock_provider", "server": args.server, "clients": args.clients,
            "reply_chars": args.chars, "request_log": log_path is not None,
            "logged_requests": logged, **figures,
            "meets_targets": figures["replies_per_s"] >= 300 and figures["ttfb_p99_ms"] <= 20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--replies", type=int, default=4000,
                        help="measured replies, spread evenly over the clients")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--chars", type=int, default=400, help="characters of reply text")
    parser.add_argument("--server", choices=("process", "thread"), default="process",
                        help="process: `hankweave mock-provider serve` in its own process;"
                             " thread: start_mock_provider in this process")
    parser.add_argument("--no-log", action="store_true", help="no JSONL request log")
    parser.add_argument("--quick", action="store_true",
                        help="400 replies after 40 of warm-up (a few seconds)")
    args = parser.parse_args()
    if args.quick:
        args.replies, args.warmup = 400, 40
    with tempfile.TemporaryDirectory(prefix="hankweave-mock-bench-") as tmp:
        print(json.dumps(run(args, Path(tmp))))


if __name__ == "__main__":
    main()
