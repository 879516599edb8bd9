"""The commands are registered on every ``hankweave`` start: that must not import Celery,
Redis or the plugin's own models."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("celery", "kombu", "redis", "hankweave_executor_celery.ledger",
         "hankweave_executor_celery.settings", "hankweave_executor_celery.app")


def test_hankweave_help_lists_the_commands_without_importing_celery() -> None:
    probe = ("import sys\nfrom click.testing import CliRunner\nfrom hankweave.cli import cli\n"
             "from hankweave.cli.plugins_cmd import install_plugin_commands\n"
             "install_plugin_commands(cli)\n"
             "out = CliRunner().invoke(cli, ['--help']).output\n"
             f"print(__import__('json').dumps([out, [m for m in {HEAVY!r} if m in sys.modules]]))")
    env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "executor-celery"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    output, imported = json.loads(done.stdout)

    assert all(name in output for name in ("worker", "submit", "status", "cancel"))
    assert imported == []
