"""``.hankweave/`` is private whatever the umask (issue 34 item 8): state, journal and codon logs
hold codon ``env`` values and agent output, so every directory the runtime makes there is 0700
and every file it writes 0600, while ``agentRoot`` keeps the user's umask (agents read and
write it as the user's own files).

A real ``hankweave run`` under umask 0o022 (set in the child before it execs).  One exception
is documented in docs/state.md ("File modes"): inside ``.hankweave/checkpoints/`` the shadow
git repository's own files are git's (``.hankweave/`` and ``checkpoints/`` themselves are 0700,
so nobody else reaches them)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.support import Project, codon, needs

UMASK = 0o022
SECRET = "db-password-1234"
GIT_OWNED = ".hankweave/checkpoints/"


def run_under_umask(project: Project, *extra: str) -> subprocess.CompletedProcess[str]:
    def set_umask() -> None:
        os.umask(UMASK)

    return subprocess.run(
        [sys.executable, "-m", "hankweave", "run", str(project.hank_dir), str(project.data),
         "-e", str(project.exec_dir), "--headless", *extra],
        cwd=project.root, env=project.env, text=True, capture_output=True, timeout=120,
        stdin=subprocess.DEVNULL, preexec_fn=set_umask)


def modes(root: Path) -> dict[str, int]:
    """Every directory and regular file under ``root/.hankweave`` (and it): path -> mode bits."""
    found: dict[str, int] = {}
    top = root / ".hankweave"
    for path in [top, *top.rglob("*")]:
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
            found[path.relative_to(root).as_posix() + ("/" if path.is_dir() else "")] = \
                stat.S_IMODE(info.st_mode)
    return found


def wide(found: dict[str, int]) -> list[str]:
    """What the runtime made readable by others: directories not 0700, files not 0600."""
    return sorted(f"{path} {mode:o}" for path, mode in found.items()
                  if not path.startswith(GIT_OWNED + ".")  # git's repository, inside a 0700 dir
                  and mode != (0o700 if path.endswith("/") else 0o600))


def busy_project(project: Project) -> None:
    project.write_hank([codon("first", env={"DB_PASSWORD": SECRET}),
                        codon("second")])
    project.write_script({"first": {"messages": 3, "writeFiles": {"out.md": "hello"}},
                          "second": {"messages": 2, "process": True}})


@pytest.mark.parametrize("backend", ["git", "snapshot"])
def test_everything_under_hankweave_is_private_whatever_the_umask(project: Project,
                                                                 backend: str) -> None:
    needs(backend)
    project.env["HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND"] = backend
    busy_project(project)
    done = run_under_umask(project)
    assert done.returncode == 0, done.stderr
    found = modes(project.exec_dir)
    # The runtime wrote what the issue names: state, journal, codon logs, server log, lock.
    names = " ".join(found)
    for wrote in ("state.json", "events/events.jsonl", "-claude.log", "logs/server.log",
                  "execution-meta.json", "run-intent.json"):
        assert wrote in names, (wrote, sorted(found))
    assert wide(found) == []
    assert found[".hankweave/"] == 0o700 and found[GIT_OWNED] == 0o700


def test_agent_root_keeps_the_umasks_modes(project: Project) -> None:
    busy_project(project)
    done = run_under_umask(project)
    assert done.returncode == 0, done.stderr
    agent_root = project.exec_dir / "agentRoot"
    assert stat.S_IMODE(agent_root.stat().st_mode) == 0o777 & ~UMASK
    written = agent_root / "out.md"
    assert written.read_text() == "hello"
    assert stat.S_IMODE(written.stat().st_mode) == 0o666 & ~UMASK


def test_an_older_execution_is_made_private_when_it_is_resumed(project: Project) -> None:
    busy_project(project)
    assert run_under_umask(project).returncode == 0
    hankweave = project.exec_dir / ".hankweave"
    for path in [hankweave, *hankweave.rglob("*")]:  # as an older hankweave left it
        if not path.is_symlink() and not str(path).startswith(str(hankweave / "checkpoints")):
            path.chmod(0o755 if path.is_dir() else 0o644)
    done = run_under_umask(project)  # every codon has run: it only opens the execution
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(hankweave.stat().st_mode) == 0o700
    assert stat.S_IMODE((hankweave / "state.json").stat().st_mode) == 0o600
