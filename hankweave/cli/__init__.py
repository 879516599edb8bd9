"""The ``hankweave`` command line (click)."""

from __future__ import annotations

import contextlib
import sys

import click

from hankweave import __version__
from hankweave.cli.errors import CLIError, run_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hankweave")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.option("--diet-journal", metavar="DIR", expose_value=False, is_eager=True,
              callback=lambda ctx, _, value: _maintenance(ctx, "diet", value),
              help="Compress a finished execution's event journal (restorable), then exit.")
@click.option("--restore-journal", metavar="DIR", expose_value=False, is_eager=True,
              callback=lambda ctx, _, value: _maintenance(ctx, "restore", value),
              help="Rebuild a dieted execution's event journal, verified byte for byte.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run hanks: ordered plans of sealed LLM-agent tasks (codons), checkpointed and resumable."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _maintenance(ctx: click.Context, what: str, directory: str | None) -> None:
    """Hankweave 0.11's journal maintenance flags: do it and exit (no command follows)."""
    if directory is None or ctx.resilient_parsing:
        return
    from hankweave.cli.journal_cmd import diet_journal_command, restore_journal_command

    (diet_journal_command if what == "diet" else restore_journal_command)(directory)
    ctx.exit(0)


def _register_commands() -> None:
    from hankweave.cli.answer_cmd import answer_command
    from hankweave.cli.attach_cmd import attach_command
    from hankweave.cli.cleanup_cmd import cleanup_command
    from hankweave.cli.compare_cmd import compare_command
    from hankweave.cli.ctl_cmd import ctl_group
    from hankweave.cli.fork_cmd import fork_command
    from hankweave.cli.init_cmd import init_command
    from hankweave.cli.inspect import inspect_group
    from hankweave.cli.inspect_budget import inspect_budget
    from hankweave.cli.inspect_proxy import inspect_proxy
    from hankweave.cli.journal_cmd import journal_command
    from hankweave.cli.mock_provider_cmd import mock_provider_group
    from hankweave.cli.pack_cmd import pack_command
    from hankweave.cli.plugins_cmd import plugins_command
    from hankweave.cli.replay_cmd import replay_command
    from hankweave.cli.rollback_cmd import rollback_command
    from hankweave.cli.run_cmd import run_command
    from hankweave.cli.schema_cmd import schema_command
    from hankweave.cli.validate_cmd import validate_command

    for command in (run_command, replay_command, validate_command, init_command, inspect_group,
                    journal_command, rollback_command, attach_command, ctl_group,
                    cleanup_command, schema_command, plugins_command, mock_provider_group,
                    answer_command, pack_command, fork_command, compare_command):
        cli.add_command(command)
    # `inspect budget` has its own module (it needs the allocation rules), which uses the
    # group's helpers: added here, so neither module imports the other back.
    inspect_group.add_command(inspect_budget)
    inspect_group.add_command(inspect_proxy)


_register_commands()


def main() -> None:
    """Console-script entry point."""
    import logging

    from hankweave.cli.plugins_cmd import install_plugin_commands
    from hankweave.secrets import mask_log_output

    if logging.lastResort is not None:  # other libraries' warnings reach stderr through it
        mask_log_output(logging.lastResort)
    try:
        install_plugin_commands(cli)
    except CLIError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(run_cli(cli))


def console_main() -> None:
    """The ``hankweave`` command (console script and ``python -m hankweave``): :func:`main`,
    then a prompt exit.

    Everything a command acknowledges is already durable (the runtime is safe under SIGKILL),
    so the process leaves without tearing the interpreter down, which takes a third of a
    second once an agent SDK is loaded: the exit handlers run, the output is flushed, then
    ``os._exit``.  Not while another (non-daemon) thread runs, nor under a profiler or a
    tracer (``python -m cProfile -m hankweave``, a debugger): they exit as usual.
    """
    try:
        main()
        code: str | int | None = 0
    except SystemExit as exc:
        code = exc.code
    _exit_promptly(code)


def _exit_promptly(code: str | int | None) -> None:
    import atexit
    import os
    import threading

    others = any(t.is_alive() and not t.daemon for t in threading.enumerate()
                 if t is not threading.main_thread())
    if others or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)  # let them finish; a profiler or tracer writes its data at the end
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()  # logging.shutdown() and the libraries' own cleanups
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0 if code is None else code)
