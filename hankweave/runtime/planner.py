"""The execution plan: which codons run, in which order, and how loops grow (docs/behaviour.md §3.2).

A hank's top-level codons enter the plan as they are; a loop enters with its **first iteration
only**, each loop codon under the runtime id ``<codonId>#<iteration>``. After a loop codon ends
(completed, skipped, or failed under ``onFailure: ignore``) :func:`expand_after` decides whether
the loop goes on: it inserts the next iteration right after that codon, leaves the plan alone, or
terminates the loop.

Everything here is pure: plans go in, new plans come out, and the caller persists them.

Deliberate differences from Hankweave 0.10.0:

* a loop is reported terminated only when no entries of that loop remain later in the plan (the
  0.12 rule; 0.10.0 read "the plan did not grow" as termination after every codon);
* :func:`checkpoint_patterns_through` counts the ``checkpointedFiles`` of loop codons too;
* :func:`is_context_exceeded_acceptable` also accepts a loop codon with ``exhaustWithPrompt``
  (quirk 16).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hankweave.config.hank import (
    Codon,
    HankFile,
    IterationLimit,
    Loop,
    base_codon_id,
    runtime_codon_id,
)
from hankweave.state.types import (
    ExecutionCodonEntry,
    LoopBudget,
    PlanCodon,
    PlanLoopContext,
    plan_positions,
)

__all__ = [
    "ExpandOutcome",
    "Expansion",
    "PlanError",
    "TerminationReason",
    "base_codon_id",
    "build_initial_plan",
    "checkpoint_patterns_through",
    "codon_config_for",
    "default_plan_codon",
    "entry_index",
    "expand_after",
    "is_context_exceeded_acceptable",
    "loop_of",
    "previous_plan_entry",
    "runtime_codon_id",
    "validate_plan",
]

ExpandOutcome = Literal["completed", "skipped", "failed-ignored"]
TerminationReason = Literal["iteration_limit", "context_exceeded", "budget_exceeded"]

_EXPAND_OUTCOMES: frozenset[str] = frozenset({"completed", "skipped", "failed-ignored"})
class PlanError(ValueError):
    """The plan is inconsistent, or names a codon it does not hold."""


@dataclass(frozen=True)
class Expansion:
    """What :func:`expand_after` decided for one finished loop codon.

    Attributes:
        plan: the new plan (the same list object when nothing changed).
        terminated_loop_id: the loop that ended with this codon, or ``None``. A loop ends only
            when no entry of it remains later in the plan; this is when the loop-level
            ``archiveOnSuccess`` runs.
        termination_reason: why the loop stopped (``None`` when it goes on). Only set together
            with ``terminated_loop_id``.
        iteration_completed: the codon closed its iteration (it was the iteration's last codon,
            or the loop stopped early); the caller emits ``loop.iteration.completed``.
        is_final: the completed iteration was the loop's last (the event's ``isFinal``).
    """

    plan: list[ExecutionCodonEntry]
    terminated_loop_id: str | None = None
    termination_reason: TerminationReason | None = None
    iteration_completed: bool = False
    is_final: bool = False


# --------------------------------------------------------------------------------------------
# Ids and lookups
# --------------------------------------------------------------------------------------------


def loop_of(hank: HankFile, loop_id: str) -> Loop | None:
    """The top-level loop with this id, or ``None``."""
    for item in hank.hank:
        if isinstance(item, Loop) and item.id == loop_id:
            return item
    return None


def codon_config_for(hank: HankFile, entry: ExecutionCodonEntry) -> Codon | None:
    """The hank's codon config behind a plan entry (a loop codon by its loop and index)."""
    context = entry.loop_context
    if context is not None:
        loop = loop_of(hank, context.loop_id)
        if loop is None or not 0 <= context.codon_index_in_loop < len(loop.codons):
            return None
        return loop.codons[context.codon_index_in_loop]
    for item in hank.hank:
        if isinstance(item, Codon) and item.id == entry.codon_id:
            return item
    return None


def entry_index(plan: Sequence[ExecutionCodonEntry], codon_id: str) -> int:
    """The position of ``codon_id`` in the plan; :class:`PlanError` when it is not there."""
    index = plan_positions(plan).get(codon_id)
    if index is None:
        raise PlanError(f"Codon not found in plan: {codon_id}")
    return index


def previous_plan_entry(
    plan: Sequence[ExecutionCodonEntry], codon_id: str
) -> ExecutionCodonEntry | None:
    """The entry just before ``codon_id``: the codon a ``continue-previous`` codon continues.

    For the first codon of iteration ``n > 0`` this is the last codon of iteration ``n - 1``
    (expansion inserts iterations back to back); for iteration 0 it is the item before the loop.
    """
    index = entry_index(plan, codon_id)
    return plan[index - 1] if index > 0 else None


# --------------------------------------------------------------------------------------------
# Building and validating
# --------------------------------------------------------------------------------------------


def default_plan_codon(codon: Codon) -> PlanCodon:
    """The codon config as stored in the plan: dumped by JSON name, unset fields left out."""
    return PlanCodon.model_validate(codon.model_dump(by_alias=True, exclude_none=True, mode="json"))


def _loop_budget(loop: Loop) -> LoopBudget | None:
    if loop.budget is None:
        return None
    return LoopBudget.model_validate(
        loop.budget.model_dump(by_alias=True, exclude_none=True, mode="json")
    )


def _iteration_entries(
    loop: Loop,
    iteration: int,
    plan_codon: Callable[[Codon], PlanCodon],
    known: dict[int, PlanCodon] | None = None,
) -> list[ExecutionCodonEntry]:
    budget = _loop_budget(loop)
    known = known or {}
    return [
        ExecutionCodonEntry(
            codon=known[index].model_copy(deep=True) if index in known else plan_codon(codon),
            codon_id=runtime_codon_id(codon.id, iteration),
            loop_context=PlanLoopContext(
                loop_id=loop.id,
                iteration=iteration,
                codon_index_in_loop=index,
                loop_budget=budget,
            ),
        )
        for index, codon in enumerate(loop.codons)
    ]


def build_initial_plan(
    hank: HankFile, plan_codon: Callable[[Codon], PlanCodon] | None = None
) -> list[ExecutionCodonEntry]:
    """The plan of a fresh run: top-level codons as they are, each loop's iteration 0.

    Args:
        hank: the validated hank file.
        plan_codon: turns a codon config into its plan copy; the runtime passes one that puts
            the resolved model info in ``model``. Defaults to :func:`default_plan_codon`.
    """
    to_plan = plan_codon or default_plan_codon
    plan: list[ExecutionCodonEntry] = []
    for item in hank.hank:
        if isinstance(item, Loop):
            plan.extend(_iteration_entries(item, 0, to_plan))
        else:
            plan.append(ExecutionCodonEntry(codon=to_plan(item), codon_id=item.id))
    return plan


def validate_plan(plan: Sequence[ExecutionCodonEntry], hank: HankFile | None = None) -> None:
    """Check that runtime ids are unique and, given the hank, that loop contexts point at a loop
    and at a codon index that exists.

    Raises:
        PlanError: naming the duplicate ids or the bad loop context.
    """
    seen: set[str] = set()
    duplicates: list[str] = []
    for entry in plan:
        if entry.codon_id in seen and entry.codon_id not in duplicates:
            duplicates.append(entry.codon_id)
        seen.add(entry.codon_id)
    if duplicates:
        raise PlanError(f"Duplicate codon IDs after loop expansion: {', '.join(duplicates)}")
    if hank is None:
        return
    for entry in plan:
        context = entry.loop_context
        if context is None:
            continue
        loop = loop_of(hank, context.loop_id)
        if loop is None:
            raise PlanError(f"Loop not found for codon {entry.codon_id}: {context.loop_id}")
        if not 0 <= context.codon_index_in_loop < len(loop.codons):
            raise PlanError(
                f"Codon index {context.codon_index_in_loop} out of bounds for loop {loop.id}"
            )


# --------------------------------------------------------------------------------------------
# Lazy loop expansion
# --------------------------------------------------------------------------------------------


def _end_of_iteration(plan: Sequence[ExecutionCodonEntry], index: int) -> int:
    """The index just past the last entry of the iteration that holds ``plan[index]``."""
    context = plan[index].loop_context
    assert context is not None
    end = index + 1
    while end < len(plan):
        other = plan[end].loop_context
        if (
            other is None
            or other.loop_id != context.loop_id
            or other.iteration != context.iteration
        ):
            break
        end += 1
    return end


def _iteration_around(plan: Sequence[ExecutionCodonEntry], index: int
                      ) -> Sequence[ExecutionCodonEntry]:
    """The entries of the loop iteration ``plan[index]`` belongs to: an iteration's entries are
    contiguous in the plan, so only its neighbours are looked at, however long the loop ran."""
    context = plan[index].loop_context

    def same(entry: ExecutionCodonEntry) -> bool:
        other = entry.loop_context
        return context is not None and other is not None and \
            (other.loop_id, other.iteration) == (context.loop_id, context.iteration)

    start, end = index, index + 1
    while start > 0 and same(plan[start - 1]):
        start -= 1
    while end < len(plan) and same(plan[end]):
        end += 1
    return plan[start:end]


def _loop_continues_after(plan: Sequence[ExecutionCodonEntry], index: int, loop_id: str) -> bool:
    return any(
        entry.loop_context is not None and entry.loop_context.loop_id == loop_id
        for entry in plan[index + 1 :]
    )


def expand_after(
    plan: list[ExecutionCodonEntry],
    hank: HankFile,
    codon_id: str,
    *,
    outcome: ExpandOutcome,
    context_exceeded: bool,
    budget_exceeded: bool,
    plan_codon: Callable[[Codon], PlanCodon] | None = None,
) -> Expansion:
    """Decide how the loop of ``codon_id`` goes on after that codon ended.

    The checks, in order (docs/behaviour.md §3.2):

    1. context exceeded in a ``terminateOn: contextExceeded`` loop → the loop stops now; the
       rest of this iteration leaves the plan;
    2. a budget (the codon's or its loop's) was exceeded → the same, with reason
       ``budget_exceeded``;
    3. not the last codon of its iteration → no change;
    4. ``iterationLimit`` reached (``iteration >= limit - 1``) → no further iteration;
    5. otherwise the next iteration is inserted right after this codon (unless it is already
       there, so calling this twice for one codon cannot duplicate an iteration).

    ``outcome`` is one of the three endings after which expansion runs; the checks are the same
    for all three. A top-level codon gives an unchanged plan and no loop news. New entries copy
    the plan codons of the finished iteration; ``plan_codon`` (default
    :func:`default_plan_codon`) builds any that cannot be copied.

    Raises:
        PlanError: ``codon_id`` is not in the plan, or its loop is not in the hank.
        ValueError: ``outcome`` is not one that expands (an unignored failure never does).
    """
    if outcome not in _EXPAND_OUTCOMES:
        raise ValueError(f"No loop expansion after outcome {outcome!r}")
    index = entry_index(plan, codon_id)
    context = plan[index].loop_context
    if context is None:
        return Expansion(plan=plan)
    loop = loop_of(hank, context.loop_id)
    if loop is None:
        raise PlanError(f"Loop not found for codon {codon_id}: {context.loop_id}")

    stop_early = _stop_early(loop, context_exceeded=context_exceeded,
                             budget_exceeded=budget_exceeded)
    if stop_early is not None:
        end = _end_of_iteration(plan, index)
        return _iteration_ended([*plan[: index + 1], *plan[end:]] if end > index + 1 else plan,
                                index, loop, stop_early)
    if context.codon_index_in_loop != len(loop.codons) - 1:
        return Expansion(plan=plan)  # not the last codon of its iteration
    terminate_on = loop.terminate_on
    if terminate_on.type == "iterationLimit" and context.iteration >= terminate_on.limit - 1:
        return _iteration_ended(plan, index, loop, "iteration_limit")
    return _iteration_ended(
        _with_next_iteration(plan, index, loop, context.iteration + 1,
                             plan_codon or default_plan_codon),
        index, loop, None)


def _stop_early(loop: Loop, *, context_exceeded: bool,
                budget_exceeded: bool) -> TerminationReason | None:
    """Why the loop stops in the middle of its iteration, if it does (checks 1 and 2)."""
    if context_exceeded and loop.terminate_on.type == "contextExceeded":
        return "context_exceeded"
    if budget_exceeded:
        # The budget branch's source was not available; like the context branch, the loop ends
        # now, and the codons left in this iteration would only run over the same budget.
        return "budget_exceeded"
    return None


def _with_next_iteration(plan: list[ExecutionCodonEntry], index: int, loop: Loop,
                         iteration: int, plan_codon: Callable[[Codon], PlanCodon]
                         ) -> list[ExecutionCodonEntry]:
    """``plan`` with ``iteration`` inserted right after ``plan[index]``, unless it is already
    there."""
    # Reuse this iteration's plan copies so the runtime's resolved model info carries
    # over; `plan_codon` is only the fallback for an entry that is missing.
    known = {
        entry.loop_context.codon_index_in_loop: entry.codon
        for entry in _iteration_around(plan, index)
        if entry.loop_context is not None
    }
    next_entries = _iteration_entries(loop, iteration, plan_codon, known)
    if next_entries[0].codon_id in plan_positions(plan):
        return plan
    return [*plan[: index + 1], *next_entries, *plan[index + 1 :]]


def _iteration_ended(new_plan: list[ExecutionCodonEntry], index: int, loop: Loop,
                     reason: TerminationReason | None) -> Expansion:
    """The expansion after an iteration ended at ``plan[index]`` (its last codon, or early)."""
    # The 0.12 rule: the loop has ended only when nothing of it is left to run.
    terminated = not _loop_continues_after(new_plan, index, loop.id)
    return Expansion(
        plan=new_plan,
        terminated_loop_id=loop.id if terminated else None,
        termination_reason=reason if terminated else None,
        iteration_completed=True,
        is_final=terminated,
    )


# --------------------------------------------------------------------------------------------
# Questions the runtime asks about a plan entry
# --------------------------------------------------------------------------------------------


def _plan_field(codon: PlanCodon, json_name: str) -> Any:
    """A field of a plan codon by its JSON name (plan codons keep config fields as extras)."""
    extra = codon.model_extra or {}
    if json_name in extra:
        return extra[json_name]
    return getattr(codon, json_name, None)


def checkpoint_patterns_through(
    plan: Sequence[ExecutionCodonEntry], codon_id: str, include_self: bool
) -> list[str]:
    """The ``checkpointedFiles`` patterns in force when ``codon_id`` runs or is rolled back to.

    The union, in plan order and without repeats, of the patterns of every entry before
    ``codon_id``, plus its own when ``include_self``. Loop codons count like any other entry.
    """
    index = entry_index(plan, codon_id)
    return _patterns_in_force(plan, index + 1 if include_self else index)


class _PatternsInForce:
    """The patterns of plan prefixes, read once per entry while the plan only grows.

    Every codon asks for the union over the plan before it, and a long loop's plan has
    thousands of entries.  A new plan shares the entries of the one before up to where it
    changed (the reducer builds it from slices), so only the entries after that are read.
    """

    def __init__(self) -> None:
        self._plan: Sequence[ExecutionCodonEntry] = []
        self._read = 0  # entries of ``_plan`` read so far
        self._firsts: list[tuple[int, str]] = []  # (position, pattern) where each first shows
        self._seen: set[str] = set()

    def __call__(self, plan: Sequence[ExecutionCodonEntry], stop: int) -> list[str]:
        if plan is not self._plan:
            same = list(map(operator.is_, self._plan, plan))
            kept = min(same.index(False) if False in same else len(same), self._read)
            self._firsts = [(at, pattern) for at, pattern in self._firsts if at < kept]
            self._seen = {pattern for _, pattern in self._firsts}
            self._plan, self._read = plan, kept
        for position in range(self._read, min(stop, len(plan))):
            for pattern in _plan_field(plan[position].codon, "checkpointedFiles") or ():
                if isinstance(pattern, str) and pattern not in self._seen:
                    self._seen.add(pattern)
                    self._firsts.append((position, pattern))
        self._read = max(self._read, min(stop, len(plan)))
        return [pattern for at, pattern in self._firsts if at < stop]


_patterns_in_force = _PatternsInForce()


def is_context_exceeded_acceptable(hank: HankFile, entry: ExecutionCodonEntry) -> bool:
    """Whether running out of context ends this codon as ``completed`` rather than ``failed``.

    True for a codon with ``exhaustWithPrompt`` (top-level or, unlike 0.10.0, inside a loop) and
    for any codon of a loop with ``terminateOn: contextExceeded``.
    """
    context = entry.loop_context
    if context is not None:
        loop = loop_of(hank, context.loop_id)
        if loop is not None and loop.terminate_on.type == "contextExceeded":
            return True
    config = codon_config_for(hank, entry)
    return config is not None and config.exhaust_with_prompt is not None


def expected_codon_ids(hank: HankFile) -> list[str]:
    """Every runtime codon id a complete run of ``hank`` can have, as far as it is knowable.

    Loops ending at an iteration limit contribute every iteration; loops ending on context
    exhaustion only their first (how many follow depends on the agent).
    """
    ids: list[str] = []
    for item in hank.hank:
        if isinstance(item, Loop):
            limit = item.terminate_on.limit if isinstance(item.terminate_on, IterationLimit) \
                else 1
            ids += [runtime_codon_id(c.id, i) for i in range(limit) for c in item.codons]
        else:
            ids.append(item.id)
    return ids
