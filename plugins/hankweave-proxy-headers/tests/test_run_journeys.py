"""The ``headers`` middleware in real ``hankweave`` processes: the quickstart hank run on the
real Claude Code CLI (the Claude harness) against the mock provider, through the LLM proxy
(``--proxy``), with a ``hankweave.json`` in the working directory enabling the middleware; and
settings that are wrong, refused by ``hankweave run --proxy`` and ``hankweave validate``.

They need ``hankweave-harness-claude`` installed (``tox -e proxy-headers`` installs it): without
it they fail rather than skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "examples" / "quickstart"
ROUTE = "route-eu-west-7f3a"
"""A header value read from the environment: it reaches the provider and no output."""
SECRET = "sk-ant-api03-written-into-settings-by-mistake-0123"

class Journey:
    """A working directory with a ``hankweave.json`` enabling ``headers`` with ``config``."""

    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        self.root = root
        self.execution = root / "exec"
        (root / "hankweave.json").write_text(json.dumps(
            {"proxy": {"middleware": [{"name": "headers", "config": config}]}}))
        # Offline: no provider's key or address, no HANKWEAVE_* switch of the caller's; the
        # CLI's home, hankweave's home and the executions inside the test's folder.  Only the
        # Claude harness and this plugin load (strictly), and checkpoints are the kernel's
        # in-memory backend, so no checkpoint backend package is needed.
        self.env = {name: value for name, value in os.environ.items()
                    if not name.endswith(("_API_KEY", "_AUTH_TOKEN"))
                    and not name.startswith(("ANTHROPIC_", "CLAUDE_", "HANKWEAVE_", "OPENAI_",
                                             "OPENROUTER_"))
                    and "proxy" not in name.lower()}
        self.env.update({
            "HOME": str(root / "user"), "HANKWEAVE_HOME": str(root / "home"),
            "XDG_CONFIG_HOME": str(root / "user" / ".config"),
            "HANKWEAVE_LOAD_PLUGINS": "claude,headers",
            "HANKWEAVE_STRICT_PLUGINS": "1",
            "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.memory_checkpoints",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
            "PROXY_HEADERS_ROUTE": ROUTE,
        })

    def hankweave(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env=self.env, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def run(self, *extra: str) -> subprocess.CompletedProcess[bytes]:
        return self.hankweave("run", str(QUICKSTART), str(QUICKSTART / "data"),
                              "--mock-provider", str(QUICKSTART / "mock-script.json"),
                              "--headless", "-e", str(self.execution), *extra)

    def validate(self) -> subprocess.CompletedProcess[bytes]:
        return self.hankweave("validate", str(QUICKSTART), str(QUICKSTART / "data"),
                              "--offline", timeout=120)

    def file(self, *parts: str) -> bytes:
        return (self.execution / ".hankweave").joinpath(*parts).read_bytes()


def test_every_request_of_a_real_run_reaches_the_provider_with_the_headers(
        tmp_path: Path) -> None:
    journey = Journey(tmp_path, {"set": {"X-Hankweave-Team": "research",
                                         "x-gateway-route": {"env": "PROXY_HEADERS_ROUTE"}}})
    done = journey.run("--proxy")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output.decode(errors="replace")
    assert b"LLM proxy: http://127.0.0.1:" in done.stderr

    mock_log = journey.file("mock-provider", "requests.jsonl")
    proxy_log = journey.file("proxy", "requests.jsonl")
    mock_lines, proxy_lines = mock_log.splitlines(), proxy_log.splitlines()
    # The quickstart's four codons: eleven model requests, every one through the proxy.
    assert len(mock_lines) >= 4
    assert len(proxy_lines) == len(mock_lines)
    # On the wire as the provider got them: the name lower-cased, both values, every time.
    assert mock_log.count(b'"x-hankweave-team": "research"') == len(mock_lines)
    assert mock_log.count(f'"x-gateway-route": "{ROUTE}"'.encode()) == len(mock_lines)
    for line in mock_lines:
        entry = json.loads(line)
        assert entry["headers"]["x-hankweave-team"] == "research"
        assert entry["auth"] == "mock"  # the agent's own key, untouched
    # One line per request, and none records a header.
    records = [json.loads(line) for line in proxy_lines]
    assert all(record["status"] == 200 and record["upstream"] == "anthropic"
               for record in records)
    assert {record["codonId"] for record in records} == {"triage", "draft", "proofread#0",
                                                         "proofread#1"}
    assert b"research" not in proxy_log and ROUTE.encode() not in proxy_log
    # Nor does any output of the run show a value.
    server_log = journey.file("logs", "server.log")
    journal = journey.file("events", "events.jsonl")
    for text in (output, server_log, journal):
        assert ROUTE.encode() not in text


def test_a_bad_header_name_stops_a_run_before_it_starts_and_validate_says_so(
        tmp_path: Path) -> None:
    journey = Journey(tmp_path, {"set": {"X Team": "research", "Authorization": SECRET}})
    for done in (journey.run("--proxy"), journey.validate()):
        output = (done.stdout + done.stderr).decode(errors="replace")
        assert done.returncode != 0, output
        assert ('proxy.middleware[0].config.set["X Team"]: "X Team" is not a header name'
                in output)
        assert ("proxy.middleware[0].config.set.Authorization: \"Authorization\" is a"
                " credential header: credentials stay with the agent and must never be"
                " written into hankweave.json") in output
        assert "Traceback" not in output and SECRET not in output
    assert not (journey.execution / ".hankweave").exists()


def test_an_unset_variable_stops_the_run_naming_it(tmp_path: Path) -> None:
    journey = Journey(tmp_path, {"set": {"x-gateway-route": {"env": "NO_SUCH_ROUTE_VAR"}}})
    done = journey.run("--proxy")
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode != 0, output
    assert 'proxy.middleware[0]: proxy middleware "headers" could not be built' in output
    assert "NO_SUCH_ROUTE_VAR, which is not set" in output
    assert "Traceback" not in output
    assert not (journey.execution / ".hankweave").exists()
