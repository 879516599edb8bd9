"""The plugin manager: built-ins, installed plugins, and the switches that control loading.

Built-in plugins (:data:`DEFAULT_PLUGINS`) are registered first, then every entry point of the
``hankweave`` group, one at a time: a plugin that fails to import is reported in one line on
stderr and skipped (fatal with ``strict``).  pluggy calls hooks in reverse registration order,
so installed plugins are asked before the built-ins, whose decision hooks are ``trylast``
anyway.

Environment switches (read by :func:`make_plugin_manager`):

``HANKWEAVE_LOAD_PLUGINS``
    Comma-separated allowlist of installed plugins, by entry-point or distribution name; set
    but empty loads none.  Built-ins always load.
``HANKWEAVE_DISABLE_PLUGINS``
    Comma-separated blocklist, by the same names or a built-in's module name.
``HANKWEAVE_STRICT_PLUGINS``
    ``1``: a plugin that fails to load is fatal (:class:`PluginLoadError`).
``HANKWEAVE_TRACE_PLUGINS``
    ``1``: print every hook call, its implementations and its result to stderr.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pluggy

from hankweave import __version__, hookspecs

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME

DEFAULT_PLUGINS = (
    "hankweave.default_plugins.harness_selection",
    "hankweave.default_plugins.model_catalogue",
    "hankweave.default_plugins.sentinels",
)
"""Modules of the built-in plugins, registered under these names."""

_FALSE = frozenset({"", "0", "false", "no", "off"})


class PluginLoadError(Exception):
    """A plugin failed to load while strict loading was on."""


class PluginModuleError(PluginLoadError):
    """A module ``HANKWEAVE_PLUGIN_MODULES`` names cannot be imported (strict or not: it was
    asked for by name)."""


@dataclass(frozen=True)
class PluginSource:
    """Where a registered plugin came from."""

    name: str
    distribution: str | None
    version: str | None
    builtin: bool = False


@dataclass(frozen=True)
class PluginLoadFailure:
    """An installed plugin that was skipped because it could not be loaded."""

    name: str
    distribution: str | None
    version: str | None
    error: str

    def describe(self) -> str:
        origin = (
            f"{self.distribution} {self.version}" if self.distribution else "unknown distribution"
        )
        return f'plugin "{self.name}" ({origin}) failed to load: {self.error}'


@dataclass(frozen=True)
class PluginInfo:
    """One line of ``hankweave plugins``: a registered plugin, or one that failed to load."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool
    error: str | None = None


class HankweavePluginManager(pluggy.PluginManager):
    """A pluggy manager with the hankweave hookspecs, and a record of what was loaded."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.sources: dict[str, PluginSource] = {}
        self.load_failures: list[PluginLoadFailure] = []


def make_plugin_manager(
    *,
    load_entrypoints: bool = True,
    env: Mapping[str, str] = os.environ,
    strict: bool | None = None,
) -> HankweavePluginManager:
    """A fresh plugin manager with the built-ins and (unless told not to) installed plugins.

    ``strict`` defaults to the ``HANKWEAVE_STRICT_PLUGINS`` switch.  Raises
    :class:`PluginLoadError` for a failed plugin when strict, and pluggy's
    ``PluginValidationError`` when a built-in is broken.
    """
    pm = HankweavePluginManager()
    if _flag(env.get("HANKWEAVE_TRACE_PLUGINS")):
        _enable_tracing(pm)
    blocked = _names(env.get("HANKWEAVE_DISABLE_PLUGINS", ""))
    for module_name in DEFAULT_PLUGINS:
        if _normalise(module_name) not in blocked:
            pm.register(importlib.import_module(module_name), name=module_name)
            pm.sources[module_name] = PluginSource(module_name, "hankweave", __version__, True)
    for module_name in _module_list(env.get("HANKWEAVE_PLUGIN_MODULES", "")):
        # Like pytest's -p: plugin modules named explicitly (test fakes, local plugins).
        if not pm.has_plugin(module_name):
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise PluginModuleError(
                    f"HANKWEAVE_PLUGIN_MODULES names {module_name!r}, which cannot be imported:"
                    f" {exc} (is its directory on PYTHONPATH?)") from exc
            pm.register(module, name=module_name)
            pm.sources[module_name] = PluginSource(module_name, None, None)
    if load_entrypoints:
        allow = _names(env["HANKWEAVE_LOAD_PLUGINS"]) if "HANKWEAVE_LOAD_PLUGINS" in env else None
        if strict is None:
            strict = strict_plugins(env)
        _load_entry_points(pm, allow=allow, blocked=blocked, strict=strict)
    pm.check_pending()
    return pm


def strict_plugins(env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HANKWEAVE_STRICT_PLUGINS`` makes a broken plugin fatal: one that fails to
    load, and an enabled event sink that cannot be built."""
    return _flag(env.get("HANKWEAVE_STRICT_PLUGINS"))


@functools.cache
def get_plugin_manager() -> HankweavePluginManager:
    """The command line's plugin manager: built once per process, on first use."""
    return make_plugin_manager()


def list_plugins(pm: HankweavePluginManager, *, include_builtin: bool = False) -> list[PluginInfo]:
    """Every registered plugin (built-ins only with ``include_builtin``), then load failures.

    Plugins registered in process (by tests or code) are listed with no distribution.
    """
    infos = []
    for name, plugin in pm.list_name_plugin():
        source = pm.sources.get(name, PluginSource(name, None, None))
        if plugin is None or (source.builtin and not include_builtin):
            continue
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or ())
        infos.append(
            PluginInfo(name, source.distribution, source.version, tuple(hooks), source.builtin)
        )
    for failure in pm.load_failures:
        infos.append(
            PluginInfo(
                failure.name, failure.distribution, failure.version, (), False, failure.error
            )
        )
    return infos


def _load_entry_points(
    pm: HankweavePluginManager, *, allow: set[str] | None, blocked: set[str], strict: bool
) -> None:
    # Loaded one by one rather than with pm.load_setuptools_entrypoints, which lets the
    # first ImportError abort every other plugin.
    requested: set[str] = set()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.name if dist is not None else None
        version = dist.version if dist is not None else None
        names = {_normalise(ep.name)} | ({_normalise(dist_name)} if dist_name else set())
        if allow is not None:
            if not names & allow:
                continue
            requested |= names & allow
        if names & blocked:
            continue
        previous = pm.sources.get(ep.name)
        if previous is not None and previous.distribution == dist_name:
            continue  # the same distribution found twice on sys.path
        try:
            _load_one(pm, ep, previous)
        except Exception as exc:
            failure = PluginLoadFailure(ep.name, dist_name, version, _one_line(exc))
            pm.load_failures.append(failure)
            if strict:
                raise PluginLoadError(failure.describe()) from exc
            _warn(f"{failure.describe()}; skipped")
            continue
        pm.sources[ep.name] = PluginSource(ep.name, dist_name, version)
    for name in sorted((allow or set()) - requested):
        _warn(f'plugin "{name}" listed in HANKWEAVE_LOAD_PLUGINS is not installed')


def _load_one(
    pm: HankweavePluginManager,
    ep: importlib.metadata.EntryPoint,
    previous: PluginSource | None,
) -> None:
    if pm.has_plugin(ep.name):
        owner = f"{previous.distribution} {previous.version}" if previous else "another plugin"
        raise PluginLoadError(f'the plugin name "{ep.name}" is already used by {owner}')
    plugin = ep.load()
    try:
        pm.register(plugin, name=ep.name)
    except pluggy.PluginValidationError:
        # pluggy keeps the plugin half-registered when one of its hookimpls is invalid.
        if pm.get_plugin(ep.name) is plugin:
            pm.unregister(plugin)
        raise
    unknown = _unknown_hooks(pm, plugin)
    if unknown:
        pm.unregister(plugin)
        raise PluginLoadError(
            f"implements unknown hooks: {', '.join(unknown)} (written for another hankweave version?)"
        )


def _unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    return sorted(
        caller.name
        for caller in pm.get_hookcallers(plugin) or ()
        if not caller.has_spec()
        and any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls())
    )


def _enable_tracing(pm: pluggy.PluginManager) -> None:
    def before(
        hook_name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]
    ) -> None:
        args = ", ".join(f"{key}={_short(value)}" for key, value in kwargs.items())
        # pluggy calls the implementations last-to-first.
        order = ", ".join(impl.plugin_name for impl in reversed(impls)) or "none"
        _trace(f"{hook_name}({args}) -> implementations: {order}")

    def after(
        outcome: pluggy.Result[object],
        hook_name: str,
        impls: Sequence[pluggy.HookImpl],
        kwargs: Mapping[str, object],
    ) -> None:
        if outcome.exception is not None:
            _trace(f"{hook_name} raised {_one_line(outcome.exception)}")
        else:
            _trace(f"{hook_name} returned {_short(outcome.get_result())}")

    pm.add_hookcall_monitoring(before, after)


def _trace(message: str) -> None:
    print(f"hankweave trace: {message}", file=sys.stderr)


def _warn(message: str) -> None:
    print(f"hankweave: {message}", file=sys.stderr)


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _flag(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in _FALSE


def _names(value: str) -> set[str]:
    return {_normalise(part) for part in value.split(",") if part.strip()}


def _module_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _normalise(name: str) -> str:
    # Distribution names compare as PEP 503 says (case, "-", "_", "." are equivalent);
    # entry-point names are matched the same way so either spelling works in the switches.
    return re.sub(r"[-_.]+", "-", name.strip()).lower()
