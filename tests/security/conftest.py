"""The attacker's suite (issue 34): one test per way a recording, an execution directory or an
export could be turned against the person who opens or shares it (helpers: ``support.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.support import Project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)
