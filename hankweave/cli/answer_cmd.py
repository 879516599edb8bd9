"""``hankweave answer``: record a human's answer to a pending interruption (docs/cli.md).

The answer is checked against the interruption's options before anything is written, then
recorded as an ``InterruptionAnswered`` transition (durable when the command returns) and an
``interruption.answered`` event in the journal.  With no runtime on the execution, the command
takes its lock and records the answer itself; ``hankweave run -e DIR`` then resumes with it.
While a runtime runs it (``--wait-for-answers``), the answer goes to that runtime through its
WebSocket server (``interruption.answer``), and the waiting run goes on.
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
@click.option("--submit", is_flag=True, help="Then queue the resume on the workers (`hankweave"
              " submit -e DIR`, from an executor plugin) instead of `hankweave run -e DIR`.")
@click.pass_context
def answer_command(ctx: click.Context, execution_dir: Path, interruption_id: str,
                   text: str | None, approve: bool, reject: bool, json_text: str | None,
                   answered_by: str | None, submit: bool) -> None:
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
    submitter = _submit_command(ctx) if submit else None
    try:
        forwarded = _forward(layout.path, interruption_id, given, who)
        if forwarded is not None:
            click.echo(f"Answered {interruption_id}: {forwarded!r} (sent to the running"
                       " runtime)")
            return
        answer = asyncio.run(_record(layout, interruption_id, given, who))
    except (AnswerError, LockError, StateLoadError) as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    if submitter is None:
        click.echo(f"Answered {interruption_id}: {answer!r}. Resume with: hankweave run -e"
                   f" {layout.path}")
        return
    click.echo(f"Answered {interruption_id}: {answer!r}. Queuing the resume:")
    ctx.invoke(submitter, execution=str(layout.path))


def _submit_command(ctx: click.Context) -> click.Command:
    """The ``submit`` command an executor plugin adds (``--submit`` needs one)."""
    root = ctx.find_root().command
    found = root.get_command(ctx, "submit") if isinstance(root, click.Group) else None
    if found is None:
        raise CLIError("--submit needs an executor plugin that adds `hankweave submit` (pip"
                       " install plugins/hankweave-executor-celery)", EXIT_USAGE)
    return found


def _forward(execution_dir: Path, interruption_id: str, given: Any, who: str) -> Any:
    """Send the answer to the runtime running on ``execution_dir``; its recorded answer, or
    None when no runtime serves there (the answer is then recorded here)."""
    import asyncio

    from hankweave.execution.layout import ExecutionLayout
    from hankweave.server.client import ControlClient, ControlRefusedError, NoServerError
    from hankweave.server.client import server_address as find_server
    from hankweave.state.interruptions import AnswerError, checked_answer
    from hankweave.state.store import read_state_strict

    # Checked here first, so a refused answer reads the same whoever records it.
    checked_answer(read_state_strict(ExecutionLayout(execution_dir).hankweave_dir)[0],
                   interruption_id, given)
    try:
        address = find_server(execution_dir)
    except NoServerError:
        return None
    data: dict[str, Any] = {"interruptionId": interruption_id, "answeredBy": who}
    if given.approve or given.reject:
        data["approve" if given.approve else "reject"] = True
    else:
        import json

        data["answer"] = given.text if given.text is not None else json.loads(given.json_text)

    async def send() -> Any:
        client = await ControlClient.connect(address.url, token=address.token,
                                             require_control=True)
        async with client:
            return await client.command("interruption.answer", data)

    try:
        reply = asyncio.run(send())
    except (NoServerError, ControlRefusedError, TimeoutError, OSError) as exc:
        raise AnswerError(f"a runtime runs {execution_dir} (pid {address.pid}) but the answer"
                          f" could not be sent to it: {exc}") from None
    if not reply.ok:
        raise AnswerError(f"the running runtime refused the answer: {reply.message}")
    return (reply.result or {}).get("answer")


async def _record(layout: Any, interruption_id: str, given: Any, who: str) -> Any:
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


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return "unknown"
