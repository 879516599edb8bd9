"""What the ``webhook`` sink costs a run whose receiver is down, or slow.

Runs the same offline hank (``--codons`` codons on the FakeHarness agent, in-memory
checkpoints, each codon a few scripted messages) as real ``hankweave run`` processes, one fresh
execution each, in three setups interleaved round by round (A B C, A B C, ...):

* ``none``: no sink enabled;
* ``up``: the webhook sink posting to a receiver on 127.0.0.1 that answers at once (what the
  sink itself costs: its imports, its thread, reading the events);
* ``dead``: the webhook sink posting to a closed port on 127.0.0.1 (every attempt refused);
* ``slow``: the webhook sink posting to a receiver on 127.0.0.1 that answers each request after
  ``--slow-s`` seconds.

The sink sends the default events (a pause, its answer, ``run.ended``, a budget warning) plus
``codon.started`` and ``codon.completed``, so a run makes ``2 * codons + 1`` messages.  The
figures are each setup's median wall time, and the median over rounds of its ratio to (and, for
``slow``, its difference from) ``none`` in the same round.  A dead receiver should
cost nothing visible (its retries run on the sink's own threads and the end of the run gives
up on a receiver that does not answer at once); a slow one costs at most the sink's
``flush_timeout_s`` (3 s) at the end of the run, which waits for the messages still being
sent.  ``handle_us`` is the in-process cost of one ``WebhookSink.handle`` call that makes a
message for a dead receiver (the sink's worker thread pays it, never the runtime).

Prints one JSON line.  Targets: ``dead_vs_up_ratio`` <= 1.1 (a dead receiver costs no more
than one that answers); ``slow_extra_s`` (the median extra time of ``slow`` over ``none``) <=
the flush timeout + 0.5 s.  ``up_extra_s`` is what the sink itself adds to a run (its imports,
reading the events, sending ``messages_per_run`` requests), reported without a target.
Needs the sink: pip install -e plugins/hankweave-sink-webhook
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SETUPS = ("none", "up", "dead", "slow")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SlowReceiver:
    """Answers every POST with 200 after ``delay_s``."""

    def __init__(self, delay_s: float) -> None:
        self.received = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay_s)
                receiver.received += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def write_hank(root: Path, codons: int, messages: int) -> None:
    (root / "hank").mkdir()
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("input\n")
    items = [{"id": f"c{i}", "name": f"Codon {i}", "model": "fake",
              "continuationMode": "fresh", "promptText": f"Write file {i}."}
             for i in range(codons)]
    (root / "hank" / "hank.json").write_text(json.dumps({"hank": items}))
    script = {"codons": {f"c{i}": {"messages": messages,
                                   "writeFiles": {f"out/file-{i}.txt": f"file {i}\n"}}
                         for i in range(codons)}}
    (root / "hank" / "script.json").write_text(json.dumps(script))


def run_once(root: Path, number: int, url: str | None) -> tuple[float, int]:
    """One ``hankweave run`` in a fresh execution: its wall time and exit code."""
    project = root / f"run-{number}"
    project.mkdir()
    if url is not None:
        events = ["interruption.created", "interruption.answered", "run.ended",
                  "budget.warning", "codon.started", "codon.completed"]
        (project / "hankweave.json").write_text(json.dumps({"events": {"sinks": [
            {"name": "webhook", "config": {"urls": [url], "events": events,
                                           "secretEnv": "BENCH_WEBHOOK_SECRET"}}]}}))
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("HANKWEAVE_") and "proxy" not in key.lower()}
    env.update({"HOME": str(root), "HANKWEAVE_HOME": str(root / "home"),
                "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness,"
                                            "hankweave.testing.memory_checkpoints",
                "HANKWEAVE_LOAD_PLUGINS": "sink-webhook",
                "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
                "HANKWEAVE_STRICT_PLUGINS": "1",
                "HANKWEAVE_FAKE_SCRIPT": str(root / "hank" / "script.json"),
                "BENCH_WEBHOOK_SECRET": "bench-secret"})
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hankweave", "run", str(root / "hank"),
                           str(root / "data"), "-e", str(project / "exec"), "--headless",
                           "--yes"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started, done.returncode


def handle_cost_us(events: int) -> float:
    """Microseconds per ``handle`` of a message-making event, the receiver dead."""
    from hankweave_sink_webhook.sink import WebhookSink

    logging.getLogger("hankweave").addHandler(logging.NullHandler())  # no last-resort output
    sink = WebhookSink(WebhookSink.Config.model_validate(
        {"urls": [f"http://127.0.0.1:{closed_port()}/hook"], "secret": "bench",
         "events": ["codon.completed"], "queueSize": events}))
    made = [{"seq": n, "id": f"ev-{n}", "timestamp": "2026-12-01T10:00:00.000Z",
             "type": "codon.completed", "runId": "r-1",
             "data": {"codonId": f"c{n}", "success": True, "cost": 0.01, "duration": 10,
                      "exitStatus": {"type": "success"}}} for n in range(events)]
    sink.handle(made[0])  # the first builds the event readers
    started = time.perf_counter()
    for event in made[1:]:
        sink.handle(event)
    elapsed = time.perf_counter() - started
    sink.flush_timeout_s = 0.5
    with contextlib.redirect_stderr(io.StringIO()):  # its "not delivered" warning: expected
        sink.close()
    return elapsed / (events - 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codons", type=int, default=8)
    parser.add_argument("--messages", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--slow-s", type=float, default=0.5,
                        help="seconds the slow receiver takes to answer each request")
    parser.add_argument("--handle-events", type=int, default=5000)
    args = parser.parse_args()

    slow, up = SlowReceiver(args.slow_s), SlowReceiver(0.0)
    urls = {"none": None, "up": up.url, "dead": f"http://127.0.0.1:{closed_port()}/hook",
            "slow": slow.url}
    times: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    codes: set[int] = set()
    try:
        with tempfile.TemporaryDirectory(prefix="hankweave-bench-webhook-") as tmp:
            root = Path(tmp)
            write_hank(root, args.codons, args.messages)
            run_once(root, 0, None)  # warm-up: bytecode, caches
            number = 1
            for _ in range(args.rounds):
                for setup in SETUPS:
                    seconds, code = run_once(root, number, urls[setup])
                    times[setup].append(seconds)
                    codes.add(code)
                    number += 1
        handle_us = handle_cost_us(args.handle_events)
    finally:
        slow.close()
        up.close()

    medians = {setup: statistics.median(values) for setup, values in times.items()}
    flush_s = 3.0
    # Paired within each round (a 2-core machine drifts over a minute): the median of the
    # rounds' ratios and differences.
    dead_ratio = statistics.median(d / n for d, n in zip(times["dead"], times["none"],
                                                         strict=True))
    dead_vs_up = statistics.median(d / u for d, u in zip(times["dead"], times["up"],
                                                         strict=True))
    slow_ratio = statistics.median(s / n for s, n in zip(times["slow"], times["none"],
                                                         strict=True))
    slow_extra = statistics.median(s - n for s, n in zip(times["slow"], times["none"],
                                                         strict=True))
    up_extra = statistics.median(u - n for u, n in zip(times["up"], times["none"],
                                                       strict=True))
    print(json.dumps({
        "benchmark": "webhook", "codons": args.codons, "rounds": args.rounds,
        "messages_per_run": 2 * args.codons + 1, "slow_receiver_s": args.slow_s,
        "exit_codes": sorted(codes),
        "median_s": {setup: round(value, 3) for setup, value in medians.items()},
        "up_received": up.received,
        "up_extra_s": round(up_extra, 3),
        "dead_ratio": round(dead_ratio, 3),
        "dead_vs_up_ratio": round(dead_vs_up, 3),
        "slow_ratio": round(slow_ratio, 3),
        "slow_extra_s": round(slow_extra, 3),
        "slow_received": slow.received,
        "handle_us": round(handle_us, 1),
        "targets": {"dead_vs_up_ratio_max": 1.1, "slow_extra_s_max": flush_s + 0.5},
        "meets_targets": dead_vs_up <= 1.1 and slow_extra <= flush_s + 0.5 and codes == {0},
    }))


if __name__ == "__main__":
    main()
