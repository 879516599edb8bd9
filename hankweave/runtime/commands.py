"""What a client asks of a running runtime: :class:`RuntimeCommands`, and the runtime's answer.

The WebSocket server (``hankweave.server``) and the CLI's signal handlers hold a
:class:`RuntimeCommands` and nothing else of the runtime: what it is doing now, what a client
may ask it to do, and the answers (a codon id, a rollback target, an interruption).  Every
command refuses what the runtime cannot do now by raising
:class:`~hankweave.runtime.errors.RuntimeCommandError` with a message fit for the user; none
waits for the codon it starts (live control queues starts for the drive loop).

:class:`RunCommands` is the runtime's implementation: each command goes to the part that owns
it (:class:`~hankweave.runtime.control.LiveControl` for the phase, the queue and shutdowns,
:class:`~hankweave.runtime.rollback.Rollbacks` for restores, the
:class:`~hankweave.runtime.humans.HumanLoop` for answers).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hankweave.runtime.control import Phase
from hankweave.runtime.lifecycle import CLIENT_REQUEST
from hankweave.runtime.rollback import list_checkpoints

if TYPE_CHECKING:
    from hankweave.runtime.context import RunContext
    from hankweave.runtime.control import LiveControl
    from hankweave.runtime.humans import HumanLoop
    from hankweave.runtime.rollback import CheckpointListing, Rollbacks, RollbackTarget
    from hankweave.state.interruptions import GivenAnswer
    from hankweave.state.types import HankweaveState, Interruption


class RuntimeCommands(Protocol):
    """What a client can see of a running runtime and ask it to do (see the module docstring)."""

    # ----- what it is doing -----

    @property
    def execution_dir(self) -> Path: ...

    @property
    def state(self) -> HankweaveState: ...

    @property
    def run_id(self) -> str | None:
        """The run the runtime records, once booted."""
        ...

    @property
    def shutting_down(self) -> bool:
        """Whether a shutdown has been asked for (commands that change the run are refused)."""
        ...

    @property
    def rolling_back(self) -> bool:
        """Whether a rollback command is restoring a checkpoint right now."""
        ...

    @property
    def waiting_for_command(self) -> bool:
        """Whether the drive loop waits for a start command (``--no-autostart``, a force stop,
        a rollback without restart): the only time a codon can be started or a rollback made."""
        ...

    @property
    def agent_running(self) -> bool:
        """Whether a codon's agent runs now (what skip and force stop act on)."""
        ...

    def codon_in_progress(self) -> tuple[str, str] | None:
        """``(codon id, status)`` of the current run's unfinished codon record, if any."""
        ...

    def codon_name(self, codon_id: str) -> str:
        """The configured name of a codon (its id when the hank does not know it)."""
        ...

    def list_checkpoints(self, run_id: str | None = None) -> CheckpointListing:
        """The checkpoints of ``run_id`` (None: every run's)."""
        ...

    # ----- codons -----

    def request_start(self) -> None:
        """Start the next codon whenever the runtime next waits for a command (unchecked)."""
        ...

    def start_next(self) -> str | None:
        """Start the thread's next codon (``codon.next``); its id, None when nothing is left."""
        ...

    def start_codon(self, codon_id: str, *, skip_rig: bool = False) -> None:
        """Start a codon of the execution plan by id (``codon.start``)."""
        ...

    def skip(self) -> bool:
        """Skip the running codon (``codon.skip``); False when nothing runs."""
        ...

    def redo(self) -> str:
        """Run the thread's most recent codon again (``codon.redo``); its id."""
        ...

    def force_stop(self, reason: str | None = None) -> str:
        """Stop the running codon now (``codon.forceStop``); its id."""
        ...

    async def answer(self, interruption_id: str, given: GivenAnswer, by: str) -> Interruption:
        """Answer a pending interruption (``interruption.answer``): a run waiting for it goes
        on; an :class:`~hankweave.state.interruptions.AnswerError` changes nothing."""
        ...

    # ----- rollbacks -----

    async def rollback_to_last_success(self, *, auto_restart: bool = False) -> RollbackTarget:
        ...

    async def rollback_to_codon(self, codon_id: str, checkpoint_type: str = "end", *,
                                auto_restart: bool = False) -> RollbackTarget:
        ...

    async def rollback_to_checkpoint(self, sha_prefix: str, *,
                                     auto_restart: bool = False) -> RollbackTarget:
        ...

    # ----- shutting down -----

    def request_shutdown(self, reason: str) -> None:
        """A graceful shutdown (a signal, ``server.shutdown``); asked again, a forced one."""
        ...

    def force_shutdown(self, reason: str = CLIENT_REQUEST) -> None:
        """Stop at once (``server.force_shutdown``), exit code 1."""
        ...


class RunCommands:
    """The runtime's :class:`RuntimeCommands`: each command goes to the part that owns it."""

    def __init__(self, ctx: RunContext, control: LiveControl, rollbacks: Rollbacks,
                 humans: HumanLoop) -> None:
        self._ctx = ctx
        self._control = control
        self._rollbacks = rollbacks
        self._humans = humans

    # ----- what it is doing -----

    @property
    def execution_dir(self) -> Path:
        return self._ctx.layout.path

    @property
    def state(self) -> HankweaveState:
        return self._ctx.state

    @property
    def run_id(self) -> str | None:
        return self._ctx.run_id

    @property
    def shutting_down(self) -> bool:
        return self._control.shutting_down

    @property
    def rolling_back(self) -> bool:
        return self._control.phase is Phase.ROLLING_BACK

    @property
    def waiting_for_command(self) -> bool:
        return self._control.waiting_for_command

    @property
    def agent_running(self) -> bool:
        attempt = self._control.attempt
        return attempt is not None and attempt.agent_running

    def codon_in_progress(self) -> tuple[str, str] | None:
        return self._ctx.codon_in_progress()

    def codon_name(self, codon_id: str) -> str:
        return self._ctx.codon_name(codon_id)

    def list_checkpoints(self, run_id: str | None = None) -> CheckpointListing:
        return list_checkpoints(self._ctx, run_id)

    # ----- codons -----

    def request_start(self) -> None:
        self._control.request_start()

    def start_next(self) -> str | None:
        return self._control.start_next()

    def start_codon(self, codon_id: str, *, skip_rig: bool = False) -> None:
        self._control.start_codon(codon_id, skip_rig=skip_rig)

    def skip(self) -> bool:
        return self._control.skip()

    def redo(self) -> str:
        return self._control.redo()

    def force_stop(self, reason: str | None = None) -> str:
        return self._control.force_stop(reason)

    async def answer(self, interruption_id: str, given: GivenAnswer, by: str) -> Interruption:
        # Under the command lock: an answer never lands between a rollback's restore and its
        # new run.
        async with self._control.command_lock:
            return await self._humans.answer(interruption_id, given, by)

    # ----- rollbacks -----

    async def rollback_to_last_success(self, *, auto_restart: bool = False) -> RollbackTarget:
        return await self._rollbacks.to_last_success(auto_restart=auto_restart)

    async def rollback_to_codon(self, codon_id: str, checkpoint_type: str = "end", *,
                                auto_restart: bool = False) -> RollbackTarget:
        return await self._rollbacks.to_codon(codon_id, checkpoint_type,
                                              auto_restart=auto_restart)

    async def rollback_to_checkpoint(self, sha_prefix: str, *,
                                     auto_restart: bool = False) -> RollbackTarget:
        return await self._rollbacks.to_checkpoint(sha_prefix, auto_restart=auto_restart)

    # ----- shutting down -----

    def request_shutdown(self, reason: str) -> None:
        self._control.request_shutdown(reason)

    def force_shutdown(self, reason: str = CLIENT_REQUEST) -> None:
        self._control.force_shutdown(reason)


__all__ = ["RunCommands", "RuntimeCommands"]
