"""Semantic validation of a hank: the rules that look across codons, loops and files.

The schema (:mod:`hankweave.config.hank`) checks each object on its own and the reference
preflight (:mod:`hankweave.config.refs`) checks file references. What is left is here, in the
order of Hankweave 0.10.0's `validateHank` (docs/behaviour.md §1.11 steps 4-7, docs/behaviour.md §1.6, docs/behaviour.md §1.4, docs/behaviour.md §1.8):

* ids unique across codons, loops and loop codons (one set); duplicate names are a warning;
* loop rules: `contextExceeded` loops need continuing codons, continuing codons keep the model,
  loop codons should tolerate failures;
* runtime ids after loop expansion must not collide (`review#0` next to a loop codon `review`),
  and neither may the codon log names derived from them (`#` becomes `-`). 0.10.0 found the first
  only when the run started and never found the second;
* prompt files that are empty or larger than 1 MiB, rig operations, continuation rules;
* budget warnings W1-W10 (W6 only when the caller can tell which models have pricing).

Model resolution and harness self-tests are not done here; callers pass `model_key` so that
"same model" means the resolved model rather than the spelling.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hankweave.config.errors import HankIssue, PathSegment, format_path
from hankweave.config.hank import (
    Codon,
    CodonSite,
    ContainerBudget,
    ContextExceeded,
    HankFile,
    IterationLimit,
    Loop,
    RigCommand,
    RigCopy,
    forbidden_ref_spelling,
)
from hankweave.config.refs import codon_refs, ref_policy_problem
from hankweave.config.settings import BudgetSettings

PROMPT_FILE_WARN_BYTES = 1024 * 1024
"""Prompt files larger than this get a warning."""

_SHARE_TOLERANCE = 1e-9

# Commands that deserve a second look (0.10.0's list), matched as whole commands or arguments
# rather than anywhere in the text, so `rm -rf /tmp/x` or `clang-format x` do not trip them.
_DANGEROUS_COMMANDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("rm -rf /", re.compile(r"\brm\s+-rf\s+/(?:\*|\s|$|;|&|\|)")),
    ("rm -rf ~", re.compile(r"\brm\s+-rf\s+~(?:/?\*?)(?:\s|$|;|&|\|)")),
    ("> /dev/sda", re.compile(r">\s*/dev/sda")),
    ("format ", re.compile(r"(?:^|[;&|]\s*)format\s", re.IGNORECASE)),
    ("del /s /q c:", re.compile(r"\bdel\s+/s\s+/q\s+c:", re.IGNORECASE)),
)


@dataclass
class SemanticReport:
    """The outcome of semantic validation: fatal errors at JSON paths, and warnings."""

    errors: list[HankIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Each warning starts with the JSON path it concerns."""

    @property
    def ok(self) -> bool:
        """Whether the hank may run (warnings never block a run)."""
        return not self.errors


ModelKey = Callable[[Codon], str]
"""Maps a codon to the identity of its model (the resolved model id, by default the spelling)."""


def validate_hank_semantics(
    hank: HankFile,
    hank_dir: Path,
    *,
    pricing_known: Callable[[Codon], bool] | None = None,
    model_key: ModelKey | None = None,
    agent_root: Path | None = None,
    budget: BudgetSettings | ContainerBudget | None = None,
) -> SemanticReport:
    """Check the cross-cutting rules of `hank` (whose refs already passed the preflight).

    Args:
        hank: the hank, with any global model override already applied.
        hank_dir: the directory refs resolve from; prompt files are read to check their size.
        pricing_known: tells whether a codon's model has pricing; enables budget warning W6.
        model_key: the identity of a codon's model, for the "same model" continuation rules.
            Defaults to the `model` string as written.
        agent_root: the execution's `agentRoot`, when known, to warn about rig copies that
            would replace existing files.
        budget: the run-wide budget after settings resolution; defaults to the hank's
            `overrides.budget`.
    """
    key = model_key or (lambda codon: codon.model)
    root_budget = (
        budget if budget is not None else (hank.overrides.budget if hank.overrides else None)
    )
    report = SemanticReport()
    _check_ids(hank, report)
    _check_names(hank, report)
    for index, item in enumerate(hank.hank):
        if isinstance(item, Loop):
            _check_loop(item, ("hank", index), key, report)
    for site in hank.codon_sites():
        _check_prompt_files(site.codon, site.at, Path(os.path.abspath(hank_dir)), report)
        _check_rig(site.codon, site.at, agent_root, report)
    _check_continuations(hank, key, report)
    _check_runtime_ids(hank, report)
    if not any(True for _ in hank.codon_sites()):
        report.errors.append(HankIssue("hank", "At least one codon required"))
    _check_budgets(hank, root_budget, pricing_known, report)
    return report


def _warn(report: SemanticReport, at: Sequence[PathSegment], message: str) -> None:
    report.warnings.append(f"{format_path(at)}: {message}")


def _error(report: SemanticReport, at: Sequence[PathSegment], message: str) -> None:
    report.errors.append(HankIssue(format_path(at), message))


# --------------------------------------------------------------------------------------------
# Ids and names
# --------------------------------------------------------------------------------------------


def _check_ids(hank: HankFile, report: SemanticReport) -> None:
    """One set of ids across top-level codons, loops and loop codons (docs/behaviour.md §1.9)."""
    seen: dict[str, str] = {}

    def claim(item_id: str, at: tuple[PathSegment, ...], what: str) -> None:
        if item_id in seen:
            _error(
                report,
                (*at, "id"),
                f'Duplicate {what} ID "{item_id}" (already used at {seen[item_id]}). '
                "Ids must be unique across all codons and loops.",
            )
        else:
            seen[item_id] = format_path(at)

    for index, item in enumerate(hank.hank):
        if isinstance(item, Loop):
            claim(item.id, ("hank", index), "loop")
            within: set[str] = set()
            for position, codon in enumerate(item.codons):
                at = ("hank", index, "codons", position)
                if codon.id in within:
                    _error(report, (*at, "id"), f'Duplicate codon ID "{codon.id}" within loop')
                else:
                    claim(codon.id, at, "codon")
                within.add(codon.id)
        else:
            claim(item.id, ("hank", index), "codon")


def _check_names(hank: HankFile, report: SemanticReport) -> None:
    where: dict[str, list[str]] = {}
    for index, item in enumerate(hank.hank):
        where.setdefault(item.name, []).append(format_path(("hank", index)))
        if isinstance(item, Loop):
            for position, codon in enumerate(item.codons):
                where.setdefault(codon.name, []).append(
                    format_path(("hank", index, "codons", position))
                )
    for name, paths in where.items():
        if len(paths) > 1:
            report.warnings.append(
                f'{paths[0]}: Duplicate name "{name}" (also used at {", ".join(paths[1:])}); '
                "unique names are easier to tell apart in the UI and logs"
            )


# --------------------------------------------------------------------------------------------
# Loops (docs/behaviour.md §1.6)
# --------------------------------------------------------------------------------------------


def _check_loop(
    loop: Loop, at: tuple[PathSegment, ...], key: ModelKey, report: SemanticReport
) -> None:
    for position, codon in enumerate(loop.codons):
        codon_at = (*at, "codons", position)
        if isinstance(loop.terminate_on, ContextExceeded) and codon.continuation_mode == "fresh":
            _error(
                report,
                (*codon_at, "continuationMode"),
                f'Loop "{loop.id}" ends on contextExceeded, but codon "{codon.id}" starts a fresh '
                "session in every iteration, so the context never fills up and the loop would "
                'never end. Fix: use continuationMode "continue-previous", or end the loop on an '
                "iterationLimit.",
            )
        if position > 0 and codon.continuation_mode == "continue-previous":
            previous = loop.codons[position - 1]
            if key(codon) != key(previous):
                _error(
                    report,
                    (*codon_at, "model"),
                    _model_mismatch(codon, previous),
                )
        for op_index, op in enumerate(codon.rig_setup or []):
            if not op.allow_failure:
                _warn(
                    report,
                    (*codon_at, "rigSetup", op_index),
                    f'rig operation of loop codon "{codon.id}" has no allowFailure: true; it runs '
                    "again in every iteration, and one failure fails the codon",
                )
        if codon.on_failure in (None, "abort"):
            policy = "unset" if codon.on_failure is None else '"abort"'
            _warn(
                report,
                codon_at,
                f'loop codon "{codon.id}" has onFailure {policy}; a single transient failure will '
                'halt the entire loop run. Consider "retry" or "ignore".',
            )


def _model_mismatch(codon: Codon, previous: Codon) -> str:
    return (
        f'Different models cannot share the same session ID: codon "{codon.id}" '
        f'(model "{codon.model}") continues codon "{previous.id}" (model "{previous.model}"). '
        'Fix: use the same model, or set continuationMode to "fresh".'
    )


# --------------------------------------------------------------------------------------------
# Prompt files and rig operations (docs/behaviour.md §1.4)
# --------------------------------------------------------------------------------------------


def _check_prompt_files(
    codon: Codon, at: tuple[PathSegment, ...], hank_dir: Path, report: SemanticReport
) -> None:
    for site in codon_refs(codon, at):
        # Only files the preflight accepts are ever read.
        if site.kind != "prompt" or ref_policy_problem(site, hank_dir) is not None:
            continue
        path = site.resolve(hank_dir)
        try:
            info = os.stat(path)
            if not stat.S_ISREG(info.st_mode):
                continue
            if info.st_size > PROMPT_FILE_WARN_BYTES:
                _warn(
                    report,
                    site.at,
                    f'prompt file "{site.raw}" is {info.st_size / (1024 * 1024):.1f} MiB (larger '
                    "than 1 MiB); a prompt that large may not fit the model's context",
                )
            elif not path.read_bytes().strip():
                _warn(report, site.at, f'prompt file "{site.raw}" is empty')
        except OSError:
            # Missing or unreadable files are reported by the existence pass.
            continue


def _target_escapes(target: str) -> bool:
    if target.startswith("/") or forbidden_ref_spelling(target) is not None:
        return True
    normalized = posixpath.normpath(target)
    return normalized == ".." or normalized.startswith("../")


def _check_rig(
    codon: Codon,
    at: tuple[PathSegment, ...],
    agent_root: Path | None,
    report: SemanticReport,
) -> None:
    for position, op in enumerate(codon.rig_setup or []):
        op_at = (*at, "rigSetup", position)
        if isinstance(op, RigCopy):
            target = op.copy_.to
            if _target_escapes(target):
                _error(
                    report,
                    (*op_at, "copy", "to"),
                    f'Invalid target path "{target}": copy targets are relative to agentRoot and '
                    "must stay inside it",
                )
            elif agent_root is not None and os.path.lexists(agent_root / target):
                _warn(
                    report,
                    (*op_at, "copy", "to"),
                    f'copy target "{target}" already exists in agentRoot and will be replaced',
                )
        elif isinstance(op, RigCommand):
            run = op.command.run
            if not run.strip():
                _error(report, (*op_at, "command", "run"), "Empty command")
                continue
            for label, pattern in _DANGEROUS_COMMANDS:
                if pattern.search(run):
                    _warn(
                        report,
                        (*op_at, "command", "run"),
                        f'Potentially dangerous command ("{label}"): {run}',
                    )
                    break


# --------------------------------------------------------------------------------------------
# Continuation rules for top-level codons (docs/behaviour.md §1.11 steps 5 and 6)
# --------------------------------------------------------------------------------------------


def _check_continuations(hank: HankFile, key: ModelKey, report: SemanticReport) -> None:
    previous: Codon | Loop | None = None
    for index, item in enumerate(hank.hank):
        if isinstance(item, Codon) and item.continuation_mode == "continue-previous":
            at: tuple[PathSegment, ...] = ("hank", index, "continuationMode")
            if previous is None:
                _warn(
                    report,
                    at,
                    f'the first codon "{item.id}" uses continue-previous, but there is no '
                    "previous session to continue, so it fails when it starts",
                )
            else:
                _check_continuation(item, previous, at, key, report)
        if (
            isinstance(previous, Codon)
            and previous.on_failure == "ignore"
            and isinstance(item, Codon)
            and item.continuation_mode == "continue-previous"
        ):
            _warn(
                report,
                ("hank", index),
                f'codon "{item.id}" continues codon "{previous.id}", whose onFailure is "ignore"; '
                "if that codon fails there may be no session to continue",
            )
        previous = item


def _check_continuation(
    codon: Codon,
    previous: Codon | Loop,
    at: tuple[PathSegment, ...],
    key: ModelKey,
    report: SemanticReport,
) -> None:
    if isinstance(previous, Loop):
        if isinstance(previous.terminate_on, ContextExceeded):
            _error(
                report,
                at,
                f'codon "{codon.id}" cannot continue the session of loop "{previous.id}": the '
                'loop ends when its context is exhausted. Fix: set continuationMode to "fresh".',
            )
        source = previous.codons[-1]
    else:
        source = previous
    if source.exhaust_with_prompt is not None:
        _error(
            report,
            at,
            f'codon "{codon.id}" cannot continue codon "{source.id}", which uses exhaustWithPrompt '
            'and ends with an exhausted context. Fix: set continuationMode to "fresh".',
        )
    if key(codon) != key(source):
        _error(report, at, _model_mismatch(codon, source))
    if not source.checkpointed_files:
        _warn(
            report,
            at,
            f'codon "{codon.id}" continues codon "{source.id}", which checkpoints no files '
            "(checkpointedFiles); file changes of that session are not tracked",
        )


# --------------------------------------------------------------------------------------------
# Runtime ids after loop expansion (docs/behaviour.md §1.9)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LoopCodon:
    id: str
    path: str
    limit: int | None
    """Iterations the loop runs at most; None for contextExceeded (unbounded)."""


def _iteration(pattern: str, text: str, limit: int | None) -> int | None:
    match = re.fullmatch(re.escape(pattern) + r"(0|[1-9][0-9]*)", text)
    if match is None:
        return None
    n = int(match.group(1))
    return n if limit is None or n < limit else None


def _check_runtime_ids(hank: HankFile, report: SemanticReport) -> None:
    top: list[tuple[str, str]] = []
    looped: list[_LoopCodon] = []
    for index, item in enumerate(hank.hank):
        if isinstance(item, Loop):
            limit = (
                item.terminate_on.limit if isinstance(item.terminate_on, IterationLimit) else None
            )
            for position, codon in enumerate(item.codons):
                looped.append(
                    _LoopCodon(codon.id, format_path(("hank", index, "codons", position)), limit)
                )
        else:
            top.append((item.id, format_path(("hank", index))))

    for codon_id, path in top:
        for loop_codon in looped:
            n = _iteration(loop_codon.id + "#", codon_id, loop_codon.limit)
            if n is not None:
                report.errors.append(
                    HankIssue(
                        f"{path}.id",
                        f'Codon ID "{codon_id}" is also the runtime id of iteration {n} of loop '
                        f'codon "{loop_codon.id}" ({loop_codon.path}) after loop expansion. '
                        "Fix: rename one of them.",
                    )
                )
                continue
            n = _iteration(_log_stem(loop_codon.id) + "-", _log_stem(codon_id), loop_codon.limit)
            if n is not None:
                report.errors.append(
                    HankIssue(
                        f"{path}.id",
                        _log_clash(codon_id, f"{loop_codon.id}#{n}", _log_stem(codon_id)),
                    )
                )

    stems: dict[str, tuple[str, str]] = {}
    for codon_id, path in top:
        first = stems.setdefault(_log_stem(codon_id), (codon_id, path))
        if first[0] != codon_id:
            report.errors.append(
                HankIssue(f"{path}.id", _log_clash(codon_id, first[0], _log_stem(codon_id)))
            )
    loop_stems: dict[str, _LoopCodon] = {}
    for loop_codon in looped:
        first_loop = loop_stems.setdefault(_log_stem(loop_codon.id), loop_codon)
        if first_loop.id != loop_codon.id:
            report.errors.append(
                HankIssue(
                    f"{loop_codon.path}.id",
                    _log_clash(
                        f"{loop_codon.id}#0", f"{first_loop.id}#0", _log_stem(loop_codon.id) + "-0"
                    ),
                )
            )


def _log_stem(runtime_id: str) -> str:
    return runtime_id.replace("#", "-")


def _log_clash(one: str, other: str, stem: str) -> str:
    return (
        f'Codons "{one}" and "{other}" would write the same log file "{stem}-claude.log" '
        '(log names replace "#" with "-"). Fix: rename one of them.'
    )


# --------------------------------------------------------------------------------------------
# Budget warnings (docs/behaviour.md §1.8)
# --------------------------------------------------------------------------------------------

_Budget = BudgetSettings | ContainerBudget
_Child = tuple[tuple[PathSegment, ...], Codon | Loop, float | None]
"""A pool member: its JSON path, the item, and its own dollar cap."""


def _check_budgets(
    hank: HankFile,
    root: _Budget | None,
    pricing_known: Callable[[Codon], bool] | None,
    report: SemanticReport,
) -> None:
    # Pools first (the hank's, then each loop's), then each codon in file order: the order
    # the warnings are reported in.
    if root is not None:
        children: list[_Child] = [
            (("hank", index), item, _own_dollars(item)) for index, item in enumerate(hank.hank)
        ]
        _check_pool(("overrides", "budget"), "hank budget", root, children, report)
    _check_loop_pools(hank, report)
    for site in hank.codon_sites():
        _warn_unenforceable_budgets(site, root, pricing_known, report)
        _warn_conflicting_budgets(site, root, report)


def _check_loop_pools(hank: HankFile, report: SemanticReport) -> None:
    """Each loop budget against the caps of the codons it pools."""
    for index, item in enumerate(hank.hank):
        if isinstance(item, Loop) and item.budget is not None:
            loop_children: list[_Child] = [
                (("hank", index, "codons", position), codon, _own_dollars(codon))
                for position, codon in enumerate(item.codons)
            ]
            _check_pool(
                ("hank", index, "budget"),
                f'budget of loop "{item.id}"',
                item.budget,
                loop_children,
                report,
            )


def _warn_unenforceable_budgets(
    site: CodonSite,
    root: _Budget | None,
    pricing_known: Callable[[Codon], bool] | None,
    report: SemanticReport,
) -> None:
    """W5 and W6: a budget over a codon that it may not be able to stop as meant."""
    codon, at, loop = site.codon, site.at, site.loop
    loop_budget = loop.budget if loop is not None else None
    # W5: extensions run until the context is exhausted; a time budget may end them first.
    time_limits = [
        b.max_time_seconds
        for b in (codon.budget, loop_budget, root)
        if b is not None and b.max_time_seconds is not None
    ]
    if codon.exhaust_with_prompt is not None and time_limits:
        _warn(
            report,
            at,
            f'codon "{codon.id}" uses exhaustWithPrompt under a time budget of '
            f"{min(time_limits):g}s; extensions continue until the context is exhausted, so "
            "the time budget may end the codon first",
        )
    # W6
    has_dollar_budget = any(
        b is not None and b.max_dollars is not None for b in (codon.budget, loop_budget, root)
    )
    if has_dollar_budget and pricing_known is not None and not pricing_known(codon):
        _warn(
            report,
            at,
            f'a dollar budget applies to codon "{codon.id}", but model "{codon.model}" has no '
            "pricing, so its spending counts as $0 and the budget cannot stop it",
        )


def _warn_conflicting_budgets(
    site: CodonSite, root: _Budget | None, report: SemanticReport
) -> None:
    """W8 and W10: a codon's budget settings that another setting overrides."""
    codon, at, loop = site.codon, site.at, site.loop
    own = codon.budget
    loop_budget = loop.budget if loop is not None else None
    # W8
    policy = _effective_on_exceeded(codon, loop, root)
    if policy == "fail" and codon.on_failure == "retry":
        _warn(
            report,
            at,
            f'codon "{codon.id}" has budget onExceeded "fail" and onFailure "retry"; a budget '
            "failure is not retried, so the run stops instead",
        )
    # W10
    if (
        own is not None
        and own.max_time_seconds is not None
        and loop_budget is not None
        and loop_budget.max_time_seconds is not None
        and own.max_time_seconds > loop_budget.max_time_seconds
    ):
        _warn(
            report,
            (*at, "budget", "maxTimeSeconds"),
            f"maxTimeSeconds {own.max_time_seconds:g} exceeds the loop's maxTimeSeconds "
            f"{loop_budget.max_time_seconds:g}; the loop's limit applies first",
        )


def _own_dollars(item: Codon | Loop) -> float | None:
    return item.budget.max_dollars if item.budget is not None else None


def _effective_on_exceeded(codon: Codon, loop: Loop | None, root: _Budget | None) -> str:
    """codon -> container -> "complete" (docs/behaviour.md §3.9); a loop codon's container chain ends at the hank."""
    for budget in (codon.budget, loop.budget if loop else None, root):
        if budget is not None and budget.on_exceeded is not None:
            return budget.on_exceeded
    return "complete"


def _item_on_exceeded(item: Codon | Loop, pool: _Budget) -> str | None:
    own = item.budget.on_exceeded if item.budget is not None else None
    return own if own is not None else pool.on_exceeded


def _check_pool(
    at: tuple[PathSegment, ...],
    label: str,
    pool: _Budget,
    children: list[_Child],
    report: SemanticReport,
) -> None:
    ceiling = pool.max_dollars
    shares = pool.shares or {}
    if pool.allocation == "shared":
        # W9: in a first-come pool, a fail-policy item after others may find the pool spent.
        if ceiling is None and pool.max_time_seconds is None:
            return
        for position, (child_at, item, _cap) in enumerate(children):
            if position > 0 and _item_on_exceeded(item, pool) == "fail":
                _warn(
                    report,
                    child_at,
                    f'"{item.id}" has onExceeded "fail" in the shared {label} but is not its '
                    "first item; earlier items may spend the pool, and it then fails as soon "
                    "as it starts",
                )
        return
    if ceiling is None:
        return
    # W1/W2 (hank) and W4a (loop): a cap above the share can never be reached.
    for child_at, item, cap in children:
        share = shares.get(item.id)
        if share is not None and cap is not None and cap > share * ceiling + _SHARE_TOLERANCE:
            _warn(
                report,
                (*child_at, "budget", "maxDollars"),
                f"maxDollars ${cap:.2f} exceeds the share of the {label} "
                f"({share:.0%} of ${ceiling:.2f} = ${share * ceiling:.2f}). The cap will never be "
                "reached.",
            )
    total = sum(shares.values())
    unfunded = [
        (child_at, item)
        for child_at, item, cap in children
        if item.id not in shares and cap is None
    ]
    if total < 1.0 - _SHARE_TOLERANCE and not unfunded:
        # W3 (hank) / W4b (loop)
        _warn(
            report,
            (*at, "shares"),
            f"shares sum to {total:.0%} and every item has a share or its own cap, so the "
            f"remaining {1 - total:.0%} of ${ceiling:.2f} is never allocated",
        )
    if abs(total - 1.0) <= _SHARE_TOLERANCE:
        # W7
        for child_at, item in unfunded:
            _warn(
                report,
                child_at,
                f'"{item.id}" has neither a share nor its own budget.maxDollars while the '
                f"shares of the {label} total 100%, so it would start with a $0 budget and "
                "immediately exceed it",
            )
