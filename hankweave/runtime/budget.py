"""Budgets at run time: what a run has spent, and the limits each codon attempt runs under.

A run has an optional ceiling (``--max-cost``/``--max-time``, ``hankweave.json``, the hank's
``overrides.budget``), loops may carry their own budget, and a codon may cap its own dollars,
seconds, output tokens and context tokens.  :class:`RunBudget` keeps the money spent per plan
entry and the time used, earlier runs of the execution included, and resolves each codon's
limits as it starts with :mod:`hankweave.runtime.allocation` (the same rules ``validate`` and
``inspect budget`` use).  :class:`CodonBudget` watches one attempt: limits are compared with
``>=`` (a $0 limit is exceeded by the first positive cost), and the first breach is recorded
once (docs/behaviour.md §3.9).

What earlier runs used is read from the state (:meth:`RunBudget.seed`): the money of every
record of every run (failed attempts and skipped codons included: the money was spent), and
each run's wall time, a crashed run's up to the last sign of life its records and agent logs
show (docs/differences.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from hankweave.fsutil import parse_iso
from hankweave.runtime.allocation import (
    Breach,
    BudgetPlan,
    Caps,
    EntryLimits,
    Ledger,
    Limit,
    Pool,
    Progress,
    breach_of,
    money,
    plan_caps,
)
from hankweave.state.interruptions import EXTEND
from hankweave.state.types import (
    BudgetExceededData,
    BudgetScope,
    CodonExecution,
    CompletedCodon,
    ExecutionCodonEntry,
    FailedCodon,
    HankweaveState,
    Interruption,
    Run,
    RunningCodon,
    SkippedCodon,
    TokenUsage,
)

if TYPE_CHECKING:
    from hankweave.config.hank import HankFile
    from hankweave.config.settings import Settings

LastWrite = Callable[[CodonExecution], float | None]
"""When a record's agent log was last written (epoch seconds), None if unknown."""

CRASH_MESSAGE = "Server crashed"
"""The failure message crash repair gives the records a crashed run left open."""

DEFAULT_WARN_AT = (0.8, 0.95)
"""The fractions of a ceiling at which ``budget.warning`` goes out unless ``warnAt`` says."""


# --------------------------------------------------------------------------------------------
# Extensions people granted, and warnings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """An extension a person granted at a ceiling (a ``budget`` interruption answered
    ``{"extend": amount}``): it raises that ceiling for the rest of the execution."""

    scope: BudgetScope
    currency: str
    amount: float
    codon_id: str
    """The plan entry that asked (a codon-scope grant raises only its limit)."""
    loop_id: str | None = None


def grants_of(state: HankweaveState) -> list[Grant]:
    """Every extension granted in the execution, oldest first."""
    grants = []
    for item in state.interruptions:
        amount = extension_of(item.answer) if item.kind == "budget" else None
        if item.budget is not None and amount is not None:
            grants.append(Grant(item.budget.scope, item.budget.currency, amount, item.codon_id,
                                item.budget.loop_id))
    return grants


def extension_of(answer: object) -> float | None:
    """The amount of an extending answer (``{"extend": amount}``), None for anything else."""
    if isinstance(answer, dict) and isinstance(answer.get(EXTEND), int | float) \
            and not isinstance(answer.get(EXTEND), bool):
        return float(answer[EXTEND])
    return None


@dataclass(frozen=True)
class Carried:
    """What the records of an interrupted attempt used, that its carried-on attempt counts
    against the codon's own limits."""

    dollars: float = 0.0
    output_tokens: int = 0
    seconds: float = 0.0

    @property
    def any(self) -> bool:
        return bool(self.dollars or self.output_tokens or self.seconds)

    def of(self, currency: str) -> float:
        return {"cost": self.dollars, "outputTokens": float(self.output_tokens),
                "duration": self.seconds}.get(currency, 0.0)


@dataclass(frozen=True)
class Watched:
    """A ceiling an attempt is measured against, watched for ``budget.warning``."""

    scope: BudgetScope
    currency: str
    limit: float
    before: float
    """What the ceiling had used when the attempt started (earlier codons, earlier runs)."""
    source: str
    loop_id: str | None = None


@dataclass(frozen=True)
class BudgetWarning:
    """A ceiling reached ``fraction`` of its limit."""

    ceiling: Watched
    fraction: float
    used: float

    @property
    def message(self) -> str:
        ceiling = self.ceiling
        whose = {"run": "the run's", "loop": f"loop {ceiling.loop_id}'s",
                 "codon": "the codon's"}[ceiling.scope]
        used = describe_amount(ceiling.currency, self.used)
        name = ceiling_name(ceiling.currency, ceiling.limit)
        return f"{self.fraction * 100:.0f}% of {whose} {name} used ({used}; {ceiling.source})"


def describe_amount(currency: str, value: float) -> str:
    """A ceiling's amount as people write it: ``$2.00``, ``90s``, ``1.6s``, ``20,000 tokens``."""
    if currency == "cost":
        return money(value)
    if currency == "duration":
        return f"{value:.0f}s" if value >= 10 or value == int(value) else f"{value:.1f}s"
    return f"{value:,.0f} tokens"


def describe_used(currency: str, used: float, limit: float) -> str:
    """What a ceiling used, with the precision that tells it from the ceiling: ``$0.1037``
    against ``$0.10``, not ``$0.10``."""
    shown = describe_amount(currency, used)
    if currency == "cost" and shown == describe_amount(currency, limit) and used != limit:
        return f"${used:.4f}"
    return shown


def ceiling_name(currency: str, limit: float) -> str:
    """``$2.00 ceiling``, ``90s time limit``, ``15-token output limit``."""
    if currency == "cost":
        return f"{money(limit)} ceiling"
    if currency == "duration":
        return f"{limit:.0f}s time limit"
    kind = "output" if currency == "outputTokens" else "context"
    return f"{limit:,.0f}-token {kind} limit"


# --------------------------------------------------------------------------------------------
# One attempt
# --------------------------------------------------------------------------------------------


@dataclass
class Metered:
    """What one attempt used, as the LLM proxy measured its answers."""

    dollars: float = 0.0
    output_tokens: int = 0
    context_high_water: int = 0
    tokens: TokenUsage | None = None
    """Every answer's usage, summed (None: none measured)."""

    def add(self, cost: float, usage: TokenUsage) -> None:
        self.dollars += cost
        self.output_tokens += usage.output_tokens
        self.context_high_water = max(self.context_high_water, context_of(usage))
        self.tokens = usage if self.tokens is None else self.tokens + usage


def context_of(usage: TokenUsage) -> int:
    """The context one turn filled: everything it read and wrote."""
    return usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + (
        usage.cache_creation_tokens)



@dataclass
class CodonBudget:
    """The limits of one codon attempt and what it has used so far."""

    codon_id: str
    limits: EntryLimits
    started: float
    clock: Callable[[], float] = time.monotonic
    dollars: float = 0.0
    output_tokens: int = 0
    context_high_water: int = 0
    metered: Metered = field(default_factory=lambda: Metered())
    """What the LLM proxy measured of this attempt's answers (docs/proxy.md)."""
    breach: Breach | None = None
    watched: tuple[Watched, ...] = ()
    warn_at: tuple[float, ...] = DEFAULT_WARN_AT
    warned: set[tuple[object, ...]] = field(default_factory=set)
    """The warnings given (shared with the run, so a ceiling warns once at each fraction)."""
    on_pause: Callable[[float], None] | None = None
    """Told the seconds the attempt waited for a person (the run's clock skips them too)."""
    resolve: Callable[[], tuple[EntryLimits, tuple[Watched, ...]]] | None = None
    """The limits and watched ceilings as the run resolves them now (with the extensions
    granted since): how :meth:`extend` raises one limit and keeps every other."""

    @property
    def exceeded(self) -> BudgetExceededData | None:
        return self.breach.data() if self.breach is not None else None

    @property
    def message(self) -> str | None:
        return self.breach.message if self.breach is not None else None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def seconds_left(self) -> float | None:
        """Until the time limit is reached (None: no time limit)."""
        limit = self.limits.seconds
        return None if limit is None else limit.value - self.elapsed()

    def add_usage(self, cost: float, usage: TokenUsage | None) -> BudgetExceededData | None:
        """Account one assistant message; return the breach the first time a limit is hit."""
        self.dollars += cost
        if usage is not None:
            self.output_tokens += usage.output_tokens
            self.context_high_water = max(self.context_high_water, context_of(usage))
        return self.check()

    def add_metered(self, cost: float, usage: TokenUsage) -> BudgetExceededData | None:
        """Account one answer the LLM proxy passed on (before the agent's message about it
        arrives, if one does); return the breach the first time a limit is hit."""
        self.metered.add(cost, usage)
        return self.check()

    def used(self, currency: str) -> float:
        """What this attempt has used in ``currency``: the agent's messages and the proxy
        measure the same answers, so the larger of the two counts."""
        if currency == "duration":
            return self.elapsed()
        metered = self.metered
        return {"cost": max(self.dollars, metered.dollars),
                "outputTokens": float(max(self.output_tokens, metered.output_tokens)),
                "contextTokens": float(max(self.context_high_water, metered.context_high_water)),
                }.get(currency, 0.0)

    def warnings(self) -> list[BudgetWarning]:
        """The fractions of watched ceilings reached since last asked, each once."""
        found = []
        for ceiling in self.watched:
            used = ceiling.before + self.used(ceiling.currency)
            crossed = used >= ceiling.limit  # the breach says so; no warning beside it
            for fraction in self.warn_at:
                key = (ceiling.scope, ceiling.loop_id or (
                    self.codon_id if ceiling.scope == "codon" else None), ceiling.currency,
                       ceiling.limit, fraction)
                if key not in self.warned and used >= fraction * ceiling.limit > 0:
                    self.warned.add(key)
                    if not crossed:
                        found.append(BudgetWarning(ceiling, fraction, used))
        return found

    def pause(self, seconds: float) -> None:
        """The attempt waited ``seconds`` for a person: no time limit counts them."""
        self.started += seconds
        if self.on_pause is not None:
            self.on_pause(seconds)

    def ceiling_of(self, breach: Breach) -> tuple[float, float]:
        """The ceiling ``breach`` reached and what it has used, as a person knows it: the
        run's or the loop's whole ceiling and spending, the codon's own limit counting the
        attempt it carries on (a breach's own figures are this attempt's share of them)."""
        for ceiling in self.watched:
            if (ceiling.scope, ceiling.currency, ceiling.loop_id) == (
                    breach.scope, breach.currency, breach.loop_id):
                return ceiling.limit, ceiling.before + breach.used
        return breach.limit, breach.used

    def extend(self) -> None:
        """After a person granted an extension at the breached limit (recorded with
        :meth:`RunBudget.grant`): the limits resolved again, so the raised one counts and
        every other still holds, and the breach cleared, so the attempt goes on."""
        if self.breach is None or self.resolve is None:
            raise RuntimeError("only an attempt the run tracks, at a breach, is extended")
        self.breach = None
        self.limits, self.watched = self.resolve()

    def check(self) -> BudgetExceededData | None:
        """Compare usage with every limit (time included); record and return the first breach."""
        if self.breach is not None:
            return None
        limits = self.limits
        for currency, limit in (
                ("cost", limits.dollars),
                ("outputTokens", _cap(limits.output_tokens)),
                ("contextTokens", _cap(limits.context_tokens)),
                ("duration", limits.seconds)):
            if limit is None:
                continue
            found = breach_of(currency, limit, self.used(currency))
            if found is not None:
                self.breach = found
                return found.data()
        return None


def _cap(value: int | None) -> Limit | None:
    return Limit(float(value), "codon cap") if value is not None else None


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


@dataclass
class RunBudget:
    """The run-wide ceiling, the spending and time it is measured against, each codon's limits."""

    max_dollars: float | None = None
    max_seconds: float | None = None
    allocation: str = "shared"
    shares: dict[str, float] = field(default_factory=dict)
    on_exceeded: str | None = None
    max_dollars_per_codon: float | None = None
    """``--max-cost-per-codon``: each codon attempt's dollar cap, over its own."""
    hank: HankFile | None = None
    """Where codon caps and loop budgets come from; None: from the plan entries."""
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    elapsed_before: float = 0.0
    """Seconds earlier runs took."""
    loop_elapsed_before: dict[str, float] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)
    started_ids: set[str] = field(default_factory=set)
    """Plan entries that have started, in any run."""
    limits: dict[str, EntryLimits] = field(default_factory=dict)
    """The limits each codon of this run was given (its newest attempt's), for the summary."""
    grants: list[Grant] = field(default_factory=list)
    """Extensions people granted (every run of the execution)."""
    _carried: dict[str, Carried] = field(default_factory=dict, init=False)
    """Per plan entry, what the interrupted attempt its running attempt carries on used."""
    warn_at: tuple[float, ...] = DEFAULT_WARN_AT
    warned: set[tuple[object, ...]] = field(default_factory=set)
    _loop_started: dict[str, float] = field(default_factory=dict, init=False)
    """When each loop's first codon of this run started (its clock, on top of earlier runs)."""
    _loop_of: dict[str, str | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if not self.started:
            self.started = self.clock()
        self._caps: dict[str, Caps] | None = None
        self._loop_pools: dict[str, Pool | None] | None = None
        if self.hank is not None:
            from hankweave.config.hank import Loop

            self._caps = {codon_id: Caps.of_json(_dump(codon.budget))
                          for codon_id, codon in self.hank.codon_configs().items()}
            self._loop_pools = {item.id: Pool.of_json(_dump(item.budget))
                                for item in self.hank.hank if isinstance(item, Loop)}

    @classmethod
    def of_settings(cls, settings: Settings, hank: HankFile) -> RunBudget:
        """The budget the run's settings give (every layer merged) for ``hank``."""
        budget = settings.budget
        return cls(max_dollars=budget.max_dollars, max_seconds=budget.max_time_seconds,
                   allocation=budget.allocation, shares=dict(budget.shares or {}),
                   on_exceeded=budget.on_exceeded,
                   max_dollars_per_codon=settings.max_cost_per_codon, hank=hank,
                   warn_at=DEFAULT_WARN_AT if budget.warn_at is None else tuple(budget.warn_at))

    # ----- what earlier runs used -----

    def seed(self, state: HankweaveState, last_write: LastWrite | None = None) -> RunBudget:
        """Count what the runs recorded in ``state`` spent and how long they took."""
        self.ledger = spending_of(state)
        self.grants = grants_of(state)
        self.elapsed_before = 0.0
        for run in state.runs:
            self.started_ids.update(record.codon_id for record in run.codons)
            self.elapsed_before += counted_seconds(run, state.interruptions, last_write)
            for loop_id, seconds in loop_seconds(run, last_write).items():
                self.loop_elapsed_before[loop_id] = self.loop_elapsed_before.get(
                    loop_id, 0.0) + seconds
        return self

    # ----- the ceiling -----

    def granted(self, scope: BudgetScope, currency: str, key: str | None = None) -> float:
        """What people granted at ``scope``'s ``currency`` ceiling (``key``: the loop, or the
        plan entry of a codon-scope grant)."""
        return sum(grant.amount for grant in self.grants
                   if grant.scope == scope and grant.currency == currency and (
                       key is None or key == (grant.loop_id if scope == "loop"
                                              else grant.codon_id)))

    def grant(self, codon_id: str, breach: Breach, amount: float) -> None:
        """An extension granted now (also recorded as the interruption's answer)."""
        self.grants.append(Grant(breach.scope, breach.currency, amount, codon_id,
                                 breach.loop_id))

    @property
    def ceiling_dollars(self) -> float | None:
        """The run's dollar ceiling with what people granted."""
        return None if self.max_dollars is None else \
            self.max_dollars + self.granted("run", "cost")

    @property
    def ceiling_seconds(self) -> float | None:
        return None if self.max_seconds is None else \
            self.max_seconds + self.granted("run", "duration")

    @property
    def pool(self) -> Pool:
        return Pool(max_dollars=self.ceiling_dollars, max_seconds=self.ceiling_seconds,
                    allocation=self.allocation, shares=dict(self.shares),
                    on_exceeded=self.on_exceeded)

    @property
    def has_limits(self) -> bool:
        """A ceiling, or a limit on some codon of this run: worth a ``budget.summary``."""
        return self.max_dollars is not None or self.max_seconds is not None or any(
            limits.any for limits in self.limits.values())

    def total_spent(self) -> float:
        return self.ledger.total

    def elapsed(self) -> float:
        """Seconds the hank has run, earlier runs included."""
        return self.elapsed_before + (self.clock() - self.started)

    def remaining_dollars(self) -> float | None:
        ceiling = self.ceiling_dollars
        return None if ceiling is None else max(0.0, ceiling - self.total_spent())

    def remaining_seconds(self) -> float | None:
        ceiling = self.ceiling_seconds
        return None if ceiling is None else max(0.0, ceiling - self.elapsed())

    def out_of_time(self) -> bool:
        """True once the run's time ceiling is reached (a run it ends is ``timeout``)."""
        seconds = self.remaining_seconds()
        return seconds is not None and seconds <= 0

    def exhausted(self) -> bool:
        """True once the run's money or time is gone: no further codon starts."""
        dollars, seconds = self.remaining_dollars(), self.remaining_seconds()
        return (dollars is not None and dollars <= 0 and self.total_spent() > 0) or (
            seconds is not None and seconds <= 0)

    # ----- resolution -----

    def plan(self, entries: Sequence[ExecutionCodonEntry]) -> BudgetPlan:
        """The plan as the allocation rules see it, with this hank's caps and loop budgets."""
        caps = self._caps
        own_caps = plan_caps if caps is None else (
            lambda entry: caps.get(entry.codon.id) or plan_caps(entry))
        loop_extra = {grant.loop_id: (self.granted("loop", "cost", grant.loop_id),
                                      self.granted("loop", "duration", grant.loop_id))
                      for grant in self.grants if grant.scope == "loop" and grant.loop_id}
        return BudgetPlan(
            entries, self.pool, loop_pools=self._loop_pools, loop_extra=loop_extra,
            caps_of=lambda entry: self._granted_caps(entry.codon_id,
                                                     self._capped(own_caps(entry))))

    def _capped(self, caps: Caps) -> Caps:
        """A codon's caps under ``--max-cost-per-codon``: the lower dollar cap applies."""
        ceiling = self.max_dollars_per_codon
        if ceiling is None or (caps.max_dollars is not None and caps.max_dollars <= ceiling):
            return caps
        return replace(caps, max_dollars=ceiling, dollars_source="--max-cost-per-codon")

    def _granted_caps(self, codon_id: str, caps: Caps) -> Caps:
        """``caps`` with the extensions people granted plan entry ``codon_id`` at its own
        limits, less what the interrupted attempt its running attempt carries on used."""
        carried = self._carried.get(codon_id) or Carried()
        if not carried.any and not any(grant.scope == "codon" and grant.codon_id == codon_id
                                       for grant in self.grants):
            return caps

        def more(value: float | None, currency: str) -> float | None:
            if value is None:
                return None
            return value + self.granted("codon", currency, codon_id) - carried.of(currency)

        tokens = [more(caps.max_output_tokens, "outputTokens"),
                  more(caps.max_context_tokens, "contextTokens")]
        return replace(caps, extra_dollars=self.granted("codon", "cost", codon_id)
                       - carried.dollars,
                       max_seconds=more(caps.max_seconds, "duration"),
                       max_output_tokens=None if tokens[0] is None else max(0, int(tokens[0])),
                       max_context_tokens=None if tokens[1] is None else int(tokens[1]))

    def progress(self) -> Progress:
        now = self.clock()
        loops = dict(self.loop_elapsed_before)
        for loop_id, began in self._loop_started.items():
            loops[loop_id] = loops.get(loop_id, 0.0) + (now - began)
        return Progress(ledger=self.ledger, started=self.started_ids,
                        elapsed=self.elapsed_before + (now - self.started), loop_elapsed=loops)

    def track(self, entries: Sequence[ExecutionCodonEntry], codon_id: str,
              carried: Carried | None = None) -> CodonBudget:
        """The limits of a codon about to start, resolved against the run's ceiling and its
        loop's budget; its loop's clock starts with the loop's first codon of this run.

        ``carried``: what the interrupted attempt this one carries on used.  The run's and
        the loop's ledgers count it already; the codon's own limits are lowered by it, so the
        attempt as a whole keeps to them.
        """
        self._carried[codon_id] = carried or Carried()
        entry = self.plan(entries).entry(codon_id)
        loop_id = entry.loop_context.loop_id if entry.loop_context else None
        if loop_id is not None and loop_id not in self._loop_started:
            self._loop_started[loop_id] = self.clock()
        self._loop_of[codon_id] = loop_id
        progress = self.progress()
        self.started_ids.add(codon_id)

        def resolve() -> tuple[EntryLimits, tuple[Watched, ...]]:
            # With the extensions granted so far, against what was spent when it started.
            plan = self.plan(entries)
            limits = plan.resolve(codon_id, progress)
            self.limits[codon_id] = limits
            return limits, self._watched(plan, entry, limits, progress)

        limits, watched = resolve()
        budget = CodonBudget(codon_id=codon_id, limits=limits, started=self.clock(),
                             clock=self.clock, warn_at=self.warn_at, warned=self.warned,
                             on_pause=self.exclude, watched=watched, resolve=resolve)
        budget.warnings()  # what was passed before this attempt is not news
        return budget

    def _watched(self, plan: BudgetPlan, entry: ExecutionCodonEntry, limits: EntryLimits,
                 progress: Progress) -> tuple[Watched, ...]:
        """The ceilings a codon attempt is measured against, for warnings: the run's, its
        loop's, and its own limits that are its own (a cap, a share, a split)."""
        watched: list[Watched] = []
        if self.ceiling_dollars:
            watched.append(Watched("run", "cost", self.ceiling_dollars, progress.ledger.total,
                                   "run ceiling"))
        if self.ceiling_seconds:
            watched.append(Watched("run", "duration", self.ceiling_seconds, progress.elapsed,
                                   "run ceiling"))
        loop_id = plan.pooled_loop_of(entry)
        if loop_id is not None:
            loop = plan.resolve_loop(loop_id, progress)
            if loop.dollars is not None and loop.dollars.value > 0:
                watched.append(Watched("loop", "cost", loop.dollars.value,
                                       progress.ledger.of_loop(loop_id), loop.dollars.source,
                                       loop_id))
            if loop.seconds is not None and loop.seconds.value > 0:
                watched.append(Watched("loop", "duration", loop.seconds.value,
                                       progress.loop_elapsed.get(loop_id, 0.0),
                                       loop.seconds.source, loop_id))
        # The codon's own limits are lowered by what the attempt it carries on used: a person
        # knows them whole, with that use counted.
        carried = self._carried.get(entry.codon_id) or Carried()
        for currency, limit in (("cost", limits.dollars), ("duration", limits.seconds)):
            if limit is not None and limit.scope == "codon":
                before = carried.of(currency)
                if limit.value + before > 0:
                    watched.append(Watched("codon", currency, limit.value + before, before,
                                           limit.source))
        for currency, tokens in (("outputTokens", limits.output_tokens),
                                 ("contextTokens", limits.context_tokens)):
            if tokens is not None:
                before = carried.of(currency)
                if tokens + before > 0:
                    watched.append(Watched("codon", currency, float(tokens) + before, before,
                                           "codon cap"))
        return tuple(watched)

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` (a wait for a person) out of the run's and its loops' time."""
        self.started += seconds
        for loop_id in self._loop_started:
            self._loop_started[loop_id] += seconds

    def on_exceeded_of(self, codon_id: str) -> str:
        """The effective ``onExceeded`` of the codon's newest attempt."""
        limits = self.limits.get(codon_id)
        return limits.on_exceeded if limits is not None else (self.on_exceeded or "complete")

    def record(self, codon_id: str, cost: float) -> None:
        """The final (or partial) cost of a finished attempt; retries add up."""
        self.ledger.add(codon_id, self._loop_of.get(codon_id), cost)

    def loop_breach(self, entries: Sequence[ExecutionCodonEntry], codon_id: str
                    ) -> Breach | None:
        """The budget of ``codon_id``'s loop, reached (docs/behaviour.md §3.9), or None."""
        plan = self.plan(entries)
        try:
            loop_id = plan.pooled_loop_of(plan.entry(codon_id))
        except KeyError:
            return None
        return plan.loop_breach(loop_id, self.progress()) if loop_id is not None else None


def _dump(model: BaseModel | None) -> dict[str, object] | None:
    """A budget block of the hank as its JSON (camelCase) form."""
    if model is None:
        return None
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


# --------------------------------------------------------------------------------------------
# Accounting from the state
# --------------------------------------------------------------------------------------------


def spent_by(record: CodonExecution) -> float:
    """The money a record spent: its final or partial cost, the running cost so far.  Unlike
    the run totals of :mod:`hankweave.state.costs`, a skipped codon's partial cost counts."""
    if isinstance(record, CompletedCodon):
        return record.final_cost
    if isinstance(record, FailedCodon | SkippedCodon):
        return record.partial_cost
    if isinstance(record, RunningCodon):
        return record.current_cost
    return 0.0


def carried_usage(records: Sequence[CodonExecution],
                  interruptions: Sequence[Interruption] = ()) -> Carried:
    """The dollars, output tokens and seconds the records of an interrupted attempt used (a
    wait for a person at a budget ceiling not counted)."""
    dollars, output_tokens, seconds = 0.0, 0, 0.0
    for record in records:
        tokens = getattr(record, "final_tokens", None) or getattr(record, "current_tokens", None)
        span = record_span(record)
        dollars += spent_by(record)
        output_tokens += tokens.output_tokens if tokens else 0
        if span:
            took = (span[1] - span[0]).total_seconds()
            seconds += max(0.0, took - waited_in(record.start_time, took, None, interruptions,
                                                 codon_id=record.codon_id))
    return Carried(dollars, output_tokens, seconds)


def waited_in(start: str, seconds: float, run_id: str | None,
              interruptions: Sequence[Interruption], *, codon_id: str | None = None) -> float:
    """The seconds of ``[start, start + seconds]`` spent waiting for a person at a budget
    ceiling (``run_id``'s, or ``codon_id``'s): a run that waited live for the answer does not
    count that time, now or in any later run (docs/budgets.md)."""
    try:
        begin = parse_iso(start)
    except ValueError:
        return 0.0
    end = begin + timedelta(seconds=seconds)
    total = 0.0
    for item in interruptions:
        if item.kind != "budget" or (run_id is not None and item.run_id != run_id) or (
                codon_id is not None and item.codon_id != codon_id):
            continue
        try:
            asked = parse_iso(item.created_at)
            answered = parse_iso(item.answered_at) if item.answered_at else end
        except ValueError:
            continue
        overlap = (min(end, answered) - max(begin, asked)).total_seconds()
        total += max(0.0, overlap)
    return min(total, seconds)


def crash_ended(record: CodonExecution) -> bool:
    """Whether crash repair closed this record (its end time is when the crash was found)."""
    reason = getattr(record, "failure_reason", None)
    return isinstance(record, FailedCodon) and reason is not None and \
        reason.message == CRASH_MESSAGE


def record_span(record: CodonExecution, last_write: LastWrite | None = None
                ) -> tuple[datetime, datetime] | None:
    """When a record started and when it was last known to be running."""
    try:
        start = parse_iso(record.start_time)
        end_text = getattr(record, "end_time", None)
        if end_text and not crash_ended(record):
            return start, max(start, parse_iso(end_text))
    except ValueError:
        return None
    written = last_write(record) if last_write is not None else None
    end = datetime.fromtimestamp(written, UTC) if written is not None else start
    return start, max(start, end)


def run_seconds(run: Run, last_write: LastWrite | None = None) -> float:
    """A run's wall time: start to end; a crashed (or never ended) run's up to its last sign
    of life (its records' ends and, for those the crash cut, their agent logs' last write)."""
    try:
        start = parse_iso(run.start_time)
        if run.end_time and run.status != "crashed":
            return max(0.0, (parse_iso(run.end_time) - start).total_seconds())
    except ValueError:
        return 0.0
    ends = [span[1] for span in (record_span(r, last_write) for r in run.codons) if span]
    return max(0.0, (max(ends) - start).total_seconds()) if ends else 0.0


def counted_seconds(run: Run, interruptions: Sequence[Interruption],
                    last_write: LastWrite | None = None) -> float:
    """A run's time as time limits count it: :func:`run_seconds` without its waits for a
    person at a budget ceiling."""
    seconds = run_seconds(run, last_write)
    return max(0.0, seconds - waited_in(run.start_time, seconds, run.run_id, interruptions))


def loop_seconds(run: Run, last_write: LastWrite | None = None) -> dict[str, float]:
    """Per loop, the time from its first record's start to its last record's end in ``run``."""
    spans: dict[str, tuple[datetime, datetime]] = {}
    for record in run.codons:
        if record.loop_context is None:
            continue
        span = record_span(record, last_write)
        if span is None:
            continue
        loop_id = record.loop_context.loop_id
        known = spans.get(loop_id)
        spans[loop_id] = span if known is None else (min(known[0], span[0]),
                                                     max(known[1], span[1]))
    return {loop_id: (end - start).total_seconds() for loop_id, (start, end) in spans.items()}


def log_last_write(execution_dir: Path) -> LastWrite:
    """:data:`LastWrite` from the agent logs under ``execution_dir``."""
    def last_write(record: CodonExecution) -> float | None:
        relative: str | None = getattr(record, "claude_log_path", None)
        if not relative:
            return None
        try:
            return (execution_dir / relative).stat().st_mtime
        except OSError:
            return None

    return last_write


def spending_of(state: HankweaveState) -> Ledger:
    """The money of every record of every run, per plan entry and per loop."""
    ledger = Ledger()
    for run in state.runs:
        for record in run.codons:
            loop = record.loop_context.loop_id if record.loop_context else None
            ledger.add(record.codon_id, loop, spent_by(record))
    return ledger

