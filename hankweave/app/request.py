"""What ``hankweave run`` is asked to do (:class:`LaunchRequest`), and how it refuses
(:class:`LaunchError`): the launch's input and its one error, shared by its parts."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.config.errors import ConfigError
from hankweave.exitcodes import EXIT_USAGE

if TYPE_CHECKING:
    from hankweave.config.settings import Settings
    from hankweave.state.lock import LockInfo
    from hankweave.state.types import HankweaveState


class LaunchError(ConfigError):
    """The run cannot start; the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE, *,
                 held_by: LockInfo | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.held_by = held_by
        """When another runtime holds the execution directory: its lock (an executor then
        retries later rather than failing)."""


@dataclass
class LaunchRequest:
    """The options of ``hankweave run`` (names follow the flags)."""

    hank: str | None = None
    data: str | None = None
    execution: str | None = None
    start_new: bool = False
    force: bool = False
    ignore_data_mismatch: bool = False
    """``--ignore-data-mismatch``: resume on a changed data source (--force's data check)."""
    no_wipe: bool = False
    copy: bool = False
    input_text: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """The run options given (:data:`~hankweave.config.run_options.RUN_OPTIONS`), by name:
    ``{"max_cost": 2.5}``; absent or None: not given (a resume reuses a recorded one)."""
    headless: bool = False
    yes: bool = False
    replay: str | None = None
    """A recorded execution directory or exported recording to play back (no provider)."""
    replay_speed: str = "instant"
    allow_commands: bool | None = None
    """A replay runs its recording's shell commands (``--allow-commands``); False:
    ``--no-allow-commands``; None: as recorded (a resume), else not."""
    wait_for_answers: bool = False
    """Stay up while an interruption waits for a person (``--wait-for-answers``)."""
    mock_provider: str | None = None
    """A mock provider script: the run serves it on 127.0.0.1 and points every codon's agent
    at it (docs/testing-hanks.md)."""
    no_mock_provider: bool = False
    """Leave the mock provider an execution's earlier runs used (``--no-mock-provider``)."""
    start_fresh: bool = False
    """``--start-fresh``: the execution's state files are unreadable; move them to
    ``.hankweave/damaged-<timestamp>/`` and start its state over (docs/state.md)."""
    cwd: Path = field(default_factory=Path.cwd)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    stdin_text: bytes | None = None
    confirm: Callable[[str], bool] | None = None
    notify: Callable[[str], None] = lambda message: print(message, file=sys.stderr)
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_settings: Callable[[Settings], None] | None = None
    """Called with the launch's settings once they are resolved (the terminal view reads
    ``showCosts`` from them)."""
    on_start: Callable[[HankweaveState, Path], None] | None = None
    """Called when the run owns its execution directory and is about to start, with the state
    it starts from (the plan, earlier runs) and the directory (the terminal view starts
    reading keys here)."""
    on_end: Callable[[HankweaveState, Path, int], None] | None = None
    """Called when the run ended, with its final state, the directory and the exit code; when
    set, the caller tells what the run came to (the terminal's summary) instead of the
    launch's own closing lines (where everything is, what waits for an answer)."""

    @classmethod
    def of(cls, **given: Any) -> LaunchRequest:
        """A request from keyword arguments, each run option by its name among the fields:
        ``LaunchRequest.of(hank="h", max_cost=2.5)``."""
        from hankweave.config.run_options import RUN_OPTIONS

        names = {option.name for option in RUN_OPTIONS}
        options = dict(given.pop("options", {}))
        options.update((name, given.pop(name)) for name in list(given) if name in names)
        return cls(**given, options=options)
