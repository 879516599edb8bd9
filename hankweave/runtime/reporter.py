"""The runtime's events: one method per thing the runtime reports, each a catalogue payload.

Every event the runtime emits is built here from the payload models of
:mod:`hankweave.events.catalogue`, so a payload is checked field by field where it is made and
the wire shapes live in one place.  Optional fields that are None are left unset: absent on the
wire, as the original writes them, rather than ``null``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from hankweave.events import catalogue as c
from hankweave.state.costs import CostLedger, resulting_state_summary
from hankweave.state.thread import ExecutionThread
from hankweave.state.transitions import StateTransition
from hankweave.state.types import (
    BudgetExceededData,
    FailureReason,
    HankweaveState,
    Interruption,
    TokenUsage,
    is_terminal_status,
)

if TYPE_CHECKING:
    from hankweave.runtime.budget import BudgetWarning

Emit = Callable[[str, Any], Any]
"""The event bus's ``emit(type, data)``."""

SNAPSHOT_COMPLETED_LIMIT = 20
"""How many finished codons a ``state.snapshot`` event lists (newest first)."""

M = TypeVar("M", bound=BaseModel)


@functools.cache
def _required(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for name, field in model.model_fields.items() if field.is_required())


def payload(model: type[M], /, **fields: Any) -> M:
    """``model(**fields)`` with the optional fields that are None left unset."""
    required = _required(model)
    return model(**{name: value for name, value in fields.items()
                    if value is not None or name in required})


def _wire(value: BaseModel | None) -> dict[str, Any] | None:
    """A state object as the wire dict the original sends (absent fields left out)."""
    return value.model_dump(mode="json", by_alias=True, exclude_none=True) if value else None


def token_fields(usage: TokenUsage | None) -> dict[str, int]:
    usage = usage or TokenUsage()
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_creation_tokens": usage.cache_creation_tokens,
            "cache_read_tokens": usage.cache_read_tokens}


class Reporter:
    """Emits the runtime's events through ``emit`` (the event bus)."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.costs = CostLedger()
        """The execution's totals, priced per changed record (every transition reports them)."""

    def _send(self, event_type: str, data: BaseModel) -> None:
        self.emit(event_type, data)

    # ----- messages -----

    def info(self, message: str) -> None:
        self._send("info", payload(c.InfoData, message=message))

    def error(self, message: str, *, codon: str | None = None, fatal: bool = False,
              severity: str | None = None, code: str | None = None) -> None:
        self._send("error", payload(c.ErrorData, message=message, codon=codon, fatal=fatal,
                                    severity=severity, code=code))

    def idle(self, reason: str, message: str) -> None:
        """``server.idle``: the runtime waits for a command."""
        self._send("server.idle", payload(c.ServerIdleData, reason=reason, message=message))

    # ----- sentinels -----

    def sentinel_loaded(self, **fields: Any) -> None:
        self._send("sentinel.loaded", payload(c.SentinelLoadedData, **fields))

    def sentinel_unloaded(self, **fields: Any) -> None:
        self._send("sentinel.unloaded", payload(c.SentinelUnloadedData, **fields))

    def sentinel_triggered(self, **fields: Any) -> None:
        self._send("sentinel.triggered", payload(c.SentinelTriggeredData, **fields))

    def sentinel_output(self, *, input_tokens: int, output_tokens: int, **fields: Any) -> None:
        self._send("sentinel.output", payload(
            c.SentinelOutputData, tokens=c.SentinelTokens(input=input_tokens,
                                                          output=output_tokens), **fields))

    def sentinel_error(self, **fields: Any) -> None:
        self._send("sentinel.error", payload(c.SentinelErrorData, **fields))

    # ----- interruptions -----

    def interruption_created(self, item: Interruption) -> None:
        budget = item.budget.model_dump(by_alias=True, exclude_none=True) if item.budget \
            else None
        self._send("interruption.created", payload(
            c.InterruptionCreatedData, interruption_id=item.id, run_id=item.run_id,
            codon_id=item.codon_id, kind=item.kind, question=item.question,
            options=item.options, deadline=item.deadline, budget=budget))

    def budget_warning(self, codon_id: str, warning: BudgetWarning) -> None:
        ceiling = warning.ceiling
        self._send("budget.warning", payload(
            c.BudgetWarningData, codon_id=codon_id, scope=ceiling.scope,
            loop_id=ceiling.loop_id, currency=ceiling.currency, limit=ceiling.limit,
            used=warning.used, source=ceiling.source, fraction=warning.fraction,
            message=warning.message))

    def interruption_answered(self, item: Interruption) -> None:
        self._send("interruption.answered", payload(
            c.InterruptionAnsweredData, interruption_id=item.id, codon_id=item.codon_id,
            answer=item.answer, answered_by=item.answered_by or ""))

    # ----- runs -----

    def run_crashed(self, *, run_id: str, detected_at: str, codon_id: str | None,
                    codon_status: str | None, ended_agent_pids: Sequence[int], next_step: str,
                    after_codon_id: str | None, message: str) -> None:
        """``run.crashed``: a start found that ``run_id``'s runtime had died (one per run)."""
        self._send("run.crashed", payload(
            c.RunCrashedData, run_id=run_id, detected_at=detected_at, codon_id=codon_id,
            codon_status=codon_status, ended_agent_pids=list(ended_agent_pids), next=next_step,
            after_codon_id=after_codon_id, message=message))

    # ----- state -----

    def transition(self, transition: StateTransition, state: HankweaveState) -> None:
        """``state.transition`` for one applied transition (a state-store listener)."""
        data = transition.data
        self._send("state.transition", payload(
            c.StateTransitionData, transition_type=transition.type,
            run_id=getattr(data, "run_id", None), codon_id=getattr(data, "codon_id", None),
            transition={"type": transition.type, "data": _wire(data)},
            resulting_state=dict(resulting_state_summary(state, self.costs))))

    def snapshot(self, thread: ExecutionThread, total_cost: float, elapsed_ms: int) -> None:
        """``state.snapshot``: the codon in progress and the newest finished ones."""
        current = next((t.codon for t in thread.codons
                        if not is_terminal_status(t.codon.status)), None) \
            if thread.has_running_codon else None
        # The newest finished codons only: a snapshot after every codon listing all of them
        # would make a long loop's journal grow with the square of its length.
        finished = itertools.islice(
            (t.codon for t in thread.codons if is_terminal_status(t.codon.status)),
            SNAPSHOT_COMPLETED_LIMIT)
        self._send("state.snapshot", payload(
            c.StateSnapshotData, current_codon=_wire(current),
            completed_codons=[_wire(codon) for codon in finished], file_tree=[],
            total_cost=total_cost, total_time=elapsed_ms, is_rolling_back=False))

    # ----- a codon -----

    def codon_started(self, *, codon_id: str, codon_name: str, session_id: str,
                      previous_session_id: str | None, start_time: str) -> None:
        self._send("codon.started", payload(
            c.CodonStartedData, codon_id=codon_id, codon_name=codon_name, session_id=session_id,
            previous_session_id=previous_session_id, start_time=start_time))

    def codon_completed(self, *, codon_id: str, success: bool, cost: float, duration_ms: int,
                        exit_code: int, failure_reason: FailureReason | None = None,
                        failure_ignored: bool = False,
                        budget_exceeded: BudgetExceededData | None = None,
                        cost_complete: bool = True) -> None:
        self._send("codon.completed", payload(
            c.CodonCompletedData, codon_id=codon_id, success=success, cost=cost,
            cost_complete=None if cost_complete else False, duration=duration_ms,
            exit_status={"type": "success"} if success else {"type": "error", "code": exit_code},
            failure_reason=_wire(failure_reason) if not success else None,
            failure_ignored=failure_ignored or None,
            budget_exceeded=(budget_exceeded.model_dump(by_alias=True)
                             if budget_exceeded else None)))

    def codon_extended(self, *, codon_id: str, codon_name: str, number: int, prompt: str,
                       cumulative_tokens: int, cumulative_cost: float) -> None:
        self._send("codon.extended", payload(
            c.CodonExtendedData, codon_id=codon_id, codon_name=codon_name,
            extension_number=number, exhaust_with_prompt=prompt,
            cumulative_tokens=cumulative_tokens, cumulative_cost=cumulative_cost))

    def assistant_blocks(self, codon_id: str, blocks: Iterable[Mapping[str, Any]]) -> None:
        """One ``assistant.action`` per text, thinking or tool-use block of a message."""
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_use":
                self._send("assistant.action", payload(
                    c.AssistantActionData, codon_id=codon_id, action="tool_use", content="",
                    tool_name=block.get("name"), tool_input=block.get("input"),
                    tool_use_id=str(block.get("id", ""))))
            elif kind in ("text", "thinking"):
                text = block.get("text") if kind == "text" else block.get("thinking")
                self._send("assistant.action", payload(
                    c.AssistantActionData, codon_id=codon_id,
                    action="message" if kind == "text" else "thinking", content=str(text or "")))

    def tool_result(self, *, codon_id: str, tool_use_id: str, tool_name: str, text: str,
                    limit: int, elapsed_ms: int, is_error: bool) -> None:
        """``tool.result``, its text cut to ``limit`` characters (``...`` marks the cut)."""
        truncated = len(text) > limit
        self._send("tool.result", payload(
            c.ToolResultData, codon_id=codon_id, tool_use_id=tool_use_id, tool_name=tool_name,
            result=text[:limit] + "..." if truncated else text, truncated=truncated,
            original_length=len(text), execution_time_ms=elapsed_ms, is_error=is_error))

    def token_usage(self, *, codon_id: str, usage: TokenUsage | None, cost: float | None,
                    model_id: str | None = None,
                    model_usage: Mapping[str, Any] | None = None) -> None:
        """``token.usage``: one message's delta, or a session's final totals.  An unknown
        ``cost`` is reported as ``totalCost`` 0 with ``costComplete: false``."""
        self._send("token.usage", payload(
            c.TokenUsageData, codon_id=codon_id, **token_fields(usage),
            total_cost=cost if cost is not None else 0.0,
            cost_complete=False if cost is None else None,
            model_id=None if model_usage is not None else model_id,
            model_usage=dict(model_usage) if model_usage is not None else None))

    # ----- rig setup -----

    def rig_output(self, codon_id: str, index: int, stream: str, line: str) -> None:
        self._send("rig.output", payload(c.RigOutputData, codon_id=codon_id, stream=stream,
                                         line=line, command_index=index))

    def rig_failed(self, codon_id: str, failure: Any) -> None:
        self._send("rig.setup.failed", payload(
            c.RigSetupFailedData, codon_id=codon_id, failure_type=failure.failure_type,
            exit_code=failure.exit_code, command_index=failure.index, ignored=failure.ignored))

    def rig_completed(self, codon_id: str, *, commands: int, duration_ms: int,
                      created_checkpoint: bool) -> None:
        self._send("rig.setup.completed", payload(
            c.RigSetupCompletedData, codon_id=codon_id,
            rig_type="command" if commands == 1 else "commands", command_count=commands,
            duration_ms=duration_ms, created_checkpoint=created_checkpoint))

    # ----- after a codon -----

    def archived(self, codon_id: str, archived: Sequence[str],
                 failed: Sequence[tuple[str, str]]) -> None:
        """``archive.completed``, or ``archive.partial`` when some paths failed."""
        if failed:
            self._send("archive.partial", payload(
                c.ArchivePartialData, codon_id=codon_id, archived_paths=list(archived),
                failed_paths=[{"path": path, "error": error} for path, error in failed]))
        elif archived:
            self._send("archive.completed", payload(
                c.ArchiveCompletedData, codon_id=codon_id, archived_paths=list(archived)))

    def loop_iteration_completed(self, *, loop_id: str, iteration: int, duration_ms: int,
                                 cost: float, tokens: int, is_final: bool,
                                 termination_reason: str | None) -> None:
        self._send("loop.iteration.completed", payload(
            c.LoopIterationCompletedData, loop_id=loop_id, iteration=iteration,
            duration_ms=duration_ms, cost_usd=cost, tokens_used=tokens, is_final=is_final,
            termination_reason=termination_reason))

    def budget_limits(self, *, codon_id: str, loop_context: Mapping[str, Any] | None,
                      ceiling: Mapping[str, Any], limits: Mapping[str, Any],
                      loop: Mapping[str, Any] | None, spent: float, elapsed: float) -> None:
        self._send("budget.limits", payload(
            c.BudgetLimitsData, codon_id=codon_id, loop_context=loop_context,
            ceiling=dict(ceiling), limits=dict(limits), loop=loop, spent_dollars=spent,
            elapsed_seconds=elapsed))

    def budget_summary(self, *, ceiling: Mapping[str, Any], allocation: str,
                       rows: list[dict[str, Any]], totals: Mapping[str, Any]) -> None:
        self._send("budget.summary", payload(
            c.BudgetSummaryData, ceiling=dict(ceiling), allocation=allocation, rows=rows,
            totals=dict(totals)))

    # ----- rollbacks -----

    def rollback_started(self, *, from_run: str, from_codon: str | None, to_codon: str,
                         checkpoint: str, checkpoint_type: str, undone: list[str]) -> None:
        self._send("rollback.started", payload(
            c.RollbackStartedData, from_run=from_run, from_codon=from_codon, to_codon=to_codon,
            to_checkpoint=checkpoint, checkpoint_type=checkpoint_type,
            codons_to_process=undone))

    def rollback_progress(self, *, step: int, steps: int, message: str) -> None:
        self._send("rollback.progress", payload(
            c.RollbackProgressData, current_step=step, total_steps=steps, message=message))

    def rollback_codon_checkpoint(self, *, codon_id: str, codon_name: str, checkpoint: str,
                                  checkpoint_type: str, message: str) -> None:
        self._send("rollback.codonCheckpoint", payload(
            c.RollbackCodonCheckpointData, codon_id=codon_id, codon_name=codon_name,
            checkpoint=checkpoint, checkpoint_type=checkpoint_type, message=message))

    def rollback_rig_cleanup(self, *, codon_id: str, codon_name: str, directories: list[str],
                             removed: int) -> None:
        self._send("rollback.rigCleanup", payload(
            c.RollbackRigCleanupData, codon_id=codon_id, codon_name=codon_name,
            directories=directories, status="completed", successful_cleanups=removed))

    def rollback_completed(self, *, from_run: str, to_run: str, checkpoint: str, codon_id: str,
                           codon_name: str, checkpoint_type: str, auto_restart: bool) -> None:
        self._send("rollback.completed", payload(
            c.RollbackCompletedData, from_run=from_run, to_run=to_run, checkpoint=checkpoint,
            codon_id=codon_id, codon_name=codon_name, checkpoint_type=checkpoint_type,
            auto_restart=auto_restart))


__all__ = ["SNAPSHOT_COMPLETED_LIMIT", "Reporter", "payload", "token_fields"]
