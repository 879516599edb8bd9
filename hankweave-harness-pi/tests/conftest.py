"""Fixtures of the pi harness's tests: real litellm against the mock provider on 127.0.0.1."""

from __future__ import annotations

import os

# Before anything imports litellm: its price map from the wheel, never the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytest_plugins = ["hankweave.testing.pytest_plugin"]
