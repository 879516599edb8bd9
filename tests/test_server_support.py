"""Helpers for the live-control server tests (this module holds no tests).

* :func:`bus_server`: a :class:`ControlServer` on a bare event bus with a journal on disk, for
  protocol tests that need no runtime;
* :class:`ServedRun`: a hank running in this process (FakeHarness agents, in-memory
  checkpoints) through the real launch path, with its WebSocket server, as ``hankweave run``
  serves it;
* small client helpers on the real ``websockets`` client.

Everything binds 127.0.0.1 and every server is stopped before the helper returns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any
from unittest import mock

from websockets.asyncio.client import ClientConnection, connect

from hankweave.app.launch import prepare, run_prepared
from hankweave.events.bus import EventBus
from hankweave.events.journal import EventJournal, read_journal
from hankweave.runtime import orchestrator
from hankweave.server import ControlServer, server_of
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Outcome, Project

TOKEN = "test-token-0123456789"


def run(coroutine: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
    """Run a test's coroutine; fail instead of hanging."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


@asynccontextmanager
async def bus_server(root: Path, **options: Any) -> AsyncIterator[tuple[EventBus, ControlServer]]:
    """A server (token :data:`TOKEN`) on a bus whose journal is under ``root``."""
    bus = EventBus(EventJournal(root / ".hankweave" / "events" / "events.jsonl"))
    options.setdefault("token", TOKEN)
    server = ControlServer(bus, **options)
    await server.start()
    try:
        yield bus, server
    finally:
        await server.stop()
        bus.close()


def journal_seqs(root: Path) -> list[int]:
    return [event.seq for event in read_journal(root / ".hankweave" / "events" / "events.jsonl")
            if event.seq is not None]


# ----- client helpers -----


async def open_client(url: str, **handshake: Any) -> tuple[ClientConnection, dict[str, Any]]:
    """Connect and hand shake (``handshake`` is the handshake's data); return the response."""
    # Unbounded client buffering: a test that stops reading must not stall the closing
    # handshake behind unread messages.
    ws = await connect(url, compression=None, max_size=None, max_queue=None)
    await ws.send(json.dumps({"type": "handshake", "data": handshake}))
    response = await receive(ws)
    assert response["type"] == "handshake.response", response
    return ws, response


async def receive(ws: ClientConnection, timeout: float = 5) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))  # type: ignore[no-any-return]


async def receive_until(ws: ClientConnection, predicate: Callable[[dict[str, Any]], bool],
                        timeout: float = 5) -> list[dict[str, Any]]:
    """Messages up to and including the first that matches ``predicate``."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            message = await receive(ws, timeout)
            seen.append(message)
            if predicate(message):
                return seen


async def command(ws: ClientConnection, kind: str, data: dict[str, Any] | None = None,
                  command_id: str = "cmd-1", timeout: float = 10) -> dict[str, Any]:
    """Send a command; return its reply (``command.response`` or ``error``)."""
    return (await command_messages(ws, kind, data, command_id, timeout))[-1]


async def command_messages(ws: ClientConnection, kind: str, data: dict[str, Any] | None = None,
                           command_id: str = "cmd-1", timeout: float = 10) -> list[dict[str, Any]]:
    """Send a command; return what arrived up to and including its reply."""
    message: dict[str, Any] = {"type": kind, "id": command_id}
    if data is not None:
        message["data"] = data
    await ws.send(json.dumps(message))
    return await receive_until(ws, lambda m: is_reply(m, command_id), timeout)


def is_reply(message: dict[str, Any], command_id: str) -> bool:
    data = message.get("data") or {}
    if message.get("type") == "command.response":
        return data.get("commandId") == command_id
    return message.get("type") == "error" and \
        (data.get("context") or {}).get("commandId") == command_id


def events_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The journaled events among messages, history batches unpacked, in order."""
    found: list[dict[str, Any]] = []
    for message in messages:
        if message.get("type") == "history.batch":
            found.extend(message["data"]["events"])
        elif isinstance(message.get("seq"), int):
            found.append(message)
    return found


# ----- a served run -----


@contextmanager
def served_runtimes() -> Iterator[list[orchestrator.Runtime]]:
    """While the block runs, collect every Runtime the launch path builds; each is served by
    the control server the launch starts before boot (:func:`server_of` finds it)."""
    runtimes: list[orchestrator.Runtime] = []

    class Served(orchestrator.Runtime):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            runtimes.append(self)

    with mock.patch.object(orchestrator, "Runtime", Served):
        yield runtimes


class ServedRun:
    """``hankweave run`` of ``project`` in this process, with its server; an async context.

    Inside the block: :attr:`runtime`, :attr:`server`, :attr:`url`, :attr:`token`.  On exit
    the run is stopped if still running (SIGINT semantics) and awaited; :attr:`outcome` holds
    its exit code, events and final state.
    """

    def __init__(self, project: Project, script: dict[str, Any] | None = None,
                 **options: Any) -> None:
        self.project = project
        self.script = script
        self.options = options
        self.events: list[dict[str, Any]] = []
        self.notices: list[str] = []
        self.outcome: Outcome | None = None
        self._task: asyncio.Task[int] | None = None
        self._patch = served_runtimes()

    async def __aenter__(self) -> ServedRun:
        use_script({"codons": self.script or {}})
        request = self.project.request(self.events, self.notices, **self.options)
        runtimes = self._patch.__enter__()
        self._task = asyncio.create_task(run_prepared(prepare(request), request))
        waits = self.options.get("autostart") is False

        def ready() -> bool:
            # Served, booted and, without autostart, waiting for its first command.
            runtime = runtimes[0] if runtimes else None
            return runtime is not None and server_of(runtime) is not None and \
                runtime.run_id is not None and (runtime.commands.waiting_for_command or not waits)

        async with asyncio.timeout(10):
            while not ready():
                if self._task.done():
                    self._task.result()
                    raise AssertionError("the run ended before its server started")
                await asyncio.sleep(0.005)
        self.runtime = runtimes[0]
        served = server_of(self.runtime)
        assert served is not None
        self.server: ControlServer = served
        self.url = self.server.url
        self.token = self.runtime.owned.lock.token
        return self

    async def wait(self, timeout: float = 15) -> int:
        """Wait for the run to end; its exit code."""
        assert self._task is not None
        return await asyncio.wait_for(asyncio.shield(self._task), timeout)

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        try:
            if not self._task.done():
                self.runtime.commands.request_shutdown("SIGINT")
            code = await asyncio.wait_for(self._task, 15)
        finally:
            if not self._task.done():
                self._task.cancel()
                with suppress(BaseException):
                    await self._task
            self._patch.__exit__(None, None, None)
            use_script(None)
        self.outcome = Outcome(code, self.events, self.project.state(), self.notices)
