"""Load-time validation of a state: what is wrong with it, without changing it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hankweave.state.types import HankweaveState, is_live_run, is_terminal_status

IssueType = Literal["corrupted_data", "missing_run", "orphaned_folder", "invalid_codon"]


@dataclass(frozen=True)
class ValidationIssue:
    severity: Literal["error", "warning"]
    type: IssueType
    message: str


def validate_state(state: HankweaveState, hankweave_dir: Path | None = None) -> list[ValidationIssue]:
    """Check a loaded state's invariants.

    ``corrupted_data`` (a file that does not parse) is reported by the loader; this checks the
    invariants of a state that parsed: ``currentRunId`` names an existing run, at most one run is
    running, at most one codon per run is not finished, and (as a warning) every run folder on
    disk belongs to a run.
    """
    issues: list[ValidationIssue] = []
    run_ids = {run.run_id for run in state.runs}
    if state.current_run_id is not None and state.current_run_id not in run_ids:
        issues.append(
            ValidationIssue(
                "error", "missing_run", f"currentRunId {state.current_run_id!r} is not in runs"
            )
        )
    running = [run.run_id for run in state.runs if is_live_run(run.status)]
    if len(running) > 1:
        issues.append(
            ValidationIssue("error", "invalid_codon", f"several runs are running: {running}")
        )
    for run in state.runs:
        open_codons = [c.codon_id for c in run.codons if not is_terminal_status(c.status)]
        if len(open_codons) > 1:
            issues.append(
                ValidationIssue(
                    "error",
                    "invalid_codon",
                    f"run {run.run_id!r} has {len(open_codons)} unfinished codons: {open_codons}",
                )
            )
    if hankweave_dir is not None:
        runs_dir = Path(hankweave_dir) / "runs"
        if runs_dir.is_dir():
            for folder in sorted(runs_dir.iterdir()):
                if folder.is_dir() and folder.name not in run_ids:
                    issues.append(
                        ValidationIssue(
                            "warning",
                            "orphaned_folder",
                            f"run folder runs/{folder.name} has no run in the state",
                        )
                    )
    return issues
