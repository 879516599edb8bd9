"""Testing harnesses: an attempt context for tests, one attempt through the real runner, and
``HarnessContract``, the conformance suite every harness subclasses.

A harness's test module says how to make its agent behave in a few scenarios, and pytest runs
every ``test_*`` method below against it::

    class TestMyHarness(HarnessContract):
        harness_class = MyHarness

        def arrange(self, scenario, request):
            ...  # script the agent (a fake script, a recording, the mock provider)
            return Arranged(MyHarness, request)

The scenarios (:data:`Scenario`):

``complete``
    a short session that succeeds: ``init``, at least one assistant message, a success result;
``resume``
    the same, continuing ``request.session_id_to_resume``; with ``request.fork_session``, a
    copy of that session under a new session id (the ``init`` record's), the original left
    as it was;
``hang``
    the agent starts (and reports its process, if it has one), sends ``init``, then waits
    forever: the runtime's cancellation must end it;
``error-after-success``
    a success result, then the harness raises (a known SDK bug the kernel must shrug off).

``arrange`` may ``pytest.skip`` a scenario the harness cannot produce.

The preflight (``Harness.preflight``) is proven with :attr:`HarnessContract.credentials`: the
variables that give the harness's agent credentials for :attr:`HarnessContract.model`.  With
them the preflight finds no error; without them it names one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from hankweave.codonlog import CodonLogParser, LogModel, UnknownRecord, parse_record
from hankweave.execution.layout import ExecutionLayout
from hankweave.fsutil import process_running
from hankweave.harness import (
    AttemptContext,
    AttemptPolicy,
    CodonLogRecord,
    CodonRequest,
    Harness,
    HarnessConfig,
    HumanReply,
    PreflightKind,
    PreflightProblem,
    PreflightRequest,
    ToolDecision,
)
from hankweave.models import ModelCost, ModelEntry

Scenario = Literal["complete", "resume", "hang", "error-after-success"]

CONTRACT_MODEL = ModelEntry(provider_id="contract", model_id="contract-model",
                            name="Contract test model", context_limit=200_000,
                            output_limit=64_000,
                            cost=ModelCost(input=1.0, output=5.0, cache_read=0.1,
                                           cache_write=1.25))
"""The model a contract request names, unless a suite sets :attr:`HarnessContract.model`."""


# ----- an attempt context for tests -----


class RecordingPolicy(AttemptPolicy):
    """An :class:`AttemptPolicy` that records what it was asked and answers as told."""

    def __init__(self, *, deny: Mapping[str, str] | None = None,
                 answers: Sequence[str] | None = None) -> None:
        self.deny = dict(deny or {})
        """Tool name -> the denial message (other tools are allowed)."""
        self.answers = list(answers or [])
        """Answers to ``ask_human``, in order (none left: no human available)."""
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.questions: list[tuple[str, list[str] | None]] = []

    async def authorize_tool(self, request: CodonRequest, name: str,
                             tool_input: Mapping[str, Any]) -> ToolDecision:
        self.tool_calls.append((name, dict(tool_input)))
        if name in self.deny:
            return ToolDecision.deny(self.deny[name])
        return ToolDecision.allow()

    async def ask_human(self, request: CodonRequest, question: str,
                        options: Sequence[str] | None) -> HumanReply:
        self.questions.append((question, list(options) if options is not None else None))
        if self.answers:
            return HumanReply.answered(self.answers.pop(0))
        return await super().ask_human(request, question, options)


def attempt_context(root: Path, request: CodonRequest, *, harness: str = "harness",
                    policy: AttemptPolicy | None = None,
                    idle_timeout_s: float | None = None) -> AttemptContext:
    """A real :class:`AttemptContext` over an execution directory at ``root``, for calling a
    harness directly in a test; reported processes are only remembered."""
    layout = ExecutionLayout(root)
    run_id = request.run_id or "test-run"
    codon_id = request.codon_id or "codon"

    async def remember(pid: int) -> None:
        return None

    return AttemptContext(
        request=request, log_path=layout.codon_log_path(run_id, codon_id),
        stderr_path=layout.codon_stderr_path(run_id, codon_id),
        state_dir=layout.harness_state_dir(harness), on_process=remember, policy=policy,
        idle_timeout_s=idle_timeout_s)


def as_dict(record: CodonLogRecord) -> dict[str, Any]:
    """A yielded record as the JSON data the codon log gets."""
    return record.to_dict() if isinstance(record, LogModel) else dict(record)


async def collect(harness: Harness, request: CodonRequest,
                  context: AttemptContext) -> list[dict[str, Any]]:
    """Every record one pass of ``harness`` yields, as JSON data."""
    return [as_dict(record) async for record in harness.run_codon(request, context)]


# ----- one attempt through the kernel's runner -----


@dataclass
class AttemptRun:
    """What :func:`run_attempt` saw."""

    outcome: Any
    """The runner's :class:`~hankweave.runtime.codon_runner.AttemptOutcome`."""
    record: Any
    """The codon's state record after the attempt."""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    log_path: Path | None = None


async def run_attempt(harness: type[Harness], request: CodonRequest, root: Path, *,
                      config: HarnessConfig | None = None, policy: AttemptPolicy | None = None,
                      idle_timeout_s: float | None = None) -> AttemptRun:
    """Run one attempt of ``request`` with the kernel's real runner and state store, in a
    throwaway execution directory at ``root``: what the runtime would record, without a hank."""
    from hankweave.runtime.codon_runner import AttemptSpec, CodonRunner
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
    from hankweave.state.types import FreshStart, last_record

    layout = ExecutionLayout(root)
    run_id, codon_id = request.run_id or "test-run", request.codon_id or "codon"
    request = CodonRequest(**{**request.__dict__, "run_id": run_id, "codon_id": codon_id})
    store = StateStore.open(layout.hankweave_dir)
    events: list[tuple[str, dict[str, Any]]] = []

    def emit(event_type: str, data: Any) -> None:
        events.append((event_type, data.model_dump(mode="json", by_alias=True,
                                                   exclude_unset=True)))

    try:
        await store.transition(RunStarted(data=RunStartedData(
            run_id=run_id, run_folder=str(layout.run_folder(run_id)), git_branch="test",
            starting_conditions=FreshStart(), server_pid=os.getpid())))
        await store.transition(CodonStarted(data=CodonStartedData(run_id=run_id,
                                                                  codon_id=codon_id)))
        for status, metadata in (("starting", CodonMetadata()), ("initializing", CodonMetadata(
                claude_pid=os.getpid(), claude_log_path="log"))):
            previous = last_record(store.state.runs[0], codon_id)
            assert previous is not None
            await store.transition(CodonTransitioned(data=CodonTransitionedData.model_validate(
                {"runId": run_id, "codonId": codon_id, "from": previous[1].status, "to": status,
                 "metadata": metadata})))
        spec = AttemptSpec(
            request=request, harness=harness, harness_config=config,
            log_path=layout.codon_log_path(run_id, codon_id),
            stderr_path=layout.codon_stderr_path(run_id, codon_id),
            state_dir=layout.harness_state_dir(harness.name), idle_timeout_s=idle_timeout_s,
            policy=policy or AttemptPolicy())
        outcome = await CodonRunner(spec, store=store, reporter=Reporter(emit)).run()
        found = last_record(store.state.runs[0], codon_id)
        return AttemptRun(outcome, found[1] if found else None, events, spec.log_path)
    finally:
        await store.close()


# ----- the contract -----


@dataclass(frozen=True)
class Arranged:
    """What a scenario runs: the harness class (a replay binds one to its recording) and the
    request (the mock provider's address in ``env``, say)."""

    harness: type[Harness]
    request: CodonRequest
    config: HarnessConfig | None = None


class HarnessContract:
    """The behaviour every harness must have (see the module docstring)."""

    harness_class: ClassVar[type[Harness]]
    """The harness under test."""

    model: ClassVar[ModelEntry] = CONTRACT_MODEL
    """The model the requests name."""

    cancel_within_s: ClassVar[float] = 10.0
    """How soon a cancelled iteration must have ended, its processes included."""

    bad_config: ClassVar[Mapping[str, Any]] = {"noSuchSetting": True}
    """A ``harnesses.<name>`` section the harness's Config must reject..."""
    bad_config_path: ClassVar[str] = "noSuchSetting"
    """...at this path within the section."""

    credentials: ClassVar[Mapping[str, str] | None] = None
    """Variables that give the agent credentials for :attr:`model` (``{"OPENAI_API_KEY":
    "sk-test"}``), or None when the harness needs none (a replay, a fake)."""

    def arrange(self, scenario: Scenario, request: CodonRequest) -> Arranged:
        """Make the agent behave as ``scenario`` says for ``request`` (see the module
        docstring); ``pytest.skip`` what the harness cannot do."""
        raise NotImplementedError(f"{type(self).__name__} must implement arrange()")

    # -- helpers --

    def request(self, work_dir: Path, **fields: Any) -> CodonRequest:
        work_dir.mkdir(parents=True, exist_ok=True)
        values: dict[str, Any] = {"prompt": "Write notes.md saying hello.",
                                  "system_prompt": None, "model": self.model,
                                  "work_dir": work_dir, "codon_id": "contract",
                                  "run_id": "contract-run", "codon_name": "Contract"}
        values.update(fields)
        return CodonRequest(**values)

    def play(self, scenario: Scenario, tmp_path: Path, **fields: Any
             ) -> tuple[list[dict[str, Any]], AttemptContext]:
        """One pass of ``scenario`` called directly: its records, and the context it had."""
        arranged = self.arrange(scenario, self.request(tmp_path / "agentRoot", **fields))
        harness = arranged.harness(arranged.config)
        context = attempt_context(tmp_path, arranged.request, harness=arranged.harness.name)

        async def run() -> list[dict[str, Any]]:
            try:
                return await asyncio.wait_for(collect(harness, arranged.request, context), 60)
            finally:
                await harness.aclose()
                context.stderr.close()

        return asyncio.run(run()), context

    def preflight(self, home: Path, env: Mapping[str, str]) -> list[PreflightProblem]:
        """The harness's preflight for :attr:`model` with only ``PATH``, an empty ``HOME``
        (no stored login) and ``env`` in the agent's environment."""
        home.mkdir(parents=True, exist_ok=True)
        agent_env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), **env}
        request = PreflightRequest(model=self.model, env=agent_env, env_overlay=dict(env))
        return self.harness_class.preflight(request, self.harness_class.Config())

    # -- the tests --

    def test_the_preflight_passes_with_credentials(self, tmp_path: Path) -> None:
        problems = self.preflight(tmp_path / "home", self.credentials or {})
        assert all(isinstance(problem, PreflightProblem) for problem in problems), problems
        assert not [problem for problem in problems if not problem.warning], problems

    def test_the_preflight_names_the_missing_credential(self, tmp_path: Path) -> None:
        problems = self.preflight(tmp_path / "home", {})
        missing = [problem for problem in problems if problem.kind is PreflightKind.CREDENTIALS
                   and not problem.warning]
        if self.credentials is None:
            assert not missing, problems
            return
        assert missing, f"{self.harness_class.name} accepts an agent without credentials"
        assert any(name in problem.message for name in self.credentials
                   for problem in missing), missing

    def test_it_is_a_named_harness_with_sane_defaults(self) -> None:
        harness = self.harness_class
        assert isinstance(harness.name, str) and harness.name.strip()
        assert isinstance(harness.package, str) and harness.package.startswith("hankweave")
        timeout = harness.default_idle_timeout_s
        assert timeout is None or (isinstance(timeout, int) and timeout > 0)
        assert harness.close_timeout_s > 0
        assert isinstance(harness().config, harness.Config)

    def test_a_bad_setting_is_rejected_with_its_path(self) -> None:
        from hankweave.app.plugin_settings import harness_config

        harness = self.harness_class
        config, errors = harness_config(harness, dict(self.bad_config), {
            key: "hankweave.json" for key in self.bad_config})
        assert config is None
        issue = next((e for e in errors
                      if e.path == f"harnesses.{harness.name}.{self.bad_config_path}"), None)
        assert issue is not None, errors
        assert "hankweave.json" in issue.message

    def test_records_come_in_the_codon_log_order(self, tmp_path: Path) -> None:
        records, _ = self.play("complete", tmp_path)
        typed = [parse_record(record) for record in records]
        unknown = [t for t in typed if isinstance(t, UnknownRecord)]
        assert not unknown, f"records the codon log does not know: {unknown}"
        kinds = [CodonLogParser().feed(record).kind for record in records]
        assert kinds[0] == "init", kinds
        assert kinds[-1] == "result", kinds
        assert kinds.count("result") == 1, kinds
        assert "assistant" in kinds, kinds
        parser = CodonLogParser()
        for record in records:
            parser.feed(record)
        assert parser.session_id and parser.success

    def test_a_session_is_resumed(self, tmp_path: Path) -> None:
        if not self.harness_class.supports_resume:
            pytest.skip(f"{self.harness_class.name} does not resume sessions")
        first, _ = self.play("complete", tmp_path / "first")
        session = CodonLogParser().feed(first[0]).session_id
        assert session
        again, _ = self.play("resume", tmp_path / "second", session_id_to_resume=session)
        parser = CodonLogParser()
        for record in again:
            parser.feed(record)
        assert parser.session_id == session
        assert parser.success

    def test_a_forked_resume_continues_a_session_of_its_own(self, tmp_path: Path) -> None:
        """Each attempt that resumes a session forks it (``fork_session``): a new session id
        every time, and the original stays resumable, as the next attempt will resume it."""
        if not self.harness_class.supports_resume:
            pytest.skip(f"{self.harness_class.name} does not resume sessions")
        first, _ = self.play("complete", tmp_path / "first")
        original = CodonLogParser().feed(first[0]).session_id
        assert original
        forks = []
        for name in ("fork-1", "fork-2"):
            records, _ = self.play("resume", tmp_path / name, session_id_to_resume=original,
                                   fork_session=True)
            parser = CodonLogParser()
            for record in records:
                parser.feed(record)
            assert parser.success, records
            assert parser.session_id and parser.session_id != original, parser.session_id
            forks.append(parser.session_id)
        assert forks[0] != forks[1], forks
        again, _ = self.play("resume", tmp_path / "again", session_id_to_resume=original)
        parser = CodonLogParser()
        for record in again:
            parser.feed(record)
        assert parser.session_id == original
        assert parser.success

    def test_cancelling_ends_the_agent_in_time_and_leaves_no_process(self,
                                                                    tmp_path: Path) -> None:
        arranged = self.arrange("hang", self.request(tmp_path / "agentRoot"))
        harness = arranged.harness(arranged.config)
        context = attempt_context(tmp_path, arranged.request, harness=arranged.harness.name)

        async def cancel_after_init() -> float:
            started = asyncio.Event()

            async def consume() -> None:
                async for record in harness.run_codon(arranged.request, context):
                    if as_dict(record).get("type") == "system":
                        started.set()

            task = asyncio.create_task(consume())
            await asyncio.wait_for(started.wait(), 60)
            begun = time.monotonic()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, self.cancel_within_s + 5)
            await asyncio.wait_for(harness.aclose(), self.cancel_within_s + 5)
            context.stderr.close()
            return time.monotonic() - begun

        elapsed = asyncio.run(cancel_after_init())
        assert elapsed <= self.cancel_within_s, f"took {elapsed:.1f}s"
        assert not [pid for pid in context.reported_pids if process_running(pid)]

    def test_an_error_after_a_success_result_keeps_the_attempt_successful(
            self, tmp_path: Path) -> None:
        arranged = self.arrange("error-after-success", self.request(tmp_path / "agentRoot"))
        run = asyncio.run(run_attempt(arranged.harness, arranged.request, tmp_path / "exec",
                                      config=arranged.config))
        assert run.outcome.success and run.outcome.exit_code == 0, run.outcome
        assert run.outcome.failure_reason is None
        warnings = [data for kind, data in run.events
                    if kind == "error" and data.get("severity") == "warning"]
        assert warnings, "the error after the result is reported as a warning"


__all__ = [
    "CONTRACT_MODEL",
    "Arranged",
    "AttemptRun",
    "HarnessContract",
    "RecordingPolicy",
    "Scenario",
    "as_dict",
    "attempt_context",
    "collect",
    "run_attempt",
]
