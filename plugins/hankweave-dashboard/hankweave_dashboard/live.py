"""Live events of one execution for its page, resumable by seq.

While a runtime runs the execution, its events come from the runtime's WebSocket server (a
read-only connection: no token), asked for with ``afterSeq`` so nothing between the page's last
event and the live stream is missed.  When no runtime runs it, or the connection drops, the
journal after the last seq sent fills the gap, and the stream waits for the next runtime.  The
page receives them as server-sent events whose ``id`` is the seq, so a browser that reconnects
(``Last-Event-ID``) or a reloaded page (``afterSeq``) resumes exactly where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

from hankweave.api import ExecutionLayout

POLL_S = 0.5
"""How often a stream without a live runtime looks for new events and for a runtime."""
KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing a quiet stream."""


async def events_after(path: Path, after_seq: int, *, poll: float = POLL_S,
                       ) -> AsyncGenerator[dict[str, Any], None]:
    """The execution's events with a seq greater than ``after_seq``, oldest first, forever."""
    seq = after_seq
    while True:
        async for event in _from_runtime(path, seq):
            seq = event["seq"]
            yield event
        for event in await asyncio.to_thread(_from_journal, path, seq):
            seq = event["seq"]
            yield event
        await asyncio.sleep(poll)


async def _from_runtime(path: Path, after_seq: int) -> AsyncIterator[dict[str, Any]]:
    """The live runtime's events after ``after_seq`` until its connection closes; nothing when
    no runtime serves the execution."""
    from hankweave.api import ControlClient, NoServerError, server_address

    try:
        address = server_address(path)
        client = await ControlClient.connect(address.url, after_seq=after_seq)
    except NoServerError:
        return
    seq = after_seq
    async with client:
        async for message in client.messages():
            for event in _events_of(message):
                if event["seq"] > seq:
                    seq = event["seq"]
                    yield event


def _events_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The journaled events a server message carries (a ``history.batch`` carries many;
    replies, pongs and ``server.ready`` have no seq and are not events of the execution)."""
    if message.get("type") == "history.batch":
        found = (message.get("data") or {}).get("events") or []
        return [event for event in found if isinstance(event.get("seq"), int)]
    return [message] if isinstance(message.get("seq"), int) else []


def _from_journal(path: Path, after_seq: int) -> list[dict[str, Any]]:
    from hankweave.api import JournalReadReport, read_journal

    journal = ExecutionLayout(path).events_file
    try:
        return [event.to_wire() for event in read_journal(journal, after_seq=after_seq,
                                                          report=JournalReadReport(journal))
                if event.seq is not None]
    except OSError:
        return []  # no journal yet: the run has not started


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event: its seq as ``id``, the event as ``data``."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event['seq']}\nevent: hankweave\ndata: {data}\n\n".encode()


async def sse_stream(path: Path, after_seq: int) -> AsyncIterator[bytes]:
    """The page's event stream: a retry hint, then events, with keep-alive comments."""
    yield b"retry: 1000\n\n"
    events = events_after(path, after_seq)
    pending: asyncio.Task[dict[str, Any]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(events.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_S)
            if not done:
                yield b": keep-alive\n\n"
                continue
            event = pending.result()
            pending = None
            yield sse(event)
    finally:
        if pending is not None:  # the page went away while an event was awaited
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        await events.aclose()
