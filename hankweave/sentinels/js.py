"""Sentinel code that is JavaScript (Eta templates) runs as JavaScript, in a sandbox.

The engine is V8 through ``mini-racer`` (PyPI), imported the first time a sentinel's Eta
template is compiled: ``hankweave --help``, ``inspect`` and ``validate`` of a hank without such
sentinels never load it.  A context is a bare ECMAScript realm: no ``require``, no file,
network, process or timer API; the only data in it is what a call passes, as JSON.  ``Date``
and ``Math.random`` are JavaScript's own (a template that prints ``new Date()`` renders the
time of the render, as in the original).

Every evaluation is bounded: :data:`EVAL_TIMEOUT_MS` of run time and :data:`EVAL_MAX_MEMORY`
of heap; going over either is a :class:`JavaScriptError` (``timeout`` / ``memory``), and the
context is replaced after it.  Each template has its own :class:`Sandbox` (a context costs
about 0.06 s, made on first use and kept), on a thread of its own; each call runs in a fresh function
scope, so only what a template puts on its own global object outlives a render.
"""

from __future__ import annotations

import atexit
import json
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

EVAL_TIMEOUT_MS = 1000
"""How long one evaluation may run (milliseconds)."""
EVAL_MAX_MEMORY = 256 * 1024 * 1024
"""How much heap the engine may hold during one evaluation (bytes)."""

_DATE_KEY = "__hankweave_date__"
_LINE = re.compile(r"<anonymous>:(\d+)")

ErrorKind = Literal["syntax", "runtime", "timeout", "memory"]


@dataclass
class JavaScriptError(Exception):
    """JavaScript that could not be compiled or run: what happened, on which line of the
    code (1-based; None when the engine does not say)."""

    kind: ErrorKind
    message: str
    line: int | None = None
    caret: int | None = None
    """A syntax error's 0-based column, where the engine's caret points."""

    def __str__(self) -> str:
        return self.message


def _to_json(value: Any) -> Any:
    if isinstance(value, datetime):
        return {_DATE_KEY: value.isoformat()}
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _error(exc: Exception, kind: ErrorKind) -> JavaScriptError:
    text = str(exc)
    found = _LINE.search(text)
    first = text.split("\n", 1)[0]
    message = first.split(": ", 1)[1] if found and ": " in first else first
    lines = text.split("\n")
    caret = lines[2].find("^") if kind == "syntax" and len(lines) > 2 else -1
    return JavaScriptError(kind, message.strip(), int(found.group(1)) if found else None,
                           caret if caret >= 0 else None)


class Sandbox:
    """The process's JavaScript context (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: Any = None
        self._closing_at_exit = False
        # mini-racer binds a context to the asyncio loop running where it is made, and then
        # refuses a timeout; the sentinels render on the runtime's loop.  So the context lives
        # on a thread of its own, with no loop, and every evaluation runs there.
        self._thread: ThreadPoolExecutor | None = None

    def _ready(self) -> Any:
        if self._context is None:
            from py_mini_racer import MiniRacer

            if not self._closing_at_exit:
                # V8's threads must be gone before the interpreter tears down, or the exit
                # can hang after an evaluation was terminated.
                atexit.register(self.close)
                self._closing_at_exit = True
            self._context = MiniRacer()
            # mini-racer's own timers: nothing a template or a schema should schedule.
            self._context.eval("delete globalThis.setTimeout; delete globalThis.clearTimeout")
        return self._context

    def close(self) -> None:
        """Release the context and its thread (the next evaluation makes new ones)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            thread.submit(self._discard).result()
        except RuntimeError:  # the interpreter is shutting down: its threads are stopping
            self._discard()
        thread.shutdown(wait=True)

    def _discard(self) -> None:
        context, self._context = self._context, None
        if context is not None:
            context.close()

    def check(self, function_source: str) -> None:
        """Compile ``function_source`` (a function expression) without calling it."""
        self._run(f"void ({function_source}\n)")

    def evaluate(self, code: str) -> Any:
        """The value of the script ``code``, as Python data."""
        return self._run(code)

    def call(self, function_source: str, argument: Mapping[str, Any]) -> Any:
        """``(function_source)(argument)``: ``argument`` arrives as JSON, a ``datetime`` in it
        as a ``Date``; what the function returns comes back as Python data."""
        data = json.dumps(argument, default=_to_json, ensure_ascii=False)
        reviver = (f"(k, v) => v !== null && typeof v === 'object' && '{_DATE_KEY}' in v"
                   f" ? new Date(v.{_DATE_KEY}) : v")
        return self._run(f"({function_source}\n)(JSON.parse({json.dumps(data)}, {reviver}))")

    def _run(self, code: str) -> Any:
        with self._lock:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(max_workers=1,
                                                  thread_name_prefix="hankweave-javascript")
            thread = self._thread
        return thread.submit(self._run_here, code).result()

    def _run_here(self, code: str) -> Any:
        from py_mini_racer import (
            JSEvalException,
            JSOOMException,
            JSParseException,
            JSTimeoutException,
        )

        context = self._ready()
        try:
            return context.eval(code, timeout=EVAL_TIMEOUT_MS, max_memory=EVAL_MAX_MEMORY)
        except JSTimeoutException:
            self._discard()  # a terminated isolate is not trusted again
            raise JavaScriptError("timeout", f"it ran longer than {EVAL_TIMEOUT_MS} ms and"
                                             " was stopped") from None
        except JSOOMException:
            self._discard()  # a fresh heap for the next evaluation
            raise JavaScriptError("memory", "it used more than"
                                            f" {EVAL_MAX_MEMORY // (1024 * 1024)} MB of"
                                            " memory and was stopped") from None
        except JSParseException as exc:
            raise _error(exc, "syntax") from None
        except JSEvalException as exc:
            raise _error(exc, "runtime") from None

