"""``hankweave replay``: play a recorded execution back offline (shorthand for ``run --replay``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from hankweave.cli.run_options import run_options


@click.command("replay")
@click.argument("source")
@click.argument("hank", required=False)
@click.argument("data", required=False)
@click.option("--replay-speed", type=click.Choice(["instant", "recorded"]), default="instant",
              show_default=True, help="instant: as fast as possible; recorded: the recorded"
              " gaps between messages, each capped by HANKWEAVE_REPLAY_MAX_DELAY_MS (5000).")
@click.option("-e", "--execution", metavar="DIR", help="A new execution directory for the"
              " replay (default: a fresh managed one).")
@run_options("output")
@click.option("--headless", is_flag=True, help="No live view: plain log lines for CI.")
@click.option("--allow-commands", is_flag=True, help="Run the recording's rig commands and"
              " beforeCopy commands (each printed first). Without it they are listed and"
              " skipped: a recording's commands are its author's code.")
@click.option("--json", "json_events", is_flag=True, help="With --headless: every event as a"
              " JSON line on stdout.")
@click.pass_context
def replay_command(ctx: click.Context, source: str, hank: str | None, data: str | None,
                   replay_speed: str, execution: str | None, output: str | None,
                   headless: bool, allow_commands: bool, json_events: bool) -> None:
    """Replay SOURCE, a recording (.hwrec.tar.gz from `hankweave export`) or a recorded
    execution directory, in a fresh execution: no provider, no API key.

    The recorded hank and data are used unless HANK and DATA are given. Every codon plays its
    recorded agent messages and file changes, so the new execution's state, logs and
    checkpoints match the recording's. Needs the replay plugin (pip install hankweave-replay).

    A recording is its author's code and data: its shell commands (rig `command` operations,
    outputFiles beforeCopy) are listed and skipped unless --allow-commands is given; the
    choice is kept for `hankweave run -e DIR` resuming the replay.
    """
    from hankweave.app.request import LaunchRequest
    from hankweave.cli.run_cmd import launch_with_progress

    if json_events and not headless:
        raise click.UsageError("--json needs --headless")
    request = LaunchRequest(
        hank=hank, data=data, execution=execution, options={"output": output},
        headless=headless or not sys.stderr.isatty(), replay=source, replay_speed=replay_speed,
        allow_commands=allow_commands,
        cwd=Path.cwd(), env=dict(os.environ))
    code = launch_with_progress(request, json_events=json_events)
    ctx.exit(code)
