"""Print the figures issue 35 tracks: long modules, long functions and import circles.

Run from the repository root: ``python scripts/structure_report.py [--json]``. It reads the
sources as text (``ast``), so it imports nothing it measures.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path

ROOTS = ("hankweave", "hankweave-replay", "hankweave-harness-claude", "hankweave-harness-pi", "plugins")
LONG_MODULE = 500
LONG_FUNCTION = 60


def source_files(root: Path) -> Iterator[Path]:
    for top in ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            parts = set(path.parts)
            if parts & {"tests", ".venv", "build", "__pycache__", ".tox"}:
                continue
            yield path


def module_name(root: Path, path: Path) -> str | None:
    """The import name of a file, for the packages whose imports we follow."""
    rel = path.relative_to(root)
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "plugins":
        parts = parts[2:]
    elif parts[0] != "hankweave":
        parts = parts[1:]
    if not parts:
        return None
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts else None


def long_functions(tree: ast.AST, rel: str) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > LONG_FUNCTION:
                yield f"{rel}:{node.lineno} {node.name}", length


def imports_of(tree: ast.AST, name: str, is_package: bool, *, every: bool = False) -> set[str]:
    """The modules a module imports: at load time only, or ``every`` import (typing-only and
    function-level ones too, which make a circle of dependence though not of loading)."""
    found: set[str] = set()
    body = tree.body if isinstance(tree, ast.Module) else []
    nodes = ast.walk(tree) if every else _top_level(body)
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            continue  # typing-only imports are not a load cycle
        if isinstance(node, ast.If | ast.Try):
            yield from _top_level(node.body)
            yield from _top_level(getattr(node, "orelse", []))
            continue
        yield node


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def report(root: Path) -> dict[str, object]:
    modules: dict[str, tuple[Path, ast.AST]] = {}
    long_modules: list[tuple[str, int]] = []
    functions: list[tuple[str, int]] = []
    for path in source_files(root):
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(root))
        lines = text.count("\n")
        if lines > LONG_MODULE:
            long_modules.append((rel, lines))
        tree = ast.parse(text, filename=rel)
        functions.extend(long_functions(tree, rel))
        name = module_name(root, path)
        if name:
            modules[name] = (path, tree)
    def graph(every: bool) -> dict[str, set[str]]:
        edges: dict[str, set[str]] = {}
        for name, (path, tree) in modules.items():
            targets = imports_of(tree, name, path.name == "__init__.py", every=every)
            edges[name] = {t for t in targets if t in modules and t != name}
        return edges

    return {
        "modules_over_500_lines": sorted(long_modules, key=lambda item: -item[1]),
        "functions_over_60_lines": sorted(functions, key=lambda item: -item[1]),
        "functions_over_80_lines": sum(1 for _, n in functions if n > 80),
        "import_cycles_at_load": cycles(graph(every=False)),
        "import_cycles_any_import": cycles(graph(every=True)),
    }


def main() -> None:
    figures = report(Path.cwd())
    if "--json" in sys.argv:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"  {item}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
