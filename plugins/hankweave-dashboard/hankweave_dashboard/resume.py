"""What goes on with an execution a link answered while no runtime ran it.

With an executor plugin that queues runs (``hankweave submit``, from the Celery executor), its
resume is queued on the workers, as ``hankweave answer --submit`` does; without one, or when
queuing fails, the page gives the command that resumes it, ``hankweave run -e DIR``, to paste.
The dashboard finds ``submit`` as ``answer --submit`` does, among the commands of the
``hankweave`` it runs in (:meth:`Resumer.of`), and runs it as that command, in a child process:
its output and its broker connections stay out of the server.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from hankweave_dashboard.catalog import run_command

SUBMIT_TIMEOUT_S = 120.0
"""How long queuing may take (it prepares the execution as ``hankweave run`` would)."""


@dataclass(frozen=True)
class Resume:
    queued: bool
    """Queued on an executor's workers (else ``command`` is for the person to run)."""
    command: str
    """The command that queued the resume, or the one that resumes it."""
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"queued": self.queued, "command": self.command, "message": self.message}


@dataclass(frozen=True)
class Resumer:
    submit: Sequence[str] | None = None
    """The executor's ``submit`` command line (``-e DIR`` is added); None: no executor."""

    @classmethod
    def of(cls, ctx: click.Context) -> Resumer:
        """The resumer of the ``hankweave`` that ``ctx`` runs in: with its executor's
        ``submit`` when a plugin adds one."""
        root = ctx.find_root().command
        found = root.get_command(ctx, "submit") if isinstance(root, click.Group) else None
        return cls([sys.executable, "-m", "hankweave", "submit"] if found else None)

    def resume(self, path: Path) -> Resume:
        """Queue the resume of the execution in ``path``, or say how to resume it."""
        paste = run_command(path)
        if self.submit is None:
            return Resume(False, paste, f"Nothing runs it now: resume it with {paste}")
        try:
            done = subprocess.run([*self.submit, "-e", str(path)], capture_output=True,
                                  text=True, stdin=subprocess.DEVNULL,
                                  timeout=SUBMIT_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            problem = f"`hankweave submit` did not finish within {SUBMIT_TIMEOUT_S:g} s"
        except OSError as exc:
            problem = f"`hankweave submit` could not start: {exc.strerror or exc}"
        else:
            if done.returncode == 0:
                queued = f"hankweave submit -e {shlex.quote(str(path))}"
                return Resume(True, queued, f"Its resume is queued on the workers ({queued});"
                                            " `hankweave status` follows it.")
            problem = _why(done.stderr) or f"`hankweave submit` exited with {done.returncode}"
        return Resume(False, paste, f"Its resume could not be queued ({problem}): resume it"
                                    f" with {paste}")


def _why(stderr: str) -> str:
    """The error ``hankweave submit`` printed (``Error: …``), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error: ")]
    found = errors[-1] if errors else (lines[-1] if lines else "")
    return found[:500]
