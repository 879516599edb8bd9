"""``hankweave.api`` lists each public name once, and type checkers see every name's real type.

The list is the module's ``if TYPE_CHECKING:`` block of ``from X import name as name`` lines
(docs/api.md, "How to add a public name"); at run time the same lines are the lazy map.  These
tests pin both sides: every listed name resolves at run time, no name is listed twice, and mypy
(``--strict``, as a plugin author may run it) accepts every listed name with its real type and
refuses a name the list does not hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hankweave.api as api
from hankweave.lazy import type_checking_exports

ROOT = Path(__file__).resolve().parents[1]
API_SOURCE = ROOT / "hankweave" / "api.py"


def listed() -> list[str]:
    return [export.name for export in type_checking_exports(API_SOURCE.read_text(), "api.py")]


def test_no_public_name_is_listed_twice() -> None:
    names = listed()
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_every_listed_name_resolves_at_run_time() -> None:
    for name in listed():
        assert getattr(api, name) is not None, name


def test_all_and_dir_are_the_listed_names() -> None:
    assert sorted(api.__all__) == sorted(listed())
    assert dir(api) == sorted(listed())


def test_every_name_is_re_exported_explicitly() -> None:
    """``from m import name as name`` is the form mypy --strict and pyright treat as public."""
    plain = [f"{export.name} (line {export.line})"
             for export in type_checking_exports(API_SOURCE.read_text(), "api.py")
             if not export.explicit]
    assert plain == []


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="DefinitelyNotAName"):
        api.DefinitelyNotAName  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_facade_imports_none_of_its_modules() -> None:
    """The lazy map is read on first use, so ``import hankweave.api`` stays cheap."""
    probe = ("import sys, hankweave.api; "
             "print(sorted(m for m in ('hankweave.config.hank', 'hankweave.harness', 'ast') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"


def test_mypy_sees_real_types_and_refuses_an_unknown_name(tmp_path: Path) -> None:
    pytest.importorskip("mypy.api")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from hankweave.api import DefinitelyNotAName\n"
        f"from hankweave.api import {', '.join(listed())}\n"
        "reveal_type(HankFile)\n"
        "reveal_type(load_hank)\n"
    )
    # A cache of its own beside the project's, so a second run takes seconds.
    cache = ROOT / ".mypy_cache" / "test_api"
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cache), "--no-error-summary", str(probe)],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT)},
    )
    lines = result.stdout.splitlines()
    # Only the probe's own lines: mypy --strict also reports what it finds in the kernel's
    # modules it follows, which is not what this test is about.
    errors = [line for line in lines if line.startswith("probe.py:") and ": error:" in line]
    assert errors == ['probe.py:1: error: Module "hankweave.api" has no attribute '
                      '"DefinitelyNotAName"  [attr-defined]'], result.stdout + result.stderr
    revealed = [line.split("Revealed type is ", 1)[1] for line in lines if "Revealed type" in line]
    assert revealed[0].endswith('-> hankweave.config.hank.HankFile"'), revealed
    assert revealed[1].startswith('"def (') and "Any" not in revealed[1].split("->")[-1], revealed
