"""``hankweave attach``: a read-only live view of a running execution, over its WebSocket server.

The view is built from events only: the first connection asks for the whole journal
(``afterSeq: 0``), so the plan, statuses and costs are those of the run from its start, and
every reconnection asks for what came after the last event seen.  A runtime that restarts
(a new ``hankweave run -e DIR``, on a new port) is found again through ``runtime.lock``.

:class:`~hankweave.cli.attach_view.AttachView` folds events into what is shown and
:func:`render_attach` draws it (both are independent of the connection, so tests feed them
events and read the screen); :func:`follow` keeps a view connected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.attach_view import AttachView, money, shorten
from hankweave.cli.errors import CLIError

if TYPE_CHECKING:  # rich and asyncio load when the command runs, not with `hankweave --help`
    import asyncio

    from rich.console import RenderableType
    from rich.live import Live
    from rich.text import Text

__all__ = ["AttachView", "attach_command", "follow", "render_attach"]

_STATUS_STYLE = {"completed": ("✔", "green"), "failed": ("✘", "red"),
                 "skipped": ("↷", "yellow"), "pending": ("·", "dim")}
_ACTIVE = ("▶", "cyan")


def _header(view: AttachView) -> Text:
    """The run, its costs and the budget: the top line of the screen."""
    from rich.text import Text

    header = Text.assemble(
        ("run ", "dim"), (view.run_id or "-", "bold"),
        (f" ({view.run_status})" if view.run_status else "", "dim"),
        ("   total ", "dim"), money(view.total_cost), ("   this run ", "dim"),
        money(view.run_cost))
    if view.budget.get("maxDollars"):
        limit = float(view.budget["maxDollars"])
        share = view.total_cost / limit * 100 if limit else 0.0
        header.append(f"   budget {money(view.total_cost)} of {money(limit)} ({share:.0f}%)",
                      style="red" if share >= 100 else "")
    if view.budget.get("maxTimeSeconds"):
        header.append(f"   time limit {view.budget['maxTimeSeconds']:g}s", style="dim")
    return header


def render_attach(view: AttachView, *, stream_lines: int = 10,
                  now: datetime | None = None) -> RenderableType:
    """The screen of ``hankweave attach`` for the view's current state."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    now = now or datetime.now().astimezone()
    header = _header(view)

    plan = Table(show_header=True, header_style="bold", box=None, padding=(0, 1),
                 title="Plan", title_justify="left", title_style="bold")
    plan.add_column("")
    plan.add_column("codon")
    plan.add_column("name")
    plan.add_column("status")
    plan.add_column("cost", justify="right")
    listed = [codon_id for codon_id, _ in view.plan]
    extra = [c for c in view.codons if c not in listed]  # started outside the known plan
    for codon_id, name in [*view.plan, *((c, view.codons[c].name) for c in extra)]:
        status = view.status.get(codon_id, "pending")
        icon, style = _STATUS_STYLE.get(status, _ACTIVE)
        cost = view.costs.get(codon_id)
        plan.add_row(Text(icon, style=style), Text(codon_id, style="bold"), name,
                     Text(status, style=style), money(cost) if cost is not None else "")

    parts: list[RenderableType] = [header, plan]
    current = view.current
    if current is not None:
        end = current.ended or now
        elapsed = (end - current.started).total_seconds() if current.started else 0.0
        icon, style = _STATUS_STYLE.get(current.status, _ACTIVE)
        body = Text("\n").join(Text(shorten(text, 200), style=line_style)
                               for text, line_style in list(current.lines)[-stream_lines:])
        if not current.lines:
            body = Text("(no output yet)", style="dim")
        parts.append(Panel(body, title=Text.assemble(
            (f"{icon} {current.codon_id}", f"bold {style}"), f"  {current.name}  ",
            (f"{current.status} · {max(elapsed, 0):.1f}s · {money(current.cost)}"
             f" · {current.tool_calls} tool call(s)", "dim")), title_align="left"))
    if view.idle:
        parts.append(Text(f"idle: {view.idle}", style="yellow"))
    if view.sentinels:
        counts = ", ".join(f"{count} {what}" for what, count in view.sentinels.items())
        parts.append(Text(f"sentinels: {counts} (last: {view.last_sentinel})", style="blue"))
    tail = Text("\n").join(Text(line, style=line_style) for line, line_style in view.tail)
    parts.append(Panel(tail, title="Recent events", title_align="left", border_style="dim"))
    subtitle = f"{view.url or ''} · {view.connection} · seq {view.last_seq}"
    return Panel(Group(*parts), title=f"hankweave attach — {view.execution_path or '?'}",
                 subtitle=subtitle, subtitle_align="left")


async def follow(view: AttachView, address: Callable[[], Any], *,
                 on_update: Callable[[], None] = lambda: None, reconnect: bool = True,
                 retry_delay: float = 0.5, stop: asyncio.Event | None = None) -> None:
    """Keep ``view`` fed from the server ``address()`` names, reconnecting with ``afterSeq``.

    ``address()`` returns a :class:`~hankweave.server.client.ServerAddress` (it is asked again
    before each connection: a restarted runtime has a new port) or raises
    :class:`~hankweave.server.client.NoServerError` while there is none.  Returns when
    ``stop`` is set, or when the connection ends and ``reconnect`` is false.
    """
    import asyncio

    from hankweave.server.client import ControlClient, NoServerError

    stop = stop or asyncio.Event()
    while not stop.is_set():
        try:
            target = address()
            view.url = target.url
            client = await ControlClient.connect(target.url, mode="readonly",
                                                 after_seq=view.last_seq)
        except NoServerError as exc:
            view.connection = f"waiting for the runtime: {exc}"
            on_update()
            if not reconnect:
                raise
        else:
            async with client:
                view.handle(client.handshake)
                on_update()
                messages = client.messages()
                while not stop.is_set():
                    getter = asyncio.ensure_future(anext(messages, None))
                    stopper = asyncio.ensure_future(stop.wait())
                    done, _ = await asyncio.wait({getter, stopper},
                                                 return_when=asyncio.FIRST_COMPLETED)
                    stopper.cancel()
                    if getter not in done:
                        getter.cancel()
                        break
                    message = getter.result()
                    if message is None:
                        break
                    view.handle(message)
                    on_update()
            view.connection = (f"disconnected (code {client.close_code});"
                               " reconnecting" if reconnect else "disconnected")
            on_update()
            if not reconnect:
                return
        with_timeout = asyncio.ensure_future(stop.wait())
        await asyncio.wait({with_timeout}, timeout=retry_delay)
        with_timeout.cancel()


@click.command("attach")
@click.option("-e", "--execution", "execution_dir", metavar="DIR",
              type=click.Path(path_type=Path), help="The execution directory of a running"
              " hank (its runtime.lock names the port).")
@click.option("--port", type=click.IntRange(1, 65535), help="Connect to this port instead.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Where the server is.")
@click.option("--no-reconnect", is_flag=True, help="Exit when the connection ends instead of"
              " waiting for the runtime to come back.")
def attach_command(execution_dir: Path | None, port: int | None, host: str,
                   no_reconnect: bool) -> None:
    """Watch a running hank live, read-only: its plan, the current codon's output, costs.

    Connects to the WebSocket server of the runtime running on DIR (or --port) as a read-only
    client, replays the run's events, then follows them live.  If the runtime restarts, attach
    reconnects and continues where it stopped.  Ctrl-C quits; the run goes on.
    """
    import asyncio

    from rich.console import Console
    from rich.live import Live

    from hankweave.server.client import NoServerError, ServerAddress, server_address

    if execution_dir is None and port is None:
        raise click.UsageError("give -e DIR (the execution directory) or --port")

    def address() -> ServerAddress:
        if execution_dir is not None:
            return server_address(execution_dir, host=host, port=port)
        return ServerAddress(url=f"ws://{host}:{port}")

    try:
        address()  # a clear error now beats an empty screen
    except NoServerError as exc:
        raise CLIError(str(exc), 1) from None
    view = AttachView()
    console = Console()

    async def main() -> None:
        with Live(render_attach(view), console=console, refresh_per_second=4,
                  screen=False) as live:
            last = 0.0

            def update() -> None:
                nonlocal last
                if time.monotonic() - last > 0.05:  # a replay is thousands of events
                    last = time.monotonic()
                    live.update(render_attach(view))

            ticker = asyncio.create_task(_tick(live, view))
            try:
                await follow(view, address, on_update=update, reconnect=not no_reconnect)
            finally:
                ticker.cancel()
                live.update(render_attach(view))

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except NoServerError as exc:
        raise CLIError(str(exc), 1) from None


async def _tick(live: Live, view: AttachView) -> None:
    """Redraw every second so elapsed times move while nothing happens."""
    import asyncio

    while True:
        await asyncio.sleep(1)
        live.update(render_attach(view))
