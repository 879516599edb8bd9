"""What ``hankweave run`` shows while a hank runs.

Two event subscribers:

* :class:`HeadlessLog`: plain lines (or, with ``--json``, every event as one JSON line), fit for
  CI logs and pipes;
* :class:`LiveView`: a rich live display for a terminal: the plan (done, running, pending),
  the running codon with its latest action, the last lines of rig output, sentinel findings,
  budget use and totals, a line per finished codon above it, and the keys' footer
  (:mod:`hankweave.cli.run_keys`).  It fits 80x24: a long plan folds into counts, each line is
  cut to the width.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from hankweave.runtime.failures import failure_kind

if TYPE_CHECKING:
    from hankweave.config.settings import Settings
    from hankweave.state.types import HankweaveState

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
        if self.status != "failed":
            return self.status
        reason = self.reason or {}
        return failure_kind(reason.get("type"), str(reason.get("message") or ""))

    @property
    def why(self) -> str | None:
        """The reason of a failure, on one line; None when there is nothing to explain (a
        success, a skip, a wait for a person: the answer command follows the run)."""
        if self.shown_status not in ("failed", "stopped") or not self.reason:
            return None
        from hankweave.cli.run_summary import one_line_reason

        retriable = self.reason.get("retriable") if self.shown_status == "failed" else None
        return one_line_reason(self.reason.get("message"), retriable)


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


_RECENT_LINES = 3
"""Rig output lines and sentinel findings kept on screen (the newest)."""


@dataclass
class _Budget:
    """What the newest ``budget.limits`` said: the run-wide ceiling, the codon's own limit, and
    how much money and time were spent when it was sent."""

    max_dollars: float | None
    max_seconds: float | None
    codon_dollars: float | None
    elapsed: float
    received: float = field(default_factory=time.monotonic)

    def seconds_now(self) -> float:
        return self.elapsed + time.monotonic() - self.received


class _Tracker:
    """Follows the event stream: the plan, which codon runs, what it cost, what finished,
    its rig output, sentinel findings and budget."""

    def __init__(self) -> None:
        self.current: _Codon | None = None
        self.total_cost = 0.0
        self.finished: list[_Finished] = []
        self.run_started = time.monotonic()
        self.plan: list[str] = []
        """The execution plan's codon ids, in order (loop iterations as ``codon#i``)."""
        self.marks: dict[str, str] = {}
        """Each finished plan entry's shown status (completed, failed, waiting...)."""
        self.rig: deque[str] = deque(maxlen=_RECENT_LINES)
        self.findings: deque[str] = deque(maxlen=_RECENT_LINES)
        self.budget: _Budget | None = None
        self.waiting_for_command = False
        """The runtime waits for a command (``server.idle``): ``n`` starts the next codon."""
        self.events: list[dict[str, Any]] = []
        """The run's budget events, for the summary."""

    def seed(self, state: HankweaveState) -> None:
        """Start from the state the run starts from: its plan, what earlier runs finished."""
        from hankweave.state.costs import total_cost
        from hankweave.state.thread import analyze_execution_thread
        from hankweave.state.types import FailedCodon

        self.plan = [entry.codon_id for entry in state.execution_plan]
        self.total_cost = total_cost(state)
        for threaded in analyze_execution_thread(state).codons:  # newest first
            record = threaded.codon
            if record.status in ("completed", "failed", "skipped"):
                reason = record.failure_reason.model_dump(by_alias=True) if isinstance(
                    record, FailedCodon) and record.failure_reason else None
                self.marks.setdefault(record.codon_id, _Finished(
                    record.codon_id, record.status, 0.0, 0, None, reason).shown_status)

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
        else:
            self._side(kind, data)
        if kind in ("budget.limits", "budget.summary"):
            self.events.append(event)

    def _side(self, kind: str, data: dict[str, Any]) -> None:
        """What the view shows beside the codon: rig output, findings, budget, idleness."""
        if kind == "rig.output":
            self.rig.append(f"{data.get('codonId')} {data.get('stream')}: {data.get('line')}")
        elif kind == "sentinel.output":
            content = data.get("content")
            text = content if isinstance(content, str) else json.dumps(content,
                                                                        ensure_ascii=False)
            self.findings.append(f"{data.get('sentinelId')}: {' '.join(text.split())}")
        elif kind == "budget.limits":
            ceiling, limits = data.get("ceiling") or {}, data.get("limits") or {}
            self.budget = _Budget(ceiling.get("maxDollars"), ceiling.get("maxTimeSeconds"),
                                  limits.get("maxDollars"), float(data.get("elapsedSeconds") or 0))
        elif kind == "server.idle":
            self.waiting_for_command = data.get("reason") != "all-codons-completed"
        elif kind == "rollback.started":
            for codon_id in data.get("codonsToProcess") or ():
                self.marks.pop(codon_id, None)

    def _transition(self, data: dict[str, Any]) -> None:
        self.total_cost = data.get("resultingState", {}).get("totalCost", self.total_cost)
        kind = data.get("transitionType")
        body = data.get("transition", {}).get("data", {})
        if kind == "RunStarted" and body.get("executionPlan") is not None:
            self.plan = [entry.get("codonId", "?") for entry in body["executionPlan"]]
            self.marks.clear()  # a fresh run: nothing of its plan has run
        elif kind == "ExecutionPlanUpdated":
            at, remove = body.get("position", 0), body.get("remove", 0)
            self.plan[at:at + remove] = [e.get("codonId", "?") for e in body.get("entries", [])]
        elif kind == "CodonStarted":
            self.current = _Codon(codon_id=body.get("codonId", "?"))
            self.rig.clear()
            self.waiting_for_command = False
        elif kind == "CodonTransitioned" and self.current is not None:
            self._codon_moved(body)
        elif kind in ("CostsIncremented", "CodonFinalCostSet") and self.current is not None:
            if kind == "CostsIncremented":
                self.current.cost += body.get("costDelta", 0.0)
            else:
                self.current.cost = body.get("finalCost", self.current.cost)
        elif kind == "AssistantMessageCountUpdated" and self.current is not None:
            # Messages as a person counts them (turns); journals without turns give lines.
            self.current.messages = body.get("newTurnCount") or body.get(
                "newCount", self.current.messages)

    def _codon_moved(self, body: dict[str, Any]) -> None:
        current = self.current
        assert current is not None
        current.status = body.get("to", current.status)
        if current.status in ("completed", "failed", "skipped"):
            meta = body.get("metadata", {})
            done = _Finished(current.codon_id, current.status, current.cost,
                             int((time.monotonic() - current.started) * 1000),
                             meta.get("checkpointSha"), meta.get("failureReason"))
            self.finished.append(done)
            self.marks[done.codon_id] = done.shown_status


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
            return waiting_line(data)
        if kind == "budget.warning":
            return f"budget: {data.get('message')}"
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


def waiting_line(data: dict[str, Any]) -> str:
    """An ``interruption.created`` in words: what waits for a person."""
    return (f"waiting for a person: {data.get('interruptionId')} ({data.get('kind')})"
            f" {data.get('question')}")


class LiveView(_CostsShown):
    """A rich live panel for terminals; finished codons scroll above it.

    Events arrive on the runtime's thread and keys (:mod:`hankweave.cli.run_keys`) on their
    reader's: both change the view under one lock."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.tracker = _Tracker()
        self.footer: str | None = None
        """The keys' footer, when keys are read."""
        self.overlay: list[str] = []
        """A menu or question of the keys (the rollback menu), shown instead of the details."""
        self._lock = threading.RLock()
        self._live = Live(self.panel(), console=self.console, refresh_per_second=4,
                          transient=True, get_renderable=self.panel)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(*exc)  # type: ignore[arg-type]

    def seed(self, state: HankweaveState) -> None:
        """The state the run starts from (``LaunchRequest.on_start``)."""
        with self._lock:
            self.tracker.seed(state)

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            before = len(self.tracker.finished)
            self.tracker.update(event)
            kind, data = event["type"], event.get("data", {})
            for done in self.tracker.finished[before:]:
                self._print_finished(done)
            if kind == "error":
                label = _error_label(data)
                self.say(f"{label}: {data.get('message')}",
                         "yellow" if label == "warning" else "red")
            elif kind == "budget.warning":
                self.say(f"budget: {data.get('message')}", "yellow")
            elif kind == "interruption.created":
                self.say(waiting_line(data), "yellow")
            elif kind in ("server.idle", "run.crashed") or (
                    kind == "info" and str(data.get("message", "")).startswith("[REPLAY]")):
                # A replay's skipped or allowed commands are seen in the live view too.
                self.say(str(data.get("message", "")), "yellow")
            self.refresh()

    def say(self, message: str, style: str = "") -> None:
        """A line above the panel (it scrolls with the finished codons)."""
        with self._lock:
            # Wrapped at words, unless it quotes a command: that stays one line, to copy whole.
            self.console.print(Text(message, style=style), soft_wrap="hankweave " in message)

    def refresh(self) -> None:
        with self._lock:
            self._live.update(self.panel())

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

    def panel(self) -> Group:
        """The live part: plan, running codon, details (or the keys' menu), totals, keys."""
        # Called by the live display's refresh thread too, which holds the display's lock:
        # taking ours here could deadlock with an event printing under ours. It only reads,
        # from copies each made in one step (the overlay is replaced, never changed).
        width = max(self.console.width, 40)
        lines: list[Text] = []
        plan = self._plan_line(width)
        if plan is not None:
            lines.append(plan)
        lines += self._current_lines()
        lines += [Text(line, style="bold yellow") for line in self.overlay] or self._details()
        lines.append(self._totals())
        if self.footer:
            lines.append(Text(self.footer, style="dim"))
        for line in lines:
            line.truncate(width, overflow="ellipsis")
            line.no_wrap = True
        return Group(*lines)

    def _plan_line(self, width: int) -> Text | None:
        """The plan on one line: every entry with its mark while it fits, else folded into
        ``n done, current, m pending``."""
        plan, marks, current = list(self.tracker.plan), dict(self.tracker.marks), \
            self.tracker.current
        if not plan:
            return None
        running = current.codon_id if current is not None and \
            current.status not in ("completed", "failed", "skipped") else None
        items = []
        for codon_id in plan:
            status = marks.get(codon_id)
            if codon_id == running:
                items.append(("▶ ", "bold cyan", codon_id))
            elif status is not None:
                mark, style = _MARKS.get(status, ("•", "white"))
                items.append((f"{mark} ", style, codon_id))
            else:
                items.append(("· ", "dim", codon_id))
        line = Text("plan  ", style="bold")
        for n, (mark, style, codon_id) in enumerate(items):
            line.append(("  " if n else "") + mark, style=style)
            line.append(codon_id, style="bold" if codon_id == running else "")
        if line.cell_len <= width:
            return line
        done = sum(1 for codon_id in plan if codon_id in marks)
        folded = Text("plan  ", style="bold")
        folded.append(f"{done} done", style="green")
        if running is not None:
            folded.append(", ")
            folded.append(f"▶ {running}", style="bold cyan")
        pending = len(plan) - done - (1 if running is not None else 0)
        folded.append(f", {pending} pending of {len(plan)}")
        return folded

    def _current_lines(self) -> list[Text]:
        current = self.tracker.current
        if current is None or current.status in ("completed", "failed", "skipped"):
            return []
        elapsed = time.monotonic() - current.started
        parts = [current.status, f"{elapsed:.1f}s", self._cost(current.cost, "{}"),
                 f"tokens in {current.input_tokens} out {current.output_tokens}",
                 f"{current.messages} msgs"]
        line = Text.assemble(("▶ ", "bold cyan"), (current.codon_id, "bold cyan"),
                             "  " + "  ".join(part for part in parts if part))
        lines = [line]
        if current.last_action:
            lines.append(Text(f"  {current.last_action}", style="dim"))
        return lines

    def _details(self) -> list[Text]:
        """The running codon's rig output, sentinel findings and the budget."""
        tracker = self.tracker
        lines = [Text(f"rig       {line}", style="dim") for line in list(tracker.rig)]
        lines += [Text(f"sentinel  {line}", style="magenta") for line in list(tracker.findings)]
        budget = tracker.budget
        if budget is not None:
            parts = []
            if budget.max_dollars is not None and self.show_costs:
                parts.append(f"{_money(tracker.total_cost)} of {_money(budget.max_dollars)}")
            if budget.max_seconds is not None:
                from hankweave.cli.run_summary import duration_text

                parts.append(f"{duration_text(budget.seconds_now())} of"
                             f" {duration_text(budget.max_seconds)}")
            codon = budget.codon_dollars
            if codon is not None and codon != budget.max_dollars and self.show_costs:
                parts.append(f"this codon up to {_money(codon)}")
            if parts:
                lines.append(Text("budget    " + ", ".join(parts), style="cyan"))
        return lines

    def _totals(self) -> Text:
        waiting = "  waiting for a command" if self.tracker.waiting_for_command else ""
        return Text(f"{self._cost(self.tracker.total_cost, 'total {}  ')}elapsed"
                    f" {time.monotonic() - self.tracker.run_started:.0f}s{waiting}",
                    style="dim")


def _error_label(data: dict[str, Any]) -> str:
    """``warning`` for an ``error`` event of severity warning, else ``error``."""
    return "warning" if data.get("severity") == "warning" else "error"
