"""The ``hankweave`` command line (click)."""

from __future__ import annotations

import sys

import click

from hankweave import __version__
from hankweave.cli.errors import CLIError, run_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hankweave")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run hanks: ordered plans of sealed LLM-agent tasks (codons), checkpointed and resumable."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register_commands() -> None:
    from hankweave.cli.inspect import inspect_group
    from hankweave.cli.plugins_cmd import plugins_command

    cli.add_command(inspect_group)
    cli.add_command(plugins_command)


_register_commands()


def main() -> None:
    """Console-script entry point."""
    from hankweave.cli.plugins_cmd import install_plugin_commands

    try:
        install_plugin_commands(cli)
    except CLIError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(run_cli(cli))
