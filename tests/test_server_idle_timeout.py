"""``idleTimeout`` (``--idle-timeout``): the WebSocket server closes a client that answers no
ping within that many seconds; a client that answers stays connected."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.test_server_support import bus_server, open_client, run


async def silent_client_lifetime(port: int, limit: float) -> float | None:
    """Upgrade a raw connection, then never answer: seconds until the server closes it (None:
    still open after ``limit``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    started = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(1024), limit):
            pass
    except TimeoutError:
        return None
    finally:
        writer.close()
    return time.monotonic() - started


def test_a_client_that_answers_no_ping_is_closed_within_the_idle_timeout(tmp_path: Path):
    async def scenario() -> float | None:
        async with bus_server(tmp_path, idle_timeout=1) as (_, server):
            return await silent_client_lifetime(server.port, limit=20)

    lifetime = run(scenario())

    # About 1-2 s; the bound has room for a loaded machine (CI runs two tox envs at once).
    assert lifetime is not None and lifetime < 10


def test_without_an_idle_timeout_a_silent_client_is_kept(tmp_path: Path):
    async def scenario() -> float | None:
        async with bus_server(tmp_path) as (_, server):
            return await silent_client_lifetime(server.port, limit=3)

    assert run(scenario()) is None


def test_a_client_that_answers_pings_stays_connected_past_the_idle_timeout(tmp_path: Path):
    async def scenario() -> bool:
        async with bus_server(tmp_path, idle_timeout=1) as (_, server):
            ws, _ = await open_client(server.url, token="test-token-0123456789")
            await asyncio.sleep(2.5)
            pong = await ws.ping()
            await asyncio.wait_for(pong, 10)
            await ws.close()
            return True

    assert run(scenario())
