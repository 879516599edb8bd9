"""``hankweave plugins``: what is installed, what each plugin implements, and what failed.

Also the one place the command line turns plugin-loading problems into user-facing errors:
:func:`install_plugin_commands` is how the ``hankweave`` group gets plugin commands.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

import click
import pluggy

from hankweave.cli.errors import CLIError
from hankweave.exitcodes import EXIT_FAILED

if TYPE_CHECKING:
    from hankweave.plugins import HankweavePluginManager


@click.command("plugins")
@click.option(
    "--all", "include_builtin", is_flag=True, help="Include the built-in default plugins."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout instead of lines.")
def plugins_command(include_builtin: bool, as_json: bool) -> None:
    """List installed plugins: distribution, version, hooks, and load errors.

    A plugin that failed to load is listed with its error and no hooks.  With --json, prints
    a list of objects with the keys name, distribution, version, hooks, builtin and error.
    """
    from hankweave.plugins import list_plugins

    infos = list_plugins(_plugin_manager(), include_builtin=include_builtin)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(info) for info in infos], indent=2))
        return
    if not infos:
        click.echo(
            "No plugins installed." + ("" if include_builtin else " (--all shows built-ins)")
        )
        return
    for info in infos:
        origin = (
            f"{info.distribution} {info.version}" if info.distribution else "registered in process"
        )
        label = "built-in" if info.builtin else origin
        click.echo(f"{info.name}  ({label})")
        if info.error is not None:
            click.echo(f"  failed to load: {info.error}")
        else:
            click.echo(f"  hooks: {', '.join(info.hooks) or 'none'}")


def install_plugin_commands(cli: click.Group) -> None:
    """Add every plugin's commands to ``cli`` (the ``register_commands`` hook).

    Plugin problems (a failed load under strict mode, an invalid hook implementation, a
    command name taken twice) become a :class:`CLIError` instead of a traceback.
    """
    from hankweave.registry import RegistrationError, get_registry

    _plugin_manager()  # loading errors first, with their own advice
    try:
        get_registry().install_commands(cli)
    except (RegistrationError, pluggy.PluginValidationError) as exc:
        raise CLIError(str(exc), exit_code=EXIT_FAILED) from exc


def _plugin_manager() -> HankweavePluginManager:
    from hankweave.plugins import PluginLoadError, PluginModuleError, get_plugin_manager

    try:
        return get_plugin_manager()
    except PluginModuleError as exc:
        raise CLIError(str(exc), exit_code=EXIT_FAILED) from exc
    except PluginLoadError as exc:
        raise CLIError(
            f"{exc} (HANKWEAVE_STRICT_PLUGINS is set; unset it to skip the plugin, or list it "
            f"in HANKWEAVE_DISABLE_PLUGINS)",
            exit_code=EXIT_FAILED,
        ) from exc
    except pluggy.PluginValidationError as exc:
        raise CLIError(f"a built-in plugin is invalid: {exc}", exit_code=EXIT_FAILED) from exc
