"""Lazy re-exports: a package's public names, imported on first use.

The facades (``hankweave.api``, ``hankweave.events``, ``hankweave.testing``) are imported on
every start (plugins import them when they load, ``--help`` included) but most commands use few
of their names, so each name's module is imported only when the name is first asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any


def lazy_exports(namespace: MutableMapping[str, Any], exports: Mapping[str, str]
                 ) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that imports ``exports[name]`` (a module path) for
    ``name``, caches the value in ``namespace`` (the module's ``globals()``) and returns it."""
    module_name = namespace.get("__name__", "?")

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
