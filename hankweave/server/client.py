"""A small client of the live-control protocol, for ``hankweave attach``, ``hankweave ctl`` and
tests.

:func:`server_address` finds a running execution's server from its ``runtime.lock`` (port and
control token) and says clearly why there is none; :class:`ControlClient` connects, does the
handshake, iterates over what the server sends and sends commands, waiting for their reply.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shlex
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from hankweave.execution.layout import ExecutionLayout
from hankweave.fsutil import pid_alive
from hankweave.server.protocol import ClientMode
from hankweave.state.lock import LockCorruptError, lock_path, read_lock

__all__ = [
    "CommandReply",
    "ControlClient",
    "ControlRefusedError",
    "NoServerError",
    "ServerAddress",
    "server_address",
]

DEFAULT_HOST = "127.0.0.1"


class NoServerError(Exception):
    """No live-control server can be reached; the message says why, in one paragraph."""


class ControlRefusedError(Exception):
    """The server did not grant control (a missing or wrong token)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ServerAddress:
    """Where a runtime's server listens, and the token that authorises control."""

    url: str
    token: str | None = field(default=None, repr=False)
    pid: int | None = None


def server_address(execution_dir: Path | str, *, host: str = DEFAULT_HOST,
                   port: int | None = None) -> ServerAddress:
    """The server of the runtime running on ``execution_dir``, from its ``runtime.lock``.

    ``port`` overrides the lock's port (the token still comes from the lock).

    Raises:
        NoServerError: no runtime runs there, it has no server (yet), or the lock cannot be
            read; the message names the file and what to do.
    """
    execution_dir = Path(execution_dir)
    hankweave_dir = ExecutionLayout(execution_dir).hankweave_dir
    if not hankweave_dir.is_dir():
        raise NoServerError(f"{execution_dir} is not an execution directory (it has no"
                            " .hankweave/); give the directory `hankweave run -e` used")
    path = lock_path(hankweave_dir)
    try:
        lock = read_lock(hankweave_dir)
    except PermissionError:
        raise NoServerError(f"Cannot read {path}: permission denied. It holds the control token"
                            " and is readable only by the user who started the run.") from None
    except LockCorruptError as exc:
        raise NoServerError(str(exc)) from None
    except OSError as exc:
        raise NoServerError(f"Cannot read {path}: {exc}") from None
    if lock is None:
        raise NoServerError(f"No hankweave runtime is running on {execution_dir} (no"
                            f" {path.name}); start one with `hankweave run -e"
                            f" {shlex.quote(str(execution_dir))}`")
    if not lock.on_this_host:
        raise NoServerError(f"The runtime on {execution_dir} runs on host {lock.host} (pid"
                            f" {lock.pid}); its server listens on that machine only")
    if lock.pid != os.getpid() and not pid_alive(lock.pid):
        raise NoServerError(f"The runtime that wrote {path} (pid {lock.pid}) is no longer"
                            " running; start it again with `hankweave run -e"
                            f" {shlex.quote(str(execution_dir))}`")
    chosen = port if port is not None else lock.port
    if chosen is None:
        raise NoServerError(f"The runtime on {execution_dir} (pid {lock.pid}) has no WebSocket"
                            " server yet; it may still be starting. Try again in a moment.")
    url_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return ServerAddress(url=f"ws://{url_host}:{chosen}", token=lock.token, pid=lock.pid)


@dataclass(frozen=True)
class CommandReply:
    """The server's answer to one command: a ``command.response`` or a typed ``error``."""

    ok: bool
    command: str
    message: str
    code: str | None = None
    """The error code when refused (``COMMAND_REFUSED``, ``INSUFFICIENT_PERMISSIONS``...)."""
    result: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


_ids = itertools.count(1)


class ControlClient:
    """One connection to a live-control server, after its handshake.

    Use :meth:`connect` (an async context manager too)::

        async with await ControlClient.connect(url, after_seq=0) as client:
            async for message in client.messages():
                ...
    """

    def __init__(self, ws: ClientConnection, handshake: dict[str, Any],
                 early: list[dict[str, Any]]) -> None:
        self._ws = ws
        self.handshake = handshake
        """The ``handshake.response`` message."""
        self._pending: deque[dict[str, Any]] = deque(early)

    @property
    def client_id(self) -> str:
        return str(self.handshake["data"]["clientId"])

    @property
    def mode(self) -> ClientMode:
        """The mode the server granted."""
        mode: ClientMode = self.handshake["data"]["mode"]
        return mode

    @property
    def last_seq(self) -> int:
        """The seq after which this connection receives events live."""
        return int(self.handshake["data"]["lastSeq"])

    @property
    def close_code(self) -> int | None:
        return self._ws.close_code

    @classmethod
    async def connect(cls, url: str, *, token: str | None = None, mode: str | None = None,
                      after_seq: int | None = None, send_previous_events: bool = False,
                      require_control: bool = False,
                      open_timeout: float = 5.0) -> ControlClient:
        """Connect to ``url`` and do the handshake.

        ``mode`` defaults to read-write with a token, read-only without.  With
        ``require_control``, a connection that was not granted control is closed and
        :class:`ControlRefusedError` says why.

        Raises:
            NoServerError: nothing answers at ``url`` (or not a hankweave server).
            ControlRefusedError: see ``require_control``.
        """
        try:
            # Unbounded buffering: a client that stops reading (ctl after its reply) must not
            # stall its closing handshake behind the events it was sent meanwhile.
            ws = await connect(url, compression=None, max_size=None, max_queue=None,
                               open_timeout=open_timeout, close_timeout=2)
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise NoServerError(f"Cannot connect to {url}: {reason or type(exc).__name__}."
                                " Is the runtime still running?") from None
        try:
            data: dict[str, Any] = {}
            if mode is not None:
                data["mode"] = mode
            if token is not None:
                data["token"] = token
            if after_seq is not None:
                data["afterSeq"] = after_seq
            if send_previous_events:
                data["sendPreviousEvents"] = True
            await ws.send(json.dumps({"type": "handshake", "data": data}))
            early: list[dict[str, Any]] = []
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), open_timeout))
                if message.get("type") == "handshake.response":
                    break
                early.append(message)  # not expected before the response; kept in order
            client = cls(ws, message, early)
            if require_control and client.mode != "readandwrite":
                raise ControlRefusedError(*await client._handshake_refusal())
            return client
        except (ConnectionClosed, TimeoutError, ValueError) as exc:
            await ws.close()
            raise NoServerError(f"{url} did not complete the hankweave handshake: {exc}") from None
        except BaseException:
            await ws.close()
            raise

    async def _handshake_refusal(self) -> tuple[str, str | None]:
        """The error the server sent about the handshake (why control was not granted)."""
        try:
            async with asyncio.timeout(2):
                while True:
                    message = await self._next()
                    self._pending.append(message)
                    data = message.get("data") or {}
                    if message.get("type") == "error" and \
                            (data.get("context") or {}).get("command") == "handshake":
                        return str(data.get("message")), data.get("code")
                    if message.get("type") == "server.ready":
                        break
        except (TimeoutError, ConnectionClosed):
            pass
        return "The server granted a read-only connection", None

    async def _next(self) -> dict[str, Any]:
        if self._pending:
            return self._pending.popleft()
        message: dict[str, Any] = json.loads(await self._ws.recv())
        return message

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        """Everything the server sends, in order, until the connection closes."""
        try:
            while True:
                yield await self._next()
        except ConnectionClosed:
            return

    async def send(self, command: str, data: dict[str, Any] | None = None,
                   command_id: str | None = None) -> str:
        """Send a command without waiting; return its id."""
        command_id = command_id or f"c{os.getpid()}-{next(_ids)}"
        message: dict[str, Any] = {"type": command, "id": command_id}
        if data:
            message["data"] = data
        await self._ws.send(json.dumps(message))
        return command_id

    async def command(self, command: str, data: dict[str, Any] | None = None, *,
                      timeout: float = 30.0) -> CommandReply:
        """Send a command and wait for its reply; other messages meanwhile are kept for
        :meth:`messages`.

        Raises:
            NoServerError: the connection closed first.
            TimeoutError: no reply within ``timeout`` seconds.
        """
        command_id = await self.send(command, data)
        skipped: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    message = await self._next()
                    reply = _reply_to(message, command_id)
                    if reply is not None:
                        return reply
                    skipped.append(message)
        except ConnectionClosed:
            raise NoServerError(f"The server closed the connection before answering {command}"
                                f" (code {self._ws.close_code})") from None
        finally:
            self._pending.extendleft(reversed(skipped))

    async def close(self) -> None:
        await self._ws.close()

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


def _reply_to(message: dict[str, Any], command_id: str) -> CommandReply | None:
    kind = message.get("type")
    data = message.get("data") or {}
    if kind == "command.response" and data.get("commandId") == command_id:
        return CommandReply(ok=True, command=data.get("command", ""),
                            message=data.get("message", ""), result=data.get("result"),
                            raw=message)
    context = data.get("context") if kind == "error" else None
    if isinstance(context, dict) and context.get("commandId") == command_id:
        return CommandReply(ok=False, command=context.get("command", ""),
                            message=data.get("message", ""), code=data.get("code"), raw=message)
    return None
