"""Cost and token aggregation over the persisted state.

``state.json`` stores no totals: costs are computed from the codon records whenever they are
needed.  Which field counts depends on the record's status (``getCodonCost`` in Hankweave
0.10.0):

========================================  ==================  ==================
status                                    cost                tokens
========================================  ==================  ==================
completed                                 ``finalCost``       ``finalTokens``
failed                                    ``partialCost``     ``partialTokens``
skipped                                   0                   ``partialTokens``
running, completing-sentinels             ``currentCost``     ``currentTokens``
preparing, starting, initializing         0                   0
========================================  ==================  ==================

A skipped record may still carry a ``partialCost``; the runtime counts that status as zero
cost, while its token totals use ``partialTokens``.  Usage without a known price adds tokens but
no cost, and marks the record ``costComplete: false`` (:func:`codon_cost_complete`): such a cost
is a lower bound, never a made-up zero.  Sentinel LLM costs
(``sentinels.totalCost``) are kept apart and are part of no total here.

These are the runtime's view of persisted state, not a provider invoice.
"""

from __future__ import annotations

from typing import TypedDict

from hankweave.state.types import (
    ZERO_TOKENS,
    CodonExecution,
    CompletedCodon,
    FailedCodon,
    HankweaveState,
    Run,
    RunId,
    RunningCodon,
    SkippedCodon,
    TokenUsage,
    changed_positions,
)


def codon_cost(codon: CodonExecution) -> float:
    """The cost one codon record contributes to run and execution totals."""
    if isinstance(codon, CompletedCodon):
        return codon.final_cost
    if isinstance(codon, FailedCodon):
        return codon.partial_cost
    # RunningCodon covers completing-sentinels too (same shape, subclass).
    if isinstance(codon, RunningCodon):
        return codon.current_cost
    # Skipped (even with a partialCost) and the statuses before the agent runs.
    return 0.0


def codon_cost_complete(codon: CodonExecution) -> bool:
    """False when the record's cost is a lower bound: some of its usage had no known price."""
    return getattr(codon, "cost_complete", None) is not False


def codon_tokens(codon: CodonExecution) -> TokenUsage:
    """The tokens one codon record contributes to run and execution totals."""
    if isinstance(codon, CompletedCodon):
        return codon.final_tokens
    if isinstance(codon, FailedCodon | SkippedCodon):
        return codon.partial_tokens
    if isinstance(codon, RunningCodon):
        return codon.current_tokens
    return ZERO_TOKENS


def sentinel_cost(codon: CodonExecution) -> float:
    """The LLM cost of the codon's sentinels; never part of the codon's own cost."""
    sentinels = getattr(codon, "sentinels", None)
    return sentinels.total_cost if sentinels is not None else 0.0


def run_cost(run: Run) -> float:
    """The sum of :func:`codon_cost` over every record of ``run``."""
    return sum((codon_cost(codon) for codon in run.codons), 0.0)


def run_tokens(run: Run) -> TokenUsage:
    """The sum of :func:`codon_tokens` over every record of ``run``."""
    return sum((codon_tokens(codon) for codon in run.codons), ZERO_TOKENS)


def run_sentinel_cost(run: Run) -> float:
    """The sum of :func:`sentinel_cost` over every record of ``run``."""
    return sum((sentinel_cost(codon) for codon in run.codons), 0.0)


def total_cost(state: HankweaveState) -> float:
    """The cost of every codon record of every run."""
    return sum((run_cost(run) for run in state.runs), 0.0)


def total_tokens(state: HankweaveState) -> TokenUsage:
    """The tokens of every codon record of every run."""
    return sum((run_tokens(run) for run in state.runs), ZERO_TOKENS)


def total_sentinel_cost(state: HankweaveState) -> float:
    """The sentinel cost of every codon record of every run (kept apart from :func:`total_cost`)."""
    return sum((run_sentinel_cost(run) for run in state.runs), 0.0)


def current_run_cost(state: HankweaveState) -> float:
    """The cost of the run ``currentRunId`` names; 0 when no run is current.

    The original serves this from a cache that it zeroes when the run completes or fails (which
    also clears ``currentRunId``) but leaves stale on a crash; computing it from the state gives
    the same value in the first case and the honest one in the second.
    """
    run = state.current_run
    return run_cost(run) if run is not None else 0.0


class StateSummary(TypedDict):
    """The ``resultingState`` summary carried by the ``state.transition`` event."""

    currentRunId: RunId | None
    runCount: int
    totalCost: float
    currentRunCost: float


def resulting_state_summary(state: HankweaveState,
                            ledger: CostLedger | None = None) -> StateSummary:
    """Summarize ``state`` as the ``state.transition`` event's ``resultingState`` (with a
    ledger, at the cost of what changed since the ledger's last state)."""
    if ledger is None:
        total, current = total_cost(state), current_run_cost(state)
    else:
        run = state.current_run
        total, current = ledger.total(state), ledger.run(run) if run is not None else 0.0
    return StateSummary(
        currentRunId=state.current_run_id,
        runCount=len(state.runs),
        totalCost=total,
        currentRunCost=current,
    )


class CostLedger:
    """:func:`total_cost` and :func:`run_cost` of successive states of one execution, priced
    only for the records that changed.

    Every transition reports the totals, and a long loop's run holds thousands of records;
    records are immutable (the reducer replaces the one it changes), so the ledger keeps each
    run's per-record costs and prices again only the records that are new objects.  The sums
    are taken over those lists in record order, so they equal the functions' to the last bit.
    """

    def __init__(self) -> None:
        # By run id: the run last priced, its records, their costs, and their sum.
        self._runs: dict[RunId, tuple[Run, list[CodonExecution], list[float], float]] = {}

    def total(self, state: HankweaveState) -> float:
        """:func:`total_cost` of ``state``."""
        return sum((self.run(run) for run in state.runs), 0.0)

    def run(self, run: Run) -> float:
        """:func:`run_cost` of ``run``."""
        known = self._runs.get(run.run_id)
        if known is not None and known[0] is run:
            return known[3]
        records = run.codons  # never changed in place: the reducer builds a new list
        if known is None or len(records) < len(known[1]):
            costs = [codon_cost(codon) for codon in records]
        else:
            costs = known[2]  # the ledger's own list, updated in place
            for index in changed_positions(known[1], records):
                if index < len(costs):
                    costs[index] = codon_cost(records[index])
                else:
                    costs.append(codon_cost(records[index]))
        total = sum(costs, 0.0)
        self._runs[run.run_id] = (run, records, costs, total)
        return total
