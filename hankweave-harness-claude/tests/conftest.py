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
def no_cli_left_behind():
    """No test leaves a Claude Code CLI running."""
    before = set(cli_processes())
    yield
    left = set(cli_processes()) - before
    assert not left, f"Claude Code CLI processes left running: {sorted(left)}"
