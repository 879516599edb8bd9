"""Every hook is documented and tested, and nothing documented is stale (datasette's rule).

- `docs/plugin-hooks.md` has a `## name(arg, ...)` section for each hookspec, with its
  arguments in order;
- `tests/test_plugins.py` has a `test_hook_<name>` test for each;
- each hookspec docstring describes every argument with `:param arg:`.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import types
from pathlib import Path

import pytest

from hankweave import hookspecs

ROOT = Path(__file__).resolve().parent.parent
HOOK_DOCS = ROOT / "docs" / "plugin-hooks.md"
HOOK_TESTS = Path(__file__).resolve().parent / "test_plugins.py"

SPECS = {
    name: function
    for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
    if hasattr(function, f"{hookspecs.PROJECT_NAME}_spec")
}


def signature(name: str) -> str:
    return f"{name}({', '.join(inspect.signature(SPECS[name]).parameters)})"


def documented_signatures() -> list[str]:
    return re.findall(r"^## (\w+\(.*\))\s*$", HOOK_DOCS.read_text(encoding="utf-8"), re.MULTILINE)


def hook_test_names() -> list[str]:
    tree = ast.parse(HOOK_TESTS.read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_hook_")
    ]


def test_the_hookspecs_are_found() -> None:
    assert "select_harness" in SPECS
    assert "register_harnesses" in SPECS


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hook_has_a_documented_section(name: str) -> None:
    assert signature(name) in documented_signatures(), (
        f"docs/plugin-hooks.md needs a section headed '## {signature(name)}'"
    )


def test_every_documented_hook_exists() -> None:
    stale = [s for s in documented_signatures() if s not in {signature(n) for n in SPECS}]
    assert stale == []


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hook_has_a_test(name: str) -> None:
    assert any(test == f"test_hook_{name}" for test in hook_test_names()), (
        f"tests/test_plugins.py needs a test_hook_{name} test"
    )


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hookspec_docstring_describes_each_argument(name: str) -> None:
    doc = inspect.getdoc(SPECS[name]) or ""
    missing = [
        arg for arg in inspect.signature(SPECS[name]).parameters if f":param {arg}:" not in doc
    ]
    assert missing == []


def hook_examples() -> dict[str, str]:
    """The python example of each hook section, by hook name."""
    sections = re.split(r"^## ", HOOK_DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    examples = {}
    for section in sections[1:]:
        name = section.split("(", 1)[0]
        code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
        if name in SPECS and code:
            examples[name] = code.group(1)
    return examples


def test_every_hook_section_has_an_example() -> None:
    assert sorted(hook_examples()) == sorted(SPECS)


def test_the_hook_examples_work_as_plugins() -> None:
    import click

    from hankweave.plugins import make_plugin_manager
    from hankweave.proxy.types import ProxyRequest
    from hankweave.registry import Registry

    pm = make_plugin_manager(load_entrypoints=False, env={})
    for name, code in hook_examples().items():
        if name == "register_checkpoint_backends":
            compile(code, name, "exec")  # it imports a backend distribution the kernel lacks
            continue
        module = types.ModuleType(f"example_{name}")
        exec(compile(code, f"docs/plugin-hooks.md ({name})", "exec"), module.__dict__)
        pm.register(module, name=f"example-{name}")
    pm.check_pending()
    registry = Registry(pm)
    group = click.Group("hankweave")

    registry.install_commands(group)

    assert set(registry.harnesses()) == {"echo"}
    assert set(registry.event_sinks()) == {"stderr"}
    add_headers = registry.proxy_middleware()["add-headers"]
    middleware = add_headers(add_headers.Config.model_validate({"set": {"x-team": "a"}}))
    request = ProxyRequest(upstream="openai", protocol="openai", method="POST",
                           path="/chat/completions", headers={}, body=b"{}")
    assert asyncio.run(middleware.on_request(request)) is None
    assert request.headers == {"x-team": "a"}
    every_nth = registry.sentinel_triggers()["every-nth"]
    trigger = every_nth(every_nth.Config.model_validate({"type": "every-nth", "n": 2}))
    assert [trigger.observe({"type": "a"}), trigger.observe({"type": "b"})] == [
        None,
        [{"type": "a"}, {"type": "b"}],
    ]
    assert registry.resolve_model("acme").full_id == "acme/acme-coder-2"
    assert "gc" in group.commands
    # The select_harness example declines (no replay harness here), so the default routes
    # Acme by the example's provider entry, to pi, which is not installed.
    with pytest.raises(LookupError, match="needs the Pi harness"):
        registry.select_harness(registry.resolve_model("acme"))
