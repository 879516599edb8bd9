"""A full disk, and an execution directory that turns read-only, in the middle of a run.

Either stops the run with one clear paragraph (what failed, where, what to do; no traceback)
and exit 1, and leaves a state the next run, with the disk writable again, resumes to the end
an uninterrupted run reaches.

The full disk is injected (``HANKWEAVE_TEST_DISK_FAULT``, docs/crash-testing.md): from the
chosen moment on, every write the kernel makes fails with ENOSPC, as on a full disk, without
mounting a small file system.  The read-only directory is real: ``chmod -R a-w`` while the run
goes on.  Root ignores permission bits, so as root the run is started without the capabilities
that let it (``setpriv``); where setpriv is missing, the kernel's writes fail with EROFS
instead (injected), the error a read-only file system gives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.crash.crash_hank import (
    CrashProject,
    Ending,
    Progress,
    check_after_kill,
    check_finished,
)

FULL_DISK_AT = {
    "setting-up-the-execution": "ENOSPC:disk.write@1",
    "between-agent-messages": "ENOSPC:harness.message@20",
    "checkpoint-commit": "ENOSPC:checkpoint.commit@3",
    "state-fold": "ENOSPC:state.fold@1",
    "output-copy": "ENOSPC:outputs.copy@1",
}
# The git backend writes through git, which the injected fault does not reach; the snapshot
# backend writes through the kernel, so its commit is tried with the fault too.
CASES = [*(("git", moment) for moment in sorted(FULL_DISK_AT)),
         ("snapshot", "checkpoint-commit")]
# Without the capabilities that let root write where permission bits say no.
WITHOUT_ROOT_OVERRIDE = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")


def assert_clear_storage_error(project: CrashProject, ending: Ending, *phrases: str) -> None:
    assert ending.returncode == 1, (ending.returncode, ending.stderr[-2000:])
    assert "Traceback" not in ending.stderr
    errors = [line for line in ending.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, ending.stderr[-2000:]
    for phrase in (*phrases, str(project.exec_dir), f"hankweave run -e {project.exec_dir}"):
        assert phrase in errors[0], errors[0]


@pytest.mark.parametrize(("backend", "moment"), CASES, indirect=["backend"])
def test_a_full_disk_stops_the_run_clearly_and_the_next_run_resumes(project, reference, moment):
    ending = project.run(disk_fault=FULL_DISK_AT[moment])
    assert_clear_storage_error(project, ending, "No space left on device", "Free some disk space")
    progress = check_after_kill(project, Progress())
    project.run_to_completion()
    check_after_kill(project, progress)
    check_finished(project, reference.trees)


@pytest.mark.parametrize("backend", ["git"], indirect=True)
def test_a_read_only_execution_directory_stops_the_run_clearly_and_the_next_run_resumes(
        project, reference):
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        ending = project.run(disk_fault="EROFS:harness.message@20")
        phrases = ("Read-only file system", "Make the file system writable")
    else:
        prefix = WITHOUT_ROOT_OVERRIDE if os.geteuid() == 0 else ()
        began = time.monotonic()
        child = project.start(prefix=prefix)
        wait_until_running(project, "write", child)
        subprocess.run(["chmod", "-R", "a-w", str(project.exec_dir)], check=True)
        try:
            ending = project.wait(child, began)
        finally:
            subprocess.run(["chmod", "-R", "u+w", str(project.exec_dir)], check=True)
        phrases = ("Permission denied", "Make the execution directory writable")
    assert_clear_storage_error(project, ending, *phrases)
    progress = check_after_kill(project, Progress())
    project.run_to_completion()
    check_after_kill(project, progress)
    check_finished(project, reference.trees)


def wait_until_running(project: CrashProject, codon_id: str,
                       child: subprocess.Popen[str]) -> None:
    """Until the run has started ``codon_id`` (its record exists)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and child.poll() is None:
        if project.hankweave_dir.exists():
            state = project.state()
            if state.runs and any(c.codon_id == codon_id for c in state.runs[0].codons):
                return
        time.sleep(0.01)
    raise AssertionError(f"the run never started {codon_id} (exit {child.poll()})")
