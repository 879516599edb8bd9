"""``hankweave dashboard`` is registered on every ``hankweave`` start: that must not import the
web server, the framework or the dashboard's own app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("starlette", "uvicorn", "httpx", "hankweave_dashboard.app",
         "hankweave_dashboard.pages", "hankweave_dashboard.live")


def test_hankweave_help_lists_the_command_without_importing_the_server() -> None:
    probe = ("import sys\nfrom click.testing import CliRunner\nfrom hankweave.cli import cli\n"
             "from hankweave.cli.plugins_cmd import install_plugin_commands\n"
             "install_plugin_commands(cli)\n"
             "out = CliRunner().invoke(cli, ['--help']).output\n"
             f"print(__import__('json').dumps([out, [m for m in {HEAVY!r} if m in sys.modules]]))")
    env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "dashboard"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    output, imported = json.loads(done.stdout)

    assert "dashboard" in output
    assert imported == []


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "dashboard"}
        done = subprocess.run([sys.executable, "-m", "hankweave", "dashboard", "--home",
                               str(tmp_path), "--port", str(port)], capture_output=True,
                              text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert f"Cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_a_missing_home_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "dashboard"}
    done = subprocess.run([sys.executable, "-m", "hankweave", "dashboard", "--home",
                           str(tmp_path / "nope")], capture_output=True, text=True, env=env,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "no such directory" in done.stderr
    assert "Traceback" not in done.stderr
