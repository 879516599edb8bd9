"""Minimal recorded states: what Hankweave 0.10.0's replay reads, completed so the state model
accepts it.

Hankweave 0.10.0's replay reads only each run's codons, their ``codonId`` and
``claudeLogPath`` (its own fixtures write nothing more), so opening such an execution for
replay fills in the rest here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from hankweave_replay.format import RecordingError
from hankweave_replay.manifest import validation_problems

if TYPE_CHECKING:
    from hankweave.api import HankweaveState

MINIMAL_STATE_TIME = "1970-01-01T00:00:00.000Z"
"""The time given to what a minimal recorded state leaves undated, when its metadata has no
``createdAt`` either."""
NO_CHECKPOINT = "none"
"""The original's ``completionCheckpoint`` placeholder: no checkpoint to restore."""


def read_minimal_state(path: Path, strict_error: str, created_at: Any,
                       ) -> tuple[HankweaveState, list[str]]:
    """The state at ``path`` read as a minimal recorded state (its undated times
    ``created_at``), and notes for the recording's manifest.  ``strict_error`` is the strict
    reader's message, given when the file is not JSON at all."""
    from hankweave.api import HankweaveState

    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
        raise RecordingError(strict_error) from None  # the strict reader's message says why
    if not isinstance(raw, dict):
        raise RecordingError(f"{path}: not a state (the file is not a JSON object)")
    stamp = created_at if isinstance(created_at, str) and created_at else MINIMAL_STATE_TIME
    uncheckpointed = complete_minimal_state(raw, path, stamp)
    try:
        state = HankweaveState.model_validate(raw)
    except ValidationError as exc:
        raise RecordingError(f"{path}: not a state replay can read:"
                             f" {validation_problems(exc, 5)}") from None
    notes = []
    if uncheckpointed:
        notes.append(f"the recorded state has no end-of-codon checkpoint for codon(s)"
                     f" {', '.join(uncheckpointed)} (a minimal recorded state); their logs are"
                     " replayed, their file changes are not")
    return state, notes


def complete_minimal_state(raw: dict[str, Any], path: Path, stamp: str) -> list[str]:
    """Fill in, in place, what the state model requires and a minimal recorded state lacks.

    Completed: a run's ``runId`` (``run-<n>``), ``runFolder`` (``.hankweave/runs/<runId>``),
    ``gitBranch``, ``startingConditions`` (fresh), ``startTime`` and ``serverPid``; a codon's
    ``status`` (completed) and the fields its status requires, with no checkpoint and no
    recorded cost (the replay takes costs from the logs).  Only what replay cannot do without
    is an error: a run with codons, and each codon's ``codonId`` and ``claudeLogPath`` (a
    failed or skipped record without one never started an agent).

    Returns the ids of the codons that ran an agent and have no end-of-codon checkpoint.
    """
    runs = raw.get("runs")
    if not isinstance(runs, list) or not any(
            isinstance(run, dict) and run.get("codons") for run in runs):
        raise RecordingError(f"{path}: no run with codons (runs[].codons): there is nothing to"
                             " replay")
    uncheckpointed: list[str] = []
    for number, run in enumerate(runs, start=1):
        if not isinstance(run, dict):
            raise RecordingError(f"{path}: run {number} is not a JSON object")
        run_id, codons = _complete_minimal_run(run, path, number, stamp)
        for position, record in enumerate(codons, start=1):
            if not isinstance(record, dict):
                raise RecordingError(f"{path}: codon {position} of run {run_id} is not a JSON"
                                     " object")
            if not _complete_minimal_codon(record, path, run_id, position, run["startTime"],
                                           stamp):
                uncheckpointed.append(record["codonId"])
    return list(dict.fromkeys(uncheckpointed))


def _complete_minimal_run(run: dict[str, Any], path: Path, number: int, stamp: str,
                          ) -> tuple[str, list[Any]]:
    """Complete the fields of one run (see :func:`complete_minimal_state`); its id and its
    codon records."""
    from hankweave.api import run_branch

    run_id = run.setdefault("runId", f"run-{number}")
    if not isinstance(run_id, str) or not run_id:
        raise RecordingError(f"{path}: run {number} has an invalid runId ({run_id!r})")
    run.setdefault("runFolder", f".hankweave/runs/{run_id}")
    run.setdefault("gitBranch", run_branch(run_id))
    run.setdefault("startingConditions", {"type": "fresh"})
    run.setdefault("startTime", stamp)
    run.setdefault("serverPid", 0)
    codons = run.setdefault("codons", [])
    if not isinstance(codons, list):
        raise RecordingError(f"{path}: the codons of run {run_id} are not a list")
    return run_id, codons


def _complete_minimal_codon(record: dict[str, Any], path: Path, run_id: str, position: int,
                            start: Any, stamp: str) -> bool:
    """Complete one codon record (see :func:`complete_minimal_state`); False when it ran an
    agent and has no end-of-codon checkpoint (its file changes cannot be replayed)."""
    codon_id = record.get("codonId")
    if not isinstance(codon_id, str) or not codon_id:
        raise RecordingError(f"{path}: codon {position} of run {run_id} has no codonId")
    status = record.setdefault("status", "completed")
    log = record.get("claudeLogPath")
    agent_started = isinstance(log, str) and bool(log)
    if not agent_started and status not in ("failed", "skipped"):
        raise RecordingError(f"{path}: codon {codon_id} (run {run_id}) has no claudeLogPath:"
                             " replay plays each codon's recorded log")
    during = "running" if agent_started else "preparing"
    record.setdefault("startTime", start)
    # The fields each status requires (the state model's), where the record has none.
    required: dict[str, dict[str, Any]] = {
        "completed": {"endTime": stamp, "finalCost": 0.0, "finalTokens": {},
                      "completionCheckpoint": NO_CHECKPOINT},
        "failed": {"endTime": stamp, "failedDuring": during, "exitCode": 1,
                   "failureReason": {"type": "unknown", "retriable": False}},
        "skipped": {"endTime": stamp, "skippedDuring": during},
        "initializing": {"claudePid": 0},
        "running": {"claudePid": 0, "claudeSessionId": ""},
        "completing-sentinels": {"claudePid": 0, "claudeSessionId": ""},
    }
    for key, value in (required.get(status, {}) if isinstance(status, str) else {}).items():
        record.setdefault(key, value)
    checkpoint = {"completed": "completionCheckpoint", "failed": "errorCheckpoint",
                  "skipped": "skipCheckpoint"}.get(status)
    no_checkpoint = checkpoint is not None and record.get(checkpoint) in (None, NO_CHECKPOINT)
    return not (agent_started and no_checkpoint)
