"""Fixtures of the replay plugin's tests (helpers live in ``replay_helpers``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_helpers import Project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)
