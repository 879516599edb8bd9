"""Live control: a running hank's events and commands over WebSocket.

:func:`serve_runtime` starts the server of a ``hankweave run``; :class:`ControlServer` is the
server itself; :mod:`hankweave.server.protocol` holds the message schemas and
:mod:`hankweave.server.client` the small client that ``hankweave attach`` and
``hankweave ctl`` use.  The protocol is described in ``docs/websocket.md``.

Importing this package imports the ``websockets`` library; the CLI imports it only for the
commands that need it.
"""

from __future__ import annotations

from hankweave.server.control import (
    DEFAULT_HOST,
    ControlServer,
    ControlServerError,
    is_loopback,
    serve_runtime,
    server_of,
)
from hankweave.server.protocol import DEFAULT_MAX_FRAME

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_FRAME",
    "ControlServer",
    "ControlServerError",
    "is_loopback",
    "serve_runtime",
    "server_of",
]
