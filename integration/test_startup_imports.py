"""With every plugin installed, ``hankweave --help`` loads them all but stays light: the plugins'
entry points defer their implementations, so no pydantic, asyncio, tarfile or GitPython is
imported just to print the help (benchmarks/run_overhead.py times it)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from hankweave.cli import main
from hankweave.plugins import get_plugin_manager
sys.argv = ["hankweave", "--help"]
try:
    main()
except SystemExit:
    pass
names = sorted(name for name, _ in get_plugin_manager().list_name_plugin())
print("PLUGINS=" + ",".join(names))
print("LOADED=" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""
HEAVY = ("pydantic", "asyncio", "tarfile", "git", "aiohttp", "litellm", "anthropic",
         "claude_agent_sdk")


def test_help_loads_every_plugin_and_no_heavy_module():
    result = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY)],
                            capture_output=True, text=True, timeout=60, check=True)
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line
                 and line.split("=", 1)[0] in ("PLUGINS", "LOADED"))

    plugins = lines["PLUGINS"]
    for entry in ("replay", "checkpoint-git", "checkpoint-snapshot", "claude"):
        assert entry in plugins, plugins
    assert lines["LOADED"] == ""
