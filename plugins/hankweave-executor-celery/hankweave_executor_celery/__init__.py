"""hankweave on Celery: many executions on many workers, over a Redis broker.

* :mod:`.settings`: where the broker is and how long a task may stay unacknowledged;
* :mod:`.ledger`: what was submitted, where it runs and how it ended, kept in Redis;
* :mod:`.app` and :mod:`.tasks`: the Celery app and the one task, which runs or resumes an
  execution with the normal runtime;
* :mod:`.commands`: ``hankweave worker``, ``submit``, ``status`` and ``cancel``.

Nothing here imports Celery at plugin load: the commands import it when they run.
"""
