"""A harness whose agent is busy (a tool runs, no records for a while) gets the busy limit
instead of the idle timeout, as the original pi watchdog gave ``max(idle, 300 s)``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hankweave.codonlog import init_record, result_record
from hankweave.harness import AttemptContext, CodonRequest, Harness
from hankweave.runtime import codon_runner
from hankweave.testing import run_attempt
from hankweave.testing.harness import CONTRACT_MODEL


class SlowTool(Harness):
    name: ClassVar[str] = "slow-tool"
    package: ClassVar[str] = "hankweave-tests"
    seconds: ClassVar[float] = 0.0
    busy: ClassVar[bool] = True

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[Any]:
        yield init_record("s-1")
        if self.busy:
            with context.busy():
                await asyncio.sleep(self.seconds)
        else:
            await asyncio.sleep(self.seconds)
        yield result_record(session_id="s-1", success=True, text="done")


def attempt(tmp_path: Path, seconds: float, *, busy: bool) -> Any:
    harness = type("Slow", (SlowTool,), {"seconds": seconds, "busy": busy})
    request = CodonRequest(prompt="p", system_prompt=None, model=CONTRACT_MODEL,
                           work_dir=tmp_path, codon_id="c", run_id="r")
    return asyncio.run(run_attempt(harness, request, tmp_path / "exec", idle_timeout_s=0.2))


@pytest.fixture(autouse=True)
def short_busy_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codon_runner, "BUSY_IDLE_TIMEOUT_S", 1.5)


def test_a_busy_agent_outlasts_the_idle_timeout(tmp_path: Path) -> None:
    run = attempt(tmp_path, 0.6, busy=True)
    assert run.outcome.success and run.outcome.interrupted is None


def test_the_busy_limit_still_ends_an_agent_busy_for_too_long(tmp_path: Path) -> None:
    run = attempt(tmp_path, 3.0, busy=True)
    assert run.outcome.interrupted == "idle"
    assert run.outcome.failure_reason is not None
    assert run.outcome.failure_reason.type == "timeout"


def test_an_agent_that_is_not_busy_gets_the_idle_timeout(tmp_path: Path) -> None:
    run = attempt(tmp_path, 0.6, busy=False)
    assert run.outcome.interrupted == "idle"
