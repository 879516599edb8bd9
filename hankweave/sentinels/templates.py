"""Sentinel prompt templates: Jinja2 in a sandbox, with the original's Eta templates translated.

A prompt is rendered once per trigger with the original's context:

========================  ==========================  =======================================
Eta (the original)        Jinja2                      value
========================  ==========================  =======================================
``it.events``             ``events`` / ``it.events``  the trigger's events (at most 1000)
``it.codon``              ``codon`` / ``it.codon``    ``{id, name, description, startTime}``
``it.world.currentTime``  ``world.currentTime``       when the trigger was queued
========================  ==========================  =======================================

A source containing ``<%`` is Eta: it is translated to Jinja2 (:mod:`.eta`) and keeps Eta's
JavaScript meanings and whitespace; anything else is plain Jinja2 (``trim_blocks`` on, so a
``{% for %}`` line leaves no blank line, and a missing name is an error rather than an empty
string). Either way the template runs in Jinja2's immutable sandbox and nothing in it is
executed as Python or JavaScript. Two failures, as in the original: a
:class:`TemplateSyntaxError` is fatal to the sentinel, a :class:`TemplateRenderError` skips
the trigger.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Literal

from hankweave.sentinels import jsvalues
from hankweave.sentinels.eta import EtaTranslationError, is_eta, translate_eta

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import SandboxedEnvironment

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
        self.jinja_source = self._jinja_source()
        self._template = self._compile()

    @classmethod
    def compile(cls, source: str) -> PromptTemplate:
        """The template for ``source``, compiled once; raises :class:`TemplateSyntaxError`."""
        return _compiled(source)

    def render(self, context: Mapping[str, Any]) -> str:
        """Render with ``context`` (see :func:`sentinel_prompt_context`), also visible whole as
        ``it``; raises :class:`TemplateRenderError`."""
        variables = {"it": context, **context}
        try:
            return self._template.render(variables)
        except Exception as exc:  # the template is user code: any failure skips the trigger
            raise self._render_error(exc) from exc

    def _jinja_source(self) -> str:
        if self.dialect == "jinja":
            return self.source
        try:
            return translate_eta(self.source)
        except EtaTranslationError as exc:
            raise TemplateSyntaxError(exc.reason, exc.line, exc.snippet, exc.hint) from None

    def _compile(self) -> Template:
        from jinja2 import TemplateSyntaxError as JinjaSyntaxError

        environment = _environment()
        try:
            code = environment.compile(self.jinja_source, filename=_PROMPT_FILENAME)
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


def _callback_factory(environment: SandboxedEnvironment) -> Callable[..., Any]:
    """``js_fn``: a translated Eta callback (``e => e.type === 'x'``) as a Python callable that
    evaluates its Jinja2 expression in the same sandbox, with the outer names it captured."""

    @lru_cache(maxsize=512)
    def expression(body: str) -> Callable[..., Any]:
        return environment.compile_expression(body, undefined_to_none=False)

    def js_fn(params: list[str], body: str, captured: Mapping[str, Any]) -> Callable[..., Any]:
        evaluate = expression(body)

        def callback(*args: Any) -> Any:
            bound = dict(captured)
            for index, name in enumerate(params):
                bound[name] = args[index] if index < len(args) else jsvalues.JS_UNDEFINED
            return evaluate(**bound)

        return callback

    return js_fn


@cache
def _environment() -> SandboxedEnvironment:
    # Imported here: the CLI's light commands must not pay for Jinja2.
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # Immutable: a template must not be able to edit the events it is shown.
    environment = ImmutableSandboxedEnvironment(autoescape=False, undefined=StrictUndefined,
                                                keep_trailing_newline=True, trim_blocks=True)
    environment.filters["tojson"] = _tojson
    environment.globals.update(
        js_str=jsvalues.js_str,
        js_truthy=jsvalues.js_truthy,
        js_nullish=jsvalues.js_nullish,
        js_member=jsvalues.js_member,
        js_method=jsvalues.js_method,
        js_op=jsvalues.js_op,
        js_strict_equal=jsvalues.js_strict_equal,
        js_iter=jsvalues.js_iter,
        js_stringify=jsvalues.js_stringify,
        js_undefined=jsvalues.JS_UNDEFINED,
        js_fn=_callback_factory(environment),
    )
    return environment
