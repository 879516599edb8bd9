"""The Zod subset of sentinel schemas, translated to JSON Schema without executing anything.

Hankweave 0.10.0 evaluates a sentinel's ``schemaStr`` (and the text of its ``schemaFile``) as
JavaScript with Zod 3's ``z`` in scope.  We never run that code: a tokenizer and a
recursive-descent parser read the subset real configs use and build the JSON Schema (draft
2020-12 vocabulary) the sentinel's answer is validated against.  Anything else is a
:class:`ZodTranslationError` that names the construct, its ``line:column`` and what is supported
there.

Supported (Zod 3 semantics):

* types: ``z.object({...})``, ``z.string()``, ``z.number()``, ``z.boolean()``, ``z.null()``,
  ``z.any()``, ``z.unknown()``, ``z.array(T)``, ``z.enum([...])``, ``z.literal(v)`` (string,
  number, boolean, null), ``z.union([...])``, ``z.discriminatedUnion(key, [...])``,
  ``z.record(V)`` / ``z.record(K, V)``, ``z.optional(T)``, ``z.nullable(T)``; each takes Zod's
  optional trailing params object, of which only ``description`` matters;
* on every type: ``.optional()``, ``.nullable()``, ``.nullish()``, ``.describe(s)``,
  ``.default(v)``, ``.array()``, ``.or(T)``;
* on strings: ``.min``, ``.max``, ``.length``, ``.nonempty``; on numbers: ``.int``, ``.min``,
  ``.max``, ``.gte``, ``.lte``, ``.gt``, ``.lt``, ``.positive``, ``.negative``,
  ``.nonnegative``, ``.nonpositive``, ``.multipleOf``, ``.step``, ``.finite``; on arrays:
  ``.min``, ``.max``, ``.length``, ``.nonempty``; on objects: ``.strict``, ``.strip``,
  ``.passthrough``, ``.catchall(T)``, ``.extend({...})``, ``.partial()``.  A check's custom
  error message (its second argument) is accepted and ignored;
* source: ``//`` and ``/* */`` comments, quoted or bare keys, shorthand keys (``{ address }``),
  trailing commas, single, double and plain back-quoted strings, parentheses.

Unsupported, each an error: refinements and transforms (``.refine``, ``.superRefine``,
``.transform``, ``.pipe``, ``.preprocess``, ``.catch``, ``.brand``), string formats and
patterns (``.email``, ``.url``, ``.uuid``, ``.datetime``, ``.regex``, ...: JSON Schema's
``format`` is only an annotation, so the check would silently vanish), ``z.lazy``, ``z.tuple``,
``z.intersection``/``.and``, ``z.date``, ``z.bigint``, ``z.nativeEnum``, ``z.coerce``,
``z.custom``, ``z.function``, ``z.instanceof``, ``.merge``/``.pick``/``.omit``/``.required``,
function calls or any other JavaScript, template literals with ``${}``, and duplicate object
keys (JavaScript would keep the last silently; a duplicate is almost surely a mistake).

Decisions:

* ``z.object`` gives ``additionalProperties: false``.  Zod's default strips unknown keys rather
  than rejecting them, but the schema doubles as the response format sent to the model, where
  the AI SDK's converter also emits ``false`` (and OpenAI's strict mode requires it): an extra
  key means the model ignored the format.  ``.passthrough()`` allows extra keys.
* ``.nullable()`` widens ``type`` to a list when the schema is a plain typed one, and wraps in
  ``anyOf`` with ``{"type": "null"}`` when it carries ``enum``/``const``/``anyOf`` (a type list
  would not let ``null`` through an ``enum``); the description moves to the wrapper.
* ``.optional()`` only matters for object keys (JSON has no ``undefined``): the key leaves
  ``required``.  ``.default(v)`` does the same and records ``default``.

Schema files (:func:`translate_zod_module`) may also be TypeScript/JavaScript modules; see there.
"""

from __future__ import annotations

import copy
import math
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = ["MAX_NESTING", "JsonSchema", "ZodTranslationError", "translate_zod",
           "translate_zod_module"]

JsonSchema: TypeAlias = dict[str, Any]

MAX_NESTING = 64
"""How deep schemas may nest; deeper source is an error rather than a blown Python stack."""


class ZodTranslationError(ValueError):
    """Zod source that cannot be translated: unsupported, or not valid source at all.

    ``line`` and ``column`` (1-based) locate the offending token, ``origin`` names the source
    (``schemaStr`` or the schema file) when known.
    """

    def __init__(self, problem: str, *, line: int, column: int, hint: str = "",
                 origin: str | None = None) -> None:
        self.problem, self.line, self.column, self.hint = problem, line, column, hint
        self.origin = origin
        where = f"{origin}: " if origin else ""
        tail = f" ({hint})" if hint else ""
        super().__init__(f"{where}{problem} at {line}:{column}{tail}")


# --- tokens -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Token:
    kind: str
    """``name``, ``string``, ``number``, ``punct`` or ``end``."""
    text: str
    """As written (the raw text; for strings, with their quotes)."""
    value: Any
    """The decoded string or number; the text itself for names and punctuation."""
    offset: int


_NAME = re.compile(r"(?:[^\W\d]|\$)(?:\w|\$)*")
_NUMBER = re.compile(r"(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d+)?")
_MULTI_PUNCT = ("=>", "...", "?.", "??", "===", "!==", "==", "!=", "&&", "||")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
_HEX_ESCAPE = re.compile(r"x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|u\{([0-9a-fA-F]{1,6})\}")


class _Source:
    """The text being read, with offsets mapped to line:column for messages."""

    def __init__(self, text: str, origin: str | None) -> None:
        self.text, self.origin = text, origin
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def error(self, offset: int, problem: str, hint: str = "") -> ZodTranslationError:
        line, column = self.position(offset)
        return ZodTranslationError(problem, line=line, column=column, hint=hint,
                                   origin=self.origin)


def _tokenize(source: _Source) -> list[_Token]:
    text, tokens, i = source.text, [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise source.error(i, "unclosed `/*` comment")
            i = end + 2
        else:
            token = _read_token(source, i)
            tokens.append(token)
            i = token.offset + len(token.text)
    tokens.append(_Token("end", "", None, len(text)))
    return tokens


def _read_token(source: _Source, i: int) -> _Token:
    text, char = source.text, source.text[i]
    if char in "'\"`":
        raw, value = _read_string(source, i)
        return _Token("string", raw, value, i)
    number = _NUMBER.match(text, i)
    if number:
        return _number_token(source, number)
    name = _NAME.match(text, i)
    if name:
        return _Token("name", name.group(), name.group(), i)
    punct = next((p for p in _MULTI_PUNCT if text.startswith(p, i)), char)
    return _Token("punct", punct, punct, i)


def _number_token(source: _Source, match: re.Match[str]) -> _Token:
    raw, end = match.group(), match.end()
    if end < len(source.text) and (source.text[end].isalnum() or source.text[end] in "_$"):
        # 0x1f, 10n, 1_000n...: JavaScript number forms Zod configs have no use for.
        raise source.error(match.start(), f"unsupported number literal `{raw}{source.text[end]}`")
    digits = raw.replace("_", "")
    value: int | float = float(digits) if any(c in digits for c in ".eE") else int(digits)
    if isinstance(value, float) and not math.isfinite(value):
        raise source.error(match.start(), f"number `{raw}` is out of range")
    return _Token("number", raw, value, match.start())


def _read_string(source: _Source, start: int) -> tuple[str, str]:
    text, quote = source.text, source.text[start]
    parts: list[str] = []
    i = start + 1
    while i < len(text) and text[i] != quote:
        char = text[i]
        if char == "\n" and quote != "`":
            break
        if quote == "`" and text.startswith("${", i):
            raise source.error(i, "unsupported template literal substitution `${`",
                               "a schema is data: write the text out")
        if char == "\\":
            decoded, i = _read_escape(source, i)
            parts.append(decoded)
            continue
        parts.append(char)
        i += 1
    if i >= len(text) or text[i] != quote:
        raise source.error(start, "unterminated string")
    return text[start:i + 1], _join_surrogates("".join(parts))


def _read_escape(source: _Source, i: int) -> tuple[str, int]:
    """The character a backslash escape at ``i`` stands for, and where reading resumes."""
    text = source.text
    if i + 1 >= len(text):
        raise source.error(i, "unterminated string")
    char = text[i + 1]
    if char == "\n":  # a line continuation
        return "", i + 2
    hex_escape = _HEX_ESCAPE.match(text, i + 1)
    if hex_escape:
        code = int(next(g for g in hex_escape.groups() if g), 16)
        if code > 0x10FFFF:
            raise source.error(i, "invalid `\\u{...}` escape")
        return chr(code), hex_escape.end()
    if char in "xu":
        raise source.error(i, f"invalid `\\{char}` escape")
    return _SIMPLE_ESCAPES.get(char, char), i + 2


def _join_surrogates(text: str) -> str:
    # JavaScript strings are UTF-16: "\uD83D\uDE00" is one character, so pair surrogates up.
    try:
        return text.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        return text


# --- translated types ---------------------------------------------------------------------

@dataclass
class _Schema:
    """A translated Zod type: its JSON Schema, the Zod class it stands for (which decides the
    methods it has) and whether an object key holding it may be missing."""

    json: JsonSchema
    kind: str
    optional: bool = False

    def copy(self) -> _Schema:
        return _Schema(copy.deepcopy(self.json), self.kind, self.optional)


@dataclass(frozen=True)
class _Value:
    """A constant a module declares (``const LEVELS = ["low", "high"] as const``)."""

    value: Any


_Binding: TypeAlias = "_Schema | _Value"
_Handler: TypeAlias = "Callable[[_Parser, _Schema, _Token], _Schema]"
_Creator: TypeAlias = "Callable[[_Parser, _Token], _Schema]"


def _nullable(json: JsonSchema) -> JsonSchema:
    annotations = {"description", "default"}
    if not json.keys() - annotations:  # z.any() already accepts null
        return json
    kind = json.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return json
    if isinstance(kind, str) and not json.keys() & {"enum", "const", "anyOf"}:
        json["type"] = [kind, "null"]
        return json
    wrapper: JsonSchema = {"anyOf": [json, {"type": "null"}]}
    for key in sorted(annotations & json.keys()):
        wrapper[key] = json.pop(key)
    return wrapper


def _object_json(shape: dict[str, _Schema]) -> JsonSchema:
    return {"type": "object",
            "properties": {key: schema.json for key, schema in shape.items()},
            "required": [key for key, schema in shape.items() if not schema.optional],
            "additionalProperties": False}


# --- the parser ---------------------------------------------------------------------------

class _Parser:
    """Recursive descent over the tokens of one source; ``bindings`` are the module's consts."""

    def __init__(self, source: _Source, bindings: dict[str, _Binding] | None = None) -> None:
        self.source = source
        self.tokens = _tokenize(source)
        self.index = 0
        self.depth = 0
        self.bindings: dict[str, _Binding] = bindings if bindings is not None else {}

    # token access

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.peek()
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def at(self, text: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind in ("punct", "name") and token.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str, what: str = "") -> _Token:
        if not self.at(text):
            raise self.unexpected(self.peek(), f"expected `{text}`{what}")
        return self.advance()

    def expect_name(self) -> _Token:
        if self.peek().kind != "name":
            raise self.unexpected(self.peek(), "expected a name")
        return self.advance()

    def error(self, token: _Token, problem: str, hint: str = "") -> ZodTranslationError:
        return self.source.error(token.offset, problem, hint)

    def unexpected(self, token: _Token, hint: str = "") -> ZodTranslationError:
        if token.kind == "end":
            return self.error(token, "unexpected end of source", hint)
        return self.error(token, f"unexpected `{token.text}`", hint)

    @contextmanager
    def nested(self, token: _Token) -> Iterator[None]:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(token, f"schema nested deeper than {MAX_NESTING} levels")
        try:
            yield
        finally:
            self.depth -= 1

    # schemas

    def schema(self) -> _Schema:
        """``primary ('.' method '(' args ')')*``."""
        with self.nested(self.peek()):
            result = self.primary()
            while self.at("."):
                self.advance()
                result = self.method(result)
            return result

    def primary(self) -> _Schema:
        token = self.peek()
        if token.kind == "name" and token.text == "z" and self.at(".", 1):
            self.index += 2
            return self.creator(self.expect_name(), token)
        if self.accept("("):
            inner = self.schema()
            self.expect(")")
            return inner
        if token.kind == "name" and token.text in self.bindings:
            self.advance()
            binding = self.bindings[token.text]
            if isinstance(binding, _Value):
                raise self.error(token, f"`{token.text}` is a constant, not a Zod schema")
            return binding.copy()
        if token.kind == "name":
            raise self.error(token, f"unsupported expression `{token.text}`",
                             "a schema starts with `z.` or names a schema declared earlier")
        raise self.unexpected(token, "expected a Zod schema such as `z.object({...})`")

    def creator(self, name: _Token, z: _Token) -> _Schema:
        make = _CREATORS.get(name.text)
        if make is None:
            raise self.error(z, f"unsupported Zod construct `z.{name.text}`",
                             "supported: " + ", ".join(f"z.{n}" for n in _CREATORS))
        self.expect("(", f" after `z.{name.text}`")
        return make(self, name)

    def method(self, schema: _Schema) -> _Schema:
        name = self.expect_name()
        methods = _KIND_METHODS.get(schema.kind, {})
        handler = methods.get(name.text) or _COMMON_METHODS.get(name.text)
        if handler is None:
            supported = [*methods, *_COMMON_METHODS]
            raise self.error(name, f"unsupported Zod construct `.{name.text}`",
                             f"supported on {_KIND_NAMES[schema.kind]}: "
                             + ", ".join(f".{n}" for n in supported))
        self.expect("(", f" after `.{name.text}`")
        return handler(self, schema, name)

    def close_call(self, schema: _Schema | None = None, *, first: bool = False) -> None:
        """The end of a call: an optional last argument and ``)``.  That argument is Zod's params
        object (of which only a creator's ``description`` counts) or a check's error message;
        ``first`` when the call takes nothing else (``z.string({...})``, ``.positive("msg")``)."""
        if (first and not self.at(")")) or (self.accept(",") and not self.at(")")):
            token = self.peek()
            extra = self.value()
            if not isinstance(extra, str | dict):
                raise self.error(token, "expected an error message or a params object")
            if schema is not None and isinstance(extra, dict) \
                    and isinstance(extra.get("description"), str):
                schema.json["description"] = extra["description"]
            self.accept(",")
        self.expect(")")

    def schema_list(self) -> list[_Schema]:
        self.expect("[", " (a list of schemas)")
        items: list[_Schema] = []
        while not self.at("]"):
            items.append(self.schema())
            if not self.accept(","):
                break
        self.expect("]")
        return items

    def shape(self) -> dict[str, _Schema]:
        """An object literal of schemas: ``{ key: schema, "quoted key": schema, shorthand }``."""
        self.expect("{", " (the object's shape)")
        shape: dict[str, _Schema] = {}
        while not self.at("}"):
            key = self.advance()
            if key.kind not in ("name", "string"):
                raise self.unexpected(key, "expected a key")
            if key.value in shape:
                raise self.error(key, f"duplicate key `{key.value}`")
            if key.kind == "name" and (self.at(",") or self.at("}")):
                self.index -= 1  # shorthand: the key names a schema declared earlier
                shape[key.value] = self.primary()
            else:
                self.expect(":", f" after key `{key.value}`")
                shape[key.value] = self.schema()
            if not self.accept(","):
                break
        self.expect("}")
        return shape

    # constants

    def value(self) -> Any:
        """A JSON-like literal: string, number, boolean, null, array or object, possibly
        naming a constant declared earlier and followed by TypeScript's ``as const``."""
        with self.nested(self.peek()):
            result = self._plain_value()
        if self.at("as") and self.at("const", 1):
            self.index += 2
        return result

    def _plain_value(self) -> Any:
        token = self.advance()
        if token.kind in ("string", "number"):
            return token.value
        if token.kind == "punct" and token.text == "-" and self.peek().kind == "number":
            return -self.advance().value
        if token.kind == "name":
            return self._named_value(token)
        if token.text == "[":
            return self._array_value()
        if token.text == "{":
            return self._object_value()
        raise self.unexpected(token, "expected a constant value")

    def _named_value(self, token: _Token) -> Any:
        constants = {"true": True, "false": False, "null": None}
        if token.text in constants:
            return constants[token.text]
        binding = self.bindings.get(token.text)
        if isinstance(binding, _Value):
            return copy.deepcopy(binding.value)
        raise self.error(token, f"unsupported expression `{token.text}`",
                         "expected a constant: a string, number, boolean, null, array or object")

    def _array_value(self) -> list[Any]:
        items: list[Any] = []
        while not self.at("]"):
            items.append(self.value())
            if not self.accept(","):
                break
        self.expect("]")
        return items

    def _object_value(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while not self.at("}"):
            key = self.advance()
            if key.kind not in ("name", "string"):
                raise self.unexpected(key, "expected a key")
            self.expect(":", f" after key `{key.value}`")
            result[key.value] = self.value()
            if not self.accept(","):
                break
        self.expect("}")
        return result


# --- z.<type>(...) ------------------------------------------------------------------------

def _simple(json: JsonSchema, kind: str) -> _Creator:
    def make(parser: _Parser, name: _Token) -> _Schema:
        schema = _Schema(copy.deepcopy(json), kind)
        parser.close_call(schema, first=True)
        return schema
    return make


def _z_object(parser: _Parser, name: _Token) -> _Schema:
    schema = _Schema(_object_json(parser.shape()), "object")
    parser.close_call(schema)
    return schema


def _z_array(parser: _Parser, name: _Token) -> _Schema:
    item = parser.schema()
    schema = _Schema({"type": "array", "items": item.json}, "array")
    parser.close_call(schema)
    return schema


def _z_enum(parser: _Parser, name: _Token) -> _Schema:
    token = parser.peek()
    values = parser.value()
    if not (isinstance(values, list) and values and all(isinstance(v, str) for v in values)):
        raise parser.error(token, "z.enum takes a non-empty list of strings")
    schema = _Schema({"type": "string", "enum": values}, "enum")
    parser.close_call(schema)
    return schema


def _z_literal(parser: _Parser, name: _Token) -> _Schema:
    token = parser.peek()
    value = parser.value()
    if value is None:
        json: JsonSchema = {"type": "null"}
    elif isinstance(value, bool):
        json = {"type": "boolean", "const": value}
    elif isinstance(value, str):
        json = {"type": "string", "const": value}
    elif isinstance(value, int | float):
        json = {"type": "number", "const": value}
    else:
        raise parser.error(token, "z.literal takes a string, number, boolean or null")
    schema = _Schema(json, "literal")
    parser.close_call(schema)
    return schema


def _z_union(parser: _Parser, name: _Token) -> _Schema:
    options = parser.schema_list()
    if not options:
        raise parser.error(name, "z.union needs at least one option")
    schema = _union(options)
    parser.close_call(schema)
    return schema


def _z_discriminated_union(parser: _Parser, name: _Token) -> _Schema:
    token = parser.advance()
    if token.kind != "string":
        raise parser.unexpected(token, "expected the discriminator key, a string")
    parser.expect(",")
    list_start = parser.peek()
    options = parser.schema_list()
    if not options or any(option.kind != "object" for option in options):
        raise parser.error(list_start, "z.discriminatedUnion takes a list of z.object schemas")
    schema = _union(options)
    parser.close_call(schema)
    return schema


def _union(options: list[_Schema]) -> _Schema:
    alternatives: list[JsonSchema] = []
    for option in options:
        # A.or(B).or(C) and nested unions flatten into one anyOf.
        nested = option.kind == "union" and option.json.keys() == {"anyOf"}
        alternatives.extend(option.json["anyOf"] if nested else [option.json])
    return _Schema({"anyOf": alternatives}, "union", any(o.optional for o in options))


def _z_record(parser: _Parser, name: _Token) -> _Schema:
    first = parser.peek()
    key = parser.schema()
    value: _Schema | None = None
    if parser.at(",") and not parser.at(")", 1):
        parser.advance()
        value = parser.schema()
    if value is None:
        key, value = _Schema({"type": "string"}, "string"), key
    elif key.kind not in ("string", "enum"):
        raise parser.error(first, "record keys must be z.string() or z.enum([...])")
    json: JsonSchema = {"type": "object", "additionalProperties": value.json}
    if key.json != {"type": "string"}:
        json["propertyNames"] = key.json
    schema = _Schema(json, "record")
    parser.close_call(schema)
    return schema


def _z_optional(parser: _Parser, name: _Token) -> _Schema:
    return _optional(parser, parser.schema(), name)


def _z_nullable(parser: _Parser, name: _Token) -> _Schema:
    return _nullable_method(parser, parser.schema(), name)


_CREATORS: dict[str, _Creator] = {
    "object": _z_object,
    "string": _simple({"type": "string"}, "string"),
    "number": _simple({"type": "number"}, "number"),
    "boolean": _simple({"type": "boolean"}, "boolean"),
    "null": _simple({"type": "null"}, "null"),
    "any": _simple({}, "any"),
    "unknown": _simple({}, "any"),
    "array": _z_array,
    "enum": _z_enum,
    "literal": _z_literal,
    "union": _z_union,
    "discriminatedUnion": _z_discriminated_union,
    "record": _z_record,
    "optional": _z_optional,
    "nullable": _z_nullable,
}


# --- .<method>(...) -----------------------------------------------------------------------

def _optional(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    parser.close_call()
    return _Schema(schema.json, "optional", optional=True)


def _nullable_method(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    parser.close_call()
    return _Schema(_nullable(schema.json), "nullable", schema.optional)


def _nullish(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    parser.close_call()
    return _Schema(_nullable(schema.json), "optional", optional=True)


def _describe(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    token = parser.advance()
    if token.kind != "string":
        raise parser.unexpected(token, "`.describe` takes a string")
    schema.json["description"] = token.value
    parser.close_call()
    return schema


def _default(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    schema.json["default"] = parser.value()
    parser.close_call()
    return _Schema(schema.json, "default", optional=True)


def _array_method(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    parser.close_call()
    return _Schema({"type": "array", "items": schema.json}, "array")


def _or(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    other = parser.schema()
    parser.close_call()
    return _union([schema, other])


def _bound(keyword: str, *also: str, integer: bool = True, minimum: float = 0,
           fixed: float | None = None) -> _Handler:
    """A check that sets JSON Schema keywords to its argument (or to ``fixed``, for checks
    that take none, like ``.positive()``)."""
    def check(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
        if fixed is not None:
            bound: float = fixed
        else:
            token = parser.peek()
            bound = parser.value()
            if isinstance(bound, bool) or not isinstance(bound, int | float) or (
                    integer and not isinstance(bound, int)) or bound < minimum:
                kind = "a non-negative integer" if integer else "a number"
                raise parser.error(token, f"`.{name.text}` takes {kind}")
        for key in (keyword, *also):
            schema.json[key] = bound
        parser.close_call(first=fixed is not None)
        return schema
    return check


def _integer(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    schema.json["type"] = "integer"
    parser.close_call()
    return schema


def _multiple_of(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    token = parser.peek()
    step = parser.value()
    if isinstance(step, bool) or not isinstance(step, int | float) or step <= 0:
        raise parser.error(token, f"`.{name.text}` takes a positive number")
    schema.json["multipleOf"] = step
    parser.close_call()
    return schema


def _no_op(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    parser.close_call()  # .finite(): JSON numbers are always finite
    return schema


def _extra_keys(allowed: bool) -> _Handler:
    def policy(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
        parser.close_call()
        if allowed:
            schema.json.pop("additionalProperties", None)
        else:
            schema.json["additionalProperties"] = False
        return schema
    return policy


def _catchall(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    schema.json["additionalProperties"] = parser.schema().json
    parser.close_call()
    return schema


def _extend(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    added = parser.shape()
    parser.close_call()
    properties, required = schema.json["properties"], set(schema.json["required"])
    properties.update({key: value.json for key, value in added.items()})
    kept = {key for key in required if key not in added}
    kept |= {key for key, value in added.items() if not value.optional}
    schema.json["required"] = [key for key in properties if key in kept]
    return schema


def _partial(parser: _Parser, schema: _Schema, name: _Token) -> _Schema:
    parser.close_call()
    schema.json["required"] = []
    return schema


_COMMON_METHODS: dict[str, _Handler] = {
    "optional": _optional, "nullable": _nullable_method, "nullish": _nullish,
    "describe": _describe, "default": _default, "array": _array_method, "or": _or,
}

_LENGTHS: dict[str, _Handler] = {
    "min": _bound("minLength"), "max": _bound("maxLength"),
    "length": _bound("minLength", "maxLength"), "nonempty": _bound("minLength", fixed=1),
}

_KIND_METHODS: dict[str, dict[str, _Handler]] = {
    "string": _LENGTHS,
    "number": {
        "int": _integer,
        "min": _bound("minimum", integer=False, minimum=-math.inf),
        "gte": _bound("minimum", integer=False, minimum=-math.inf),
        "max": _bound("maximum", integer=False, minimum=-math.inf),
        "lte": _bound("maximum", integer=False, minimum=-math.inf),
        "gt": _bound("exclusiveMinimum", integer=False, minimum=-math.inf),
        "lt": _bound("exclusiveMaximum", integer=False, minimum=-math.inf),
        "positive": _bound("exclusiveMinimum", fixed=0),
        "nonnegative": _bound("minimum", fixed=0),
        "negative": _bound("exclusiveMaximum", fixed=0),
        "nonpositive": _bound("maximum", fixed=0),
        "multipleOf": _multiple_of, "step": _multiple_of, "finite": _no_op,
    },
    "array": {
        "min": _bound("minItems"), "max": _bound("maxItems"),
        "length": _bound("minItems", "maxItems"), "nonempty": _bound("minItems", fixed=1),
    },
    "object": {
        "strict": _extra_keys(allowed=False), "strip": _extra_keys(allowed=False),
        "passthrough": _extra_keys(allowed=True), "catchall": _catchall,
        "extend": _extend, "partial": _partial,
    },
}

_KIND_NAMES = {
    "string": "z.string()", "number": "z.number()", "boolean": "z.boolean()",
    "null": "z.null()", "any": "z.any()", "array": "an array", "object": "an object",
    "enum": "z.enum(...)", "literal": "z.literal(...)", "union": "a union",
    "record": "z.record(...)", "optional": "an optional schema",
    "nullable": "a nullable schema", "default": "a schema with a default",
}


# --- entry points -------------------------------------------------------------------------

def translate_zod(source: str, *, origin: str | None = None) -> JsonSchema:
    """The JSON Schema of one Zod expression (a ``schemaStr``), e.g. ``z.object({...})``.

    ``origin`` names the source in error messages.  A trailing ``;`` is allowed, as the
    original evaluates the text as ``return <source>``.  Raises :class:`ZodTranslationError`.
    """
    parser = _Parser(_Source(source, origin))
    schema = parser.schema()
    parser.accept(";")
    if parser.peek().kind != "end":
        raise parser.unexpected(parser.peek(), "expected the end of the schema")
    return schema.json


def translate_zod_module(source: str, *, origin: str | None = None) -> JsonSchema:
    """The JSON Schema a schema file (TypeScript or JavaScript) exports, read without running it.

    The file may be a bare Zod expression (what Hankweave 0.10.0 itself accepts) or a module
    made of these statements only:

    * ``import { z } from "zod"`` (any import form, ``zod`` or ``zod/...`` only), or
      ``const { z } = require("zod")``;
    * ``const``/``let``/``var`` declarations of a Zod schema or of a constant (string, number,
      boolean, null, array, object; ``as const`` allowed), optionally ``export``-ed and
      type-annotated; later schemas may name them (``items: z.array(Item)``, ``z.enum(LEVELS)``);
    * ``export default <schema>``, ``module.exports = <schema>``, ``export { X }``,
      ``export { X as default }``;
    * TypeScript ``type`` aliases and ``interface`` declarations, skipped.

    The schema is the default export, else the only exported schema, else the bare expression.
    Imports of other modules, any other statement, and a choice between several exported
    schemas are errors (:class:`ZodTranslationError`).
    """
    module = _ModuleReader(_Parser(_Source(source, origin)))
    return module.read().json


@dataclass
class _Exports:
    default: _Schema | None = None
    named: dict[str, _Schema] = field(default_factory=dict)
    bare: _Schema | None = None


_STATEMENT_STARTS = frozenset({"import", "export", "const", "let", "var", "type", "interface",
                               "module", "exports"})


class _ModuleReader:
    """Reads a schema file statement by statement, collecting its constants and exports."""

    def __init__(self, parser: _Parser) -> None:
        self.parser = parser
        self.exports = _Exports()

    def read(self) -> _Schema:
        parser = self.parser
        while parser.peek().kind != "end":
            if not parser.accept(";"):
                self.statement()
        return self.chosen()

    def chosen(self) -> _Schema:
        exports, end = self.exports, self.parser.peek()
        named = exports.named
        if exports.default is not None:
            return exports.default
        if len(named) == 1:
            return next(iter(named.values()))
        if named:
            raise self.parser.error(
                end, "several exported schemas (" + ", ".join(named) + ")",
                "export the one to use as default")
        if exports.bare is not None:
            return exports.bare
        raise self.parser.error(end, "no schema exported",
                                "use `export default z.object({...})` or a bare expression")

    def statement(self) -> None:
        parser, token = self.parser, self.parser.peek()
        if token.kind == "name" and token.text == "import":
            self.import_statement()
        elif token.kind == "name" and token.text == "export":
            self.export_statement()
        elif token.kind == "name" and token.text in ("const", "let", "var"):
            self.declaration(exported=False)
        elif token.kind == "name" and token.text in ("type", "interface"):
            self.skip_type_declaration()
        elif parser.at("module") and parser.at(".", 1) and parser.at("exports", 2):
            parser.index += 3
            parser.expect("=")
            self.set_default(parser.schema(), token)
        elif token.text == "(" or (token.kind == "name" and (
                token.text == "z" or isinstance(parser.bindings.get(token.text), _Schema))):
            self.bare_expression(token)
        else:
            raise parser.error(token, f"unsupported statement `{token.text}`",
                               "a schema file holds zod imports, const declarations, type "
                               "declarations and one exported Zod schema")
        self.end_statement()

    def end_statement(self) -> None:
        # A statement ends with ";", at the end of the file, or (automatic semicolon
        # insertion) where the next statement starts on a later line.
        parser = self.parser
        if parser.accept(";") or parser.peek().kind == "end":
            return
        previous, following = parser.tokens[parser.index - 1], parser.peek()
        source = parser.source
        if source.position(following.offset)[0] > source.position(previous.offset)[0]:
            return
        raise parser.unexpected(following, "expected the end of the statement")

    def bare_expression(self, token: _Token) -> None:
        if self.exports.bare is not None:
            raise self.parser.error(token, "a second bare expression",
                                    "a schema file holds one schema")
        self.exports.bare = self.parser.schema()

    def set_default(self, schema: _Schema, token: _Token) -> None:
        if self.exports.default is not None:
            raise self.parser.error(token, "a second default export")
        self.exports.default = schema

    def import_statement(self) -> None:
        parser = self.parser
        parser.advance()
        while parser.peek().kind != "string":
            token = parser.advance()
            if token.kind == "end" or token.text in (";", "(", "="):
                raise parser.unexpected(token, "expected `import ... from \"zod\"`")
        self.require_zod(parser.advance())

    def require_zod(self, module: _Token) -> None:
        if module.value != "zod" and not str(module.value).startswith("zod/"):
            raise self.parser.error(module, f"unsupported import of `{module.value}`",
                                    "a schema file is self-contained: only zod may be imported")

    def export_statement(self) -> None:
        parser = self.parser
        parser.advance()
        token = parser.peek()
        if parser.accept("default"):
            self.set_default(parser.schema(), token)
        elif token.text in ("const", "let", "var"):
            self.declaration(exported=True)
        elif token.text in ("type", "interface"):
            self.skip_type_declaration()
        elif parser.accept("{"):
            self.export_list()
        else:
            raise parser.unexpected(token, "expected `export default`, `export const` or "
                                           "`export { ... }`")

    def export_list(self) -> None:
        parser = self.parser
        while not parser.at("}"):
            name = parser.expect_name()
            alias = parser.expect_name().text if parser.accept("as") else name.text
            binding = parser.bindings.get(name.text)
            if not isinstance(binding, _Schema):
                raise parser.error(name, f"`{name.text}` is not a schema declared earlier")
            if alias == "default":
                self.set_default(binding, name)
            else:
                self.exports.named[alias] = binding
            if not parser.accept(","):
                break
        parser.expect("}")

    def declaration(self, *, exported: bool) -> None:
        parser = self.parser
        parser.advance()
        if parser.accept("{"):  # const { z } = require("zod")
            parser.expect("z")
            parser.expect("}")
            parser.expect("=")
            self.require_call()
            return
        name = parser.expect_name()
        if parser.accept(":"):
            self.skip_type_annotation()
        parser.expect("=", f" in the declaration of `{name.text}`")
        if parser.at("require") and parser.at("(", 1):
            self.require_call()
            if name.text != "z":
                raise parser.error(name, "zod must be bound to `z`")
            return
        binding = self.initializer(parser.peek())
        parser.bindings[name.text] = binding
        if exported and isinstance(binding, _Schema):
            self.exports.named[name.text] = binding

    def initializer(self, start: _Token) -> _Binding:
        parser = self.parser
        if start.text == "(" or (start.kind == "name" and start.text not in (
                "true", "false", "null") and not isinstance(parser.bindings.get(start.text),
                                                             _Value)):
            return parser.schema()
        return _Value(parser.value())

    def require_call(self) -> None:
        """``require("zod")``: CommonJS's import."""
        parser = self.parser
        parser.expect("require")
        parser.expect("(")
        module = parser.advance()
        if module.kind != "string":
            raise parser.unexpected(module, "expected `require(\"zod\")`")
        self.require_zod(module)
        parser.expect(")")

    def skip_type_annotation(self) -> None:
        # ": z.ZodType<Foo>" and the like say nothing about the schema's value.
        parser, depth = self.parser, 0
        while not (depth == 0 and parser.at("=")):
            token = parser.advance()
            if token.kind == "end":
                raise parser.unexpected(token, "expected `=`")
            depth += _depth_change(token, "([{<", ")]}>")

    def skip_type_declaration(self) -> None:
        """``type X = ...`` or ``interface X {...}``: types only, nothing to translate."""
        parser = self.parser
        keyword = parser.advance()
        depth = 0
        while True:
            token = parser.peek()
            if token.kind == "end" or (depth == 0 and token.text == ";"):
                return
            if depth == 0 and self._starts_next_statement(token):
                return
            parser.advance()
            depth += _depth_change(token, "([{", ")]}")
            if keyword.text == "interface" and depth == 0 and token.text == "}":
                return

    def _starts_next_statement(self, token: _Token) -> bool:
        source = self.parser.source
        previous = self.parser.tokens[self.parser.index - 1]
        later_line = source.position(token.offset)[0] > source.position(previous.offset)[0]
        return later_line and token.kind == "name" and token.text in _STATEMENT_STARTS


def _depth_change(token: _Token, openers: str, closers: str) -> int:
    if token.kind != "punct" or len(token.text) != 1:
        return 0
    return (token.text in openers) - (token.text in closers)
