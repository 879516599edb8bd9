"""A real ``redis-server`` on a free 127.0.0.1 port for the whole session (skipped without
one, unless ``HANKWEAVE_CELERY_REQUIRED`` is set, as in tox), and a project per test whose
worker processes are stopped at its end."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery_helpers import Project, free_port

REQUIRED_ENV = "HANKWEAVE_CELERY_REQUIRED"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed (apt-get install redis-server; .ci/run does)"
        if os.environ.get(REQUIRED_ENV):
            pytest.fail(message)
        pytest.skip(message)
    port = free_port()
    log = tmp_path_factory.mktemp("redis") / "redis.log"
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--logfile", str(log)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise
            time.sleep(0.05)
    yield url
    client.close()
    server.terminate()
    server.wait(10)


@pytest.fixture
def project(redis_url: str, tmp_path: Path) -> Iterator[Project]:
    import redis

    redis.Redis.from_url(redis_url).flushall()
    made = Project(tmp_path, redis_url)
    try:
        yield made
    finally:
        made.stop_workers()
