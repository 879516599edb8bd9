"""Live control: what the runtime is doing now, and the commands that change it.

The CLI (signals) and the WebSocket server act through :class:`LiveControl`.  One explicit
:class:`Phase` says what the runtime is doing, and each command checks it, refusing what the
original refuses (no rollback while a codon runs, no second start, ...) with a
:class:`RuntimeCommandError` whose message is fit for the user.  No command waits for the codon
it starts: starts are queued for the drive loop, which is the only place codons run.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hankweave.runtime.context import RunContext
from hankweave.runtime.errors import RuntimeCommandError
from hankweave.runtime.humans import WAITING_FOR_HUMAN
from hankweave.runtime.lifecycle import ALL_DONE, CLIENT_REQUEST, RunLifecycle, Shutdown

if TYPE_CHECKING:
    from hankweave.runtime.attempt import CodonAttempt
    from hankweave.runtime.sentinels import SentinelManager


class Phase(enum.Enum):
    """What the runtime is doing."""

    BOOTING = "booting"
    """Preparing checkpoints and the run; the drive loop has not started."""
    BETWEEN_CODONS = "between-codons"
    """The drive loop is choosing (or about to start) the next codon."""
    RUNNING_CODON = "running-codon"
    """A codon attempt is under way, from its rig setup to its completion."""
    WAITING = "waiting"
    """Waiting for a command (``--no-autostart``, a force stop, a rollback without restart,
    a retriable failure in an attended run): the only phase that takes a start or a rollback."""
    ROLLING_BACK = "rolling-back"
    """A rollback command is restoring a checkpoint and starting the new run."""
    SHUTTING_DOWN = "shutting-down"
    """A shutdown was asked for: the run is ending; nothing else is accepted."""


@dataclass(frozen=True)
class StartRequest:
    """A start command: the codon to run (None: the thread's next), and whether its rig setup
    is skipped (its rig is already in place)."""

    codon_id: str | None = None
    skip_rig: bool = False


class LiveControl:
    """The runtime's phase, its command queue, and the commands (see the module docstring)."""

    def __init__(self, ctx: RunContext, lifecycle: RunLifecycle,
                 sentinels: SentinelManager) -> None:
        self.ctx = ctx
        self.lifecycle = lifecycle
        self.sentinels = sentinels
        self.phase = Phase.BOOTING
        self.shutdown_request: Shutdown | None = None
        self.attempt: CodonAttempt | None = None
        """The codon attempt under way, if any."""
        self.rig_ready_for: str | None = None
        """A codon whose rig a rollback restored (its rig-setup checkpoint): the next start of
        it skips its rig setup."""
        self.stopped = asyncio.Event()
        """Set once a shutdown is asked for (retry delays wait on it)."""
        self.command_lock = asyncio.Lock()
        """Held by rollback commands; :meth:`Runtime.finish` takes it, so a shutdown never ends
        the run between a rollback's restore and its new run."""
        self._starts: asyncio.Queue[StartRequest | None] = asyncio.Queue()

    # ----- the phase -----

    @property
    def shutting_down(self) -> bool:
        return self.shutdown_request is not None

    @property
    def shutdown_reason(self) -> str | None:
        return self.shutdown_request.reason if self.shutdown_request else None

    def enter(self, phase: Phase) -> None:
        """Move to ``phase``; once shutting down, the runtime stays so."""
        if self.phase is not Phase.SHUTTING_DOWN:
            self.phase = phase

    @property
    def waiting_for_command(self) -> bool:
        return self.phase is Phase.WAITING

    # ----- the drive loop's side -----

    async def wait_for_start(self, reason: str, message: str) -> StartRequest | None:
        """Announce ``server.idle`` and wait for a start command (None: a shutdown ended the
        wait)."""
        self.ctx.reporter.idle(reason, message)
        self.enter(Phase.WAITING)
        while not self.shutting_down:
            request = await self._starts.get()
            if request is not None:
                return request
        return None

    def next_codon(self, request: StartRequest | None) -> tuple[str | None, bool]:
        """The codon to run next and whether its rig setup is skipped: the request's codon,
        else the thread's next."""
        self.enter(Phase.BETWEEN_CODONS)
        codon_id: str | None
        if request is not None and request.codon_id is not None:
            codon_id, skip_rig = request.codon_id, request.skip_rig
        else:
            codon_id = self.ctx.thread().next_codon_id
            skip_rig = codon_id is not None and codon_id == self.rig_ready_for
        self.rig_ready_for = None
        return codon_id, skip_rig

    def request_start(self) -> None:
        """Start the next codon whenever the runtime next waits for a command (unchecked;
        :meth:`start_next` is the checked form the live-control commands use)."""
        self._starts.put_nowait(StartRequest())

    def queue_start(self, request: StartRequest) -> None:
        # Claim the wait at once, so a second command before the loop wakes is refused.
        self.enter(Phase.BETWEEN_CODONS)
        self._starts.put_nowait(request)

    # ----- commands -----

    def skip(self) -> bool:
        """Skip the running codon (``codon.skip``), during its rig setup too; False when
        neither its agent nor its rig runs."""
        attempt = self.attempt
        if attempt is None or not (attempt.agent_running or attempt.rig_running):
            return False
        attempt.interrupt("skip")
        return True

    def force_stop(self, reason: str | None = None) -> str:
        """Stop the running codon now (``codon.forceStop``) and return its id.

        The codon ends ``failed`` (retriable, "Force stopped: <reason>"), is not retried, and
        the runtime then waits for a command (next, start, redo, rollback, shutdown) instead of
        applying the codon's failure policy: the client that stopped it decides.
        """
        self.refuse_if_stopping()
        attempt = self.attempt
        if attempt is None or not (attempt.agent_running or attempt.rig_running):
            current = self.ctx.codon_in_progress()
            if current is not None and current[1] in ("preparing", "starting", "initializing"):
                raise RuntimeCommandError(f"Codon {current[0]} is {current[1]} (its agent has not"
                                          " started); stop it once it runs, or shut the runtime"
                                          " down")
            if current is not None:
                raise RuntimeCommandError(f"Codon {current[0]} is already finishing")
            raise RuntimeCommandError("No running codon to stop")
        attempt.force_stop(reason or "requested by a client")
        self.ctx.reporter.info(f"Codon {attempt.codon_id} force stopped")
        return attempt.codon_id

    def start_next(self) -> str | None:
        """Start the thread's next codon (``codon.next``); return its id.

        None means nothing is left: the run then completes, as it does after the last codon
        with autostart on.
        """
        self.refuse_unless_waiting("start a codon")
        next_id = self.ctx.thread().next_codon_id
        self.queue_start(StartRequest())
        return next_id

    def start_codon(self, codon_id: str, *, skip_rig: bool = False) -> None:
        """Start a codon of the execution plan by id (``codon.start``).

        It runs in the current run, after whatever ran last (a codon that already finished in
        this run gets another record), and the thread continues after it.
        """
        self.refuse_unless_waiting("start a codon")
        self.ctx.plan_entry(codon_id)  # an unknown id is refused before anything is queued
        self.queue_start(StartRequest(codon_id, skip_rig))

    def redo(self) -> str:
        """Run the most recent codon of the thread again, whatever its status (``codon.redo``)."""
        self.refuse_unless_waiting("redo a codon")
        thread = self.ctx.thread()
        if not thread.codons:
            raise RuntimeCommandError("No codon to redo: nothing has run yet")
        codon_id = thread.codons[0].codon.codon_id
        self.ctx.plan_entry(codon_id)
        self.queue_start(StartRequest(codon_id))
        return codon_id

    # ----- shutting down -----

    def request_shutdown(self, reason: str) -> None:
        """Ask for a graceful shutdown (a signal, ``server.shutdown``): the running codon is
        stopped and the run ends.  Asked again, the shutdown becomes a forced one."""
        if self.shutdown_request is not None:
            self._escalate()
        else:
            self._begin_shutdown(reason)

    def force_shutdown(self, reason: str = CLIENT_REQUEST) -> None:
        """Stop at once (``server.force_shutdown``): as :meth:`request_shutdown`, exit code 1."""
        if self.shutdown_request is None:
            self._begin_shutdown(reason)
        self._escalate()

    async def shutdown(self, reason: str) -> None:
        """End the run for ``reason``: stop the agent (whose completion then ends the run), or
        end the run now when no agent runs.  Idempotent; another reason escalates."""
        if self.shutdown_request is not None:
            if reason != self.shutdown_request.reason:
                self._escalate()
            return
        self._begin_shutdown(reason)
        if self.attempt is None or not self.attempt.agent_running:
            await self.lifecycle.end_run(failed=reason != ALL_DONE,
                                         interrupted=reason == WAITING_FOR_HUMAN)

    def _begin_shutdown(self, reason: str) -> None:
        self.shutdown_request = Shutdown(reason)
        self.phase = Phase.SHUTTING_DOWN
        self.stopped.set()
        self.sentinels.stop()  # a completion drain in progress stops waiting
        if self.attempt is not None:
            self.attempt.interrupt("stop")
        self._starts.put_nowait(None)  # wake a wait for a start command

    def interrupt_for_human(self) -> None:
        """End the attempt in progress: an interruption waits for a person."""
        if self.attempt is not None:
            self.attempt.interrupt("human")

    def _escalate(self) -> None:
        if self.shutdown_request is not None:
            self.shutdown_request = Shutdown(self.shutdown_request.reason, forced=True)

    # ----- refusals -----

    def refuse_if_stopping(self) -> None:
        if self.shutting_down:
            raise RuntimeCommandError("The runtime is shutting down")
        if self.phase is Phase.ROLLING_BACK:
            raise RuntimeCommandError("A rollback is in progress")

    def refuse_unless_waiting(self, action: str) -> None:
        self.refuse_if_stopping()
        current = self.ctx.codon_in_progress()
        if self.attempt is not None and self.attempt.agent_running:
            current = (self.attempt.codon_id, "running")
        if current is not None:
            raise RuntimeCommandError(f"Codon already running ({current[0]}); skip or stop it"
                                      " first")
        if self.phase is not Phase.WAITING:
            raise RuntimeCommandError(f"Cannot {action} now: the runtime is between codons. It"
                                      " takes this command while it waits for one"
                                      " (--no-autostart, after a force stop or a rollback)")
