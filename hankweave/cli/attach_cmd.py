"""``hankweave attach``: a read-only live view of a running execution, over its WebSocket server.

The view is built from events only: the first connection asks for the whole journal
(``afterSeq: 0``), so the plan, statuses and costs are those of the run from its start, and
every reconnection asks for what came after the last event seen.  A runtime that restarts
(a new ``hankweave run -e DIR``, on a new port) is found again through ``runtime.lock``.

:class:`AttachView` folds events into what is shown and :func:`render_attach` draws it (both
are independent of the connection, so tests feed them events and read the screen);
:func:`follow` keeps a view connected.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.errors import CLIError

if TYPE_CHECKING:  # rich and asyncio load when the command runs, not with `hankweave --help`
    import asyncio

    from rich.console import RenderableType
    from rich.live import Live

    from hankweave.events.catalogue import (
        AssistantActionData,
        BudgetSummaryData,
        CodonCompletedData,
        CodonStartedData,
        IncompleteCodonData,
        SentinelErrorData,
        SentinelLoadedData,
        SentinelOutputData,
        SentinelTriggeredData,
        SentinelUnloadedData,
        ServerIdleData,
        StateTransitionData,
        ToolResultData,
    )
    from hankweave.events.reading import Event
    from hankweave.state.transitions import RunStartedData
    from hankweave.state.types import ExecutionCodonEntry

    _SentinelData = (SentinelLoadedData | SentinelTriggeredData | SentinelOutputData
                     | SentinelErrorData | SentinelUnloadedData)

__all__ = ["AttachView", "attach_command", "follow", "render_attach"]

_TERMINAL = ("completed", "failed", "skipped")
_STATUS_STYLE = {"completed": ("✔", "green"), "failed": ("✘", "red"),
                 "skipped": ("↷", "yellow"), "pending": ("·", "dim")}
_ACTIVE = ("▶", "cyan")


@dataclass
class _Codon:
    codon_id: str
    name: str
    status: str = "preparing"
    started: datetime | None = None
    ended: datetime | None = None
    cost: float = 0.0
    lines: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=200))
    tool_calls: int = 0


def _parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _money(value: float | None) -> str:
    return f"${value or 0:.4f}"


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


class AttachView:
    """What ``hankweave attach`` shows, folded from the server's messages.

    Feed it every message with :meth:`handle`; journaled events already seen (by ``seq``) are
    ignored, so a replay after a reconnection never counts anything twice.
    """

    def __init__(self, *, tail: int = 8) -> None:
        self.last_seq = 0
        """The seq of the last journaled event applied: where a reconnection resumes."""
        self.connection = "connecting"
        self.url: str | None = None
        self.execution_path: str | None = None
        self.run_id: str | None = None
        self.run_status: str | None = None
        self.plan: list[tuple[str, str]] = []
        self.status: dict[str, str] = {}
        self.costs: dict[str, float] = {}
        self.codons: dict[str, _Codon] = {}
        self.current: _Codon | None = None
        self.total_cost = 0.0
        self.run_cost = 0.0
        self.budget: dict[str, Any] = {}
        self.sentinels: Counter[str] = Counter()
        self.last_sentinel: str | None = None
        self.idle: str | None = None
        self.tail: deque[tuple[str, str]] = deque(maxlen=tail)

    # ----- input -----

    def handle(self, message: Mapping[str, Any]) -> None:
        """One message from the server, of any kind."""
        from hankweave.events.catalogue import HistoryBatchData, ServerReadyData
        from hankweave.events.reading import EventReadError, parse_event

        try:
            parsed = parse_event(message)
        except EventReadError:
            return
        data = parsed.data
        if parsed.type == "handshake.response":  # the protocol's, not the catalogue's
            mode = data.get("mode", "readonly") if isinstance(data, dict) else "readonly"
            self.connection = f"connected ({mode})"
        elif isinstance(data, ServerReadyData):
            self.execution_path = data.execution_path or self.execution_path
            budget = (data.model_extra or {}).get("budget")
            if isinstance(budget, dict):
                self.budget = dict(budget)
        elif isinstance(data, HistoryBatchData):
            for event in data.events or []:
                self.apply(event.to_wire())
        elif parsed.type not in ("command.response", "pong"):
            self.apply(message)

    def apply(self, raw: Mapping[str, Any]) -> None:
        """One event (journaled or sent to this client only)."""
        from hankweave.events.reading import EventReadError, parse_event

        try:
            event = parse_event(raw)
        except EventReadError:
            return
        seq = event.seq
        if seq is not None:
            if seq <= self.last_seq:
                return
            self.last_seq = seq
        handler = getattr(self, "_on_" + event.type.replace(".", "_"), None)
        if handler is not None:
            handler(event.data, event)
        line = _summary(event)
        if line is not None:
            style = "red" if event.type == "error" else "yellow" if event.type == "server.idle" else ""
            self.tail.append((f"{seq if seq is not None else '-':>5} {line}", style))

    def _on_state_transition(self, data: StateTransitionData, event: Event) -> None:
        from hankweave.events.reading import read_transition
        from hankweave.state import transitions as t

        resulting = data.resulting_state
        if resulting is not None:
            self.total_cost = resulting.total_cost or 0.0
            if resulting.current_run_id:  # an ended run keeps showing what it cost
                self.run_cost = resulting.current_run_cost or 0.0
        match read_transition(data.transition):
            case t.RunStarted(data=body):
                self._run_started(body)
            case t.RunCompleted(data=body) | t.RunFailed(data=body) | t.RunCrashed(data=body):
                if body.run_id == self.run_id:
                    self.run_status = _RUN_ENDS[data.transition_type]
            case t.ExecutionPlanUpdated(data=splice):
                position, remove = splice.position or 0, splice.remove or 0
                self.plan[position:position + remove] = _plan_rows(splice.entries)
            case t.CodonStarted(data=started) if started.codon_id:
                self._codon_started(started.codon_id, event.timestamp)
            case t.CodonTransitioned(data=moved) if moved.codon_id:
                self._codon_transitioned(moved.codon_id, str(moved.to), event.timestamp)
            case t.CostsIncremented(data=costs) if costs.codon_id in self.codons:
                self._codon_cost(costs.codon_id, self.codons[costs.codon_id].cost
                                 + float(costs.cost_delta or 0.0))
            case t.CodonFinalCostSet(data=final) if final.codon_id in self.codons:
                self._codon_cost(final.codon_id, float(final.final_cost or 0.0))

    def _run_started(self, body: RunStartedData) -> None:
        from hankweave.state.types import ContinuationStart

        self.run_id, self.run_status, self.idle = body.run_id, "running", None
        if body.execution_plan:
            self.plan = _plan_rows(body.execution_plan)
        start = body.starting_conditions
        if isinstance(start, ContinuationStart):
            self._reset_after(start.source.after_codon if start.source else None)

    def _codon_started(self, codon_id: str, timestamp: str | None) -> None:
        codon = _Codon(codon_id, self._name(codon_id), started=_parse_time(timestamp))
        self.codons[codon_id] = self.current = codon
        self.status[codon_id] = "preparing"
        self.idle = None

    def _codon_transitioned(self, codon_id: str, to: str, timestamp: str | None) -> None:
        self.status[codon_id] = to
        known = self.codons.get(codon_id)
        if known is not None:
            known.status = to
            if to in _TERMINAL:
                known.ended = _parse_time(timestamp)

    def _codon_cost(self, codon_id: str, cost: float) -> None:
        self.codons[codon_id].cost = cost
        self.costs[codon_id] = cost

    def _reset_after(self, after_codon: str | None) -> None:
        """A rollback continuation: codons after its point are to run again."""
        ids = [codon_id for codon_id, _ in self.plan]
        start = ids.index(after_codon) + 1 if after_codon in ids else 0
        for codon_id in ids[start:]:
            self.status.pop(codon_id, None)
            self.costs.pop(codon_id, None)

    def _on_codon_started(self, data: CodonStartedData, event: Event) -> None:
        codon = self.codons.get(str(data.codon_id))
        if codon is not None and data.codon_name:
            codon.name = str(data.codon_name)

    def _on_codon_completed(self, data: CodonCompletedData, event: Event) -> None:
        self.costs[str(data.codon_id)] = float(data.cost or 0.0)

    def _on_assistant_action(self, data: AssistantActionData, event: Event) -> None:
        codon = self.codons.get(str(data.codon_id))
        if codon is None:
            return
        if data.action == "tool_use":
            codon.tool_calls += 1
            codon.lines.append((f"⚙ {data.tool_name}({_tool_args(data.tool_input)})",
                                "magenta"))
            return
        style = "dim italic" if data.action == "thinking" else ""
        for line in str(data.content or "").splitlines() or [""]:
            if line.strip():
                codon.lines.append((line, style))

    def _on_tool_result(self, data: ToolResultData, event: Event) -> None:
        codon = self.codons.get(str(data.codon_id))
        if codon is not None:
            outcome = "error" if data.is_error else "ok"
            size = data.original_length or len(str(data.result or ""))
            codon.lines.append((f"  ↳ {data.tool_name} {outcome} ({size} chars)",
                                "red" if data.is_error else "dim"))

    def _on_server_idle(self, data: ServerIdleData, event: Event) -> None:
        self.idle = str(data.message or data.reason or "idle")

    def _on_budget_summary(self, data: BudgetSummaryData, event: Event) -> None:
        ceiling = data.ceiling.model_dump(by_alias=True, exclude_unset=True) if data.ceiling else {}
        self.budget = {key: value for key, value in ceiling.items() if value is not None}

    def _on_incomplete_codon(self, data: IncompleteCodonData, event: Event) -> None:
        codon_id = str(data.codon_id)
        if codon_id not in self.codons:
            self.codons[codon_id] = self.current = _Codon(codon_id, str(data.codon_name))

    def _sentinel(self, data: _SentinelData, what: str) -> None:
        self.sentinels[what] += 1
        self.last_sentinel = f"{data.sentinel_id} {what}"

    def _on_sentinel_loaded(self, data: SentinelLoadedData, event: Event) -> None:
        self._sentinel(data, "loaded")

    def _on_sentinel_triggered(self, data: SentinelTriggeredData, event: Event) -> None:
        self._sentinel(data, "triggered")

    def _on_sentinel_output(self, data: SentinelOutputData, event: Event) -> None:
        self._sentinel(data, "output")

    def _on_sentinel_error(self, data: SentinelErrorData, event: Event) -> None:
        self._sentinel(data, "error")

    def _on_sentinel_unloaded(self, data: SentinelUnloadedData, event: Event) -> None:
        self._sentinel(data, "unloaded")

    def _name(self, codon_id: str) -> str:
        return next((name for known, name in self.plan if known == codon_id), "")


_RUN_ENDS = {"RunCompleted": "completed", "RunFailed": "failed", "RunCrashed": "crashed"}

# What the body of the view shows, so the tail of recent events leaves it out.
_SHOWN_IN_BODY = ("state.transition", "assistant.action", "token.usage", "tool.result",
                  "file.updated", "filetree.updated", "rig.output", "state.snapshot")


def _plan_rows(entries: list[ExecutionCodonEntry] | None) -> list[tuple[str, str]]:
    return [(entry.codon_id or "?", (entry.codon.name if entry.codon else None) or "")
            for entry in entries or []]


def _summary(event: Event) -> str | None:
    """The event's line in the tail of recent events (``None``: not listed there)."""
    from hankweave.events import catalogue as c

    kind, data = event.type, event.data
    if kind in _SHOWN_IN_BODY:
        return _transition_summary(data) if isinstance(data, c.StateTransitionData) else None
    if isinstance(data, c.InfoData | c.ErrorData | c.ServerIdleData):
        return _shorten(f"{kind}: {data.message}", 110)
    if isinstance(data, c.CodonStartedData):
        return f"codon.started {data.codon_id} ({data.codon_name})"
    if isinstance(data, c.CodonCompletedData):
        return (f"codon.completed {data.codon_id}"
                f" {'ok' if data.success else 'not ok'} {_money(data.cost)}")
    if kind.startswith("rollback.") and kind != "rollback.progress":
        target = (data.to_codon if isinstance(data, c.RollbackStartedData)
                  else getattr(data, "codon_id", None)) or ""
        return f"{kind} {target}".rstrip()
    return kind


def _transition_summary(data: StateTransitionData) -> str | None:
    from hankweave.events.reading import read_transition
    from hankweave.state.transitions import CodonTransitioned

    if data.transition_type in _RUN_ENDS or data.transition_type == "RunStarted":
        return f"{data.transition_type} {data.run_id or ''}".rstrip()
    if data.transition_type == "CodonTransitioned":
        moved = read_transition(data.transition)
        if isinstance(moved, CodonTransitioned) and moved.data.to in _TERMINAL:
            return f"{moved.data.codon_id} {moved.data.to}"
    return None


def _tool_args(value: Any) -> str:
    if isinstance(value, dict):
        return _shorten(", ".join(f"{key}={str(item)!s}" for key, item in value.items()
                                  if key != "content"), 60)
    return _shorten(str(value or ""), 60)


def render_attach(view: AttachView, *, stream_lines: int = 10,
                  now: datetime | None = None) -> RenderableType:
    """The screen of ``hankweave attach`` for the view's current state."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    now = now or datetime.now().astimezone()
    header = Text.assemble(
        ("run ", "dim"), (view.run_id or "-", "bold"),
        (f" ({view.run_status})" if view.run_status else "", "dim"),
        ("   total ", "dim"), _money(view.total_cost), ("   this run ", "dim"),
        _money(view.run_cost))
    if view.budget.get("maxDollars"):
        limit = float(view.budget["maxDollars"])
        share = view.total_cost / limit * 100 if limit else 0.0
        header.append(f"   budget {_money(view.total_cost)} of {_money(limit)} ({share:.0f}%)",
                      style="red" if share >= 100 else "")
    if view.budget.get("maxTimeSeconds"):
        header.append(f"   time limit {view.budget['maxTimeSeconds']:g}s", style="dim")

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
                     Text(status, style=style), _money(cost) if cost is not None else "")

    parts: list[RenderableType] = [header, plan]
    current = view.current
    if current is not None:
        end = current.ended or now
        elapsed = (end - current.started).total_seconds() if current.started else 0.0
        icon, style = _STATUS_STYLE.get(current.status, _ACTIVE)
        body = Text("\n").join(Text(_shorten(text, 200), style=line_style)
                               for text, line_style in list(current.lines)[-stream_lines:])
        if not current.lines:
            body = Text("(no output yet)", style="dim")
        parts.append(Panel(body, title=Text.assemble(
            (f"{icon} {current.codon_id}", f"bold {style}"), f"  {current.name}  ",
            (f"{current.status} · {max(elapsed, 0):.1f}s · {_money(current.cost)}"
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
