"""Eta templates, compiled to JavaScript as Eta compiles them, for the sandbox to run.

The original renders sentinel prompts with Eta (``autoEscape: false``, the context object
``it``).  :func:`compile_eta` does what Eta's compiler does: text becomes string appends, an
``<%= expr %>`` or ``<%~ expr %>`` tag appends ``expr`` (JavaScript's own string conversion:
``undefined`` prints ``undefined``), an ``<% code %>`` tag is its code, verbatim.  The result
is one function of ``it`` that :mod:`.js` runs in its sandbox, so a template has JavaScript's
whole language and semantics (``Math.round(x)``, ``n.toFixed(2)``, template literals,
``Object.keys``, ``list.map(f).join(", ")``...).

Whitespace follows Eta's defaults (``autoTrim: [false, "nl"]``): the first newline after every
tag is dropped; ``-`` beside a delimiter trims one newline on that side, ``_`` all whitespace.
The function keeps the template's line numbers, so an error's line is the template's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["EtaSyntaxError", "compile_eta", "is_eta"]


class EtaSyntaxError(ValueError):
    """The template's tags are not well formed (an unclosed tag, string or comment)."""

    def __init__(self, reason: str, line: int, snippet: str) -> None:
        super().__init__(f"{reason} at line {line}: {snippet}")
        self.reason = reason
        self.line = line
        self.snippet = snippet


def _error(source: str, reason: str, offset: int) -> EtaSyntaxError:
    line = source.count("\n", 0, offset) + 1
    return EtaSyntaxError(reason, line, source.splitlines()[line - 1].strip()
                          if source.splitlines() else "")


def is_eta(source: str) -> bool:
    """Whether ``source`` is an Eta template: Eta treats every ``<%`` as a tag."""
    return "<%" in source


# --- Eta tags ---------------------------------------------------------------------------------

_OPEN = re.compile(r"<%([-_])?\s*([=~])?\s*")
_CLOSE = re.compile(r"'|\"|`|/\*|(\s*([-_])?%>)")
_QUOTED = {
    "'": re.compile(r"'(?:\\.|[^\n\r'\\])*'"),
    '"': re.compile(r'"(?:\\.|[^\n\r"\\])*"'),
    "`": re.compile(r"`(?:\\[\s\S]|[^\\`])*`"),
}
TagKind = Literal["exec", "interpolate", "raw"]
_KINDS: dict[str | None, TagKind] = {None: "exec", "=": "interpolate", "~": "raw"}


@dataclass(frozen=True)
class _Text:
    text: str
    offset: int


@dataclass(frozen=True)
class _Tag:
    kind: TagKind
    code: str
    offset: int
    code_offset: int


def _trim(text: str, left: str | Literal[False] | None, right: str | Literal[False] | None
          ) -> str:
    """Eta's ``trimWS`` for ``autoTrim: [false, "nl"]``: ``left`` is the marker closing the
    previous tag (``None``: the default, one newline), ``right`` the marker opening the next
    (``None``: the default, nothing); ``False`` means no neighbouring tag."""
    if left is None:
        left = "-"
    if left == "_":
        text = text.lstrip()
    elif left == "-":
        text = re.sub(r"^(?:\r\n|\n|\r)", "", text)
    if right == "_":
        text = text.rstrip()
    elif right == "-":
        text = re.sub(r"(?:\r\n|\n|\r)$", "", text)
    return re.sub(r"\r\n|\r", "\n", text)


def _skip_quoted(source: str, match: re.Match[str]) -> int:
    token = match.group(0)
    if token == "/*":
        end = source.find("*/", match.end())
        if end == -1:
            raise _error(source, "unclosed comment", match.start())
        return end
    quoted = _QUOTED[token].match(source, match.start())
    if quoted is None:
        raise _error(source, "unclosed string", match.start())
    return quoted.end()


def _split_tags(source: str) -> list[_Text | _Tag]:
    """Eta's parser: text and tags, text already trimmed as Eta trims it."""
    parts: list[_Text | _Tag] = []
    position = 0
    close_marker: str | Literal[False] | None = False  # the template's start: no tag before
    while (opening := _OPEN.search(source, position)) is not None:
        parts.append(_Text(_trim(source[position:opening.start()], close_marker,
                                 opening.group(1)), position))
        search_from = opening.end()
        while True:
            closing = _CLOSE.search(source, search_from)
            if closing is None:
                raise _error(source, "unclosed tag", opening.start())
            if closing.group(1):
                break
            search_from = _skip_quoted(source, closing)
        parts.append(_Tag(_KINDS[opening.group(2)], source[opening.end():closing.start()],
                          opening.start(), opening.end()))
        close_marker = closing.group(2)
        position = closing.end()
    parts.append(_Text(_trim(source[position:], close_marker, False), position))
    return parts


_OUT = "__eta_out"


def _statement_end(code: str) -> str:
    """What ends an ``<% code %>`` tag's code in the function.  Eta ends it with a newline; so
    does this when the code has a line comment (which would swallow what follows), but
    otherwise it stays on its line, for the line numbers: ``;``, or nothing after an opening
    brace (``if (x) {``)."""
    if "//" in code:
        return "\n"
    return " " if code.rstrip().endswith("{") else ";"


def compile_eta(source: str) -> str:
    """The JavaScript function expression of the Eta template ``source`` (see the module
    docstring); its line ``n`` is the template's line ``n``."""
    parts = _split_tags(source)
    code = [f"(function (it) {{ let {_OUT} = '';"]
    for index, part in enumerate(parts):
        if isinstance(part, _Text):
            if part.text:
                code.append(f"{_OUT} += {json.dumps(part.text, ensure_ascii=False)};")
        elif part.kind == "exec":
            code.append(part.code + _statement_end(part.code))
        else:
            code.append(f"{_OUT} += ({part.code});")
        following = parts[index + 1].offset if index + 1 < len(parts) else len(source)
        missing = source.count("\n", 0, following) - "".join(code).count("\n")
        if missing > 0:
            code.append("\n" * missing)
    code.append(f"\nreturn {_OUT}; }})")
    return "".join(code)
