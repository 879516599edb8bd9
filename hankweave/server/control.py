"""The live-control server: a running hank's events, and commands, over one WebSocket each.

:class:`ControlServer` subscribes to the run's :class:`~hankweave.events.bus.EventBus` and
fans every event out to the connected clients; it reads their commands, checks them against
the typed schemas of :mod:`hankweave.server.protocol` and the client's mode, and has the
:class:`~hankweave.runtime.commands.RuntimeCommands` of the runtime act on them, as the
CLI's signal handlers do.  ``docs/websocket.md`` describes the protocol; :func:`serve_runtime` is what
``hankweave run`` calls.

How the server keeps its promises:

* **Nothing missed, nothing twice, in order.**  A client that joins (handshake) is added to the
  fan-out *before* its history is read, with its live events held back; the server notes the
  last seq dispatched so far (the watermark), sends the journaled events up to it, then the
  held events, then switches the client to live delivery.  The journal is written before an
  event is dispatched, so every event up to the watermark is on disk when it is read.
* **The runtime never waits for a client.**  An event is encoded once, and written to each
  client's socket buffer without waiting.  A client whose buffer is full gets a bounded
  backlog, drained by its own task with backpressure; when that backlog overflows the client
  is told (``CLIENT_TOO_SLOW``) and disconnected.  The bus and the other clients go on.
* **A client cannot disturb the run.**  Malformed or oversized messages, unknown commands,
  commands without the right mode or at the wrong time get a typed ``error`` reply sent to
  that client only; exceptions in a handler are contained; disconnects are routine.
* **Locked down by default.**  127.0.0.1, a per-run token for control (``runtime.lock``, mode
  0600), read-only otherwise, and browsers refused (a web page could otherwise read the run's
  events from a local port).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import secrets
import shlex
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State

from hankweave import __version__
from hankweave.events.catalogue import (
    EVENT_SCHEMA_VERSION,
    EventError,
    ServerEvent,
    make_event,
    new_event_id,
)
from hankweave.events.journal import encode_event, read_journal
from hankweave.execution.layout import ExecutionLayout
from hankweave.fsutil import utc_now_iso
from hankweave.hosts import host_allowed, host_name, local_host_names
from hankweave.server.protocol import (
    CONTROL_COMMANDS,
    DEFAULT_MAX_FRAME,
    ClientMessage,
    ClientMode,
    ErrorCode,
    HandshakeMessage,
    HandshakeResponse,
    HandshakeResponseData,
    ProtocolError,
    command_response,
    error_event,
    parse_client_message,
)

if TYPE_CHECKING:
    from hankweave.events.bus import EventBus
    from hankweave.runtime.commands import RuntimeCommands
    from hankweave.runtime.orchestrator import Runtime
    from hankweave.state.boot import OwnedExecution

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_QUEUE",
    "ControlServer",
    "ControlServerError",
    "is_loopback",
    "serve_runtime",
]

log = logging.getLogger("hankweave.server")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_MAX_QUEUE: Final = 1024
"""Messages a client may have waiting before it counts as too slow and is disconnected."""
DEFAULT_WRITE_HIGH_WATER: Final = 256 * 1024
"""Bytes in a client's socket buffer above which its messages wait in its backlog."""
HISTORY_BATCH_EVENTS: Final = 500
HISTORY_BATCH_BYTES: Final = 256 * 1024
"""A ``history.batch`` holds at most this many events and (unless one event is larger) bytes:
well under the 1 MiB message limit of common WebSocket clients."""
HANDSHAKE_HISTORY: Final = 50
"""Events in ``handshake.response.eventHistory`` with ``sendPreviousEvents`` (the original's
``handshakeHistoryLimit``)."""
SLOW_CLIENT_CLOSE_TIMEOUT: Final = 1.0
"""Seconds a too-slow client gets to complete the closing handshake before the TCP connection
is cut (it is, by definition, not reading)."""
_HARD_FRAME_FACTOR: Final = 4
"""Frames up to ``max_frame`` are read; larger ones, up to this many times ``max_frame``, get a
``FRAME_TOO_LARGE`` reply; beyond that the WebSocket library closes the connection (code
1009) without reading them, so one client cannot make the server buffer without bound."""
_LIBRARY_KEEPALIVE_S: Final = 20.0
"""websockets' own ping interval and pong timeout, kept when ``idleTimeout`` is 0."""

_SHUTDOWN_COMMANDS: Final = frozenset({"server.shutdown", "server.force_shutdown"})
EXECUTION_PATH: Final = "/api/execution"
"""``GET`` it for the execution document (docs/state.md, "The execution document")."""


class ControlServerError(Exception):
    """The control server could not start (the port is taken, the address is not local...)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):  # the wildcard: connect through loopback
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class _Frame:
    """One outgoing message, encoded once for every client that receives it.

    ``text`` is the JSON (UTF-8); ``wire`` the complete WebSocket frame.  Server frames are not
    masked and no extension is negotiated (compression is off), so the same bytes are valid on
    every connection: fanning an event out costs one socket-buffer write per client.
    """

    __slots__ = ("text", "wire")

    def __init__(self, text: bytes) -> None:
        self.text = text
        self.wire = Frame(Opcode.TEXT, text).serialize(mask=False)

    @classmethod
    def of_event(cls, event: ServerEvent) -> _Frame:
        return cls(encode_event(event)[:-1])  # the journal's encoding, without its newline

    @classmethod
    def of_model(cls, model: Any) -> _Frame:
        return cls(model.model_dump_json(by_alias=True).encode())


class _Client:
    """One connection: its mode, and the queue between the event stream and its socket."""

    def __init__(self, server: ControlServer, ws: ServerConnection) -> None:
        self.server = server
        self.ws = ws
        self.id = new_event_id()
        self.address = _describe(ws.remote_address)
        self.mode: ClientMode | None = None
        """``None`` until the handshake."""
        self.live_from = 0
        """The watermark of the handshake: live events are those with a larger seq."""
        self.hold: list[_Frame] | None = None
        """Events held back while the client's history is sent (``None``: deliver them)."""
        self.out: list[bytes] = []
        """Frames for the socket, written together at the next loop iteration: one system
        call per client for a burst of events instead of one per event."""
        self.out_bytes = 0
        self._room = 0
        self.backlog: deque[_Frame] = deque()
        """Frames waiting for the socket buffer to drain (the client reads slowly)."""
        self.in_flight = 0
        self.dropped = False
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.sender = asyncio.create_task(self._send_backlog(), name=f"hankweave-client-{self.id}")

    def __repr__(self) -> str:
        return f"<client {self.id} {self.address} {self.mode or 'connecting'}>"

    def send(self, frame: _Frame) -> None:
        """Queue a message after everything queued before it; never waits."""
        # The hot path of the fan-out (once per event per client): the socket is asked for
        # its buffer size only for the first frame coalesced in a loop iteration.
        if self.dropped:
            return
        if self.out:
            if not self.backlog and self.out_bytes <= self._room:
                self.out.append(frame.wire)
                self.out_bytes += len(frame.wire)
                return
        elif not self.backlog and not self.in_flight and self.ws.protocol.state is State.OPEN:
            room = self.server.write_high_water - self.ws.transport.get_write_buffer_size()
            if room >= 0:
                self._room = room
                self.server._mark_dirty(self)
                self.out.append(frame.wire)
                self.out_bytes = len(frame.wire)
                return
        if self.ws.protocol.state is not State.OPEN:
            return
        self.backlog.append(frame)
        self._drained.clear()
        if len(self.backlog) > self.server.max_queue:
            self.server._drop_slow(self)
            return
        self._wake.set()

    def deliver(self, frame: _Frame) -> None:
        """An event (or a broadcast) for this client: held back while its history is sent."""
        if self.hold is not None:
            self.hold.append(frame)
            if len(self.hold) > self.server.max_hold:
                self.server._drop_slow(self)
            return
        self.send(frame)

    def flush(self) -> None:
        """Write the coalesced frames to the socket buffer."""
        if not self.out:
            return
        data = self.out[0] if len(self.out) == 1 else b"".join(self.out)
        self.out.clear()
        self.out_bytes = 0
        if not self.dropped and self.ws.protocol.state is State.OPEN:
            self.ws.transport.write(data)

    async def until_drained(self) -> None:
        """Wait until the backlog is written (the client reads at the pace it is sent to)."""
        while (self.backlog or self.in_flight) and not self.dropped:
            await self._drained.wait()

    async def _send_backlog(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self.backlog and not self.dropped:
                    self.flush()  # what was coalesced before the backlog goes first
                    frame = self.backlog.popleft()
                    self.in_flight += 1
                    try:
                        await self.ws.send(frame.text, text=True)  # waits while the buffer is full
                    finally:
                        self.in_flight -= 1
                self._drained.set()
        except ConnectionClosed:
            self.backlog.clear()
            self._drained.set()
        except Exception:  # never leave a waiter hanging on a backlog nobody drains
            log.exception("client %s: sending failed; disconnecting it", self.id)
            self.forget()
            self.ws.transport.abort()

    def forget(self) -> None:
        self.dropped = True
        self.out.clear()
        self.backlog.clear()
        self.hold = None
        self._drained.set()
        if self.sender is not asyncio.current_task():
            self.sender.cancel()


def _describe(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


_Handler = Callable[[_Client, Any], Awaitable[tuple[str, Any]]]
"""Answers one client message: the reply's type and data."""


class ControlServer:
    """Serves one run's event stream and commands over WebSocket.

    Args:
        bus: the run's event bus; its journal (if any) provides history.
        commands: what clients' commands act on (the runtime's
            :class:`~hankweave.runtime.commands.RuntimeCommands`); ``None`` serves events only
            (control is refused).
        token: the control token a read-write handshake must carry (``runtime.lock``'s
            ``token``); ``None`` makes every connection read-only.
        host, port: where to listen (port 0: a free port the OS chooses; see :attr:`port`).
        max_frame: the largest client message read, in bytes.
        max_queue: messages a client may have waiting before it is disconnected as too slow.
        write_high_water: socket-buffer bytes above which a client's messages wait in its
            backlog instead of being written at once.
        history_batch_events, history_batch_bytes: the bounds of one ``history.batch``.
        handshake_history: events in ``eventHistory`` with ``sendPreviousEvents``.
        server_info: the ``server.ready`` payload, without ``port`` (added once bound).
        allowed_origins: browser origins allowed to connect; by default none (requests with
            an ``Origin`` header, i.e. from web pages, are refused with HTTP 403).
    """

    def __init__(
        self,
        bus: EventBus,
        *,
        commands: RuntimeCommands | None = None,
        token: str | None = None,
        host: str = DEFAULT_HOST,
        port: int = 0,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_queue: int = DEFAULT_MAX_QUEUE,
        write_high_water: int = DEFAULT_WRITE_HIGH_WATER,
        history_batch_events: int = HISTORY_BATCH_EVENTS,
        history_batch_bytes: int = HISTORY_BATCH_BYTES,
        handshake_history: int = HANDSHAKE_HISTORY,
        server_info: Mapping[str, Any] | None = None,
        allowed_origins: Sequence[str] = (),
        idle_timeout: float = 0,
    ) -> None:
        if max_frame < 1 or max_queue < 1:
            raise ValueError("max_frame and max_queue must be positive")
        self._bus = bus
        self._commands = commands
        self._token = token
        self.host = host
        self.port = port
        self.max_frame = max_frame
        self.max_queue = max_queue
        self.max_hold = max_queue * 16
        self.write_high_water = write_high_water
        self.history_batch_events = history_batch_events
        self.history_batch_bytes = history_batch_bytes
        self.handshake_history = handshake_history
        self.idle_timeout = idle_timeout
        """Seconds within which a silent client that answers no ping is closed (the
        ``idleTimeout`` setting); 0: the websockets library's keepalive (a ping every 20 s,
        closed after 20 s without a pong)."""
        self._server_info = dict(server_info or _bare_server_info(bus))
        self._ready_frame: _Frame | None = None
        self._origins: list[Any] = [None, *allowed_origins]
        self._host_names = local_host_names(host)
        journal = bus.journal
        self._journal_path: Path | None = journal.path if journal is not None else None
        self._server: Server | None = None
        self._clients: dict[str, _Client] = {}
        self._live: list[_Client] = []  # replaced, never mutated: safe to iterate while sending
        self._dispatched_seq = 0
        self._inbox: deque[ServerEvent] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._unsubscribe: Callable[[], None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._dirty: list[_Client] = []
        self._flush_scheduled = False
        self._stopped = False
        self._handlers = self._command_handlers()

    def _command_handlers(self) -> dict[str, _Handler]:
        """What answers each message type (after the handshake and the mode check)."""
        return {
            "ping": self._ping,
            "ping.broadcast": self._ping_broadcast,
            "history.sync": self._history_sync,
            "checkpoint.list": self._checkpoint_list,
            "codon.next": self._codon_next,
            "codon.start": self._codon_start,
            "codon.skip": self._codon_skip,
            "codon.redo": self._codon_redo,
            "codon.forceStop": self._codon_force_stop,
            "interruption.answer": self._interruption_answer,
            "rollback.toCheckpoint": self._rollback_to_checkpoint,
            "rollback.toCodon": self._rollback_to_codon,
            "rollback.toLastSuccess": self._rollback_to_last_success,
            "server.shutdown": self._server_shutdown,
            "server.force_shutdown": self._server_force_shutdown,
        }

    # ----- lifecycle -----

    @property
    def url(self) -> str:
        """``ws://host:port`` to connect to (the wildcard address is given as loopback)."""
        return f"ws://{_url_host(self.host)}:{self.port}"

    @property
    def client_count(self) -> int:
        """Connections open right now (handshaken or not)."""
        return len(self._clients)

    @property
    def watcher_count(self) -> int:
        """Handshaken connections receiving the event stream."""
        return len(self._live)

    def _keepalive(self) -> float:
        """Seconds between pings, and waiting for each pong: half the idle timeout, so a client
        that stops answering is closed within it (as Bun's ``idleTimeout`` did in the
        original); without one, the websockets library's default."""
        return self.idle_timeout / 2 if self.idle_timeout > 0 else _LIBRARY_KEEPALIVE_S

    async def start(self) -> int:
        """Listen, join the event stream, and return the port.

        Raises:
            ControlServerError: the address cannot be bound.
        """
        if self._server is not None:
            return self.port
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:
            self._server = await serve(
                self._handle, self.host, self.port,
                compression=None,  # per-client deflate would cost more than loopback saves
                max_size=self.max_frame * _HARD_FRAME_FACTOR,
                write_limit=self.write_high_water,
                origins=self._origins,
                process_request=self._process_request,
                server_header=f"hankweave/{__version__}",
                ping_interval=self._keepalive(), ping_timeout=self._keepalive(),
            )
        except OSError as exc:
            raise ControlServerError(
                f"Cannot start the WebSocket server on {self.host}:{self.port}:"
                f" {exc.strerror or exc} (choose another port with -p, or 0 for any free"
                " one)") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._server_info["port"] = self.port
        try:
            self._ready_frame = _Frame.of_event(make_event("server.ready", self._server_info))
        except EventError:
            self._server.close()
            raise
        # Subscribing and reading the last seq with no await in between: everything up to it
        # is in the journal, everything after reaches _on_bus_event.
        self._unsubscribe = self._bus.subscribe(self._on_bus_event)
        self._dispatched_seq = self._bus.last_seq
        log.info("WebSocket server listening on %s", self.url)
        return self.port

    async def stop(self, reason: str = "hankweave runtime shutting down") -> None:
        """Close every connection (code 1001) and stop listening.  Idempotent."""
        if self._server is None or self._stopped:
            return
        self._stopped = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        # The last events (the run's end) go out before the closing frames.
        self._flush()
        draining = [asyncio.ensure_future(client.until_drained())
                    for client in self._clients.values() if client.backlog]
        if draining:
            _, late = await asyncio.wait(draining, timeout=2)
            for task in late:
                task.cancel()
        # Each connection is told why (Server.close itself takes no reason before websockets
        # 16); then the listener closes and waits for the handlers.
        for client in list(self._clients.values()):
            self._spawn(client.ws.close(CloseCode.GOING_AWAY, reason))
        self._server.close(close_connections=True)
        try:
            await asyncio.wait_for(self._server.wait_closed(), timeout=5)
        except TimeoutError:
            for client in list(self._clients.values()):
                client.ws.transport.abort()
        for client in list(self._clients.values()):
            client.forget()
        for task in list(self._tasks):
            task.cancel()
        log.info("WebSocket server stopped")

    def _spawn(self, coroutine: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """A plain HTTP request gets a JSON explanation instead of a WebSocket, except the
        read-only ``GET /api/execution`` (the execution document).  Either needs a ``Host``
        this server is known by (:mod:`hankweave.hosts`): a page that rebinds its own name to
        this address reads nothing."""
        host = request.headers.get("Host")
        if not host_allowed(host, self._host_names):
            return _json_response(connection, HTTPStatus.FORBIDDEN, {
                "error": "Forbidden host",
                "message": f"this server answers to {', '.join(sorted(self._host_names))} (or"
                           f" an IP address) only, not to the host {host_name(host or '')!r}"})
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return None
        path = request.path.split("?", 1)[0]
        if path == EXECUTION_PATH:
            return self._execution_document(connection)
        if path.startswith("/api/"):
            return _json_response(connection, HTTPStatus.NOT_FOUND, {
                "error": "Not found", "message": f"No endpoint {path}: the HTTP API has"
                                                 f" GET {EXECUTION_PATH} only"})
        return _json_response(connection, HTTPStatus.BAD_REQUEST, {
            "error": "HTTP API not available",
            "message": "This is a hankweave WebSocket server: connect with a WebSocket client.",
            "websocket": self.url,
            "help": "`hankweave attach -e DIR` watches a run; docs/websocket.md describes the"
                    " protocol.",
        })

    def _execution_document(self, connection: ServerConnection) -> Response:
        from hankweave.execution.document import document_of

        commands = self._commands
        if commands is None:
            return _json_response(connection, HTTPStatus.NOT_FOUND, {
                "error": "No execution", "message": "This server has no runtime"})
        document = document_of(commands.execution_dir, commands.state)
        return _json_response(connection, HTTPStatus.OK,
                              document.model_dump(mode="json", by_alias=True))

    # ----- the event stream -----

    def _on_bus_event(self, event: ServerEvent) -> None:
        """Bus subscriber: runs in the emitting thread, inside the bus's delivery."""
        if self._stopped or self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            if self._inbox:  # earlier events from another thread go first
                self._inbox.append(event)
                self._drain_inbox()
            else:
                self._dispatch(event)
        else:
            self._inbox.append(event)
            with contextlib.suppress(RuntimeError):  # the loop is closing
                self._loop.call_soon_threadsafe(self._drain_inbox)

    def _drain_inbox(self) -> None:
        while self._inbox:
            self._dispatch(self._inbox.popleft())

    def _dispatch(self, event: ServerEvent) -> None:
        seq = event.seq
        if seq is not None:
            if seq <= self._dispatched_seq:
                return  # read from the journal by whoever joined when it was emitted
            self._dispatched_seq = seq
        live = self._live
        if not live:
            return
        try:
            frame = _Frame.of_event(event)
        except EventError:
            log.exception("event %s (seq %s) cannot be sent", event.type, seq)
            return
        for client in live:
            if client.hold is None:
                client.send(frame)
            else:
                client.deliver(frame)

    def _mark_dirty(self, client: _Client) -> None:
        self._dirty.append(client)
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, []
        for client in dirty:
            client.flush()

    def _join_live(self, client: _Client) -> None:
        if client not in self._live:
            self._live = [*self._live, client]

    def _leave_live(self, client: _Client) -> None:
        if client in self._live:
            self._live = [c for c in self._live if c is not client]

    def _drop_slow(self, client: _Client) -> None:
        """Tell a client that fell behind, then disconnect it; nobody else waits for it."""
        if client.dropped:
            return
        client.dropped = True
        client.out.clear()
        client.backlog.clear()
        client.hold = None
        self._leave_live(client)
        log.warning("client %s (%s) fell behind (more than %d messages waiting); disconnected",
                    client.id, client.address, self.max_queue)
        notice = _Frame.of_event(error_event(
            "CLIENT_TOO_SLOW",
            f"This client fell behind the event stream (more than {self.max_queue} messages"
            " waiting) and is disconnected; reconnect with afterSeq to resume without a gap."))
        ws = client.ws
        if ws.protocol.state is State.OPEN:
            ws.transport.write(notice.wire)  # after what is buffered; never waits
        self._spawn(self._close_slow(ws))

    async def _close_slow(self, ws: ServerConnection) -> None:
        ws.close_timeout = SLOW_CLIENT_CLOSE_TIMEOUT
        try:
            await asyncio.wait_for(ws.close(CloseCode.TRY_AGAIN_LATER, "client too slow"),
                                   timeout=SLOW_CLIENT_CLOSE_TIMEOUT * 2)
        except Exception:  # a peer that does not read cannot close cleanly either
            ws.transport.abort()

    # ----- connections -----

    async def _handle(self, ws: ServerConnection) -> None:
        client = _Client(self, ws)
        self._clients[client.id] = client
        log.debug("client %s connected from %s", client.id, client.address)
        try:
            async for raw in ws:
                if client.dropped:
                    break
                try:
                    await self._on_message(client, raw)
                except ConnectionClosed:
                    raise
                except Exception:  # a bug in a handler must not end the server or the run
                    log.exception("client %s: message handling failed", client.id)
                    client.send(_Frame.of_event(error_event(
                        "COMMAND_FAILED", "The server failed to handle this message")))
        except ConnectionClosed:
            pass
        finally:
            self._leave_live(client)
            self._clients.pop(client.id, None)
            client.forget()
            log.debug("client %s disconnected", client.id)

    def _refuse(self, client: _Client, code: ErrorCode, message: str, *,
                command: str | None = None, command_id: str | None = None) -> None:
        client.send(_Frame.of_event(error_event(code, message, command=command,
                                                command_id=command_id)))

    async def _on_message(self, client: _Client, raw: str | bytes) -> None:
        try:
            message = parse_client_message(raw, max_frame=self.max_frame)
        except ProtocolError as exc:
            self._refuse(client, exc.code, exc.message, command=exc.command,
                         command_id=exc.command_id)
            return
        kind, command_id = message.type, message.id
        if isinstance(message, HandshakeMessage):
            await self._handshake(client, message)
            return
        if client.mode is None:
            self._refuse(client, "HANDSHAKE_REQUIRED", "Handshake required before sending"
                         " commands", command=kind, command_id=command_id)
            return
        if kind in CONTROL_COMMANDS:
            refusal = self._control_refusal(client, kind)
            if refusal is not None:
                self._refuse(client, refusal[0], refusal[1], command=kind, command_id=command_id)
                return
            log.info("client %s (%s): %s", client.id, client.address, kind)
        from hankweave.runtime.errors import RuntimeCommandError
        from hankweave.state.interruptions import AnswerError

        try:
            text, result = await self._handlers[kind](client, message)
        except (RuntimeCommandError, AnswerError) as exc:
            self._refuse(client, "COMMAND_REFUSED", str(exc), command=kind,
                         command_id=command_id)
            return
        except ConnectionClosed:
            raise
        except Exception as exc:
            log.exception("client %s: %s failed", client.id, kind)
            self._refuse(client, "COMMAND_FAILED", f"Command execution failed: {exc}",
                         command=kind, command_id=command_id)
            return
        client.send(_Frame.of_model(command_response(kind, command_id, text, result)))

    def _control_refusal(self, client: _Client, kind: str) -> tuple[ErrorCode, str] | None:
        if client.mode != "readandwrite":
            return ("INSUFFICIENT_PERMISSIONS",
                    f"{kind} needs a read-write connection: handshake with the control token"
                    " of .hankweave/runtime.lock (this connection is read-only)")
        commands = self._commands
        if kind == "ping.broadcast":
            return None
        if commands is None:
            return "NO_RUNTIME", "This server has no runtime to control"
        if kind in _SHUTDOWN_COMMANDS:
            return None  # a second shutdown escalates to a forced one
        if commands.shutting_down:
            return "SHUTTING_DOWN", "The runtime is shutting down"
        if commands.rolling_back:
            return "ROLLBACK_IN_PROGRESS", "A rollback is in progress; wait for rollback.completed"
        return None

    async def _handshake(self, client: _Client, message: HandshakeMessage) -> None:
        data = message.data
        mode: ClientMode = "readonly"
        notice: tuple[ErrorCode, str] | None = None
        if data.requested_mode == "readandwrite":
            if self._token is None:
                notice = ("NO_RUNTIME", "This server takes no commands; the connection is"
                                        " read-only")
            elif not data.token:
                notice = ("TOKEN_REQUIRED", "Control needs the token of .hankweave/runtime.lock;"
                                            " the connection is read-only")
            elif not secrets.compare_digest(data.token.encode(), self._token.encode()):
                log.warning("client %s (%s) sent a wrong control token; the connection is"
                            " read-only", client.id, client.address)
                notice = ("INVALID_TOKEN", "Wrong control token; the connection is read-only")
            else:
                mode = "readandwrite"
        # A repeated handshake: what was queued before it goes out first.
        await client.until_drained()
        # Join the fan-out with live events held back, and note the watermark, with no await
        # in between: events up to it are journaled, events after it are held.
        client.hold = []
        self._join_live(client)
        watermark = client.live_from = self._dispatched_seq
        client.mode = mode
        history: list[dict[str, Any]] = []
        if data.after_seq is None and data.send_previous_events and self.handshake_history > 0:
            history = await self._tail(client, watermark)
        client.send(_Frame.of_model(HandshakeResponse(data=HandshakeResponseData(
            client_id=client.id, mode=mode, event_history=history, total_events=watermark,
            last_seq=watermark))))
        if notice is not None:
            self._refuse(client, notice[0], notice[1], command="handshake",
                         command_id=message.id)
        if self._ready_frame is not None:
            client.send(self._ready_frame)
        self._announce_incomplete_codon(client)
        if data.after_seq is not None:
            await self._replay(client, data.after_seq, watermark)
        # Release the held events (more may arrive while earlier ones drain), then go live.
        while client.hold and not client.dropped:
            held, client.hold = client.hold, []
            for frame in held:
                client.send(frame)
                if len(client.backlog) >= self.max_queue // 2:
                    await client.until_drained()
        client.hold = None

    def _announce_incomplete_codon(self, client: _Client) -> None:
        commands = self._commands
        current = commands.codon_in_progress() if commands is not None else None
        if current is None or commands is None:
            return
        codon_id, status = current
        client.send(_Frame.of_event(make_event("incomplete.codon", {
            "codonId": codon_id, "codonName": commands.codon_name(codon_id),
            "message": f"Codon {codon_id} is {status}"})))

    # ----- history -----

    async def _tail(self, client: _Client, upto: int) -> list[dict[str, Any]]:
        """The last journaled events up to ``upto``, oldest first (for ``eventHistory``)."""
        path = self._journal_path
        if path is None:
            return []

        def read() -> list[dict[str, Any]]:
            events = [event.to_wire() for event in read_journal(
                path, after_seq=max(0, upto - self.handshake_history))
                if event.seq is not None and event.seq <= upto]
            return events[-self.handshake_history:]

        try:
            return await asyncio.to_thread(read)
        except OSError as exc:
            self._refuse(client, "HISTORY_UNAVAILABLE", f"The event journal cannot be read: {exc}")
            return []

    async def _replay(self, client: _Client, after_seq: int | None, upto: int) -> None:
        """Send the journaled events after ``after_seq`` up to ``upto`` as ``history.batch``
        messages, oldest first, paced by the client (one batch in its queue at a time)."""
        pages: Iterator[list[bytes]] = iter(())
        if self._journal_path is None:
            self._refuse(client, "HISTORY_UNAVAILABLE", "This server keeps no event journal")
        else:
            pages = _history_pages(self._journal_path, after_seq, upto,
                                   self.history_batch_events, self.history_batch_bytes)
        try:
            current = await self._next_page(client, pages)
            if current is None:
                client.send(_Frame(_batch_json([], has_more=False)))
                return
            while not client.dropped:
                following = await self._next_page(client, pages)
                client.send(_Frame(_batch_json(current, has_more=following is not None)))
                await client.until_drained()
                if following is None:
                    return
                current = following
        finally:
            close = getattr(pages, "close", None)
            if close is not None:
                close()

    async def _next_page(self, client: _Client, pages: Iterator[list[bytes]]) -> list[bytes] | None:
        try:
            return await asyncio.to_thread(next, pages, None)
        except OSError as exc:  # a missing journal included
            self._refuse(client, "HISTORY_UNAVAILABLE", f"The event journal cannot be read: {exc}")
            return None

    # ----- command handlers: each returns (acknowledgement text, result or None) -----

    def _commands_or_refuse(self) -> RuntimeCommands:
        from hankweave.runtime.errors import RuntimeCommandError

        if self._commands is None:
            raise RuntimeCommandError("This server has no runtime")
        return self._commands

    async def _ping(self, client: _Client, message: ClientMessage) -> tuple[str, Any]:
        client.send(_Frame.of_event(make_event("pong", {"message": "pong",
                                                        "timestamp": utc_now_iso()})))
        return "pong", None

    async def _ping_broadcast(self, client: _Client, message: ClientMessage) -> tuple[str, Any]:
        frame = _Frame.of_event(make_event("pong", {"message": "pong", "timestamp": utc_now_iso(),
                                                    "clientId": client.id}))
        receivers = [c for c in self._clients.values() if c.mode is not None]
        for receiver in receivers:
            receiver.deliver(frame)
        return f"pong sent to {len(receivers)} client(s)", None

    async def _history_sync(self, client: _Client, message: Any) -> tuple[str, Any]:
        await self._replay(client, message.data.after_seq, client.live_from)
        return f"history sent up to seq {client.live_from}", None

    async def _checkpoint_list(self, client: _Client, message: Any) -> tuple[str, Any]:
        listing = self._commands_or_refuse().list_checkpoints(message.data.run_id)
        data = {"runId": listing.run_id,
                "checkpoints": [entry.model_dump() for entry in listing.checkpoints],
                "currentBranch": listing.current_branch}
        client.send(_Frame.of_event(make_event("checkpoint.list", data)))
        return f"{len(listing.checkpoints)} checkpoint(s)", data

    async def _codon_next(self, client: _Client, message: Any) -> tuple[str, Any]:
        codon_id = self._commands_or_refuse().start_next()
        if codon_id is None:
            return "No more codons to run: the run completes", {"codonId": None}
        return f"Starting codon {codon_id}", {"codonId": codon_id}

    async def _codon_start(self, client: _Client, message: Any) -> tuple[str, Any]:
        data = message.data
        self._commands_or_refuse().start_codon(data.codon_id, skip_rig=data.skip_pre_commands)
        return f"Starting codon {data.codon_id}", {"codonId": data.codon_id}

    async def _codon_skip(self, client: _Client, message: Any) -> tuple[str, Any]:
        from hankweave.runtime.errors import RuntimeCommandError

        commands = self._commands_or_refuse()
        current = commands.codon_in_progress()
        if not commands.skip():
            raise RuntimeCommandError("No running codon to skip")
        codon_id = current[0] if current else None
        return f"Skipping codon {codon_id}", {"codonId": codon_id}

    async def _codon_redo(self, client: _Client, message: Any) -> tuple[str, Any]:
        codon_id = self._commands_or_refuse().redo()
        return f"Running codon {codon_id} again", {"codonId": codon_id}

    async def _codon_force_stop(self, client: _Client, message: Any) -> tuple[str, Any]:
        codon_id = self._commands_or_refuse().force_stop(message.data.reason)
        return f"Codon {codon_id} force stopped", {"codonId": codon_id}

    async def _interruption_answer(self, client: _Client, message: Any) -> tuple[str, Any]:
        import json as json_module

        from hankweave.state.interruptions import GivenAnswer

        data = message.data
        value = data.answer
        given = GivenAnswer(
            text=value if isinstance(value, str) else None, approve=data.approve,
            reject=data.reject,
            json_text=json_module.dumps(value) if value is not None and not isinstance(
                value, str) else None,
            extend=None if data.extend is None else str(data.extend))
        item = await self._commands_or_refuse().answer(
            data.interruption_id, given, data.answered_by or f"websocket:{client.id}")
        return (f"Answered {item.id}",
                {"interruptionId": item.id, "answer": item.answer,
                 "answeredBy": item.answered_by})

    async def _rollback_to_checkpoint(self, client: _Client, message: Any) -> tuple[str, Any]:
        data = message.data
        target = await self._commands_or_refuse().rollback_to_checkpoint(
            data.checkpoint_sha, auto_restart=data.auto_restart)
        return self._rolled_back(target)

    async def _rollback_to_codon(self, client: _Client, message: Any) -> tuple[str, Any]:
        data = message.data
        target = await self._commands_or_refuse().rollback_to_codon(
            data.codon_id, data.checkpoint_type, auto_restart=data.auto_restart)
        return self._rolled_back(target)

    async def _rollback_to_last_success(self, client: _Client, message: Any) -> tuple[str, Any]:
        target = await self._commands_or_refuse().rollback_to_last_success(
            auto_restart=message.data.auto_restart)
        return self._rolled_back(target)

    def _rolled_back(self, target: Any) -> tuple[str, Any]:
        commands = self._commands_or_refuse()
        where = target.codon_id or "the start"
        return (f"Rolled back to {where} ({target.checkpoint_type} checkpoint"
                f" {target.sha[:12]}); run {commands.run_id}",
                {"codonId": target.codon_id, "checkpoint": target.sha,
                 "checkpointType": target.checkpoint_type, "runId": commands.run_id})

    async def _server_shutdown(self, client: _Client, message: Any) -> tuple[str, Any]:
        from hankweave.runtime.orchestrator import CLIENT_REQUEST

        commands = self._commands_or_refuse()
        again = commands.shutting_down
        log.warning("shutdown requested by client %s (%s): %s", client.id, client.address,
                    message.data.reason or "no reason given")
        commands.request_shutdown(CLIENT_REQUEST)
        return ("Shutdown escalated to a forced one" if again else "Shutting down"), None

    async def _server_force_shutdown(self, client: _Client, message: Any) -> tuple[str, Any]:
        from hankweave.runtime.orchestrator import CLIENT_REQUEST

        commands = self._commands_or_refuse()
        log.warning("forced shutdown requested by client %s (%s): %s", client.id,
                    client.address, message.data.reason or "no reason given")
        commands.force_shutdown(CLIENT_REQUEST)
        return "Forced shutdown", None


def _json_response(connection: ServerConnection, status: HTTPStatus,
                   body: Mapping[str, Any]) -> Response:
    response = connection.respond(status, json.dumps(body))
    del response.headers["Content-Type"]  # a multi-dict: replace, not add
    response.headers["Content-Type"] = "application/json"
    return response


def _history_pages(path: Path, after_seq: int | None, upto: int, max_events: int,
                   max_bytes: int) -> Iterator[list[bytes]]:
    """The journal's events after ``after_seq`` up to seq ``upto``, encoded, in batches."""
    batch: list[bytes] = []
    size = 0
    for event in read_journal(path, after_seq=after_seq):
        if event.seq is not None and event.seq > upto:
            break
        line = encode_event(event)[:-1]
        if batch and (len(batch) >= max_events or size + len(line) > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(line)
        size += len(line) + 1
    if batch:
        yield batch


def _batch_json(lines: list[bytes], *, has_more: bool) -> bytes:
    """A ``history.batch`` message around already-encoded events (not parsed again)."""
    head = (f'{{"schemaVersion":{EVENT_SCHEMA_VERSION},"id":"{new_event_id()}",'
            f'"timestamp":"{utc_now_iso()}","type":"history.batch","data":{{"events":[')
    tail = b'],"hasMore":true}}' if has_more else b'],"hasMore":false}}'
    return head.encode() + b",".join(lines) + tail


def _bare_server_info(bus: EventBus) -> dict[str, Any]:
    """``server.ready`` of a server without a runtime: paths derived from the journal's."""
    journal = bus.journal
    layout = ExecutionLayout(journal.path.parent.parent.parent if journal is not None else Path())
    return {"serverVersion": __version__, "executionPath": str(layout.path),
            "agentRootPath": str(layout.agent_root), "dataPath": str(layout.data_link)}


def _server_info(runtime: Runtime) -> dict[str, Any]:
    layout = ExecutionLayout(runtime.execution_dir)
    info: dict[str, Any] = {
        "serverVersion": __version__,
        "executionPath": str(layout.path),
        "agentRootPath": str(layout.agent_root),
        "dataPath": str(layout.data_link),
    }
    if runtime.config.settings.output_directory is not None:
        info["outputDirectory"] = str(runtime.config.settings.output_directory)
    budget = runtime.budget
    if budget.max_dollars is not None or budget.max_seconds is not None:
        # Ours: lets a watcher show spending against the ceiling from the start.
        info["budget"] = {key: value for key, value in (
            ("maxDollars", budget.max_dollars), ("maxTimeSeconds", budget.max_seconds))
            if value is not None}
    return info


_SERVERS: weakref.WeakKeyDictionary[Runtime, ControlServer] = weakref.WeakKeyDictionary()


def server_of(runtime: Runtime) -> ControlServer | None:
    """The control server :func:`serve_runtime` started for ``runtime`` (stopped or not)."""
    return _SERVERS.get(runtime)


async def serve_runtime(
    runtime: Runtime,
    bus: EventBus,
    owned: OwnedExecution,
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    max_frame: int = DEFAULT_MAX_FRAME,
    idle_timeout: float = 0,
    notify: Callable[[str], None] | None = None,
    proxy_port: int | None = None,
) -> ControlServer:
    """Start the live-control server of a runtime; ``hankweave run`` calls this before boot.

    Binds ``host:port`` (port 0: a free one), writes the port (and the LLM proxy's,
    ``proxy_port``, which ``server.ready`` carries too) into ``runtime.lock`` (whose token
    authorises control), and tells the user where it listens, with a warning when the
    address is reachable from other machines.  Calling it again for the same runtime returns
    the running server.  Stop it with :meth:`ControlServer.stop` at shutdown, before the bus
    is closed.

    Raises:
        ControlServerError: the address cannot be bound.
        LockLostError: the lock is no longer ours (the server is stopped again).
    """
    running = _SERVERS.get(runtime)
    if running is not None:
        return running
    if notify is not None and not is_loopback(host):
        notify(f"warning: the WebSocket server listens on {host}, reachable from other"
               " machines; anyone who can reach it can watch the run, and the control token"
               " travels unencrypted")
    info = _server_info(runtime)
    if proxy_port is not None:
        info["proxyPort"] = proxy_port
    server = ControlServer(bus, commands=runtime.commands, token=owned.lock.token, host=host,
                           port=port, max_frame=max_frame, server_info=info,
                           idle_timeout=idle_timeout)
    await server.start()
    _SERVERS[runtime] = server
    try:
        owned.lock.update(port=server.port, proxy_port=proxy_port)
    except Exception:
        await server.stop()
        _SERVERS.pop(runtime, None)
        raise
    if notify is not None:
        notify(f"WebSocket server: {server.url} (watch: hankweave attach -e"
               f" {shlex.quote(str(runtime.execution_dir))})")
    return server
