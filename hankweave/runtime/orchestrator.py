"""The orchestrator: runs a hank's plan codon by codon, durably.

One :class:`Runtime` owns one execution directory for the life of a ``hankweave run``.  It boots
(decides whether this start is fresh, a continuation, or a recovery that first rolls back), then
drives the plan: each codon goes through the state machine (rig setup, harness, checkpoint,
outputs, archive, loop expansion), and the execution thread decides what runs next.  Commands
(next, start a codon, skip, stop, rollback, shutdown) come from the CLI now and from the
WebSocket server (``hankweave.server``), through the same methods, which refuse what the
reference refuses (no rollback while a codon runs, no second start, ...) by raising
:class:`RuntimeCommandError` with a message fit for the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hankweave.checkpoints import Checkpoint, CheckpointError, CheckpointStore, RetentionPolicy
from hankweave.config.hank import Codon, HankFile, Loop
from hankweave.execution.layout import codon_log_name
from hankweave.harness import Harness
from hankweave.registry import Registry
from hankweave.runtime.budget import RunBudget
from hankweave.runtime.codon_runner import AttemptOutcome, AttemptSpec, CodonRunner
from hankweave.runtime.errors import RuntimeCommandError
from hankweave.runtime.failures import (
    compute_retry_delay_ms,
    resolve_failure_action,
    synthesize_missing_failure_reason,
)
from hankweave.runtime.rollback import (
    CheckpointEntry,
    CheckpointListing,
    RollbackTarget,
    checkpoint_prefix_target,
    codon_checkpoint_target,
    codons_newer_than,
    event_checkpoint_type,
    find_rollback_target,
    last_success_target,
    record_checkpoints,
)
from hankweave.state.boot import OwnedExecution
from hankweave.state.costs import codon_cost, current_run_cost, resulting_state_summary, total_cost
from hankweave.state.reducer import plan_splice
from hankweave.state.thread import (
    ExecutionThread,
    analyze_execution_thread,
    find_continuation_session_id,
)
from hankweave.state.transitions import (
    CodonMetadata,
    CodonStarted,
    CodonStartedData,
    CodonTransitioned,
    CodonTransitionedData,
    ExecutionPlanData,
    ExecutionPlanUpdated,
    InitialCheckpointData,
    InitialCheckpointSet,
    RunCompleted,
    RunFailed,
    RunRef,
    RunStarted,
    RunStartedData,
    StateTransition,
)
from hankweave.state.types import (
    CodonExecution,
    ContinuationSource,
    ContinuationStart,
    ExecutionCodonEntry,
    FailureReason,
    FreshStart,
    HankweaveState,
    LoopContext,
    StartingConditions,
    is_terminal_status,
    last_record,
)

log = logging.getLogger(__name__)

ALL_DONE = "all codons completed"
CODON_FAILURE = "codon failure"
CLIENT_REQUEST = "client request"
"""The shutdown reason of ``server.shutdown``: exit 0, as in the original (docs/websocket.md)."""
SIGNAL_EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
SNAPSHOT_COMPLETED_LIMIT = 100
"""How many finished codons a ``state.snapshot`` event lists (newest first)."""
"""A run stopped by a signal exits 128 + the signal number, as shells expect (docs/cli.md)."""


@dataclass
class RuntimeConfig:
    """The settings the orchestrator acts on (already resolved from every layer)."""

    headless: bool = True
    autostart: bool = True
    ignore_rig_failures: bool = False
    output_dir: Path | None = None
    overwrite_output: bool = False
    shim_idle_timeout: float | None = None
    rig_timeout_s: float | None = None
    keep_checkpoints_per_run: int = 50
    harness_override: type[Harness] | None = None
    """Plays every codon whatever its model (replay); None lets the plugins choose."""
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


@dataclass(frozen=True)
class _StartRequest:
    """A start command: the codon to run (``None``: the thread's next), whether to skip its
    rig setup."""

    codon_id: str | None = None
    skip_rig: bool = False


@dataclass
class CodonResult:
    codon_id: str
    status: Literal["completed", "failed", "skipped"]
    failure_reason: FailureReason | None = None
    checkpoint: str | None = None


def new_run_id() -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return f"{int(time.time() * 1000)}-{''.join(secrets.choice(alphabet) for _ in range(5))}"


class Runtime:
    """Runs one execution directory's hank.  See the module docstring."""

    def __init__(
        self,
        *,
        hank: HankFile,
        hank_dir: Path,
        execution_dir: Path,
        owned: OwnedExecution,
        checkpoints: CheckpointStore,
        registry: Registry,
        emit: Callable[[str, dict[str, Any]], Any],
        config: RuntimeConfig,
        budget: RunBudget,
        prompt_builder: PromptBuilder,
        plan_builder: Callable[[HankFile], list[ExecutionCodonEntry]],
    ) -> None:
        self.hank = hank
        self.hank_dir = hank_dir
        self.execution_dir = execution_dir
        self.agent_root = execution_dir / "agentRoot"
        self.owned = owned
        self.store = owned.store
        self.checkpoints = checkpoints
        self.registry = registry
        self.emit = emit
        self.config = config
        self.budget = budget
        self.prompts = prompt_builder
        self.plan_builder = plan_builder
        self.started_at = time.monotonic()
        self.run_id: str | None = None
        self.exit_code: int | None = None
        self._runner: CodonRunner | None = None
        self._commands: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._shutdown_reason: str | None = None
        self._force = False
        self._stopping = asyncio.Event()
        self._skip_rig_for: str | None = None
        self._retries: dict[str, int] = {}
        self._retry_cost: dict[str, float] = {}
        self._codon_config = _index_codons(hank)
        self._known_checkpoints: dict[str, Mapping[str, str]] | None = None
        # Live control: whether the drive loop waits for a command, a rollback is under way, a
        # client force-stopped the running codon (and why).
        self._waiting = False
        self._rolling_back = False
        self._force_stop_reason: str | None = None
        # Held by command rollbacks; `finish` takes it so a shutdown never ends the run while a
        # rollback is between its restore and its new run.
        self._command_lock = asyncio.Lock()
        self.control_server: Any = None
        """The live-control server serving this runtime, once
        :func:`hankweave.server.serve_runtime` started one."""
        self.store.add_listener(self._publish_transition)

    # ----- state helpers -----

    @property
    def state(self) -> HankweaveState:
        return self.store.state

    def thread(self) -> ExecutionThread:
        return analyze_execution_thread(self.state, self._checkpoint_data())

    def _checkpoint_data(self) -> Mapping[str, Mapping[str, str]] | None:
        """The checkpoint store's ids, read once and then kept current by this runtime.

        Listing a store can mean a subprocess per call (git); the thread is analysed several
        times per codon, and only this runtime adds or prunes checkpoints while it runs.
        """
        if self._known_checkpoints is None:
            try:
                self._known_checkpoints = dict(self.checkpoints.checkpoint_data())
            except CheckpointError as exc:
                log.warning("checkpoint data unavailable: %s", exc)
                return None
        return self._known_checkpoints

    def _current(self, codon_id: str) -> CodonExecution:
        run = self.state.run_by_id(self.run_id or "")
        found = last_record(run, codon_id) if run else None
        if found is None:
            raise RuntimeCommandError(f"codon {codon_id!r} has no record in run {self.run_id}")
        return found[1]

    async def _transition(self, transition: StateTransition) -> None:
        await self.store.transition(transition)

    def _publish_transition(self, transition: StateTransition, state: HankweaveState) -> None:
        data = transition.data
        self.emit("state.transition", {
            "transitionType": transition.type,
            "runId": getattr(data, "run_id", None),
            "codonId": getattr(data, "codon_id", None),
            "transition": {"type": transition.type,
                           "data": data.model_dump(mode="json", by_alias=True,
                                                   exclude_none=True)},
            "resultingState": dict(resulting_state_summary(state)),
        })

    async def _move(self, codon_id: str, to: str, **metadata: Any) -> None:
        codon = self._current(codon_id)
        await self._transition(CodonTransitioned(data=CodonTransitionedData.model_validate({
            "runId": self.run_id, "codonId": codon_id, "from": codon.status, "to": to,
            "metadata": CodonMetadata(**metadata)})))

    # ----- boot -----

    async def boot(self) -> None:
        """Prepare checkpoints and choose how this start continues the execution."""
        initial = await asyncio.to_thread(self.checkpoints.initialize)
        if self.state.initial_checkpoint != initial:
            await self._transition(InitialCheckpointSet(data=InitialCheckpointData(sha=initial)))
        thread = self.thread()
        if thread.failed:
            self.emit("info", {"message": "Execution thread failed, rolling back to the last"
                                          " successful codon"})
            await self._rollback_to_last_success(thread)
            return
        conditions = self._resume_point(thread)
        await self._start_run(conditions)

    def _resume_point(self, thread: ExecutionThread) -> StartingConditions:
        """Where a new run continues: after the newest finished codon of the thread, or fresh."""
        for item in thread.codons:
            codon = item.codon
            sha = getattr(codon, "completion_checkpoint", None) or getattr(
                codon, "skip_checkpoint", None)
            if codon.status in ("completed", "skipped") and sha:
                return ContinuationStart(
                    source=ContinuationSource(run_id=item.run_id, after_codon=codon.codon_id,
                                              checkpoint_sha=sha),
                    reason="continue")
        if self.state.runs and thread.codons == [] and self.state.runs[0].starting_conditions.type \
                == "continuation":
            # An empty continuation (e.g. left by `hankweave rollback`): continue from it.
            source = self.state.runs[0].starting_conditions.source  # type: ignore[union-attr]
            return ContinuationStart(source=source, reason="continue")
        return FreshStart(initial_checkpoint_sha=self.state.initial_checkpoint)

    async def _start_run(self, conditions: StartingConditions) -> str:
        run_id = new_run_id()
        folder = self.execution_dir / ".hankweave" / "runs" / run_id
        folder.mkdir(parents=True, exist_ok=True)
        plan = None
        if conditions.type == "fresh" or not self.state.execution_plan:
            plan = self.plan_builder(self.hank)
        await self._transition(RunStarted(data=RunStartedData(
            run_id=run_id, run_folder=str(folder), git_branch=f"run-{run_id}",
            starting_conditions=conditions, server_pid=os.getpid(), execution_plan=plan)))
        self.run_id = run_id
        self.owned.lock.update(run_id=run_id)
        return run_id

    # ----- the drive loop -----

    async def drive(self) -> int:
        """Run codons until the plan is done, a failure stops the run, or a shutdown."""
        try:
            request: _StartRequest | None = None
            if not self.config.autostart:
                self.emit("server.idle", {"reason": "startup",
                                          "message": "Waiting for a start command"})
                request = await self._wait_for_start()
            while self._shutdown_reason is None:
                if request is not None and request.codon_id is not None:
                    next_id, skip_rig = request.codon_id, request.skip_rig
                else:
                    next_id = self.thread().next_codon_id
                    skip_rig = next_id == self._skip_rig_for
                request = None
                self._skip_rig_for = None
                if next_id is None:
                    await self.shutdown(ALL_DONE)
                    break
                if self.budget.exhausted():
                    self.emit("info", {"message": "Run budget exhausted; stopping before"
                                                  f" {next_id}"})
                    await self._end_run(failed=True)
                    await self.shutdown(CODON_FAILURE)
                    break
                parked = await self._run_with_policy(next_id, skip_rig=skip_rig)
                if self._shutdown_reason is None and parked is not None:
                    # Wait for a client's decision (start, redo, rollback, shutdown).
                    self.emit("server.idle", {"reason": "codon-completed", "message": parked})
                    request = await self._wait_for_start()
                elif self._shutdown_reason is None and not self.config.autostart:
                    self.emit("server.idle", {"reason": "codon-completed",
                                              "message": "Codon finished; waiting for the"
                                                         " next start command"})
                    request = await self._wait_for_start()
        except asyncio.CancelledError:
            await self.shutdown("SIGINT")
        return self._exit_code()

    async def _wait_for_start(self) -> _StartRequest | None:
        """Wait for a start command (``None`` when a shutdown ends the wait)."""
        self._waiting = True
        try:
            while self._shutdown_reason is None:
                command, payload = await self._commands.get()
                if command == "start":
                    return payload if isinstance(payload, _StartRequest) else None
        finally:
            self._waiting = False
        return None

    def request_start(self) -> None:
        """Start the next codon whenever the runtime next waits for a command (unchecked).

        :meth:`start_next` is the checked form the live-control commands use.
        """
        self._commands.put_nowait(("start", None))

    async def _run_with_policy(self, codon_id: str, *, skip_rig: bool = False) -> str | None:
        """Run a codon and apply its failure policy.

        Returns why the run is parked waiting for a command (a client force-stopped the codon,
        or it failed retriably in an attended run), or None when the drive loop goes on.
        """
        while True:
            result = await self.run_codon(codon_id, skip_rig=skip_rig)
            force_stopped, self._force_stop_reason = self._force_stop_reason is not None, None
            if force_stopped and result.status == "failed" and self._shutdown_reason is None:
                # Neither retried nor fatal: the client that stopped it decides what is next.
                self._retries.pop(codon_id, None)
                return f"Codon {codon_id} was force stopped; waiting for a command"
            if result.status != "failed" or self._shutdown_reason is not None:
                self._retries.pop(codon_id, None)
                return None
            codon = self._config_for(codon_id)
            attempts = self._retries.get(codon_id, 0)
            retry = codon.retry_config
            action = resolve_failure_action(
                codon.on_failure or "abort", result.failure_reason, attempts,
                (retry.max_attempts if retry and retry.max_attempts else 3),
                headless=self.config.headless)
            if action == "retry":
                self._retries[codon_id] = attempts + 1
                delay = compute_retry_delay_ms(
                    (retry.delay_ms if retry and retry.delay_ms is not None else 1000), attempts,
                    result.failure_reason.retry_after_ms if result.failure_reason else None,
                    (retry.max_delay_ms if retry and retry.max_delay_ms is not None else 60000))
                self.emit("info", {"message": f"Retrying codon {codon_id} (attempt"
                                              f" {attempts + 2}/"
                                              f"{(retry.max_attempts if retry and retry.max_attempts else 3) + 1})"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay / 1000)
                if self._shutdown_reason is not None:
                    return None  # stopped during the wait: the failed attempt stands
                skip_rig = False
                continue
            if action == "continue":
                self.emit("info", {"message": f"Codon {codon_id} failed, continuing"
                                              " (onFailure=ignore)"})
                await self._expand_plan(codon_id, "failed-ignored", False, False)
                return None
            if action == "stay-active":
                # An attended run keeps its server up so a person can retry the codon.
                return (f"Codon {codon_id} failed with a retriable error; retry it with"
                        f" `hankweave ctl -e {self.execution_dir} start {codon_id}`, roll back,"
                        " or stop with Ctrl-C")
            await self._end_run(failed=True)
            await self.shutdown(CODON_FAILURE)
            return None

    # ----- one codon -----

    def _config_for(self, codon_id: str) -> Codon:
        base = codon_id.split("#", 1)[0]
        try:
            return self._codon_config[base]
        except KeyError:
            raise RuntimeCommandError(f"codon {codon_id!r} is not in the hank") from None

    def _entry(self, codon_id: str) -> ExecutionCodonEntry:
        for entry in self.state.execution_plan:
            if entry.codon_id == codon_id:
                return entry
        raise RuntimeCommandError(f"Unknown codon {codon_id!r}: not in the execution plan")

    async def run_codon(self, codon_id: str, *, skip_rig: bool = False) -> CodonResult:
        """Run one attempt of ``codon_id`` in the current run, from preparing to its outcome."""
        entry = self._entry(codon_id)
        codon = self._config_for(codon_id)
        loop_context = (LoopContext.model_validate(entry.loop_context.model_dump(
            include={"loop_id", "iteration", "codon_index_in_loop"}))
            if entry.loop_context else None)
        await self._transition(CodonStarted(data=CodonStartedData(
            run_id=self.run_id, codon_id=codon_id, loop_context=loop_context)))
        started = time.monotonic()
        patterns = self._patterns_through(codon_id)

        rig_sha: str | None = None
        if codon.rig_setup is not None and not skip_rig:
            failure = await self._rig_setup(codon_id, codon)
            if failure is not None:
                return await self._fail_early(codon_id, "preparing", failure, exit_code=1)
            rig_sha = await self._checkpoint(codon_id, codon, "rig-setup", patterns, started)
            if rig_sha is None:
                return await self._fail_early(codon_id, "preparing", FailureReason(
                    type="unknown", retriable=False,
                    message="Rig-setup checkpoint failed"), exit_code=1)
        await self._move(codon_id, "starting", checkpoint_sha=rig_sha)

        session: str | None = None
        if codon.continuation_mode == "continue-previous":
            session = find_continuation_session_id(self.thread(), codon_id, self.state)
            if session is None:
                return await self._fail_early(codon_id, "starting", FailureReason(
                    type="unknown", retriable=False,
                    message=f"Codon {codon_id} requires continuation from previous codon but no"
                            " valid session found"), exit_code=1)
            self.emit("info", {"message": f"Continuing from previous session: {session}"})

        try:
            spec = self._attempt_spec(codon_id, codon, session)
        except Exception as exc:  # a prompt that cannot be built, a model with no harness
            return await self._fail_early(codon_id, "starting", FailureReason(
                type="unknown", retriable=False, message=str(exc)), exit_code=1)

        if self._shutdown_reason is not None:  # stopped while preparing: no agent starts
            return await self._fail_early(codon_id, "starting", self._interrupted_reason(),
                                          exit_code=1)
        await self._move(codon_id, "initializing", claude_pid=900000 + random.randrange(99999),
                         claude_log_path=str(spec.log_path.relative_to(self.execution_dir)),
                         previous_session_id=session)
        limits = codon.budget
        codon_budget = self.budget.track(
            codon_id, codon.id,
            max_dollars=limits.max_dollars if limits else None,
            max_seconds=limits.max_time_seconds if limits else None,
            max_output_tokens=limits.max_output_tokens if limits else None,
            max_context_tokens=limits.max_context_tokens if limits else None,
            on_exceeded=limits.on_exceeded if limits else None)
        runner = CodonRunner(spec, store=self.store, emit=self.emit, budget=codon_budget)
        self._runner = runner
        if self._shutdown_reason is not None:  # a stop that came during the last state write
            runner.interrupt("stop")
        watchdog = asyncio.create_task(self._watch_time(runner, codon_budget))
        try:
            outcome = await runner.run()
        finally:
            watchdog.cancel()
            self._runner = None
        return await self._complete(codon_id, codon, entry, outcome, patterns, started)

    async def _watch_time(self, runner: CodonRunner, budget: Any) -> None:
        if budget.limits.seconds is None:
            return
        while True:
            await asyncio.sleep(min(1.0, max(0.05, budget.limits.seconds / 10)))
            if budget.check() is not None:
                runner.interrupt("budget")
                return

    def _attempt_spec(self, codon_id: str, codon: Codon, session: str | None) -> AttemptSpec:
        model = self.registry.resolve_model(codon.model)
        harness = self.config.harness_override or self.registry.select_harness(model)
        user_prompt = self.prompts.user(codon)
        log_name = codon_log_name(codon_id)
        return AttemptSpec(
            run_id=self.run_id or "", codon_id=codon_id, codon_name=codon.name, harness=harness,
            model=model, prompt=user_prompt, system_prompt=self.prompts.system(codon),
            work_dir=self.agent_root,
            log_path=self.execution_dir / ".hankweave" / "runs" / (self.run_id or "") / log_name,
            session_to_resume=session, env=self.prompts.env(codon),
            extension_prompt=(self.prompts.extension(codon.exhaust_with_prompt)
                              if codon.exhaust_with_prompt else None),
            max_extensions=codon.max_extensions,
            idle_timeout_s=codon.shim_idle_timeout or self.config.shim_idle_timeout,
        )

    def _patterns_through(self, codon_id: str) -> list[str]:
        from hankweave.runtime.planner import checkpoint_patterns_through

        return checkpoint_patterns_through(self.state.execution_plan, codon_id, True)

    async def _rig_setup(self, codon_id: str, codon: Codon) -> FailureReason | None:
        from hankweave.runtime.rig import run_rig

        ops = codon.rig_setup or []
        self.emit("info", {"message": f"Rig setup started for codon '{codon.name}':"
                                      f" {len(ops)} operation(s)"})
        started = time.monotonic()
        failures: list[Any] = []

        def on_operation(index: int, total: int, description: str) -> None:
            self.emit("info", {"message": f"Rig operation {index + 1}/{total}: {description}"})

        def on_output(index: int, stream: str, line: str) -> None:
            self.emit("rig.output", {"codonId": codon_id, "stream": stream, "line": line,
                                     "commandIndex": index})

        def on_failure(failure: Any) -> None:
            failures.append(failure)
            self.emit("rig.setup.failed", {
                "codonId": codon_id, "failureType": failure.failure_type,
                "exitCode": failure.exit_code, "commandIndex": failure.index,
                "ignored": failure.ignored})

        result = await run_rig(
            ops, agent_root=self.agent_root, hank_dir=self.hank_dir,
            env=self.prompts.env(codon), ignore_failures=self.config.ignore_rig_failures,
            timeout_s=self.config.rig_timeout_s, on_output=on_output,
            on_operation=on_operation, on_failure=on_failure)
        duration = int((time.monotonic() - started) * 1000)
        self.emit("rig.setup.completed", {
            "codonId": codon_id, "rigType": "command" if len(ops) == 1 else "commands",
            "commandCount": len(ops), "durationMs": duration,
            "createdCheckpoint": result.failed is None})
        if result.failed is None:
            self.emit("info", {"message": f"Rig setup completed for codon '{codon.name}'"
                                          f" ({duration}ms)"})
            return None
        failed = result.failed
        self.emit("error", {"message": f"Rig setup failed: {failed.message}", "codon": codon_id,
                            "fatal": True, "severity": "codon"})
        return FailureReason(type="unknown", retriable=True,
                             message=f"Rig setup failed at {failed.op_type} operation:"
                                     f" {failed.message}")

    async def _checkpoint(self, codon_id: str, codon: Codon, kind: str, patterns: list[str],
                          started: float) -> str | None:
        try:
            made: Checkpoint = await asyncio.to_thread(
                self.checkpoints.create, kind=kind, run_id=self.run_id or "",
                codon_id=codon_id, codon_name=codon.name, patterns=patterns,
                duration_ms=int((time.monotonic() - started) * 1000))
        except CheckpointError as exc:
            self.emit("error", {"message": f"Checkpoint ({kind}) failed: {exc}",
                                "codon": codon_id, "fatal": False, "severity": "codon"})
            return None
        if self._known_checkpoints is not None:
            self._known_checkpoints[made.id] = {"message": made.message,
                                                "timestamp": made.timestamp,
                                                "branch": made.branch}
        return made.id

    async def _fail_early(self, codon_id: str, during: str, reason: FailureReason, *,
                          exit_code: int) -> CodonResult:
        await self._move(codon_id, "failed", exit_code=exit_code, failure_reason=reason,
                         failed_during=during)
        codon = self._config_for(codon_id)
        self.emit("codon.completed", _present({
            "codonId": codon_id, "success": False, "cost": 0.0, "duration": 0,
            "exitStatus": {"type": "error", "code": exit_code},
            "failureReason": reason.model_dump(by_alias=True, exclude_none=True),
            "failureIgnored": codon.on_failure == "ignore" or None}))
        return CodonResult(codon_id, "failed", reason)

    # ----- completion -----

    async def _complete(self, codon_id: str, codon: Codon, entry: ExecutionCodonEntry,
                        outcome: AttemptOutcome, patterns: list[str],
                        started: float) -> CodonResult:
        record = self._current(codon_id)
        status, reason, budget_note = self._final_status(codon, entry, outcome)
        during = record.status
        kind = {"completed": "completed", "skipped": "skipped", "failed": "error"}[status]
        sha = await self._checkpoint(codon_id, codon, kind, patterns, started)
        if sha is None and status == "completed":
            status, reason = "failed", FailureReason(type="unknown", retriable=False,
                                                     message="Checkpoint creation failed")
        if budget_note:
            self.emit("info", {"message": budget_note})
        metadata: dict[str, Any] = {
            "exit_code": outcome.exit_code, "checkpoint_sha": sha,
            "result_message_received": outcome.result_received,
            "context_exceeded": outcome.context_exceeded,
            "extension_count": outcome.extension_count,
        }
        if status == "completed":
            metadata["budget_exceeded"] = outcome.budget_exceeded
            if record.status == "initializing" and not sha:
                metadata["checkpoint_sha"] = "none"
        elif status == "failed":
            metadata.update(exit_code=outcome.exit_code or 1, failure_reason=reason,
                            failed_during=during)
        else:
            metadata["skipped_during"] = during
        await self._move(codon_id, status, **metadata)
        final = self._current(codon_id)
        cost = codon_cost(final)
        self.budget.record(codon_id, getattr(final, "final_cost", None)
                           or getattr(final, "partial_cost", 0.0) or 0.0)
        reported = 0.0 if status == "skipped" else cost + self._retry_cost.pop(codon_id, 0.0)
        if status == "failed":
            self._retry_cost[codon_id] = self._retry_cost.get(codon_id, 0.0) + cost
        self.emit("codon.completed", _present({
            "codonId": codon_id, "success": status == "completed", "cost": reported,
            "duration": int((time.monotonic() - started) * 1000),
            "exitStatus": ({"type": "success"} if status == "completed"
                           else {"type": "error", "code": outcome.exit_code or 1}),
            "failureReason": (reason.model_dump(by_alias=True, exclude_none=True)
                              if status == "failed" and reason else None),
            "failureIgnored": (status == "failed" and codon.on_failure == "ignore") or None,
            "budgetExceeded": (outcome.budget_exceeded.model_dump(by_alias=True)
                               if outcome.budget_exceeded else None),
        }))
        self._snapshot()
        if status == "completed" and not await self._after_success(codon_id, codon, entry, sha):
            return CodonResult(codon_id, status, reason, sha)  # the output copy ended the run
        if status in ("completed", "skipped"):
            await self._expand_plan(codon_id, status, outcome.context_exceeded,
                                    outcome.budget_exceeded is not None)
        return CodonResult(codon_id, status, reason, sha)

    def _final_status(self, codon: Codon, entry: ExecutionCodonEntry,
                      outcome: AttemptOutcome) -> tuple[str, FailureReason | None, str | None]:
        from hankweave.runtime.planner import is_context_exceeded_acceptable

        if outcome.interrupted == "stop":
            return "failed", self._interrupted_reason(), None
        if outcome.interrupted == "skip":
            return "skipped", None, None
        if outcome.budget_exceeded is not None:
            on_exceeded = self.budget.on_exceeded
            if codon.budget and codon.budget.on_exceeded:
                on_exceeded = codon.budget.on_exceeded
            note = outcome.budget_message or "budget exceeded"
            if on_exceeded == "fail":
                return "failed", FailureReason(type="unknown", retriable=False,
                                               message=f"Budget exceeded: {note}"), (
                    f"Codon failed (budget limit reached: {note})")
            return "completed", None, f"Codon completed (budget limit reached: {note})"
        if outcome.exit_code == 0 and outcome.success:
            return "completed", None, None
        if outcome.context_exceeded and is_context_exceeded_acceptable(self.hank, entry):
            return "completed", None, ("Codon completed successfully due to context exceeded"
                                       " (loop termination condition met)")
        reason = outcome.failure_reason or synthesize_missing_failure_reason(
            outcome.exit_code, outcome.session_established)
        return "failed", reason, None

    def _interrupted_reason(self) -> FailureReason:
        if self._shutdown_reason is None and self._force_stop_reason is not None:
            return FailureReason(type="unknown", retriable=True,
                                 message=f"Force stopped: {self._force_stop_reason}")
        return FailureReason(type="unknown", retriable=True,
                             message=f"Interrupted: {self._shutdown_reason}")

    async def _after_success(self, codon_id: str, codon: Codon, entry: ExecutionCodonEntry,
                             sha: str | None) -> bool:
        """Copy the outputs and archive; False when a failed copy ended the run (spec §3.6)."""
        if codon.output_files and self.config.output_dir is not None:
            from hankweave.runtime.outputs import OutputCopyError, copy_outputs
            from hankweave.runtime.rig import run_command

            try:
                result = await copy_outputs(
                    codon.output_files, agent_root=self.agent_root,
                    output_dir=self.config.output_dir, env=self.prompts.env(codon),
                    overwrite=self.config.overwrite_output, run_command=run_command)
            except OutputCopyError as exc:
                self.emit("error", {"message": str(exc), "codon": codon_id, "fatal": True,
                                    "severity": "operation"})
                await self._end_run(failed=True)
                await self.shutdown(CODON_FAILURE)
                return False
            for original, resolved in result.renamed:
                self.emit("info", {"message": f"Output {original.name} exists; copied as"
                                              f" {resolved.name}"})
        if codon.archive_on_success:
            from hankweave.runtime.archive import ArchiveManifest, archive_on_success

            manifest_path = self.execution_dir / ".hankweave" / "archive-manifest.json"
            manifest = ArchiveManifest.load(manifest_path)
            context = entry.loop_context
            result = archive_on_success(
                codon.archive_on_success, agent_root=self.agent_root,
                execution_dir=self.execution_dir, codon_id=codon_id,
                loop_context=context, checkpoint_sha=sha or "orphan", manifest=manifest)
            if result.failed:
                self.emit("archive.partial", {
                    "codonId": codon_id, "archivedPaths": result.archived,
                    "failedPaths": [{"path": f.path, "error": f.error} for f in result.failed]})
            elif result.archived:
                self.emit("archive.completed", {"codonId": codon_id,
                                                "archivedPaths": result.archived})
        return True

    async def _expand_plan(self, codon_id: str, outcome: str, context_exceeded: bool,
                           budget_exceeded: bool) -> None:
        from hankweave.runtime.planner import expand_after

        expansion = expand_after(self.state.execution_plan, self.hank, codon_id,
                                 outcome=outcome, context_exceeded=context_exceeded,
                                 budget_exceeded=budget_exceeded)
        position, remove, entries = plan_splice(self.state.execution_plan, expansion.plan)
        if remove or entries:
            await self._transition(ExecutionPlanUpdated(data=ExecutionPlanData(
                position=position, remove=remove, entries=entries)))
        entry = next((e for e in self.state.execution_plan if e.codon_id == codon_id), None)
        if expansion.iteration_completed and entry is not None and entry.loop_context:
            loop_id, iteration = entry.loop_context.loop_id, entry.loop_context.iteration
            duration_ms, cost, tokens = self._iteration_totals(loop_id, iteration)
            self.emit("loop.iteration.completed", _present({
                "loopId": loop_id, "iteration": iteration,
                "durationMs": duration_ms, "costUsd": cost, "tokensUsed": tokens,
                "isFinal": expansion.is_final,
                "terminationReason": expansion.termination_reason}))

    def _iteration_totals(self, loop_id: str, iteration: int) -> tuple[int, float, int]:
        """Duration (ms), cost and input+output tokens of one loop iteration's finished records
        in the thread (failed retry attempts included: their time and money were spent)."""
        from hankweave.fsutil import parse_iso
        from hankweave.state.costs import codon_tokens

        duration_ms, cost, tokens = 0, 0.0, 0
        for item in self.thread().codons:
            record, context = item.codon, item.codon.loop_context
            if (context is None or context.loop_id != loop_id or context.iteration != iteration
                    or not is_terminal_status(record.status)):
                continue
            end = getattr(record, "end_time", None)
            if end:
                elapsed = parse_iso(end) - parse_iso(record.start_time)
                duration_ms += int(elapsed.total_seconds() * 1000)
            cost += codon_cost(record)
            used = codon_tokens(record)
            tokens += used.input_tokens + used.output_tokens
        return duration_ms, cost, tokens

    def _snapshot(self) -> None:
        thread = self.thread()
        current = next((t.codon for t in thread.codons
                        if not is_terminal_status(t.codon.status)), None)
        # The newest finished codons only: a snapshot after every codon listing all of them
        # would make a long loop's journal grow with the square of its length.
        finished = itertools.islice(
            (t.codon for t in thread.codons if is_terminal_status(t.codon.status)),
            SNAPSHOT_COMPLETED_LIMIT)
        self.emit("state.snapshot", {
            "currentCodon": current.model_dump(mode="json", by_alias=True, exclude_none=True)
            if current else None,
            "completedCodons": [codon.model_dump(mode="json", by_alias=True, exclude_none=True)
                                for codon in finished],
            "fileTree": [], "totalCost": total_cost(self.state),
            "totalTime": int((time.monotonic() - self.started_at) * 1000),
            "isRollingBack": False})

    # ----- commands -----
    #
    # The CLI and the live-control server act through these methods.  The checked ones raise
    # RuntimeCommandError for what the runtime refuses; none of them waits for the codon it starts.

    @property
    def shutting_down(self) -> bool:
        """Whether a shutdown has been asked for (commands that change the run are refused)."""
        return self._shutdown_reason is not None

    @property
    def rolling_back(self) -> bool:
        """Whether a rollback command is restoring a checkpoint right now."""
        return self._rolling_back

    @property
    def waiting_for_command(self) -> bool:
        """Whether the drive loop waits for a start command (``--no-autostart``, a force stop,
        a rollback without restart): the only time a codon can be started or a rollback made."""
        return self._waiting and not self._rolling_back and self._shutdown_reason is None

    def codon_in_progress(self) -> tuple[str, str] | None:
        """``(codon id, status)`` of the current run's unfinished codon record, if any."""
        run = self.state.run_by_id(self.run_id or "")
        if run is not None and run.codons and not is_terminal_status(run.codons[-1].status):
            return run.codons[-1].codon_id, run.codons[-1].status
        return None

    def codon_name(self, codon_id: str) -> str:
        """The configured name of a codon (its id when the hank does not know it)."""
        try:
            return self._config_for(codon_id).name
        except RuntimeCommandError:
            return codon_id

    def skip(self) -> bool:
        """Skip the running codon (the ``codon.skip`` command); False when none runs."""
        if self._runner is None:
            return False
        self._runner.interrupt("skip")
        return True

    def force_stop(self, reason: str | None = None) -> str:
        """Stop the running codon now (``codon.forceStop``) and return its id.

        The codon ends ``failed`` (retriable, "Force stopped: <reason>"), is not retried, and
        the runtime then waits for a command (next, start, redo, rollback, shutdown) instead of
        applying the codon's failure policy: the client that stopped it decides.
        """
        self._refuse_if_stopping()
        if self._runner is None:
            current = self.codon_in_progress()
            if current is not None and current[1] in ("preparing", "starting", "initializing"):
                raise RuntimeCommandError(f"Codon {current[0]} is {current[1]} (its agent has not"
                                    " started); stop it once it runs, or shut the runtime down")
            if current is not None:
                raise RuntimeCommandError(f"Codon {current[0]} is already finishing")
            raise RuntimeCommandError("No running codon to stop")
        codon_id = self._runner.spec.codon_id
        self._force_stop_reason = reason or "requested by a client"
        self._runner.interrupt("stop")
        self.emit("info", {"message": f"Codon {codon_id} force stopped"})
        return codon_id

    def start_next(self) -> str | None:
        """Start the thread's next codon (``codon.next``); return its id.

        ``None`` means nothing is left: the run then completes, as it does after the last codon
        with autostart on.
        """
        self._refuse_unless_waiting("start a codon")
        next_id = self.thread().next_codon_id
        self._queue_start(_StartRequest())
        return next_id

    def start_codon(self, codon_id: str, *, skip_rig: bool = False) -> None:
        """Start a codon of the execution plan by id (``codon.start``).

        It runs in the current run, after whatever ran last (a codon that already finished in
        this run gets another record), and the thread continues after it.
        """
        self._refuse_unless_waiting("start a codon")
        self._entry(codon_id)  # an unknown id is refused before anything is queued
        self._queue_start(_StartRequest(codon_id, skip_rig))

    def redo(self) -> str:
        """Run the most recent codon of the thread again, whatever its status (``codon.redo``)."""
        self._refuse_unless_waiting("redo a codon")
        thread = self.thread()
        if not thread.codons:
            raise RuntimeCommandError("No codon to redo: nothing has run yet")
        codon_id = thread.codons[0].codon.codon_id
        self._entry(codon_id)
        self._queue_start(_StartRequest(codon_id))
        return codon_id

    def force_shutdown(self, reason: str = CLIENT_REQUEST) -> None:
        """Stop at once (``server.force_shutdown``): like :meth:`request_shutdown`, exit code 1."""
        self._force = True
        self.request_shutdown(reason)

    def list_checkpoints(self, run_id: str | None = None) -> CheckpointListing:
        """Checkpoints recorded in state, newest first (``checkpoint.list``).

        Without ``run_id``: every run's, reported under the current run.  Only checkpoints the
        store still holds are listed (pruned ones cannot be restored), as far as this runtime
        knows them: the store itself is not read here, since the runtime may be using it in a
        worker thread (before boot has read it, nothing is filtered).
        """
        state = self.state
        if run_id is not None:
            run = state.run_by_id(run_id)
            if run is None:
                raise RuntimeCommandError(f"Run {run_id} not found")
            runs = [run]
        else:
            if not state.runs:
                raise RuntimeCommandError("No active run")
            runs = list(state.runs)
            run = state.run_by_id(self.run_id or "") or state.runs[0]
        known = self._known_checkpoints
        entries: list[CheckpointEntry] = []
        for listed in runs:
            for codon in reversed(listed.codons):
                for kind, sha in record_checkpoints(codon):
                    if known is not None and sha not in known:
                        continue
                    timestamp = (known[sha].get("timestamp") if known is not None else None) or (
                        getattr(codon, "end_time", None) or codon.start_time)
                    entries.append(CheckpointEntry(
                        run_id=listed.run_id, codon_id=codon.codon_id,
                        codon_name=self.codon_name(codon.codon_id), checkpoint_type=kind,
                        sha=sha, status=codon.status, timestamp=timestamp))
        return CheckpointListing(run_id=run.run_id, current_branch=run.git_branch,
                                 checkpoints=entries)

    def _queue_start(self, request: _StartRequest) -> None:
        # Claim the wait at once, so a second command before the loop wakes is refused.
        self._waiting = False
        self._commands.put_nowait(("start", request))

    def _refuse_if_stopping(self) -> None:
        if self._shutdown_reason is not None:
            raise RuntimeCommandError("The runtime is shutting down")
        if self._rolling_back:
            raise RuntimeCommandError("A rollback is in progress")

    def _refuse_unless_waiting(self, action: str) -> None:
        self._refuse_if_stopping()
        current = self.codon_in_progress()
        if self._runner is not None:
            current = (self._runner.spec.codon_id, "running")
        if current is not None:
            raise RuntimeCommandError(f"Codon already running ({current[0]}); skip or stop it first")
        if not self._waiting:
            raise RuntimeCommandError(f"Cannot {action} now: the runtime is between codons. It takes"
                                " this command while it waits for one (--no-autostart, after a"
                                " force stop or a rollback)")

    async def shutdown(self, reason: str) -> None:
        """End the run: stop the agent, mark the codon, end the run.  Idempotent."""
        if self._shutdown_reason is not None:
            if reason != self._shutdown_reason:
                self._force = True
            return
        self._shutdown_reason = reason
        self._stopping.set()
        if self._runner is not None:
            self._runner.interrupt("stop")
            return  # the codon's completion path ends the run
        await self._end_run(failed=reason not in (ALL_DONE,))

    def request_shutdown(self, reason: str) -> None:
        """Ask for a graceful shutdown from a signal handler: the running codon is stopped."""
        if self._shutdown_reason is None:
            self._shutdown_reason = reason
            self._stopping.set()
            if self._runner is not None:
                self._runner.interrupt("stop")
            self._commands.put_nowait(("shutdown", reason))
        else:
            self._force = True

    async def _end_run(self, *, failed: bool) -> None:
        run = self.state.run_by_id(self.run_id or "")
        if run is None or run.status != "running":
            return
        if run.codons and not is_terminal_status(run.codons[-1].status):
            return  # the codon's own completion ends the run
        self._budget_summary()
        end = RunFailed if failed else RunCompleted
        await self._transition(end(data=RunRef(run_id=run.run_id)))

    def _budget_summary(self) -> None:
        if not self.budget.has_limits:
            return
        self.emit("budget.summary", {
            "ceiling": {"maxDollars": self.budget.max_dollars,
                        "maxTimeSeconds": self.budget.max_seconds},
            "allocation": self.budget.allocation, "rows": self._budget_rows(),
            "totals": {"budgetDollars": self.budget.max_dollars,
                       "actualDollars": current_run_cost(self.state),
                       "actualTimeSeconds": time.monotonic() - self.started_at}})

    def _budget_rows(self) -> list[dict[str, Any]]:
        """One row per plan entry this run worked on: its limits and what it used."""
        from hankweave.fsutil import parse_iso, utc_now_iso
        from hankweave.state.costs import codon_tokens

        run = self.state.run_by_id(self.run_id or "")
        newest = {codon.codon_id: codon for codon in run.codons} if run else {}
        rows = []
        for entry in self.state.execution_plan:
            record = newest.get(entry.codon_id)
            if record is None:
                continue
            status: str = record.status if is_terminal_status(record.status) else "running"
            if status == "completed" and getattr(record, "budget_exceeded", None):
                status = "exceeded"
            limits = self.budget.limits.get(entry.codon_id)
            end = getattr(record, "end_time", None) or utc_now_iso()
            rows.append(_present({
                "codonId": entry.codon_id,
                "loopContext": (entry.loop_context.model_dump(
                    by_alias=True, include={"loop_id", "iteration", "codon_index_in_loop"})
                    if entry.loop_context else None),
                "status": status,
                "budget": _present({"maxDollars": limits.dollars if limits else None,
                                    "maxTimeSeconds": limits.seconds if limits else None,
                                    "maxOutputTokens": limits.output_tokens if limits else None}),
                "actual": {"dollars": codon_cost(record),
                           "timeSeconds": max(0.0, (parse_iso(end) - parse_iso(
                               record.start_time)).total_seconds()),
                           "outputTokens": codon_tokens(record).output_tokens}}))
        return rows

    def _exit_code(self) -> int:
        if self._force:
            return 1
        reason = self._shutdown_reason
        run = self.state.run_by_id(self.run_id or "")
        if reason == ALL_DONE:
            return 1 if run is not None and run.status in ("failed", "crashed") else 0
        if reason in SIGNAL_EXIT_CODES:
            return SIGNAL_EXIT_CODES[reason]
        if reason == CLIENT_REQUEST:
            return 0
        return 1

    async def finish(self) -> None:
        """After :meth:`drive`: end the run if it is still open, prune, release everything."""
        async with self._command_lock:  # a rollback in progress finishes first
            run = self.state.run_by_id(self.run_id or "")
            if run is not None and run.status == "running":
                last = run.codons[-1] if run.codons else None
                if last is None or is_terminal_status(last.status):
                    # A client that shuts down a finished plan ends it as completed.
                    done = self._shutdown_reason == ALL_DONE or (
                        self._shutdown_reason == CLIENT_REQUEST and self._plan_finished())
                    await self._end_run(failed=not done)
            await self._prune_checkpoints()

    def _plan_finished(self) -> bool:
        thread = self.thread()
        return (bool(thread.codons) and not thread.failed and not thread.has_running_codon
                and thread.next_codon_id is None)

    async def _prune_checkpoints(self) -> None:
        keep = set()
        for run in self.state.runs:
            for codon in run.codons:
                for attr in ("rig_setup_checkpoint", "completion_checkpoint",
                             "error_checkpoint", "skip_checkpoint"):
                    value = getattr(codon, attr, None)
                    if value:
                        keep.add(value)
        if self.state.initial_checkpoint:
            keep.add(self.state.initial_checkpoint)
        try:
            removed = await asyncio.to_thread(self.checkpoints.prune, RetentionPolicy(
                keep_last_per_run=self.config.keep_checkpoints_per_run,
                keep_ids=frozenset(keep)))
        except CheckpointError as exc:
            log.warning("checkpoint pruning failed: %s", exc)
            return
        for ident in removed:
            (self._known_checkpoints or {}).pop(ident, None)

    # ----- rollback -----

    async def rollback_to_last_success(self, *, auto_restart: bool = False) -> RollbackTarget:
        """Restore the newest successful point (``rollback.toLastSuccess``); see
        :func:`last_success_target`.  Refused while a codon runs."""
        self._refuse_rollback()
        target = last_success_target(self.thread(), self.state.initial_checkpoint)
        return await self._rollback_command(target, auto_restart)

    async def rollback_to_codon(self, codon_id: str, checkpoint_type: str = "end", *,
                                auto_restart: bool = False) -> RollbackTarget:
        """Restore a checkpoint of the newest record of ``codon_id`` (``rollback.toCodon``).

        ``checkpoint_type``: ``end`` (completed, else error, else skipped, else rig-setup),
        ``start`` (rig-setup, else completed, error, skipped) or one exact type.
        """
        self._refuse_rollback()
        target = codon_checkpoint_target(self.thread(), codon_id, checkpoint_type)
        return await self._rollback_command(target, auto_restart)

    async def rollback_to_checkpoint(self, sha_prefix: str, *,
                                     auto_restart: bool = False) -> RollbackTarget:
        """Restore the checkpoint whose id starts with ``sha_prefix`` (``rollback.toCheckpoint``).

        Searched in the execution thread first, then in every run (an abandoned timeline), then
        the initial checkpoint; no match and several matches are refused.
        """
        self._refuse_rollback()
        target = checkpoint_prefix_target(self.thread(), self.state, sha_prefix)
        return await self._rollback_command(target, auto_restart)

    def _refuse_rollback(self) -> None:
        self._refuse_if_stopping()
        current = self.codon_in_progress()
        if self._runner is not None or current is not None:
            raise RuntimeCommandError("Cannot rollback while a codon is running; skip or stop it first")
        if not self._waiting:
            raise RuntimeCommandError("Cannot rollback now: the runtime is between codons. It rolls"
                                " back while it waits for a command (--no-autostart, after a"
                                " force stop)")

    async def _rollback_command(self, target: RollbackTarget,
                                auto_restart: bool) -> RollbackTarget:
        """Restore ``target`` while the drive loop waits, then restart or stay idle."""
        known = self._checkpoint_data()
        if known is not None and target.sha not in known:
            raise RuntimeCommandError(f"Checkpoint {target.sha[:12]} is no longer in the checkpoint"
                                " store (pruned?); choose another")
        self._rolling_back = True  # set before the first await: concurrent commands see it
        try:
            async with self._command_lock:
                thread = self.thread()
                from_run = self.run_id or (self.state.runs[0].run_id if self.state.runs else "")
                newer = codons_newer_than(thread, target)
                self.emit("rollback.started", {
                    "fromRun": from_run,
                    "fromCodon": thread.codons[0].codon.codon_id if thread.codons else None,
                    "toCodon": target.codon_id or "", "toCheckpoint": target.sha,
                    "checkpointType": event_checkpoint_type(target),
                    "codonsToProcess": newer})
                try:
                    await self._rollback_to(
                        target.run_id, target.codon_id, target.sha,
                        rerun=target.codon_id if target.checkpoint_type == "rig-setup" else None)
                except CheckpointError as exc:
                    raise RuntimeCommandError(f"Rollback to {target.sha[:12]} failed: {exc}") from exc
                self.emit("rollback.completed", {
                    "fromRun": from_run, "toRun": self.run_id or "", "checkpoint": target.sha,
                    "codonId": target.codon_id or "",
                    "codonName": self.codon_name(target.codon_id) if target.codon_id else "",
                    "checkpointType": event_checkpoint_type(target),
                    "autoRestart": auto_restart})
                self._snapshot()
        finally:
            self._rolling_back = False
        if auto_restart:
            self._queue_start(_StartRequest())
        else:
            self.emit("server.idle", {"reason": "rollback-completed",
                                      "message": "Rollback completed. Use 'codon.next' to"
                                                 " continue."})
        return target

    async def _rollback_to_last_success(self, thread: ExecutionThread) -> None:
        """Boot recovery: restore the last success of a failed thread (no command checks)."""
        target = last_success_target(thread, self.state.initial_checkpoint)
        await self._rollback_to(target.run_id, target.codon_id, target.sha,
                                rerun=target.codon_id if target.checkpoint_type == "rig-setup"
                                else None)

    async def _rollback_to(self, run_id: str | None, after_codon: str | None, sha: str, *,
                           rerun: str | None = None) -> None:
        if sha:
            await asyncio.to_thread(self.checkpoints.restore, sha)
        current = self.state.run_by_id(self.run_id or "")
        if current is not None and current.status == "running":
            await self._transition(RunCompleted(data=RunRef(run_id=current.run_id)))
        source_run = run_id or (self.state.runs[0].run_id if self.state.runs else None)
        if source_run is None:
            await self._start_run(FreshStart(initial_checkpoint_sha=self.state.initial_checkpoint))
            return
        if rerun is not None:
            self._skip_rig_for = rerun
        await self._start_run(ContinuationStart(
            source=ContinuationSource(run_id=source_run, after_codon=after_codon,
                                      checkpoint_sha=sha),
            reason="rollback"))
        self.emit("info", {"message": f"Rolled back to {after_codon or 'the start'}"
                                      f" (checkpoint {sha[:8]})"})


async def rollback_offline(owned: OwnedExecution, checkpoints: CheckpointStore,
                           codon_id: str) -> tuple[str, str]:
    """``hankweave rollback``: restore a codon's checkpoint while no runtime runs.

    The work tree goes back to the codon's completion checkpoint and an empty continuation run
    after it (reason ``rollback``) is recorded, so the next ``hankweave run -e`` continues
    right after that codon.  Returns the new run's id and the checkpoint.
    """
    store = owned.store
    data = checkpoints.checkpoint_data()
    source_run, sha = find_rollback_target(analyze_execution_thread(store.state, data), codon_id)
    checkpoints.restore(sha)
    run_id = new_run_id()
    folder = checkpoints.execution_dir / ".hankweave" / "runs" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    await store.transition(RunStarted(data=RunStartedData(
        run_id=run_id, run_folder=str(folder), git_branch=f"run-{run_id}",
        starting_conditions=ContinuationStart(
            source=ContinuationSource(run_id=source_run, after_codon=codon_id,
                                      checkpoint_sha=sha), reason="rollback"),
        server_pid=os.getpid())))
    await store.transition(RunCompleted(data=RunRef(run_id=run_id)))
    return run_id, sha


class PromptBuilder:
    """Builds a codon's prompts and agent environment (a seam for tests and replay)."""

    def __init__(self, hank: HankFile, hank_dir: Path, agent_root: Path,
                 env: Mapping[str, str]) -> None:
        self.hank, self.hank_dir, self.agent_root, self.base_env = hank, hank_dir, agent_root, env

    def user(self, codon: Codon) -> str:
        from hankweave.config.prompts import build_user_prompt

        return build_user_prompt(codon, self.hank_dir, self.agent_root).text

    def system(self, codon: Codon) -> str | None:
        from hankweave.config.prompts import build_system_prompt

        return build_system_prompt(self.hank, codon, self.hank_dir, self.agent_root)

    def extension(self, text: str) -> str:
        from hankweave.config.prompts import build_extension_prompt

        return build_extension_prompt(text, self.agent_root)

    def env(self, codon: Codon) -> dict[str, str]:
        from hankweave.config.settings import agent_env

        return agent_env(self.base_env, codon.env or {})


def _present(payload: dict[str, Any]) -> dict[str, Any]:
    """An event payload without its absent optional fields (absent on the wire, not null)."""
    return {key: value for key, value in payload.items() if value is not None}


def _index_codons(hank: HankFile) -> dict[str, Codon]:
    index: dict[str, Codon] = {}
    for item in hank.hank:
        if isinstance(item, Loop):
            for codon in item.codons:
                index[codon.id] = codon
        else:
            index[item.id] = item
    return index


__all__ = [
    "ALL_DONE",
    "CLIENT_REQUEST",
    "CheckpointEntry",
    "CheckpointListing",
    "CodonResult",
    "PromptBuilder",
    "RollbackTarget",
    "Runtime",
    "RuntimeCommandError",
    "RuntimeConfig",
    "checkpoint_prefix_target",
    "codon_checkpoint_target",
    "find_rollback_target",
    "last_success_target",
    "new_run_id",
    "rollback_offline",
]
