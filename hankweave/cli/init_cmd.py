"""``hankweave init``: scaffold a runnable example hank in an empty or new directory.

The files come from ``hankweave/scaffold/`` (package data).  ``hank.json`` is written from the
template with ``$schema`` set to :data:`~hankweave.config.HANK_SCHEMA_URL` and ``meta.name`` set
to the directory's name; ``__HANK_NAME__`` in text files is replaced by that name too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import click

from hankweave.cli.errors import CLIError

SCAFFOLD_PACKAGE = "hankweave"
SCAFFOLD_DIR = "scaffold"
HANK_FILE = "hank.json"
NAME_TOKEN = "__HANK_NAME__"
DRY_RUN_SCRIPT = "dry-run.json"
"""The mock provider's script for the example: neutral steps, so it drives any harness."""
_TEXT_SUFFIXES = frozenset({".md", ".txt", ".json"})


@click.command("init")
@click.argument(
    "directory",
    required=False,
    default=".",
    metavar="[DIR]",
    type=click.Path(path_type=Path, file_okay=True, dir_okay=True),
)
def init_command(directory: Path) -> None:
    """Create an example hank in DIR (default: the current directory), which must be empty or
    not exist yet.

    The hank has two codons (the second continues the first's session), a loop of two
    iterations, a rig copy from templates/, checkpointed and output files, a budget, a mock
    provider script for a dry run (dry-run.json), and a README that says how to run it
    offline or with a real model.
    """
    target = Path(os.path.abspath(directory))
    _check_target(target)
    name = hank_name_for(target)
    try:
        written = write_scaffold(target, name)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise CLIError(f"Init failed: {exc.strerror or exc}{where}") from None

    click.echo(f"Created the hank {name!r} in {target}:")
    for path in written:
        click.echo(f"  {path.relative_to(target).as_posix()}")
    shown = _shell_path(directory)
    click.echo("")
    click.echo("Next steps (README.md explains them):")
    click.echo(f"  hankweave validate {shown} {shown}/data")
    click.echo(f"  hankweave run {shown} {shown}/data --mock-provider {shown}/{DRY_RUN_SCRIPT}")
    click.echo("      a dry run: the agents work for real against a scripted provider on this "
               "machine (no key, no cost)")
    click.echo(f"  hankweave run {shown} {shown}/data")
    click.echo("      on Claude Haiku (set ANTHROPIC_API_KEY); the hank's budget stops it at "
               "$1 or 30 minutes")


def _check_target(target: Path) -> None:
    if not os.path.lexists(target):
        return
    if not target.is_dir():
        raise CLIError(
            f"{target} exists and is not a directory. Please run init in an empty directory or "
            "specify a new directory."
        )
    try:
        empty = not any(target.iterdir())
    except OSError as exc:
        raise CLIError(f"Init failed: cannot read {target}: {exc.strerror or exc}") from None
    if not empty:
        raise CLIError(
            f"Directory {target} is not empty. Please run init in an empty directory or specify "
            "a new directory."
        )


def hank_name_for(directory: Path) -> str:
    """A hank name from a directory name: lower case, runs of other characters become ``-``."""
    slug = re.sub(r"[^a-z0-9]+", "-", directory.name.lower()).strip("-")
    return slug or "example-hank"


def scaffold_files() -> Iterator[tuple[str, Traversable]]:
    """Every template file as ``(relative posix path, resource)``, sorted by path."""
    root = resources.files(SCAFFOLD_PACKAGE).joinpath(SCAFFOLD_DIR)
    found: list[tuple[str, Traversable]] = []

    def walk(node: Traversable, prefix: str) -> None:
        for child in node.iterdir():
            # Editable installs and source checkouts may hold bytecode caches next to the files.
            if child.name == "__pycache__" or child.name.endswith(".pyc"):
                continue
            relative = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, relative + "/")
            else:
                found.append((relative, child))

    walk(root, "")
    return iter(sorted(found))


def render_scaffold_file(relative: str, content: bytes, name: str) -> bytes:
    """The content written for one template file of a hank called ``name``."""
    from hankweave.config import HANK_SCHEMA_URL

    if relative == HANK_FILE:
        hank = json.loads(content)
        # Keep "$schema" first: editors read it from the top of the file.
        hank = {"$schema": HANK_SCHEMA_URL, **{k: v for k, v in hank.items() if k != "$schema"}}
        hank["meta"]["name"] = name
        return (json.dumps(hank, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if Path(relative).suffix in _TEXT_SUFFIXES:
        return content.decode("utf-8").replace(NAME_TOKEN, name).encode("utf-8")
    return content


def write_scaffold(target: Path, name: str) -> list[Path]:
    """Write the example hank into ``target`` (created if missing); return the files written.

    On failure, the files and directories created so far are removed again, so a failed init
    leaves the directory as it found it.
    """
    created: list[Path] = []
    created_dirs: list[Path] = []
    try:
        for directory in (*reversed(target.parents), target):
            if not directory.exists():
                directory.mkdir()
                created_dirs.append(directory)
        for relative, resource in scaffold_files():
            path = target / relative
            for directory in reversed(path.relative_to(target).parents):
                folder = target / directory
                if not folder.exists():
                    folder.mkdir()
                    created_dirs.append(folder)
            data = render_scaffold_file(relative, resource.read_bytes(), name)
            with open(path, "xb") as handle:  # never replace a file that appeared meanwhile
                created.append(path)
                handle.write(data)
    except OSError:
        for path in reversed(created):
            path.unlink(missing_ok=True)
        for directory in reversed(created_dirs):
            with contextlib.suppress(OSError):  # something else was put there meanwhile
                directory.rmdir()
        raise
    return created


def _shell_path(directory: Path) -> str:
    text = str(directory)
    return text if re.fullmatch(r"[\w./~+-]+", text) else "'" + text.replace("'", "'\\''") + "'"


__all__ = [
    "hank_name_for",
    "init_command",
    "render_scaffold_file",
    "scaffold_files",
    "write_scaffold",
]
