"""A launch reads the hank file once: the settings layers and the preflight share what was read
(issue 35), so a run cannot validate one version of the file and run another."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hankweave.cli.validate_cmd import validate_command
from hankweave.config import hank as hank_module
from tests.runtime_harness import Project, codon
from tests.test_cli_validate import fake_registry  # noqa: F401 - the fixture, used below


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path ``load_hank`` is asked to read, wherever it is imported from."""
    seen: list[Path] = []
    real = hank_module.load_hank

    def counting(path: Path, *args: Any, **kwargs: Any) -> Any:
        seen.append(Path(path))
        return real(path, *args, **kwargs)

    import hankweave.app.preflight as preflight

    monkeypatch.setattr(hank_module, "load_hank", counting)
    monkeypatch.setattr(preflight, "load_hank", counting)
    return seen


def test_a_run_reads_its_hank_once(tmp_path: Path, reads: list[Path]) -> None:
    project = Project(tmp_path)
    project.write_hank([codon("a"), codon("b")])
    assert project.run().code == 0
    assert reads == [project.hank_dir / "hank.json"]


@pytest.mark.usefixtures("fake_registry")
def test_validate_reads_the_hank_once(tmp_path: Path, reads: list[Path]) -> None:
    project = Project(tmp_path)
    project.write_hank([codon("a")])
    result = CliRunner().invoke(validate_command, [str(project.hank_dir), str(project.data)],
                                env=project.env)
    assert result.exit_code == 0, result.output
    assert reads == [project.hank_dir / "hank.json"]
