"""pytest fixtures for hankweave plugin authors: ``pytest_plugins = ["hankweave.testing.pytest_plugin"]``.

``mock_provider(script, log_path=None)`` starts the scripted mock provider (a script model,
decoded JSON or a script file) for the test and returns the running provider; it is stopped
when the test ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from hankweave.mock_provider.script import MockScript
from hankweave.mock_provider.server import MockProvider, MockProviderThread
from hankweave.testing.mock_provider import start_mock_provider

StartMock = Callable[..., MockProvider]


@pytest.fixture
def mock_provider() -> Iterator[StartMock]:
    """A factory: ``mock = mock_provider({"rules": [...]}, log_path=tmp_path / "log.jsonl")``."""
    running: list[MockProviderThread] = []

    def start(script: MockScript | Mapping[str, Any] | Path | str, *,
              log_path: Path | None = None) -> MockProvider:
        thread = start_mock_provider(script, log_path=log_path)
        provider = thread.start()
        running.append(thread)
        return provider

    yield start
    for thread in running:
        thread.stop()
