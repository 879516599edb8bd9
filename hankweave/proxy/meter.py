"""What an answer used, read from its bytes as they pass through the proxy.

Both protocols report usage in the answer itself, and in both a streamed answer reports it in
a few of its server-sent events only:

* Anthropic: ``message_start`` carries ``message.usage`` (the input, cache reads and writes),
  ``message_delta`` the cumulative ``usage.output_tokens``; a plain answer has ``usage``.
* OpenAI: the last chunk carries ``usage`` when the request asked for it
  (``stream_options.include_usage``, as litellm does); ``prompt_tokens`` counts cached ones,
  which ``prompt_tokens_details.cached_tokens`` names.

The meter never holds the stream back: it reads a copy of each chunk, and decodes only the
event lines that carry a ``usage`` object (a few per answer; OpenAI's other chunks say
``"usage":null``), so its cost per chunk is a byte search.
"""

from __future__ import annotations

import json
from typing import Any

from hankweave.proxy.types import WireProtocol
from hankweave.state.types import TokenUsage

MAX_PLAIN_BODY = 8 * 1024 * 1024
"""A plain (not streamed) answer larger than this is passed on but not metered."""

_MAX_LINE = 1024 * 1024
"""An event line longer than this is skipped (usage lines are a few hundred bytes)."""


class UsageMeter:
    """Feed it every chunk of one answer; :meth:`usage` is what the answer used."""

    def __init__(self, protocol: WireProtocol, streamed: bool) -> None:
        self.protocol = protocol
        self.streamed = streamed
        self._buffer = bytearray()
        self._fields: dict[str, int] = {}
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        if self._overflow:
            return
        self._buffer += chunk
        if not self.streamed:
            if len(self._buffer) > MAX_PLAIN_BODY:
                self._overflow = True
                self._buffer.clear()
            return
        end = self._buffer.rfind(b"\n")
        if end < 0:
            if len(self._buffer) > _MAX_LINE:
                self._buffer.clear()
            return
        lines, self._buffer = bytes(self._buffer[:end]), self._buffer[end + 1:]
        if b'"usage"' not in lines:
            return
        for line in lines.split(b"\n"):
            # OpenAI sends "usage":null in every chunk but the last: only objects count.
            if line.startswith(b"data:") and (b'"usage":{' in line or b'"usage": {' in line):
                self._event(line[5:])

    def usage(self) -> TokenUsage | None:
        """What the answer reported it used (None: it reported nothing)."""
        if not self.streamed and self._buffer and not self._overflow:
            self._event(bytes(self._buffer), plain=True)
            self._buffer.clear()
        if not self._fields:
            return None
        return TokenUsage(
            input_tokens=self._fields.get("input", 0),
            output_tokens=self._fields.get("output", 0),
            cache_read_tokens=self._fields.get("cache_read", 0),
            cache_creation_tokens=self._fields.get("cache_creation", 0))

    def _event(self, data: bytes, *, plain: bool = False) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        usage = event.get("usage")
        if self.protocol == "anthropic" and not plain and event.get("type") == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
        if isinstance(usage, dict):
            (self._anthropic if self.protocol == "anthropic" else self._openai)(usage)

    def _anthropic(self, usage: dict[str, Any]) -> None:
        # Later events carry the same fields cumulatively (output_tokens grows): the last wins.
        for name, key in (("input_tokens", "input"), ("output_tokens", "output"),
                          ("cache_read_input_tokens", "cache_read"),
                          ("cache_creation_input_tokens", "cache_creation")):
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                self._fields[key] = value

    def _openai(self, usage: dict[str, Any]) -> None:
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        cached = cached if isinstance(cached, int) and not isinstance(cached, bool) else 0
        if isinstance(prompt, int) and not isinstance(prompt, bool):
            self._fields["input"] = max(0, prompt - cached)
            self._fields["cache_read"] = cached
        if isinstance(completion, int) and not isinstance(completion, bool):
            self._fields["output"] = completion
