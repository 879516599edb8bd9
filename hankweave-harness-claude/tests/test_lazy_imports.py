"""With the Claude harness installed, ``hankweave --help``, ``validate`` and ``inspect`` never
import the Claude Agent SDK (a second of start-up); a run imports it in the background."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import sys
from hankweave.cli import main
sys.argv = ["hankweave", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("\\nSDK=" + str("claude_agent_sdk" in sys.modules))
"""


def sdk_imported(*args: str, cwd: Path) -> bool:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                            text=True, cwd=cwd, timeout=60)
    marker = [line for line in result.stdout.splitlines() if line.startswith("SDK=")]
    assert marker, result.stderr
    return marker[-1] == "SDK=True"


@pytest.mark.parametrize("command", [["--help"], ["validate", "hank.json"],
                                     ["inspect", "state", "-e", "exec"]])
def test_commands_that_run_no_codon_never_import_the_sdk(tmp_path: Path,
                                                         command: list[str]) -> None:
    (tmp_path / "hank.json").write_text(json.dumps({"hank": [{
        "id": "a", "name": "A", "model": "sonnet", "continuationMode": "fresh",
        "promptText": "x"}]}))
    (tmp_path / "exec" / ".hankweave").mkdir(parents=True)
    assert not sdk_imported(*command, cwd=tmp_path)
