"""Bad input in real processes: every problem named with its path, exit 2, no traceback."""

from __future__ import annotations

import os

from integration.conftest import codon


def test_validation_errors_list_every_problem_with_its_path(project):
    project.write_hank([
        codon("a", model="no-such-model"),
        {"id": "b", "name": "B", "model": "fake", "promptText": "x"},
        codon("a", rigSetup=[{"type": "command", "command": {"run": ""}}]),
    ])
    for args in (("validate", str(project.hank_dir), str(project.data)),
                 ("run", str(project.hank_dir), str(project.data), "-e",
                  str(project.exec_dir), "--headless")):
        result = project.hw(*args)
        assert result.returncode == 2, result.stderr
        assert "hank[1].continuationMode" in result.stderr
        assert "hank[2].rigSetup[0].command.run" in result.stderr
        assert "Traceback" not in result.stderr
    assert not project.exec_dir.exists()


def test_strict_reference_rules_are_reported_together(project):
    outside = project.root / "outside.md"
    outside.write_text("outside")
    (project.hank_dir / "real").mkdir()
    (project.hank_dir / "real" / "p.md").write_text("p")
    os.symlink(project.hank_dir / "real", project.hank_dir / "linked")
    project.write_hank([
        codon("abs", promptText=None, promptFile=str(outside)),
        codon("up", promptText=None, promptFile="../outside.md"),
        codon("back", promptText=None, promptFile="real\\p.md"),
        codon("sym", promptText=None, promptFile="linked/p.md"),
    ])
    result = project.hw("validate", str(project.hank_dir), str(project.data))
    assert result.returncode == 2
    for path, word in (("hank[0].promptFile", "absolute"), ("hank[1].promptFile", "outside"),
                       ("hank[2].promptFile", "backslash"), ("hank[3].promptFile", "symlink")):
        lines = [line for line in result.stderr.splitlines() if path in line]
        assert lines and word in " ".join(lines), (path, result.stderr)
