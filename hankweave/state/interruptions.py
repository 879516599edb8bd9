"""Interruptions: pauses for a human, and the rules an answer must follow (docs/state.md).

An :class:`~hankweave.state.types.Interruption` is created pending (``InterruptionCreated``)
and answered once (``InterruptionAnswered``).  This module holds what the CLI, the control
server and the runtime share:

* :func:`new_interruption_id`;
* :func:`checked_answer`: an answer given as text, ``--approve``/``--reject`` or JSON, checked
  against the interruption's options before anything is recorded;
* :func:`pending` and :func:`due_defaults` (deadlines passed: their default answers apply);
* :func:`resumable_run` and :func:`resume_chain`: which run the next run resumes, and whose
  answers a resume run carries (docs/human-in-the-loop.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hankweave.fsutil import parse_iso
from hankweave.state.types import ContinuationStart, HankweaveState, Interruption, Run, is_live_run

APPROVE = "approve"
REJECT = "reject"
APPROVAL_OPTIONS = [APPROVE, REJECT]
"""The options of every approval (a codon's gate, a held tool call)."""
EXTEND = "extend"
"""The key of a budget ask's answer that raises its ceiling: ``{"extend": amount}``."""
DEADLINE = "deadline"
"""``answeredBy`` of a default answer applied when its deadline passed."""


class AnswerError(ValueError):
    """An answer that cannot be recorded: the message says why; nothing was changed."""


def new_interruption_id() -> str:
    """``int-<epoch ms>-<5 random characters>``: sortable by creation, unique in practice."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return f"int-{int(time.time() * 1000)}-{''.join(secrets.choice(alphabet) for _ in range(5))}"


def pending(state: HankweaveState) -> list[Interruption]:
    """The interruptions still waiting for an answer, oldest first."""
    return [item for item in state.interruptions if item.status == "pending"]


@dataclass(frozen=True)
class GivenAnswer:
    """An answer as a human gave it: exactly one of the three forms."""

    text: str | None = None
    approve: bool = False
    reject: bool = False
    json_text: str | None = None
    extend: str | None = None
    """A budget ask's extension as given (``1.50``, ``$1.50``, ``90s``, ``5m``, ``20000``)."""


def checked_answer(state: HankweaveState, interruption_id: str, given: GivenAnswer) -> Any:
    """The answer to record for ``interruption_id``; :class:`AnswerError` when there is no such
    pending interruption, or the answer is not one it accepts."""
    item = state.interruption(interruption_id)
    if item is None:
        known = ", ".join(i.id for i in pending(state)) or "none"
        raise AnswerError(f"no interruption {interruption_id!r} in this execution (pending:"
                          f" {known})")
    if item.status != "pending":
        raise AnswerError(f"interruption {item.id} was already answered"
                          f" ({_shown(item.answer)} by {item.answered_by} at {item.answered_at})")
    return _within_options(item, _value(item, given))


def _value(item: Interruption, given: GivenAnswer) -> Any:
    forms = [given.text is not None, given.approve, given.reject, given.json_text is not None,
             given.extend is not None]
    if sum(forms) != 1:
        raise AnswerError("give exactly one answer: TEXT, --approve, --reject, --extend AMOUNT"
                          " or --json VALUE")
    if item.kind == "budget":
        return _budget_answer(item, given)
    if given.extend is not None:
        raise AnswerError(f"interruption {item.id} is not a budget ceiling: --extend answers"
                          " only those")
    if given.approve or given.reject:
        if item.kind == "question":
            raise AnswerError(f"interruption {item.id} is a question, not an approval: answer"
                              " it with TEXT (or --json)")
        return APPROVE if given.approve else REJECT
    if given.json_text is not None:
        try:
            return json.loads(given.json_text)
        except json.JSONDecodeError as exc:
            raise AnswerError(f"--json: not JSON ({exc.msg} at column {exc.colno})") from None
    return given.text


def _budget_answer(item: Interruption, given: GivenAnswer) -> Any:
    """``{"extend": amount}`` (in the ceiling's currency) or ``reject``."""
    if given.reject:
        return REJECT
    if given.extend is not None:
        return {EXTEND: parse_extension(given.extend, _currency(item))}
    if given.json_text is not None:
        try:
            value = json.loads(given.json_text)
        except json.JSONDecodeError as exc:
            raise AnswerError(f"--json: not JSON ({exc.msg} at column {exc.colno})") from None
        if value == REJECT:
            return REJECT
        if isinstance(value, dict) and set(value) == {EXTEND}:
            return {EXTEND: parse_extension(value[EXTEND], _currency(item))}
    raise AnswerError(f"interruption {item.id} asks to raise a budget ceiling: answer it with"
                      " --extend AMOUNT or --reject")


def _currency(item: Interruption) -> str:
    return item.budget.currency if item.budget is not None else "cost"


_TIME_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_MOST = {"cost": 1_000_000.0, "duration": 366 * 86400.0}
"""The largest extension of each currency (tokens: 10**10): beyond it, a typo."""


def parse_extension(given: Any, currency: str) -> float:
    """An extension amount in ``currency``'s unit: dollars (``1.50``, ``$1.50``), seconds
    (``90``, ``90s``, ``5m``, ``1h``) or whole tokens (``20000``, ``20_000``);
    :class:`AnswerError` unless it is a positive amount no larger than a sane bound.  A comma
    is refused, not guessed at: ``1,5`` could be one and a half or fifteen."""
    text = str(given).strip().replace("_", "")
    scale = 1.0
    if currency == "cost":
        text = text.removeprefix("$")
    elif currency == "duration" and text[-1:].lower() in _TIME_UNITS:
        text, scale = text[:-1], _TIME_UNITS[text[-1:].lower()]
    amount = float("nan")
    if text.isascii() and "," not in text and not isinstance(given, bool):
        with contextlib.suppress(ValueError):
            amount = float(text) * scale
    if currency in ("outputTokens", "contextTokens") and math.isfinite(amount):
        amount = float(round(amount))
    most = _MOST.get(currency, 1e10)
    if not math.isfinite(amount) or amount <= 0 or amount > most:
        unit = {"cost": "dollars, e.g. 1.50", "duration": "seconds, e.g. 90, 90s or 5m"}.get(
            currency, "tokens, e.g. 20000")
        raise AnswerError(f"--extend {given!r}: give a positive amount in {unit} (a dot for"
                          f" decimals, no more than {most:,.0f})")
    return amount


def _within_options(item: Interruption, value: Any) -> Any:
    options = item.options
    if not options:
        if isinstance(value, str) and not value.strip():
            raise AnswerError("an empty answer: give the text the question asks for")
        return value
    if value in options:
        return value
    listed = ", ".join(repr(option) for option in options)
    raise AnswerError(f"{_shown(value)} is not an answer interruption {item.id} accepts"
                      f" (one of {listed})")


def due_defaults(state: HankweaveState, now: datetime) -> list[tuple[Interruption, Any]]:
    """The pending interruptions whose deadline has passed, with the default to record."""
    due = []
    for item in pending(state):
        if item.deadline is not None and parse_iso(item.deadline) <= now:
            due.append((item, item.default_answer))
    return due


def resume_chain(state: HankweaveState, run_id: str | None) -> list[str]:
    """``run_id`` and the runs it resumes in turn (``resumedRunId`` links), newest first."""
    chain: list[str] = []
    run = state.run_by_id(run_id or "")
    while run is not None and run.run_id not in chain:
        chain.append(run.run_id)
        conditions = run.starting_conditions
        if not isinstance(conditions, ContinuationStart) or conditions.reason != "resume":
            break
        run = state.run_by_id(conditions.resumed_run_id or "")
    return chain


def resumable_run(state: HankweaveState) -> Run | None:
    """The newest run, when the next run resumes it: it ended ``interrupted``, or it was
    killed (or stopped) while one of its interruptions waited for an answer."""
    run = state.runs[0] if state.runs else None
    if run is None or is_live_run(run.status):
        return None
    if run.status == "interrupted":
        return run
    if run.status == "completed":
        return None
    end = run.end_time or ""
    for item in state.interruptions:
        if item.run_id == run.run_id and (item.status == "pending"
                                          or (item.answered_at or "") >= end):
            return run
    return None


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else json.dumps(value)
