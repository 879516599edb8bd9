"""The runtime's modules import each other without a circle (docs/api.md, the runtime's seams).

The shared :class:`~hankweave.runtime.context.RunContext` is data the other parts take; none
of them is imported back by a part it imports.  Every import counts, as in ``test_layers``:
those inside functions and under ``TYPE_CHECKING`` included.
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.test_layers import ROOT, Import, imports_of, module_name

PACKAGE = "hankweave.runtime"


def package_edges(found: Iterable[Import], modules: set[str]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from m import name`` counts as ``m``)."""
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for item in found:
        target = item.target if item.target in modules else item.target.rpartition(".")[0]
        if item.module in modules and target in modules and target != item.module:
            edges[item.module].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other in a ring (strongly connected, >1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(edges[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_the_runtime_modules_import_each_other_without_a_circle():
    paths = sorted((ROOT / "hankweave" / "runtime").glob("*.py"))
    modules = {module_name(path, ROOT) for path in paths}
    found = [item for path in paths for item in imports_of(path, module_name(path, ROOT))]
    assert circles(package_edges(found, modules)) == []


def test_a_circle_is_reported_with_its_members():
    modules = {"p.context", "p.humans", "p.attempt", "p.rig"}
    found = [
        Import("p.context", "p.humans.HumanLoop", "x.py:1"),
        Import("p.humans", "p.context.RunContext", "x.py:2"),  # typing-only counts too
        Import("p.attempt", "p.context", "x.py:3"),
        Import("p.attempt", "p.rig.run_rig", "x.py:4"),
    ]
    assert circles(package_edges(found, modules)) == [["p.context", "p.humans"]]
