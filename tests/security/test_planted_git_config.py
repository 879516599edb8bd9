"""Issue 34 item 2: a program planted in the checkpoint repository never runs.

An agent can write the git checkpoint repository's ``config`` and ``info/attributes`` from
``agentRoot`` with one bash call.  Here the plant is made as that call would make it (between
runs by the test, or by the fake agent itself), and then the user's own commands run on the
execution: ``export``, ``rollback``, ``replay DIR``.  The planted program writes a marker
file; the marker must never appear.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.security.support import Project, codon, needs

GIT_DIR = Path(".hankweave", "checkpoints", ".hankweavecheckpoints")
TWO_CODONS = [codon("a", checkpointedFiles=["**"]), codon("b", checkpointedFiles=["**"])]


def evil_program(root: Path) -> tuple[Path, Path]:
    """A program that leaves a marker when run (and passes a filter's input through)."""
    marker = root / "planted-program-ran"
    program = root / "evil.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> "{marker}"\ncat\n')
    program.chmod(0o755)
    return program, marker


def plant_fsmonitor(git_dir: Path, program: Path) -> None:
    with (git_dir / "config").open("a") as fh:
        fh.write(f"[core]\n\tfsmonitor = {program}\n")


def plant_smudge_filter(git_dir: Path, program: Path) -> None:
    with (git_dir / "config").open("a") as fh:
        fh.write(f'[filter "x"]\n\tclean = {program} clean\n\tsmudge = {program} smudge\n')
    with (git_dir / "info" / "attributes").open("a") as fh:
        fh.write("* filter=x\n")


PLANTS: dict[str, Callable[[Path, Path], None]] = {
    "fsmonitor": plant_fsmonitor,
    "smudge filter": plant_smudge_filter,
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One execution of two codons that wrote files, made once and copied by each test."""
    needs("git", "replay")
    project = Project(tmp_path_factory.mktemp("recorded"))
    project.write_hank(TWO_CODONS)
    project.write_script({"a": {"writeFiles": {"notes.md": "from a\n", "src/x.py": "x = 1\n"}},
                          "b": {"writeFiles": {"notes.md": "from b\n"}}})
    result = project.run()
    assert result.returncode == 0, result.stderr
    return project.root


@pytest.fixture
def planted(recorded: Path, tmp_path: Path, request: pytest.FixtureRequest
            ) -> tuple[Project, Path]:
    """A copy of the recorded execution with the plant of the test's ``plant`` parameter."""
    project = Project(tmp_path / "p")
    shutil.rmtree(project.root)
    shutil.copytree(recorded, project.root, symlinks=True)
    project.env["HANKWEAVE_HOME"] = str(project.root / "home")
    program, marker = evil_program(tmp_path)
    PLANTS[request.param](project.exec_dir / GIT_DIR, program)
    return project, marker


@pytest.mark.parametrize("planted", PLANTS, indirect=True)
def test_export_runs_no_program_planted_in_the_checkpoint_repository(planted, tmp_path):
    project, marker = planted
    result = project.hw("export", "-e", str(project.exec_dir), "-o", str(tmp_path / "r.tar.gz"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.tar.gz").stat().st_size > 0
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("planted", PLANTS, indirect=True)
def test_rollback_runs_no_program_planted_in_the_checkpoint_repository(planted):
    project, marker = planted
    result = project.hw("rollback", "-e", str(project.exec_dir), "--to", "a")
    assert result.returncode == 0, result.stderr
    assert (project.exec_dir / "agentRoot" / "notes.md").read_text() == "from a\n"
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("planted", PLANTS, indirect=True)
def test_replay_of_a_directory_runs_no_program_planted_in_its_checkpoint_repository(
        planted, tmp_path):
    project, marker = planted
    target = tmp_path / "replayed"
    result = project.hw("replay", str(project.exec_dir), "-e", str(target), "--headless")
    assert result.returncode == 0, result.stderr
    assert (target / "agentRoot" / "notes.md").read_text() == "from b\n"
    assert not marker.exists(), marker.read_text()


def test_a_plant_the_agent_writes_during_the_run_never_runs(tmp_path):
    """The agent of codon a writes both files through ``..``; the runtime's own checkpoints
    and a later export run nothing."""
    needs("git")
    project = Project(tmp_path / "p")
    program, marker = evil_program(tmp_path)
    config = (f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
              f"\tfsmonitor = {program}\n"
              f'[filter "x"]\n\tclean = {program} clean\n\tsmudge = {program} smudge\n')
    up = "../" + GIT_DIR.as_posix()
    project.write_hank(TWO_CODONS)
    project.write_script({
        "a": {"writeFiles": {"notes.md": "from a\n", f"{up}/config": config,
                             f"{up}/info/attributes": "* filter=x\n"}},
        "b": {"writeFiles": {"notes.md": "from b\n"}}})
    result = project.run()
    assert result.returncode == 0, result.stderr
    assert (project.exec_dir / GIT_DIR / "config").read_text() != config  # put back
    exported = project.hw("export", "-e", str(project.exec_dir), "-o", str(tmp_path / "r.tgz"))
    assert exported.returncode == 0, exported.stderr
    assert not marker.exists(), marker.read_text()
