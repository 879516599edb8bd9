"""``hankweave worker``, ``submit``, ``status`` and ``cancel`` (README.md of this package).

Each imports Celery and Redis when it runs, so ``hankweave --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hankweave.api import EXIT_FAILED, EXIT_USAGE, CLIError, mask_url_credentials

if TYPE_CHECKING:
    from celery import Celery

    from hankweave_executor_celery.ledger import Ledger, Submission
    from hankweave_executor_celery.settings import CelerySettings

# The ledger, the settings and Celery are imported by the commands when they run: these
# commands are registered on every `hankweave` start, which must stay fast.

PING_S = 1.0
"""How long `cancel` waits for the worker of a running execution to answer."""

broker_option = click.option(
    "--broker", metavar="URL", help="The Redis broker (default: HANKWEAVE_CELERY_BROKER, then"
    " executors.celery.broker in ./hankweave.json, then redis://127.0.0.1:6379/0).")


def _settings(broker: str | None) -> CelerySettings:
    from hankweave.api import ConfigError
    from hankweave_executor_celery.settings import load_settings

    try:
        return load_settings(broker=broker)
    except ConfigError as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None


def _ledger(settings: CelerySettings) -> Ledger:
    from hankweave_executor_celery.ledger import BrokerError, Ledger

    ledger = Ledger(settings.broker)
    try:
        ledger.check()
    except BrokerError as exc:
        raise CLIError(str(exc), EXIT_FAILED) from None
    return ledger


def _app(settings: CelerySettings) -> Celery:
    from hankweave_executor_celery.app import make_app

    return make_app(settings)


# ----- worker -----


@click.command("worker")
@click.option("-c", "--concurrency", type=click.IntRange(1, 256), default=1, show_default=True,
              help="How many executions this worker runs at once (one process each).")
@click.option("-Q", "--queue", "queues", metavar="QUEUE", multiple=True,
              help="The queue(s) to take executions from (default: the settings' queue).")
@click.option("-n", "--name", metavar="NAME", help="The worker's name (default:"
              " hankweave-<pid>@<host>).")
@click.option("-l", "--loglevel", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@broker_option
def worker_command(concurrency: int, queues: tuple[str, ...], name: str | None, loglevel: str,
                   broker: str | None) -> None:
    """Run a Celery worker that runs submitted executions.

    Prefetch 1 and late acknowledgement: a worker holds only what it runs, and an execution
    whose worker dies is delivered again and resumed. Every worker must see the executions'
    directories at the same paths (a shared filesystem, and the same HANKWEAVE_HOME).
    """
    settings = _settings(broker)
    _ledger(settings)  # a clear error now rather than Celery's reconnect loop
    app = _app(settings)
    app.worker_main([
        "worker", "--concurrency", str(concurrency), "--queues",
        ",".join(queues or (settings.queue,)), "--hostname",
        name or f"hankweave-{os.getpid()}@{socket.gethostname()}", "--loglevel", loglevel,
        "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle",
        "--pool", "prefork"])


# ----- submit -----


@click.command("submit")
@click.argument("hank", required=False)
@click.argument("data", nargs=-1)
@click.option("-e", "--execution", metavar="DIR", help="The execution directory (resumed if it"
              " holds one). Without HANK: resume DIR on a worker.")
@click.option("--each", is_flag=True, help="One new execution per DATA (for example"
              " `--each datasets/*`).")
@click.option("-Q", "--queue", metavar="QUEUE", help="The queue to send to.")
@click.option("--priority", type=click.IntRange(0, 9), help="0 (first) to 9 (last); default 5.")
@broker_option
def submit_command(hank: str | None, data: tuple[str, ...], execution: str | None, each: bool,
                   queue: str | None, priority: int | None, broker: str | None) -> None:
    """Send HANK on DATA to the workers; print the execution directory.

    The execution directory is set up here (under HANKWEAVE_HOME unless -e says where), so
    the hank and data are checked before anything is queued. With the broker down nothing is
    created.
    """
    if each and execution:
        raise click.UsageError("--each makes one execution per DATA: it cannot take -e")
    if hank is None and execution is None:
        raise click.UsageError("give HANK (and DATA), or -e DIR to resume an execution")
    if len(data) > 1 and not each:
        raise click.UsageError("several DATA need --each (one execution per DATA)")
    settings = _settings(broker)
    ledger = _ledger(settings)
    app = _app(settings)
    for source in (data if each else (data[0] if data else None,)):
        path = _submit_one(app, ledger, settings, hank=hank, data=source, execution=execution,
                           queue=queue or settings.queue, priority=priority)
        click.echo(path)


def _submit_one(app: Celery, ledger: Ledger, settings: CelerySettings, *, hank: str | None,
                data: str | None, execution: str | None, queue: str,
                priority: int | None) -> str:
    from hankweave_executor_celery.ledger import FINISHED, BrokerError, Submission, now

    directory, created, hank_path, data_path = _prepare(hank, data, execution)
    current = ledger.get(directory)
    if current is not None and current.status not in FINISHED:
        _undo(directory, created)
        raise CLIError(f"{directory} is already submitted ({current.status}); see `hankweave"
                       " status`", EXIT_USAGE)
    task_id = f"hankweave-{uuid.uuid4()}"
    ledger.add(Submission(execution_dir=directory, hank=hank_path, data=data_path, queue=queue,
                          priority=priority, task_id=task_id, submitted_at=now(),
                          deliveries=current.deliveries if current else 0))
    from hankweave_executor_celery.settings import TASK_NAME

    try:
        app.send_task(TASK_NAME, args=[directory], queue=queue, priority=priority,
                      task_id=task_id)
    except Exception as exc:  # kombu's OperationalError and friends: the broker went away
        _undo(directory, created)
        with contextlib.suppress(BrokerError):
            ledger.remove(directory)
        raise CLIError(mask_url_credentials(f"Could not queue {directory}: {exc}"),
                       EXIT_FAILED) from None
    return directory


def _prepare(hank: str | None, data: str | None, execution: str | None
             ) -> tuple[str, bool, str | None, str | None]:
    """Set up the execution directory as ``hankweave run`` would, without running it:
    ``(directory, newly created, hank path, data path)``."""
    from hankweave.api import LaunchError, LaunchRequest, prepare

    existed = execution is not None and Path(execution).exists()
    request = LaunchRequest(hank=hank, data=data, execution=execution,
                            start_new=execution is None, headless=True, yes=True,
                            cwd=Path.cwd(), env=dict(os.environ),
                            notify=lambda text: click.echo(text, err=True))
    try:
        prepared = prepare(request)
    except LaunchError as exc:
        raise CLIError(str(exc), exc.exit_code) from None
    except Exception as exc:  # a hank or settings error (ConfigError and its kind)
        raise CLIError(str(exc), EXIT_USAGE) from None
    prepared.release()
    setup = prepared.setup
    directory = str(setup.layout.path)
    return (directory, setup.is_new and not existed, str(prepared.hank_path),
            str(setup.data_source))


def _undo(directory: str, created: bool) -> None:
    """Remove an execution directory this submit created (nothing half-created is left)."""
    if created:
        shutil.rmtree(directory, ignore_errors=True)


# ----- status -----


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per execution.")
@click.option("--follow", is_flag=True, help="Refresh until every execution has finished"
              " (Ctrl-C stops watching).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              metavar="SECONDS", help="With --follow: how often to refresh.")
@broker_option
def status_command(as_json: bool, follow: bool, interval: float, broker: str | None) -> None:
    """Every submitted execution: queued, running on which worker, deferred, interrupted,
    completed, failed, stopped or cancelled, with its codons and cost so far; then every
    worker, its last heartbeat (flagged silent when it is gone) and what it runs."""
    from hankweave_executor_celery.status import follow_status, print_status

    settings = _settings(broker)
    ledger = _ledger(settings)
    if follow:
        follow_status(ledger, interval=interval, as_json=as_json,
                      silence_s=settings.worker_silence_s)
    else:
        print_status(ledger, as_json=as_json, silence_s=settings.worker_silence_s)


# ----- cancel -----


@click.command("cancel")
@click.option("-e", "--execution", "execution", required=True, metavar="DIR",
              help="The submitted execution to cancel.")
@broker_option
def cancel_command(execution: str, broker: str | None) -> None:
    """Cancel a submitted execution: a queued one never starts; a running one is stopped
    cleanly (its state is saved; `hankweave submit -e DIR` resumes it later)."""
    from hankweave_executor_celery.ledger import FINISHED, now

    settings = _settings(broker)
    ledger = _ledger(settings)
    directory = str(Path(execution).resolve())
    found = ledger.get(directory)
    if found is None:
        raise CLIError(f"{directory} was never submitted (see `hankweave status`)", EXIT_USAGE)
    app = _app(settings)
    gone = found.status == "running" and _worker_gone(app, found)
    outcome, refused = "", False

    def cancel(current: Submission) -> dict[str, object] | None:
        nonlocal outcome, refused
        refused = current.status in FINISHED
        if refused:
            outcome = f" is not queued or running: its last run ended {current.status}"
            return None
        if current.status == "running" and not (gone and current.started_at == found.started_at):
            outcome = " (stopping its run)"
            return {"cancel_requested": True}  # the run records how it ended
        outcome = (" (its worker is gone: its redelivery is dropped; `hankweave submit -e`"
                   " resumes it)" if current.status == "running" else "")
        return {"cancel_requested": True, "status": "cancelled", "finished_at": now()}

    # Decided in one atomic step with the task's start, so a task that starts meanwhile
    # either sees the cancel and does not run, or is running and gets stopped.
    updated = ledger.modify(directory, cancel)
    if updated is None or refused:
        raise CLIError(f"{directory}{outcome or ' is no longer submitted'}", EXIT_USAGE)
    # A queued task is dropped by the worker that receives it (it reads the ledger too: a
    # revoke sent while no worker runs is lost); a running one gets SIGTERM, which the
    # runtime turns into a clean stop.
    app.control.revoke(updated.task_id, terminate=updated.status == "running",
                       signal="SIGTERM")
    click.echo(f"Cancelled {directory}{outcome}")


def _worker_gone(app: Celery, item: Submission) -> bool:
    """Whether the worker the ledger has running ``item`` is gone: no live runtime holds the
    execution and the worker does not answer a ping (a task that has just started, before
    its runtime took the lock, is on a worker that answers)."""
    from hankweave.api import ExecutionLayout, LockCorruptError, live_runtime_lock

    try:
        if live_runtime_lock(ExecutionLayout(Path(item.execution_dir)).hankweave_dir):
            return False
    except LockCorruptError:
        return False
    if not item.worker:
        return True
    return not app.control.ping(destination=[item.worker], timeout=PING_S)


def all_commands() -> list[click.Command]:
    return [worker_command, submit_command, status_command, cancel_command]
