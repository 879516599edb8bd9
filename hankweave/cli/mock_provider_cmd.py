"""``hankweave mock-provider serve``: the scripted mock provider as a foreground server."""

from __future__ import annotations

from pathlib import Path

import click

from hankweave.cli.errors import CLIError
from hankweave.exitcodes import EXIT_USAGE


@click.group("mock-provider")
def mock_provider_group() -> None:
    """A scripted LLM provider on 127.0.0.1 (Anthropic Messages and OpenAI Chat Completions),
    for dry runs and tests at no cost (docs/testing-hanks.md)."""


@mock_provider_group.command("serve")
@click.option("--script", "script_path", required=True, type=click.Path(path_type=Path),
              help="The script that decides the replies (JSON).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")
@click.option("--log", "log_path", type=click.Path(path_type=Path),
              help="Append every request and reply to this JSONL file.")
def serve_command(script_path: Path, port: int, log_path: Path | None) -> None:
    """Serve the mock provider until Ctrl-C (or SIGTERM), printing its base URLs."""
    from hankweave.config.errors import ConfigError
    from hankweave.mock_provider.script import load_script

    try:
        script = load_script(script_path)
    except ConfigError as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    import asyncio

    try:
        asyncio.run(_serve(script, port, log_path))
    except OSError as exc:
        raise CLIError(f"Cannot serve the mock provider on 127.0.0.1:{port}: "
                       f"{exc.strerror or exc}", EXIT_USAGE) from None


async def _serve(script: object, port: int, log_path: Path | None) -> None:
    import asyncio
    import signal

    from hankweave.mock_provider.script import MockScript
    from hankweave.mock_provider.server import MockProvider

    assert isinstance(script, MockScript)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with MockProvider(script, port=port, log_path=log_path) as mock:
        click.echo(f"Mock provider listening on {mock.base_url}")
        click.echo(f"  Anthropic: ANTHROPIC_BASE_URL={mock.base_url}")
        click.echo(f"  OpenAI:    OPENAI_BASE_URL={mock.openai_base_url}")
        if log_path is not None:
            click.echo(f"  Request log: {log_path}")
        click.echo("Press Ctrl-C to stop.", err=True)
        await stop.wait()
    click.echo("Mock provider stopped.", err=True)
