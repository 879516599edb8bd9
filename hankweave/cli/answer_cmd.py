"""``hankweave answer``: record a human's answer to a pending interruption (docs/cli.md).

How an answer is checked, sent to a running runtime or recorded directly:
:mod:`hankweave.app.answers`.  With no runtime on the execution, ``hankweave run -e DIR`` then
resumes with the answer; while a runtime runs it (``--wait-for-answers``), the waiting run goes
on.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.options import execution_option
from hankweave.exitcodes import EXIT_USAGE


@click.command("answer")
@execution_option()
@click.argument("interruption_id", metavar="ID")
@click.argument("text", required=False)
@click.option("--approve", is_flag=True, help="Approve (an approval gate or a held tool call).")
@click.option("--reject", is_flag=True, help="Reject (an approval gate, a held tool call or a"
              " budget ceiling).")
@click.option("--json", "json_text", metavar="VALUE", help="The answer as a JSON value.")
@click.option("--extend", metavar="AMOUNT", help="Raise a budget ceiling by AMOUNT (dollars:"
              " 1.50; seconds: 90, 90s, 5m; tokens: 20000) and let the codon go on.")
@click.option("--by", "answered_by", metavar="NAME",
              help="Who answers (recorded as answeredBy; default cli:<user>, the user from"
              " $HANKWEAVE_USER, else the login name).")
@click.option("--submit", is_flag=True, help="Then queue the resume on the workers (`hankweave"
              " submit -e DIR`, from an executor plugin) instead of `hankweave run -e DIR`.")
@click.pass_context
def answer_command(ctx: click.Context, execution_dir: Path, interruption_id: str,
                   text: str | None, approve: bool, reject: bool, json_text: str | None,
                   extend: str | None, answered_by: str | None, submit: bool) -> None:
    """Answer interruption ID with TEXT, --approve, --reject, --extend AMOUNT or --json VALUE.

    A budget ceiling (kind budget) takes --extend AMOUNT, which raises it and lets the same
    attempt go on, or --reject, which ends the codon as the breach would have.

    List what waits with `hankweave inspect interruptions -e DIR --pending`.  An unknown or
    already-answered ID, or an answer outside the question's options, is refused and changes
    nothing.
    """
    from hankweave.app.answers import AnswerError, GivenAnswer, answer_interruption
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.people import current_user
    from hankweave.state.lock import LockError
    from hankweave.state.store import StateLoadError

    layout = ExecutionLayout(execution_dir.resolve())
    if not layout.state_file.exists() and not layout.state_log_file.exists():
        raise CLIError(f"{layout.path}: not an execution directory (no .hankweave/state.json)")
    given = GivenAnswer(text=text, approve=approve, reject=reject, json_text=json_text,
                        extend=extend)
    who = answered_by or f"cli:{current_user()}"
    submitter = _submit_command(ctx) if submit else None
    try:
        recorded = answer_interruption(layout.path, interruption_id, given, who)
    except (AnswerError, LockError, StateLoadError) as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    answer = recorded.answer
    if recorded.forwarded:
        click.echo(f"Answered {interruption_id}: {answer!r} (sent to the running runtime)")
        return
    if submitter is None:
        # The execution's recorded intent (a dry run's mock provider, -m) comes with -e.
        click.echo(f"Answered {interruption_id}: {answer!r}. Resume with: hankweave run -e"
                   f" {shlex.quote(str(layout.path))}")
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

