"""Budgets: the dollar, time and token limits a codon runs under.

A run has an optional ceiling (``--max-cost``/``--max-time``, ``hankweave.json``, the hank's
``overrides.budget``), loops may carry their own budget, and a codon may cap its own dollars,
seconds, output tokens and context tokens.  Limits are compared with ``>=`` (a $0 limit is
exceeded by the first positive cost) and the first breach of a codon is recorded once.

Allocation: the ``shared`` mode (first past the post: a codon may spend what the pool has left)
is enforced.  The ``proportional`` modes are enforced as ``share x ceiling`` for codons with a
share and as the shared pool for the others (see docs/differences.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hankweave.state.types import BudgetExceededData, TokenUsage


@dataclass
class CodonLimits:
    dollars: float | None = None
    seconds: float | None = None
    output_tokens: int | None = None
    context_tokens: int | None = None
    on_exceeded: str = "complete"


@dataclass
class CodonBudget:
    """The limits of one codon attempt and what it has used so far."""

    codon_id: str
    limits: CodonLimits
    started: float
    clock: Callable[[], float] = time.monotonic
    dollars: float = 0.0
    output_tokens: int = 0
    context_high_water: int = 0
    exceeded: BudgetExceededData | None = None
    message: str | None = None

    def add_usage(self, cost: float, usage: TokenUsage | None) -> BudgetExceededData | None:
        """Account one assistant message; return the breach the first time a limit is hit."""
        self.dollars += cost
        if usage is not None:
            self.output_tokens += usage.output_tokens
            turn = usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + (
                usage.cache_creation_tokens)
            self.context_high_water = max(self.context_high_water, turn)
        return self.check()

    def check(self) -> BudgetExceededData | None:
        """Compare usage with every limit (time included); record and return the first breach."""
        if self.exceeded is not None:
            return None
        limits = self.limits
        checks: list[tuple[str, float | None, float]] = [
            ("cost", limits.dollars, self.dollars if self.dollars > 0 else -1),
            ("outputTokens", limits.output_tokens, self.output_tokens),
            ("contextTokens", limits.context_tokens, self.context_high_water),
            ("duration", limits.seconds, self.clock() - self.started),
        ]
        for currency, limit, used in checks:
            if limit is not None and used >= limit:
                used = max(used, 0)
                self.exceeded = BudgetExceededData(currency=currency, limit=limit, used=used)
                self.message = f"{currency} limit {limit:g} reached ({used:g} used)"
                return self.exceeded
        return None


@dataclass
class RunBudget:
    """The run-wide ceiling and the spending it is measured against."""

    max_dollars: float | None = None
    max_seconds: float | None = None
    allocation: str = "shared"
    shares: dict[str, float] = field(default_factory=dict)
    on_exceeded: str = "complete"
    spent_before: float = 0.0
    elapsed_before: float = 0.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    spent: dict[str, float] = field(default_factory=dict)
    limits: dict[str, CodonLimits] = field(default_factory=dict)
    """The limits each codon of this run was given (its newest attempt's), for the summary."""

    def __post_init__(self) -> None:
        if not self.started:
            self.started = self.clock()

    @property
    def has_limits(self) -> bool:
        """A ceiling, or a limit on some codon of this run: worth a ``budget.summary``."""
        return self.max_dollars is not None or self.max_seconds is not None or any(
            limit is not None for limits in self.limits.values()
            for limit in (limits.dollars, limits.seconds, limits.output_tokens,
                          limits.context_tokens))

    def total_spent(self) -> float:
        return self.spent_before + sum(self.spent.values())

    def remaining_dollars(self) -> float | None:
        if self.max_dollars is None:
            return None
        return max(0.0, self.max_dollars - self.total_spent())

    def remaining_seconds(self) -> float | None:
        if self.max_seconds is None:
            return None
        elapsed = self.elapsed_before + (self.clock() - self.started)
        return max(0.0, self.max_seconds - elapsed)

    def exhausted(self) -> bool:
        """True once the run's money or time is gone: no further codon starts."""
        dollars, seconds = self.remaining_dollars(), self.remaining_seconds()
        return (dollars is not None and self.max_dollars is not None and dollars <= 0
                and self.total_spent() > 0) or (seconds is not None and seconds <= 0)

    def track(self, codon_id: str, config_id: str, *, max_dollars: float | None,
              max_seconds: float | None, max_output_tokens: int | None,
              max_context_tokens: int | None, on_exceeded: str | None) -> CodonBudget:
        """The limits of a codon about to start, resolved against the run's ceiling."""
        remaining = self.remaining_dollars()
        if remaining is not None and self.allocation != "shared" and config_id in self.shares:
            remaining = min(remaining, self.shares[config_id] * (self.max_dollars or 0.0))
        dollars = _min(max_dollars, remaining)
        seconds = _min(max_seconds, self.remaining_seconds())
        limits = CodonLimits(dollars=dollars, seconds=seconds, output_tokens=max_output_tokens,
                             context_tokens=max_context_tokens,
                             on_exceeded=on_exceeded or self.on_exceeded)
        self.limits[codon_id] = limits
        return CodonBudget(codon_id=codon_id, limits=limits, started=self.clock(),
                           clock=self.clock)

    def record(self, codon_id: str, cost: float) -> None:
        """The final (or partial) cost of a finished attempt; retries add up."""
        self.spent[codon_id] = self.spent.get(codon_id, 0.0) + cost


def _min(a: float | None, b: float | None) -> float | None:
    values = [v for v in (a, b) if v is not None]
    return min(values) if values else None
