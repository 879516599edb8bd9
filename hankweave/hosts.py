"""Which ``Host`` headers a local HTTP server answers: the one rule against DNS rebinding.

A web page on ``attacker.example`` can make its own name resolve to 127.0.0.1 and then read
a local server as if it were its own origin; the browser then sends ``Host: attacker.example``.
A server that answers only to its own names is out of the page's reach.  Its names are the
loopback names, the address it is bound to, and (when it listens beyond loopback) this
machine's host name.  A bare IP address in ``Host`` is always accepted: a rebinding page reaches
the server only through a name it controls, and a page whose address is ours is served by us.
The port is not compared: rebinding cannot change it.

The WebSocket server of a run (``GET /api/execution`` and the WebSocket upgrade,
docs/websocket.md) and the dashboard plugin both apply it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

__all__ = ["LOCAL_HOST_NAMES", "host_allowed", "host_name", "local_host_names"]

LOCAL_HOST_NAMES: frozenset[str] = frozenset({"127.0.0.1", "localhost", "::1"})
"""The names every local server answers to."""


def host_name(header: str) -> str:
    """``Host`` without its port, brackets or trailing dot, in lower case: ``[::1]:8765`` is
    ``::1``, ``LocalHost.:8765`` is ``localhost``."""
    header = header.strip().lower()
    if header.startswith("["):
        name = header[1:header.find("]")] if "]" in header else header
    else:
        name = header.rsplit(":", 1)[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def local_host_names(bind_host: str) -> frozenset[str]:
    """The names a server bound to ``bind_host`` answers to."""
    names = set(LOCAL_HOST_NAMES)
    bound = host_name(bind_host) if bind_host else ""
    if bound and bound not in ("0.0.0.0", "::"):
        names.add(bound)
    if not _loopback(bound):  # reachable from other machines: by this machine's name too
        names.add(host_name(socket.gethostname()))
    return frozenset(names)


def host_allowed(header: str | None, names: Iterable[str]) -> bool:
    """Whether a request whose ``Host`` header is ``header`` may be answered by a server known
    by ``names`` (see :func:`local_host_names`).  No ``Host`` at all is refused."""
    name = host_name(header or "")
    if not name:
        return False
    return name in {host_name(known) for known in names} or _is_address(name)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
