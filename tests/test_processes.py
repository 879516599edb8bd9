"""Agent processes carry a marker; what they leave behind is found and ended by it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from hankweave.fsutil import process_running
from hankweave.processes import (
    AGENT_MARKER_ENV,
    agent_marker,
    end_agents_of_crashed_run,
    marked_processes,
    marker_of,
)
from hankweave.state.boot import take_ownership
from hankweave.state.store import StateStore
from hankweave.state.transitions import AgentProcessData, AgentProcessReported
from tests.transition_builders import lifecycle_to, run_started

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")


def sleeper(marker: str | None, *, new_session: bool = False) -> subprocess.Popen[bytes]:
    env = {**os.environ, **({AGENT_MARKER_ENV: marker} if marker else {})}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                            start_new_session=new_session)


def test_processes_are_found_by_their_exact_marker_or_its_prefix() -> None:
    run = f"run-{os.getpid()}"
    mine, other, unmarked = (sleeper(agent_marker(run, "a")), sleeper(agent_marker(run, "b")),
                             sleeper(None))
    try:
        assert marker_of(mine.pid) == f"{run}/a"
        assert marked_processes(f"{run}/a") == [mine.pid]
        assert marked_processes(f"{run}/", prefix=True) == sorted([mine.pid, other.pid])
        assert unmarked.pid not in marked_processes("", prefix=True)
    finally:
        for process in (mine, other, unmarked):
            process.kill()
            process.wait()


def test_a_crashed_runs_agents_are_ended_but_a_reused_pid_is_left_alone() -> None:
    run = f"crashed-{os.getpid()}"
    agent = sleeper(agent_marker(run, "a"))
    tool = sleeper(agent_marker(run, "a"), new_session=True)  # a tool in a session of its own
    stranger = sleeper(None)  # a process that now has a pid the state recorded
    try:
        ended = asyncio.run(end_agents_of_crashed_run(run, [agent.pid, stranger.pid]))
        assert sorted(ended) == sorted([agent.pid, tool.pid])
        for process in (agent, tool):
            process.wait(timeout=10)
        assert process_running(stranger.pid)
    finally:
        for process in (agent, tool, stranger):
            process.kill()
            process.wait()


def test_taking_over_a_crashed_execution_ends_the_agent_it_left_running(tmp_path) -> None:
    hw = tmp_path / ".hankweave"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    agent = sleeper(agent_marker("old", "a"))
    try:
        store = StateStore.open(hw)
        for transition in (run_started("old", pid=dead.pid),
                           *lifecycle_to("a", "running", run_id="old"),
                           AgentProcessReported(data=AgentProcessData(
                               run_id="old", codon_id="a", pid=agent.pid))):
            store.transition_sync(transition)
        store.close_sync()

        async def go() -> dict[str, list[int]]:
            owned = await take_ownership(hw)
            await owned.release()
            return owned.ended_agents

        assert asyncio.run(go()) == {"old": [agent.pid]}
        assert agent.wait(timeout=10) is not None
    finally:
        agent.kill()
        agent.wait()


def test_nothing_an_attempt_started_outlives_it(tmp_path) -> None:
    from collections.abc import AsyncIterator
    from typing import Any, ClassVar

    from hankweave.codonlog import init_record, result_record
    from hankweave.harness import AttemptContext, CodonRequest, Harness
    from hankweave.testing import run_attempt
    from hankweave.testing.harness import CONTRACT_MODEL

    started: list[subprocess.Popen[bytes]] = []

    class LeavesAToolBehind(Harness):
        name: ClassVar[str] = "leaves-a-tool"
        package: ClassVar[str] = "hankweave-tests"

        async def run_codon(self, request: CodonRequest, context: AttemptContext
                            ) -> AsyncIterator[Any]:
            agent = sleeper(request.env[AGENT_MARKER_ENV])
            tool = sleeper(request.env[AGENT_MARKER_ENV], new_session=True)
            started.extend([agent, tool])
            await context.report_process(agent.pid)
            yield init_record("s-1")
            agent.kill()  # the agent ends; the tool it started in a session of its own does not
            agent.wait()
            yield result_record(session_id="s-1", success=True, text="done")

    marker = agent_marker(f"r-{os.getpid()}", "c")
    request = CodonRequest(prompt="p", system_prompt=None, model=CONTRACT_MODEL,
                           work_dir=tmp_path, env={**os.environ, AGENT_MARKER_ENV: marker},
                           codon_id="c", run_id="r")
    try:
        run = asyncio.run(run_attempt(LeavesAToolBehind, request, tmp_path / "exec"))
        assert run.outcome.success
        tool = started[1]
        assert tool.wait(timeout=10) is not None
        assert marked_processes(marker) == []
    finally:
        for process in started:
            process.kill()
            process.wait()
