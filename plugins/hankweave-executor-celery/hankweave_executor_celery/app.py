"""The Celery app: at-least-once delivery, which the runtime's own guarantees make safe.

* ``task_acks_late`` with ``task_reject_on_worker_lost``: a task is acknowledged when its run
  ends, so a worker that dies mid-run (SIGKILL, a lost machine) has its task delivered again.
  The redelivered task resumes the execution: completed codons never run again.
* ``worker_prefetch_multiplier = 1``: a worker holds one task per process, so a long run does
  not sit on tasks that other workers could start.
* ``visibility_timeout``: see :attr:`~.settings.CelerySettings.visibility_timeout_s`.  The
  restore sweep runs every ``restore_interval_s`` (kombu's default is a sweep every ~100 s).
* No result backend: how a run ended is in the ledger and in the execution directory.
* Worker liveness does not wait for the visibility timeout: each worker heartbeats in the
  ledger and requeues the executions of a worker gone silent (:mod:`.recovery`); a warm
  shutdown stops and requeues the worker's runs.

``celery -A hankweave_executor_celery.app worker`` works too; ``hankweave worker`` is the same
with these defaults and a concurrency option.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hankweave_executor_celery.settings import CelerySettings, load_settings

if TYPE_CHECKING:
    from celery import Celery


def make_app(settings: CelerySettings) -> Celery:
    """A Celery app on ``settings.broker`` with the task registered."""
    from celery import Celery

    app = Celery("hankweave", broker=settings.broker, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=settings.queue,
        task_queue_max_priority=9,
        task_default_priority=5,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": settings.restore_interval_s,
            "unacked_restore_throttle": 1,
            "queue_order_strategy": "priority",
        },
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    from hankweave_executor_celery.tasks import register

    register(app, settings)
    _warm_pool_processes()
    _watch_workers(app, settings)
    return app


def _watch_workers(app: Celery, settings: CelerySettings) -> None:
    """The worker's heartbeat from when it is ready, its runs stopped and requeued on a warm
    shutdown, and its heartbeat gone when it stops (:mod:`.recovery`).  These signals fire in
    the worker's main process only; an app made to submit or read status never sees them."""
    from celery.signals import worker_ready, worker_shutdown, worker_shutting_down

    from hankweave_executor_celery import recovery

    def ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", app) is app:
            recovery.on_worker_ready(app, settings, sender)

    def shutting_down(sender: Any = None, how: str = "", **_: Any) -> None:
        recovery.on_shutting_down(settings, str(sender), how)

    def shutdown(sender: Any = None, **_: Any) -> None:
        recovery.on_worker_shutdown(str(getattr(sender, "hostname", sender)))

    # One connection per app: an app made twice in a process (tests) is not watched twice.
    uid = f"hankweave-recovery-{id(app)}"
    worker_ready.connect(ready, weak=False, dispatch_uid=f"{uid}-ready")
    worker_shutting_down.connect(shutting_down, weak=False, dispatch_uid=f"{uid}-down")
    worker_shutdown.connect(shutdown, weak=False, dispatch_uid=f"{uid}-shutdown")


def _warm_pool_processes() -> None:
    """Import the runtime and load the plugins in each pool process as it starts, rather than
    in its first task: a task then starts its codon within tens of milliseconds."""
    from celery.signals import worker_process_init

    @worker_process_init.connect(weak=False)
    def warm(**_: object) -> None:
        from hankweave.api import warm_up

        warm_up()


def __getattr__(name: str) -> object:
    # ``celery -A hankweave_executor_celery.app`` reads ``app``: built on first access, from
    # the environment and ./hankweave.json.
    if name == "app":
        built = make_app(load_settings())
        globals()["app"] = built
        return built
    raise AttributeError(name)
