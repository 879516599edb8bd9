"""Sentinel schemas in Zod as JSON Schema: the schema's JavaScript runs in the sandbox with a
``z`` of our own (``hankweave.sentinels.zod``, ``hankweave.sentinels.structured_output``)."""

from __future__ import annotations

import ast
import json
import string
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from hankweave.sentinels import structured_output, zod
from hankweave.sentinels.structured_output import (
    StructuredOutputSchemaError,
    structured_output_schema,
)
from hankweave.sentinels.zod import ZodTranslationError, translate_zod, translate_zod_module


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for a produced schema, which must itself be a valid JSON Schema."""
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def translation_error(source: str, *, module: bool = False) -> ZodTranslationError:
    with pytest.raises(ZodTranslationError) as caught:
        (translate_zod_module if module else translate_zod)(source)
    return caught.value


# --- types --------------------------------------------------------------------------------

@pytest.mark.parametrize(("source", "expected"), [
    ("z.string()", {"type": "string"}),
    ("z.number()", {"type": "number"}),
    ("z.boolean()", {"type": "boolean"}),
    ("z.null()", {"type": "null"}),
    ("z.any()", {}),
    ("z.unknown()", {}),
    ("z.array(z.string())", {"type": "array", "items": {"type": "string"}}),
    ("z.string().array()", {"type": "array", "items": {"type": "string"}}),
    ('z.enum(["a", "b"])', {"type": "string", "enum": ["a", "b"]}),
    ('z.literal("on")', {"type": "string", "const": "on"}),
    ("z.literal(-2.5)", {"type": "number", "const": -2.5}),
    ("z.literal(true)", {"type": "boolean", "const": True}),
    ("z.literal(null)", {"type": "null"}),
    ("z.union([z.string(), z.number()])", {"anyOf": [{"type": "string"}, {"type": "number"}]}),
    ("z.record(z.number())", {"type": "object", "additionalProperties": {"type": "number"}}),
    ("z.record(z.string(), z.boolean())",
     {"type": "object", "additionalProperties": {"type": "boolean"}}),
    ('z.record(z.enum(["x", "y"]), z.number())',
     {"type": "object", "additionalProperties": {"type": "number"},
      "propertyNames": {"type": "string", "enum": ["x", "y"]}}),
    ("z.optional(z.string())", {"type": "string"}),
    ("z.nullable(z.string())", {"type": ["string", "null"]}),
])
def test_each_supported_type_translates_to_its_json_schema(source: str, expected: Any) -> None:
    assert translate_zod(source) == expected
    validator(expected)


def test_an_object_lists_its_properties_requires_its_keys_and_forbids_others() -> None:
    assert translate_zod("z.object({ name: z.string(), age: z.number() })") == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "number"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }


def test_optional_and_defaulted_keys_are_not_required() -> None:
    schema = translate_zod(
        'z.object({ a: z.string().optional(), b: z.number().default(3), c: z.boolean() })')
    assert schema["required"] == ["c"]
    assert schema["properties"]["b"] == {"type": "number", "default": 3}


def test_nullish_keys_are_optional_and_accept_null() -> None:
    schema = translate_zod("z.object({ a: z.string().nullish() })")
    assert schema["required"] == []
    assert schema["properties"]["a"] == {"type": ["string", "null"]}


def test_nullable_wraps_enums_in_any_of_and_keeps_the_description_outside() -> None:
    schema = translate_zod('z.enum(["a"]).describe("the choice").nullable()')
    assert schema == {"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "null"}],
                      "description": "the choice"}
    assert validator(schema).is_valid(None)


def test_describe_sets_the_description_and_params_objects_may_carry_one() -> None:
    assert translate_zod('z.string().describe("who")') == {"type": "string",
                                                           "description": "who"}
    assert translate_zod('z.number({ description: "n", invalid_type_error: "x" })') == {
        "type": "number", "description": "n"}


@pytest.mark.parametrize(("source", "expected"), [
    ("z.string().min(1).max(5)", {"type": "string", "minLength": 1, "maxLength": 5}),
    ("z.string().length(2)", {"type": "string", "minLength": 2, "maxLength": 2}),
    ("z.string().nonempty()", {"type": "string", "minLength": 1}),
    ('z.string().min(1, "required")', {"type": "string", "minLength": 1}),
    ('z.string().min(1, { message: "required" })', {"type": "string", "minLength": 1}),
    ("z.number().int().min(0).max(10)", {"type": "integer", "minimum": 0, "maximum": 10}),
    ("z.number().gte(-1.5).lte(2)", {"type": "number", "minimum": -1.5, "maximum": 2}),
    ("z.number().gt(0).lt(1)", {"type": "number", "exclusiveMinimum": 0,
                                "exclusiveMaximum": 1}),
    ("z.number().positive()", {"type": "number", "exclusiveMinimum": 0}),
    ('z.number().negative("neg")', {"type": "number", "exclusiveMaximum": 0}),
    ("z.number().nonnegative()", {"type": "number", "minimum": 0}),
    ("z.number().nonpositive()", {"type": "number", "maximum": 0}),
    ("z.number().multipleOf(5)", {"type": "number", "multipleOf": 5}),
    ("z.number().step(0.5).finite()", {"type": "number", "multipleOf": 0.5}),
    ("z.array(z.string()).min(1).max(3)",
     {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}),
    ("z.array(z.string()).nonempty()",
     {"type": "array", "items": {"type": "string"}, "minItems": 1}),
    ("z.array(z.number()).length(2)",
     {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}),
])
def test_checks_translate_to_bounds(source: str, expected: Any) -> None:
    assert translate_zod(source) == expected


def test_object_policies_decide_additional_properties() -> None:
    assert translate_zod("z.object({}).strict()")["additionalProperties"] is False
    assert translate_zod("z.object({}).strip()")["additionalProperties"] is False
    assert "additionalProperties" not in translate_zod("z.object({}).passthrough()")
    assert translate_zod("z.object({}).catchall(z.number())")["additionalProperties"] == {
        "type": "number"}


def test_extend_adds_keys_and_partial_makes_every_key_optional() -> None:
    extended = translate_zod(
        "z.object({ a: z.string(), b: z.string() }).extend({ b: z.number().optional(), "
        "c: z.boolean() })")
    assert extended["properties"] == {"a": {"type": "string"}, "b": {"type": "number"},
                                      "c": {"type": "boolean"}}
    assert extended["required"] == ["a", "c"]
    assert translate_zod("z.object({ a: z.string() }).partial()")["required"] == []


def test_unions_flatten_and_discriminated_unions_are_any_of() -> None:
    assert translate_zod("z.string().or(z.number()).or(z.null())") == {
        "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]}
    schema = translate_zod(
        'z.discriminatedUnion("kind", [z.object({ kind: z.literal("a") }), '
        'z.object({ kind: z.literal("b"), n: z.number() })])')
    assert len(schema["anyOf"]) == 2
    check = validator(schema)
    assert check.is_valid({"kind": "b", "n": 1})
    assert not check.is_valid({"kind": "c"})


def test_a_union_key_is_optional_when_one_option_is() -> None:
    schema = translate_zod("z.object({ a: z.union([z.string(), z.number().optional()]) })")
    assert schema["required"] == []


def test_deep_nesting_translates_every_level() -> None:
    schema = translate_zod("""
        z.object({
          items: z.array(z.object({
            tags: z.array(z.enum(["x", "y"])).optional(),
            meta: z.record(z.object({ score: z.number().min(0) })).nullable(),
          })),
        })""")
    item = schema["properties"]["items"]["items"]
    assert item["required"] == ["meta"]
    assert item["properties"]["meta"]["type"] == ["object", "null"]
    score = item["properties"]["meta"]["additionalProperties"]["properties"]["score"]
    assert score == {"type": "number", "minimum": 0}


# --- source syntax ------------------------------------------------------------------------

def test_comments_trailing_commas_and_quoted_keys_are_read() -> None:
    schema = translate_zod("""
        // a sentinel's answer
        z.object({
          /* the person */ "full name": z.string(), // trailing comment
          'kind-of': z.enum(['a', 'b',],),
          [`plain`]: z.boolean(),  // a computed key, as JavaScript spells one
        },)""")
    assert list(schema["properties"]) == ["full name", "kind-of", "plain"]
    assert schema["properties"]["kind-of"]["enum"] == ["a", "b"]


def test_string_escapes_decode_as_in_javascript() -> None:
    schema = translate_zod(r'z.literal("tab\there \u00e9 \u{1F600} \uD83D\uDE00 \x41 \q")')
    assert schema["const"] == "tab\there é 😀 😀 A q"


def test_parentheses_and_a_trailing_semicolon_are_allowed() -> None:
    assert translate_zod("(z.string()).optional();") == {"type": "string"}


def test_the_issue_tracker_example_validates_answers() -> None:
    schema = translate_zod(
        "z.object({ issue: z.string(), file: z.string(), "
        "severity: z.enum(['low', 'medium', 'high', 'critical']) })")
    check = validator(schema)
    assert check.is_valid({"issue": "leak", "file": "a.ts", "severity": "high"})
    assert not check.is_valid({"issue": "leak", "file": "a.ts", "severity": "urgent"})
    assert not check.is_valid({"issue": "leak", "severity": "low"})
    assert not check.is_valid({"issue": "leak", "file": "a.ts", "severity": "low", "x": 1})


def test_a_nullable_bounded_string_accepts_null_and_checks_strings() -> None:
    check = validator(translate_zod("z.object({ a: z.string().min(2).nullable() })"))
    assert check.is_valid({"a": None})
    assert check.is_valid({"a": "ok"})
    assert not check.is_valid({"a": "x"})
    assert not check.is_valid({})


def test_integer_checks_reject_fractions() -> None:
    check = validator(translate_zod("z.number().int().positive()"))
    assert check.is_valid(3)
    assert not check.is_valid(1.5)
    assert not check.is_valid(0)


# --- errors -------------------------------------------------------------------------------

def test_an_unsupported_type_is_named_with_its_position_and_the_supported_list() -> None:
    error = translation_error("z.object({\n  name: z.string(),\n  next: z.lazy(() => x),\n})")
    assert (error.line, error.column) == (3, 11)
    assert str(error).startswith("unsupported Zod construct `z.lazy` at 3:11 (supported: ")
    assert "z.object" in str(error) and "z.enum" in str(error)


@pytest.mark.parametrize(("source", "construct"), [
    ("z.string().email()", "`.email`"),
    ("z.string().regex(/a/)", "`.regex`"),
    ("z.number().refine((n) => n > 0)", "`.refine`"),
    ("z.string().transform((s) => s)", "`.transform`"),
    ("z.tuple([z.string()])", "`z.tuple`"),
    ("z.date()", "`z.date`"),
    ("z.coerce.number()", "`z.coerce`"),
    ("z.object({}).merge(z.object({}))", "`.merge`"),
    ("z.string().optional().min(1)", "`.min`"),
    ("z.boolean().int()", "`.int`"),
])
def test_unsupported_methods_and_types_are_errors(source: str, construct: str) -> None:
    assert f"unsupported Zod construct {construct}" in str(translation_error(source))


def test_a_method_error_lists_what_that_type_supports() -> None:
    error = translation_error("z.number()\n  .int()\n  .safe()")
    assert (error.line, error.column) == (3, 4)
    assert "supported on z.number(): .int, .min" in str(error)


@pytest.mark.parametrize(("source", "problem", "line"), [
    ("z.object({ a: z.string()", "SyntaxError", 1),
    ("z.object({ a: z.string() )", "SyntaxError", 1),
    ("z.string(", "SyntaxError", 1),
    ("z.string", "the exported value is not a Zod schema", 1),
    ("z.string() z.number()", "SyntaxError", 1),
    ("@#!", "SyntaxError", 1),
    ("", "SyntaxError", 1),
    ('z.literal("open', "SyntaxError", 1),
    ("z.string() /* never closed", "SyntaxError", 1),
    ("z.literal(`a${b}`)", "ReferenceError: b is not defined", 1),
    ("z.enum([])", "non-empty list of strings", 1),
    ("z.enum([1, 2])", "non-empty list of strings", 1),
    ("z.literal([1])", "z.literal takes", 1),
    ("z.string().min(-1)", "takes a non-negative integer", 1),
    ("z.string()\n  .min(1.5)", "takes a non-negative integer", 2),
    ("z.number().multipleOf(0)", "takes a positive number", 1),
    ("z.record(z.number(), z.string())", "record keys must be", 1),
    ("z.discriminatedUnion('k', [z.string()])", "takes a list of z.object schemas", 1),
    ("z.union([])", "at least one option", 1),
    ("Item", "ReferenceError: Item is not defined", 1),
])
def test_syntax_and_argument_errors_say_what_is_wrong_and_where(source: str, problem: str,
                                                                 line: int) -> None:
    error = translation_error(source)
    assert problem in str(error)
    assert error.line == line


def test_the_origin_prefixes_the_message() -> None:
    with pytest.raises(ZodTranslationError, match=r"^schemas/task\.ts: unsupported"):
        translate_zod_module("z.lazy(() => 1)", origin="schemas/task.ts")


def test_ordinary_javascript_around_the_schema_runs() -> None:
    """The schema is code, as in the original: constants, functions, spreads and loops."""
    schema = translate_zod_module("""
        import { z } from "zod";
        const LEVELS = ["low", "high"].map((level) => level.toUpperCase());
        function named(description: string) { return z.string().describe(description); }
        const base = { id: named("the id") };
        const fields = Object.fromEntries(["a", "b"].map((k) => [k, z.number().optional()]));
        export default z.object({ ...base, ...fields, level: z.enum(LEVELS) });
    """)
    assert schema["properties"]["level"]["enum"] == ["LOW", "HIGH"]
    assert schema["properties"]["id"] == {"type": "string", "description": "the id"}
    assert schema["required"] == ["id", "level"]


# --- the sandbox --------------------------------------------------------------------------

@pytest.mark.parametrize(("source", "problem"), [
    ("process.exit(1)", "process is not defined"),
    ('require("fs").rmSync("/", { recursive: true })', "require is not defined"),
    ("z.object({ a: z.string().transform((s) => process.exit(1)) })", "`.transform`"),
    ("globalThis.fetch('http://127.0.0.1/')", "is not a function"),
    ("(() => { while (true) {} })()", "ran longer than"),
])
def test_a_schema_reaches_no_file_network_or_process(source: str, problem: str,
                                                     tmp_path: Path) -> None:
    assert problem in str(translation_error(source))


@pytest.mark.parametrize(("source", "problem"), [
    ('import fs from "fs";\nexport default z.string()', "unsupported import of `fs`"),
    ('const fs = require("fs");\nexport default z.string()', "unsupported import of `fs`"),
    ('import "./side-effect";\nz.string()', "unsupported import of `./side-effect`"),
    ('process.exit(1);\nexport default z.string()', "process is not defined"),
    ("export default z.string();\nfetch('http://127.0.0.1/')", "fetch is not defined"),
])
def test_a_module_imports_zod_only(source: str, problem: str) -> None:
    assert problem in str(translation_error(source, module=True))


@pytest.mark.parametrize("module", [zod, structured_output])
def test_the_python_modules_run_nothing_themselves(module: Any) -> None:
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not called & {"eval", "exec", "compile", "__import__", "open"}
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "hankweave"}
    assert not imported & {"subprocess", "os", "runpy", "ctypes"}


# --- schema files -------------------------------------------------------------------------

def test_a_bare_expression_file_is_the_original_form() -> None:
    source = "z.object({ task: z.string(), priority: z.enum(['high', 'medium', 'low']) })\n"
    assert translate_zod_module(source) == translate_zod(source)


@pytest.mark.parametrize("source", [
    'import { z } from "zod";\nexport default z.object({ a: z.string() });',
    "import { z } from 'zod'\nexport const schema = z.object({ a: z.string() })",
    'import * as z from "zod/v3";\nmodule.exports = z.object({ a: z.string() })',
    'const { z } = require("zod");\nmodule.exports = z.object({ a: z.string() });',
    'const z = require("zod")\nconst S = z.object({ a: z.string() })\nexport { S as default }',
    "const S = z.object({ a: z.string() });\nexport { S };",
    "import type { ZodType } from 'zod';\nimport { z } from 'zod';\n"
    "export const schema: ZodType<{ a: string }> = z.object({ a: z.string() });\n"
    "export type Schema = z.infer<typeof schema>\n",
    "interface A { a: string; b?: number }\ntype B = { a: string };\n"
    "export default z.object({ a: z.string() })",
])
def test_module_forms_export_their_schema(source: str) -> None:
    assert translate_zod_module(source) == {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
        "additionalProperties": False}


def test_consts_are_referenced_by_later_schemas() -> None:
    schema = translate_zod_module("""
        import { z } from "zod";

        const LEVELS = ["low", "high"] as const;
        const Address = z.object({ city: z.string() });
        const Person = z.object({
          address: Address.optional(),
          level: z.enum(LEVELS),
          friends: z.array(Address),
        });

        export default z.object({ people: Person.array(), Address });
    """)
    person = schema["properties"]["people"]["items"]
    assert person["required"] == ["level", "friends"]
    assert person["properties"]["level"]["enum"] == ["low", "high"]
    assert schema["properties"]["Address"]["properties"] == {"city": {"type": "string"}}
    check = validator(schema)
    assert check.is_valid({"people": [{"level": "low", "friends": [{"city": "x"}]}],
                           "Address": {"city": "y"}})
    assert not check.is_valid({"people": [{"level": "mid", "friends": []}],
                               "Address": {"city": "y"}})


def test_a_referenced_schema_is_copied_not_shared() -> None:
    schema = translate_zod_module(
        "const A = z.string();\nexport default z.object({ a: A.describe('one'), b: A })")
    assert schema["properties"] == {"a": {"type": "string", "description": "one"},
                                    "b": {"type": "string"}}


def test_the_default_export_wins_over_named_ones() -> None:
    schema = translate_zod_module(
        "export const a = z.string();\nexport const b = z.number();\nexport default b;")
    assert schema == {"type": "number"}


@pytest.mark.parametrize(("source", "problem"), [
    ("export const a = z.string();\nexport const b = z.number();",
     "several exported schemas (a, b)"),
    ("const a = z.string();", "no schema exported"),
    ("export default z.string();\nexport default z.number();", "a second default export"),
    ("z.string()\nz.number()", "SyntaxError"),
    ("const L = ['a'];\nexport default L", "the exported value is not a Zod schema"),
    ("export { Missing as default }", "Missing is not defined"),
    ('const zod = require("zod")\nexport default zod.string()', "zod must be bound to `z`"),
    ("export default z.string() z.number()", "SyntaxError: Unexpected identifier 'z' at 1:27"),
])
def test_module_errors_say_what_is_wrong(source: str, problem: str) -> None:
    assert problem in str(translation_error(source, module=True))


def test_module_error_positions_count_lines_of_the_file() -> None:
    error = translation_error('import { z } from "zod";\n\nexport default z.object({\n'
                              "  a: z.string().url(),\n})", module=True)
    assert (error.line, error.column) == (4, 17)
    assert "unsupported Zod construct `.url`" in str(error)


# --- structured_output_schema -------------------------------------------------------------

TASK = "z.object({ task: z.string(), priority: z.enum(['high', 'medium', 'low']) })"


def test_object_mode_is_the_schema_itself(tmp_path: Path) -> None:
    schema = structured_output_schema({"output": "object", "schemaStr": TASK}, tmp_path)
    assert schema == translate_zod(TASK)


def test_array_mode_is_a_list_of_the_element_schema(tmp_path: Path) -> None:
    schema = structured_output_schema({"output": "array", "schemaStr": TASK}, tmp_path)
    assert schema == {"type": "array", "items": translate_zod(TASK)}
    check = validator(schema)
    assert check.is_valid([{"task": "t", "priority": "low"}, {"task": "u", "priority": "high"}])
    assert check.is_valid([])
    assert not check.is_valid({"task": "t", "priority": "low"})
    assert not check.is_valid([{"task": "t", "priority": "someday"}])


def test_enum_mode_is_one_of_the_values(tmp_path: Path) -> None:
    schema = structured_output_schema(
        {"output": "enum", "enumValues": ["critical", "low"], "schemaName": "risk"}, tmp_path)
    assert schema == {"type": "string", "enum": ["critical", "low"]}
    assert validator(schema).is_valid("low")
    assert not validator(schema).is_valid("medium")


def test_a_schema_file_is_read_relative_to_the_base_dir(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "task.ts").write_text(
        f'import {{ z }} from "zod";\nexport default {TASK};\n', encoding="utf-8")
    schema = structured_output_schema(
        {"output": "object", "schemaFile": "./schemas/task.ts"}, tmp_path)
    assert schema == translate_zod(TASK)


def test_a_json_schema_may_be_given_directly(tmp_path: Path) -> None:
    direct = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    (tmp_path / "answer.json").write_text(json.dumps(direct), encoding="utf-8")
    from_file = structured_output_schema({"output": "object", "schemaFile": "answer.json"},
                                         tmp_path)
    from_text = structured_output_schema(
        {"output": "object", "schemaStr": "  " + json.dumps(direct)}, tmp_path)
    assert from_file == from_text == direct


def test_an_array_of_a_direct_schema_keeps_its_definitions_at_the_root(tmp_path: Path) -> None:
    direct = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$defs": {"n": {"type": "integer"}},
              "type": "object", "properties": {"n": {"$ref": "#/$defs/n"}}}
    schema = structured_output_schema(
        {"output": "array", "schemaStr": json.dumps(direct)}, tmp_path)
    assert set(schema) == {"$schema", "$defs", "type", "items"}
    check = validator(schema)
    assert check.is_valid([{"n": 1}])
    assert not check.is_valid([{"n": "one"}])


@pytest.mark.parametrize(("config", "problem"), [
    ({"output": "table", "schemaStr": TASK}, "must be one of object, array, enum"),
    ({"output": "enum"}, "needs enumValues"),
    ({"output": "enum", "enumValues": [1]}, "needs enumValues"),
    ({"output": "enum", "enumValues": ["a"], "schemaStr": TASK}, "takes enumValues, not"),
    ({"output": "object"}, "exactly one of schemaStr and schemaFile"),
    ({"output": "object", "schemaStr": TASK, "schemaFile": "t.ts"}, "exactly one of"),
    ({"output": "object", "schemaStr": ""}, "exactly one of"),
    ({"output": "array", "schemaFile": "missing.ts"}, "cannot read schemaFile 'missing.ts'"),
    ({"output": "object", "schemaStr": '{"type": }'}, "schemaStr: invalid JSON Schema"),
    ({"output": "object", "schemaStr": "z.lazy(() => 1)"},
     "schemaStr: unsupported Zod construct `z.lazy` at 1:3"),
])
def test_structured_output_errors_say_what_is_wrong(config: dict[str, Any], problem: str,
                                                     tmp_path: Path) -> None:
    with pytest.raises(StructuredOutputSchemaError, match=None) as caught:
        structured_output_schema(config, tmp_path)
    assert problem in str(caught.value)


def test_a_zod_error_is_the_cause_of_the_structured_output_error(tmp_path: Path) -> None:
    (tmp_path / "s.ts").write_text("z.object({\n  a: z.date(),\n})", encoding="utf-8")
    with pytest.raises(StructuredOutputSchemaError) as caught:
        structured_output_schema({"output": "object", "schemaFile": "s.ts"}, tmp_path)
    cause = caught.value.__cause__
    assert isinstance(cause, ZodTranslationError)
    assert (cause.origin, cause.line, cause.column) == ("s.ts", 2, 8)


def test_a_json_array_is_not_a_schema(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("[1]", encoding="utf-8")
    with pytest.raises(StructuredOutputSchemaError, match="must be a JSON object"):
        structured_output_schema({"output": "object", "schemaFile": "s.json"}, tmp_path)


# --- properties ---------------------------------------------------------------------------

# A strategy of (Zod source, a document the schema must accept).
_WORD = st.text(string.ascii_letters, min_size=1, max_size=4)
_KEY = st.one_of(_WORD.map(lambda word: f"k{word}"),
                 st.text(string.printable, min_size=1, max_size=5).map(json.dumps))
_LEAVES = st.one_of(
    st.tuples(st.just("z.string()"), st.text(max_size=5)),
    st.tuples(st.just("z.number()"), st.floats(allow_nan=False, allow_infinity=False)),
    st.tuples(st.just("z.number().int().min(0)"), st.integers(min_value=0)),
    st.tuples(st.just("z.boolean()"), st.booleans()),
    st.lists(_WORD, min_size=1, max_size=3, unique=True).flatmap(
        lambda words: st.tuples(st.just(f"z.enum({json.dumps(words)})"),
                                st.sampled_from(words))),
    # Numbers JavaScript holds exactly (a schema's code runs as JavaScript).
    st.one_of(st.text(max_size=3), st.integers(-(2**53), 2**53), st.booleans(), st.none()).map(
        lambda value: (f"z.literal({json.dumps(value)})", value)),
)


def _extend(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    def obj(fields: dict[str, tuple[str, Any]]) -> tuple[str, Any]:
        shape = "".join(f"{key}: {source}, " for key, (source, _) in fields.items())
        sample = {json.loads(key) if key.startswith('"') else key: value
                  for key, (_, value) in fields.items()}
        return f"z.object({{ {shape}}})", sample

    return st.one_of(
        children.map(lambda c: (f"z.array({c[0]})", [c[1], c[1]])),
        children.map(lambda c: (f"{c[0]}.array().min(1)", [c[1]])),
        children.map(lambda c: (f"{c[0]}.nullable()", None)),
        children.map(lambda c: (f"{c[0]}.nullable()", c[1])),
        children.map(lambda c: (f"{c[0]}.describe({json.dumps('d')})", c[1])),
        children.map(lambda c: (f"z.union([{c[0]}, z.null()])", c[1])),
        children.map(lambda c: (f"z.record({c[0]})", {"k": c[1]})),
        st.dictionaries(_KEY, children, max_size=3).filter(
            lambda fields: len({json.loads(k) if k.startswith('"') else k for k in fields})
            == len(fields)).map(obj),
    )


_SCHEMAS = st.recursive(_LEAVES, _extend, max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(_SCHEMAS)
def test_random_nestings_give_valid_schemas_that_accept_their_samples(
        case: tuple[str, Any]) -> None:
    source, sample = case
    schema = translate_zod(source)
    assert validator(schema).is_valid(sample), (source, sample, schema)
    assert json.loads(json.dumps(schema)) == schema


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet="z.object({[]}),:'\"`ab1-_/*\n $")))
def test_any_text_is_translated_or_rejected_with_a_translation_error(text: str) -> None:
    for translate in (translate_zod, translate_zod_module):
        try:
            translate(text)
        except ZodTranslationError as error:
            assert error.line >= 1 and error.column >= 1
