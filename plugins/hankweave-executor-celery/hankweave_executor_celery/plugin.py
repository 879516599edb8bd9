"""The plugin: adds ``worker``, ``submit``, ``status`` and ``cancel`` to ``hankweave``."""

from __future__ import annotations

from typing import Any

from hankweave.api import hookimpl


@hookimpl
def register_commands(cli: Any) -> None:
    from hankweave_executor_celery.commands import all_commands

    for command in all_commands():
        cli.add_command(command)
