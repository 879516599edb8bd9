"""The plugin: adds ``hankweave dashboard``."""

from __future__ import annotations

from typing import Any

from hankweave.api import hookimpl


@hookimpl
def register_commands(cli: Any) -> None:
    from hankweave_dashboard.command import dashboard_command

    cli.add_command(dashboard_command)
