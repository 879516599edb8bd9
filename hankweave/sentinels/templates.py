"""Sentinel prompt templates: Jinja2 in a sandbox, with the original's Eta templates translated.

A prompt is rendered once per trigger with the original's context:

========================  ==========================  =======================================
Eta (the original)        Jinja2                      value
========================  ==========================  =======================================
``it.events``             ``events`` / ``it.events``  the trigger's events (at most 1000)
``it.codon``              ``codon`` / ``it.codon``    ``{id, name, description, startTime}``
``it.world.currentTime``  ``world.currentTime``       when the trigger was queued
========================  ==========================  =======================================

A source containing ``<%`` is Eta: it is compiled to JavaScript as Eta compiles it
(:mod:`.eta`) and runs in the JavaScript sandbox (:mod:`.js`: V8, no file, network or process
access, bounded time and memory), so it has JavaScript's language and meanings and Eta's
whitespace.  Anything else is plain Jinja2 in its immutable sandbox (``trim_blocks`` on, so a
``{% for %}`` line leaves no blank line, and a missing name is an error rather than an empty
string); nothing in it runs as Python.  Two failures, as in the original: a
:class:`TemplateSyntaxError` is fatal to the sentinel, a :class:`TemplateRenderError` skips
the trigger.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Literal

from hankweave.sentinels import jsvalues
from hankweave.sentinels.eta import EtaSyntaxError, compile_eta, is_eta

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import SandboxedEnvironment

    from hankweave.sentinels.js import Sandbox

__all__ = [
    "MAX_TEMPLATE_EVENTS",
    "PromptTemplate",
    "PromptTemplateError",
    "TemplateRenderError",
    "TemplateSyntaxError",
    "render_sentinel_prompt",
    "sentinel_prompt_context",
]

MAX_TEMPLATE_EVENTS = 1000
"""The original passes a template at most this many of a trigger's events (the first ones)."""

_PROMPT_FILENAME = "<sentinel prompt>"  # tells the prompt's frames from its callbacks'

Dialect = Literal["eta", "jinja"]


class PromptTemplateError(Exception):
    """A prompt template failed; says what (``reason``) and where (``line``, ``snippet``)."""

    label = "Template error"

    def __init__(self, reason: str, line: int | None, snippet: str, hint: str = "") -> None:
        where = f" at line {line}: {snippet}" if line is not None else ""
        super().__init__(f"{self.label}: {reason}{where}{hint}")
        self.reason = reason
        self.line = line
        self.snippet = snippet


class TemplateSyntaxError(PromptTemplateError):
    """The template cannot be compiled: bad syntax or an unsupported Eta construct. Fatal to
    the sentinel (the original's ``template`` error, which unloads it)."""

    label = "Template syntax error"


class TemplateRenderError(PromptTemplateError):
    """Rendering failed for this context (missing name, wrong type, sandbox violation). The
    trigger is skipped; the sentinel stays loaded."""

    label = "Template rendering failed"


class PromptTemplate:
    """A compiled prompt template. Use :meth:`compile`, which caches by source as the original
    caches its Eta templates."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.dialect: Dialect = "eta" if is_eta(source) else "jinja"
        self._template: Template | None = None
        self._function: str | None = None
        self._sandbox: Sandbox | None = None
        """An Eta template's own JavaScript context: what one template leaves in its global
        object no other template sees."""
        if self.dialect == "eta":
            self._function = self._compile_eta()
        else:
            self._template = self._compile()

    @classmethod
    def compile(cls, source: str) -> PromptTemplate:
        """The template for ``source``, compiled once; raises :class:`TemplateSyntaxError`."""
        return _compiled(source)

    def render(self, context: Mapping[str, Any]) -> str:
        """Render with ``context`` (see :func:`sentinel_prompt_context`), also visible whole as
        ``it``; raises :class:`TemplateRenderError`."""
        if self._function is not None:
            return self._render_eta(context)
        assert self._template is not None
        variables = {"it": context, **context}
        try:
            return self._template.render(variables)
        except Exception as exc:  # the template is user code: any failure skips the trigger
            raise self._render_error(exc) from exc

    def _compile_eta(self) -> str:
        from hankweave.sentinels.js import JavaScriptError, Sandbox

        self._sandbox = Sandbox()
        try:
            function = compile_eta(self.source)
            self._sandbox.check(function)
        except EtaSyntaxError as exc:
            raise TemplateSyntaxError(exc.reason, exc.line, exc.snippet) from None
        except JavaScriptError as exc:
            raise TemplateSyntaxError(exc.message, exc.line, self._line(exc.line)) from None
        return function

    def _render_eta(self, context: Mapping[str, Any]) -> str:
        from hankweave.sentinels.js import JavaScriptError

        assert self._function is not None and self._sandbox is not None
        codon = context.get("codon")
        if isinstance(codon, Mapping) and isinstance(codon.get("startTime"), datetime):
            # The original's ``it.codon.startTime`` is the run's start as state stores it, a
            # string; ``it.world.currentTime`` is a Date.
            context = {**context, "codon": {**codon, "startTime": _iso(codon["startTime"])}}
        try:
            rendered = self._sandbox.call(self._function, context)
        except JavaScriptError as exc:
            raise TemplateRenderError(exc.message, exc.line, self._line(exc.line)) from None
        return rendered if isinstance(rendered, str) else str(rendered)

    def _compile(self) -> Template:
        from jinja2 import TemplateSyntaxError as JinjaSyntaxError

        environment = _environment()
        try:
            code = environment.compile(self.source, filename=_PROMPT_FILENAME)
        except JinjaSyntaxError as exc:
            raise TemplateSyntaxError(exc.message or "invalid syntax", exc.lineno,
                                      self._line(exc.lineno)) from None
        return environment.template_class.from_code(environment, code,
                                                    environment.make_globals(None))

    def _render_error(self, exc: Exception) -> TemplateRenderError:
        frames = traceback.extract_tb(exc.__traceback__)
        line = next((frame.lineno for frame in reversed(frames)
                     if frame.filename == _PROMPT_FILENAME), None)
        return TemplateRenderError(f"{type(exc).__name__}: {exc}", line, self._line(line))

    def _line(self, line: int | None) -> str:
        lines = self.source.splitlines()
        return lines[line - 1].strip() if line is not None and 0 < line <= len(lines) else ""


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@lru_cache(maxsize=256)
def _compiled(source: str) -> PromptTemplate:
    return PromptTemplate(source)


def sentinel_prompt_context(*, events: Sequence[Mapping[str, Any]], codon: Mapping[str, Any],
                            current_time: datetime) -> dict[str, Any]:
    """The original's template context: the first :data:`MAX_TEMPLATE_EVENTS` ``events`` (event
    dicts as on the wire), ``codon`` (``id``, the sentinel's ``name`` and ``description``,
    ``startTime``) and ``world.currentTime`` (when the trigger was queued)."""
    return {
        "events": list(events[:MAX_TEMPLATE_EVENTS]),
        "codon": dict(codon),
        "world": {"currentTime": current_time},
    }


def render_sentinel_prompt(source: str, *, events: Sequence[Mapping[str, Any]],
                           codon: Mapping[str, Any], current_time: datetime) -> str:
    """Compile (cached) and render a sentinel prompt with the original's context; raises
    :class:`TemplateSyntaxError` or :class:`TemplateRenderError`."""
    context = sentinel_prompt_context(events=events, codon=codon, current_time=current_time)
    return PromptTemplate.compile(source).render(context)


# --- the sandboxed environment -------------------------------------------------------------------

def _tojson(value: Any, indent: Any = None) -> str:
    """``JSON.stringify(value, null, indent)``; replaces Jinja's HTML-escaping ``tojson``."""
    return jsvalues.js_str(jsvalues.js_stringify(value, indent))


@cache
def _environment() -> SandboxedEnvironment:
    # Imported here: the CLI's light commands must not pay for Jinja2.
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # Immutable: a template must not be able to edit the events it is shown.
    environment = ImmutableSandboxedEnvironment(autoescape=False, undefined=StrictUndefined,
                                                keep_trailing_newline=True, trim_blocks=True)
    environment.filters["tojson"] = _tojson
    return environment
