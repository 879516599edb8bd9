"""Fan-out of the live-control server: 50 clients, 10,000 events, throughput and latency.

The server runs in this process as ``hankweave run`` runs it: a real
:class:`~hankweave.events.bus.EventBus` with its journal on disk and a
:class:`~hankweave.server.ControlServer` subscribed to it, so every event is validated,
numbered, journaled, encoded and written to each client.  The clients run in separate
processes (``--client-procs``, default: one less than the CPUs), so their parsing does not
share the server's CPU.

Two phases of ``--events`` events each, every event to all ``--clients`` clients:

* **burst**: emitted as fast as the bus takes them (the loop runs every 100 events);
  ``events_per_s`` is events / (time from the first emit until the last client has the last
  event): events per second delivered to *all* clients (``deliveries_per_s`` = x clients);
* **paced**: emitted at ``--rate`` events per second (default 5,000, the target), after the
  burst has drained; ``p50_ms``/``p99_ms`` are the latencies from ``emit`` to receipt over
  every (event, client) pair.  ``time.monotonic()`` is system-wide on Linux, so the two
  processes' readings compare.

Clients: ``raw`` (default) is a minimal RFC 6455 client on asyncio (HTTP upgrade, frame
parsing, masking, ping and close) that finds the emit time in each frame without decoding the
rest of the JSON, so that on a small machine the figure is the server's and not the client's
parser; ``raw-decode`` decodes every message with ``json.loads``; ``websockets`` uses the
``websockets`` library's client.  The last two measure what a Python client can absorb.

Prints one JSON line.  Targets: ``events_per_s`` >= 5,000 and ``p99_ms`` <= 50.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import base64
import json
import os
import secrets
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = "bench"
_MARKER = b'"message":"bench"'


# ----- client side (a worker process) -----


class _RawClient(asyncio.Protocol):
    """A WebSocket client reduced to what the benchmark needs, built on asyncio.Protocol."""

    def __init__(self, host: str, port: int, sink: _Sink, done: asyncio.Future[None],
                 decode: bool) -> None:
        self.host, self.port, self.sink = host, port, sink
        self.decode = decode
        self.done = done
        self.buffer = bytearray()
        self.upgraded = False
        self.transport: asyncio.Transport | None = None

    def sent_at(self, payload: bytes) -> float | None:
        """The emit time of a benchmark event (``None`` for any other message)."""
        if self.decode:
            data = json.loads(payload).get("data") or {}
            return data["sentAt"] if data.get("message") == BENCH else None
        # Scanning for the one field needed keeps the client's cost per message below the
        # server's, so on a small machine the figure is the server's.
        if _MARKER not in payload:
            return None
        start = payload.index(b'"sentAt":') + 9
        end = payload.index(b",", start)
        return float(payload[start:end])

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        transport.write(  # type: ignore[attr-defined]
            f"GET / HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode())

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = secrets.token_bytes(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 65536:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        assert self.transport is not None
        self.transport.write(header + mask + masked)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if not buffer.startswith(b"HTTP/1.1 101"):
                raise RuntimeError(bytes(buffer[:end]).decode())
            del buffer[:end + 4]
            self.upgraded = True
            self._send(0x1, b'{"type":"handshake","data":{"mode":"readonly"}}')
        offset = 0
        size = len(buffer)
        now = time.monotonic
        while size - offset >= 2:
            opcode = buffer[offset] & 0x0F
            length = buffer[offset + 1] & 0x7F
            start = offset + 2
            if length == 126:
                if size - offset < 4:
                    break
                length = int.from_bytes(buffer[start:start + 2], "big")
                start += 2
            elif length == 127:
                if size - offset < 10:
                    break
                length = int.from_bytes(buffer[start:start + 8], "big")
                start += 8
            if size < start + length:
                break
            payload = bytes(buffer[start:start + length])
            offset = start + length
            if opcode == 0x1:
                sent_at = self.sent_at(payload)
                if sent_at is not None and self.sink.record(now(), sent_at) \
                        and not self.done.done():
                    self.done.set_result(None)
            elif opcode == 0x9:  # ping
                self._send(0xA, payload)
            elif opcode == 0x8 and not self.done.done():  # close
                self.done.set_exception(RuntimeError("server closed the connection"))
        del buffer[:offset]


class _Sink:
    """What one client measured: each event's latency, and when the burst's last arrived."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.latencies = array.array("d")
        self.burst_end = 0.0

    def record(self, now: float, sent_at: float) -> bool:
        """Record one benchmark event; True once both phases are complete."""
        self.latencies.append(now - sent_at)
        received = len(self.latencies)
        if received == self.events:
            self.burst_end = now
        return received == 2 * self.events


async def _raw_client(host: str, port: int, sink: _Sink, decode: bool) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    transport, _ = await loop.create_connection(
        lambda: _RawClient(host, port, sink, done, decode), host, port)
    try:
        await done
    finally:
        transport.close()


async def _library_client(host: str, port: int, sink: _Sink, decode: bool) -> None:
    from websockets.asyncio.client import connect

    async with connect(f"ws://{host}:{port}", compression=None, max_size=None) as ws:
        await ws.send('{"type":"handshake","data":{"mode":"readonly"}}')
        async for raw in ws:
            data = json.loads(raw).get("data") or {}
            if data.get("message") == BENCH and sink.record(time.monotonic(), data["sentAt"]):
                return


async def _worker(host: str, port: int, clients: int, events: int, kind: str,
                  out: Path) -> None:
    sinks = [_Sink(events) for _ in range(clients)]
    run = _library_client if kind == "websockets" else _raw_client
    decode = kind != "raw"
    await asyncio.gather(*(run(host, port, sink, decode) for sink in sinks))
    with open(out, "wb") as handle:
        for sink in sinks:
            handle.write(struct.pack("!Id", len(sink.latencies), sink.burst_end))
            sink.latencies.tofile(handle)


# ----- server side -----


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index]


async def _serve(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from hankweave.events.bus import EventBus
    from hankweave.events.journal import EventJournal
    from hankweave.server import ControlServer

    bus = EventBus(EventJournal(workdir / ".hankweave" / "events" / "events.jsonl"))
    server = ControlServer(bus)
    port = await server.start()
    procs = max(1, args.client_procs)
    shares = [args.clients // procs + (1 if i < args.clients % procs else 0)
              for i in range(procs)]
    outputs = [workdir / f"latencies-{i}.bin" for i in range(procs)]
    workers = [await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", "127.0.0.1", str(port), str(share),
        str(args.events), args.client, str(out))
        for share, out in zip(shares, outputs, strict=True) if share]
    try:
        deadline = time.monotonic() + 30
        while server.watcher_count < args.clients:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {server.watcher_count} of {args.clients} clients"
                                   " connected")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)

        # Burst: as fast as the bus takes them.
        burst_start = time.monotonic()
        for number in range(args.events):
            bus.emit("info", {"message": BENCH, "sentAt": time.monotonic(), "n": number})
            if number % 100 == 99:
                await asyncio.sleep(0)
        burst_emitted = time.monotonic()
        # The clients are still reading the burst: let them finish, so the paced phase
        # measures latency, not the tail of the burst.
        await asyncio.sleep(max(2.0, 4 * (burst_emitted - burst_start)))

        # Paced: --rate events per second, emitted in 1 ms ticks.
        paced_start = time.monotonic()
        for number in range(args.events):
            due = paced_start + number / args.rate
            delay = due - time.monotonic()
            if delay > 0.001:
                await asyncio.sleep(delay)
            bus.emit("info", {"message": BENCH, "sentAt": time.monotonic(),
                              "n": args.events + number})
        paced_emitted = time.monotonic()
        codes = [await worker.wait() for worker in workers]
        if any(codes):
            raise RuntimeError(f"a client process failed (exit codes {codes})")
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
        await server.stop()
        bus.close()

    burst: list[float] = []
    paced: list[float] = []
    burst_end = burst_emitted
    for out in outputs:
        with open(out, "rb") as handle:
            while header := handle.read(12):
                count, client_burst_end = struct.unpack("!Id", header)
                values = array.array("d")
                values.fromfile(handle, count)
                burst.extend(values[:args.events])
                paced.extend(values[args.events:])
                burst_end = max(burst_end, client_burst_end)
    # From the first emit to the moment the last client had the last burst event.
    burst_seconds = burst_end - burst_start
    burst.sort()
    paced.sort()
    events_per_s = args.events / burst_seconds
    p99_ms = _percentile(paced, 0.99) * 1000
    return {
        "benchmark": "websocket_fanout",
        "clients": args.clients,
        "events": args.events,
        "client": args.client,
        "client_processes": len(workers),
        "events_per_s": round(events_per_s),
        "deliveries_per_s": round(events_per_s * args.clients),
        "burst_emit_s": round(burst_emitted - burst_start, 3),
        "burst_p50_ms": round(_percentile(burst, 0.5) * 1000, 2),
        "burst_p99_ms": round(_percentile(burst, 0.99) * 1000, 2),
        "paced_rate": args.rate,
        "paced_achieved_rate": round(args.events / max(paced_emitted - paced_start, 1e-9)),
        "p50_ms": round(_percentile(paced, 0.5) * 1000, 2),
        "p99_ms": round(p99_ms, 2),
        "max_ms": round(paced[-1] * 1000, 2) if paced else None,
        "delivered": len(burst) + len(paced),
        "expected": 2 * args.events * args.clients,
        "meets_targets": events_per_s >= 5000 and p99_ms <= 50,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        host, port, clients, events, kind, out = sys.argv[2:8]
        asyncio.run(_worker(host, int(port), int(clients), int(events), kind, Path(out)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=5_000.0,
                        help="events per second in the paced (latency) phase")
    parser.add_argument("--client", choices=("raw", "raw-decode", "websockets"), default="raw",
                        help="raw: minimal client that finds the emit time without decoding"
                             " the JSON; raw-decode: the same, decoding every message;"
                             " websockets: the websockets library's client, decoding every"
                             " message")
    parser.add_argument("--client-procs", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="processes the clients are spread over")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hankweave-fanout-") as tmp:
        result = asyncio.run(_serve(args, Path(tmp)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
