"""``hankweave run``: run a hank, resumably, with a live view or plain CI logs."""

from __future__ import annotations

import errno
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.hank_and_data import hank_and_data
from hankweave.cli.run_options import run_options
from hankweave.exitcodes import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from hankweave.app.request import LaunchRequest
    from hankweave.cli.progress import HeadlessLog, LiveView
    from hankweave.cli.run_keys import KeyReader
    from hankweave.config.settings import Settings
    from hankweave.state.types import HankweaveState

_CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "JENKINS", "CIRCLECI", "TRAVIS")

_STORAGE_FIXES = {
    errno.ENOSPC: "Free some disk space",
    errno.EDQUOT: "Free some space (the disk quota is used up)",
    errno.EROFS: "Make the file system writable",
    errno.EACCES: "Make the execution directory writable",
    errno.EPERM: "Make the execution directory writable",
}
"""The errors of a disk that cannot take the run's records, and what the user can do."""


def interactive() -> bool:
    """Whether confirmation questions can be asked (a terminal, and not CI)."""
    if any(os.environ.get(name) for name in _CI_VARIABLES):
        return False
    return sys.stdin.isatty() and sys.stderr.isatty()


@click.command("run")
@click.argument("hank", required=False)
@click.argument("data", required=False)
@click.option("--config", "config", metavar="HANK", help="The hank (a hank.json, or a directory"
              " holding one), instead of the HANK argument.")
@click.option("--data", "data_option", metavar="DATA", help="The data (a file or directory; -"
              " reads stdin), instead of the DATA argument.")
@click.option("-e", "--execution", metavar="DIR", help="Execution directory to use (resumed if"
              " it holds one).")
@click.option("-n", "--start-new", "--new", is_flag=True, help="Never resume: start a new"
              " execution.")
@click.option("-f", "--force", is_flag=True, help="Override safety checks (changed data,"
              " existing state under -n, confirmations).")
@click.option("--ignore-data-mismatch", is_flag=True, help="Resume an execution whose data"
              " source changed, on the new data (the data check of --force alone).")
@click.option("--no-wipe", is_flag=True, help="With -n -f: keep the old agentRoot/.")
@click.option("--start-fresh", is_flag=True, help="With -e, when the execution's state files"
              " are unreadable: move them to .hankweave/damaged-<timestamp>/ (kept) and start"
              " its state over; agentRoot/ and the journal are kept.")
@click.option("--copy", is_flag=True, help="Copy the data source instead of linking it.")
@click.option("-i", "--input", "input_text", metavar="TEXT", help="Use this text as the data"
              " source.")
@run_options()
@click.option("--headless", is_flag=True, help="No live view: plain log lines for CI.")
@click.option("--json", "json_events", is_flag=True, help="With --headless: every event as a"
              " JSON line on stdout.")
@click.option("-y", "--yes", is_flag=True, help="Answer yes to confirmations.")
@click.option("--replay", metavar="SOURCE", help="Play a recording (.hwrec.tar.gz) or a recorded"
              " execution directory back in a fresh execution, with no provider (needs"
              " hankweave-replay).")
@click.option("--mock-provider", "mock_provider", metavar="SCRIPT", help="Dry run: serve this"
              " mock provider script on 127.0.0.1 and point every codon's agent at it, with"
              " dummy keys (docs/testing-hanks.md). Recorded: `run -e DIR` resumes on it.")
@click.option("--no-mock-provider", is_flag=True, help="Resume an execution that ran on a"
              " mock provider against the real providers.")
@click.option("--replay-speed", type=click.Choice(["instant", "recorded"]), default="instant",
              show_default=True, help="With --replay: as fast as possible, or the recorded gaps"
              " (each capped by HANKWEAVE_REPLAY_MAX_DELAY_MS).")
@click.option("--allow-commands/--no-allow-commands", default=None, help="A replay (--replay,"
              " or -e resuming one) runs its recording's rig and beforeCopy commands, each"
              " printed first; without it they are skipped (recorded for resumes).")
@click.option("--wait-for-answers", is_flag=True, help="Stay up while an interruption waits"
              " for a person (answer through the WebSocket or `hankweave answer`), instead of"
              " ending the run interrupted (exit 3).")
@click.pass_context
def run_command(ctx: click.Context, hank: str | None, data: str | None, config: str | None,
                data_option: str | None, execution: str | None, start_new: bool, force: bool,
                ignore_data_mismatch: bool, no_wipe: bool, start_fresh: bool, copy: bool,
                input_text: str | None, headless: bool, json_events: bool, yes: bool,
                replay: str | None, mock_provider: str | None, no_mock_provider: bool,
                replay_speed: str, allow_commands: bool | None, wait_for_answers: bool,
                **options: Any) -> None:
    """Run HANK (a hank.json, a directory holding one, a .hank bundle, or a git repository
    address such as https://github.com/OWNER/REPO#v1/path) on DATA (default: the current
    directory; - reads stdin). A single argument is DATA unless it ends in .json or .hank or
    is a repository address (then it is HANK); the hank is then DATA's hank.json, else
    ./hank.json. A bundle is checked file by file against its hank.lock, and a remote hank
    fetched into the cache, before anything runs (docs/bundles.md, docs/remote-hanks.md).

    An execution directory that holds state is resumed: a crashed or failed run is rolled back
    to its last successful codon and continues from there; completed codons never run again.
    A run that ended waiting for a person (exit 3) resumes with their answers.
    The options that decide where and how agents run (--mock-provider and each option marked
    "kept for resumes") are recorded in the execution and reused by a resume with -e unless
    given again.
    """
    from hankweave.app.request import LaunchRequest

    if json_events and not headless:
        raise click.UsageError("--json needs --headless")
    if mock_provider is not None and no_mock_provider:
        raise click.UsageError("--mock-provider and --no-mock-provider contradict each other")
    given = hank_and_data(hank, data, config=config, data=data_option,
                          data_given_otherwise=input_text is not None)
    hank, data = given.hank, given.data
    stdin_text = sys.stdin.buffer.read() if data == "-" and not sys.stdin.isatty() else None
    can_ask = interactive()
    request = LaunchRequest(
        hank=hank, data=data, execution=execution, start_new=start_new, force=force,
        ignore_data_mismatch=ignore_data_mismatch, no_wipe=no_wipe, start_fresh=start_fresh, copy=copy, input_text=input_text,
        options=options, replay=replay, replay_speed=replay_speed,
        allow_commands=allow_commands,
        mock_provider=mock_provider, no_mock_provider=no_mock_provider,
        wait_for_answers=wait_for_answers,
        headless=headless or not sys.stderr.isatty(), yes=yes,
        cwd=Path.cwd(), env=dict(os.environ), stdin_text=stdin_text,
        confirm=(lambda question: click.confirm(question, default=False, err=True))
        if can_ask else None)
    code = launch_with_progress(request, json_events=json_events)
    ctx.exit(code)


def launch_with_progress(request: LaunchRequest, *, json_events: bool) -> int:
    """Run a launch request with the live view and its keys (or plain lines when headless),
    then say what the run came to: :mod:`hankweave.cli.run_summary`."""
    from hankweave.app.launch import launch
    from hankweave.app.request import LaunchError
    from hankweave.cli.progress import HeadlessLog, LiveView
    from hankweave.config.errors import ConfigError

    view: HeadlessLog | LiveView = HeadlessLog(as_json=json_events) if request.headless \
        else LiveView()
    ending = _Ending(view, replayed=request.replay is not None)
    request.on_event, request.on_settings = view, ending.configure
    request.on_start, request.on_end = ending.started, ending.ended
    if isinstance(view, LiveView):
        request.notify = view.say  # above the panel, a quoted command kept on one line
    try:
        if isinstance(view, HeadlessLog):
            code = launch(request)
        else:
            with view:
                try:
                    code = launch(request)
                finally:
                    ending.stop_keys()
    except LaunchError as exc:
        raise CLIError(str(exc), exc.exit_code) from None
    except ConfigError as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    except Exception as exc:
        message = storage_failure(exc, request.execution)
        if message is None:
            raise
        raise CLIError(message, EXIT_FAILED) from None
    ending.print_summary()
    return code


class _Ending:
    """The run's start and end, as the terminal takes them: the live view's keys start when
    the run owns its execution (after any confirmation question, which reads stdin), and the
    summary is printed once the live view is gone."""

    def __init__(self, view: HeadlessLog | LiveView, *, replayed: bool) -> None:
        self.view = view
        self.replayed = replayed
        self.settings: Settings | None = None
        self.ended_with: tuple[HankweaveState, Path, int] | None = None
        self.keys: KeyReader | None = None

    def configure(self, settings: Settings) -> None:
        self.settings = settings
        self.view.configure(settings)

    def started(self, state: HankweaveState, execution: Path) -> None:
        from hankweave.cli.progress import LiveView
        from hankweave.cli.run_keys import FOOTER, Control, KeyReader, RunKeys

        if not isinstance(self.view, LiveView):
            return
        self.view.seed(state)
        if sys.stdin.isatty():
            keys = RunKeys(self.view, Control(execution))
            self.keys = KeyReader(sys.stdin, keys.press)
            self.keys.start()
            if self.keys.active:
                self.view.footer = FOOTER

    def ended(self, state: HankweaveState, execution: Path, code: int) -> None:
        self.ended_with = (state, execution, code)

    def stop_keys(self) -> None:
        if self.keys is not None:
            self.keys.stop()

    def print_summary(self) -> None:
        from rich.console import Console

        from hankweave.cli.progress import HeadlessLog
        from hankweave.cli.run_summary import summarize_run, summary_lines, summary_text

        if self.ended_with is None:
            return
        state, execution, code = self.ended_with
        settings = self.settings
        summary = summarize_run(
            state, events=self.view.tracker.events, exit_code=code,
            output_dir=settings.output_directory if settings else None,
            show_costs=settings.show_costs if settings else True)
        if isinstance(self.view, HeadlessLog):
            lines = summary_lines(summary, execution, replayable=not self.replayed, files=True)
            sys.stderr.write("\n" + "".join(f"{line}\n" for line, _ in lines))
            sys.stderr.flush()
            return
        console = Console(stderr=True)
        console.print()
        console.print(summary_text(summary, execution, replayable=not self.replayed,
                                   files=True), soft_wrap=True, highlight=False)


def storage_failure(exc: BaseException, execution: str | None) -> str | None:
    """A full or read-only disk stopped the run: say what, where, and how to resume.

    ``exc`` is what the run raised (a state or journal error wraps the ``OSError``); None
    when no storage error caused it.
    """
    cause: BaseException | None = exc
    while cause is not None and not (isinstance(cause, OSError)
                                     and cause.errno in _STORAGE_FIXES):
        cause = cause.__cause__ or cause.__context__
    if not isinstance(cause, OSError) or cause.errno is None:
        return None
    what = str(exc) if exc is not cause else (
        f"cannot write {cause.filename}: {cause.strerror}" if cause.filename else str(cause))
    resume = (f"hankweave run -e {shlex.quote(execution)}" if execution else
              "hankweave run -e <DIR>")
    return (f"The run's records could not be written: {what}. The run stopped; everything it"
            f" recorded before is kept. {_STORAGE_FIXES[cause.errno]}, then resume with"
            f" `{resume}`.")
