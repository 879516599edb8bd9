"""The ledger: every submitted execution, where it runs and how its last run ended, in Redis.

One hash, ``hankweave:executions``, maps an execution directory to its :class:`Submission`
(JSON).  ``submit`` adds it, the task updates it as it starts, defers, finishes or skips, and
``status`` and ``cancel`` read it.  A second hash, ``hankweave:workers``, holds each live
worker's :class:`WorkerBeat`, so workers notice one another's death (:mod:`.recovery`).  The execution directory itself (on the shared filesystem)
stays the record of the run: costs, codons and statuses are read from its state, never copied
here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from hankweave.api import utc_now_iso

log = logging.getLogger(__name__)

KEY = "hankweave:executions"
WORKERS_KEY = "hankweave:workers"

TaskStatus = Literal["queued", "running", "deferred", "interrupted", "completed", "failed",
                     "stopped", "cancelled"]
"""Where the execution's task is: queued (sent, not started), running (a worker runs it),
deferred (another runtime held it; retried later), or how its last run ended: interrupted
(waiting for a person, exit 3), completed, failed, stopped (a signal), cancelled."""

FINISHED: frozenset[str] = frozenset({"interrupted", "completed", "failed", "stopped",
                                      "cancelled"})


class BrokerError(Exception):
    """The broker (Redis) cannot be reached; the message says where and why."""


class Submission(BaseModel):
    """One submitted execution."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    execution_dir: str
    hank: str | None = None
    data: str | None = None
    queue: str
    priority: int | None = None
    task_id: str
    status: TaskStatus = "queued"
    submitted_at: str
    worker: str | None = None
    """The worker that runs it (or ran it last), ``name@host``."""
    pid: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    deliveries: int = 0
    """How many times a worker started the task (a redelivery after a crash counts again)."""
    deferrals: int = 0
    """How many deliveries found the execution held by a live runtime and were deferred."""
    message: str | None = None
    cancel_requested: bool = False
    requeues: int = 0
    """How many times a worker requeued it because the worker running it went silent or was
    stopped (:mod:`.recovery`)."""
    requeued_at: str | None = None
    requeued_by: str | None = None
    """The worker that requeued it last (it sends the new task right after)."""
    requeue_reason: str | None = None
    """Why it was requeued last (``message`` says it until the new task starts)."""


class WorkerBeat(BaseModel):
    """A worker's heartbeat: who it is and when it last said it was alive."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    name: str
    """Celery's node name, ``name@host``: what a submission's ``worker`` holds."""
    host: str
    pid: int
    started_at: str
    heartbeat_at: str
    queues: list[str] = []
    concurrency: int = 1


class Ledger:
    """The ``hankweave:executions`` hash of a Redis server."""

    def __init__(self, broker_url: str) -> None:
        import redis

        self.url = broker_url
        self._redis = redis.Redis.from_url(broker_url, socket_connect_timeout=3,
                                           socket_timeout=10)

    def check(self) -> None:
        """Raise :class:`BrokerError` unless the broker answers."""
        self._call(self._redis.ping)

    def add(self, submission: Submission) -> None:
        self._call(self._redis.hset, KEY, submission.execution_dir, _dump(submission))

    def remove(self, execution_dir: str) -> None:
        self._call(self._redis.hdel, KEY, execution_dir)

    def get(self, execution_dir: str) -> Submission | None:
        raw = self._call(self._redis.hget, KEY, execution_dir)
        return Submission.model_validate_json(raw) if raw else None

    def all(self) -> list[Submission]:
        raw = self._call(self._redis.hgetall, KEY) or {}
        items = [Submission.model_validate_json(value) for value in raw.values()]
        return sorted(items, key=lambda item: item.submitted_at)

    def beat(self, worker: WorkerBeat) -> None:
        self._call(self._redis.hset, WORKERS_KEY, worker.name,
                   json.dumps(worker.model_dump(mode="json", by_alias=True)))

    def forget_worker(self, name: str) -> None:
        self._call(self._redis.hdel, WORKERS_KEY, name)

    def workers(self) -> list[WorkerBeat]:
        raw = self._call(self._redis.hgetall, WORKERS_KEY) or {}
        found = [WorkerBeat.model_validate_json(value) for value in raw.values()]
        return sorted(found, key=lambda beat: beat.name)

    def update_until_applied(self, execution_dir: str, *, patience_s: float = 3600.0,
                             **changes: Any) -> Submission | None:
        """:meth:`update`, retried while the broker is unreachable, for what a run has already
        done: how it ended must reach the ledger when Redis comes back, with the times it
        happened at (the caller puts them in ``changes``).  Gives up after ``patience_s``
        (the execution directory keeps the truth; ``status`` reads it)."""
        import time

        deadline = time.monotonic() + patience_s
        pause = 0.5
        while True:
            try:
                return self.update(execution_dir, **changes)
            except BrokerError as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("%s; retrying in %.0f s", exc, pause)
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    def update(self, execution_dir: str, **changes: Any) -> Submission | None:
        """Change fields of a submission (atomically); None if it was never submitted."""
        return self.modify(execution_dir, lambda _: changes)

    def modify(self, execution_dir: str,
               change: Callable[[Submission], dict[str, Any] | None]) -> Submission | None:
        """Apply the changes ``change`` decides from the current submission, atomically (a
        WATCHed read-modify-write, read again if another writer came first); ``change``
        returns None to leave it as it is.  The submission as it is now, or None if it was
        never submitted."""
        import redis

        try:
            with self._redis.pipeline() as pipe:
                while True:
                    try:
                        pipe.watch(KEY)
                        raw = pipe.hget(KEY, execution_dir)
                        if not raw:
                            return None
                        current = Submission.model_validate_json(raw)
                        changes = change(current)
                        if changes is None:
                            pipe.unwatch()
                            return current
                        updated = current.model_copy(update=changes)
                        pipe.multi()
                        pipe.hset(KEY, execution_dir, _dump(updated))
                        pipe.execute()
                        return updated
                    except redis.WatchError:
                        continue
        except redis.RedisError as exc:
            raise BrokerError(self._unreachable(exc)) from None

    def _call(self, method: Any, *args: Any) -> Any:
        import redis

        try:
            return method(*args)
        except redis.RedisError as exc:
            raise BrokerError(self._unreachable(exc)) from None

    def _unreachable(self, exc: Exception) -> str:
        from hankweave.api import mask_url_credentials

        reason = str(exc).rstrip(".")  # redis-py's messages end with one already
        # The URL's password is a credential: masked here and in redis-py's own text.
        return mask_url_credentials(
            f"Cannot reach the Celery broker at {self.url}: {reason}. Start Redis there, or"
            " point HANKWEAVE_CELERY_BROKER (or --broker) at yours.")


def now() -> str:
    return utc_now_iso()


def _dump(submission: Submission) -> str:
    return json.dumps(submission.model_dump(mode="json", by_alias=True))
