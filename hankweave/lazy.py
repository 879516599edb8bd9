"""Lazy re-exports: a package's public names, imported on first use.

The facades (``hankweave.api``, ``hankweave.events``, ``hankweave.testing``) are imported on
every start (plugins import them when they load, ``--help`` included) but most commands use few
of their names, so each name's module is imported only when the name is first asked for.

Two ways to declare the names:

* :func:`lazy_facade`: the facade's ``if TYPE_CHECKING:`` block of
  ``from module import name as name`` lines *is* the list.  Type checkers read those lines and
  see every name with its real type (and an unknown name as an error); at run time the same
  lines, read once with :mod:`ast`, are the lazy map.  ``hankweave.api`` is declared this way.
* :func:`lazy_exports`: an explicit ``{name: module}`` map, for a package whose type checking
  does not matter to its users (a harness package's ``__init__``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import ast


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


class Export(NamedTuple):
    """One public name of a facade: ``from module import attribute as name`` at ``line``.

    A NamedTuple rather than a dataclass: this module is imported on every start, and
    :mod:`dataclasses` would pull in :mod:`inspect`."""

    name: str
    module: str
    attribute: str
    line: int
    explicit: bool
    """Written ``attribute as name``: the re-export form mypy ``--strict`` and pyright honour."""


def type_checking_exports(source: str, filename: str) -> list[Export]:
    """The names a module's top-level ``if TYPE_CHECKING:`` block imports, in source order.

    The block may hold only absolute ``from module import ...`` statements: anything else there
    (a plain ``import``, a relative import, a definition) raises :class:`ValueError` naming the
    line, since a name it introduced would be seen by type checkers but missing at run time."""
    import ast  # only when a facade is first used: `import hankweave.api` stays cheap

    found: list[Export] = []
    for block in ast.parse(source, filename).body:
        if not (isinstance(block, ast.If) and _is_type_checking(block.test)):
            continue
        for statement in block.body:
            if not (isinstance(statement, ast.ImportFrom) and statement.module
                    and statement.level == 0):
                raise ValueError(f"{filename}:{statement.lineno}: the TYPE_CHECKING block lists "
                                 "public names; only `from module import name as name` belongs "
                                 "in it")
            found += [Export(alias.asname or alias.name, statement.module, alias.name,
                             statement.lineno, alias.asname is not None)
                      for alias in statement.names]
    return found


def _is_type_checking(test: ast.expr) -> bool:
    import ast

    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def lazy_facade(namespace: MutableMapping[str, Any]
                ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` (PEP 562) for a facade whose
    ``if TYPE_CHECKING:`` block lists its names (see the module docstring).

    The facade's source is read on the first attribute lookup, not at import.  Each name's
    value is imported on its first use and cached in ``namespace`` (the facade's ``globals()``);
    ``__all__`` is served the same way, so ``from facade import *`` works."""
    module_name: str = namespace["__name__"]
    exports: dict[str, Export] = {}

    def listed() -> dict[str, Export]:
        if not exports:
            source = namespace["__loader__"].get_source(module_name)
            if source is None:  # installed without its .py files: nothing says what to export
                raise ImportError(f"{module_name} needs its source to list its names")
            exports.update((export.name, export) for export in
                           type_checking_exports(source, namespace.get("__file__", module_name)))
        return exports

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            value: Any = sorted(listed())
        elif (export := listed().get(name)) is not None:
            value = getattr(import_module(export.module), export.attribute)
        else:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(listed())

    return __getattr__, __dir__
