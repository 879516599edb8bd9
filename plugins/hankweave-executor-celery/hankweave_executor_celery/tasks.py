"""The task: run (or resume) one execution with the normal runtime, in the worker's process.

Delivery is at least once; the runtime makes each delivery safe:

* **A redelivery after a crash** (a killed worker, a machine gone) runs ``hankweave run -e
  DIR``: the crashed run is recovered and completed codons never run again.
* **A delivery while another runtime holds the execution** (the first delivery still running
  after the visibility timeout, or a second submit of it) finds the live lock and is deferred:
  it is retried after ``defer_s`` and never runs the execution twice.  A lock written on another
  machine is judged by its heartbeat, not by a pid (``runtime.lock`` records the host).
* **A cancelled execution** is skipped.
* **A superseded delivery** (its id is no longer the ledger's ``taskId``: a worker requeued the
  execution as a new task after its worker went silent, :mod:`.recovery`) is dropped: the
  broker's late redelivery of a dead worker's task never runs.

The run's exit code decides the ledger status: 0 completed, 3 interrupted (the worker is free
while a person answers; ``hankweave answer --submit`` sends it again), else failed.  A run
stopped by SIGTERM or SIGINT (130/143) that nobody cancelled was stopped with its worker: it is
requeued at once, for another worker to resume.  How a run ended reaches the ledger even if
Redis is down at that moment: the write is retried until it returns, with the time the run
ended.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.api import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    ExecutionLayout,
    LaunchError,
    LaunchRequest,
    LockCorruptError,
    StopLatch,
    launch,
    live_runtime_lock,
    mask_url_credentials,
)
from hankweave_executor_celery.ledger import (
    FINISHED,
    BrokerError,
    Ledger,
    Submission,
    TaskStatus,
    now,
)
from hankweave_executor_celery.settings import TASK_NAME, CelerySettings

if TYPE_CHECKING:
    from celery import Celery, Task

log = logging.getLogger(__name__)

STOPPED_CODES = frozenset({130, 143})


def register(app: Celery, settings: CelerySettings) -> None:
    """Register :func:`run_execution` on ``app``."""
    @app.task(bind=True, name=TASK_NAME, max_retries=None, acks_late=True,
              reject_on_worker_lost=True)
    def run_execution(self: Task, execution_dir: str) -> dict[str, Any]:
        return _run(self, execution_dir, Ledger(app.conf.broker_url), settings)

    from celery.signals import task_revoked

    task_revoked.connect(_record_dropped_cancel, weak=False, dispatch_uid=TASK_NAME)


def _record_dropped_cancel(sender: Any = None, request: Any = None, terminated: bool = False,
                           **_: Any) -> None:
    """A delivery that a worker discards as revoked never runs the task, so record the cancel
    here: the redelivery of an execution whose worker died just after it started, cancelled
    while it still looked live.  A terminated run records how it ended itself."""
    if getattr(sender, "name", None) != TASK_NAME or terminated or not getattr(
            request, "args", None):
        return
    execution_dir = request.args[0]

    def cancel(current: Submission) -> dict[str, Any] | None:
        if (current.cancel_requested and current.task_id == request.id
                and current.status not in FINISHED):
            return {"status": "cancelled", "finished_at": now()}
        return None

    with contextlib.suppress(BrokerError):
        Ledger(sender.app.conf.broker_url).modify(execution_dir, cancel)


def _run(task: Task, execution_dir: str, ledger: Ledger,
         settings: CelerySettings) -> dict[str, Any]:
    # `hankweave cancel` SIGTERMs a running task: held until the runtime takes the signal
    # over (or after it let go), so the task always records how it ended.
    with StopLatch():
        return _run_held(task, execution_dir, ledger, settings)


def _run_held(task: Task, execution_dir: str, ledger: Ledger,
              settings: CelerySettings) -> dict[str, Any]:
    submission = ledger.get(execution_dir)
    if submission is not None and submission.cancel_requested:
        return _cancelled(execution_dir, ledger)
    if submission is not None and submission.task_id != task.request.id:
        log.info("dropping a delivery of %s: task %s was superseded by %s", execution_dir,
                 task.request.id, submission.task_id)
        return {"skipped": f"superseded by {submission.task_id}"}
    if submission is not None and submission.status in FINISHED:
        # A deferred copy whose first delivery has since finished the run: nothing to do
        # (a new submit, or `answer --submit`, queues the execution again).
        return {"skipped": f"already {submission.status}"}
    if _held(execution_dir):
        return _defer(task, execution_dir, ledger, settings, "held by a live runtime")
    worker = task.request.hostname or "?"

    def start(current: Submission) -> dict[str, Any] | None:
        if current.cancel_requested:  # cancelled since it was read: do not start
            return None
        return {"status": "running", "worker": worker, "pid": os.getpid(), "started_at": now(),
                "finished_at": None, "exit_code": None, "message": None,
                "task_id": task.request.id, "deliveries": current.deliveries + 1}

    started = ledger.modify(execution_dir, start)
    if started is not None and started.cancel_requested:
        return _cancelled(execution_dir, ledger)
    log.info("running %s on %s", execution_dir, worker)
    request = LaunchRequest(execution=execution_dir, headless=True, yes=True,
                            cwd=Path(execution_dir).parent, env=dict(os.environ),
                            notify=lambda text: log.info("%s", text))
    try:
        code = launch(request)
    except LaunchError as exc:
        if exc.held_by is not None:  # another runtime won the race to the lock
            return _defer(task, execution_dir, ledger, settings, str(exc))
        # `status` shows the message: a URL's password in it stays hidden.
        reason = mask_url_credentials(str(exc))
        ledger.update_until_applied(execution_dir, status="failed", exit_code=exc.exit_code,
                                    message=reason, finished_at=now())
        return {"exitCode": exc.exit_code, "message": reason}
    except Exception as exc:  # a bad hank or settings (ConfigError), a bug: recorded, acked
        log.exception("running %s failed", execution_dir)
        reason = mask_url_credentials(f"{type(exc).__name__}: {exc}")
        ledger.update_until_applied(execution_dir, status="failed", message=reason,
                                    finished_at=now())
        return {"exitCode": None, "message": reason}
    ended = now()  # when the run ended, even if the broker only hears of it later
    if code in STOPPED_CODES and _requeue_stopped(task, execution_dir, ledger, worker):
        return {"exitCode": code, "status": "queued"}
    status = _status_of(code, ledger, execution_dir)
    ledger.update_until_applied(execution_dir, status=status, exit_code=code, finished_at=ended)
    return {"exitCode": code, "status": status}


def _requeue_stopped(task: Task, execution_dir: str, ledger: Ledger, worker: str) -> bool:
    """A run stopped by a signal nobody sent through ``hankweave cancel``: its worker is
    stopping (SIGTERM, Ctrl-C).  Requeue it at once for another worker; whether it was."""
    from hankweave_executor_celery.recovery import requeue, sender

    try:
        current = ledger.get(execution_dir)
        if current is None or current.cancel_requested or current.task_id != task.request.id:
            return False
        return requeue(ledger, current, f"requeued: its worker {worker} was stopped", worker,
                       sender(task.app))
    except BrokerError as exc:  # recorded stopped once the broker is back; `submit -e` resumes
        log.warning("cannot requeue %s: %s", execution_dir, exc)
        return False


def _cancelled(execution_dir: str, ledger: Ledger) -> dict[str, Any]:
    ledger.update_until_applied(execution_dir, status="cancelled", finished_at=now())
    return {"skipped": "cancelled"}


def _held(execution_dir: str) -> bool:
    try:
        return live_runtime_lock(ExecutionLayout(Path(execution_dir)).hankweave_dir) is not None
    except LockCorruptError:
        return True  # nobody can tell: wait rather than risk a second runtime


def _defer(task: Task, execution_dir: str, ledger: Ledger, settings: CelerySettings,
           why: str) -> Any:
    log.info("deferring %s: %s", execution_dir, why)
    current = ledger.get(execution_dir)
    if current is not None:
        # A copy of a running execution leaves its status alone: the run goes on.
        changes = {} if current.status == "running" else {"status": "deferred", "message": why}
        ledger.update(execution_dir, deferrals=current.deferrals + 1, **changes)
    raise task.retry(countdown=settings.defer_s)


def _status_of(code: int, ledger: Ledger, execution_dir: str) -> TaskStatus:
    if code == EXIT_OK:
        return "completed"
    if code == EXIT_INTERRUPTED:
        return "interrupted"
    if code in STOPPED_CODES:
        current = ledger.get(execution_dir)
        return "cancelled" if current is not None and current.cancel_requested else "stopped"
    return "failed"
