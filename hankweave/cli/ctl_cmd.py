"""``hankweave ctl``: control a running hank from the shell, through its WebSocket server.

Each subcommand connects with the control token of the execution's ``runtime.lock``, sends
one command, prints the server's answer and exits 0 (done) or 1 (refused, or no server).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from hankweave.cli.errors import CLIError
from hankweave.exitcodes import EXIT_FAILED

__all__ = ["ctl_group"]


@dataclass(frozen=True)
class _Target:
    execution_dir: Path
    host: str
    port: int | None
    timeout: float


@click.group("ctl")
@click.option("-e", "--execution", "execution_dir", required=True, metavar="DIR",
              type=click.Path(path_type=Path), help="The execution directory of the running"
              " hank.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Where its server is.")
@click.option("--port", type=click.IntRange(1, 65535), help="Use this port instead of the"
              " one in runtime.lock.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0,
              show_default=True, metavar="SECONDS", help="How long to wait for the answer.")
@click.pass_context
def ctl_group(ctx: click.Context, execution_dir: Path, host: str, port: int | None,
              timeout: float) -> None:
    """Control a running hank: skip or stop its codon, start codons, roll back, shut down.

    Uses the control token in DIR/.hankweave/runtime.lock (readable only by the user who
    started the run).  Starting codons and rolling back are accepted while the runtime waits
    for a command: with `hankweave run --no-autostart`, after `ctl stop`, or after a rollback.
    """
    ctx.ensure_object(dict)
    ctx.obj["ctl"] = _Target(execution_dir, host, port, timeout)


def _send(command: str, data: dict[str, Any] | None = None) -> Any:
    """Send one command to the server of the execution; return its reply or exit 1."""
    import asyncio  # here, not at import: `hankweave --help` stays fast

    from hankweave.server.client import (
        ControlClient,
        ControlRefusedError,
        NoServerError,
        server_address,
    )

    target: _Target = click.get_current_context().obj["ctl"]
    try:
        address = server_address(target.execution_dir, host=target.host, port=target.port)
    except NoServerError as exc:
        raise CLIError(str(exc), EXIT_FAILED) from None
    if not address.token:
        raise CLIError(f"{target.execution_dir}/.hankweave/runtime.lock has no control token"
                       " (written by a runtime without live control?)", EXIT_FAILED)

    async def go() -> Any:
        client = await ControlClient.connect(address.url, token=address.token,
                                             require_control=True)
        async with client:
            return await client.command(command, data, timeout=target.timeout)

    try:
        reply = asyncio.run(go())
    except NoServerError as exc:
        raise CLIError(str(exc), EXIT_FAILED) from None
    except ControlRefusedError as exc:
        raise CLIError(f"Control refused: {exc}", EXIT_FAILED) from None
    except TimeoutError:
        raise CLIError(f"No answer to {command} within {target.timeout:g}s; the runtime may"
                       " still carry it out", EXIT_FAILED) from None
    if not reply.ok:
        raise CLIError(f"{reply.message} ({reply.code})", EXIT_FAILED)
    return reply


@ctl_group.command("skip")
def skip_command() -> None:
    """Skip the running codon (it ends as skipped; the run goes on)."""
    click.echo(_send("codon.skip").message)


@ctl_group.command("stop")
@click.option("--reason", help="Recorded in the codon's failure reason.")
def stop_command(reason: str | None) -> None:
    """Stop the running codon now: it fails (retriable) and the runtime waits for a command."""
    click.echo(_send("codon.forceStop", {"reason": reason} if reason else None).message)


@ctl_group.command("next")
def next_command() -> None:
    """Start the next codon of the execution thread."""
    click.echo(_send("codon.next").message)


@ctl_group.command("start")
@click.argument("codon_id", metavar="CODON")
@click.option("--skip-rig", is_flag=True, help="Do not run the codon's rig setup.")
def start_command(codon_id: str, skip_rig: bool) -> None:
    """Start CODON (a codon id of the execution plan, e.g. `review` or `draft#2`)."""
    data: dict[str, Any] = {"codonId": codon_id}
    if skip_rig:
        data["skipPreCommands"] = True
    click.echo(_send("codon.start", data).message)


@ctl_group.command("redo")
def redo_command() -> None:
    """Run the most recent codon again."""
    click.echo(_send("codon.redo").message)


@ctl_group.command("rollback")
@click.option("--to", "codon_id", metavar="CODON", help="Roll back to a checkpoint of CODON.")
@click.option("--type", "checkpoint_type", default="end", show_default=True,
              type=click.Choice(["end", "start", "completed", "error", "skipped", "rig-setup"]),
              help="With --to: which of its checkpoints (end: as it ended; start: before it"
              " ran).")
@click.option("--checkpoint", "sha", metavar="SHA", help="Roll back to this checkpoint id (a"
              " unique prefix is enough).")
@click.option("--last-success", is_flag=True, help="Roll back to the last successful codon.")
@click.option("--restart", is_flag=True, help="Start the next codon right after.")
def rollback_command(codon_id: str | None, checkpoint_type: str, sha: str | None,
                     last_success: bool, restart: bool) -> None:
    """Restore a checkpoint and continue the run from there (in a new continuation run)."""
    chosen = [flag for flag, given in (("--to", codon_id), ("--checkpoint", sha),
                                       ("--last-success", last_success)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to CODON, --checkpoint SHA,"
                               " --last-success")
    if codon_id:
        reply = _send("rollback.toCodon", {"codonId": codon_id, "checkpointType": checkpoint_type,
                                           "autoRestart": restart})
    elif sha:
        reply = _send("rollback.toCheckpoint", {"checkpointSha": sha, "autoRestart": restart})
    else:
        reply = _send("rollback.toLastSuccess", {"autoRestart": restart})
    click.echo(reply.message)


@ctl_group.command("checkpoints")
@click.option("--run", "run_id", metavar="RUN_ID", help="Only this run's checkpoints.")
@click.option("--json", "as_json", is_flag=True, help="Print the listing as JSON.")
def checkpoints_command(run_id: str | None, as_json: bool) -> None:
    """List the checkpoints a rollback can restore, newest first."""
    reply = _send("checkpoint.list", {"runId": run_id} if run_id else None)
    listing = reply.result or {}
    if as_json:
        click.echo(json.dumps(listing, indent=2))
        return
    checkpoints = listing.get("checkpoints") or []
    if not checkpoints:
        click.echo("No checkpoints.")
        return
    for entry in checkpoints:
        click.echo(f"{entry['sha'][:12]}  {entry['checkpointType']:<9}  {entry['codonId']:<20}"
                   f"  {entry['status']:<9}  {entry['timestamp']}")


@ctl_group.command("shutdown")
@click.option("--force", is_flag=True, help="Stop at once (exit code 1).")
@click.option("--reason", help="Logged with the request.")
def shutdown_command(force: bool, reason: str | None) -> None:
    """Shut the runtime down (the running codon is stopped; the execution can be resumed)."""
    command = "server.force_shutdown" if force else "server.shutdown"
    click.echo(_send(command, {"reason": reason} if reason else None).message)


@ctl_group.command("ping")
def ping_command() -> None:
    """Check that the runtime answers (and that the token is right)."""
    click.echo(_send("ping").message)
