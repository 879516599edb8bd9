"""``hankweave answer``: record a human's answer to a pending interruption (docs/cli.md).

The answer is checked against the interruption's options before anything is written, then
recorded as an ``InterruptionAnswered`` transition (durable when the command returns) and an
``interruption.answered`` event in the journal.  The command takes the execution's lock, so it
is refused while a runtime runs the execution; ``hankweave run -e DIR`` then resumes with it.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.options import execution_option
from hankweave.exitcodes import EXIT_USAGE


@click.command("answer")
@execution_option()
@click.argument("interruption_id", metavar="ID")
@click.argument("text", required=False)
@click.option("--approve", is_flag=True, help="Approve (an approval gate or a held tool call).")
@click.option("--reject", is_flag=True, help="Reject (an approval gate or a held tool call).")
@click.option("--json", "json_text", metavar="VALUE", help="The answer as a JSON value.")
@click.option("--by", "answered_by", metavar="NAME",
              help="Who answers (recorded as answeredBy; default cli:<user>).")
def answer_command(execution_dir: Path, interruption_id: str, text: str | None, approve: bool,
                   reject: bool, json_text: str | None, answered_by: str | None) -> None:
    """Answer interruption ID with TEXT, --approve, --reject or --json VALUE.

    List what waits with `hankweave inspect interruptions -e DIR --pending`.  An unknown or
    already-answered ID, or an answer outside the question's options, is refused and changes
    nothing.
    """
    import asyncio

    from hankweave.execution.layout import ExecutionLayout
    from hankweave.state.interruptions import AnswerError, GivenAnswer
    from hankweave.state.lock import LockError
    from hankweave.state.store import StateLoadError

    layout = ExecutionLayout(execution_dir.resolve())
    if not layout.state_file.exists() and not layout.state_log_file.exists():
        raise CLIError(f"{layout.path}: not an execution directory (no .hankweave/state.json)")
    given = GivenAnswer(text=text, approve=approve, reject=reject, json_text=json_text)
    who = answered_by or f"cli:{_user()}"
    try:
        answer = asyncio.run(_record(layout, interruption_id, given, who))
    except (AnswerError, LockError, StateLoadError) as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    click.echo(f"Answered {interruption_id}: {answer!r}. Resume with: hankweave run -e"
               f" {layout.path}")


async def _record(layout: Any, interruption_id: str, given: Any, who: str) -> Any:
    from hankweave.events.bus import EventBus
    from hankweave.events.journal import EventJournal
    from hankweave.state.boot import take_ownership
    from hankweave.state.interruptions import checked_answer
    from hankweave.state.store import read_state_strict
    from hankweave.state.transitions import InterruptionAnswered, InterruptionAnsweredData

    # Checked on a read-only load first: a refused answer changes nothing, not even the
    # crash repair that taking ownership does.
    checked_answer(read_state_strict(layout.hankweave_dir)[0], interruption_id, given)
    owned = await take_ownership(layout.hankweave_dir)
    try:
        answer = checked_answer(owned.store.state, interruption_id, given)
        await owned.store.transition(InterruptionAnswered(data=InterruptionAnsweredData(
            interruption_id=interruption_id, answer=answer, answered_by=who)))
        item = owned.store.state.interruption(interruption_id)
        assert item is not None
        bus = EventBus(EventJournal(layout.events_file))
        try:
            bus.emit("interruption.answered", {
                "interruptionId": item.id, "codonId": item.codon_id, "answer": answer,
                "answeredBy": who})
        finally:
            bus.close()
        return answer
    finally:
        await owned.release()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return "unknown"
