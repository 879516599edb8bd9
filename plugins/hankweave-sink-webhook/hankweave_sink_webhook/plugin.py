"""The plugin: registers the ``webhook`` event sink.  Its HTTP client (urllib) and event
readers are imported only when a run enables the sink, so ``hankweave --help`` stays fast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hankweave.api import hookimpl


@hookimpl
def register_event_sinks(register: Callable[[Any], None]) -> None:
    from hankweave_sink_webhook.sink import WebhookSink

    register(WebhookSink)
