"""Budget allocation: the limits each plan entry runs under, resolved from the plan (docs/behaviour.md §3.9).

Everything here is pure: a :class:`BudgetPlan` (the plan's entries, the hank's pool, each loop's
pool, each codon's caps) and a :class:`Progress` (what was spent per plan entry, which entries
have started, how much time has passed) go in; limits with a human-readable source come out.
The runtime resolves each codon as it starts, ``hankweave validate`` resolves the whole plan as
it would be at the start with nothing spent, and ``hankweave inspect budget`` projects the
entries still to run, so all three give the same figures.

The pools:

* the **hank pool** is the run's ceiling (``--max-cost``/``--max-time``, ``hankweave.json``,
  ``overrides.budget``) with the allocation, shares and ``onExceeded`` of ``overrides.budget``.
  Its members are the plan entries outside pooled loops, each by itself, and every pooled loop
  as one member;
* a **loop pool** is a loop's ``budget`` block; its members are the loop's plan entries (the
  current iteration and the ones before it: iterations enter the plan lazily).  A loop that has
  a hank-level share but no budget block gets an empty pool, so its share is its allocation
  (docs/differences.md).

Allocation modes, for a member of a pool whose ceiling is ``C`` and whose remaining money is
``R = max(0, C - spent in the pool)``:

* ``shared``: ``R``;
* ``proportional``: ``share x C`` for a member with a share; a member with neither a share nor
  a cap gets the uniform split ``(1 - sum of shares) x C / (1 + the other members not yet
  started that have neither)``; both capped at ``R``;
* ``proportional-strict``: as proportional, also capped at ``C - sum over earlier members of
  (max(share x C, spent) for a member with a share, else spent)``: unspent shares evaporate;
* a member's own ``maxDollars`` is a hard cap on top (a capped member without a share gets its
  cap, bounded by ``R``, and under ``proportional-strict`` by the strict remainder too).

A loop's own dollars are ``min(loop maxDollars, the hank's allocation for the loop as a
member)``, measured without the loop's own spending, so they are the same at every codon of the
loop; a loop codon is resolved against the loop pool and also capped by the hank's remaining
money.  Time: ``min(codon maxTimeSeconds, hank time left, loop time left)``; a loop's time is
``min(loop maxTimeSeconds, hank time left when the loop started)``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hankweave.state.types import BudgetExceededData, BudgetScope, ExecutionCodonEntry, LoopBudget

__all__ = [
    "DEFAULT_ON_EXCEEDED",
    "PROPORTIONAL",
    "STRICT",
    "Breach",
    "BudgetPlan",
    "Caps",
    "EntryLimits",
    "Ledger",
    "Limit",
    "LoopLimits",
    "Pool",
    "Progress",
    "breach_of",
    "money",
    "plan_caps",
]

PROPORTIONAL = "proportional"
STRICT = "proportional-strict"
DEFAULT_ON_EXCEEDED = "complete"


def money(value: float) -> str:
    """Dollars for a limit's source: cents, or up to six decimals below a cent."""
    if value == 0 or abs(value) >= 0.01:
        return f"${value:.2f}"
    return "$" + f"{value:.6f}".rstrip("0")


def _percent(share: float) -> str:
    return f"{share * 100:.4g}%"


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    """A container budget: the hank's (with the run's ceiling) or a loop's ``budget`` block."""

    max_dollars: float | None = None
    max_seconds: float | None = None
    allocation: str = "shared"
    shares: Mapping[str, float] = field(default_factory=dict)
    on_exceeded: str | None = None

    @classmethod
    def of_loop(cls, budget: LoopBudget | None) -> Pool | None:
        if budget is None:
            return None
        return cls(max_dollars=budget.max_dollars, max_seconds=budget.max_time_seconds,
                   allocation=budget.allocation or "shared", shares=dict(budget.shares or {}),
                   on_exceeded=budget.on_exceeded)

    @classmethod
    def of_json(cls, data: Mapping[str, Any] | None) -> Pool | None:
        """A pool from a camelCase budget block (``overrides.budget``, a loop's ``budget``)."""
        if data is None:
            return None
        return cls(max_dollars=data.get("maxDollars"), max_seconds=data.get("maxTimeSeconds"),
                   allocation=data.get("allocation") or "shared",
                   shares=dict(data.get("shares") or {}), on_exceeded=data.get("onExceeded"))

    @property
    def proportional(self) -> bool:
        """A proportional mode with the ceiling it needs (validation requires one)."""
        return self.allocation in (PROPORTIONAL, STRICT) and self.max_dollars is not None

    @property
    def strict(self) -> bool:
        return self.allocation == STRICT and self.max_dollars is not None

    def share_of(self, key: str) -> float | None:
        return self.shares.get(key) if self.proportional else None

    @property
    def share_total(self) -> float:
        return sum(self.shares.values()) if self.proportional else 0.0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"maxDollars": self.max_dollars,
                                "maxTimeSeconds": self.max_seconds,
                                "allocation": self.allocation,
                                "shares": dict(self.shares) or None,
                                "onExceeded": self.on_exceeded}
        return {key: value for key, value in data.items() if value is not None}


@dataclass(frozen=True)
class Caps:
    """A codon's own ``budget`` block."""

    max_dollars: float | None = None
    max_seconds: float | None = None
    max_output_tokens: int | None = None
    max_context_tokens: int | None = None
    on_exceeded: str | None = None
    dollars_source: str = "codon cap"
    """Where ``max_dollars`` comes from, as limits name it (``--max-cost-per-codon`` when the
    run's per-codon ceiling is lower than the codon's own cap)."""
    extra_dollars: float = 0.0
    """Dollars people granted this entry at its own limit (``onExceeded: "ask"``): on top of
    its cap, its share or its split, never on top of what its pool has left."""

    @classmethod
    def of_json(cls, data: Mapping[str, Any] | None) -> Caps:
        if not data:
            return cls()
        return cls(max_dollars=data.get("maxDollars"), max_seconds=data.get("maxTimeSeconds"),
                   max_output_tokens=data.get("maxOutputTokens"),
                   max_context_tokens=data.get("maxContextTokens"),
                   on_exceeded=data.get("onExceeded"))


def plan_caps(entry: ExecutionCodonEntry) -> Caps:
    """The caps a plan entry's stored codon config carries (its ``budget``)."""
    extra = entry.codon.model_extra or {}
    budget = extra.get("budget")
    return Caps.of_json(budget if isinstance(budget, Mapping) else None)


class Ledger:
    """Money spent per plan entry (every run, every attempt), with running totals."""

    def __init__(self) -> None:
        self.by_entry: dict[str, float] = {}
        self.by_loop: dict[str, float] = {}
        self.total = 0.0

    def add(self, codon_id: str, loop_id: str | None, dollars: float) -> None:
        self.by_entry[codon_id] = self.by_entry.get(codon_id, 0.0) + dollars
        if loop_id is not None:
            self.by_loop[loop_id] = self.by_loop.get(loop_id, 0.0) + dollars
        self.total += dollars

    def of(self, codon_id: str) -> float:
        return self.by_entry.get(codon_id, 0.0)

    def of_loop(self, loop_id: str) -> float:
        return self.by_loop.get(loop_id, 0.0)


@dataclass(frozen=True)
class Progress:
    """What has happened so far: the money, the entries started, the time used."""

    ledger: Ledger = field(default_factory=Ledger)
    started: Collection[str] = frozenset()
    elapsed: float = 0.0
    """Seconds the hank has run, earlier runs included."""
    loop_elapsed: Mapping[str, float] = field(default_factory=dict)
    """Seconds each loop has run, earlier runs included."""


# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """A resolved limit and where it came from (``proportional share (25% of $10.00)``)."""

    value: float
    source: str
    scope: BudgetScope = field(default="codon", compare=False)
    """Whose ceiling this is: the entry's own (cap, share, split), its loop's or the run's;
    an extension granted at this limit raises that one (docs/budgets.md).  The source names
    it already, so limits compare without it."""
    loop_id: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class EntryLimits:
    """The limits of one plan entry."""

    codon_id: str
    loop_id: str | None = None
    dollars: Limit | None = None
    seconds: Limit | None = None
    output_tokens: int | None = None
    context_tokens: int | None = None
    on_exceeded: str = DEFAULT_ON_EXCEEDED
    on_exceeded_source: str = "default"

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.dollars, self.seconds, self.output_tokens,
                                            self.context_tokens))

    def to_json(self, ids: bool = True) -> dict[str, Any]:
        """``{codonId, loopId?, maxDollars?, dollarsSource?, maxTimeSeconds?, timeSource?,
        maxOutputTokens?, maxContextTokens?, onExceeded, onExceededSource}`` (without the ids
        when ``ids`` is false)."""
        data: dict[str, Any] = {"codonId": self.codon_id, "loopId": self.loop_id} if ids else {}
        data.update(_limit_json("maxDollars", "dollarsSource", self.dollars))
        data.update(_limit_json("maxTimeSeconds", "timeSource", self.seconds))
        data.update(maxOutputTokens=self.output_tokens, maxContextTokens=self.context_tokens,
                    onExceeded=self.on_exceeded, onExceededSource=self.on_exceeded_source)
        return {key: value for key, value in data.items() if value is not None}


@dataclass(frozen=True)
class LoopLimits:
    """The limits of a pooled loop as a whole."""

    loop_id: str
    dollars: Limit | None = None
    seconds: Limit | None = None
    on_exceeded: str | None = None

    def to_json(self, ids: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {"loopId": self.loop_id} if ids else {}
        data.update(_limit_json("maxDollars", "dollarsSource", self.dollars))
        data.update(_limit_json("maxTimeSeconds", "timeSource", self.seconds))
        if self.on_exceeded is not None:
            data["onExceeded"] = self.on_exceeded
        return data


def _limit_json(value_key: str, source_key: str, limit: Limit | None) -> dict[str, Any]:
    return {} if limit is None else {value_key: limit.value, source_key: limit.source}


@dataclass(frozen=True)
class Breach:
    """A limit reached: ``used >= limit`` (a $0 limit needs a positive cost)."""

    currency: str
    limit: float
    used: float
    source: str
    scope: BudgetScope = "codon"
    loop_id: str | None = None

    @property
    def message(self) -> str:
        if self.currency == "cost":
            return f"cost limit {money(self.limit)} ({self.source}) reached: {money(self.used)}" \
                   " spent"
        if self.currency == "duration":
            return f"time limit {self.limit:g}s ({self.source}) reached: {self.used:.1f}s used"
        name = "output token" if self.currency == "outputTokens" else "context token"
        return f"{name} limit {self.limit:g} ({self.source}) reached: {self.used:g} used"

    def data(self) -> BudgetExceededData:
        return BudgetExceededData(currency=self.currency, limit=self.limit, used=self.used)


def breach_of(currency: str, limit: Limit | None, used: float) -> Breach | None:
    """The breach when ``used`` reached ``limit``; a $0 dollar limit needs a positive cost."""
    if limit is None or (currency == "cost" and used <= 0) or used < limit.value:
        return None
    return Breach(currency, limit.value, max(used, 0.0), limit.source, limit.scope,
                  limit.loop_id)


# --------------------------------------------------------------------------------------------
# The plan as budgets see it
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Member:
    """One member of a pool: a plan entry, or a pooled loop (in the hank pool)."""

    key: str
    share_key: str
    cap: float | None
    entry_ids: tuple[str, ...]
    loop_id: str | None = None
    """Set when the member is a whole loop."""
    cap_source: str = "codon cap"
    """Where ``cap`` comes from, as limits name it."""
    extra: float = 0.0
    """Dollars granted at the member's own limit (:attr:`Caps.extra_dollars`)."""


class BudgetPlan:
    """The plan, the pools and the caps the limits are resolved from.

    Args:
        entries: the execution plan, in order.
        hank: the hank pool (the run's ceiling and ``overrides.budget``'s allocation).
        caps_of: a plan entry's codon caps; default :func:`plan_caps` (the stored config).
        loop_pools: each loop's pool by loop id; default: the ``loopBudget`` the entries carry.
        loop_extra: per loop id, the dollars and seconds people granted at its budget.
    """

    def __init__(self, entries: Sequence[ExecutionCodonEntry], hank: Pool, *,
                 caps_of: Callable[[ExecutionCodonEntry], Caps] = plan_caps,
                 loop_pools: Mapping[str, Pool | None] | None = None,
                 loop_extra: Mapping[str, tuple[float, float]] | None = None) -> None:
        self.entries = entries
        self.hank = hank
        self.caps_of = caps_of
        self.loop_extra = loop_extra or {}
        self._explicit_pools = loop_pools
        self._pools: dict[str, Pool | None] = {}

    # ----- lookups -----

    def entry(self, codon_id: str) -> ExecutionCodonEntry:
        for entry in reversed(self.entries):  # the running entry is usually near the end
            if entry.codon_id == codon_id:
                return entry
        raise KeyError(f"Codon {codon_id!r} is not in the plan")

    def loop_pool(self, loop_id: str) -> Pool | None:
        """The pool of a loop, None when the loop's codons belong to the hank pool."""
        if loop_id not in self._pools:
            pool: Pool | None = None
            if self._explicit_pools is not None:
                pool = self._explicit_pools.get(loop_id)
            else:
                pool = next((Pool.of_loop(e.loop_context.loop_budget) for e in self.entries
                             if e.loop_context is not None
                             and e.loop_context.loop_id == loop_id), None)
            if pool is None and self.hank.share_of(loop_id) is not None:
                pool = Pool()  # a share but no budget block: the share is the loop's
            self._pools[loop_id] = pool
        return self._pools[loop_id]

    def pooled_loop_of(self, entry: ExecutionCodonEntry) -> str | None:
        context = entry.loop_context
        if context is None or self.loop_pool(context.loop_id) is None:
            return None
        return context.loop_id

    def loop_ids(self) -> list[str]:
        """The pooled loops of the plan, in plan order."""
        seen: dict[str, None] = {}
        for entry in self.entries:
            loop_id = self.pooled_loop_of(entry)
            if loop_id is not None:
                seen.setdefault(loop_id, None)
        return list(seen)

    def _hank_members(self) -> list[_Member]:
        members: list[_Member] = []
        loops: dict[str, list[str]] = {}
        for entry in self.entries:
            loop_id = self.pooled_loop_of(entry)
            if loop_id is None:
                members.append(self._codon_member(entry))
            elif loop_id not in loops:
                loops[loop_id] = [entry.codon_id]
                pool = self.loop_pool(loop_id)
                members.append(_Member(key=loop_id, share_key=loop_id,
                                       cap=pool.max_dollars if pool else None,
                                       entry_ids=(), loop_id=loop_id))
            else:
                loops[loop_id].append(entry.codon_id)
        return [_Member(m.key, m.share_key, m.cap, tuple(loops[m.loop_id]), m.loop_id)
                if m.loop_id is not None else m for m in members]

    def _loop_members(self, loop_id: str) -> list[_Member]:
        return [self._codon_member(entry) for entry in self.entries
                if entry.loop_context is not None and entry.loop_context.loop_id == loop_id]

    def _codon_member(self, entry: ExecutionCodonEntry) -> _Member:
        caps = self.caps_of(entry)
        return _Member(key=entry.codon_id, share_key=entry.codon.id, cap=caps.max_dollars,
                       entry_ids=(entry.codon_id,), cap_source=caps.dollars_source,
                       extra=caps.extra_dollars)

    # ----- resolution -----

    def resolve(self, codon_id: str, progress: Progress) -> EntryLimits:
        """The limits of plan entry ``codon_id`` if it started now."""
        entry = self.entry(codon_id)
        caps = self.caps_of(entry)
        loop_id = self.pooled_loop_of(entry)
        ledger, hank = progress.ledger, self.hank
        hank_remaining = _remaining(hank.max_dollars, ledger.total)
        seconds = [Limit(caps.max_seconds, "codon cap")] if caps.max_seconds else []
        if hank.max_seconds is not None:
            seconds.append(Limit(max(0.0, hank.max_seconds - progress.elapsed), "run time left",
                                 "run"))
        if loop_id is None:
            member = self._codon_member(entry)
            dollars = self._dollars(hank, hank.max_dollars, hank_remaining, member, progress,
                                    lambda: self._hank_members(), pool_name=None)
        else:
            loop = self.resolve_loop(loop_id, progress)
            pool = self.loop_pool(loop_id) or Pool()
            ceiling = loop.dollars.value if loop.dollars is not None else None
            dollars = self._dollars(
                pool, ceiling, _remaining(ceiling, ledger.of_loop(loop_id)),
                self._codon_member(entry), progress, lambda: self._loop_members(loop_id),
                pool_name=loop_id)
            if hank_remaining is not None:
                dollars = _least(dollars, Limit(hank_remaining, _remaining_label(
                    hank_remaining, hank.max_dollars, None), "run"))
            if loop.seconds is not None:
                left = max(0.0, loop.seconds.value - progress.loop_elapsed.get(loop_id, 0.0))
                seconds.append(Limit(left, f"loop {loop_id} time left", "loop", loop_id))
        on_exceeded, on_source = self._on_exceeded(caps, loop_id)
        return EntryLimits(
            codon_id=codon_id, loop_id=entry.loop_context.loop_id if entry.loop_context else None,
            dollars=dollars, seconds=_least(None, *seconds),
            output_tokens=caps.max_output_tokens, context_tokens=caps.max_context_tokens,
            on_exceeded=on_exceeded, on_exceeded_source=on_source)

    def resolve_loop(self, loop_id: str, progress: Progress) -> LoopLimits:
        """A pooled loop's own dollars and time (the same at every codon of the loop)."""
        pool = self.loop_pool(loop_id)
        if pool is None:
            return LoopLimits(loop_id)
        hank, ledger = self.hank, progress.ledger
        member = next(m for m in self._hank_members() if m.loop_id == loop_id)
        # Measured without the loop's own spending: what the hank had for it when it began.
        before = _remaining(hank.max_dollars, ledger.total - ledger.of_loop(loop_id))
        dollars = self._dollars(hank, hank.max_dollars, before, member, progress,
                                lambda: self._hank_members(), pool_name=None, cap_label="loop cap")
        seconds: list[Limit] = []
        if pool.max_seconds is not None:
            seconds.append(Limit(pool.max_seconds, "loop cap"))
        if hank.max_seconds is not None:
            at_start = progress.elapsed - progress.loop_elapsed.get(loop_id, 0.0)
            seconds.append(Limit(max(0.0, hank.max_seconds - at_start), "run time left"))
        extra_dollars, extra_seconds = self.loop_extra.get(loop_id, (0.0, 0.0))
        return LoopLimits(loop_id, dollars=_raised(dollars, extra_dollars),
                          seconds=_raised(_least(None, *seconds), extra_seconds),
                          on_exceeded=pool.on_exceeded)

    def loop_breach(self, loop_id: str, progress: Progress) -> Breach | None:
        """The loop's budget reached (its money spent or its time used), or None."""
        limits = self.resolve_loop(loop_id, progress)
        spent = progress.ledger.of_loop(loop_id)
        found = breach_of("cost", limits.dollars, spent)
        if found is None:
            found = breach_of("duration", limits.seconds, progress.loop_elapsed.get(loop_id, 0.0))
        if found is None:
            return None
        return Breach(found.currency, found.limit, found.used, f"loop {loop_id}: {found.source}")

    def resolve_all(self, progress: Progress) -> list[EntryLimits]:
        return [self.resolve(entry.codon_id, progress) for entry in self.entries]

    # ----- the dollar rules -----

    def _dollars(self, pool: Pool, ceiling: float | None, remaining: float | None,
                 member: _Member, progress: Progress, members: Callable[[], list[_Member]], *,
                 pool_name: str | None, cap_label: str | None = None) -> Limit | None:
        cap, cap_label = member.cap, cap_label or member.cap_source
        extra = member.extra  # granted at the member's own limit, whichever that was
        if ceiling is None or remaining is None:
            return Limit(cap + extra, cap_label) if cap is not None else None
        of = f" of loop {pool_name}" if pool_name else ""
        whose = f"loop {pool_name}'s " if pool_name else ""
        pool_scope: BudgetScope = "loop" if pool_name else "run"
        options: list[Limit] = []
        share = pool.share_of(member.share_key) if pool.proportional else None
        if not pool.proportional:
            options.append(Limit(remaining, f"shared pool{of}", pool_scope, pool_name))
        elif share is not None:
            options.append(Limit(share * ceiling + extra,
                                 f"proportional share ({_percent(share)} of"
                                 f" {whose}{money(ceiling)})"))
        elif cap is None:
            everyone = members()
            unallocated = max(0.0, 1.0 - pool.share_total) * ceiling
            waiting = sum(1 for other in everyone if other.key != member.key
                          and _unallocated(pool, other) and not _started(other, progress))
            options.append(Limit(unallocated / (1 + waiting) + extra,
                                 f"uniform split (1/{1 + waiting} of {whose}{money(unallocated)}"
                                 " unallocated)"))
        if cap is not None:
            options.append(Limit(cap + extra, cap_label))
        if pool.strict:
            strict = max(0.0, ceiling - _reserved_before(pool, ceiling, member, members(),
                                                         progress.ledger))
            options.append(Limit(strict + extra, f"strict remaining ({money(strict)}{of} after"
                                                 " earlier shares)"))
        if pool.proportional:
            options.append(Limit(remaining, _remaining_label(remaining, ceiling, pool_name),
                                 pool_scope, pool_name))
        return _least(None, *options)

    def _on_exceeded(self, caps: Caps, loop_id: str | None) -> tuple[str, str]:
        if caps.on_exceeded:
            return caps.on_exceeded, "codon"
        pool = self.loop_pool(loop_id) if loop_id else None
        if pool is not None and pool.on_exceeded:
            return pool.on_exceeded, f"loop {loop_id}"
        if self.hank.on_exceeded:
            return self.hank.on_exceeded, "hank"
        return DEFAULT_ON_EXCEEDED, "default"


def _remaining(ceiling: float | None, spent: float) -> float | None:
    return None if ceiling is None else max(0.0, ceiling - spent)


def _remaining_label(remaining: float, ceiling: float | None, pool_name: str | None) -> str:
    where = f"loop {pool_name}" if pool_name else "run"
    of = f" of {money(ceiling)}" if ceiling is not None else ""
    return f"{where} remaining ({money(remaining)}{of})"


def _unallocated(pool: Pool, member: _Member) -> bool:
    return pool.share_of(member.share_key) is None and member.cap is None


def _started(member: _Member, progress: Progress) -> bool:
    return any(codon_id in progress.started for codon_id in member.entry_ids)


def _spent(member: _Member, ledger: Ledger) -> float:
    if member.loop_id is not None:
        return ledger.of_loop(member.loop_id)
    return sum(ledger.of(codon_id) for codon_id in member.entry_ids)


def _reserved_before(pool: Pool, ceiling: float, member: _Member, members: Iterable[_Member],
                     ledger: Ledger) -> float:
    """What the members before ``member`` took: a share's full amount, else what they spent."""
    total = 0.0
    for other in members:
        if other.key == member.key:
            break
        share = pool.share_of(other.share_key)
        spent = _spent(other, ledger)
        total += max(share * ceiling, spent) if share is not None else spent
    return total


def _raised(limit: Limit | None, extra: float) -> Limit | None:
    """``limit`` with ``extra`` granted on top (a loop's budget extended by people)."""
    if limit is None or not extra:
        return limit
    return Limit(limit.value + extra, f"{limit.source}, extended", limit.scope, limit.loop_id)


def _least(first: Limit | None, *others: Limit) -> Limit | None:
    """The smallest limit; the earliest of equals (the most specific source comes first)."""
    best = first
    for option in others:
        if best is None or option.value < best.value:
            best = option
    return best
