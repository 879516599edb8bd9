"""Sentinel schemas in Zod, run as JavaScript with a ``z`` of our own that builds JSON Schema.

Hankweave 0.10.0 evaluates a sentinel's ``schemaStr`` (and its ``schemaFile``) as JavaScript
with Zod 3's ``z`` in scope.  So does this module, in the JavaScript sandbox
(:mod:`hankweave.sentinels.js`: V8, no file, network or process access, bounded time and
memory), with ``z`` from ``zod.js``: Zod 3's builders, whose schemas know their JSON Schema
(draft 2020-12 vocabulary), which the sentinel's answer is then checked against.  Code around
the schema is ordinary JavaScript; a schema file's TypeScript annotations are stripped first
(:func:`_module_body`).  A fresh context serves each schema.

Supported (Zod 3 semantics): ``z.object``, ``z.string``, ``z.number``, ``z.boolean``,
``z.null``, ``z.any``, ``z.unknown``, ``z.array``, ``z.enum``, ``z.literal``, ``z.union``,
``z.discriminatedUnion``, ``z.record``, ``z.optional``, ``z.nullable``; on every schema
``.optional``, ``.nullable``, ``.nullish``, ``.describe``, ``.default``, ``.array``, ``.or``;
string, number and array bounds; ``.strict``, ``.strip``, ``.passthrough``, ``.catchall``,
``.extend``, ``.partial`` on objects.  Refinements, transforms, string formats and the other
builders cannot be checked by a JSON Schema: each is a :class:`ZodTranslationError` naming it
and its position, with what is supported there.

Decisions (as before the engine): ``z.object`` gives ``additionalProperties: false`` (the
schema doubles as the response format, where OpenAI's strict mode needs it; ``.passthrough()``
allows extra keys); ``.nullable()`` widens a plain ``type`` to a list and wraps ``enum``,
``const`` and ``anyOf`` schemas in ``anyOf`` with ``null``; ``.optional()`` and ``.default()``
take an object key out of ``required``.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any, TypeAlias

__all__ = ["JsonSchema", "ZodTranslationError", "translate_zod", "translate_zod_module"]

JsonSchema: TypeAlias = dict[str, Any]


class ZodTranslationError(ValueError):
    """A schema that cannot be had: unsupported, or not valid JavaScript.

    ``line`` and ``column`` (1-based) locate it in the source, ``origin`` names the source
    (``schemaStr`` or the schema file) when known.
    """

    def __init__(self, problem: str, *, line: int, column: int, hint: str = "",
                 origin: str | None = None) -> None:
        self.problem, self.line, self.column, self.hint = problem, line, column, hint
        self.origin = origin
        where = f"{origin}: " if origin else ""
        tail = f" ({hint})" if hint else ""
        super().__init__(f"{where}{problem} at {line}:{column}{tail}")


def translate_zod(source: str, *, origin: str | None = None) -> JsonSchema:
    """The JSON Schema of one Zod expression (a ``schemaStr``), e.g. ``z.object({...})``: the
    original evaluates it as ``return <source>``, so a trailing ``;`` is allowed."""
    expression = source.rstrip().removesuffix(";")
    return _run(f"return (\n{expression}\n);", source, origin, offset=1)


def translate_zod_module(source: str, *, origin: str | None = None) -> JsonSchema:
    """The JSON Schema a schema file (TypeScript or JavaScript) exports: its default export
    (``export default``, ``module.exports =``, ``export { X as default }``), else its only
    named export, else, in a file of one expression (the original's form), that expression.
    ``import``s other than of ``zod`` are errors."""
    body = _module_body(source, origin)
    if body is None:
        return translate_zod(source, origin=origin)
    return _run(body, source, origin, offset=0)


# --- running ------------------------------------------------------------------------------

_RUNNER = """
(function () {
  const z = __hankweave_zod.z, Schema = __hankweave_zod.Schema;
  const __defaults = [], __named = {};
  try {
    const __x = { set d(value) { __defaults.push(value); } };
    const bare = (function (z, __x, __named) {
%s
    })(z, __x, __named);
    let chosen;
    if (__defaults.length > 1) throw Object.assign(new Error("a second default export"),
      {problem: "a second default export", hint: "a schema file exports one schema"});
    if (__defaults.length) chosen = __defaults[0];
    else if (Object.keys(__named).length === 1) chosen = Object.values(__named)[0];
    else if (Object.keys(__named).length > 1) {
      const names = Object.keys(__named).join(", ");
      throw Object.assign(new Error("x"), {problem: `several exported schemas (${names})`,
        hint: "export the one to use as default", atEnd: true});
    } else if (bare !== undefined) chosen = bare;
    else throw Object.assign(new Error("x"), {problem: "no schema exported", atEnd: true,
      hint: "use `export default z.object({...})` or a bare expression"});
    if (!(chosen instanceof Schema)) throw Object.assign(new Error("x"), {atEnd: true,
      problem: "the exported value is not a Zod schema",
      hint: "export a schema built with z"});
    return JSON.stringify({schema: chosen.toJSONSchema()});
  } catch (e) {
    const known = e !== null && typeof e === "object" && typeof e.problem === "string";
    return JSON.stringify({problem: known ? e.problem : String(e), hint: known ? e.hint : "",
            atEnd: Boolean(known && e.atEnd), stack: String(e && e.stack || "")});
  }
})()
"""
_FRAME = re.compile(r"<anonymous>:(\d+):(\d+)")
_PARSE_LINE = re.compile(r"<anonymous>:(\d+): ")


def _runtime() -> str:
    return resources.files("hankweave.sentinels").joinpath("zod.js").read_text(encoding="utf-8")


def _run(body: str, source: str, origin: str | None, *, offset: int) -> JsonSchema:
    """Run ``body`` (the function body that returns or exports the schema) with ``z``;
    ``offset``: how many lines of ``body`` come before the source's first."""
    from hankweave.sentinels.js import JavaScriptError, Sandbox

    prefix = _runtime() + _RUNNER.split("%s")[0]
    first_line = prefix.count("\n") + 1 + offset  # the script line of the source's line 1
    sandbox = Sandbox()
    try:
        result = json.loads(sandbox.evaluate(prefix + body + _RUNNER.split("%s")[1]))
    except JavaScriptError as exc:
        lines = source.splitlines() or [""]
        line, column = (exc.line or first_line) - first_line + 1, _column(exc)
        if line > len(lines):  # past the source: it ended too early
            line, column = len(lines), len(lines[-1]) + 1
        raise ZodTranslationError(exc.message, line=max(line, 1), column=column,
                                  origin=origin) from None
    finally:
        sandbox.close()
    if "schema" in result:
        return dict(result["schema"])
    line, column = _position(result, source, first_line)
    raise ZodTranslationError(result["problem"], line=line, column=column,
                              hint=result.get("hint") or "", origin=origin)


def _column(exc: Any) -> int:
    """The column of a syntax error: where the engine's caret points (1 when it does not)."""
    caret = getattr(exc, "caret", None)
    return caret + 1 if isinstance(caret, int) else 1


def _position(result: dict[str, Any], source: str, first_line: int) -> tuple[int, int]:
    """Where in ``source`` the error was thrown: its innermost frame in the schema's code."""
    lines = source.splitlines() or [""]
    if not result.get("atEnd"):
        for match in _FRAME.finditer(result.get("stack", "")):
            line = int(match.group(1)) - first_line + 1
            if 1 <= line <= len(lines):
                return line, int(match.group(2))
    return len(lines), len(lines[-1]) + 1


# --- schema files -------------------------------------------------------------------------

_ZOD_MODULE = re.compile(r"zod(/[\w./-]*)?")
_IMPORT = re.compile(r"^[ \t]*import\b(?P<what>[^'\";]*?)(?:\bfrom\b)?\s*(['\"])(?P<module>[^'\"]+)\2[ \t]*;?",
                     re.M)
_REQUIRE_DECLARATION = re.compile(
    r"^[ \t]*(?:const|let|var)\s+(?P<binding>\{[^}]*\}|[\w$]+)\s*=\s*require\(\s*(['\"])"
    r"(?P<module>[^'\"]+)\2\s*\)[ \t]*;?", re.M)
_REQUIRE = re.compile(r"\brequire\(\s*(['\"])(?P<module>[^'\"]+)\1\s*\)")
_TYPE_DECLARATION = re.compile(r"^[ \t]*(?:export\s+)?(?:type\s+[\w$]+|interface\s+[\w$]+)", re.M)
_ANNOTATION = re.compile(r"\b(const|let|var)(\s+[\w$]+)\s*:\s*[^=;\n]+?(?=\s*=)")
_AS_CONST = re.compile(r"\bas\s+const\b")
_FUNCTION_PARAMS = re.compile(r"\bfunction\s*[\w$]*\s*\((?P<params>[^()]*)\)(?P<returns>\s*:\s*[^{=]+?)?(?=\s*\{)")
_ARROW_PARAMS = re.compile(r"\((?P<params>[^()]*)\)(?P<returns>\s*:\s*[^=()]+?)?(?=\s*=>)")
_PARAM_TYPE = re.compile(r":\s*[^,=]+")
_EXPORT_DECLARATION = re.compile(r"^([ \t]*)export\s+(const|let|var)\s+([\w$]+)", re.M)
_EXPORT_DEFAULT = re.compile(r"^([ \t]*)(export\s+default|module\.exports\s*=)", re.M)
_EXPORT_LIST = re.compile(r"^([ \t]*)export\s*\{([^}]*)\}[ \t]*;?", re.M)
_STATEMENTS = re.compile(r"^[ \t]*(?:const|let|var|export|module\.exports|function|class)\b",
                         re.M)


def _blank(text: str) -> str:
    """``text`` as spaces, its newlines kept: what is removed keeps the lines and columns."""
    return re.sub(r"[^\n]", " ", text)


def _module_body(source: str, origin: str | None) -> str | None:
    """A schema file as the body of a function that exports into ``__defaults``/``__named``;
    None for a file of one bare expression (run as a ``schemaStr``)."""
    text = _strip_imports(source, origin)
    text = _strip_types(text)
    if _STATEMENTS.search(text) is None:
        return None
    text = _EXPORT_LIST.sub(lambda m: m.group(1) + _export_list(m.group(2)), text)
    named: list[str] = []

    def declaration(match: re.Match[str]) -> str:
        named.append(match.group(3))
        return f"{match.group(1)}{match.group(2)} {match.group(3)}"

    text = _EXPORT_DECLARATION.sub(declaration, text)
    # ``__x.d = `` as long as what it replaces, so the columns after it stay.
    text = _EXPORT_DEFAULT.sub(lambda m: m.group(1) + "__x.d =".ljust(len(m.group(2))), text)
    exports = "".join(f"__named[{json.dumps(name)}] = {name};" for name in named)
    return f"{text}\n;{exports}"


def _strip_imports(source: str, origin: str | None) -> str:
    def refuse(module: str, offset: int, problem: str | None = None) -> ZodTranslationError:
        line = source.count("\n", 0, offset) + 1
        column = offset - (source.rfind("\n", 0, offset) + 1) + 1
        return ZodTranslationError(problem or f"unsupported import of `{module}`", line=line,
                                   column=column, hint="a schema file imports zod only",
                                   origin=origin)

    def imported(match: re.Match[str]) -> str:
        if not _ZOD_MODULE.fullmatch(match.group("module")):
            raise refuse(match.group("module"), match.start("module"))
        what = match.group("what").strip()
        if what and not what.startswith("type") and not re.fullmatch(
                r"\{\s*z\s*\}|\*\s+as\s+z|z", what):
            raise refuse("zod", match.start(), "zod must be bound to `z`")
        return _blank(match.group(0))

    def required(match: re.Match[str]) -> str:
        if not _ZOD_MODULE.fullmatch(match.group("module")):
            raise refuse(match.group("module"), match.start("module"))
        if not re.fullmatch(r"\{\s*z\s*\}|z", match.group("binding").strip()):
            raise refuse("zod", match.start(), "zod must be bound to `z`")
        return _blank(match.group(0))

    text = _IMPORT.sub(imported, source)
    text = _REQUIRE_DECLARATION.sub(required, text)
    other = _REQUIRE.search(text)
    if other is not None:
        raise refuse(other.group("module"), other.start("module"))
    return text


def _strip_types(text: str) -> str:
    """TypeScript without its types: ``type``/``interface`` declarations, annotations of
    declared names, ``as const``; each blanked so lines and columns stay."""
    while (match := _TYPE_DECLARATION.search(text)) is not None:
        end = _declaration_end(text, match.end())
        text = text[:match.start()] + _blank(text[match.start():end]) + text[end:]
    text = _ANNOTATION.sub(lambda m: m.group(1) + m.group(2) + _blank(
        m.group(0)[len(m.group(1) + m.group(2)):]), text)
    for pattern in (_FUNCTION_PARAMS, _ARROW_PARAMS):
        text = pattern.sub(_untyped_parameters, text)
    return _AS_CONST.sub(lambda m: _blank(m.group(0)), text)


def _untyped_parameters(match: re.Match[str]) -> str:
    """A parameter list (and return type) without its annotations, blanked in place."""
    whole, start = match.group(0), match.start()
    params = _PARAM_TYPE.sub(lambda m: _blank(m.group(0)), match.group("params"))
    offset = match.start("params") - start
    whole = whole[:offset] + params + whole[offset + len(params):]
    returns = match.group("returns")
    if returns:
        offset = match.start("returns") - start
        whole = whole[:offset] + _blank(returns) + whole[offset + len(returns):]
    return whole


def _declaration_end(text: str, start: int) -> int:
    """The end of a type declaration: its ``;``, or the end of its line, outside brackets."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char in "{[(<":
            depth += 1
        elif char in "}])>":
            depth -= 1
            if depth == 0 and char == "}" and text[start:index].lstrip().startswith("{"):
                return index + 1
        elif depth <= 0 and char in ";\n":
            return index + 1
    return len(text)


def _export_list(items: str) -> str:
    """``export { A, B as default }`` as assignments to the exports."""
    out = []
    for item in filter(None, (part.strip() for part in items.split(","))):
        name, _, alias = (piece.strip() for piece in item.partition(" as "))
        out.append(f"__x.d = {name};" if alias == "default"
                   else f"__named[{json.dumps(alias or name)}] = {name};")
    return " ".join(out)
