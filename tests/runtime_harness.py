"""Helpers for in-process runtime tests: a hank project, a scripted fake agent, a finished run.

A :class:`Project` holds a hank directory, a data directory and an execution directory under
``tmp_path``, and an environment that loads only the kernel's test plugins (``FakeHarness`` and
the in-memory checkpoint backend), so a run never depends on a sibling package.  ``run`` drives
``hankweave run`` through :func:`~hankweave.app.launch.launch`; ``run_controlled`` does the
same inside an event loop and hands the live :class:`~hankweave.runtime.orchestrator.Runtime`
to a control coroutine (to skip a codon, stop the run, start it by hand).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from hankweave.app.launch import launch, prepare, run_async, run_prepared
from hankweave.app.request import LaunchRequest
from hankweave.runtime import orchestrator
from hankweave.state.store import load_state
from hankweave.state.types import CodonExecution, HankweaveState
from hankweave.testing.fake_harness import use_script
from hankweave.testing.project import HankProject

Control = Callable[[orchestrator.Runtime], Awaitable[None]]


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    """A codon on the fake model; a field given as None is left out."""
    item = {"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
            "continuationMode": "fresh", "promptText": f"Do {codon_id}.", **fields}
    return {key: value for key, value in item.items() if value is not None}


def loop(loop_id: str, codons: list[dict[str, Any]], terminate_on: dict[str, Any],
         **fields: Any) -> dict[str, Any]:
    return {"type": "loop", "id": loop_id, "name": f"Loop {loop_id}",
            "terminateOn": terminate_on, "codons": codons, **fields}


@dataclass
class Outcome:
    """A finished run: its exit code, the events it emitted, the state it left."""

    code: int
    events: list[dict[str, Any]]
    state: HankweaveState
    notices: list[str] = field(default_factory=list)

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events if e["type"] == event_type]

    def infos(self) -> list[str]:
        return [str(d.get("message", "")) for d in self.of_type("info")]

    def records(self, codon_id: str) -> list[CodonExecution]:
        """Every record of ``codon_id``, oldest run and attempt first."""
        return [c for run in reversed(self.state.runs) for c in run.codons
                if c.codon_id == codon_id]

    def record(self, codon_id: str) -> CodonExecution:
        """The newest record of ``codon_id``."""
        found = self.records(codon_id)
        assert found, f"no record of {codon_id}"
        return found[-1]

    def statuses(self) -> list[tuple[str, str]]:
        """(codon id, status) of the newest run's records, in order."""
        return [(c.codon_id, c.status) for c in self.state.runs[0].codons]


class Project(HankProject):
    """A hank, its data and an execution directory, run in this process."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.output_dir = root / "out"

    def request(self, events: list[dict[str, Any]], notices: list[str],
                **options: Any) -> LaunchRequest:
        options = {"headless": True, **options}
        return LaunchRequest.of(hank=str(self.hank_dir), data=str(self.data),
                             execution=str(self.exec_dir), cwd=self.root,
                             env=self.env, on_event=events.append, notify=notices.append,
                             **options)

    def run(self, script: dict[str, Any] | None = None, **options: Any) -> Outcome:
        """``hankweave run --headless`` with the fake agent playing ``script``."""
        events: list[dict[str, Any]] = []
        notices: list[str] = []
        use_script({"codons": script or {}})
        code = launch(self.request(events, notices, **options))
        return Outcome(code, events, self.state(), notices)

    def run_controlled(self, control: Control, script: dict[str, Any] | None = None,
                       timeout: float = 20, **options: Any) -> Outcome:
        """As :meth:`run`, with ``control(runtime)`` running alongside the live runtime."""
        events: list[dict[str, Any]] = []
        notices: list[str] = []
        use_script({"codons": script or {}})
        request = self.request(events, notices, **options)

        async def main() -> int:
            with capture_runtime() as runtimes:
                run = asyncio.create_task(run_prepared(prepare(request), request))
                while not runtimes and not run.done():
                    await asyncio.sleep(0.005)
                controller = asyncio.create_task(control(runtimes[0])) if runtimes else None
                await _finish_within(run, timeout, "the run")
                if controller is not None:
                    await _finish_within(controller, 1, "the control (the run ended first)")
                return run.result()

        code = run_async(main())
        return Outcome(code, events, self.state(), notices)

    def state(self) -> HankweaveState:
        return load_state(self.hankweave_dir)[0]

    def journal(self) -> list[dict[str, Any]]:
        path = self.hankweave_dir / "events" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextmanager
def capture_runtime() -> Iterator[list[orchestrator.Runtime]]:
    """Collect every :class:`Runtime` the launch path builds while the block runs."""
    runtimes: list[orchestrator.Runtime] = []

    class Captured(orchestrator.Runtime):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            runtimes.append(self)

    with mock.patch.object(orchestrator, "Runtime", Captured):
        yield runtimes


async def _finish_within(task: asyncio.Task[Any], seconds: float, what: str) -> None:
    """Wait for ``task``; cancel it and fail the test if it takes longer than ``seconds``."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        with suppress(BaseException):
            await task
        raise AssertionError(f"{what} did not finish within {seconds}s")
    task.result()  # re-raise what the task raised


async def wait_for_status(runtime: orchestrator.Runtime, codon_id: str, status: str,
                          timeout: float = 10) -> None:
    """Wait until ``codon_id``'s record in the runtime's current run reaches ``status``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        run = runtime.state.run_by_id(runtime.run_id or "")
        if run is not None and any(c.codon_id == codon_id and c.status == status
                                   for c in run.codons):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{codon_id} never reached {status}")
