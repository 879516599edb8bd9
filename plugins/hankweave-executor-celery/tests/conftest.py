"""A real ``redis-server`` on a free 127.0.0.1 port for the whole session, and a project per
test whose worker processes are all gone at its end.

Without ``redis-server`` on PATH every test that needs it is skipped, saying why, unless
``HANKWEAVE_CELERY_REQUIRED=1`` (as in tox and CI): then it fails, so a suite that ran nothing
cannot pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery_helpers import Project, free_port, redis_serving

REQUIRED_ENV = "HANKWEAVE_CELERY_REQUIRED"
START_S = 60.0
"""How long a redis-server may take to answer (a loaded machine: CI runs two tox envs at once)."""


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a fresh server (no persistence), stopped at the end."""
    if shutil.which("redis-server") is None:
        message = ("redis-server is not on PATH: the Celery executor's tests need a real one"
                   " (apt-get install redis-server; .ci/run installs it)")
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(f"{message}, and {REQUIRED_ENV}=1")
        pytest.skip(message)
    folder = tmp_path_factory.mktemp("redis")
    log = folder / "redis.log"
    for _ in range(5):  # a port taken between the probe and the server's bind: another one
        port = free_port()
        server = subprocess.Popen(
            ["redis-server", "--save", "", "--appendonly", "no", "--bind", "127.0.0.1",
             "--port", str(port), "--dir", str(folder), "--logfile", str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_S
        while server.poll() is None and not redis_serving(port, server):
            if time.monotonic() > deadline:
                server.kill()
                server.wait()
                pytest.fail(f"redis-server did not answer on port {port} within {START_S:g}s:\n"
                            + (log.read_text() if log.exists() else ""))
            time.sleep(0.05)
        if server.poll() is None:
            break
    else:
        pytest.fail(f"redis-server could not serve on a free port (rc {server.poll()}):\n"
                    + (log.read_text() if log.exists() else ""))
    url = f"redis://127.0.0.1:{port}/0"
    try:
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def project(redis_url: str, tmp_path: Path) -> Iterator[Project]:
    """A project on an empty broker; its workers are stopped (and checked gone) at the end."""
    import redis

    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    made = Project(tmp_path, redis_url)
    try:
        yield made
    finally:
        left = made.stop_workers()
        assert not left, f"worker processes were left behind (now killed): {left}"
