"""Translate the original's Eta prompt templates to sandboxed Jinja2, never running their code.

Eta compiles a template to a JavaScript function; we cannot and will not run JavaScript. So
the translator parses each tag's code as a small JavaScript subset and writes the equivalent
Jinja2, in which every member access, operator and method call goes through a ``js_*`` helper
of :mod:`.jsvalues` so values keep their JavaScript meaning. Anything outside the subset is an
:class:`EtaTranslationError` naming the construct and its line, which the caller reports as a
fatal template syntax error: a template is translated whole or not at all.

Whitespace follows Eta's defaults (``autoTrim: [false, "nl"]``): the first newline after every
tag is dropped; ``-`` beside a delimiter trims one newline on that side, ``_`` all whitespace.
The Jinja2 output keeps the Eta source's line numbers (newlines are carried in empty comments),
so a rendering error's line is the line of the Eta template.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Literal

from hankweave.sentinels.jsvalues import METHODS

__all__ = ["SUPPORTED_ETA", "EtaTranslationError", "is_eta", "translate_eta"]

SUPPORTED_ETA = (
    "tags <%= expr %>, <%~ expr %>, <% statements %> with -/_ trimming; statements "
    "'const|let|var x = expr', 'for (const x of expr) {', 'expr.forEach((x, i) => {' "
    "(or 'function (x) {'), 'if (expr) {', '} else if (expr) {', '} else {', '}', '})'; "
    "expressions: it.a.b, x[i], x?.a, literals, [a, b], {a: b}, ! - + * / %, comparisons, && || ??, "
    "c ? a : b, JSON.stringify(x[, null, n]), String(x), methods "
    + ", ".join(f".{name}()" for name in sorted(METHODS))
    + " (callbacks: x => expr)"
)
"""One line describing the supported Eta subset, quoted in every unsupported-construct error."""

_CALLBACK_METHODS = frozenset({"filter", "map", "some", "every", "find", "findIndex"})
_UNSUPPORTED_GLOBALS = frozenset({
    "Math", "Object", "Array", "Date", "Number", "Boolean", "Set", "Map", "RegExp", "Promise",
    "console", "process", "require", "globalThis", "window", "this", "eval", "Function",
    "include", "includeAsync", "layout", "new", "typeof", "delete", "void", "await", "async",
    "class", "while", "do", "switch", "return", "try", "throw", "import", "export",
})
# Names Jinja2 reserves or that would shadow a translation helper get a trailing underscore.
_JINJA_RESERVED = frozenset({
    "and", "or", "not", "in", "is", "if", "else", "elif", "for", "set", "true", "false",
    "none", "True", "False", "None", "loop", "self", "varargs", "kwargs", "caller",
    "namespace", "range", "dict", "lipsum", "cycler", "joiner",
})


class EtaTranslationError(ValueError):
    """The template is not valid Eta, or uses JavaScript outside the supported subset."""

    def __init__(self, reason: str, line: int, snippet: str, hint: str = "") -> None:
        super().__init__(f"{reason} at line {line}: {snippet}{hint}")
        self.reason = reason
        self.line = line
        self.snippet = snippet
        self.hint = hint


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


def _skip_quoted(source: str, match: re.Match[str], translator: _Translator) -> int:
    token = match.group(0)
    if token == "/*":
        end = source.find("*/", match.end())
        if end == -1:
            raise translator.error("unclosed comment", match.start())
        return end
    quoted = _QUOTED[token].match(source, match.start())
    if quoted is None:
        raise translator.error("unclosed string", match.start())
    return quoted.end()


def _split_tags(source: str, translator: _Translator) -> list[_Text | _Tag]:
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
                raise translator.error("unclosed tag", opening.start())
            if closing.group(1):
                break
            search_from = _skip_quoted(source, closing, translator)
        parts.append(_Tag(_KINDS[opening.group(2)], source[opening.end():closing.start()],
                          opening.start(), opening.end()))
        close_marker = closing.group(2)
        position = closing.end()
    parts.append(_Text(_trim(source[position:], close_marker, False), position))
    return parts


# --- JavaScript tokens ------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>\s+|//[^\n]*|/\*[\s\S]*?\*/)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_$][\w$]*)
  | (?P<string>'(?:\\[\s\S]|[^'\\\n])*'|"(?:\\[\s\S]|[^"\\\n])*"|`(?:\\[\s\S]|[^`\\])*`)
  | (?P<punct>===|!==|\.\.\.|\?\.(?!\d)|=>|==|!=|<=|>=|&&|\|\||\?\?|\+\+|--|[-+*/%]=
              |[(){}\[\];,.?:!<>+\-*/%=])
""", re.VERBOSE)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


@dataclass(frozen=True)
class _Token:
    kind: str  # "number", "name", "string", "punct" or "end"
    value: str
    offset: int  # in the template source


def _decode_js_string(literal: str) -> str:
    def escape(match: re.Match[str]) -> str:
        body = match.group(1)
        if body[0] in "xu":
            return chr(int(body[1:].strip("{}"), 16))
        if body[0] in "\r\n":
            return ""  # a line continuation
        return _ESCAPES.get(body, body)
    return re.sub(r"\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|\r\n|[\s\S])",
                  escape, literal[1:-1])


def _tokenize(code: str, offset: int, translator: _Translator) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(code):
        match = _TOKEN.match(code, position)
        if match is None:
            raise translator.unsupported(repr(code[position]), offset + position)
        kind = match.lastgroup or "space"
        if kind != "space":
            tokens.append(_Token(kind, match.group(0), offset + position))
        position = match.end()
    tokens.append(_Token("end", "", offset + len(code)))
    return tokens


def _jinja_string(text: str) -> str:
    """A Jinja2 string literal for ``text`` (Jinja decodes literals with ``unicode-escape``)."""
    return '"' + (text.replace("\\", "\\\\").replace('"', '\\"')
                  .replace("\n", "\\n").replace("\r", "\\r")) + '"'


# --- translation ------------------------------------------------------------------------------

@dataclass
class _Scope:
    names: dict[str, str] = field(default_factory=dict)  # JavaScript name -> Jinja name
    captures: list[str] | None = None  # set on a callback's scope: outer names it reads


@dataclass(frozen=True)
class _Block:
    kind: Literal["for", "forEach", "if"]
    offset: int


class _Translator:
    """Translates one Eta source; each instance is used once by :func:`translate_eta`."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.line_starts = [0] + [match.end() for match in re.finditer(r"\n", source)]
        self.output: list[str] = []
        self.output_line = 1
        self.scopes = [_Scope({"it": "it"})]
        self.blocks: list[_Block] = []
        self.tokens: list[_Token] = []
        self.index = 0

    # errors

    def line_of(self, offset: int) -> int:
        return bisect_right(self.line_starts, offset)

    def error(self, reason: str, offset: int, hint: str = "") -> EtaTranslationError:
        line = self.line_of(offset)
        start = self.line_starts[line - 1]
        end = self.source.find("\n", start)
        snippet = self.source[start: None if end == -1 else end].strip()
        return EtaTranslationError(reason, line, snippet, hint)

    def unsupported(self, construct: str, offset: int) -> EtaTranslationError:
        return self.error(f"unsupported Eta construct {construct}", offset,
                          f"; supported: {SUPPORTED_ETA}")

    # output: every piece is emitted on the Jinja line of the Eta source it comes from

    def emit(self, jinja: str, offset: int) -> None:
        missing = self.line_of(offset) - self.output_line
        if missing > 0:
            self.output.append("{#" + "\n" * missing + "#}")
            self.output_line += missing
        self.output.append(jinja)

    def translate(self) -> str:
        for part in _split_tags(self.source, self):
            if isinstance(part, _Text):
                if part.text:
                    self.emit("{{ " + _jinja_string(part.text) + " }}", part.offset)
            else:
                self.translate_tag(part)
        if self.blocks:
            block = self.blocks[-1]
            raise self.error(f"'{{' of this {block.kind} is never closed", block.offset)
        return "".join(self.output)

    def translate_tag(self, tag: _Tag) -> None:
        self.tokens = _tokenize(tag.code, tag.code_offset, self)
        self.index = 0
        if tag.kind == "exec":
            self.statements()
            return
        value = self.expression()
        self.accept(";")
        self.expect_end()
        self.emit("{{ js_str(" + value + ") }}", tag.offset)

    # tokens

    @property
    def current(self) -> _Token:
        return self.tokens[self.index]

    def peek(self, ahead: int = 1) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.current
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def at(self, value: str) -> bool:
        return self.current.kind in ("punct", "name") and self.current.value == value

    def accept(self, value: str) -> bool:
        if self.at(value):
            self.advance()
            return True
        return False

    def expect(self, value: str) -> _Token:
        if not self.at(value):
            raise self.unexpected(f"expected {value!r}")
        return self.advance()

    def expect_name(self) -> str:
        if self.current.kind != "name":
            raise self.unexpected("expected a name")
        return self.advance().value

    def expect_end(self) -> None:
        if self.current.kind != "end":
            raise self.unexpected("expected the end of the tag")

    def unexpected(self, hint: str) -> EtaTranslationError:
        token = self.current
        shown = "the end of the tag" if token.kind == "end" else repr(token.value)
        if token.kind == "name" and token.value in _UNSUPPORTED_GLOBALS:
            return self.unsupported(repr(token.value), token.offset)
        return self.unsupported(f"{shown} ({hint})", token.offset)

    # scopes

    def declare(self, name: str) -> str:
        jinja = name + "_" if name in _JINJA_RESERVED or name.startswith("js_") else name
        if "$" in jinja:
            raise self.unsupported(f"name {name!r} ('$' in a name)", self.current.offset)
        self.scopes[-1].names[name] = jinja
        return jinja

    def resolve(self, token: _Token) -> str:
        crossed: list[_Scope] = []
        for scope in reversed(self.scopes):
            if token.value in scope.names:
                jinja = scope.names[token.value]
                for callback in crossed:
                    if callback.captures is not None and jinja not in callback.captures:
                        callback.captures.append(jinja)
                return jinja
            crossed.append(scope)
        if token.value in _UNSUPPORTED_GLOBALS:
            raise self.unsupported(repr(token.value), token.offset)
        raise self.error(f"unknown name {token.value!r} (the context is it.events, it.codon, "
                         "it.world)", token.offset)

    # statements

    def statements(self) -> None:
        while self.current.kind != "end":
            if self.accept(";"):
                continue
            start = self.current.offset
            if self.current.value in ("const", "let", "var") and self.current.kind == "name":
                self.declaration()
            elif self.accept("for"):
                self.for_of(start)
            elif self.accept("if"):
                self.open_if("if", start)
            elif self.accept("}"):
                self.close_block(start)
            else:
                self.for_each(start)

    def declaration(self) -> None:
        self.advance()
        while True:
            name_token = self.current
            name = self.expect_name()
            if not self.at("="):
                raise self.unexpected("a declaration needs '= value'")
            self.advance()
            value = self.expression()
            self.emit("{% set " + self.declare(name) + " = " + value + " %}", name_token.offset)
            if not self.accept(","):
                return

    def for_of(self, start: int) -> None:
        self.expect("(")
        if self.current.value not in ("const", "let", "var"):
            raise self.unexpected("only 'for (const x of items)' loops")
        self.advance()
        name = self.expect_name()
        if not self.accept("of"):
            raise self.unexpected("only 'for (const x of items)' loops")
        items = self.expression()
        self.expect(")")
        self.expect("{")
        self.open_loop("for", start, items, [name])

    def for_each(self, start: int) -> None:
        receiver = self.postfix(self.primary(), stop_at_for_each=True)
        if not (self.at(".") and self.peek().value == "forEach"):
            raise self.unexpected("a statement must be a declaration, a loop, an if or '}'")
        self.advance()
        self.advance()
        self.expect("(")
        params = self.callback_params()
        if params is None:
            raise self.unexpected("forEach needs a callback 'x => {' or 'function (x) {'")
        self.expect("{")
        self.open_loop("forEach", start, receiver, params)

    def open_loop(self, kind: Literal["for", "forEach"], start: int, items: str,
                  params: list[str]) -> None:
        self.scopes.append(_Scope())
        names = [self.declare(param) for param in params]
        jinja = "{% for " + names[0] + " in js_iter(" + items + ") %}"
        if len(names) > 1:
            jinja += "{% set " + names[1] + " = loop.index0 %}"
        self.blocks.append(_Block(kind, start))
        self.emit(jinja, start)

    def open_if(self, keyword: Literal["if", "elif"], start: int) -> None:
        self.expect("(")
        condition = self.expression()
        self.expect(")")
        self.expect("{")
        self.scopes.append(_Scope())
        self.blocks.append(_Block("if", start))
        self.emit("{% " + keyword + " js_truthy(" + condition + ") %}", start)

    def close_block(self, start: int) -> None:
        if not self.blocks:
            raise self.error("'}' closes no block", start)
        block = self.blocks.pop()
        self.scopes.pop()
        if block.kind == "forEach":
            self.expect(")")
        elif self.at(")"):
            raise self.unexpected(f"'}})' closes a forEach, this closes a {block.kind}")
        if block.kind == "if" and self.accept("else"):
            if self.accept("if"):
                self.open_if("elif", start)
                return
            self.expect("{")
            self.scopes.append(_Scope())
            self.blocks.append(_Block("if", start))
            self.emit("{% else %}", start)
            return
        self.emit("{% endif %}" if block.kind == "if" else "{% endfor %}", start)

    # callbacks

    def callback_params(self) -> list[str] | None:
        """The parameters of ``x =>``, ``(x, i) =>`` or ``function (x, i)``, consumed up to the
        body; ``None`` (nothing consumed) when no callback starts here."""
        if self.current.kind == "name" and self.peek().value == "=>":
            name = self.advance().value
            self.advance()
            return [name]
        if self.accept("function"):
            self.expect("(")
            params = self.param_list()
            return params
        if self.at("("):
            ahead = 1
            while self.peek(ahead).kind == "name" or self.peek(ahead).value == ",":
                ahead += 1
            if self.peek(ahead).value == ")" and self.peek(ahead + 1).value == "=>":
                self.advance()
                params = self.param_list()
                self.expect("=>")
                return params
        return None

    def param_list(self) -> list[str]:
        params: list[str] = []
        while not self.accept(")"):
            params.append(self.expect_name())
            if not self.at(")"):
                self.expect(",")
        return params or ["_"]

    def callback(self) -> str | None:
        start = self.current.offset
        params = self.callback_params()
        if params is None:
            return None
        scope = _Scope(captures=[])
        self.scopes.append(scope)
        names = [self.declare(param) for param in params]
        if self.accept("{"):
            self.expect("return")
            body = self.expression()
            self.accept(";")
            self.expect("}")
        else:
            if self.at("{"):
                raise self.unsupported("callback with a statement body", start)
            body = self.expression()
        self.scopes.pop()
        captured = ", ".join(f"{_jinja_string(name)}: {name}" for name in scope.captures or [])
        return ("js_fn([" + ", ".join(_jinja_string(name) for name in names) + "], "
                + _jinja_string(body) + ", {" + captured + "})")

    # expressions, JavaScript precedence from loosest to tightest

    def expression(self) -> str:
        condition = self.logical_or()
        if not self.accept("?"):
            return condition
        then = self.expression()
        self.expect(":")
        otherwise = self.expression()
        return f"({then} if js_truthy({condition}) else {otherwise})"

    def logical_or(self) -> str:
        left = self.logical_and()
        while self.at("||") or self.at("??"):
            operator = self.advance().value
            right = self.logical_and()
            test = f"js_nullish({left})" if operator == "??" else f"not js_truthy({left})"
            left = f"({right} if {test} else {left})"
        return left

    def logical_and(self) -> str:
        left = self.equality()
        while self.accept("&&"):
            right = self.equality()
            left = f"({right} if js_truthy({left}) else {left})"
        return left

    def equality(self) -> str:
        left = self.relational()
        while self.current.value in ("===", "==", "!==", "!=") and self.current.kind == "punct":
            operator = self.advance().value
            right = self.relational()
            if operator in ("===", "!=="):  # JavaScript's strict equality, not Python's ==
                test = f"js_strict_equal({left}, {right})"
                left = f"({test})" if operator == "===" else f"(not {test})"
            else:  # loose equality: Python's ==, close to JavaScript's for JSON values
                left = f"({left} {'==' if operator == '==' else '!='} {right})"
        return left

    def relational(self) -> str:
        left = self.additive()
        while self.current.value in ("<", ">", "<=", ">=") and self.current.kind == "punct":
            operator = self.advance().value
            left = f"({left} {operator} {self.additive()})"
        return left

    def additive(self) -> str:
        left = self.multiplicative()
        while self.current.value in ("+", "-") and self.current.kind == "punct":
            operator = self.advance().value
            left = f"js_op({_jinja_string(operator)}, {left}, {self.multiplicative()})"
        return left

    def multiplicative(self) -> str:
        left = self.unary()
        while self.current.value in ("*", "/", "%") and self.current.kind == "punct":
            operator = self.advance().value
            left = f"js_op({_jinja_string(operator)}, {left}, {self.unary()})"
        return left

    def unary(self) -> str:
        if self.accept("!"):
            return f"(not js_truthy({self.unary()}))"
        if self.accept("-"):
            return f'js_op("-", 0, {self.unary()})'
        return self.postfix(self.primary())

    def postfix(self, value: str, stop_at_for_each: bool = False) -> str:
        while True:
            if self.at(".") and self.peek().kind == "name":
                if stop_at_for_each and self.peek().value == "forEach":
                    return value
                self.advance()
                name_token = self.advance()
                value = (self.method_call(value, name_token) if self.at("(")
                         else f"js_member({value}, {_jinja_string(name_token.value)})")
            elif self.at("?.") and self.peek().kind == "name" and self.peek(2).value != "(":
                self.advance()
                name = self.advance().value
                value = f"js_member({value}, {_jinja_string(name)}, true)"
            elif self.accept("["):
                key = self.expression()
                self.expect("]")
                value = f"js_member({value}, {key})"
            elif self.at("(") or self.at("?.") or self.at("++") or self.at("--"):
                raise self.unexpected("calls are limited to the supported methods")
            elif self.current.kind == "punct" and self.current.value in ("=", "+=", "-=",
                                                                        "*=", "/=", "%="):
                raise self.unexpected("assignment: declare a new name with const instead")
            else:
                return value

    def method_call(self, receiver: str, name: _Token) -> str:
        if name.value not in METHODS:
            raise self.unsupported(f"method .{name.value}()", name.offset)
        self.expect("(")
        args = self.arguments(allow_callback=name.value in _CALLBACK_METHODS)
        return "js_method(" + ", ".join([receiver, _jinja_string(name.value), *args]) + ")"

    def arguments(self, allow_callback: bool = False) -> list[str]:
        args: list[str] = []
        while not self.accept(")"):
            callback = self.callback() if allow_callback else None
            args.append(callback if callback is not None else self.expression())
            if not self.at(")"):
                self.expect(",")
        return args

    def primary(self) -> str:
        token = self.current
        if token.kind == "number":
            self.advance()
            return str(int(token.value)) if token.value.isdigit() else repr(float(token.value))
        if token.kind == "string":
            self.advance()
            if token.value.startswith("`") and "${" in token.value:
                raise self.unsupported("template literal with ${...}", token.offset)
            return _jinja_string(_decode_js_string(token.value))
        if self.accept("("):
            value = self.expression()
            self.expect(")")
            return value
        if self.accept("["):
            items = self.array_items()
            return "[" + ", ".join(items) + "]"
        if self.accept("{"):
            return self.object_literal()
        if token.kind == "name":
            return self.name_expression(token)
        raise self.unexpected("expected a value")

    def array_items(self) -> list[str]:
        items: list[str] = []
        while not self.accept("]"):
            if self.at("..."):
                raise self.unsupported("spread '...'", self.current.offset)
            items.append(self.expression())
            if not self.at("]"):
                self.expect(",")
        return items

    def object_literal(self) -> str:
        """``{a: x, 'b': y, c}`` as a Jinja dict (computed keys and spread are unsupported)."""
        entries: list[str] = []
        while not self.accept("}"):
            key = self.current
            if key.kind not in ("name", "string", "number"):
                raise self.unexpected("object keys are names, strings or numbers")
            self.advance()
            text = _decode_js_string(key.value) if key.kind == "string" else key.value
            value = self.expression() if self.accept(":") else self.resolve(key)
            entries.append(f"{_jinja_string(text)}: {value}")
            if not self.at("}"):
                self.expect(",")
        return "{" + ", ".join(entries) + "}"

    def name_expression(self, token: _Token) -> str:
        literals = {"true": "true", "false": "false", "null": "none", "undefined": "js_undefined"}
        if token.value in literals:
            self.advance()
            return literals[token.value]
        if token.value == "JSON" and self.peek().value == "." \
                and self.peek(2).value == "stringify" and self.peek(3).value == "(":
            return self.json_stringify()
        if token.value == "String" and self.peek().value == "(":
            self.advance()
            self.advance()
            value = self.expression()
            self.expect(")")
            return f"js_str({value})"
        self.advance()
        return self.resolve(token)

    def json_stringify(self) -> str:
        start = self.current.offset
        for _ in range(4):
            self.advance()
        args = self.arguments()
        if len(args) == 1:
            return f"js_stringify({args[0]})"
        if len(args) == 3 and args[1] in ("none", "js_undefined"):
            return f"js_stringify({args[0]}, {args[2]})"
        raise self.unsupported("JSON.stringify with a replacer", start)


def translate_eta(source: str) -> str:
    """The Jinja2 source equivalent to the Eta template ``source``, for a context in which the
    Eta data object is the variable ``it``; raises :class:`EtaTranslationError`."""
    return _Translator(source).translate()
