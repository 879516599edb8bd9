"""The replay plugin's entry point: what every ``hankweave`` start loads, kept light.

Every start (``hankweave --help`` included) loads the installed plugins, so this module holds
only the hook implementations and the ``export`` command's definition; the implementation (tar
files, pydantic models, the replay harness, asyncio) is imported when a hook or the command
actually needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hankweave.api import hookimpl
from hankweave_replay.format import RECORDING_SUFFIX


@click.command("export")
@click.option("-e", "--execution", "execution_dir", required=True, metavar="DIR",
              type=click.Path(path_type=Path), help="The execution directory to record.")
@click.option("-o", "--output", metavar="FILE", type=click.Path(path_type=Path),
              help=f"The archive to write (default: <DIR name>{RECORDING_SUFFIX} here).")
@click.option("--checkpoint-backend", "backend", metavar="NAME",
              help="The checkpoint backend that holds the snapshots (default: from settings,"
                   " as the runtime chooses it).")
@click.option("--no-redact", "no_redact", is_flag=True,
              help="Keep secrets verbatim (env values, provider keys, tokens): only for a"
                   " recording that stays with people who may see them.")
def export_command(execution_dir: Path, output: Path | None, backend: str | None,
                   no_redact: bool) -> None:
    """Write a portable recording of an execution: one archive that replays offline.

    The archive holds the state, the execution metadata, the hank directory, the data source
    (when under 10 MiB), the codon logs and each codon's end-of-codon workspace snapshot.
    Secrets are left out (the control token, the server log, the journal) or replaced with
    [REDACTED:<kind>] in every file: env values, provider keys, token shapes and URL
    passwords; it prints how many of each kind. Replay it with `hankweave replay FILE`.
    """
    from hankweave_replay.cli import run_export_command

    run_export_command(execution_dir, output, backend, redact=not no_redact)


@hookimpl
def register_harnesses(register: Any) -> None:
    from hankweave_replay.harness import ReplayHarness

    register(ReplayHarness)


@hookimpl
def register_commands(cli: click.Group) -> None:
    cli.add_command(export_command)
