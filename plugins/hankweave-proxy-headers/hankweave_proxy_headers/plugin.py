"""The plugin: registers the ``headers`` proxy middleware.  Its module is imported only when a
registry lists the middleware (a run with the proxy, ``hankweave validate``), so
``hankweave --help`` stays fast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hankweave.api import hookimpl


@hookimpl
def register_proxy_middleware(register: Callable[[Any], None]) -> None:
    from hankweave_proxy_headers.middleware import HeadersMiddleware

    register(HeadersMiddleware)
