"""The crash-injection suite: each checkpoint backend, killed at chosen points and at random.

It needs both checkpoint backends installed (``tox -e crash``).  Without them it is skipped,
unless ``HANKWEAVE_CRASH_MIN_KILLS`` is set (the crash env sets it): then a missing backend is
an error, and so is a session that made fewer kills than that, so CI cannot pass a suite that
silently killed nothing.  ``--crash-kills N`` (registered in ``tests/conftest.py``) sets how
many kills the random-kill tests make.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hankweave.registry import get_registry
from tests.crash.crash_hank import BACKENDS, TALLY, CrashProject

MIN_KILLS_ENV = "HANKWEAVE_CRASH_MIN_KILLS"
DEFAULT_RANDOM_KILLS = 24


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run of the hank: what every crashed execution must end up with."""

    trees: dict[str, dict[str, str]]
    reached: Counter[str]
    """The kill points a whole run reaches, and how often."""


def _required() -> bool:
    return bool(os.environ.get(MIN_KILLS_ENV))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    if name not in get_registry().checkpoint_backends():
        message = (f"the crash suite needs the {name} checkpoint backend"
                   f" (pip install -e plugins/hankweave-checkpoint-{name}; tox -e crash)")
        if _required():
            pytest.fail(message)
        pytest.skip(message)
    return name


_REFERENCES: dict[str, Reference] = {}


@pytest.fixture
def reference(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """The backend's uninterrupted run, made once per session."""
    if backend not in _REFERENCES:
        project = CrashProject(tmp_path_factory.mktemp(f"reference-{backend}"), backend)
        ending = project.run_to_completion()
        _REFERENCES[backend] = Reference(project.result_trees(), ending.reached)
    return _REFERENCES[backend]


@pytest.fixture
def project(backend: str, tmp_path: Path) -> Iterator[CrashProject]:
    yield CrashProject(tmp_path, backend)


@pytest.fixture
def crash_kills(request: pytest.FixtureRequest) -> int:
    value = request.config.getoption("--crash-kills")
    return DEFAULT_RANDOM_KILLS if value is None else int(value)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    floor = int(os.environ.get(MIN_KILLS_ENV) or 0)
    if floor and TALLY.total < floor and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLY.runs:
        return
    terminalreporter.write_line(
        f"crash suite: {TALLY.total} kills ({TALLY.at_points} at kill points,"
        f" {TALLY.at_random_moments} from outside at random moments) in {TALLY.runs} runs,"
        f" {TALLY.seconds:.0f}s")
    floor = int(os.environ.get(MIN_KILLS_ENV) or 0)
    if floor and TALLY.total < floor:
        terminalreporter.write_line(f"crash suite: FAILED: fewer than {MIN_KILLS_ENV}={floor}"
                                    " kills", red=True)
