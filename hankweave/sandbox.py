"""An OS sandbox for agent processes: bubblewrap (``bwrap``), one per process it wraps.

Inside, the agent sees the machine read-only, except what it works on:

* writable: the codon's workspace (``agentRoot/``) and the folders its harness names (its temp
  and config folders);
* read-only: the data the workspace links to, and the programs on ``PATH`` and the Python
  environment, even where they live in a hidden folder;
* hidden (an empty, read-only folder in their place): the home directory (``~/.ssh``, ``~/.aws``, every
  credential file), and the folder holding the executions, so neither the execution's own
  ``.hankweave/`` (state, journal, checkpoints) nor another execution can be read or changed;
  ``/tmp`` is a fresh, empty one;
* the network: none (its own empty network namespace) or all.

:func:`bubblewrap_problem` says, once per process, whether bubblewrap works here.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

BWRAP = "bwrap"
_PROBE_TIMEOUT_S = 10.0


@functools.cache
def bubblewrap_problem() -> str | None:
    """Why agents cannot be sandboxed here (None: bubblewrap works).  Tried once per process:
    ``bwrap`` must be on ``PATH`` and able to make its namespaces (a container may forbid
    them)."""
    found = shutil.which(BWRAP)
    if found is None:
        return "bubblewrap (bwrap) is not installed (apt-get install bubblewrap)"
    try:
        done = subprocess.run(
            [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
             "--die-with-parent", "--", "true"], capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap ({found}) does not run: {exc}"
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else \
            f"exit {done.returncode}"
        return f"bubblewrap ({found}) cannot make a sandbox here: {reason}"
    return None


@dataclass(frozen=True)
class Sandbox:
    """What the agent processes of one codon attempt may touch."""

    workspace: Path
    """Writable: the agent's work."""
    hidden: tuple[Path, ...]
    """Replaced by empty folders: the home directory, the executions' folder."""
    readable: tuple[Path, ...] = ()
    """Read-only, even inside a hidden folder: the data."""
    network: bool | None = None
    """Whether the agent may use the network (False: none, not even loopback; None: the
    harness's default, given to :meth:`wrap`)."""

    @classmethod
    def for_execution(cls, execution_dir: Path, workspace: Path, *, data: Path | None,
                      home: Path | None, network: bool | None) -> Sandbox:
        """The sandbox of an execution's agents: its workspace writable, its data readable,
        the home directory and the folder of the executions (the execution directory's
        parent) hidden; only the execution's ``.hankweave/`` when that parent is ``/``."""
        execution_dir = Path(os.path.realpath(execution_dir))
        parent = execution_dir.parent
        hidden = [home] if home is not None and home != Path("/") else []
        hidden.append(parent if parent != Path("/") else execution_dir / ".hankweave")
        return cls(workspace=Path(os.path.realpath(workspace)),
                   hidden=tuple(Path(os.path.realpath(path)) for path in hidden),
                   readable=(Path(os.path.realpath(data)),) if data is not None else (),
                   network=network)

    def wrap(self, argv: Sequence[str], *, writable: Iterable[Path] = (),
             readable: Iterable[Path] = (), network_default: bool = False,
             path_env: str | None = None) -> list[str]:
        """``argv`` run inside the sandbox: the ``bwrap`` command line.  ``writable`` and
        ``readable`` add the harness's own folders (its temp and config folders, its CLI);
        ``network_default`` applies when the settings leave :attr:`network` unset;
        ``path_env`` is the ``PATH`` the process gets (its folders inside hidden ones stay
        readable)."""
        bwrap = shutil.which(BWRAP) or BWRAP
        # Not --die-with-parent: bwrap would end its child with SIGKILL as soon as a stop
        # signal ends bwrap itself, before the agent had saved its session.  Its processes
        # carry the agent marker, so a dead runtime's are reaped as any agent's are.
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        # A /tmp of its own (what other processes keep there is not the agent's), then the
        # hidden folders, then what is bound back into them.
        for path in (self._covered[0], *self._outermost):
            if path.is_dir():
                args += ["--tmpfs", str(path)]
        for path in self._shown([*self.readable, *readable, *self._programs(path_env)]):
            args += ["--ro-bind", str(path), str(path)]
        for path in [self.workspace, *writable]:
            resolved = Path(os.path.realpath(path))
            if resolved.exists():
                args += ["--bind", str(resolved), str(resolved)]
        for path in self._outermost:  # empty, and read-only once what is bound back is in
            if path.is_dir():
                args += ["--remount-ro", str(path)]
        if not (network_default if self.network is None else self.network):
            args.append("--unshare-net")
        return [*args, "--", *argv]

    @property
    def _outermost(self) -> list[Path]:
        """The hidden folders not inside another (the home directory may lie in the folder
        of the executions): hiding the outer one hides the inner."""
        return [path for path in self.hidden
                if not any(path != other and path.is_relative_to(other) for other in self.hidden)]

    @property
    def _covered(self) -> tuple[Path, ...]:
        return (Path(os.path.realpath("/tmp")), *self.hidden)

    def _programs(self, path_env: str | None) -> list[Path]:
        """What a process needs to start programs: the folders on its ``PATH`` and this
        Python's environment."""
        folders = [Path(entry) for entry in (path_env or "").split(os.pathsep) if entry]
        return [*folders, Path(sys.prefix), Path(sys.base_prefix)]

    def _shown(self, paths: Iterable[Path]) -> list[Path]:
        """The paths inside a hidden folder, which must be bound back to be seen (others are
        already readable through the read-only root)."""
        shown: list[Path] = []
        for path in paths:
            resolved = Path(os.path.realpath(path))
            if resolved.exists() and resolved not in shown and any(
                    resolved.is_relative_to(hidden) for hidden in self._covered):
                shown.append(resolved)
        return shown


__all__ = ["BWRAP", "Sandbox", "bubblewrap_problem"]
