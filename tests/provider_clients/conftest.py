"""The real provider clients (``anthropic``, ``openai``, litellm) against the mock provider.

These tests run in their own tox env, which installs the clients and sets
``HANKWEAVE_PROVIDER_CLIENTS=1``; without it (the kernel env, which has none of the clients)
this folder is not collected.  Every client is given the mock's 127.0.0.1 base URL explicitly,
so nothing here can reach a real provider.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from hankweave.mock_provider.server import MockProvider
from hankweave.testing.pytest_plugin import StartMock, mock_provider  # noqa: F401 (the fixture)

if os.environ.get("HANKWEAVE_PROVIDER_CLIENTS") != "1":
    collect_ignore_glob = ["test_*.py"]

# litellm fetches a price map from the internet at import unless told not to; and no proxy
# may stand between the clients and 127.0.0.1.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1"]))
os.environ["no_proxy"] = os.environ["NO_PROXY"]

Serve = Callable[[Mapping[str, Any]], MockProvider]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "requests.jsonl"


@pytest.fixture
def serve(log_path: Path, mock_provider: StartMock) -> Serve:  # noqa: F811 (the fixture)
    """``mock = serve(script)``: a running mock provider, logging to ``log_path`` (the public
    ``mock_provider`` fixture, stopped when the test ends)."""
    return lambda script: mock_provider(script, log_path=log_path)
