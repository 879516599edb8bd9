"""``hankweave journal``: print an execution's event journal, filtered, and optionally follow it.

Reads ``<DIR>/.hankweave/events/events.jsonl`` without taking any lock, so it works while a
runtime is writing.  A line that is not an event is reported on stderr (line number and reason)
and skipped; a last line without its newline (a write in progress, or torn by a crash) is
ignored.  ``--follow`` keeps printing new events until Ctrl-C, and stops by itself once no
runtime holds the execution (no live ``runtime.lock``) and the journal has not grown for
:data:`FOLLOW_IDLE_S` seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.options import execution_option

if TYPE_CHECKING:
    from hankweave.events.catalogue import ServerEvent
    from hankweave.events.journal import JournalReadReport

FOLLOW_IDLE_S = 1.0
"""How long the journal must stay unchanged, with no live runtime, before --follow stops."""
_WATCH_INTERVAL_S = 0.1
_SUMMARY_WIDTH = 100


@click.command("journal")
@execution_option()
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TYPE",
    help="Only events of this type; repeatable; a trailing * matches a prefix (codon.*).",
)
@click.option(
    "--codon",
    metavar="CODON_ID",
    help="Only events of this codon (a loop codon's id matches all its iterations).",
)
@click.option(
    "--run",
    "run_id",
    metavar="RUN_ID",
    help="Only the events of this run (the envelope's runId, else data.runId); events of no"
    " run are left out.",
)
@click.option(
    "--after-seq",
    type=click.IntRange(min=0),
    metavar="N",
    help="Only events with a seq greater than N (journals of Hankweave 0.10.0 have "
    "no seq, so none of their events match).",
)
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep printing new events until Ctrl-C or until the runtime has exited.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print each event as one JSON line, exactly as journaled.",
)
@click.option(
    "--follow-timeout",
    type=click.FloatRange(min=0),
    hidden=True,
    help="Stop following after this many seconds (for tests).",
)
def journal_command(
    execution_dir: Path,
    types: tuple[str, ...],
    codon: str | None,
    run_id: str | None,
    after_seq: int | None,
    follow: bool,
    as_json: bool,
    follow_timeout: float | None,
) -> None:
    """Print the events of an execution, one line each: seq, time, type, codon and a summary.

    Unreadable lines are reported on stderr and skipped.  With --follow, new events are printed
    as they are written; it ends on Ctrl-C, or by itself once no runtime holds the execution
    and no event has come for a second.
    """
    from hankweave.events.journal import JournalReadReport, follow_journal, read_journal

    path = _journal_file(execution_dir)
    wants_type, exact_types = _type_filter(types)
    wants_codon = _codon_filter(codon)
    wants_run = _run_filter(run_id)
    report = JournalReadReport(path)
    printer = _Printer(as_json, report)

    def wanted(events: Iterator[ServerEvent]) -> Iterator[ServerEvent]:
        for event in events:
            if wants_type(event.type) and wants_codon(event.data) and wants_run(event):
                yield event

    from hankweave.events.diet import is_dieted

    # A dieted journal is a finished one: --follow prints it whole and ends.
    if not follow or (not path.exists() and is_dieted(path.parent)):
        try:
            events = read_journal(path, after_seq=after_seq, types=exact_types, report=report)
            for event in wanted(events):
                printer.event(event)
        except FileNotFoundError:
            raise CLIError(f"{path}: the event journal disappeared while reading") from None
        printer.problems()
        return

    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch_follow,
        args=(execution_dir, path, stop, follow_timeout),
        daemon=True,
        name="hankweave-journal-follow",
    )
    watcher.start()
    events = follow_journal(path, after_seq, types=exact_types, report=report, stop=stop)
    try:
        for event in wanted(events):
            printer.event(event)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how --follow is meant to end
    finally:
        stop.set()  # ends the watcher thread too
    printer.problems()


# ----- input and filters -----


def _journal_file(execution_dir: Path) -> Path:
    from hankweave.execution.layout import ExecutionLayout

    layout = ExecutionLayout(execution_dir)
    if not layout.path.exists():
        raise CLIError(f"execution directory {layout.path}: does not exist")
    if not layout.path.is_dir():
        raise CLIError(f"execution directory {layout.path}: not a directory")
    if not layout.hankweave_dir.is_dir():
        raise CLIError(f"{layout.path} is not an execution directory (it has no .hankweave/)")
    from hankweave.events.diet import is_dieted

    if not layout.events_file.is_file() and not is_dieted(layout.events_dir):
        raise CLIError(
            f"{layout.events_file}: no event journal (nothing has run in this execution yet?)"
        )
    return layout.events_file


def _type_filter(patterns: tuple[str, ...]) -> tuple[Callable[[str], bool], set[str] | None]:
    """A predicate on event types, and the exact type set when no pattern is a prefix (so the
    reader can skip other lines without parsing them)."""
    from hankweave.events.catalogue import ALL_EVENT_TYPES

    if not patterns:
        return (lambda _type: True), None
    exact = {p for p in patterns if not p.endswith("*")}
    prefixes = tuple(p[:-1] for p in patterns if p.endswith("*"))
    for pattern in sorted(exact):
        if pattern not in ALL_EVENT_TYPES:
            click.echo(f"warning: {pattern!r} is not an event type of this version", err=True)
    for prefix in prefixes:
        if not any(t.startswith(prefix) for t in ALL_EVENT_TYPES):
            click.echo(f"warning: no event type of this version starts with {prefix!r}", err=True)

    def wants(event_type: str) -> bool:
        return event_type in exact or event_type.startswith(prefixes)

    return wants, (exact if not prefixes else None)


def event_codon(data: Mapping[str, Any]) -> str | None:
    """The codon an event concerns: ``codonId``, or ``codon`` for ``error`` events."""
    for key in ("codonId", "codon"):
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _codon_filter(wanted: str | None) -> Callable[[Mapping[str, Any]], bool]:
    from hankweave.config.hank import base_codon_id

    if wanted is None:
        return lambda _data: True
    exact_only = "#" in wanted  # "polish#1" means that iteration; "polish" means all of them

    def wants(data: Mapping[str, Any]) -> bool:
        codon = event_codon(data)
        if codon is None:
            return False
        return codon == wanted or (not exact_only and base_codon_id(codon) == wanted)

    return wants


def _run_filter(wanted: str | None) -> Callable[[ServerEvent], bool]:
    """Match an event's run: the envelope's ``runId`` (every event a run sends has it), else
    the ``runId`` its data names (a run's end, and journals written before envelopes carried
    it).  Events that name no run never match, so the filter never guesses a run from an
    event's position in the journal."""
    if wanted is None:
        return lambda _event: True

    def wants(event: ServerEvent) -> bool:
        return (event.run_id or event.data.get("runId")) == wanted

    return wants


def _watch_follow(
    execution_dir: Path, journal: Path, stop: threading.Event, timeout: float | None
) -> None:
    """Set ``stop`` when following should end: the timeout passed, or no live runtime holds the
    execution and the journal has not grown for :data:`FOLLOW_IDLE_S`."""
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.state.lock import LockCorruptError, live_runtime_lock

    hankweave_dir = ExecutionLayout(execution_dir).hankweave_dir
    started = last_change = time.monotonic()
    last_size = _size(journal)
    while not stop.wait(_WATCH_INTERVAL_S):
        now = time.monotonic()
        if timeout is not None and now - started >= timeout:
            break
        size = _size(journal)
        if size != last_size:
            last_size, last_change = size, now
            continue
        if now - last_change < FOLLOW_IDLE_S:
            continue
        try:
            running = live_runtime_lock(hankweave_dir) is not None
        except (LockCorruptError, OSError):
            running = True  # cannot tell: keep following, Ctrl-C still ends it
        if not running:
            break
    stop.set()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


# ----- output -----


class _Printer:
    """Prints events, and the corrupt lines the reader found, as soon as they are known."""

    def __init__(self, as_json: bool, report: JournalReadReport) -> None:
        self.as_json = as_json
        self.report = report
        self._reported = 0

    def event(self, event: ServerEvent) -> None:
        self.problems()
        if self.as_json:
            from hankweave.events.journal import encode_event

            click.echo(encode_event(event), nl=False)
        else:
            click.echo(format_event_line(event))

    def problems(self) -> None:
        corrupt = self.report.corrupt_lines
        for problem in corrupt[self._reported :]:
            click.echo(f"warning: {self.report.path}: skipped {problem}", err=True)
        self._reported = len(corrupt)


def format_event_line(event: ServerEvent) -> str:
    """``seq time type codon summary``, the human format of one event."""
    seq = str(event.seq) if event.seq is not None else "-"
    when = event.timestamp.replace("T", " ").removesuffix("Z")[:23]
    codon = event_codon(event.data) or "-"
    summary = summarize_event(event.type, event.data)
    return f"{seq:>6}  {when}  {event.type:<24} {codon:<16} {summary}".rstrip()


def _clip(value: Any, width: int = _SUMMARY_WIDTH) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    # One line, printable whatever the terminal's encoding (tool output may hold lone surrogates).
    text = " ".join(text.split()).encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= width else text[: width - 1] + "…"


def _money(value: Any) -> str:
    return f"${value:.4f}" if isinstance(value, int | float) else "$?"


def _codon_started(data: Mapping[str, Any]) -> str:
    text = _clip(data.get("codonName", ""), 60)
    previous = data.get("previousSessionId")
    session = data.get("sessionId") or "?"
    return f"{text}  session {session}" + (f" (continues {previous})" if previous else "")


def _codon_completed(data: Mapping[str, Any]) -> str:
    if data.get("success"):
        status = "completed"
    else:
        status = "failed (ignored)" if data.get("failureIgnored") else "failed"
    parts = [status, _money(data.get("cost"))]
    duration = data.get("duration")
    if isinstance(duration, int | float):
        parts.append(f"{duration / 1000:.1f}s")
    reason = data.get("failureReason")
    if isinstance(reason, Mapping):
        parts.append(_clip(f"{reason.get('type', '?')}: {reason.get('message') or ''}", 70))
    if data.get("budgetExceeded"):
        parts.append("budget exceeded")
    return "  ".join(parts)


def _state_transition(data: Mapping[str, Any]) -> str:
    parts = [str(data.get("transitionType", "?"))]
    if data.get("runId"):
        parts.append(f"run {data['runId']}")
    return "  ".join(parts)


def _assistant_action(data: Mapping[str, Any]) -> str:
    action = data.get("action")
    if action == "tool_use":
        tool_input = data.get("toolInput")
        detail = f" {_clip(tool_input, 70)}" if tool_input not in (None, {}, "") else ""
        return f"tool {data.get('toolName') or '?'}{detail}"
    return f"{action}: {_clip(data.get('content', ''))}"


def _token_usage(data: Mapping[str, Any]) -> str:
    return (
        f"in {data.get('inputTokens', 0)} out {data.get('outputTokens', 0)} cache read "
        f"{data.get('cacheReadTokens', 0)} write {data.get('cacheCreationTokens', 0)}  "
        f"{_money(data.get('totalCost'))}"
    )


def _tool_result(data: Mapping[str, Any]) -> str:
    status = "error" if data.get("isError") else "ok"
    return f"{data.get('toolName') or '?'} {status}: {_clip(data.get('result', ''), 80)}"


def _error(data: Mapping[str, Any]) -> str:
    severity = data.get("severity") or ("fatal" if data.get("fatal") else "error")
    return f"[{severity}] {_clip(data.get('message', ''))}"


def _loop_iteration(data: Mapping[str, Any]) -> str:
    final = ""
    if data.get("isFinal"):
        reason = data.get("terminationReason")
        final = "  final" + (f" ({reason})" if reason else "")
    return (
        f"loop {data.get('loopId', '?')} iteration {data.get('iteration', '?')}  "
        f"{_money(data.get('costUsd'))}{final}"
    )


_SUMMARIES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "codon.started": _codon_started,
    "codon.completed": _codon_completed,
    "codon.extended": lambda d: (
        f"extension {d.get('extensionNumber', '?')}  {_money(d.get('cumulativeCost'))} so far"
    ),
    "state.transition": _state_transition,
    "assistant.action": _assistant_action,
    "token.usage": _token_usage,
    "tool.result": _tool_result,
    "info": lambda d: _clip(d.get("message", "")),
    "error": _error,
    "server.idle": lambda d: f"{d.get('reason', '?')}: {_clip(d.get('message', ''))}",
    "loop.iteration.completed": _loop_iteration,
    "file.updated": lambda d: f"{d.get('action', '?')} {d.get('path', '?')}",
    "rig.output": lambda d: f"{d.get('stream', '?')}: {_clip(d.get('line', ''))}",
    "rig.setup.completed": lambda d: f"{d.get('commandCount', '?')} operations",
    "rig.setup.failed": lambda d: (
        f"{d.get('failureType', '?')} at operation "
        f"{d.get('commandIndex', '?')}" + ("  (ignored)" if d.get("ignored") else "")
    ),
    "sink.failed": lambda d: _clip(d),
    "sentinel.loaded": lambda d: (
        f"{d.get('sentinelId', '?')} on {d.get('codonId', '?')}  {d.get('model', '?')}"
        f"  {d.get('triggerType', '?')}/{d.get('executionStrategy', '?')}"),
    "sentinel.triggered": lambda d: (
        f"{d.get('sentinelId', '?')} #{d.get('triggerNumber', '?')}"
        f"  {d.get('eventCount', '?')} events"),
    "sentinel.output": lambda d: (
        f"{d.get('sentinelId', '?')} #{d.get('triggerNumber', '?')}  {_money(d.get('cost'))}"
        f"  {_clip(d.get('content', ''))}"),
    "sentinel.error": lambda d: (
        f"{d.get('sentinelId', '?')} {d.get('errorType', '?')}: {_clip(d.get('message', ''))}"),
    "sentinel.unloaded": lambda d: (
        f"{d.get('sentinelId', '?')} {d.get('reason', '?')}  {d.get('llmCallCount', '?')} calls"
        f"  {_money(d.get('finalCost'))}"),
    "budget.warning": lambda d: f"{d.get('codonId', '?')}  {_clip(d.get('message', ''))}",
    "interruption.created": lambda d: (
        f"{d.get('interruptionId', '?')} {d.get('kind', '?')}  {_clip(d.get('question', ''))}"),
    "interruption.answered": lambda d: (
        f"{d.get('interruptionId', '?')} {_clip(d.get('answer'))}"
        f"  by {d.get('answeredBy', '?')}"),
    "run.crashed": lambda d: (
        f"{d.get('runId', '?')} next: {d.get('next', '?')}  {_clip(d.get('message', ''))}"),
}


def summarize_event(event_type: str, data: Mapping[str, Any]) -> str:
    """A short summary of an event's payload (compact JSON for less common types).

    The payload is read as written, never validated, so a journal of another version prints.
    """
    summarize = _SUMMARIES.get(event_type)
    if summarize is None:
        return _clip(data)
    try:
        return summarize(data)
    except (TypeError, ValueError, AttributeError):
        return _clip(data)  # a payload of an unexpected shape still prints


__all__ = ["event_codon", "format_event_line", "journal_command", "summarize_event"]


# ----- --diet-journal / --restore-journal (Hankweave 0.11) -----


def diet_journal_command(directory: str) -> None:
    """``hankweave --diet-journal DIR``: compress a finished execution's journal, restorably
    (:mod:`hankweave.events.diet`). Refused while a runtime holds the execution."""
    from hankweave.events.diet import DietError, diet_journal
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.exitcodes import EXIT_FAILED
    from hankweave.state.lock import LockError, RuntimeLock

    layout = ExecutionLayout(Path(directory))
    if not layout.hankweave_dir.is_dir():
        raise CLIError(f"{layout.path} is not an execution directory (no .hankweave/)")
    lock = RuntimeLock(layout.hankweave_dir)
    try:
        lock.acquire()
    except LockError as exc:
        raise CLIError(f"not dieting {layout.path}: {exc}", EXIT_FAILED) from None
    try:
        report = diet_journal(layout.events_dir)
    except DietError as exc:
        raise CLIError(f"journal diet failed: {exc}", EXIT_FAILED) from None
    finally:
        lock.release()
    if not report.dieted:
        click.echo(f"Journal already dieted ({report.total_events} events)")
        return
    bodies = (f" ({report.extracted_bodies} file bodies moved to the content store,"
              f" {report.unique_bodies} distinct)" if report.extracted_bodies else "")
    click.echo(f"Journal dieted: {report.original_bytes} → {report.dieted_bytes} bytes{bodies}."
               " Every reader still sees it whole.")
    click.echo(f"Restore it with: hankweave --restore-journal {_quoted(layout.path)}")


def restore_journal_command(directory: str) -> None:
    """``hankweave --restore-journal DIR``: write a dieted journal back, verified byte for
    byte. Needs no lock: it only ever creates ``events.jsonl``, never overwrites one."""
    from hankweave.events.diet import DietError, restore_journal
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.exitcodes import EXIT_FAILED

    layout = ExecutionLayout(Path(directory))
    try:
        restored, size, digest = restore_journal(layout.events_dir)
    except DietError as exc:
        raise CLIError(f"journal restore failed: {exc}", EXIT_FAILED) from None
    if restored:
        click.echo(f"Journal restored: {size} bytes, verified byte for byte (sha256 {digest})")
    else:
        click.echo(f"Journal already restored and verified (sha256 {digest})")


def _quoted(path: Path) -> str:
    import shlex

    return shlex.quote(str(path))
