"""``hankweave fork``: continue an execution's history from a codon in a new execution, with
changes (docs/fork.md)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.options import execution_option
from hankweave.cli.run_options import run_options
from hankweave.config.run_options import RUN_OPTIONS
from hankweave.exitcodes import EXIT_USAGE

_PASSED_OPTIONS = tuple(option.name for option in RUN_OPTIONS if option.name != "output")
"""The run options a fork's run takes as ``run`` does; ``-o`` names the fork here, so the
output directory is ``--output-dir``."""


@click.command("fork")
@execution_option("The source execution directory (never modified; it may be running).")
@click.option("--at", "codon_id", required=True, metavar="CODON",
              help="The codon the fork continues after (a loop iteration: ID#N); it must have"
              " completed or been skipped in the source's thread.")
@click.option("-o", "--into", "target", type=click.Path(path_type=Path), metavar="NEWDIR",
              help="The new execution directory (default: SRC-fork-N beside the source).")
@click.option("--hank", "hank", type=click.Path(path_type=Path), metavar="HANK",
              help="Continue with this hank (a hank.json or a directory holding one): changed"
              " prompts and codon settings apply to the codons after the fork point.")
@click.option("--allow-changed-history", is_flag=True, help="Fork even though --hank changes"
              " codons up to the fork point (their results are kept as the source made them).")
@click.option("--no-start", is_flag=True, help="Make the fork and stop; run it later with"
              " `hankweave run -e NEWDIR`.")
@click.option("--output-dir", "output", metavar="DIR", help="The run's output directory (`run"
              " -o`).")
@click.option("--headless", is_flag=True, help="No live view: plain log lines for CI.")
@click.option("--json", "json_events", is_flag=True, help="With --headless: every event as a"
              " JSON line.")
@click.option("--mock-provider", "mock_provider", metavar="SCRIPT", help="Continue as a dry"
              " run on this mock provider script (kept for resumes).")
@click.option("--no-mock-provider", is_flag=True, help="Continue a dry run's fork on the real"
              " provider.")
@click.option("--wait-for-answers", is_flag=True, help="Stay up while an interruption waits"
              " for a person.")
@run_options(*_PASSED_OPTIONS)
@click.pass_context
def fork_command(ctx: click.Context, execution_dir: Path, codon_id: str, target: Path | None,
                 hank: Path | None, allow_changed_history: bool, no_start: bool,
                 headless: bool, json_events: bool, mock_provider: str | None,
                 no_mock_provider: bool, wait_for_answers: bool, **options: Any) -> None:
    """Fork the execution SRC (-e) after CODON into a new execution and run it from there.

    The fork's history up to and including CODON is SRC's: its state, its journal, its
    checkpoints and its workspace at CODON's checkpoint; the agents' conversations are
    copied, never shared. It then runs the codons after CODON, with the changes given: a
    changed hank (--hank; the codons up to CODON must be unchanged), another model (-m), other
    run options. SRC is never modified. Compare the two with `hankweave compare SRC NEWDIR`.
    """
    from hankweave.app.fork import ForkError, fork_execution
    from hankweave.registry import get_registry

    if json_events and not headless:
        raise click.UsageError("--json needs --headless")
    if mock_provider is not None and no_mock_provider:
        raise click.UsageError("--mock-provider and --no-mock-provider contradict each other")
    hank_file = _hank_file(hank) if hank is not None else None
    try:
        with _stopped_cleanly():
            made = fork_execution(execution_dir.resolve(), target.resolve() if target else None,
                                  codon_id, registry=get_registry(), hank_path=hank_file,
                                  allow_changed_history=allow_changed_history)
    except ForkError as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    source, fork = execution_dir.resolve(), made.target
    click.echo(f"Forked {source} after {made.point.codon_id} (checkpoint "
               f"{made.point.checkpoint[:12]}) into {fork}", err=True)
    for change in made.changed_history:
        click.echo(f"  kept although the hank changed it: {change}", err=True)
    compare = f"hankweave compare {shlex.quote(str(source))} {shlex.quote(str(fork))}"
    if no_start:
        click.echo(f"Run it: hankweave run -e {shlex.quote(str(fork))}\nThen compare: {compare}",
                   err=True)
        return
    code = _run_fork(fork, hank_file, headless=headless, json_events=json_events,
                     mock_provider=mock_provider, no_mock_provider=no_mock_provider,
                     wait_for_answers=wait_for_answers, options=options)
    click.echo(f"Compare with the source: {compare}", err=True)
    ctx.exit(code)


@contextlib.contextmanager
def _stopped_cleanly() -> Iterator[None]:
    """SIGTERM and SIGHUP end the fork as Ctrl-C does: what it made is removed (exit 143,
    129), instead of the process dying with half a directory."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _hank_file(hank: Path) -> Path:
    path = hank / "hank.json" if hank.is_dir() else hank
    if not path.is_file():
        raise CLIError(f"{hank}: no hank file here (give a hank.json or a directory holding one)",
                       EXIT_USAGE)
    return path.resolve()


def _run_fork(fork: Path, hank: Path | None, *, headless: bool, json_events: bool,
              mock_provider: str | None, no_mock_provider: bool, wait_for_answers: bool,
              options: dict[str, Any]) -> int:
    """``hankweave run -e NEWDIR`` with the options given (the fork's recorded intent fills in
    the rest, as a resume's does)."""
    from hankweave.app.request import LaunchRequest
    from hankweave.cli.run_cmd import launch_with_progress

    request = LaunchRequest(
        hank=str(hank) if hank is not None else None, data=None, execution=str(fork),
        options={"output": None, **options}, mock_provider=mock_provider,
        no_mock_provider=no_mock_provider, wait_for_answers=wait_for_answers,
        headless=headless or not sys.stderr.isatty(), yes=True, cwd=Path.cwd(),
        env=dict(os.environ))
    return launch_with_progress(request, json_events=json_events)
