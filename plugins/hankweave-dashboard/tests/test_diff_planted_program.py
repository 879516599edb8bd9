"""The "files changed" request runs no program planted in the checkpoint repository (issue 34
item 2): the request needs no key, and computing a diff opens the execution's git store."""

from __future__ import annotations

from pathlib import Path

import httpx
from dashboard_helpers import Project, dashboard


def test_a_codon_diff_runs_no_program_planted_in_the_checkpoint_repository(
        project: Project, finished: Path, tmp_path: Path) -> None:
    marker = tmp_path / "planted-program-ran"
    program = tmp_path / "evil.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> "{marker}"\ncat\n')
    program.chmod(0o755)
    # What an agent's bash call in agentRoot would have written.
    git_dir = finished / ".hankweave" / "checkpoints" / ".hankweavecheckpoints"
    with (git_dir / "config").open("a") as fh:
        fh.write(f'[core]\n\tfsmonitor = {program}\n'
                 f'[filter "x"]\n\tclean = {program} clean\n\tsmudge = {program} smudge\n')
    with (git_dir / "info" / "attributes").open("a") as fh:
        fh.write("* filter=x\n")

    with dashboard(project) as served:
        rows = httpx.get(served.api("/api/executions"), timeout=30).json()["executions"]
        ident = next(row["id"] for row in rows if row["name"] == "finished")
        page = httpx.get(served.api(f"/api/executions/{ident}"), timeout=30).json()
        run_id = page["plan"][1]["runId"]
        response = httpx.get(
            served.api(f"/api/executions/{ident}/runs/{run_id}/codons/edit/diff"), timeout=30)

    assert response.status_code == 200, response.text
    (changed,) = response.json()["files"]
    assert changed["path"] == "notes.md" and "+second line" in changed["diff"]
    assert not marker.exists(), marker.read_text()
