"""Agent processes: the marker every agent process carries, and ending the ones left behind.

A harness that starts an agent process (the Claude Code CLI) passes it the attempt's
environment, which carries :data:`AGENT_MARKER_ENV` = ``<run id>/<codon id>``.  The process and
everything it starts (the agent's Bash tools, which may run in sessions of their own) inherit
it, so the kernel can find them all after the fact, by marker, from ``/proc``:

* after an attempt, nothing that carries its marker outlives it;
* after ``kill -9`` of the runtime, the next runtime on the execution ends the agents of the
  crashed run before it resumes (the recorded ``claudePid`` is only killed once its marker
  proves it is still that agent, not a process that reused the pid).

Without ``/proc`` (macOS) only processes the harness reported can be ended, and a crashed run's
agent is left alone: a pid alone is not proof of what runs there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from hankweave.fsutil import process_running

log = logging.getLogger(__name__)

AGENT_MARKER_ENV = "HW_AGENT_MARKER"
"""The variable that marks an agent's processes: ``<run id>/<codon id>``.  Not ``HANKWEAVE_``
prefixed, so a hankweave run inside an agent never passes it through to its own agents."""

PROC = Path("/proc")


def agent_marker(run_id: str, codon_id: str) -> str:
    """The marker of one codon's agent in one run."""
    return f"{run_id}/{codon_id}"


def run_marker_prefix(run_id: str) -> str:
    """What every marker of ``run_id``'s agents starts with."""
    return f"{run_id}/"


def marker_of(pid: int) -> str | None:
    """The agent marker in process ``pid``'s environment; None when it has none or it cannot be
    read (gone, another user's, no ``/proc``)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    key = AGENT_MARKER_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key):].decode("utf-8", "replace")
    return None


def marked_processes(marker: str, *, prefix: bool = False) -> list[int]:
    """Every running process (this one excepted) whose marker is ``marker`` (or, with
    ``prefix``, starts with it)."""
    if not PROC.is_dir():
        return []
    me = os.getpid()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        value = marker_of(int(entry.name))
        if value is not None and (value.startswith(marker) if prefix else value == marker):
            found.append(int(entry.name))
    return sorted(found)


def _signal(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def end_processes_now(pids: Iterable[int]) -> list[int]:
    """SIGKILL each of ``pids`` that still runs (never this process); the ones killed."""
    alive = [pid for pid in pids if pid != os.getpid() and process_running(pid)]
    _signal(alive, signal.SIGKILL)
    return alive


async def end_processes(pids: Iterable[int], *, grace_s: float = 3.0) -> list[int]:
    """SIGTERM each of ``pids`` that runs, SIGKILL those still running after ``grace_s``
    (the Claude CLI ends its tools' processes on SIGTERM, not on SIGKILL); the ones ended."""
    alive = [pid for pid in pids if pid != os.getpid() and process_running(pid)]
    _signal(alive, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(process_running(pid) for pid in alive):
        await asyncio.sleep(0.05)
    end_processes_now(alive)
    return alive


async def end_agents_of_crashed_run(run_id: str, recorded_pids: Iterable[int]) -> list[int]:
    """End what a crashed run's agents left running: the recorded agent processes whose marker
    shows they still are that run's agents, and every other process carrying its marker."""
    prefix = run_marker_prefix(run_id)
    proven = [pid for pid in recorded_pids
              if (marker_of(pid) or "").startswith(prefix)]
    pids = sorted({*proven, *marked_processes(prefix, prefix=True)})
    if not pids:
        return []
    ended = await end_processes(pids)
    for pid in ended:
        # The run.crashed event names them for the person; this is the server log's record.
        log.info("ended agent process %d left running by crashed run %s", pid, run_id)
    return ended
