"""Fixtures of the Claude harness's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from claude_helpers import HankProject, cli_processes

pytest_plugins = ["hankweave.testing.pytest_plugin"]


@pytest.fixture
def project(tmp_path: Path) -> HankProject:
    return HankProject(tmp_path)


@pytest.fixture(autouse=True)
def no_cli_left_behind(tmp_path_factory: pytest.TempPathFactory):
    """No test leaves a Claude Code CLI running (of this session's: CI runs another tox env
    beside this one, whose CLIs are its own)."""
    root = tmp_path_factory.getbasetemp().resolve()
    before = set(cli_processes(root))
    yield
    left = set(cli_processes(root)) - before
    assert not left, f"Claude Code CLI processes left running: {sorted(left)}"
