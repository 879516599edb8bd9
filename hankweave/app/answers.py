"""Answering an interruption, wherever its execution is (``hankweave answer``, the dashboard).

The answer is checked against the interruption's options before anything is written.  While a
runtime runs the execution, the answer goes to it through its WebSocket server
(``interruption.answer``) and the waiting run goes on; with no runtime, the answer is recorded
here under the execution's lock, as an ``InterruptionAnswered`` transition (durable when this
returns) and an ``interruption.answered`` event, and the next run resumes with it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.execution.layout import ExecutionLayout
from hankweave.state.interruptions import AnswerError, GivenAnswer

__all__ = ["AnswerError", "GivenAnswer", "RecordedAnswer", "answer_interruption"]


@dataclass(frozen=True)
class RecordedAnswer:
    answer: Any
    """The answer as recorded (an approval's ``approve``/``reject``, text or a JSON value)."""
    forwarded: bool
    """Sent to the runtime running the execution (else recorded directly)."""


def answer_interruption(execution_dir: Path, interruption_id: str, given: GivenAnswer,
                        answered_by: str) -> RecordedAnswer:
    """Answer ``interruption_id`` of the execution in ``execution_dir``.

    Not for a running event loop's thread (it runs its own); call it in a worker thread there.

    Raises:
        AnswerError: unknown or already answered, outside the options, or a live runtime
            refused it or could not be reached; nothing was recorded.
        hankweave.state.lock.LockError: another process holds the execution.
        hankweave.state.store.StateLoadError: the state cannot be read.
    """
    layout = ExecutionLayout(Path(execution_dir).resolve())
    forwarded = _forward(layout, interruption_id, given, answered_by)
    if forwarded is not _NOT_SERVED:
        return RecordedAnswer(forwarded, forwarded=True)
    return RecordedAnswer(asyncio.run(_record(layout, interruption_id, given, answered_by)),
                          forwarded=False)


_NOT_SERVED = object()


def _forward(layout: ExecutionLayout, interruption_id: str, given: GivenAnswer,
             who: str) -> Any:
    """Send the answer to the runtime running the execution; its recorded answer, or
    ``_NOT_SERVED`` when no runtime serves there (the answer is then recorded here)."""
    from hankweave.server.client import ControlClient, ControlRefusedError, NoServerError
    from hankweave.server.client import server_address as find_server
    from hankweave.state.interruptions import checked_answer
    from hankweave.state.store import read_state_strict

    # Checked here first, so a refused answer reads the same whoever records it.
    checked_answer(read_state_strict(layout.hankweave_dir)[0], interruption_id, given)
    try:
        address = find_server(layout.path)
    except NoServerError:
        return _NOT_SERVED
    data: dict[str, Any] = {"interruptionId": interruption_id, "answeredBy": who}
    if given.approve or given.reject:
        data["approve" if given.approve else "reject"] = True
    elif given.extend is not None:
        data["extend"] = given.extend
    else:
        data["answer"] = given.text if given.text is not None else json.loads(
            given.json_text or "null")

    async def send() -> Any:
        client = await ControlClient.connect(address.url, token=address.token,
                                             require_control=True)
        async with client:
            return await client.command("interruption.answer", data)

    try:
        reply = asyncio.run(send())
    except (NoServerError, ControlRefusedError, TimeoutError, OSError) as exc:
        raise AnswerError(f"a runtime runs {layout.path} (pid {address.pid}) but the answer"
                          f" could not be sent to it: {exc}") from None
    if not reply.ok:
        raise AnswerError(f"the running runtime refused the answer: {reply.message}")
    return (reply.result or {}).get("answer")


async def _record(layout: ExecutionLayout, interruption_id: str, given: GivenAnswer,
                  who: str) -> Any:
    from hankweave.events.bus import EventBus
    from hankweave.events.journal import EventJournal
    from hankweave.runtime.reporter import Reporter
    from hankweave.state.boot import take_ownership
    from hankweave.state.interruptions import checked_answer
    from hankweave.state.transitions import InterruptionAnswered, InterruptionAnsweredData

    owned = await take_ownership(layout.hankweave_dir)
    try:
        answer = checked_answer(owned.store.state, interruption_id, given)
        await owned.store.transition(InterruptionAnswered(data=InterruptionAnsweredData(
            interruption_id=interruption_id, answer=answer, answered_by=who)))
        item = owned.store.state.interruption(interruption_id)
        assert item is not None
        bus = EventBus(EventJournal(layout.events_file))
        try:
            Reporter(bus.emit).interruption_answered(item)
        finally:
            bus.close()
        return answer
    finally:
        await owned.release()
