"""The package as hankweave finds it: registered through its entry point, and run by the kernel
as a codon's sentinel from end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hankweave_sentinel_command_plugin as plugin
import pytest
from command_helpers import LINTER, Project, sentinel_config
from hankweave_sentinel_command import CommandSentinel

from hankweave.api import ConfigError, Registry, make_plugin_manager

PYTHON_FILES = {"command": LINTER, "files": ["**/*.py"]}
BROKEN_AND_CLEAN = {"writeFiles": {"bad.py": "def f(:\n", "ok.py": "x = 1\n",
                                   "notes.md": "not python"}}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


# ----- registration -----


def test_the_plugin_registers_the_command_kind():
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(plugin, name="sentinel-command")
    registry = Registry(pm)
    assert registry.sentinel_kinds() == {"command": CommandSentinel}
    assert registry.registered_by("sentinel kind", "command") == "sentinel-command"


def test_the_installed_distribution_provides_the_kind_through_its_entry_point():
    pm = make_plugin_manager(env={"HANKWEAVE_LOAD_PLUGINS": "sentinel-command",
                                  "HANKWEAVE_STRICT_PLUGINS": "1"})
    registry = Registry(pm)
    assert registry.sentinel_kinds() == {"command": CommandSentinel}
    assert registry.registered_by("sentinel kind", "command") == "sentinel-command"


def test_hankweave_plugins_lists_the_distribution():
    env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "sentinel-command"}
    listed = subprocess.run([sys.executable, "-m", "hankweave", "plugins", "--json"], env=env,
                            capture_output=True, text=True, check=True, timeout=60)
    (entry,) = json.loads(listed.stdout)
    assert (entry["name"], entry["distribution"], entry["hooks"], entry["error"]) == (
        "sentinel-command", "hankweave-sentinel-command", ["register_sentinel_kinds"], None)


def test_loading_the_entry_point_leaves_the_kind_pydantic_and_asyncio_unimported():
    """Every start of hankweave loads the entry point (--help included): it stays light."""
    code = ("import sys, hankweave_sentinel_command_plugin\n"
            "print([m for m in ('hankweave_sentinel_command', 'pydantic', 'asyncio')\n"
            "       if m in sys.modules])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)
    assert result.stdout.strip() == "[]"


# ----- a hank run -----


def test_a_linter_on_codon_completed_writes_its_finding_and_emits_sentinel_output(project):
    project.write_watched_codon("write", sentinel_config(PYTHON_FILES))
    assert project.run({"write": BROKEN_AND_CLEAN}) == 0
    (output,) = project.of_type("sentinel.output")
    assert (output["sentinelId"], output["codonId"], output["outputType"]) == (
        "lint", "write", "text")
    assert output["cost"] == 0
    content = output["content"]
    assert "bad.py:1: invalid syntax" in content and "checked: bad.py, ok.py" in content
    assert "notes.md" not in content
    (log,) = project.output_logs("lint")
    assert content in log.read_text()
    assert project.state().runs[0].codons[0].status == "completed"


def test_a_debounced_tool_result_trigger_checks_every_file_the_agent_wrote_at_once(project):
    project.write_watched_codon("write", sentinel_config(
        PYTHON_FILES, on=["tool.result"], execution={"strategy": "debounce",
                                                      "milliseconds": 60_000}))
    assert project.run({"write": BROKEN_AND_CLEAN}) == 0
    (output,) = project.of_type("sentinel.output")  # the completion drain flushed the batch
    assert "checked: bad.py, ok.py" in output["content"]
    assert "bad.py:1: invalid syntax" in output["content"]


def test_a_codon_that_changes_no_watched_file_writes_nothing(project):
    project.write_watched_codon("write", sentinel_config(PYTHON_FILES))
    assert project.run({"write": {"writeFiles": {"notes.md": "no python here"}}}) == 0
    assert project.of_type("sentinel.output") == []
    assert project.of_type("sentinel.error") == []
    (log,) = project.output_logs("lint")  # created empty when the sentinel loaded
    assert log.read_text() == ""


def test_a_program_not_on_path_stops_the_run_before_it_starts(project):
    project.write_watched_codon("write", sentinel_config({"command": ["no-such-linter-on-path"]}))
    with pytest.raises(ConfigError, match="'no-such-linter-on-path' is not on PATH"):
        project.run({"write": BROKEN_AND_CLEAN})
    assert not (project.exec_dir / ".hankweave" / "state.json").exists()


def test_a_relative_program_missing_when_it_fires_unloads_the_sentinel_not_the_codon(project):
    project.write_watched_codon("write", sentinel_config({"command": ["./tools/lint"]}))
    assert project.run({"write": BROKEN_AND_CLEAN}) == 0
    (error,) = project.of_type("sentinel.error")
    assert "command ./tools/lint cannot be started" in error["message"]
    (unloaded,) = project.of_type("sentinel.unloaded")
    assert unloaded["reason"] == "fatal-error"
    assert project.of_type("sentinel.output") == []
    assert project.state().runs[0].codons[0].status == "completed"
