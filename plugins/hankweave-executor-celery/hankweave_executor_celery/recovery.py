"""Workers that notice one another's death, and requeue its executions at once.

Celery on Redis gives a dead worker's task back only after the visibility timeout (two hours by
default), and a shorter timeout delivers long healthy runs again.  So every worker writes a
heartbeat (:class:`~.ledger.WorkerBeat`) to the ledger every ``workerHeartbeatS`` and, on the
same tick, sweeps the executions the ledger has running:

* one whose worker has been silent for ``workerSilenceS`` *and* whose runtime lock is stale by
  the runtime's own rule (a dead pid on this host, a heartbeat older than 120 s from another)
  is **requeued**: the ledger gets a new task id in one atomic step that only one worker can
  win, and the winner sends that task.  The broker's later redelivery of the old task finds
  another id in the ledger and is dropped (:mod:`.tasks`);
* one requeued by a worker that died before it could send the task is sent again.

The lock stays the safety: a delivery that finds a live runtime defers, whatever the ledger
says, so a worker that only looked dead never has its run duplicated.

A worker stopped with SIGTERM or Ctrl-C (a warm shutdown) stops its runs the way ``hankweave
cancel`` does (:func:`on_shutting_down`); each task then requeues its execution rather than
recording it stopped, and another worker resumes it at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.api import ExecutionLayout, LockCorruptError, live_runtime_lock, parse_iso
from hankweave_executor_celery.ledger import (
    BrokerError,
    Ledger,
    Submission,
    WorkerBeat,
    now,
)
from hankweave_executor_celery.settings import TASK_NAME, CelerySettings

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

Send = Callable[[Submission], None]
"""Queues the task a submission names (its ``task_id``, ``queue`` and ``priority``)."""


def sender(app: Celery) -> Send:
    def send(item: Submission) -> None:
        app.send_task(TASK_NAME, args=[item.execution_dir], queue=item.queue,
                      priority=item.priority, task_id=item.task_id)
    return send


def new_task_id() -> str:
    return f"hankweave-{uuid.uuid4()}"


# ----- who is silent -----


def age_s(timestamp: str | None, at: float | None = None) -> float:
    """Seconds since ``timestamp`` (infinite when there is none)."""
    if not timestamp:
        return float("inf")
    return (time.time() if at is None else at) - parse_iso(timestamp).timestamp()


def silent(worker: str | None, beats: Mapping[str, WorkerBeat], since: str | None,
           silence_s: float) -> bool:
    """Whether ``worker`` has said nothing for ``silence_s``: its heartbeat is that old, or it
    has none (gone after a clean stop, or never seen) and ``since`` (when it took the task) is
    that old."""
    beat = beats.get(worker or "")
    return age_s(beat.heartbeat_at if beat is not None else since) > silence_s


def runtime_gone(execution_dir: str) -> bool:
    """The runtime lock is stale by the runtime's rule (an unreadable lock is not)."""
    try:
        return live_runtime_lock(ExecutionLayout(Path(execution_dir)).hankweave_dir) is None
    except LockCorruptError:
        return False


def orphaned(item: Submission, beats: Mapping[str, WorkerBeat], silence_s: float) -> bool:
    """A running execution whose worker went silent and whose runtime is gone."""
    return (item.status == "running" and age_s(item.started_at) > silence_s
            and silent(item.worker, beats, item.started_at, silence_s)
            and runtime_gone(item.execution_dir))


def unsent(item: Submission, beats: Mapping[str, WorkerBeat], silence_s: float) -> bool:
    """A requeued execution whose requeuer went silent before the new task started: it may
    have died between the ledger's change and the send."""
    return (item.status == "queued" and item.requeued_by is not None
            and age_s(item.requeued_at) > silence_s
            and silent(item.requeued_by, beats, item.requeued_at, silence_s))


# ----- requeueing -----


def requeue(ledger: Ledger, item: Submission, reason: str, by: str, send: Send) -> bool:
    """Give ``item`` a new task and send it, unless the ledger changed since ``item`` was read
    (another worker requeued it first, its task restarted, it finished).  A cancel asked of it
    is carried out instead.  Whether this call requeued it."""
    task_id = new_task_id()

    def change(current: Submission) -> dict[str, Any] | None:
        if current.status != item.status or current.task_id != item.task_id:
            return None  # someone else acted first
        if current.cancel_requested:
            return {"status": "cancelled", "finished_at": now(),
                    "message": f"{reason}; cancelled, as asked"}
        return {"status": "queued", "task_id": task_id, "requeues": current.requeues + 1,
                "requeued_at": now(), "requeued_by": by, "requeue_reason": reason,
                "message": reason}

    updated = ledger.modify(item.execution_dir, change)
    if updated is None or updated.task_id != task_id:
        return False
    send(updated)
    log.info("requeued %s as %s: %s", item.execution_dir, task_id, reason)
    return True


def resend(ledger: Ledger, item: Submission, by: str, send: Send) -> bool:
    """Send again the task of a requeue whose requeuer died (the same task id: a copy that
    arrives twice runs once, as any duplicate delivery)."""
    def change(current: Submission) -> dict[str, Any] | None:
        if current.status != "queued" or current.task_id != item.task_id:
            return None
        return {"requeued_by": by, "requeued_at": now()}

    updated = ledger.modify(item.execution_dir, change)
    if updated is None or updated.requeued_by != by or updated.task_id != item.task_id:
        return False
    send(updated)
    log.info("sent %s again as %s: its requeuer %s went silent", item.execution_dir,
             item.task_id, item.requeued_by)
    return True


FORGET_AFTER_S = 3600.0
"""A worker silent this long leaves the list of workers (``status`` flags it until then)."""


def sweep(ledger: Ledger, settings: CelerySettings, me: str, send: Send) -> list[str]:
    """Requeue every execution whose worker is gone; the directories requeued."""
    beats = {beat.name: beat for beat in ledger.workers()}
    for beat in list(beats.values()):
        if age_s(beat.heartbeat_at) > max(FORGET_AFTER_S, settings.worker_silence_s):
            ledger.forget_worker(beat.name)
    done = []
    for item in ledger.all():
        if orphaned(item, beats, settings.worker_silence_s):
            heard = beats.get(item.worker or "")
            last = heard.heartbeat_at if heard is not None else item.started_at
            reason = (f"requeued by {me}: its worker {item.worker} has been silent since"
                      f" {last}")
            if requeue(ledger, item, reason, me, send):
                done.append(item.execution_dir)
        elif unsent(item, beats, settings.worker_silence_s) and resend(ledger, item, me, send):
            done.append(item.execution_dir)
    return done


# ----- the heartbeat -----


class Heartbeat:
    """The worker's heartbeat and sweep, on a thread of its main process."""

    def __init__(self, app: Celery, settings: CelerySettings, name: str, *,
                 queues: list[str], concurrency: int) -> None:
        self.ledger = Ledger(settings.broker)
        self.settings = settings
        self.send = sender(app)
        self.beat = WorkerBeat(name=name, host=socket.gethostname(), pid=os.getpid(),
                               started_at=now(), heartbeat_at=now(), queues=queues,
                               concurrency=concurrency)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hankweave-heartbeat",
                                        daemon=True)

    def start(self) -> None:
        self.tick()
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and leave the ledger's list of workers (a clean stop is not a death)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.settings.worker_heartbeat_s + 5)
        with contextlib.suppress(BrokerError):
            self.ledger.forget_worker(self.beat.name)

    def tick(self) -> None:
        """Say this worker is alive, then requeue what dead workers left (a broker that is
        down is tried again on the next tick)."""
        try:
            self.beat = self.beat.model_copy(update={"heartbeat_at": now()})
            self.ledger.beat(self.beat)
            sweep(self.ledger, self.settings, self.beat.name, self.send)
        except BrokerError as exc:
            log.warning("heartbeat: %s", exc)
        except Exception:  # a bug must not stop the heartbeat: logged, tried again
            log.exception("heartbeat failed")

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.worker_heartbeat_s):
            self.tick()


_running: dict[str, Heartbeat] = {}


def on_worker_ready(app: Celery, settings: CelerySettings, consumer: Any) -> None:
    """Celery's ``worker_ready``, in the worker's main process: start its heartbeat."""
    name = str(getattr(consumer, "hostname", None) or f"celery@{socket.gethostname()}")
    queues = sorted(getattr(app.amqp.queues, "consume_from", None) or app.amqp.queues)
    pool = getattr(consumer, "pool", None)
    heartbeat = Heartbeat(app, settings, name, queues=queues,
                          concurrency=int(getattr(pool, "limit", None) or 1))
    _running[name] = heartbeat
    heartbeat.start()


def on_shutting_down(settings: CelerySettings, name: str, how: str) -> None:
    """Celery's ``worker_shutting_down`` (SIGTERM or SIGINT: a warm shutdown), in the main
    process's signal handler: stop this worker's runs now, as ``hankweave cancel`` does,
    rather than let it finish them first (a run may last hours).  Each task then requeues its
    execution (:mod:`.tasks`), so another worker resumes it at once.  On a thread: the
    handler must not wait on the broker."""
    if how != "Warm":
        return

    def stop_runs() -> None:
        try:
            mine = [item for item in Ledger(settings.broker).all()
                    if item.worker == name and item.status == "running" and item.pid]
        except BrokerError as exc:  # the runs go on to their end instead: nothing is lost
            log.warning("cannot stop this worker's runs before it stops: %s", exc)
            return
        for item in mine:
            # A second SIGTERM (the whole process group had one) changes nothing.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(item.pid or 0), signal.SIGTERM)

    threading.Thread(target=stop_runs, name="hankweave-stop-runs", daemon=True).start()


def on_worker_shutdown(name: str) -> None:
    """Celery's ``worker_shutdown``: the heartbeat stops and the worker leaves the list."""
    heartbeat = _running.pop(name, None)
    if heartbeat is not None:
        heartbeat.stop()
