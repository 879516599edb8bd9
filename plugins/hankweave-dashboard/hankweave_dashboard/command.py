"""``hankweave dashboard``: serve the web dashboard on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from hankweave.api import EXIT_USAGE, CLIError

if TYPE_CHECKING:
    from hankweave_dashboard.resume import Resumer

DEFAULT_PORT = 8765


@click.command("dashboard")
@click.argument("directories", nargs=-1, type=click.Path(path_type=Path))
@click.option("--home", type=click.Path(path_type=Path), metavar="DIR",
              help="List the executions under DIR (default: HANKWEAVE_HOME, then"
              " ~/.hankweave-executions).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on. Anything but loopback exposes your executions"
              " to the network.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="The port (0: any free one).")
@click.option("--read-only", is_flag=True, help="Never allow control or answers, even with"
              " the key.")
def dashboard_command(directories: tuple[Path, ...], home: Path | None, host: str, port: int,
                      read_only: bool) -> None:
    """A live web dashboard of your executions: their plans, conversations, diffs, costs and
    budgets; answer interruptions and control live runs from the page.

    DIRECTORIES are execution directories, or directories holding them, shown instead of the
    home's.  Read-only until you unlock control on the page with the key printed here.
    """
    import secrets
    import socket

    from hankweave.api import local_host_names
    from hankweave_dashboard.resume import Resumer

    roots = _roots(directories, home)
    resumer = Resumer.of(click.get_current_context())
    key = None if read_only else secrets.token_urlsafe(18)
    hosts = sorted(local_host_names(host))
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as exc:
            raise CLIError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}. Choose"
                           " another --port (0 picks a free one).", EXIT_USAGE) from None
        sock.listen(128)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"hankweave dashboard: http://{shown}:{bound}/")
        click.echo(f"Executions under: {', '.join(map(str, roots))}")
        click.echo("Control key (unlock control on the page): "
                   + (key if key else "none: started with --read-only"))
        if key and resumer.submit:
            click.echo("Action links resume what they answer on the workers (hankweave"
                       " submit)")
        _serve(sock, roots, key, hosts, resumer)


def _roots(directories: tuple[Path, ...], home: Path | None) -> list[Path]:
    from hankweave.api import managed_executions_root

    roots = list(directories) or [home or managed_executions_root()]
    missing = [root for root in roots if not root.is_dir()]
    if missing:
        raise CLIError(f"{missing[0]}: no such directory", EXIT_USAGE)
    return [root.resolve() for root in roots]


def _serve(sock: object, roots: list[Path], key: str | None, hosts: list[str],
           resumer: Resumer) -> None:
    import uvicorn

    from hankweave_dashboard.app import Settings, create_app

    app = create_app(Settings(roots=roots, control_key=key, allowed_hosts=hosts,
                              resumer=resumer))
    # No access log: it would add nothing to what the page shows, and a request line is
    # private (an action link's token is in its fragment, never sent, but still).
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2,
                            access_log=False)
    uvicorn.Server(config).run(sockets=[sock])  # type: ignore[list-item]
