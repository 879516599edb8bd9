"""Sentinels during a codon attempt: loaded at its start, fed its events, drained at its end.

:class:`SentinelManager` is the runtime's side of docs/sentinels.md:

* **loading** (the codon's ``starting``): each entry's config is loaded and its kind built; a
  failure is reported (an ``error`` event) and, for an entry with ``failCodonIfNotLoaded``,
  fails the codon with a ``sentinel-load-failure``;
* **observing**: the event bus hands every event to :meth:`SentinelManager.observe`, which
  costs a few microseconds per loaded sentinel when nothing matches; a match is batched by the
  execution strategy (timers on the event loop) and queued;
* **running**: one worker task per sentinel runs its triggers one at a time through its kind,
  writes the outputs, emits the ``sentinel.*`` events, records costs in the codon's record
  (``SentinelStatesUpdated`` after every trigger, so a kill loses none) and unloads it after
  a fatal error or too many failures in a row;
* **completing**: the drain before the codon's final transition, a second one after
  ``codon.completed`` (for the triggers it causes), then every sentinel unloads: unlike the
  original, a codon's sentinels never outlive it (docs/differences.md).

A replay never loads sentinels.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from hankweave.events.catalogue import ServerEvent, routes_to_sentinels
from hankweave.faults import kill_point
from hankweave.fsutil import utc_now_iso
from hankweave.runtime.file_events import with_file_content
from hankweave.sentinel import (
    SentinelError,
    SentinelFatalError,
    SentinelFiring,
    SentinelKind,
    SentinelSetup,
    SentinelTrigger,
)
from hankweave.sentinels.config import (
    LoadedSentinelConfig,
    PluginTrigger,
    SentinelConfigLoader,
    SentinelLoadError,
)
from hankweave.sentinels.outputs import SentinelOutputFiles
from hankweave.sentinels.triggers import (
    Batch,
    Batcher,
    QueuedTrigger,
    TriggerEvent,
    TriggerMatcher,
    TriggerQueue,
)
from hankweave.state.transitions import SentinelStatesData, SentinelStatesUpdated
from hankweave.state.types import FailureReason, SentinelState

if TYPE_CHECKING:
    from hankweave.config.hank import Codon
    from hankweave.runtime.context import RunContext

log = logging.getLogger(__name__)

UnloadReason = Literal["codon-complete", "fatal-error", "consecutive-failures", "shutdown"]
DRAIN_TIMEOUT_S = 600.0
"""How long a completion drain waits for a sentinel's queue (an LLM call that hangs is
cancelled past it, and the sentinel unloads)."""


@dataclass(eq=False)
class _Sentinel:
    """One loaded sentinel of the current codon attempt."""

    loaded: LoadedSentinelConfig
    kind: SentinelKind
    match: Callable[[ServerEvent], Batch | None]
    batcher: Batcher
    queue: TriggerQueue
    outputs: SentinelOutputFiles
    loaded_at: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None
    active: bool = True
    triggers: int = 0
    consecutive_failures: int = 0
    failures: int = 0
    llm_calls: int = 0
    failed_llm_calls: int = 0
    cost: float = 0.0
    last_llm_call_at: str | None = None
    unloaded_at: str | None = None
    unload_reason: str | None = None

    @property
    def id(self) -> str:
        return self.loaded.config.id

    def state(self) -> SentinelState:
        return SentinelState.model_validate({
            "id": self.id, "model": self.kind.model, "loaded_at": self.loaded_at,
            "unloaded_at": self.unloaded_at, "llm_call_count": self.llm_calls,
            "failedLLMCalls": self.failed_llm_calls, "last_llm_call_at": self.last_llm_call_at,
            "total_triggers": self.triggers, "total_cost": self.cost,
            "status": "active" if self.active else "unloaded",
            "unload_reason": self.unload_reason})


class SentinelManager:
    """The sentinels of the codon attempt in progress (see the module docstring)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self._loader: SentinelConfigLoader | None = None
        self._sentinels: list[_Sentinel] = []
        self._observing: tuple[_Sentinel, ...] = ()
        """The active sentinels, as one tuple: what :meth:`observe` reads without a lock."""
        self._codon_id = ""
        self._run_id = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._stopping = False
        """The runtime is shutting down: drains stop waiting, sentinels unload."""
        self._stop_signal: asyncio.Event | None = None

    @property
    def loaded(self) -> bool:
        """Whether the current attempt has sentinels (active or unloaded early)."""
        return bool(self._sentinels)

    # ----- loading -----

    async def load(self, codon_id: str, codon: Codon) -> FailureReason | None:
        """Load the sentinels of ``codon`` (attempted as ``codon_id``); the failure that fails
        its attempt, if any."""
        if self._sentinels:  # an attempt that ended without finishing (it raised)
            await self.unload_all("codon-complete", record=False)
        entries = codon.sentinels or []
        if not entries:
            return None
        ctx = self.ctx
        if not ctx.config.sentinels:
            ctx.reporter.info(f"Sentinels of codon {codon_id} are not run ({len(entries)}"
                              " configured): this run plays a recording")
            return None
        self._codon_id, self._run_id = codon_id, ctx.run_id or ""
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        result = self._config_loader().load(entries, ctx.hank_dir, codon_id=codon_id)
        errors = list(result.errors)
        for loaded in result.configs:
            try:
                self._sentinels.append(self._start(loaded))
            except (SentinelError, ValueError, OSError) as exc:
                errors.append(SentinelLoadError(_ref(loaded), str(exc),
                                                loaded.fail_codon_if_not_loaded))
            except Exception as exc:  # a kind's constructor is plugin code: its bug, not ours
                log.exception("sentinel kind %s failed to start", loaded.config.kind_name)
                errors.append(SentinelLoadError(_ref(loaded), f"{type(exc).__name__}: {exc}",
                                                loaded.fail_codon_if_not_loaded))
        for error in errors:
            self._report_load_error(error)
        fatal = [error for error in errors if error.fatal]
        if fatal:
            await self.unload_all("shutdown", record=False)
            refs = [error.ref for error in fatal]
            return FailureReason(
                type="sentinel-load-failure", retriable=False, sentinel_refs=refs,
                message=f"Sentinel(s) failed to load: {', '.join(refs)}")
        self._observing = tuple(self._sentinels)
        for sentinel in self._sentinels:
            self._report_loaded(sentinel)
        if self._sentinels:
            await self.record_states()
        return None

    def _config_loader(self) -> SentinelConfigLoader:
        if self._loader is None:
            registry = self.ctx.registry
            self._loader = SentinelConfigLoader(triggers=registry.sentinel_triggers(),
                                                kinds=registry.sentinel_kinds())
        return self._loader

    def _start(self, loaded: LoadedSentinelConfig) -> _Sentinel:
        """Build the kind, the trigger, the output files and the worker of one sentinel."""
        ctx, config = self.ctx, loaded.config
        assert loaded.kind is not None and loaded.options is not None
        layout = ctx.layout
        record = ctx.current(self._codon_id)
        setup = SentinelSetup(
            sentinel_id=config.id, name=config.name, description=config.description,
            codon_id=self._codon_id, run_id=self._run_id, config=config,
            options=loaded.options, config_directory=loaded.config_directory,
            execution_dir=layout.path, agent_root=layout.agent_root,
            state_dir=layout.sentinels_dir, env={**ctx.config.env, **ctx.prompts.observer_env},
            codon_start_time=record.start_time, model_entry=self._model_entry(config.model))
        outputs = SentinelOutputFiles.resolve(
            sentinel_id=config.id, codon_id=self._codon_id, epoch_ms=int(time.time() * 1000),
            structured=config.structured_output is not None, output_paths=loaded.output_paths,
            outputs_root=layout.sentinels_dir / "outputs", execution_dir=layout.path,
            agent_root=layout.agent_root)
        kind = loaded.kind(setup)
        outputs.create()
        sentinel = _Sentinel(
            loaded=loaded, kind=kind, match=_matcher(loaded), queue=TriggerQueue(config.id),
            batcher=Batcher(config.execution, self._now_ms()), outputs=outputs,
            loaded_at=utc_now_iso())
        sentinel.idle.set()
        sentinel.worker = asyncio.create_task(self._work(sentinel),
                                              name=f"sentinel {config.id}")
        self._arm_timer(sentinel)
        return sentinel

    def _model_entry(self, model: str | None) -> Any:
        if not model:
            return None
        try:
            return self.ctx.registry.resolve_model(model)
        except Exception:  # not in the catalogue: litellm's estimate prices its calls
            return None

    # ----- observing (called by the event bus, from any thread) -----

    def observe(self, event: ServerEvent) -> None:
        """Feed one event to the loaded sentinels (an event bus subscriber)."""
        observing = self._observing
        if not observing or not routes_to_sentinels(event.type) or _own_bookkeeping(event):
            return
        event = with_file_content(event, self.ctx.layout.agent_root)
        for sentinel in observing:
            batch = sentinel.match(event)
            if batch:
                self._soon(self._accept, sentinel, batch)

    def _soon(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            callback(*args)
        else:
            loop.call_soon_threadsafe(callback, *args)

    def _accept(self, sentinel: _Sentinel, batch: Batch) -> None:
        if not sentinel.active:
            return
        for events in sentinel.batcher.add(batch, self._now_ms()):
            self._enqueue(sentinel, events)
        self._arm_timer(sentinel)

    def _enqueue(self, sentinel: _Sentinel, events: Batch) -> None:
        queue = sentinel.queue
        dropped = queue.dropped
        queue.push(events, sentinel.batcher.strategy, time.time() * 1000)
        if queue.dropped > dropped:
            log.warning("sentinel %s: queue full, dropped %d oldest trigger(s)", sentinel.id,
                        queue.dropped - dropped)
        elif queue.nearly_full:
            log.info("sentinel %s: queue at %d triggers", sentinel.id, len(queue))
        sentinel.idle.clear()
        sentinel.wake.set()

    def _arm_timer(self, sentinel: _Sentinel) -> None:
        if sentinel.timer is not None:
            sentinel.timer.cancel()
            sentinel.timer = None
        deadline = sentinel.batcher.next_deadline()
        if deadline is not None and sentinel.active and self._loop is not None:
            sentinel.timer = self._loop.call_at(deadline / 1000, self._tick, sentinel)

    def _tick(self, sentinel: _Sentinel) -> None:
        sentinel.timer = None
        for events in sentinel.batcher.due(self._now_ms()):
            self._enqueue(sentinel, events)
        self._arm_timer(sentinel)

    def _now_ms(self) -> float:
        loop = self._loop or asyncio.get_running_loop()
        return loop.time() * 1000

    # ----- running triggers -----

    async def _work(self, sentinel: _Sentinel) -> None:
        while sentinel.active:
            trigger = sentinel.queue.pop()
            if trigger is None:
                sentinel.idle.set()
                sentinel.wake.clear()
                await sentinel.wake.wait()
                continue
            try:
                await self._execute(sentinel, trigger)
            except Exception:  # reporting it failed: the worker must live on, or drains hang
                log.exception("sentinel %s: trigger %d could not be handled", sentinel.id,
                              sentinel.triggers)
        sentinel.idle.set()

    async def _execute(self, sentinel: _Sentinel, trigger: QueuedTrigger) -> None:
        sentinel.triggers += 1
        reporting = sentinel.loaded.report_to_websocket
        if reporting.triggers is True:
            self.ctx.reporter.sentinel_triggered(
                sentinel_id=sentinel.id, codon_id=self._codon_id,
                trigger_number=sentinel.triggers, strategy=trigger.strategy,
                event_count=len(trigger.events), queue_size=len(sentinel.queue))
        firing = SentinelFiring(
            number=sentinel.triggers, events=[event.as_event() for event in trigger.events],
            strategy=trigger.strategy,
            queued_at=datetime.fromtimestamp(trigger.queued_at / 1000, UTC))
        try:
            answer = await sentinel.kind.fire(firing)
        except SentinelError as exc:
            await self._failed(sentinel, exc)
            return
        except Exception as exc:  # a kind's bug is the sentinel's failure, not the codon's
            log.exception("sentinel %s failed", sentinel.id)
            await self._failed(sentinel, SentinelError(f"{type(exc).__name__}: {exc}"))
            return
        sentinel.consecutive_failures = 0
        if answer is not None:
            if answer.llm_call:
                sentinel.llm_calls += 1
                sentinel.last_llm_call_at = utc_now_iso()
            sentinel.cost += answer.cost
            self._write(sentinel, answer.content, answer.structured)
            kill_point("sentinel.output")  # test-only (docs/crash-testing.md)
            if reporting.outputs is not False:
                self.ctx.reporter.sentinel_output(
                    sentinel_id=sentinel.id, codon_id=self._codon_id,
                    trigger_number=sentinel.triggers,
                    output_type="structured" if answer.structured else "text",
                    content=answer.content, cost=answer.cost, event_count=len(trigger.events),
                    input_tokens=answer.input_tokens, output_tokens=answer.output_tokens)
        await self.record_states()

    def _write(self, sentinel: _Sentinel, content: Any, structured: bool) -> None:
        try:
            if structured:
                sentinel.outputs.write_structured(content)
            else:
                sentinel.outputs.write_text(content if isinstance(content, str) else str(content),
                                            sentinel.loaded.config.join_separator)
        except OSError as exc:
            log.warning("sentinel %s: cannot write its output: %s", sentinel.id, exc)
            self._report_error(sentinel, SentinelError(
                f"cannot write the output to {sentinel.outputs.log_file}: {exc}",
                error_type="file-write-failed", retriable=False))

    async def _failed(self, sentinel: _Sentinel, exc: SentinelError) -> None:
        sentinel.failures += 1
        sentinel.consecutive_failures += 1
        if exc.llm_call:
            sentinel.llm_calls += 1
            sentinel.failed_llm_calls += 1
            sentinel.last_llm_call_at = utc_now_iso()
        sentinel.cost += exc.cost
        log.warning("sentinel %s: trigger %d failed: %s", sentinel.id, sentinel.triggers, exc)
        self._report_error(sentinel, exc)
        config = sentinel.loaded.config
        conversational = config.conversational
        reason: UnloadReason | None = None
        fatal_type = exc.fatal_type if isinstance(exc, SentinelFatalError) else None
        if isinstance(exc, SentinelFatalError):
            if exc.should_unload or exc.fatal_type in ("template", "configuration") or (
                    exc.fatal_type == "corruption" and conversational is not None
                    and conversational.continue_on_error is not True):
                reason = "fatal-error"
        elif conversational is None \
                and sentinel.consecutive_failures >= config.max_consecutive_failures:
            reason = "consecutive-failures"
        if reason is not None:
            await self._unload(sentinel, reason, error_type=fatal_type)
        await self.record_states()

    # ----- completing -----

    def stop(self) -> None:
        """The runtime is shutting down: a drain in progress stops waiting (its sentinels
        unload with ``shutdown``), and no later drain waits."""
        self._stopping = True
        if self._stop_signal is not None:
            self._soon(self._stop_signal.set)

    async def drain(self) -> None:
        """The completion drain: stop the timers, queue what is buffered, wait for the queues."""
        if self._stopping:
            return
        self._stop_signal = self._stop_signal or asyncio.Event()
        for sentinel in self._sentinels:
            if not sentinel.active:
                continue
            if sentinel.timer is not None:
                sentinel.timer.cancel()
                sentinel.timer = None
            for events in sentinel.batcher.flush():
                self._enqueue(sentinel, events)
        await asyncio.sleep(0)  # let events emitted just now reach the queues
        for sentinel in list(self._sentinels):
            if not sentinel.active:
                continue
            if not await self._drained(sentinel):
                await self._unload(sentinel, "shutdown")

    async def _drained(self, sentinel: _Sentinel) -> bool:
        """Wait for the sentinel's queue; False when the runtime stops or the wait times out."""
        assert self._stop_signal is not None
        idle = asyncio.ensure_future(sentinel.idle.wait())
        stop = asyncio.ensure_future(self._stop_signal.wait())
        try:
            await asyncio.wait({idle, stop}, timeout=DRAIN_TIMEOUT_S,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            stop.cancel()
        if sentinel.idle.is_set():
            return True
        if not self._stopping:
            log.warning("sentinel %s did not finish its queue within %.0fs; unloaded",
                        sentinel.id, DRAIN_TIMEOUT_S)
        return False

    async def finish_codon(self, *, stopping: bool = False) -> None:
        """After ``codon.completed``: the second drain (none when the runtime is stopping),
        then every sentinel unloads and the record keeps their final state."""
        if not self._sentinels:
            return
        stopping = stopping or self._stopping
        if not stopping:
            await self.drain()
        await self.unload_all("shutdown" if stopping else "codon-complete")

    async def unload_all(self, reason: UnloadReason, *, record: bool = True) -> None:
        """Unload every sentinel of the attempt (queued triggers are dropped)."""
        for sentinel in self._sentinels:
            if sentinel.active:
                await self._unload(sentinel, reason)
        if record and self._sentinels:
            await self.record_states()
        self._sentinels = []
        self._observing = ()

    async def _unload(self, sentinel: _Sentinel, reason: UnloadReason,
                      error_type: str | None = None) -> None:
        sentinel.active = False
        sentinel.unloaded_at, sentinel.unload_reason = utc_now_iso(), reason
        self._observing = tuple(s for s in self._observing if s is not sentinel)
        if sentinel.timer is not None:
            sentinel.timer.cancel()
            sentinel.timer = None
        worker = sentinel.worker
        if worker is not None and worker is not asyncio.current_task() and not worker.done():
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        sentinel.wake.set()
        try:
            await sentinel.kind.aclose()
        except Exception:
            log.exception("sentinel %s failed to close", sentinel.id)
        self.ctx.reporter.sentinel_unloaded(
            sentinel_id=sentinel.id, codon_id=self._codon_id, reason=reason,
            error_type=error_type, final_cost=sentinel.cost, llm_call_count=sentinel.llm_calls)

    async def record_states(self) -> None:
        """``SentinelStatesUpdated``: the sentinels' counts and costs in the codon's record."""
        if not self._sentinels:
            return
        states = [sentinel.state() for sentinel in self._sentinels]
        await self.ctx.transition(SentinelStatesUpdated(data=SentinelStatesData(
            run_id=self._run_id, codon_id=self._codon_id, sentinel_states=states,
            total_cost=sum(sentinel.cost for sentinel in self._sentinels))))

    # ----- events -----

    def _report_loaded(self, sentinel: _Sentinel) -> None:
        loaded, config = sentinel.loaded, sentinel.loaded.config
        self.ctx.reporter.sentinel_loaded(
            sentinel_id=config.id, codon_id=self._codon_id, model=sentinel.kind.model,
            trigger_type=config.trigger.type, execution_strategy=config.execution.strategy,
            conversational=config.conversational is not None, source=loaded.source,
            source_path=str(loaded.source_path) if loaded.source_path else None)

    def _report_load_error(self, error: SentinelLoadError) -> None:
        codon = self._codon_id
        if error.fatal:
            self.ctx.reporter.error(
                f"Sentinel {error.ref} failed to load and the codon requires it"
                f" (failCodonIfNotLoaded): {error.error}", codon=codon, fatal=True,
                severity="codon", code="SENTINEL_LOAD_FAILURE")
        else:
            self.ctx.reporter.error(f"Sentinel {error.ref} not loaded; the codon runs without"
                                    f" it: {error.error}", codon=codon, severity="warning",
                                    code="SENTINEL_LOAD_FAILURE")

    def _report_error(self, sentinel: _Sentinel, exc: SentinelError) -> None:
        if sentinel.loaded.report_to_websocket.errors is False:
            return
        self.ctx.reporter.sentinel_error(
            sentinel_id=sentinel.id, codon_id=self._codon_id, error_type=exc.error_type,
            message=str(exc), retriable=exc.retriable,
            consecutive_failure_count=sentinel.failures)


def _own_bookkeeping(event: ServerEvent) -> bool:
    """A ``state.transition`` recording sentinel state: sentinels never see it, as they never
    see their own events (each trigger records its costs, which would trigger again)."""
    return event.type == "state.transition" and \
        event.data.get("transitionType") == "SentinelStatesUpdated"


def _matcher(loaded: LoadedSentinelConfig) -> Callable[[ServerEvent], Batch | None]:
    """The function that turns one event into the batch it completes, or None."""
    trigger = loaded.config.trigger
    if isinstance(trigger, PluginTrigger):
        assert loaded.trigger_class is not None and loaded.trigger_config is not None
        plugin: SentinelTrigger = loaded.trigger_class(loaded.trigger_config)

        def plugin_match(event: ServerEvent) -> Batch | None:
            batch = plugin.observe(event.to_wire())
            return [TriggerEvent(str(item.get("type", "")), item.get("data") or {},
                                 item.get("timestamp")) for item in batch] if batch else None

        return plugin_match
    matcher = TriggerMatcher(trigger)

    def match(event: ServerEvent) -> Batch | None:
        return matcher.feed(event.type, event.data, event.timestamp)

    return match


def _ref(loaded: LoadedSentinelConfig) -> str:
    return str(loaded.source_path) if loaded.source_path else f"inline:{loaded.config.id}"
