"""Where the broker is, and how long a delivered task may stay unacknowledged.

First match wins, for each setting: the command line (``--broker``), the environment
(``HANKWEAVE_CELERY_BROKER``, ``HANKWEAVE_CELERY_VISIBILITY_TIMEOUT``, ...), the
``executors.celery`` section of ``./hankweave.json``, the defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from hankweave.api import RUNTIME_CONFIG_FILE, ConfigError, load_runtime_config

TASK_NAME = "hankweave.run_execution"
"""The Celery task a submitter sends and a worker registers; both read it from here."""

BROKER_ENV = "HANKWEAVE_CELERY_BROKER"
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_QUEUE = "hankweave"

_ENV = {
    "broker": BROKER_ENV,
    "visibility_timeout_s": "HANKWEAVE_CELERY_VISIBILITY_TIMEOUT",
    "restore_interval_s": "HANKWEAVE_CELERY_RESTORE_INTERVAL",
    "defer_s": "HANKWEAVE_CELERY_DEFER",
    "worker_heartbeat_s": "HANKWEAVE_CELERY_WORKER_HEARTBEAT",
    "worker_silence_s": "HANKWEAVE_CELERY_WORKER_SILENCE",
}


class CelerySettings(BaseModel):
    """The ``executors.celery`` section of ``hankweave.json`` (camelCase there)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel,
                              populate_by_name=True)

    broker: str = DEFAULT_BROKER
    """The Redis broker URL (``redis://host:port/db``, or ``rediss://`` for TLS)."""
    queue: str = DEFAULT_QUEUE
    """The queue ``submit`` sends to and ``worker`` consumes, unless told otherwise."""
    visibility_timeout_s: float = Field(7200.0, gt=0)
    """How long a delivered task may run unacknowledged before the broker delivers it again.

    Set it above the longest *run* of an execution (from one start to its end, a pause for a
    person or a failure), not the longest codon: a task acknowledges only when its run ends.
    A run that outlives it is not run twice (the second delivery finds the first's live lock
    and is deferred), but each redelivery costs a retry."""
    restore_interval_s: float = Field(10.0, gt=0)
    """How often a worker looks for tasks whose visibility timeout passed (kombu's sweep; a
    crashed worker's task is back within the timeout plus this)."""
    defer_s: float = Field(30.0, gt=0)
    """How long a task that finds its execution held by a live runtime waits before it tries
    again."""
    worker_heartbeat_s: float = Field(10.0, gt=0)
    """How often each worker writes its heartbeat to the ledger and looks for executions whose
    worker went silent."""
    worker_silence_s: float = Field(60.0, gt=0)
    """How long a worker may go without a heartbeat before the others call it gone: its
    running executions whose runtime lock is stale too are requeued at once, without waiting
    for the visibility timeout."""


    @model_validator(mode="after")
    def _silence_outlasts_heartbeats(self) -> CelerySettings:
        if self.worker_silence_s < 2 * self.worker_heartbeat_s:
            raise ValueError("workerSilenceS must be at least twice workerHeartbeatS, or one"
                             " late heartbeat makes a live worker look gone")
        return self


def load_settings(*, broker: str | None = None, cwd: Path | None = None,
                  env: Mapping[str, str] | None = None) -> CelerySettings:
    """The settings, from the command line, the environment, ``hankweave.json``, defaults.

    Raises:
        ConfigError: ``hankweave.json``'s section or an environment value is invalid.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = dict(_file_section(cwd or Path.cwd()))
    for field, variable in _ENV.items():
        if env.get(variable):
            values[to_camel(field)] = env[variable]
    if broker:
        values["broker"] = broker
    try:
        return CelerySettings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(_problem(error) for error in exc.errors())
        raise ConfigError(f"Invalid Celery executor settings: {problems}") from None


def _problem(error: Any) -> str:
    """One problem as ``key: what is wrong``; a rule across keys names them itself."""
    where = ".".join(str(part) for part in error["loc"])
    what = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    return f"{where}: {what}" if where else what


def _file_section(cwd: Path) -> Mapping[str, Any]:
    path = cwd / RUNTIME_CONFIG_FILE
    if not path.is_file():
        return {}
    section = (load_runtime_config(path).executors or {}).get("celery") or {}
    return section
