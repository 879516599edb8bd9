"""What the parts of one runtime share: the hank, the execution directory, its state, its settings.

:class:`RunContext` is built once per ``hankweave run`` and handed to every part of the runtime
(the run lifecycle, live control, rollbacks, the human loop, the sentinels, each codon attempt).
It is frozen data: every service it holds is built outside and passed in, it builds nothing
that takes it back, and what changes while the run goes on (the run id, what failed attempts
cost) lives in one named place, :class:`RunBookkeeping`.  It holds no control flow of its own:
it answers questions about the execution ("which codon config is ``review#2``?", "what is the
thread now?") and performs the one way state changes, a typed transition.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.config.hank import Codon, HankFile, base_codon_id
from hankweave.config.settings import Settings
from hankweave.execution.layout import ExecutionLayout
from hankweave.harness import AttemptPolicy, Harness, HarnessConfig, HarnessSelection
from hankweave.runtime.checkpointing import KnownCheckpoints
from hankweave.runtime.errors import RuntimeCommandError
from hankweave.runtime.rig import CommandPolicy
from hankweave.state.thread import ExecutionThread, ThreadTracker
from hankweave.state.transitions import (
    CodonMetadata,
    CodonTransitioned,
    CodonTransitionedData,
    StateTransition,
)
from hankweave.state.types import (
    CodonExecution,
    ExecutionCodonEntry,
    HankweaveState,
    is_terminal_status,
    last_record,
    plan_positions,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from hankweave.models import ModelEntry
    from hankweave.registry import Registry
    from hankweave.runtime.budget import RunBudget
    from hankweave.runtime.metering import ProxyGate
    from hankweave.runtime.prompts import PromptBuilder
    from hankweave.runtime.reporter import Reporter
    from hankweave.state.boot import OwnedExecution
    from hankweave.state.store import StateStore


@dataclass
class RuntimeConfig:
    """The settings the runtime acts on (already resolved from every layer)."""

    settings: Settings = field(default_factory=Settings)
    """The run's settings, every layer merged (the command line's run options included)."""
    rig_timeout_s: float | None = None
    harnesses: HarnessSelection | None = None
    """Chooses each codon's harness from its model (a replay: the recording's player for
    every codon); None: the registry, that is the plugins' ``select_harness`` hook."""
    harness_configs: Mapping[str, HarnessConfig] = field(default_factory=dict)
    """Validated ``harnesses.<name>`` settings by harness name (absent: the defaults)."""
    policy: AttemptPolicy | None = None
    """What harnesses' ``authorize_tool`` and ``ask_human`` calls are answered by (None: the
    run's :class:`~hankweave.runtime.humans.HumanLoop`)."""
    wait_for_answers: bool = False
    """Keep running while an interruption waits for a person (``--wait-for-answers``), rather
    than ending the run ``interrupted``."""
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    sentinels: bool = True
    """Whether codons' sentinels run (a replay runs none)."""
    humans: bool = True
    """Whether approval gates apply and interrupted runs resume (a replay asks no one)."""
    proxy: ProxyGate | None = None
    """The LLM proxy's view of the run, when agents call their providers through it
    (``--proxy``, docs/proxy.md): attempts attach to it while they run."""
    commands: CommandPolicy = CommandPolicy.RUN
    """What happens to rig ``command`` operations and ``beforeCopy`` commands: a replay skips
    them (its hank is the recording author's code) unless ``--allow-commands`` was given."""


@dataclass
class RunBookkeeping:
    """What changes while the runtime runs, kept in one named place (the context is frozen)."""

    started_at: float = field(default_factory=time.monotonic)
    """When this runtime started (``time.monotonic()``)."""
    run_id: str | None = None
    """The run this runtime is recording, once it started one."""
    retry_costs: dict[str, float] = field(default_factory=dict)
    """What failed attempts of a codon cost so far; its ``codon.completed`` reports them."""


@dataclass(frozen=True, eq=False)
class RunContext:
    """The shared data and queries of one runtime (see the module docstring).

    Every service it holds (``checkpoints``, ``reporter``) is built outside and passed in; the
    parts that act on the run (the human loop, the sentinels, live control) take it, never the
    other way round.  What changes as the run goes on lives in :attr:`bookkeeping`.
    """

    hank: HankFile
    hank_dir: Path
    layout: ExecutionLayout
    owned: OwnedExecution
    checkpoints: KnownCheckpoints
    registry: Registry
    reporter: Reporter
    config: RuntimeConfig
    budget: RunBudget
    prompts: PromptBuilder
    plan_builder: Callable[[HankFile], list[ExecutionCodonEntry]]
    bookkeeping: RunBookkeeping = field(default_factory=RunBookkeeping)
    _codons: dict[str, Codon] = field(init=False, repr=False)
    _thread: ThreadTracker = field(init=False, repr=False, default_factory=ThreadTracker)

    def __post_init__(self) -> None:
        # Derived once from the hank; a frozen dataclass sets it through object.__setattr__.
        object.__setattr__(self, "_codons", self.hank.codon_configs())

    @property
    def store(self) -> StateStore:
        return self.owned.store

    @property
    def run_id(self) -> str | None:
        """The run this runtime is recording, once it started one."""
        return self.bookkeeping.run_id

    # ----- state -----

    @property
    def state(self) -> HankweaveState:
        return self.store.state

    def thread(self) -> ExecutionThread:
        """The execution thread now; each call costs what changed since the last one."""
        return self._thread.thread(self.state, self.checkpoints.data())

    async def transition(self, transition: StateTransition) -> None:
        """Apply one transition; it is durable when this returns."""
        await self.store.transition(transition)

    def current(self, codon_id: str) -> CodonExecution:
        """The newest record of ``codon_id`` in the current run."""
        run = self.state.run_by_id(self.run_id or "")
        found = last_record(run, codon_id) if run else None
        if found is None:
            raise RuntimeCommandError(f"codon {codon_id!r} has no record in run {self.run_id}")
        return found[1]

    async def move(self, codon_id: str, to: str, **metadata: Any) -> None:
        """Move the codon's current record to status ``to`` (a ``CodonTransitioned``)."""
        codon = self.current(codon_id)
        await self.transition(CodonTransitioned(data=CodonTransitionedData.model_validate({
            "runId": self.run_id, "codonId": codon_id, "from": codon.status, "to": to,
            "metadata": CodonMetadata(**metadata)})))

    def codon_in_progress(self) -> tuple[str, str] | None:
        """``(codon id, status)`` of the current run's unfinished codon record, if any."""
        run = self.state.run_by_id(self.run_id or "")
        if run is not None and run.codons and not is_terminal_status(run.codons[-1].status):
            return run.codons[-1].codon_id, run.codons[-1].status
        return None

    # ----- the hank and the plan -----

    def codon_config(self, codon_id: str) -> Codon:
        """The configuration a runtime codon id (``review#2``) runs."""
        try:
            return self._codons[base_codon_id(codon_id)]
        except KeyError:
            raise RuntimeCommandError(f"codon {codon_id!r} is not in the hank") from None

    def codon_name(self, codon_id: str) -> str:
        """The configured name of a codon (its id when the hank does not know it)."""
        try:
            return self.codon_config(codon_id).name
        except RuntimeCommandError:
            return codon_id

    def select_harness(self, model: ModelEntry) -> type[Harness]:
        """The harness that plays codons on ``model``: the run's selection decision."""
        return (self.config.harnesses or self.registry).select_harness(model)

    def plan_entry(self, codon_id: str) -> ExecutionCodonEntry:
        plan = self.state.execution_plan
        position = plan_positions(plan).get(codon_id)
        if position is not None:
            return plan[position]
        raise RuntimeCommandError(f"Unknown codon {codon_id!r}: not in the execution plan")

    def elapsed_ms(self) -> int:
        """Milliseconds since this runtime started."""
        return elapsed_ms(self.bookkeeping.started_at)


def elapsed_ms(since: float) -> int:
    """Milliseconds since the ``time.monotonic()`` reading ``since``."""
    return int((time.monotonic() - since) * 1000)
