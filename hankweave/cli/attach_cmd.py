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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.attach_view import AttachView, money, shorten
from hankweave.cli.errors import CLIError

if TYPE_CHECKING:  # rich and asyncio load when the command runs, not with `hankweave --help`
    import asyncio

    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.live import Live
    from rich.text import Text

    from hankweave.cli.attach_view import WatchedCodon
    from hankweave.cli.tables import FitTable

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
        from hankweave.cli.run_summary import duration_text

        limit_s = float(view.budget["maxTimeSeconds"])
        header.append(f"   time limit {duration_text(limit_s)}", style="dim")
    return header


@dataclass(frozen=True)
class _Room:
    """How much of each part a frame shows: the current codon's newest stream entries, the
    newest recent-event lines, and the plan rows (``None``: every row)."""

    stream: int
    tail: int
    plan: int | None = None


# From roomy to tight: what shrinks first is the event tail, then the stream, then the plan
# (to a window around the running codon); the header, the running codon's title and the
# footer always stay.
_ROOMS = (_Room(10, 8), _Room(8, 6), _Room(6, 4), _Room(4, 3), _Room(3, 2), _Room(3, 2, 8),
          _Room(3, 0, 8), _Room(2, 0, 6), _Room(2, 0, 4), _Room(1, 0, 3), _Room(1, 0, 1),
          _Room(0, 0, 1))


def render_attach(view: AttachView, *, height: int | None = None,
                  now: datetime | None = None) -> RenderableType:
    """The screen of ``hankweave attach`` for the view's current state.

    With ``height`` (the terminal's rows), the frame is made to fit it whole: the event tail,
    then the codon's stream, then the plan shrink (:data:`_ROOMS`)."""
    return _Screen(view, height, now or datetime.now().astimezone())


class _Screen:
    """The frame at the width rich offers and at most ``height`` lines."""

    def __init__(self, view: AttachView, height: int | None, now: datetime) -> None:
        self.view, self.height, self.now = view, height, now

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.height is None:
            yield _frame(self.view, _ROOMS[0], options.max_width, self.now)
            return
        for room in _ROOMS:
            frame = _frame(self.view, room, options.max_width, self.now)
            if len(console.render_lines(frame, options, pad=False)) <= self.height:
                break
        yield frame


def _frame(view: AttachView, room: _Room, width: int, now: datetime) -> RenderableType:
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    inner = max(width - 4, 20)  # the frame's border and padding
    parts: list[RenderableType] = [_header(view), _plan(view, room.plan)]
    if view.current is not None:
        parts.append(_current(view.current, room.stream, inner, now))
    if view.idle:
        parts.append(Text(f"idle: {view.idle}", style="yellow"))
    if view.sentinels:
        counts = ", ".join(f"{count} {what}" for what, count in view.sentinels.items())
        parts.append(Text(f"sentinels: {counts} (last: {view.last_sentinel})", style="blue"))
    if room.tail:
        # One screen line per event (the journal has them whole).
        tail = Text("\n").join(Text(line, style=line_style, no_wrap=True, overflow="ellipsis")
                               for line, line_style in list(view.tail)[-room.tail:])
        parts.append(Panel(tail, title="Recent events", title_align="left",
                           border_style="dim"))
    footer = f"q detach · {view.connection} · seq {view.last_seq} · {view.url or ''}"
    title = f"hankweave attach — {_path(view.execution_path or '?', inner - 20)}"
    return Panel(Group(*parts), title=title, subtitle=shorten(footer, inner - 2),
                 subtitle_align="left")


def _current(codon: WatchedCodon, lines: int, inner: int, now: datetime) -> RenderableType:
    """The running (or last) codon: its title, status line, and newest stream entries."""
    from rich.panel import Panel
    from rich.text import Text

    end = codon.ended or now
    elapsed = (end - codon.started).total_seconds() if codon.started else 0.0
    icon, style = _STATUS_STYLE.get(codon.status, _ACTIVE)
    shown = list(codon.lines)[-lines:] if lines else []
    body = Text("\n").join(Text(shorten(text, 200), style=line_style)
                           for text, line_style in shown)
    if not codon.lines:
        body = Text("(no output yet)", style="dim")
    title = Text(shorten(f"{icon} {codon.codon_id}  {codon.name}", inner - 6),
                 style=f"bold {style}")
    status = (f"{codon.status} · {max(elapsed, 0):.1f}s · {money(codon.cost)}"
              f" · {codon.tool_calls} tool call{'' if codon.tool_calls == 1 else 's'}")
    return Panel(body if lines else Text(""), title=title, title_align="left",
                 subtitle=Text(shorten(status, inner - 6), style="dim"),
                 subtitle_align="left", height=None if lines else 2)


def _plan(view: AttachView, rows: int | None) -> FitTable:
    """The plan, one row per entry; ``rows`` keeps a window around the running codon."""
    from rich.text import Text

    from hankweave.cli.tables import FitTable, TableColumn

    table = FitTable([TableColumn("", key=True), TableColumn("codon", key=True), TableColumn("name", priority=0),
                      TableColumn("status", key=True), TableColumn("cost", key=True, justify="right")],
                     box=False, title="Plan")
    listed = [codon_id for codon_id, _ in view.plan]
    extra = [c for c in view.codons if c not in listed]  # started outside the known plan
    entries = [*view.plan, *((c, view.codons[c].name) for c in extra)]
    current = view.current.codon_id if view.current else None
    start, stop = _window(len(entries), listed.index(current) if current in listed else
                          len(entries) - 1 if current else 0, rows)
    if start:
        table.add_row("…", Text(f"{start} more above", style="dim"), "", "", "")
    for codon_id, name in entries[start:stop]:
        status = view.status.get(codon_id, "pending")
        icon, style = _STATUS_STYLE.get(status, _ACTIVE)
        cost = view.costs.get(codon_id)
        table.add_row(Text(icon, style=style), Text(codon_id, style="bold"), Text(name),
                      Text(status, style=style), money(cost) if cost is not None else "")
    if stop < len(entries):
        table.add_row("…", Text(f"{len(entries) - stop} more below", style="dim"), "", "", "")
    return table


def _window(total: int, focus: int, rows: int | None) -> tuple[int, int]:
    """The rows ``[start, stop)`` to show: all, or ``rows`` of them (two of which become the
    "more" markers when needed) with the focus row and one row before it in view."""
    if rows is None or total <= rows:
        return 0, total
    room = max(rows - 2, 1)
    start = min(max(focus - 1, 0), max(total - room, 0))
    return start, min(start + room, total)


def _path(path: str, width: int) -> str:
    """A path for a title: the home directory as ``~``, and its tail when it is too long."""
    home = str(Path.home())
    if path.startswith(home + "/"):
        path = "~" + path[len(home):]
    return path if len(path) <= width else "…" + path[-(max(width, 10) - 1):]


async def follow(view: AttachView, address: Callable[[], Any], *,
                 on_update: Callable[[], None] = lambda: None, reconnect: bool = True,
                 retry_delay: float = 0.5, stop: asyncio.Event | None = None) -> None:
    """Keep ``view`` fed from the server ``address()`` names, reconnecting with ``afterSeq``.

    ``address()`` returns a :class:`~hankweave.server.client.ServerAddress` (it is asked again
    before each connection: a restarted runtime has a new port) or raises
    :class:`~hankweave.server.client.NoServerError` while there is none.  Returns when
    ``stop`` is set, or when the connection ends and ``reconnect`` is false or the newest run
    has ended.
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
            # A runtime that leaves after its run ended has finished: nothing to wait for.
            finished = view.caught_up and view.run_ended
            view.connection = (f"disconnected (code {client.close_code});"
                               " reconnecting" if reconnect and not finished else "disconnected")
            on_update()
            if not reconnect or finished:
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
    reconnects and continues where it stopped.  When the run ends, attach exits with its
    summary and the commands to run next.  q (or Ctrl-C) detaches; the run goes on.
    """
    import asyncio

    from rich.console import Console

    from hankweave.cli.run_summary import summarize_run, summary_text
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
    detached = False
    try:
        detached = asyncio.run(_watch(view, address, console, reconnect=not no_reconnect))
    except KeyboardInterrupt:
        detached = True
    except NoServerError as exc:
        raise CLIError(str(exc), 1) from None
    where = str(execution_dir) if execution_dir is not None else view.execution_path
    if detached:
        console.print("Detached; the run goes on." if view.state.runs else
                      f"Detached. Watch again: hankweave attach -e {where or 'DIR'}",
                      highlight=False)
    if view.state.runs:
        console.print(summary_text(summarize_run(view.state), where), highlight=False)


async def _watch(view: AttachView, address: Callable[[], Any], console: Console, *,
                 reconnect: bool) -> bool:
    """Show ``view`` live until the run ends, the connection does (without ``reconnect``),
    or a person presses q; True when they did."""
    import asyncio

    from rich.live import Live

    stop = asyncio.Event()
    keys: list[str] = []

    def on_key(key: str) -> None:
        if key in ("q", "Q"):
            keys.append(key)
            stop.set()

    def frame() -> RenderableType:
        return render_attach(view, height=console.size.height)

    # Refreshed from this loop only (no refresh thread), so the view is never read mid-update.
    with Live(frame(), console=console, auto_refresh=False, transient=True) as live, \
            _Keypresses(on_key):
        last = 0.0

        def update() -> None:
            nonlocal last
            if view.ended_live:
                stop.set()
            if time.monotonic() - last > 0.05:  # a replay is thousands of events
                last = time.monotonic()
                live.update(frame(), refresh=True)

        ticker = asyncio.create_task(_tick(live, frame))
        try:
            await follow(view, address, on_update=update, reconnect=reconnect, stop=stop)
        finally:
            ticker.cancel()
    return bool(keys)


class _Keypresses:
    """Single keys from a terminal on stdin, handed to ``on_key`` from the running loop;
    nothing when stdin is not a terminal.  The terminal's mode is restored on exit."""

    def __init__(self, on_key: Callable[[str], None]) -> None:
        self.on_key = on_key
        self.saved: list[Any] | None = None

    def __enter__(self) -> _Keypresses:
        import asyncio
        import sys
        import termios
        import tty

        if not sys.stdin.isatty():
            return self
        self.fd = sys.stdin.fileno()
        self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)  # keys one at a time, unechoed; Ctrl-C still interrupts
        asyncio.get_running_loop().add_reader(self.fd, self._read)
        return self

    def _read(self) -> None:
        import os

        for key in os.read(self.fd, 64).decode(errors="replace"):
            self.on_key(key)

    def __exit__(self, *exc: object) -> None:
        import asyncio
        import termios

        if self.saved is None:
            return
        asyncio.get_running_loop().remove_reader(self.fd)
        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)


async def _tick(live: Live, frame: Callable[[], RenderableType]) -> None:
    """Redraw four times a second so elapsed times move while nothing happens."""
    import asyncio

    while True:
        await asyncio.sleep(0.25)
        live.update(frame(), refresh=True)
