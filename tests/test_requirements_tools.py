"""``requirements.tools``: what a hank needs on the agents' PATH (hankweave.config.tools)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hankweave.config.tools import check_required_tools, parse_tool_requirement
from tests.runtime_harness import Project, codon


def fake_tool(folder: Path, name: str, output: str) -> Path:
    """An executable that prints ``output`` for ``--version``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(("entry", "name", "wanted"), [
    ("jq", "jq", ""), (" git>=2.30 ", "git", ">=2.30"), ("node>=18,<23", "node", ">=18,<23"),
    ("tool == 1.2.3", "tool", "==1.2.3")])
def test_entries_parse(entry: str, name: str, wanted: str):
    requirement = parse_tool_requirement(entry)
    assert (requirement.name, requirement.wanted) == (name, wanted)


@pytest.mark.parametrize("entry", ["", "a b", "bin/tool", "git>=banana", "git~2"])
def test_bad_entries_are_refused(entry: str):
    with pytest.raises(ValueError, match="not a"):
        parse_tool_requirement(entry)


def test_missing_and_too_old_tools_are_named_with_how_they_were_probed(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    old = fake_tool(bin_dir, "faketool", "faketool version 1.2.3 (build 7)")
    fake_tool(bin_dir, "silent", "no numbers here")
    env = {"PATH": str(bin_dir)}

    problems = check_required_tools(
        ["faketool>=1.2", "faketool>=2.0", "absent-tool", "silent>=1", "faketool<1.3"], env)

    assert problems == [
        f"faketool>=2.0: {old} is version 1.2.3 (from `{old} --version`: 'faketool version"
        " 1.2.3 (build 7)'), which does not meet >=2.0",
        f"absent-tool: not found on PATH (looked for an executable file named absent-tool in"
        f" {bin_dir})",
        f"silent>=1: `{bin_dir / 'silent'} --version` printed no version number ('no numbers"
        " here')"]


def test_a_non_executable_file_is_not_a_tool(tmp_path: Path):
    (tmp_path / "tool").write_text("x")
    assert check_required_tools(["tool"], {"PATH": str(tmp_path)})[0].startswith(
        "tool: not found on PATH")


def _hank_needing(project: Project, tools: list[str]) -> None:
    project.write_hank([codon("a")], requirements={"tools": tools})


def test_validate_and_run_refuse_before_anything_is_created(tmp_path: Path):
    project = Project(tmp_path)
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "faketool", "faketool 0.9")
    _hank_needing(project, ["faketool>=1.0", "absent-tool"])
    env = {**project.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    for command in (["validate"], ["run", "-e", str(project.exec_dir), "--headless"]):
        result = subprocess.run(
            [sys.executable, "-m", "hankweave", *command[:1], str(project.hank_dir),
             str(project.data), *command[1:]], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "requirements.tools: faketool>=1.0" in result.stderr + result.stdout
        assert "which does not meet >=1.0" in result.stderr + result.stdout
        assert "absent-tool: not found on PATH" in result.stderr + result.stdout
        assert not project.exec_dir.exists()


def test_a_hank_whose_tools_are_there_runs(tmp_path: Path):
    project = Project(tmp_path)
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "faketool", "faketool 3.1")
    _hank_needing(project, ["faketool>=3", "sh"])
    project.env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"

    assert project.run().code == 0


def test_the_agents_path_is_probed(tmp_path: Path):
    """HANKWEAVE_PATH gives agents their PATH, so it is what the tools are looked up on."""
    bin_dir = tmp_path / "agents-bin"
    fake_tool(bin_dir, "faketool", "faketool 3.1")
    project = Project(tmp_path)
    _hank_needing(project, ["faketool"])
    project.env["HANKWEAVE_PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"

    assert project.run().code == 0
