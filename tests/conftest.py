"""Shared pytest configuration."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    # Here rather than in tests/crash/conftest.py: an option must be registered by a conftest
    # pytest loads before it parses the command line, whether it runs tests/ or tests/crash/.
    parser.addoption("--crash-kills", type=int, default=None, metavar="N",
                     help="kills the crash suite's random-kill tests make (default 40)")
