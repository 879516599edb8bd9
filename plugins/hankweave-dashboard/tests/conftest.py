from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_helpers import Dashboard, Project, dashboard


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    created = Project(tmp_path)
    try:
        yield created
    finally:
        created.stop()


@pytest.fixture
def finished(project: Project) -> Path:
    """A completed execution of two codons: ``write`` writes two files, ``edit`` edits one.
    Unpaced: what it is made for is its record, and many tests make one."""
    hank = project.hank("notes", {
        "write": {"messages": 4, "writeFiles": {"notes.md": "first line\n", "extra.txt": "x\n"},
                  "cost": 0.02},
        "edit": {"messages": 2, "writeFiles": {"notes.md": "first line\nsecond line\n"},
                 "cost": 0.01},
    })
    execution = project.run(hank, project.data("set-a"), "finished")
    assert project.codon_status(execution, "edit") == "completed", \
        execution.with_suffix(".log").read_text()
    return execution


@pytest.fixture
def served(project: Project, finished: Path) -> Iterator[Dashboard]:
    with dashboard(project) as running:
        yield running


@pytest.fixture
def forked(project: Project, finished: Path) -> Path:
    """A fork of ``finished`` after ``write`` whose ``edit`` writes other notes and answers
    otherwise: the two share ``write`` and diverge at ``edit``."""
    fork = project.fork(finished, "write", "finished-fork", {
        "edit": {"messages": 3, "writeFiles": {"notes.md": "first line\nanother line\n"},
                 "cost": 0.015}})
    assert project.codon_status(fork, "edit") == "completed"
    return fork
