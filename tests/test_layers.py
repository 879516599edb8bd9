"""The architecture's import rules, checked on the source (``docs/api.md``, "Layers").

* The kernel's packages form layers: a module imports only its own layer and those below
  (``state`` never imports ``runtime``, ``runtime`` never ``server``, ``config`` never the plugin
  registry, ...).  Every import counts, those inside functions and under ``TYPE_CHECKING``
  included: a lazy import is still a dependency.
* The kernel never imports a sibling package.
* Sibling packages import only the public API (``hankweave``, ``hankweave.api``); their tests
  may also use ``hankweave.testing``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "hankweave"

LAYERS: list[tuple[str, ...]] = [
    ("hankweave.faults", "hankweave.fsutil", "hankweave.exitcodes", "hankweave.lazy",
     "hankweave.processes", "hankweave.providers", "hankweave.secrets", "hankweave.hosts",
     "hankweave.people", "hankweave.sandbox"),
    ("hankweave.models", "hankweave.workspace"),
    ("hankweave.config",),
    ("hankweave.bundle", "hankweave.remote"),
    ("hankweave.state",),
    ("hankweave.codonlog", "hankweave.checkpoints", "hankweave.harness", "hankweave.events",
     "hankweave.mock_provider", "hankweave.plugin_config", "hankweave.sentinel",
     "hankweave.proxy"),
    ("hankweave.workspace_watch",),
    ("hankweave.execution",),
    ("hankweave.hookspecs", "hankweave.plugins", "hankweave.registry"),
    ("hankweave.sentinels",),
    ("hankweave.default_plugins",),
    ("hankweave.runtime", "hankweave.links"),
    ("hankweave.server",),
    ("hankweave.app",),
    ("hankweave.cli", "hankweave.__main__"),
    ("hankweave.testing",),
]
"""Lowest first.  The package itself and ``hankweave.api`` are the public facades above all."""

FACADES = ("hankweave", "hankweave.api")
SIBLING_ALLOWED = ("hankweave", "hankweave.api")
SIBLING_TEST_ALLOWED = (*SIBLING_ALLOWED, "hankweave.testing")


@dataclass(frozen=True)
class Import:
    module: str
    """The importing module (``hankweave.runtime.attempt``)."""
    target: str
    """What it imports (``hankweave.state.types`` or ``hankweave.state.types.last_record``)."""
    where: str
    """``path:line``."""


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> Iterator[Import]:
    """Every import statement of a source file, wherever it stands."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            yield Import(module, target, f"{path.relative_to(ROOT)}:{node.lineno}")


def layer_of(name: str) -> int | None:
    """The layer of a kernel module or of an attribute imported from one."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, members in enumerate(LAYERS):
        for member in members:
            matches = name == member or name.startswith(member + ".")
            if matches and (best is None or len(member) > best[0]):
                best = (len(member), index)
    return best[1] if best is not None else None


def kernel_imports() -> Iterator[Import]:
    for path in sorted(KERNEL.rglob("*.py")):
        yield from imports_of(path, module_name(path, ROOT))


def layer_violations(found: list[Import]) -> list[str]:
    problems = []
    for item in found:
        if item.module in FACADES or not item.target.startswith("hankweave"):
            continue
        if item.target.startswith("hankweave_"):
            problems.append(f"{item.where}: the kernel imports the sibling {item.target}")
            continue
        if item.target in FACADES or item.target.split(".")[:2] == ["hankweave", "api"]:
            problems.append(f"{item.where}: {item.module} imports the public facade"
                            f" {item.target}; kernel modules import what they use directly")
            continue
        own, theirs = layer_of(item.module), layer_of(item.target)
        if own is None:
            problems.append(f"{item.where}: {item.module} is in no layer (add it to LAYERS)")
        elif theirs is not None and theirs > own:
            problems.append(f"{item.where}: {item.module} (layer {own}) imports {item.target}"
                            f" (layer {theirs}), a higher layer")
    return problems


def sibling_violations(found: list[Import], allowed: tuple[str, ...]) -> list[str]:
    problems = []
    for item in found:
        target = item.target
        if not target.startswith("hankweave") or target.startswith("hankweave_"):
            continue
        # `hankweave` itself offers only its attributes (`from hankweave import hookimpl`);
        # the other allowed names cover their submodules too (`hankweave.testing.sinks`).
        ok = target in ("hankweave", "hankweave.hookimpl", "hankweave.__version__") or any(
            target == name or target.startswith(name + ".")
            for name in allowed if name != "hankweave")
        if not ok:
            problems.append(f"{item.where}: imports {target}, outside the public API"
                            f" ({', '.join(allowed)})")
    return problems


def sibling_sources(tests: bool) -> Iterator[Import]:
    roots = [ROOT / "hankweave-replay", *(ROOT / "plugins").iterdir(),
             ROOT / "docs" / "examples" / "hankweave-sink-jsonl"]
    roots += sorted(ROOT.glob("hankweave-harness-*"))
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            in_tests = "tests" in path.relative_to(root).parts
            if in_tests == tests:
                yield from imports_of(path, module_name(path, root))


# ----- the rules -----


def test_every_kernel_module_is_in_a_layer() -> None:
    unplaced = sorted({module_name(p, ROOT) for p in KERNEL.rglob("*.py")
                       if layer_of(module_name(p, ROOT)) is None
                       and module_name(p, ROOT) not in FACADES})
    assert not unplaced


def test_kernel_layers_only_import_downwards() -> None:
    assert layer_violations(list(kernel_imports())) == []


def test_sibling_packages_import_only_the_public_api() -> None:
    assert sibling_violations(list(sibling_sources(tests=False)), SIBLING_ALLOWED) == []


def test_sibling_tests_import_only_the_public_api_and_testing() -> None:
    assert sibling_violations(list(sibling_sources(tests=True)), SIBLING_TEST_ALLOWED) == []


def test_every_public_name_resolves() -> None:
    import hankweave.api as api
    from hankweave.lazy import type_checking_exports

    listed = type_checking_exports(Path(api.__file__).read_text(), "api.py")
    assert sorted(api.__all__) == sorted(export.name for export in listed)
    for name in api.__all__:
        assert getattr(api, name) is not None


# ----- the checker itself finds what it must -----


@pytest.mark.parametrize(("module", "target", "complaint"), [
    ("hankweave.state.store", "hankweave.runtime.orchestrator.Runtime", "a higher layer"),
    ("hankweave.runtime.attempt", "hankweave.server.control", "a higher layer"),
    ("hankweave.config.settings", "hankweave.registry.Registry", "a higher layer"),
    ("hankweave.runtime.attempt", "hankweave_replay.ReplayHarness", "sibling"),
    ("hankweave.newthing", "hankweave.fsutil", "in no layer"),
    ("hankweave.runtime.attempt", "hankweave.api.Harness", "public facade"),
])
def test_the_layer_check_reports_a_violation(module: str, target: str, complaint: str) -> None:
    problems = layer_violations([Import(module, target, "x.py:1")])
    assert len(problems) == 1 and complaint in problems[0]


def test_the_layer_check_allows_imports_down_and_sideways() -> None:
    assert layer_violations([
        Import("hankweave.runtime.attempt", "hankweave.state.types.FailureReason", "x.py:1"),
        Import("hankweave.runtime.attempt", "hankweave.runtime.context.RunContext", "x.py:2"),
        Import("hankweave.app.launch", "hankweave.server.serve_runtime", "x.py:3"),
    ]) == []


def test_the_sibling_check_reports_an_internal_import() -> None:
    found = [Import("hankweave_replay", "hankweave.state.store.load_state", "r.py:1"),
             Import("hankweave_replay", "hankweave.api.load_state", "r.py:2"),
             Import("hankweave_replay", "hankweave.hookimpl", "r.py:3")]
    problems = sibling_violations(found, SIBLING_ALLOWED)
    assert len(problems) == 1 and "hankweave.state.store.load_state" in problems[0]


# ----- no circles -----


def import_graph(found: list[Import], modules: set[str]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports (an imported attribute counts as its
    module)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for item in found:
        target = item.target
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != item.module and item.module in graph:
            graph[item.module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (strongly connected
    components of more than one module)."""
    reach = {name: _reachable(graph, name) for name in graph}
    groups = {frozenset(other for other in reach[name] if name in reach[other]) | {name}
              for name in graph}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_circles() -> None:
    """Two modules that import each other (a typing-only or function-level import included)
    cannot be understood or changed one at a time: the one below must not know the one above."""
    kernel = list(kernel_imports())
    siblings = list(sibling_sources(tests=False))
    modules = {item.module for item in kernel + siblings}
    assert circles(import_graph(kernel + siblings, modules)) == []


def test_the_circle_check_finds_a_ring() -> None:
    found = [Import("a.x", "a.y.f", "x.py:1"), Import("a.y", "a.z", "y.py:1"),
             Import("a.z", "a.x.G", "z.py:1"), Import("a.z", "a.w", "z.py:2")]
    assert circles(import_graph(found, {"a.x", "a.y", "a.z", "a.w"})) == [["a.x", "a.y", "a.z"]]


def private_imports(found: list[Import], modules: set[str]) -> list[str]:
    """Imports of another module's private name (``from m import _helper``): what a module
    keeps private may change without notice, so no other module may lean on it."""
    problems = []
    for item in found:
        owner, _, name = item.target.rpartition(".")
        if owner in modules and owner != item.module and name.startswith("_") \
                and not name.startswith("__"):
            problems.append(f"{item.where}: {item.module} imports {owner}'s private {name}")
    return problems


def test_no_module_imports_another_module_s_private_names() -> None:
    found = list(kernel_imports()) + list(sibling_sources(tests=False))
    assert private_imports(found, {item.module for item in found}) == []


def test_the_private_import_check_reports_one() -> None:
    found = [Import("a.x", "a.y._helper", "x.py:1"), Import("a.x", "a.y.helper", "x.py:2"),
             Import("a.y", "a.y._own", "y.py:1"), Import("a.x", "a.y.__version__", "x.py:3")]
    assert private_imports(found, {"a.x", "a.y"}) == ["x.py:1: a.x imports a.y's private _helper"]
