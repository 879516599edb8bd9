"""``hankweave schema``: the hank file's JSON Schema on stdout or in a file."""

from __future__ import annotations

import json
from pathlib import Path

import click
import jsonschema
from click.testing import CliRunner, Result

from hankweave.cli.init_cmd import render_scaffold_file, scaffold_files
from hankweave.cli.schema_cmd import schema_command
from hankweave.config import hank_json_schema


def schema(*args: str | Path) -> Result:
    group = click.Group("hankweave")
    group.add_command(schema_command)
    return CliRunner().invoke(group, ["schema", *map(str, args)])


def test_schema_prints_the_hank_json_schema_as_pretty_json() -> None:
    result = schema()

    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == hank_json_schema()
    assert result.stdout.startswith('{\n  "$schema": ')
    codon = printed["$defs"]["Codon"]["properties"]
    assert codon["continuationMode"]["enum"] == ["fresh", "continue-previous"]
    jsonschema.Draft202012Validator.check_schema(printed)


def test_the_init_scaffold_conforms_to_the_printed_schema() -> None:
    printed = json.loads(schema().stdout)
    template = dict(scaffold_files())["hank.json"].read_bytes()
    hank = json.loads(render_scaffold_file("hank.json", template, "example"))

    jsonschema.validate(hank, printed, cls=jsonschema.Draft202012Validator)


def test_schema_output_writes_the_same_text_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "hank.schema.json"

    result = schema("--output", target)

    assert result.exit_code == 0, result.output
    assert f"Wrote the hank JSON Schema to {target}" in result.stdout
    assert target.read_text() == schema().stdout


def test_schema_output_into_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = schema("--output", tmp_path / "no" / "such" / "dir" / "schema.json")

    assert result.exit_code == 2
    assert "does not exist" in result.output
    assert "Traceback" not in result.output
