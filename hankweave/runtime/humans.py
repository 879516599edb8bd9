"""Human in the loop: the runtime side of interruptions (docs/human-in-the-loop.md).

:class:`HumanLoop` is the :class:`~hankweave.harness.AttemptPolicy` of a run.  Three things
wait for a person:

* the agent's ``ask_human`` question (harnesses call :meth:`HumanLoop.ask_human`);
* a tool call that a ``toolApproval`` rule of the hank or the codon holds
  (:meth:`HumanLoop.authorize_tool`);
* a codon's approval gate, ``approval: "before"`` or ``"after"`` (:meth:`HumanLoop.gate`,
  called by the drive loop).

* a budget ceiling whose ``onExceeded`` is ``ask`` (:meth:`HumanLoop.ask_budget`, called by
  the codon runner at the breach): the answer raises the ceiling, or rejects (docs/budgets.md).

Each creates an interruption, durable before anything else happens.  By default the run then
ends ``interrupted`` and the process exits (:data:`~hankweave.exitcodes.EXIT_INTERRUPTED`), so
nothing is held while a person takes hours; with ``--wait-for-answers`` the runtime stays up and
the call waits for an answer from the WebSocket (or its deadline).

A later ``hankweave run`` resumes as a run with reason ``resume``.  It *carries* the answers of
the run it resumes (and of the runs that one resumed, :func:`resume_chain`): a question asked
again, a held call made again or a gate reached again gets the recorded answer at once, so
nothing is asked twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from hankweave.fsutil import parse_iso, utc_now_iso
from hankweave.harness import (
    NO_HUMAN_MESSAGE,
    AttemptPolicy,
    CodonRequest,
    HumanReply,
    ToolDecision,
)
from hankweave.state.interruptions import (
    APPROVAL_OPTIONS,
    APPROVE,
    DEADLINE,
    REJECT,
    GivenAnswer,
    checked_answer,
    due_defaults,
    new_interruption_id,
    pending,
    resume_chain,
)
from hankweave.state.thread import ExecutionThread
from hankweave.state.transitions import (
    InterruptionAnswered,
    InterruptionAnsweredData,
    InterruptionCreated,
    InterruptionCreatedData,
)
from hankweave.state.types import (
    BudgetAsk,
    CodonExecution,
    ContinuationSource,
    ContinuationStart,
    HankweaveState,
    Interruption,
    Run,
    end_checkpoint,
)

if TYPE_CHECKING:
    from hankweave.config.hank import ToolApprovalRule
    from hankweave.runtime.allocation import Breach
    from hankweave.runtime.codon_runner import BudgetDecision
    from hankweave.runtime.context import RunContext

WAITING_FOR_HUMAN = "waiting for a human"
"""The shutdown reason of a run that ended on an interruption (exit code 3)."""

SKIPPED = "codon-skipped"
"""``answeredBy`` of a budget ask closed because its codon was skipped meanwhile."""

GateOutcome = Literal["go", "reject", "stop"]
"""What a gate decided: go on, rejected, or stop the run to wait for a person."""


def resume_conditions(state: HankweaveState, thread: ExecutionThread,
                      resumed: Run) -> ContinuationStart:
    """How a resume run starts: after the newest finished codon of the thread (the workspace
    is kept as the interrupted attempt left it), resuming ``resumed``."""
    for item in thread.codons:
        sha = end_checkpoint(item.codon)
        if item.codon.status in ("completed", "skipped") and sha:
            source = ContinuationSource(run_id=item.run_id, after_codon=item.codon.codon_id,
                                        checkpoint_sha=sha)
            break
    else:
        source = ContinuationSource(run_id=resumed.run_id, after_codon=None,
                                    checkpoint_sha=state.initial_checkpoint or "")
    return ContinuationStart(source=source, reason="resume", resumed_run_id=resumed.run_id)


# ----- the policy -----


class HumanLoop(AttemptPolicy):
    """Turns questions, held tool calls and gates into interruptions (see the module docstring).

    ``stop_attempt`` ends the codon attempt in progress (the runtime's interrupt ``human``);
    ``shutdown`` is set when the runtime shuts down: a gate waiting for an answer stops waiting.
    """

    def __init__(self, ctx: RunContext, *, wait: bool, stop_attempt: Callable[[], None],
                 shutdown: asyncio.Event | None = None) -> None:
        self.ctx = ctx
        self.wait = wait
        self._stop_attempt = stop_attempt
        self._answered: dict[str, asyncio.Event] = {}
        self._recording = 0
        self.shutdown = shutdown
        self.stopped_for: list[str] = []
        """The interruptions this runtime stopped for (the run ends ``interrupted``)."""

    @property
    def stopping(self) -> bool:
        """Whether an interruption is ending the run."""
        return bool(self.stopped_for)

    # ----- what harnesses ask -----

    async def ask_human(self, request: CodonRequest, question: str,
                        options: Sequence[str] | None) -> HumanReply:
        settings = self.ctx.codon_config(request.codon_id).ask_human_settings()
        if not settings.enabled:
            return HumanReply.unavailable(NO_HUMAN_MESSAGE)
        chosen = list(options) if options else None
        item = self._find(request.codon_id, lambda i: i.kind == "question"
                          and i.question == question and i.options == chosen)
        if item is None:
            item = await self._create(
                request.codon_id, "question", question, options=chosen,
                deadline_s=settings.deadline_seconds, default=settings.default_answer)
        answer = await self._answer_in_attempt(item)
        return HumanReply.answered(answer if isinstance(answer, str) else json.dumps(answer))

    async def authorize_tool(self, request: CodonRequest, name: str,
                             tool_input: Mapping[str, Any]) -> ToolDecision:
        rule = self._rule_for(request.codon_id, name, tool_input)
        if rule is None:
            return ToolDecision.allow()
        held = dict(tool_input)
        item = self._find(request.codon_id, lambda i: i.kind == "tool-approval"
                          and i.tool_name == name and i.tool_input == held)
        if item is None:
            item = await self._create(
                request.codon_id, "tool-approval",
                f"Allow the agent of codon {request.codon_id} to call {name}"
                f" {_shown_input(held)}?", options=list(APPROVAL_OPTIONS), tool_name=name,
                tool_input=held, deadline_s=rule.deadline_seconds, default=rule.default_answer)
        if await self._answer_in_attempt(item) == APPROVE:
            return ToolDecision.allow()
        return ToolDecision.deny(f"A person denied this call to {name}"
                                 f" ({item.answered_by}). Do not make it again; find another"
                                 " way or explain why it is needed.")

    # ----- budget ceilings (the codon runner asks) -----

    async def ask_budget(self, codon_id: str, breach: Breach) -> BudgetDecision:
        """A person's decision at ``codon_id``'s breached ``ask`` ceiling: the amount they
        granted, ``reject``, or ``wait`` (without ``--wait-for-answers``: the run stops, and
        its resume carries the answer)."""
        from hankweave.runtime.budget import extension_of

        item = await self._create(codon_id, "budget", budget_question(codon_id, breach),
                                  options=None, deadline_s=None, default=None,
                                  budget=BudgetAsk.model_validate({
                                      "scope": breach.scope, "loopId": breach.loop_id,
                                      "currency": breach.currency, "limit": breach.limit,
                                      "used": breach.used, "source": breach.source}))
        if not self.wait:
            self.stopped_for.append(item.id)
            return "wait"
        answered = await self._wait_for_answer(item)
        if answered is None:  # the runtime shuts down; the ask still waits in state
            self.stopped_for.append(item.id)
            return "wait"
        amount = extension_of(answered.answer)
        if amount is None:
            return "reject"
        self.ctx.budget.grant(codon_id, breach, amount)
        return amount

    async def withdraw_budget_asks(self, codon_id: str) -> None:
        """The codon was skipped while its ceiling asked: the ask is closed as rejected (by
        ``codon-skipped``), so no later run waits for an answer about a skipped codon."""
        for item in pending(self.ctx.state):
            if item.kind == "budget" and item.codon_id == codon_id \
                    and item.run_id == self.ctx.run_id:
                await self._record_answer(item.id, REJECT, SKIPPED)

    def budget_rejected(self, codon_id: str) -> Interruption | None:
        """The rejected ceiling of the interrupted attempt this run carries on, if a person
        rejected it: the attempt then ends as the breach ends it (``complete``)."""
        carried = [item for item in self.carried(codon_id) if item.kind == "budget"]
        return carried[-1] if carried and carried[-1].answer == REJECT else None

    # ----- gates (the drive loop asks) -----

    async def gate(self, codon_id: str, when: Literal["before", "after"]) -> GateOutcome:
        """The ``approval`` gate of ``codon_id`` at ``when``: before it starts, or after it
        completed ("go" when it has no such gate)."""
        gate = self.ctx.codon_config(codon_id).approval_gate()
        if gate is None or gate.when != when:
            return "go"
        item = self._find(codon_id, lambda i: i.kind == "approval" and i.gate == when)
        if item is None:
            what = "starting codon" if when == "before" else "the result of codon"
            item = await self._create(
                codon_id, "approval",
                gate.question or f"Approve {what} {codon_id} ({self.ctx.codon_name(codon_id)})?",
                options=list(APPROVAL_OPTIONS), gate=when, deadline_s=gate.deadline_seconds,
                default=gate.default_answer)
        if item.status == "pending":
            if not self.wait:
                self.stopped_for.append(item.id)
                return "stop"
            answered = await self._wait_for_answer(item)
            if answered is None:
                return "stop"  # the runtime shuts down; the gate still waits in state
            item = answered
        return "go" if item.answer == APPROVE else "reject"

    # ----- answers -----

    async def answer(self, interruption_id: str, given: GivenAnswer, by: str) -> Interruption:
        """Record a person's answer (the WebSocket's ``interruption.answer``); an
        :class:`~hankweave.state.interruptions.AnswerError` changes nothing."""
        value = checked_answer(self.ctx.state, interruption_id, given)
        return await self._record_answer(interruption_id, value, by)

    async def apply_due_defaults(self) -> None:
        """Record the default answer of every pending interruption whose deadline passed."""
        for item, default in due_defaults(self.ctx.state, datetime.now(UTC)):
            await self._record_answer(item.id, default, DEADLINE)

    async def _record_answer(self, interruption_id: str, value: Any, by: str) -> Interruption:
        await self.ctx.transition(InterruptionAnswered(data=InterruptionAnsweredData(
            interruption_id=interruption_id, answer=value, answered_by=by)))
        item = self.ctx.state.interruption(interruption_id)
        assert item is not None
        self.ctx.reporter.interruption_answered(item)
        self._event(interruption_id).set()
        return item

    def _event(self, interruption_id: str) -> asyncio.Event:
        return self._answered.setdefault(interruption_id, asyncio.Event())

    async def _answer_in_attempt(self, item: Interruption) -> Any:
        """The answer of ``item`` for the agent waiting in a tool call.  Without
        ``--wait-for-answers`` the attempt ends instead, and this never returns."""
        if item.status == "answered":
            return item.answer
        if self.wait:
            answered = await self._wait_for_answer(item)
            if answered is not None:
                return answered.answer
        else:
            self.stopped_for.append(item.id)
            if self._recording == 0:  # calls made together (parallel tool calls) record first
                asyncio.get_running_loop().call_soon(self._stop_attempt)
        # The attempt ends (for the interruption, or a shutdown) and cancels this call.
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable")

    async def _wait_for_answer(self, item: Interruption) -> Interruption | None:
        """Wait until ``item`` is answered, or its deadline passes (its default applies); None
        when the runtime shuts down first."""
        timeout = None
        if item.deadline is not None:
            timeout = max(0.0, (parse_iso(item.deadline) - datetime.now(UTC)).total_seconds())
        self.ctx.reporter.info(f"Waiting for a person to answer {item.id}: {item.question}")
        waits = {asyncio.ensure_future(self._event(item.id).wait())}
        if self.shutdown is not None:
            waits.add(asyncio.ensure_future(self.shutdown.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        found = self.ctx.state.interruption(item.id)
        assert found is not None
        if found.status == "answered":
            return found
        if self.shutdown is not None and self.shutdown.is_set():
            return None
        return await self._record_answer(item.id, item.default_answer, DEADLINE)

    # ----- interruptions in scope -----

    def _find(self, codon_id: str, match: Callable[[Interruption], bool]) -> Interruption | None:
        """The newest interruption of ``codon_id`` this run carries that ``match`` accepts,
        answered ones first."""
        chain = set(resume_chain(self.ctx.state, self.ctx.run_id))
        found = [item for item in self.ctx.state.interruptions
                 if item.codon_id == codon_id and item.run_id in chain and match(item)]
        answered = [item for item in found if item.status == "answered"]
        candidates = answered or found
        return candidates[-1] if candidates else None

    def carried(self, codon_id: str) -> list[Interruption]:
        """The answered questions and held calls of ``codon_id`` from the runs this run
        resumes (what its resumed attempt is told)."""
        chain = resume_chain(self.ctx.state, self.ctx.run_id)[1:]
        return [item for item in self.ctx.state.interruptions
                if item.codon_id == codon_id and item.run_id in chain
                and item.kind != "approval" and item.status == "answered"]

    def _rule_for(self, codon_id: str, name: str,
                  tool_input: Mapping[str, Any]) -> ToolApprovalRule | None:
        rules = [*(self.ctx.hank.tool_approval or ()),
                 *(self.ctx.codon_config(codon_id).tool_approval or ())]
        return next((rule for rule in rules if rule.matches(name, tool_input)), None)

    async def _create(self, codon_id: str,
                      kind: Literal["question", "approval", "tool-approval", "budget"],
                      question: str, *, options: list[str] | None,
                      deadline_s: float | None, default: Any, gate: str | None = None,
                      tool_name: str | None = None, tool_input: dict[str, Any] | None = None,
                      budget: BudgetAsk | None = None) -> Interruption:
        now = utc_now_iso()
        deadline = None
        if deadline_s is not None:
            deadline = (datetime.now(UTC) + timedelta(seconds=deadline_s)).isoformat(
                timespec="milliseconds").replace("+00:00", "Z")
        record = self._record_of(codon_id)
        item = Interruption.model_validate({
            "id": new_interruption_id(), "runId": self.ctx.run_id or "", "codonId": codon_id,
            "kind": kind, "question": question, "options": options, "gate": gate,
            "toolName": tool_name, "toolInput": tool_input,
            "sessionId": getattr(record, "claude_session_id", None) if record else None,
            "budget": budget, "createdAt": now, "deadline": deadline,
            "defaultAnswer": default if deadline is not None else None})
        self._recording += 1
        try:
            # Shielded: a parallel call's cancellation must not lose an acknowledged record.
            await asyncio.shield(self.ctx.transition(InterruptionCreated(
                data=InterruptionCreatedData(interruption=item))))
        finally:
            self._recording -= 1
        self.ctx.reporter.interruption_created(item)
        return item

    def _record_of(self, codon_id: str) -> Any:
        run = self.ctx.state.run_by_id(self.ctx.run_id or "")
        if run is None:
            return None
        return next((record for record in reversed(run.codons) if record.codon_id == codon_id),
                    None)

    # ----- resuming an interrupted attempt -----

    def continues_interrupted_attempt(self, codon_id: str) -> bool:
        """Whether ``codon_id``'s next attempt is the interrupted attempt carried on: this run
        resumes a run whose attempt of the codon stopped for a question or a held call
        (answered or not), and this run has not started the codon yet.

        That attempt is resumed, not made again: its rig setup ran and the workspace is as it
        left it, so neither is touched (docs/human-in-the-loop.md, "Resuming").  A retry after
        it is a new attempt.
        """
        if self._record_of(codon_id) is not None:
            return False
        chain = resume_chain(self.ctx.state, self.ctx.run_id)[1:]
        return any(item.codon_id == codon_id and item.run_id in chain
                   and item.kind != "approval" for item in self.ctx.state.interruptions)

    def interrupted_records(self, codon_id: str) -> list[CodonExecution]:
        """The records of the attempt this run carries on, newest first: it may have been
        interrupted in several runs (each resume carries it on again) and started in the
        oldest, or as a retry.  A record counts when its run paused it for a person, whether
        that run then ended waiting, or was stopped or killed while it waited."""
        found: list[CodonExecution] = []
        for run_id in resume_chain(self.ctx.state, self.ctx.run_id)[1:]:
            run = self.ctx.state.run_by_id(run_id)
            record = next((r for r in reversed(run.codons if run else ())
                           if r.codon_id == codon_id), None)
            paused = any(item.run_id == run_id and item.codon_id == codon_id
                         and item.kind != "approval" for item in self.ctx.state.interruptions)
            if record is None or record.status != "failed" or not paused:
                break
            found.append(record)
            if (record.attempt or 1) > 1:
                break  # a retry started afresh in that run
        return found

    def resumed_session(self, codon_id: str) -> str | None:
        """The agent session of ``codon_id``'s interrupted attempt that this run resumes."""
        if not self.carried(codon_id):
            return None
        chain = resume_chain(self.ctx.state, self.ctx.run_id)[1:]
        for run_id in chain:
            run = self.ctx.state.run_by_id(run_id)
            for record in reversed(run.codons if run else ()):
                session = getattr(record, "claude_session_id", None)
                if record.codon_id == codon_id and session:
                    return str(session)
        return None

    def resume_prompt(self, codon_id: str) -> str:
        """The user turn that tells a resumed agent what the person answered."""
        lines = ["You stopped to wait for a person. They have answered:"]
        for item in self.carried(codon_id):
            if item.kind == "question":
                shown = item.answer if isinstance(item.answer, str) else json.dumps(item.answer)
                lines.append(f'- You asked: "{item.question}". The answer: {shown}')
            elif item.kind == "budget" and item.budget is not None:
                from hankweave.runtime.budget import ceiling_name, describe_amount

                ask = item.budget
                amount = item.answer.get("extend") if isinstance(item.answer, dict) else 0
                lines.append(f"- A person raised the budget limit you reached (the"
                             f" {ceiling_name(ask.currency, ask.limit)}) by"
                             f" {describe_amount(ask.currency, float(amount or 0))}.")
            elif item.answer == APPROVE:
                lines.append(f"- Your call to {item.tool_name} {_shown_input(item.tool_input)}"
                             " was approved: make it again now.")
            else:
                lines.append(f"- Your call to {item.tool_name} {_shown_input(item.tool_input)}"
                             " was denied: do not make it; find another way.")
        lines.append("Continue your task from where you stopped.")
        return "\n".join(lines)

    def waiting(self) -> list[Interruption]:
        """The interruptions still waiting for an answer."""
        return pending(self.ctx.state)


def budget_question(codon_id: str, breach: Breach) -> str:
    """``codon draft reached its $2.00 ceiling (codon cap); spent $2.03; extend by?``"""
    from hankweave.runtime.budget import ceiling_name, describe_used

    whose = {"codon": "its", "run": "the run's", "loop": f"loop {breach.loop_id}'s"}[
        breach.scope]
    verb = "spent" if breach.currency == "cost" else "used"
    used = describe_used(breach.currency, breach.used, breach.limit)
    return (f"codon {codon_id} reached {whose} {ceiling_name(breach.currency, breach.limit)}"
            f" ({breach.source}); {verb} {used}; extend by?")


def _shown_input(tool_input: Mapping[str, Any] | None) -> str:
    text = json.dumps(dict(tool_input or {}), ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."
