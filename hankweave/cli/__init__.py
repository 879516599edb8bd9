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
    from hankweave.cli.attach_cmd import attach_command
    from hankweave.cli.cleanup_cmd import cleanup_command
    from hankweave.cli.ctl_cmd import ctl_group
    from hankweave.cli.init_cmd import init_command
    from hankweave.cli.inspect import inspect_group
    from hankweave.cli.journal_cmd import journal_command
    from hankweave.cli.mock_provider_cmd import mock_provider_group
    from hankweave.cli.plugins_cmd import plugins_command
    from hankweave.cli.replay_cmd import replay_command
    from hankweave.cli.rollback_cmd import rollback_command
    from hankweave.cli.run_cmd import run_command
    from hankweave.cli.schema_cmd import schema_command
    from hankweave.cli.validate_cmd import validate_command

    for command in (run_command, replay_command, validate_command, init_command, inspect_group,
                    journal_command, rollback_command, attach_command, ctl_group,
                    cleanup_command, schema_command, plugins_command, mock_provider_group):
        cli.add_command(command)


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
