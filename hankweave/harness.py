"""The harness contract: what runs one codon's agent, and what the kernel gives it to do so.

A harness takes a codon's prompt, model and workspace, drives an LLM agent there, and streams
the agent's messages back as codon-log records.  Harnesses are plugins (``register_harnesses``);
the kernel picks one per codon with the ``select_harness`` decision hook and then calls it
directly.  The kernel ships none: ``claude`` comes from ``hankweave-harness-claude``, ``pi``
from ``hankweave-harness-pi``, ``replay`` from ``hankweave-replay``.

Before a run creates anything (and in ``hankweave validate``), the kernel asks each codon's
harness :meth:`Harness.preflight` whether it could run the codon: its packages importable, its
credentials in the environment the agent will receive.

One attempt of a codon, as the runtime drives it (``docs/harnesses.md`` has the whole story):

1. the runtime builds one instance of the harness class with the harness's validated
   :attr:`Harness.Config` (the ``harnesses.<name>`` settings section);
2. it calls :meth:`Harness.run_codon` with a :class:`CodonRequest` (what to run) and an
   :class:`AttemptContext` (where to keep things, and the kernel callbacks), and writes every
   record the iterator yields to the codon log;
3. for each extension (``exhaustWithPrompt``) it calls :meth:`~Harness.run_codon` again on the
   same instance, with ``request.extension`` set and the session to resume;
4. it calls :meth:`Harness.aclose` once, bounded by :attr:`Harness.close_timeout_s`; past that,
   every process the harness reported is killed.

To stop a codon (skip, stop, budget, idle timeout) the runtime cancels the iteration; the
harness ends its agent before the iterator finishes closing.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

from hankweave.fsutil import open_private, private_dir
from hankweave.plugin_config import PluginConfig

if TYPE_CHECKING:
    from hankweave.codonlog import LogModel
    from hankweave.models import ModelEntry
    from hankweave.sandbox import Sandbox

CodonLogRecord: TypeAlias = "Mapping[str, Any] | LogModel"
"""What a harness yields: one codon-log record as JSON data (the typed builders of
:mod:`hankweave.codonlog` make it) or as a :mod:`hankweave.codonlog` model."""


class HarnessSelectionError(LookupError):
    """No harness can be chosen for a codon's model."""


class HarnessSelection(Protocol):
    """The decision of which harness plays codons on a model.

    The registry makes it from the plugins' ``select_harness`` hook; a replay makes it from
    its recording (every codon: the recording's player).  The runtime asks only this.
    """

    def select_harness(self, model: ModelEntry) -> type[Harness]:
        """The harness class that runs codons on ``model``."""
        ...


class AgentStartError(RuntimeError):
    """A harness could not start its agent (a missing binary, a spawn that failed).

    Raised from :meth:`Harness.run_codon`, it fails the attempt as a local setup problem that a
    retry cannot fix, whatever its message says: its text is not classified, since a path in it
    could read as a status code ("pytest-429") or a rate limit.
    """


class HarnessNotInstalledError(HarnessSelectionError):
    """A codon's model needs a harness that no installed plugin provides."""


class PreflightKind(enum.Enum):
    """What a :class:`PreflightProblem` is about: the kernel treats each kind its own way."""

    INSTALL = "install"
    """A package, SDK or program the harness needs is missing: always an error."""
    CREDENTIALS = "credentials"
    """The agent would have no credentials for the model.  Not checked under the mock
    provider (``run --mock-provider``, which hands agents its own keys) or ``validate
    --offline``."""
    MODEL = "model"
    """Something about the model itself (a price nobody gave, say)."""


@dataclass(frozen=True)
class PreflightProblem:
    """One reason a harness could not run a codon, found before anything starts."""

    kind: PreflightKind
    message: str
    """What is wrong and how to fix it, naming the variable, package or setting concerned
    (``set ANTHROPIC_API_KEY (or HANKWEAVE_ANTHROPIC_API_KEY, ...) in the environment``)."""
    warning: bool = False
    """The harness cannot tell for sure (AWS credentials may come from an instance role):
    reported as a warning, the run goes ahead."""


@dataclass(frozen=True)
class PreflightRequest:
    """What :meth:`Harness.preflight` checks: one codon's model and agent environment."""

    model: ModelEntry
    """The codon's resolved catalogue entry, as :attr:`CodonRequest.model` will be."""
    env: Mapping[str, str]
    """The environment the agent will receive, as :attr:`CodonRequest.env` will be (the
    ``HANKWEAVE_<X>`` passthrough and the codon's ``env`` applied; no mock provider)."""
    env_overlay: Mapping[str, str]
    """What the hank adds to it, as :attr:`CodonRequest.env_overlay` (the passthrough and the
    codon's ``env``)."""
    catalogued: bool = True
    """Whether the model catalogue knows the model (False: a ``pi/<provider>/<model>``
    placeholder, with no price unless the harness's settings give one)."""


class HarnessConfig(PluginConfig):
    """Base of a harness's settings model (:attr:`Harness.Config`).

    Strict (an unknown key is an error naming its JSON path), immutable, and camelCase in the
    settings files (``harnesses.claude.maxTurns``), snake_case in Python.  Give every field a
    default: a user who writes no section gets the defaults.
    """


@dataclass(frozen=True)
class CodonRequest:
    """What one pass of a codon attempt runs."""

    prompt: str
    """The user prompt, fully assembled (files read, templates expanded); for an extension,
    the extension prompt."""
    system_prompt: str | None
    """The system prompt to append to the harness's own, or None."""
    model: ModelEntry
    """The codon's resolved catalogue entry (real provider and model ids, limits, prices)."""
    work_dir: Path
    """The codon's workspace (the execution's ``agentRoot/``); the agent's tools stay inside."""
    session_id_to_resume: str | None = None
    """The agent session to continue (``continue-previous`` codons and every extension), or
    None for a fresh one."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment for the agent process: the runtime has already filtered and merged it."""
    env_overlay: Mapping[str, str] = field(default_factory=dict)
    """What the hank and the runtime add to the environment, already merged into :attr:`env`:
    the ``HANKWEAVE_<X>`` passthrough, the codon's ``env``, a mock provider's endpoints and
    keys, and the agent marker (:data:`hankweave.processes.AGENT_MARKER_ENV`), in that order.
    A harness that builds its agent's environment from an allowlist of :attr:`env` (the Claude
    harness, as the original) applies these over it."""
    auto_compact: bool = False
    """The codon's ``autoCompact``: let the agent compact its session at the context limit."""
    codon_id: str = ""
    """The codon's runtime id (``review#1``), for logs and scripted harnesses."""
    run_id: str = ""
    """The run the attempt belongs to."""
    codon_name: str = ""
    """The codon's configured name, for display."""
    extension: bool = False
    """This pass extends the session of the previous pass (``exhaustWithPrompt``)."""
    fork_session: bool = False
    """Continue from a *copy* of :attr:`session_id_to_resume`, under a new session id, and leave
    the original exactly as it was.  The runtime sets it on the first pass of every attempt that
    resumes a session (``continue-previous``, and a resume after an interruption), so each
    attempt has a conversation of its own: the turns of a failed, killed or timed-out attempt
    never reach a later one (docs/harnesses.md, "Sessions").  The ``init`` record carries the
    new id, which the state records as the codon's session.  Extensions continue the attempt's
    own session and never fork."""
    sandbox: Sandbox | None = None
    """The OS sandbox the harness runs its agent's processes in (the CLI and all it starts, a
    ``bash`` tool's commands), with :meth:`Sandbox.wrap <hankweave.sandbox.Sandbox.wrap>`;
    None: unsandboxed (``sandbox.mode`` ``off``, or bubblewrap not available: the run said
    so)."""
    resumes_interruption: bool = False
    """This attempt resumes :attr:`session_id_to_resume` after a run that ended waiting for a
    human (docs/human-in-the-loop.md).  The session was cut while a tool call (``ask_human``, or
    one that needed approval) was pending.  A harness that keeps pending tool calls in its own
    session (the pi harness) runs them again, and their ``ask_human`` / ``authorize_tool`` now
    return the recorded answer at once, then goes on without sending :attr:`prompt`.  A harness
    whose agent cannot hold a pending call (the Claude CLI) sends :attr:`prompt`, which tells
    the agent the answers, as the next user turn."""


@dataclass(frozen=True)
class ToolDecision:
    """The kernel's answer to :meth:`AttemptContext.authorize_tool`."""

    allowed: bool
    message: str = ""
    """Why a call is denied, in words the agent is shown as the tool's error result."""
    updated_input: Mapping[str, Any] | None = None
    """The input to run the tool with instead of the agent's (None: as the agent asked)."""

    @classmethod
    def allow(cls, updated_input: Mapping[str, Any] | None = None) -> ToolDecision:
        return cls(True, "", updated_input)

    @classmethod
    def deny(cls, message: str) -> ToolDecision:
        return cls(False, message)


@dataclass(frozen=True)
class HumanReply:
    """The kernel's answer to :meth:`AttemptContext.ask_human`."""

    answer: str | None
    """The human's answer, or None when no human can answer."""
    message: str = ""
    """When there is no answer: what the agent is told instead (its tool result)."""

    @property
    def available(self) -> bool:
        return self.answer is not None

    @classmethod
    def answered(cls, answer: str) -> HumanReply:
        return cls(answer)

    @classmethod
    def unavailable(cls, message: str) -> HumanReply:
        return cls(None, message)


NO_HUMAN_MESSAGE = ("No human is available to answer during this run. Continue on your own"
                    " judgement and state the assumption you made.")


class AttemptPolicy:
    """Kernel-side decisions a harness asks for while an attempt runs.

    This default allows every tool call and has no human to ask: a hank runs unattended, as in
    the original.  The human-in-the-loop layer (approval rules, questions answered from the CLI
    or a WebSocket client) replaces it through the runtime's configuration; harnesses only see
    :meth:`AttemptContext.authorize_tool` and :meth:`AttemptContext.ask_human`.
    """

    async def authorize_tool(self, request: CodonRequest, name: str,
                             tool_input: Mapping[str, Any]) -> ToolDecision:
        """May the agent of ``request`` call tool ``name`` with ``tool_input``?"""
        return ToolDecision.allow()

    async def ask_human(self, request: CodonRequest, question: str,
                        options: Sequence[str] | None) -> HumanReply:
        """Put ``question`` (with its allowed answers, if any) to a human and wait."""
        return HumanReply.unavailable(NO_HUMAN_MESSAGE)


class StderrLog:
    """A file next to the codon log that collects the agent's stderr (``<codon>-stderr.log``).

    File-like enough for ``subprocess`` and ``asyncio.create_subprocess_exec`` (``fileno()``)
    and for line callbacks (``write(text)``).  Created on first use, appended to by every pass
    of the attempt, closed by the runtime after :meth:`Harness.aclose`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None

    def _open(self) -> IO[bytes]:
        if self._file is None:
            private_dir(self.path.parent)
            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
            self._file = os.fdopen(fd, "ab", buffering=0)  # closed in close()
        return self._file

    def write(self, text: str | bytes) -> int:
        """Append ``text`` (a line callback's line gets no newline added)."""
        data = text.encode("utf-8", "replace") if isinstance(text, str) else text
        return self._open().write(data)

    def fileno(self) -> int:
        return self._open().fileno()

    def flush(self) -> None:
        """Unbuffered: nothing to flush (kept for file-like callers)."""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class AttemptContext:
    """What the kernel gives a harness for one codon attempt, next to the :class:`CodonRequest`.

    The runtime builds it; harnesses use it and never build one themselves (tests use
    ``hankweave.testing.attempt_context``).
    """

    def __init__(
        self,
        *,
        request: CodonRequest,
        log_path: Path,
        stderr_path: Path,
        state_dir: Path,
        on_process: Callable[[int], Awaitable[None]],
        policy: AttemptPolicy | None = None,
        idle_timeout_s: float | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        self.request = request
        self.log_path = log_path
        """The codon log.  The runtime writes it from the records the harness yields; a harness
        must not write it itself."""
        self.stderr = StderrLog(stderr_path)
        self._state_dir = state_dir
        self.idle_timeout_s = idle_timeout_s
        """How long the runtime waits for the next record before it aborts the attempt (None:
        forever).  For information: the runtime enforces it."""
        self._on_process = on_process
        self._on_warning = on_warning
        self._policy = policy or AttemptPolicy()
        self._pids: list[int] = []
        self._busy = 0
        self._asking = 0

    @property
    def log_dir(self) -> Path:
        """The run's folder: the codon log and the stderr file live here."""
        return self.log_path.parent

    @property
    def state_dir(self) -> Path:
        """This harness's own folder, ``.hankweave/harnesses/<name>/``, kept across runs and
        resumes (the pi harness keeps its sessions there).  Created on first access."""
        return private_dir(self._state_dir)

    @property
    def reported_pids(self) -> tuple[int, ...]:
        """Every process :meth:`report_process` was told about, oldest first."""
        return tuple(self._pids)

    async def report_process(self, pid: int) -> None:
        """Tell the kernel the agent now runs in process ``pid`` (a CLI the harness started).

        State records it as the codon's ``claudePid`` before this returns, so a crashed run
        can be cleaned up; the runtime kills it if :meth:`Harness.aclose` overruns.  An
        in-process agent reports nothing: the record then names the runtime's own process.
        """
        if pid <= 0 or pid == os.getpid():
            raise ValueError(f"report_process({pid}): not an agent process of its own")
        self._pids.append(pid)
        await self._on_process(pid)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Mark a stretch where the agent works without producing records (a long tool, a
        slow first token): meanwhile the runtime's idle limit is at least five minutes (the
        original pi watchdog's busy limit), however short the idle timeout."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    @property
    def busy_now(self) -> bool:
        """Whether a :meth:`busy` stretch is open."""
        return self._busy > 0

    @property
    def waiting_for_human(self) -> bool:
        """Whether an :meth:`ask_human` or :meth:`authorize_tool` call is waiting for the
        kernel's answer (a person may take hours: the runtime's idle limit is off)."""
        return self._asking > 0

    @contextlib.contextmanager
    def _asking_kernel(self) -> Iterator[None]:
        self._asking += 1
        try:
            yield
        finally:
            self._asking -= 1

    def warn(self, message: str) -> None:
        """Tell the user something about this attempt they should know (a setting the harness
        had to change, say): an ``error`` event of severity ``warning`` for the codon, once per
        execution (the kernel drops a text the execution has shown before)."""
        if self._on_warning is not None:
            self._on_warning(message)

    async def authorize_tool(self, name: str, tool_input: Mapping[str, Any]) -> ToolDecision:
        """Ask before the agent runs tool ``name``: the harness runs it only if allowed (with
        ``updated_input`` when given), and otherwise returns the denial message to the agent
        as the tool's error result.  The kernel default allows everything."""
        with self._asking_kernel():
            return await self._policy.authorize_tool(self.request, name, tool_input)

    async def ask_human(self, question: str, options: Sequence[str] | None = None
                        ) -> HumanReply:
        """Put the agent's question to a human (the ``ask_human`` tool a harness offers).

        Returns the answer, or a reply that is not :attr:`~HumanReply.available` whose
        ``message`` the harness gives the agent instead.  The kernel default has no human.
        """
        with self._asking_kernel():
            return await self._policy.ask_human(self.request, question, options)


class Harness(abc.ABC):
    """Runs codons with one kind of agent.

    Subclasses set :attr:`name` and :attr:`package`, implement :meth:`run_codon`, and may set
    :attr:`Config`, :attr:`default_idle_timeout_s`, :attr:`supports_resume` and override
    :meth:`preflight` and :meth:`aclose`.  A plugin registers the class (not an instance) from
    ``register_harnesses``; the runtime creates one instance per codon attempt, extensions
    included, with the validated ``harnesses.<name>`` settings.
    """

    name: ClassVar[str]
    """The name routing and settings use (``claude``, ``pi``); unique among installed harnesses."""

    package: ClassVar[str]
    """The distribution that ships this harness (``hankweave-harness-claude``), for messages."""

    Config: ClassVar[type[HarnessConfig]] = HarnessConfig
    """The strict model of this harness's ``harnesses.<name>`` settings section (default: takes
    no settings, so any key there is an error)."""

    default_idle_timeout_s: ClassVar[int | None] = 180
    """Seconds without a record before the runtime aborts the attempt, unless the codon's
    ``shimIdleTimeout`` or the run's setting says otherwise (the original: claude 180, pi 120).
    None: no idle timeout by default."""

    supports_resume: ClassVar[bool] = True
    """Whether :attr:`CodonRequest.session_id_to_resume` works: without it, ``continue-previous``
    codons and extensions are refused before the agent starts."""

    close_timeout_s: ClassVar[float] = 10.0
    """How long the runtime waits for :meth:`aclose` (and for a cancelled iteration to finish)
    before it kills the processes the harness reported."""

    def __init__(self, config: HarnessConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @classmethod
    def preflight(cls, request: PreflightRequest, config: HarnessConfig
                  ) -> list[PreflightProblem]:
        """Why this harness could not run a codon of ``request``, before anything is created.

        Called by ``hankweave validate`` and by ``hankweave run`` before it creates the
        execution, once per codon, with the harness's validated ``harnesses.<name>`` settings.
        Check what a codon would otherwise fail on after earlier codons spent money: packages
        (with :func:`importlib.util.find_spec`: never import an SDK here, ``validate`` stays
        light), programs, credentials in ``request.env``.  Say in each message what to set or
        install, and where it may come from.  Never call a provider.  The kernel drops
        :attr:`PreflightKind.CREDENTIALS` problems under the mock provider and ``--offline``.
        Default: nothing to check.
        """
        return []

    @abc.abstractmethod
    def run_codon(self, request: CodonRequest, context: AttemptContext
                  ) -> AsyncIterator[CodonLogRecord]:
        """Run the agent for ``request`` and yield its codon-log records as they happen.

        Every record is one JSON object (or codon-log model) in the Claude-Agent-SDK message
        shape, which the runtime appends to the codon's log: first a ``system``/``init`` record
        carrying the ``session_id``, then ``assistant`` messages (with ``usage``) and ``user``
        tool results, and last one ``result`` record with ``total_cost_usd`` and ``usage``.
        Build them with the typed builders of :mod:`hankweave.codonlog`.  Provider and tool
        failures are reported as records (an error ``result``), not raised; raising means the
        harness itself broke (an exception after a success ``result`` is only a warning).  The
        runtime cancels the iteration to stop a codon; the harness then ends its agent process
        before the iterator finishes closing.
        """

    @classmethod
    def fork_state(cls, source: Path, target: Path, *, source_work_dir: Path,
                   target_work_dir: Path) -> None:
        """Copy this harness's folder of an execution (``.hankweave/harnesses/<name>/``: its
        sessions) into a fork of it (``hankweave fork``, docs/fork.md), so the fork's agents
        continue the conversations as they were, and never write to the source's.

        ``target`` does not exist yet.  The fork's work directory is ``target_work_dir``
        where the source's was ``source_work_dir``: a harness whose state names it moves that
        too.  Default: a copy of the folder (the Claude CLI resumes a session of its config
        folder from any working directory; pi's sessions are files by id).  The source may be
        in use: copy what is there, never write to it; a symbolic link is not copied.
        """
        import shutil

        from hankweave.fsutil import skip_symlinks

        shutil.copytree(source, target, ignore=skip_symlinks)  # never a link into the source

    async def aclose(self) -> None:  # noqa: B027 - optional: most harnesses hold nothing
        """Release what the attempt holds (clients, processes), once, after its last pass."""
