"""`hankweave --help`, `validate` and `inspect` never import the heavy provider or git libraries,
nor the JavaScript engine (a hank with sentinels' Eta templates needs it to validate them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("litellm", "anthropic", "claude_agent_sdk", "git", "aiohttp", "openai", "py_mini_racer")

PROBE = """
import sys
from hankweave.cli import cli
from hankweave.cli.plugins_cmd import install_plugin_commands
install_plugin_commands(cli)
try:
    cli.main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print("\\nLOADED=" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def loaded_by(*args: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
                            capture_output=True, text=True, cwd=cwd, timeout=60)
    marker = [line for line in result.stdout.splitlines() if line.startswith("LOADED=")]
    assert marker, result.stderr
    return marker[-1].removeprefix("LOADED=")


def test_help_imports_no_heavy_library(tmp_path):
    assert loaded_by("--help", cwd=tmp_path) == ""


def test_validate_imports_no_heavy_library(tmp_path):
    hank = tmp_path / "hank.json"
    # Both harnesses' preflights run (the SDKs are looked for, not imported).
    hank.write_text(json.dumps({"hank": [
        {"id": "a", "name": "A", "model": "haiku", "continuationMode": "fresh",
         "promptText": "x"},
        {"id": "b", "name": "B", "model": "pi/openai/gpt-5.2", "continuationMode": "fresh",
         "promptText": "x"}]}))
    assert loaded_by("validate", str(hank), str(tmp_path), cwd=tmp_path) == ""


def test_inspect_imports_no_heavy_library(tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "execution-demo"
    assert loaded_by("inspect", "thread", "-e", str(example), cwd=tmp_path) == ""
    assert loaded_by("inspect", "state", "-e", str(example), cwd=tmp_path) == ""
