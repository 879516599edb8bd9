"""The runtime's side of the LLM proxy: a ceiling held between two messages of an agent.

The agent here calls the gate as the proxy would for each of its requests (``admit``, then
``charge`` with what the answer used) and reports the same usage in its message, as a real
agent does: the two count the same answers once.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hankweave.codonlog import assistant_text, error_result, init_record, result_record
from hankweave.execution.layout import ExecutionLayout
from hankweave.harness import AttemptContext, CodonRequest, Harness
from hankweave.runtime import codon_runner
from hankweave.runtime.allocation import Breach, EntryLimits, Limit
from hankweave.runtime.budget import CodonBudget
from hankweave.runtime.codon_runner import AttemptOutcome, AttemptSpec, CodonRunner
from hankweave.runtime.metering import ProxyGate
from hankweave.runtime.reporter import Reporter
from hankweave.state.store import StateStore
from hankweave.state.transitions import (
    CodonMetadata,
    CodonStarted,
    CodonStartedData,
    CodonTransitioned,
    CodonTransitionedData,
    RunStarted,
    RunStartedData,
)
from hankweave.state.types import FreshStart, TokenUsage, last_record
from hankweave.testing.harness import CONTRACT_MODEL

GATE = ProxyGate()
"""What the proxy would call (one per runtime)."""
CAP = 0.01
"""$0.01: 10,000 input tokens of the contract model ($1 per million)."""


class ProxiedAgent(Harness):
    """An agent whose every request goes through the gate, as through the proxy."""

    name: ClassVar[str] = "proxied"
    package: ClassVar[str] = "hankweave-tests"
    answers: ClassVar[list[int]] = []
    """The input tokens of each answer, in order; the agent then says it is done."""
    parallel: ClassVar[int] = 1
    """Requests it sends at once after its first answer (a tool-using agent's side calls)."""
    obeys: ClassVar[bool] = True
    """Ends its turn at a refusal (False: keeps asking)."""
    refusals: ClassVar[list[str]] = []

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[Any]:
        yield init_record("s-1")
        for number, tokens in enumerate(self.answers):
            count = self.parallel if number else 1
            admissions = await asyncio.gather(*(GATE.admit() for _ in range(count)))
            refused = [a.refusal for a in admissions if a.refusal is not None]
            if refused:
                type(self).refusals.append(refused[0].message)
                if not self.obeys:
                    while True:
                        await asyncio.sleep(0.01)  # (a request is network I/O)
                        await GATE.admit()
                yield error_result(f"API Error: 400 {refused[0].message}")
                return
            usage = TokenUsage(input_tokens=tokens, output_tokens=0)
            for admission in admissions:
                admission.charge(usage, "contract-model")
            yield assistant_text(f"answer {number}", usage=usage)
        yield result_record(session_id="s-1", success=True, text="done")


@dataclass
class Asked:
    """A person at a ceiling that asks: what they decide, and what they were asked."""

    decide: Callable[[], Awaitable[float | str]]
    breaches: list[Breach] = field(default_factory=list)

    async def __call__(self, breach: Breach) -> float | str:
        self.breaches.append(breach)
        return await self.decide()


def attempt(tmp_path: Path, answers: list[int], *, on_exceeded: str = "complete",
            ask: Asked | None = None, parallel: int = 1, obeys: bool = True
            ) -> tuple[AttemptOutcome, CodonRunner]:
    agent = type("Agent", (ProxiedAgent,), {"answers": answers, "parallel": parallel,
                                             "obeys": obeys, "refusals": []})
    return asyncio.run(_attempt(tmp_path, agent, on_exceeded, ask))


async def _attempt(root: Path, agent: type[ProxiedAgent], on_exceeded: str,
                   ask: Asked | None) -> tuple[AttemptOutcome, CodonRunner]:
    layout = ExecutionLayout(root)
    store = StateStore.open(layout.hankweave_dir)
    await store.transition(RunStarted(data=RunStartedData(
        run_id="r", run_folder=str(layout.run_folder("r")), git_branch="test",
        starting_conditions=FreshStart(), server_pid=os.getpid())))
    await store.transition(CodonStarted(data=CodonStartedData(run_id="r", codon_id="c")))
    for status, metadata in (("starting", CodonMetadata()), ("initializing", CodonMetadata(
            claude_pid=os.getpid(), claude_log_path="log"))):
        previous = last_record(store.state.runs[0], "c")
        assert previous is not None
        await store.transition(CodonTransitioned(data=CodonTransitionedData.model_validate(
            {"runId": "r", "codonId": "c", "from": previous[1].status, "to": status,
             "metadata": metadata})))
    limits = EntryLimits("c", dollars=Limit(CAP, "codon cap"), on_exceeded=on_exceeded)
    raised = EntryLimits("c", dollars=Limit(1.0, "codon cap"), on_exceeded=on_exceeded)
    budget = CodonBudget(codon_id="c", limits=limits, started=0.0, clock=lambda: 0.0,
                         resolve=lambda: (raised, ()))
    request = CodonRequest(prompt="go", system_prompt=None, model=CONTRACT_MODEL,
                           work_dir=root, codon_id="c", run_id="r")
    spec = AttemptSpec(request=request, harness=agent, log_path=layout.codon_log_path("r", "c"),
                       stderr_path=layout.codon_stderr_path("r", "c"),
                       state_dir=layout.harness_state_dir(agent.name), ask_budget=ask)
    runner = CodonRunner(spec, store=store, reporter=Reporter(lambda *_: None), budget=budget)
    GATE.attach(runner)
    try:
        return await runner.run(), runner
    finally:
        GATE.detach(runner)


def test_past_a_ceiling_the_next_request_is_refused_and_the_agent_ends_its_turn(
        tmp_path: Path) -> None:
    outcome, runner = attempt(tmp_path, [2_000, 9_000, 1_000])

    # The second answer crossed the cap; the agent was not stopped at it, its next request was
    # refused, and it ended its turn at that error by itself.
    assert runner.spec.harness.refusals == [  # type: ignore[attr-defined]
        "cost limit $0.01 (codon cap) reached: $0.01 spent"]
    assert outcome.interrupted is None
    assert outcome.budget_exceeded is not None and outcome.budget_exceeded.limit == CAP
    assert runner.parser.assistant_messages == 2


def test_the_proxy_and_the_agents_messages_count_the_same_answers_once(
        tmp_path: Path) -> None:
    # $0.004 + $0.005: under the cap, counted once (twice would be $0.018).
    outcome, runner = attempt(tmp_path, [4_000, 5_000])

    assert outcome.success and outcome.budget_exceeded is None
    assert runner.budget is not None and round(runner.budget.used("cost"), 6) == 0.009


def test_an_agent_that_keeps_asking_past_the_ceiling_is_stopped(tmp_path: Path) -> None:
    outcome, _ = attempt(tmp_path, [11_000, 1_000], obeys=False)

    assert outcome.interrupted == "budget"
    assert outcome.budget_exceeded is not None


def test_at_a_ceiling_that_asks_the_requests_wait_for_one_decision(tmp_path: Path) -> None:
    async def raise_it() -> float:
        await asyncio.sleep(0.2)
        return 1.0

    asked = Asked(raise_it)
    outcome, runner = attempt(tmp_path, [11_000, 1_000, 1_000], on_exceeded="ask", ask=asked,
                              parallel=3)

    # Three requests held at once, one question; raised, they all went on in the same pass.
    assert len(asked.breaches) == 1 and asked.breaches[0].limit == CAP
    assert outcome.success and outcome.budget_exceeded is None
    assert runner.parser.assistant_messages == 3
    assert runner.spec.harness.refusals == []  # type: ignore[attr-defined]


def test_a_rejected_ceiling_refuses_the_held_request_and_is_not_asked_again(
        tmp_path: Path) -> None:
    async def reject() -> str:
        return "reject"

    asked = Asked(reject)
    outcome, runner = attempt(tmp_path, [11_000, 1_000], on_exceeded="ask", ask=asked)

    assert len(asked.breaches) == 1
    assert runner.spec.harness.refusals  # type: ignore[attr-defined]
    assert outcome.interrupted == "budget" and outcome.budget_exceeded is not None


def test_when_the_run_stops_to_wait_for_the_person_the_held_agent_is_stopped(
        tmp_path: Path) -> None:
    async def wait() -> str:
        return "wait"

    outcome, runner = attempt(tmp_path, [11_000, 1_000], on_exceeded="ask", ask=Asked(wait))

    # Stopped while its request was held: the resumed run carries the same attempt on.
    assert outcome.interrupted == "human"
    assert runner.parser.assistant_messages == 1


def test_a_request_between_codons_goes_uncounted() -> None:
    admission = asyncio.run(ProxyGate().admit())

    assert (admission.codon_id, admission.refusal) == (None, None)
    assert admission.charge(TokenUsage(input_tokens=5), "m") is None


def test_a_refused_agent_gets_a_grace_period_then_is_stopped(
        tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(codon_runner, "REFUSAL_GRACE_S", 0.2)

    class Lingering(ProxiedAgent):
        async def run_codon(self, request: CodonRequest, context: AttemptContext
                            ) -> AsyncIterator[Any]:
            yield init_record("s-1")
            usage = TokenUsage(input_tokens=11_000)
            (await GATE.admit()).charge(usage, "m")
            yield assistant_text("crossing", usage=usage)
            assert (await GATE.admit()).refusal is not None
            await asyncio.sleep(30)  # neither ends its turn nor asks again
            yield result_record(session_id="s-1", success=True, text="done")

    outcome, _ = asyncio.run(_attempt(tmp_path, Lingering, "complete", None))

    assert outcome.interrupted == "budget"


def test_what_the_proxy_measured_beyond_the_agents_messages_is_counted_in_the_state(
        tmp_path: Path) -> None:
    """A side request the agent keeps to itself (or an answer cut off before its message):
    the record's cost becomes what the proxy measured, so later ceilings see it."""
    class SideRequests(ProxiedAgent):
        async def run_codon(self, request: CodonRequest, context: AttemptContext
                            ) -> AsyncIterator[Any]:
            yield init_record("s-1")
            usage = TokenUsage(input_tokens=2_000)
            (await GATE.admit()).charge(usage, "m")
            yield assistant_text("reported", usage=usage)
            (await GATE.admit()).charge(TokenUsage(input_tokens=3_000, output_tokens=100), "m")
            yield result_record(session_id="s-1", success=True, text="done")

    outcome, runner = asyncio.run(_attempt(tmp_path, SideRequests, "complete", None))

    record = last_record(runner.store.state.runs[0], "c")
    assert outcome.success and record is not None
    # $0.002 reported + $0.0035 measured on the side ($1/M in, $5/M out).
    assert round(record[1].current_cost, 6) == 0.0055  # type: ignore[union-attr]
    assert record[1].current_tokens == TokenUsage(  # type: ignore[union-attr]
        input_tokens=5_000, output_tokens=100)


def test_a_stop_while_a_request_is_held_refuses_it_as_stopping(tmp_path: Path) -> None:
    held = asyncio.Event()

    async def never() -> float:
        held.set()
        await asyncio.sleep(30)
        return 1.0

    async def stop_when_held() -> tuple[AttemptOutcome, Any]:
        attempt = asyncio.ensure_future(
            _attempt(tmp_path, type("Agent", (ProxiedAgent,), {
                "answers": [11_000, 1_000], "refusals": []}), "ask", Asked(never)))
        await asyncio.wait_for(held.wait(), 5)
        runner = GATE._runner
        assert runner is not None
        another = asyncio.ensure_future(runner.admit_request())  # a second request, held
        await asyncio.sleep(0.05)
        runner.interrupt("stop")
        refusal = await asyncio.wait_for(another, 5)
        return await attempt, refusal

    (outcome, _), refusal = asyncio.run(stop_when_held())

    assert outcome.interrupted == "stop"
    assert refusal is not None and refusal.reason == "stopping"
