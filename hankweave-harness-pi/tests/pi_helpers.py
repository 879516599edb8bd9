"""Helpers of the pi harness's tests."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hankweave.api import AGENT_MARKER_ENV, CodonRequest, ModelEntry, get_registry
from hankweave.testing import run_attempt
from hankweave_harness_pi import PiConfig, PiHarness


def model(spec: str) -> ModelEntry:
    return get_registry().resolve_model(spec)


def offline_env(mock_env: Mapping[str, str], **extra: str) -> dict[str, str]:
    """This process's environment without any provider key, with the mock's variables."""
    env = {name: value for name, value in os.environ.items()
           if not name.endswith(("_API_KEY", "_AUTH_TOKEN", "_BASE_URL", "_API_BASE"))
           and not name.startswith(("ANTHROPIC_", "OPENAI_", "HANKWEAVE_"))}
    return {**env, **mock_env, **extra}


def request(root: Path, mock_env: Mapping[str, str], prompt: str, *, spec: str = "gpt-5.2",
            entry: ModelEntry | None = None, **fields: Any) -> CodonRequest:
    work = root / "agentRoot"
    work.mkdir(parents=True, exist_ok=True)
    marker = {AGENT_MARKER_ENV: f"pi-tests/{root.name}"}
    env = offline_env(mock_env, **marker)
    values: dict[str, Any] = {
        "prompt": prompt, "system_prompt": "Be brief.", "model": entry or model(spec),
        "work_dir": work, "env": env, "env_overlay": {**mock_env, **marker}, "codon_id": "c",
        "run_id": "r"}
    values.update(fields)
    return CodonRequest(**values)


def attempt(req: CodonRequest, root: Path, config: PiConfig | None = None, **options: Any) -> Any:
    return asyncio.run(run_attempt(PiHarness, req, root / "exec", config=config, **options))


def log_records(run: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.log_path.read_text().splitlines() if line.strip()]
