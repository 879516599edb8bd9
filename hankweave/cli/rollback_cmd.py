"""``hankweave rollback``: put an execution back to a codon's checkpoint while nothing runs."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.options import execution_option
from hankweave.exitcodes import EXIT_USAGE


@click.command("rollback")
@execution_option()
@click.option("--to", "codon_id", required=True, metavar="CODON_ID",
              help="The codon whose completion checkpoint to restore.")
def rollback_command(execution_dir: Path, codon_id: str) -> None:
    """Restore the work tree to CODON_ID's checkpoint; the next run continues after it.

    Takes the execution's lock (refused while a runtime runs), restores agentRoot/ exactly as
    the codon left it, and records a continuation run, so `hankweave run -e DIR` carries on
    with the codon after CODON_ID.
    """
    import asyncio

    from hankweave.checkpoints import CheckpointError
    from hankweave.cli.checkpoint_backend import configured_backend
    from hankweave.config.errors import ConfigError
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.runtime.errors import RuntimeCommandError
    from hankweave.runtime.orchestrator import rollback_offline
    from hankweave.state.boot import take_ownership
    from hankweave.state.lock import LockError

    layout = ExecutionLayout(execution_dir.resolve())
    execution_dir, hankweave_dir = layout.path, layout.hankweave_dir
    if not layout.state_file.exists() and not layout.state_log_file.exists():
        raise CLIError(f"{execution_dir}: not an execution directory (no .hankweave/state.json)")
    try:
        backend = configured_backend()
    except (ConfigError, CheckpointError) as exc:
        raise CLIError(str(exc)) from None

    async def go() -> tuple[str, str]:
        owned = await take_ownership(hankweave_dir)
        store = backend(execution_dir)
        try:
            store.initialize()
            return await rollback_offline(owned, store, codon_id)
        finally:
            store.close()
            await owned.release()

    try:
        run_id, sha = asyncio.run(go())
    except (LockError, RuntimeCommandError, CheckpointError) as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    click.echo(f"Rolled back to {codon_id} (checkpoint {sha[:12]}); recorded run {run_id}."
               f" Continue with: hankweave run -e {shlex.quote(str(execution_dir))}")
