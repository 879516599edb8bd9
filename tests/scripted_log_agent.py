"""A test plugin: an agent that yields given codon-log lines, as the real Claude CLI wrote them.

``HANKWEAVE_TEST_LOG_SCRIPT`` names a JSON file ``{codonId: [line or {"sleep": seconds}, ...]}``:
the harness ``log-agent`` (which claims every model) yields each line in order, pausing where
the script says, so tests drive the live runner with logs of any shape.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from hankweave.harness import AttemptContext, CodonRequest, Harness
from hankweave.hookspecs import hookimpl

SCRIPT_ENV = "HANKWEAVE_TEST_LOG_SCRIPT"


class LogAgent(Harness):
    name = "log-agent"

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[dict[str, Any]]:
        script = json.loads(Path(os.environ[SCRIPT_ENV]).read_text(encoding="utf-8"))
        for step in script[request.codon_id]:
            if set(step) == {"sleep"}:
                await asyncio.sleep(step["sleep"])
            else:
                yield step


@hookimpl
def register_harnesses(register: Any) -> None:
    register(LogAgent)


@hookimpl
def select_harness(model: Any, provider: Any, harnesses: Mapping[str, Any]) -> str | None:
    return LogAgent.name if LogAgent.name in harnesses else None
