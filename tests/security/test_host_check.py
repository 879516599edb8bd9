"""A web page must not read a run through DNS rebinding: the WebSocket server's HTTP endpoint
(``GET /api/execution``) and its WebSocket upgrade answer only to the names the server is
reached by, not to a page's own domain resolved to 127.0.0.1 (issue 34 item 7).

A real ``hankweave run --port`` with a slow fake agent; requests on 127.0.0.1 carrying a
foreign ``Host`` header, as a browser sends them after rebinding."""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security.support import Project, codon

FOREIGN = ["attacker.example", "attacker.example:{port}", "localhost.attacker.example:{port}",
           "127.0.0.1.nip.io:{port}", ""]
OWN = ["127.0.0.1:{port}", "localhost:{port}", "127.0.0.1", "LOCALHOST:{port}"]


def _lock_port(lock: Path) -> int | None:
    """The run's server port from its lock: None until it serves (``"port": null``)."""
    try:
        port = json.loads(lock.read_text()).get("port")
    except (OSError, ValueError):
        return None  # not written yet, or written as we read it
    return port if isinstance(port, int) else None


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a run's WebSocket server, its one codon busy for about a minute."""
    project = Project(tmp_path_factory.mktemp("host"))
    project.write_hank([codon("slow")])
    project.write_script({"slow": {"messages": 200, "delayMs": 300}})
    # `--port 0`: the OS's choice, read from the lock (a port probed free here could be taken
    # before the run binds it: CI runs another tox env beside this one).
    process = subprocess.Popen(
        [sys.executable, "-m", "hankweave", "run", str(project.hank_dir), str(project.data),
         "-e", str(project.exec_dir), "--headless", "--port", "0"],
        cwd=project.root, env=project.env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lock = project.exec_dir / ".hankweave" / "runtime.lock"
    try:
        deadline = time.monotonic() + 60
        port = _lock_port(lock)
        while port is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the run's server never started (rc {process.poll()})")
            time.sleep(0.1)
            port = _lock_port(lock)
        while get(port, "/api/execution", f"127.0.0.1:{port}")[0] != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the run's server never answered (rc {process.poll()})")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


def get(port: int, path: str, host: str, headers: dict[str, str] | None = None
        ) -> tuple[int, bytes]:
    """A raw request whose ``Host`` header is exactly ``host`` (the client adds none)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        if host:
            connection.putheader("Host", host)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    except ConnectionError:
        return 0, b""
    finally:
        connection.close()


def upgrade_headers() -> dict[str, str]:
    return {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode()}


@pytest.mark.parametrize("host", FOREIGN)
def test_a_foreign_host_cannot_read_the_execution_document(running: int, host: str) -> None:
    status, body = get(running, "/api/execution", host.format(port=running))
    assert status in (403, 421), body
    error: dict[str, Any] = json.loads(body)
    assert "host" in error["message"].lower()
    assert b"documentVersion" not in body  # nothing of the document


@pytest.mark.parametrize("host", FOREIGN[:2])
def test_a_foreign_host_cannot_open_the_websocket(running: int, host: str) -> None:
    status, _ = get(running, "/", host.format(port=running), upgrade_headers())
    assert status in (403, 421)


@pytest.mark.parametrize("host", OWN)
def test_the_servers_own_names_read_the_document(running: int, host: str) -> None:
    status, body = get(running, "/api/execution", host.format(port=running))
    assert status == 200, body
    assert "execution" in json.loads(body)


def test_the_servers_own_name_opens_the_websocket(running: int) -> None:
    status, _ = get(running, "/", f"127.0.0.1:{running}", upgrade_headers())
    assert status == 101


def test_the_kernel_and_the_dashboard_share_one_host_rule() -> None:
    from hankweave.api import host_allowed, local_host_names

    assert {"127.0.0.1", "localhost", "::1"} <= set(local_host_names("127.0.0.1"))
    assert host_allowed("[::1]:8765", local_host_names("127.0.0.1"))
    assert not host_allowed("evil.example:8765", local_host_names("127.0.0.1"))
    assert host_allowed("box.lan:80", local_host_names("box.lan"))
