"""``hankweave schema``: the JSON Schema of the hank file, for editors and other tools."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from hankweave.cli.errors import CLIError


@click.command("schema")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="Write the schema to FILE instead of stdout.",
)
def schema_command(output: Path | None) -> None:
    """Print the JSON Schema (draft 2020-12) of hank.json.

    Point a hank's "$schema" at the written file to get completion and checks in an editor.
    The schema describes structure only; `hankweave validate` also checks files, models and
    the rules between codons.
    """
    from hankweave.config import hank_json_schema

    text = json.dumps(hank_json_schema(), indent=2, ensure_ascii=False) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    from hankweave.fsutil import atomic_write_bytes

    target = Path(os.path.abspath(output))
    if not target.parent.is_dir():
        raise CLIError(f"Cannot write {target}: the directory {target.parent} does not exist")
    try:
        atomic_write_bytes(target, text.encode("utf-8"))
    except OSError as exc:
        raise CLIError(f"Cannot write {target}: {exc.strerror or exc}") from None
    click.echo(f"Wrote the hank JSON Schema to {target}")


__all__ = ["schema_command"]
