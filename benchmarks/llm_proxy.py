"""What the LLM proxy adds to each agent request: latency in total and to the first byte.

A small aiohttp provider streams a fixed Anthropic answer of ``--events`` server-sent events
(``message_start`` with its usage, text deltas, ``message_delta`` with the output, ...), one
write per event, ``--gap-ms`` apart (1 ms: each reaches the proxy on its own, as a real
stream's do; 0: all at once); it runs in its own process.  The proxy runs in another, as
``hankweave run --proxy`` runs it (:class:`~hankweave.proxy.server.LlmProxy`, its JSONL
request log on; ``--no-log`` turns it off), metering every answer.  This process is the agent: one aiohttp
session per path, each with one keep-alive connection, sends ``POST /v1/messages``
(``stream: true``) and reads each answer to its end, alternating direct to the provider and
through the proxy (A B A B ...), so both see the same state of the machine.  ``--warmup``
pairs first are not counted; every proxied answer must be byte for byte the direct one.

* ``direct`` / ``proxied``: ``p50_ms`` / ``p95_ms`` from sending a request until its answer
  ended, ``ttfb_p50_ms`` / ``ttfb_p95_ms`` until its first bytes arrived;
* ``added_p50_ms`` / ``added_ttfb_p50_ms``: the proxied p50 minus the direct p50;
* ``reads_per_answer_p50``: in how many reads the agent got an answer (how it was cut);
* ``proxy_cpu_ms_per_request``: the proxy process's CPU per request (warm-up included).

Prints one JSON line.  Targets: ``added_p50_ms`` <= 2 and ``added_ttfb_p50_ms`` <= 5.

Usage: python benchmarks/llm_proxy.py [--requests N] [--warmup N] [--events N] [--gap-ms MS]
                                     [--no-log] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

TARGETS = {"added_p50_ms": 2.0, "added_ttfb_p50_ms": 5.0}
BODY = json.dumps({"model": "claude-bench", "max_tokens": 1024, "stream": True,
                   "messages": [{"role": "user", "content": "Write a plan"}]}).encode()
HEADERS = {"content-type": "application/json", "x-api-key": "bench",
           "anthropic-version": "2023-06-01"}
READY = "listening on "


def answer_events(events: int) -> list[bytes]:
    """A streamed Messages answer of ``events`` events (at least 6)."""

    def sse(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

    deltas = max(1, events - 6)
    return [
        sse("message_start", {"type": "message_start", "message": {
            "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-bench",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 1200, "cache_read_input_tokens": 800,
                      "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
        sse("ping", {"type": "ping"}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}}),
        *(sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "text_delta", "text": f"The plan, part {n}: survey, write, polish. "}})
          for n in range(deltas)),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta",
                              "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                              "usage": {"output_tokens": 12 * deltas}}),
        sse("message_stop", {"type": "message_stop"}),
    ]


# ----- the two servers, each in its own process -----


async def _serve_provider(events: int, gap_s: float) -> None:
    from aiohttp import web

    chunks = answer_events(events)

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for index, chunk in enumerate(chunks):
            if gap_s and index:
                await asyncio.sleep(gap_s)
            await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/messages", stream)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(f"{READY}http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


async def _serve_proxy(provider_url: str, log_path: str) -> None:
    from hankweave.proxy.server import LlmProxy, upstreams_for

    proxy = LlmProxy(upstreams_for({}, provider_url),
                     log_path=Path(log_path) if log_path != "-" else None)
    await proxy.start()
    stopping = asyncio.Event()
    # Stopped as a run stops it, so the last request's record is written too.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    print(f"{READY}{proxy.base_url}", flush=True)
    await stopping.wait()
    await proxy.stop()


def _spawn(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, __file__, "--serve", *args],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith(READY):
        process.kill()
        raise RuntimeError(f"{args[0]} did not start: {line!r}")
    return process, line[len(READY):].strip()


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----- the agent -----


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index]


async def _one(session: aiohttp.ClientSession, url: str
               ) -> tuple[float, float, int, bytes]:
    """(seconds to the first bytes, seconds to the end, reads, the answer) of one request."""
    sent = time.perf_counter()
    first: float | None = None
    reads = 0
    received = bytearray()
    async with session.post(url, data=BODY, headers=HEADERS) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}: {await response.text()}")
        async for data in response.content.iter_any():
            if first is None:
                first = time.perf_counter()
            reads += 1
            received += data
    ended = time.perf_counter()
    assert first is not None
    return first - sent, ended - sent, reads, bytes(received)


def _figures(ttfbs: list[float], totals: list[float], reads: list[int]) -> dict[str, float]:
    ttfbs, totals = sorted(ttfbs), sorted(totals)
    return {"p50_ms": round(_percentile(totals, 0.5) * 1000, 3),
            "p95_ms": round(_percentile(totals, 0.95) * 1000, 3),
            "ttfb_p50_ms": round(_percentile(ttfbs, 0.5) * 1000, 3),
            "ttfb_p95_ms": round(_percentile(ttfbs, 0.95) * 1000, 3),
            # How the stream arrived: 1 when the events came at once, up to the event count.
            "reads_per_answer_p50": _percentile(sorted(reads), 0.5)}


async def _measure(direct_url: str, proxied_url: str, requests: int, warmup: int,
                   expected: bytes) -> dict[str, dict[str, float]]:
    timeout = aiohttp.ClientTimeout(total=30)
    urls = {"direct": f"{direct_url}/v1/messages",
            "proxied": f"{proxied_url}/anthropic/v1/messages"}
    ttfbs: dict[str, list[float]] = {name: [] for name in urls}
    totals: dict[str, list[float]] = {name: [] for name in urls}
    reads: dict[str, list[int]] = {name: [] for name in urls}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                     timeout=timeout) as direct, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                  timeout=timeout) as proxied:
        sessions = {"direct": direct, "proxied": proxied}
        for n in range(warmup + requests):
            for name, url in urls.items():  # A B A B: both see the same moment
                ttfb, total, count, received = await _one(sessions[name], url)
                if received != expected:
                    raise RuntimeError(f"the {name} answer differs from the provider's")
                if n >= warmup:
                    ttfbs[name].append(ttfb)
                    totals[name].append(total)
                    reads[name].append(count)
    return {name: _figures(ttfbs[name], totals[name], reads[name]) for name in urls}


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    log_path = None if args.no_log else workdir / "proxy" / "requests.jsonl"
    provider, provider_url = _spawn("provider", str(args.events), str(args.gap_ms))
    try:
        proxy, proxy_url = _spawn("proxy", provider_url, str(log_path or "-"))
        try:
            cpu = _cpu_s(proxy.pid)
            figures = asyncio.run(_measure(provider_url, proxy_url, args.requests, args.warmup,
                                           b"".join(answer_events(args.events))))
            cpu_end = _cpu_s(proxy.pid)
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)
    finally:
        provider.terminate()
        provider.wait(timeout=10)
    logged = sum(1 for _ in log_path.open()) if log_path is not None else None
    direct, proxied = figures["direct"], figures["proxied"]
    added = {"added_p50_ms": round(proxied["p50_ms"] - direct["p50_ms"], 3),
             "added_ttfb_p50_ms": round(proxied["ttfb_p50_ms"] - direct["ttfb_p50_ms"], 3)}
    ok = {name: added[name] <= limit for name, limit in TARGETS.items()}
    result: dict[str, Any] = {
        "benchmark": "llm_proxy", "requests": args.requests, "warmup": args.warmup,
        "events_per_answer": len(answer_events(args.events)), "gap_ms": args.gap_ms,
        "request_log": log_path is not None, "logged_requests": logged,
        "direct": direct, "proxied": proxied, **added}
    if cpu is not None and cpu_end is not None:
        result["proxy_cpu_ms_per_request"] = round(
            (cpu_end - cpu) * 1000 / (args.requests + args.warmup), 3)
    result.update(targets=TARGETS, ok=ok, meets_targets=all(ok.values()))
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        if sys.argv[2] == "provider":
            asyncio.run(_serve_provider(int(sys.argv[3]), float(sys.argv[4]) / 1000))
        else:
            asyncio.run(_serve_proxy(sys.argv[3], sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400,
                        help="measured requests on each path (direct, proxied)")
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--events", type=int, default=20,
                        help="server-sent events per answer")
    parser.add_argument("--gap-ms", type=float, default=1.0,
                        help="the provider's pause between two events, so that each arrives"
                             " on its own as a real stream's do (0: none; the events then"
                             " arrive together and the figures are the proxy's alone)")
    parser.add_argument("--no-log", action="store_true", help="no JSONL request log")
    parser.add_argument("--quick", action="store_true",
                        help="100 requests after 10 of warm-up (a few seconds)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.warmup = 100, 10
    with tempfile.TemporaryDirectory(prefix="hankweave-proxy-bench-") as tmp:
        print(json.dumps(run(args, Path(tmp))))


if __name__ == "__main__":
    main()
