"""The JSON Schema a sentinel's structured answer is validated against (``structuredOutput``).

A sentinel config's ``structuredOutput`` block (docs/sentinels.md) is
``{output: "object"|"array"|"enum", schemaStr? | schemaFile?, enumValues?, schemaName?,
schemaDescription?}``:

* ``object``: the answer matches the schema;
* ``array``: the answer is a list whose every element matches the schema;
* ``enum``: the answer is one of ``enumValues`` (and no schema is given).

The schema is Zod source (:mod:`hankweave.sentinels.zod`), as in Hankweave 0.10.0, or, our
extension, a JSON Schema given directly: a ``schemaStr`` whose text is a JSON object (Zod source
never starts with ``{``) or a ``schemaFile`` ending in ``.json``.  A direct schema is taken as
written (only checked to be a JSON object); in ``array`` mode it is the element's schema, like
Zod source.  ``schemaName`` and ``schemaDescription`` are hints for the provider call, not part
of the schema, so they are not read here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hankweave.sentinels.zod import (
    JsonSchema,
    ZodTranslationError,
    translate_zod,
    translate_zod_module,
)

__all__ = ["OUTPUT_MODES", "StructuredOutputSchemaError", "structured_output_schema"]

OUTPUT_MODES = ("object", "array", "enum")

# Keywords that belong at a document's root: "#/$defs/..." references resolve against the root,
# so wrapping a direct schema as an array's items must keep them there.
_ROOT_KEYWORDS = ("$schema", "$defs", "definitions")


class StructuredOutputSchemaError(ValueError):
    """A ``structuredOutput`` block whose schema cannot be had: a wrong mode or combination of
    fields, an unreadable file, invalid JSON, or Zod source that fails or is unsupported (then
    the :class:`~hankweave.sentinels.zod.ZodTranslationError` is the ``__cause__``)."""


def structured_output_schema(config: Mapping[str, Any], base_dir: Path) -> JsonSchema:
    """The JSON Schema the answer of a sentinel with this ``structuredOutput`` must match.

    ``config`` is the block as the config file spells it (``output``, ``schemaStr``,
    ``schemaFile``, ``enumValues``; as in the original, empty values count as absent, so a
    model's ``model_dump(by_alias=True)`` does too); a relative ``schemaFile``
    is read from ``base_dir``, the directory of the sentinel's config.  Zod source runs in the
    JavaScript sandbox (:mod:`hankweave.sentinels.zod`).  Raises
    :class:`StructuredOutputSchemaError`.
    """
    given = {key: value for key, value in config.items() if value}
    mode = given.get("output")
    if mode not in OUTPUT_MODES:
        raise StructuredOutputSchemaError(
            f"structuredOutput.output must be one of {', '.join(OUTPUT_MODES)}, not {mode!r}")
    if mode == "enum":
        return _enum_schema(given)
    element = _element_schema(given, base_dir)
    return _array_of(element) if mode == "array" else element


def _enum_schema(config: Mapping[str, Any]) -> JsonSchema:
    if "schemaStr" in config or "schemaFile" in config:
        raise StructuredOutputSchemaError(
            "structuredOutput with output 'enum' takes enumValues, not schemaStr/schemaFile")
    values = config.get("enumValues")
    if not (isinstance(values, list) and values and all(isinstance(v, str) for v in values)):
        raise StructuredOutputSchemaError(
            "structuredOutput with output 'enum' needs enumValues, a non-empty list of strings")
    return {"type": "string", "enum": list(values)}


def _element_schema(config: Mapping[str, Any], base_dir: Path) -> JsonSchema:
    text, schema_file = config.get("schemaStr"), config.get("schemaFile")
    if (text is None) == (schema_file is None):
        raise StructuredOutputSchemaError(
            f"structuredOutput with output {config['output']!r} needs exactly one of "
            "schemaStr and schemaFile")
    if text is not None:
        if not isinstance(text, str):
            raise StructuredOutputSchemaError("structuredOutput.schemaStr must be a string")
        if text.lstrip().startswith("{"):
            return _direct_schema(text, "schemaStr")
        return _translated(text, "schemaStr", module=False)
    if not isinstance(schema_file, str):
        raise StructuredOutputSchemaError("structuredOutput.schemaFile must be a string")
    source = _read_schema_file(base_dir / schema_file, schema_file)
    if schema_file.lower().endswith(".json"):
        return _direct_schema(source, schema_file)
    return _translated(source, schema_file, module=True)


def _read_schema_file(path: Path, named: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StructuredOutputSchemaError(f"cannot read schemaFile {named!r}: {exc}") from exc


def _translated(source: str, origin: str, *, module: bool) -> JsonSchema:
    try:
        if module:
            return translate_zod_module(source, origin=origin)
        return translate_zod(source, origin=origin)
    except ZodTranslationError as exc:
        raise StructuredOutputSchemaError(str(exc)) from exc


def _direct_schema(text: str, origin: str) -> JsonSchema:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StructuredOutputSchemaError(
            f"{origin}: invalid JSON Schema: {exc.msg} at {exc.lineno}:{exc.colno}") from exc
    if not isinstance(schema, dict):
        raise StructuredOutputSchemaError(f"{origin}: a JSON Schema must be a JSON object")
    return schema


def _array_of(element: JsonSchema) -> JsonSchema:
    items = dict(element)
    root = {key: items.pop(key) for key in _ROOT_KEYWORDS if key in items}
    return {**root, "type": "array", "items": items}
