"""What ``hankweave run`` shows while a hank runs.

Two event subscribers:

* :class:`HeadlessLog`: plain lines (or, with ``--json``, every event as one JSON line), fit for
  CI logs and pipes;
* :class:`LiveView`: a rich live display for a terminal: the current codon with its status,
  elapsed time, cost and tokens, a line per finished codon with its checkpoint id, and totals.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from hankweave.runtime.failures import FORCE_STOPPED, INTERRUPTED, WAITING_FOR_PERSON

if TYPE_CHECKING:
    from hankweave.config.settings import Settings

_QUIET_INFO_PREFIXES = ("Rig operation",)


def _money(value: float | None) -> str:
    return f"${value or 0:.4f}"


def _short(sha: str | None) -> str:
    return sha[:8] if sha else "-"


@dataclass(frozen=True)
class _Finished:
    """A codon attempt that ended, as the views show it."""

    codon_id: str
    status: str
    cost: float
    ms: int
    sha: str | None
    reason: Mapping[str, Any] | None = None
    """Its ``failureReason`` (a failed attempt's; None otherwise)."""

    @property
    def shown_status(self) -> str:
        """``failed``, unless the attempt ended for a stop from outside it: ``waiting`` for a
        person's answer, or ``stopped`` (a shutdown, Ctrl-C, a force-stop)."""
        message = str((self.reason or {}).get("message") or "")
        if self.status != "failed" or (self.reason or {}).get("type") != "unknown":
            return self.status
        if message.startswith(WAITING_FOR_PERSON):
            return "waiting"
        if message.startswith((INTERRUPTED, FORCE_STOPPED)):
            return "stopped"
        return self.status

    @property
    def why(self) -> str | None:
        """The reason of a failure, on one line; None when there is nothing to explain (a
        success, a skip, a wait for a person: the answer command follows the run)."""
        if self.shown_status not in ("failed", "stopped") or not self.reason:
            return None
        message = " ".join(str(self.reason.get("message") or "no reason recorded").split())
        if len(message) > _WHY_LIMIT:
            message = message[:_WHY_LIMIT - 1] + "…"
        if self.shown_status == "failed" and self.reason.get("retriable") is False:
            message += " (not retried: retrying cannot fix it)"
        return message


_WHY_LIMIT = 400
"""The longest reason a view prints (a provider's error may quote a whole request)."""
_MARKS = {"completed": ("✔", "green"), "failed": ("✘", "red"), "skipped": ("↷", "yellow"),
          "waiting": ("⏸", "yellow"), "stopped": ("■", "yellow")}


@dataclass
class _Codon:
    codon_id: str
    name: str = ""
    status: str = "preparing"
    started: float = field(default_factory=time.monotonic)
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    messages: int = 0
    last_action: str = ""


class _Tracker:
    """Follows the event stream: which codon runs, what it cost, what finished."""

    def __init__(self) -> None:
        self.current: _Codon | None = None
        self.total_cost = 0.0
        self.finished: list[_Finished] = []
        self.run_started = time.monotonic()

    def update(self, event: dict[str, Any]) -> None:
        kind, data = event["type"], event.get("data", {})
        if kind == "state.transition":
            self._transition(data)
        elif kind == "codon.started" and self.current is not None:
            self.current.name = data.get("codonName", "")
        elif kind == "token.usage" and self.current is not None:
            self.current.input_tokens += data.get("inputTokens", 0)
            self.current.output_tokens += data.get("outputTokens", 0)
        elif kind == "assistant.action" and self.current is not None:
            if data.get("action") == "tool_use":
                self.current.last_action = f"tool: {data.get('toolName')}"
            elif data.get("content"):
                self.current.last_action = str(data["content"]).splitlines()[0][:100]

    def _transition(self, data: dict[str, Any]) -> None:
        self.total_cost = data.get("resultingState", {}).get("totalCost", self.total_cost)
        kind = data.get("transitionType")
        body = data.get("transition", {}).get("data", {})
        if kind == "CodonStarted":
            self.current = _Codon(codon_id=body.get("codonId", "?"))
        elif kind == "CodonTransitioned" and self.current is not None:
            self.current.status = body.get("to", self.current.status)
            if self.current.status in ("completed", "failed", "skipped"):
                meta = body.get("metadata", {})
                self.finished.append(_Finished(
                    self.current.codon_id, self.current.status, self.current.cost,
                    int((time.monotonic() - self.current.started) * 1000),
                    meta.get("checkpointSha"), meta.get("failureReason")))
        elif kind in ("CostsIncremented", "CodonFinalCostSet") and self.current is not None:
            if kind == "CostsIncremented":
                self.current.cost += body.get("costDelta", 0.0)
            else:
                self.current.cost = body.get("finalCost", self.current.cost)
        elif kind == "AssistantMessageCountUpdated" and self.current is not None:
            # Messages as a person counts them (turns); journals without turns give lines.
            self.current.messages = body.get("newTurnCount") or body.get(
                "newCount", self.current.messages)


class _CostsShown:
    """The ``showCosts`` setting of a view: cost figures are left out of its lines when off."""

    show_costs: bool = True

    def configure(self, settings: Settings) -> None:
        """Take the launch's settings (``LaunchRequest.on_settings``)."""
        self.show_costs = settings.show_costs

    def _cost(self, value: float | None, template: str) -> str:
        return template.format(_money(value)) if self.show_costs else ""


class HeadlessLog(_CostsShown):
    """Plain progress lines on stderr (or every event as JSON on stdout)."""

    def __init__(self, *, as_json: bool = False, out: TextIO | None = None) -> None:
        self.as_json = as_json
        self.out = out or (sys.stdout if as_json else sys.stderr)
        self.tracker = _Tracker()

    def __call__(self, event: dict[str, Any]) -> None:
        if self.as_json:
            self.out.write(json.dumps(event, ensure_ascii=False) + "\n")
            self.out.flush()
            return
        before = len(self.tracker.finished)
        self.tracker.update(event)
        line = self._line(event)
        if len(self.tracker.finished) > before:
            done = self.tracker.finished[-1]
            why = done.why
            line = (f"codon {done.codon_id} {done.shown_status} in {done.ms / 1000:.1f}s"
                    f"{self._cost(done.cost, ', cost {}')}, checkpoint {_short(done.sha)}"
                    f"{f': {why}' if why else ''}")
        if line:
            self.out.write(f"[hankweave] {line}\n")
            self.out.flush()

    def _line(self, event: dict[str, Any]) -> str | None:
        kind, data = event["type"], event.get("data", {})
        if kind == "codon.started":
            return f"codon {data.get('codonId')} started ({data.get('codonName')})"
        if kind == "interruption.created":
            return (f"waiting for a person: {data.get('interruptionId')}"
                    f" ({data.get('kind')}) {data.get('question')}")
        if kind == "interruption.answered":
            return (f"answered {data.get('interruptionId')}: {data.get('answer')!r}"
                    f" by {data.get('answeredBy')}")
        if kind == "info":
            message = str(data.get("message", ""))
            return None if message.startswith(_QUIET_INFO_PREFIXES) else message
        if kind == "error":
            return f"{_error_label(data)}: {data.get('message')}"
        if kind == "rig.setup.failed":
            return f"rig operation {data.get('commandIndex')} failed ({data.get('failureType')})"
        if kind == "loop.iteration.completed":
            return f"loop {data.get('loopId')} iteration {data.get('iteration')} done"
        if kind == "sink.failed":
            return f"event sink {data.get('sink')} failed and was disabled: {data.get('error')}"
        if kind == "run.crashed":
            return str(data.get("message", ""))
        return None


class LiveView(_CostsShown):
    """A rich live panel for terminals; finished codons scroll above it."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.tracker = _Tracker()
        self._live = Live(self._render(), console=self.console, refresh_per_second=4,
                          transient=True)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, event: dict[str, Any]) -> None:
        before = len(self.tracker.finished)
        self.tracker.update(event)
        kind, data = event["type"], event.get("data", {})
        for done in self.tracker.finished[before:]:
            self._print_finished(done)
        if kind == "error":
            label = _error_label(data)
            self.console.print(Text(f"{label}: {data.get('message')}",
                                    style="yellow" if label == "warning" else "red"))
        elif kind in ("server.idle", "run.crashed") or (
                kind == "info" and str(data.get("message", "")).startswith("[REPLAY]")):
            # A replay's skipped or allowed commands are seen in the live view too.
            self.console.print(Text(str(data.get("message", "")), style="yellow"))
        self._live.update(self._render())

    def _print_finished(self, done: _Finished) -> None:
        status = done.shown_status
        mark, style = _MARKS.get(status, ("•", "white"))
        self.console.print(Text.assemble(
            (f"{mark} ", style), (done.codon_id, "bold"), f"  {status}  {done.ms / 1000:.1f}s"
            f"{self._cost(done.cost, '  {}')}  checkpoint {_short(done.sha)}"))
        why = done.why
        if why:
            # Soft-wrapped: a reason may quote a command or a path, to copy whole.
            self.console.print(Text(f"  {why}", style=style), soft_wrap=True)

    def _render(self) -> Group:
        current = self.tracker.current
        table = Table.grid(padding=(0, 2))
        if current is not None and current.status not in ("completed", "failed", "skipped"):
            elapsed = time.monotonic() - current.started
            table.add_row(Text(current.codon_id, style="bold cyan"), current.status,
                          f"{elapsed:.1f}s", self._cost(current.cost, "{}"),
                          f"tokens in {current.input_tokens} out {current.output_tokens}",
                          f"{current.messages} msgs")
            if current.last_action:
                table.add_row("", Text(current.last_action, style="dim"))
        total = Text(f"{self._cost(self.tracker.total_cost, 'total {}  ')}elapsed"
                     f" {time.monotonic() - self.tracker.run_started:.0f}s", style="dim")
        return Group(table, total)


def _error_label(data: dict[str, Any]) -> str:
    """``warning`` for an ``error`` event of severity warning, else ``error``."""
    return "warning" if data.get("severity") == "warning" else "error"
