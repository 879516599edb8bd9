"""Runtime overhead of sentinels per event, and the latency of one that fires through litellm.

Both parts go through the runtime's own code: a :class:`SentinelManager` is loaded with
``SentinelManager.load`` (a minimal run context and codon attempt stand in for a hank run:
the real config loader, LLM kind, output files and reporter, the state store replaced by a
no-op) and subscribed to an :class:`EventBus` without a journal, as ``launch`` subscribes it.

* **Non-matching** (``us_per_event``): 10 loaded sentinels whose triggers never match the
  stream: event triggers on other types with conditions, two on the stream's own types whose
  conditions fail, a sequence trigger whose interest filter excludes every streamed type and a
  ``*`` trigger whose condition fails; every execution strategy appears.  The stream is what
  an agent turn makes the reporter emit (``state.transition`` for cost and message-count
  updates, ``assistant.action`` text and tool use, ``tool.result``, ``token.usage``), built
  by the runtime's :class:`~hankweave.runtime.reporter.Reporter` as catalogue payloads.  Two
  buses emit the same ``--events`` events, one with nothing subscribed and one with the
  manager subscribed, alternating for ``--rounds`` rounds (the order swapped every round: A B,
  B A, A B, ...); the figure is the median of the paired differences per emitted event
  (``emit_us_per_event_without_sentinels``: the bus alone, fastest of 3 passes).
  ``observe_us_per_event`` is the same difference measured on ``SentinelManager.observe``
  itself (prebuilt events, against an empty call).
* **Recording sequences** (``recording_sequence``, no target): ``observe`` with one sequence
  sentinel whose interest filter admits the stream (``failure-streak.json``'s trigger: a tool
  call, then a failed result, which never comes), once its 1000-event history is full, in
  consecutive and in non-consecutive mode (the matcher keeps its progress as events arrive).
* **Matching** (``trigger_p50_ms``): one immediate ``llm`` sentinel on ``tool.result`` (a
  condition that holds) calling the scripted mock provider (``MockProvider``, on 127.0.0.1 in
  this event loop) through real litellm; the time from ``bus.emit`` of the event to the
  ``sentinel.output`` event, over ``--triggers`` triggers, one at a time, after
  ``--warmup`` untimed ones.  ``litellm_import_s`` is the first ``import litellm`` (timed
  apart, before the warm-up), ``first_trigger_ms`` the first trigger after it.

Nothing leaves the machine: the script sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` and
``NO_PROXY`` before anything imports litellm, and refuses every connection and name lookup
that is not 127.0.0.1 / localhost (``network_attempts_blocked`` counts them; any makes
``ok`` false).

Prints one JSON line.  Target: ``us_per_event`` <= 50 with 10 non-matching sentinels
(``target_us``, ``ok``).  Default run: well under a minute on 2 cores (litellm's import is
most of it); ``--quick``: fewer events, rounds and triggers.

Usage: python benchmarks/sentinels.py [--events N] [--rounds N] [--triggers N]
                                      [--warmup N] [--sequence-events N] [--quick]
"""

from __future__ import annotations

import os

# Before anything imports litellm: no price map download, nothing through a proxy.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

import argparse
import asyncio
import gc
import json
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

TARGET_US = 50.0
MODEL = "anthropic/claude-haiku-4-5"
RUN_ID = "1788337916070-bench"
CODON_ID = "build"

# ----- no network -----

_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
blocked: list[str] = []


def _local(address: Any) -> bool:
    host = address[0] if isinstance(address, tuple) and address else address
    return not isinstance(host, str) or host in _LOCAL_HOSTS


def refuse_the_network() -> None:
    """Let only loopback connections and lookups through; record and refuse the others."""
    connect, connect_ex, getaddrinfo = (socket.socket.connect, socket.socket.connect_ex,
                                        socket.getaddrinfo)

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
            blocked.append(f"connect {address!r}")
            raise ConnectionRefusedError(f"benchmark: no network ({address!r})")
        return connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
            blocked.append(f"connect {address!r}")
            return 111  # ECONNREFUSED
        return connect_ex(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name not in _LOCAL_HOSTS:
            blocked.append(f"lookup {name!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"benchmark: no network ({name!r})")
        return getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = guarded_getaddrinfo


refuse_the_network()

from hankweave.config.hank import CodonSentinel  # noqa: E402
from hankweave.events.bus import EventBus  # noqa: E402
from hankweave.events.catalogue import ServerEvent, make_event  # noqa: E402
from hankweave.fsutil import utc_now_iso  # noqa: E402
from hankweave.plugins import make_plugin_manager  # noqa: E402
from hankweave.registry import Registry  # noqa: E402
from hankweave.runtime.context import RuntimeConfig  # noqa: E402
from hankweave.runtime.reporter import Reporter  # noqa: E402
from hankweave.runtime.sentinels import SentinelManager  # noqa: E402
from hankweave.state.transitions import (  # noqa: E402
    AssistantMessageCountData,
    AssistantMessageCountUpdated,
    CostsIncremented,
    CostsIncrementedData,
)
from hankweave.state.types import (  # noqa: E402
    FreshStart,
    HankweaveState,
    Run,
    RunningCodon,
    TokenUsage,
)

# ----- the sentinels -----


def _cond(path: str, operator: str, value: Any) -> dict[str, Any]:
    return {"path": path, "operator": operator, "value": value}


def _sentinel(sentinel_id: str, trigger: dict[str, Any],
              execution: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": sentinel_id, "name": sentinel_id.replace("-", " ").capitalize(),
            "trigger": trigger, "execution": execution or {"strategy": "immediate"},
            "userPromptText": "What happened?\n<%= JSON.stringify(it.events) %>",
            "model": MODEL}


def non_matching_sentinels() -> list[dict[str, Any]]:
    """Ten sentinels none of whose triggers matches the stream of :func:`agent_turn`."""
    event = "event"
    return [
        _sentinel("failed-codon", {"type": event, "on": ["codon.completed"], "conditions": [
            _cond("success", "equals", False)]}),
        _sentinel("python-edits", {"type": event, "on": ["file.updated"], "conditions": [
            _cond("path", "matches", r"\.py$"), _cond("action", "notIn", ["deleted"])]},
            {"strategy": "debounce", "milliseconds": 5000}),
        _sentinel("fatal-errors", {"type": event, "on": ["error"], "conditions": [
            _cond("severity", "in", ["fatal", "codon"])]}),
        _sentinel("rig-failures", {"type": event, "on": ["rig.setup.failed", "rig.output"],
                                   "conditions": [_cond("stream", "equals", "stderr")]}),
        _sentinel("extensions", {"type": event, "on": ["codon.extended"], "conditions": [
            _cond("extensionNumber", "greaterThan", 2)]}, {"strategy": "count", "threshold": 5}),
        _sentinel("loop-costs", {"type": event, "on": ["loop.iteration.completed"],
                                 "conditions": [_cond("costUsd", "greaterThan", 1)]},
                  {"strategy": "timeWindow", "milliseconds": 600_000}),
        # On the stream's own types: every event is a candidate, its conditions fail.
        _sentinel("bash-failures", {"type": event, "on": ["tool.result"], "conditions": [
            _cond("toolName", "in", ["Bash", "Edit", "Write"]),
            _cond("isError", "equals", True)]}, {"strategy": "count", "threshold": 3}),
        _sentinel("dangerous-commands", {"type": event, "on": ["assistant.action"],
                                         "conditions": [_cond("action", "equals", "tool_use"),
                                                        _cond("toolName", "equals", "Bash")]}),
        # A sequence trigger whose interest filter lets none of the stream's types in.
        _sentinel("codon-flaps", {"type": "sequence",
                                  "interestFilter": {"on": ["codon.started", "codon.completed"]},
                                  "pattern": [{"type": "codon.started"},
                                              {"type": "codon.completed", "conditions": [
                                                  _cond("success", "equals", False)]}]}),
        # Every event is a candidate; the condition fails (false, or absent from the payload).
        _sentinel("any-error", {"type": event, "on": ["*"], "conditions": [
            _cond("isError", "equals", True)]}),
    ]


def recording_sequence(consecutive: bool) -> dict[str, Any]:
    """tests/compat/sentinels/failure-streak.json's trigger: a tool call, then its failed result.

    Its interest filter admits the stream's ``assistant.action`` and ``tool.result`` events, so
    it records them (the last 1000) and checks its pattern at each ``tool.result``."""
    return _sentinel(f"failure-streak-{'tail' if consecutive else 'gaps'}", {
        "type": "sequence", "interestFilter": {"on": ["assistant.action", "tool.result"]},
        "pattern": [{"type": "assistant.action", "conditions": [
                        _cond("action", "equals", "tool_use")]},
                    {"type": "tool.result", "conditions": [
                        _cond("isError", "equals", True),
                        _cond("toolName", "in", ["Bash", "Edit", "Write"])]}],
        "options": {"consecutive": consecutive}}, {"strategy": "count", "threshold": 3})


def matching_sentinel() -> dict[str, Any]:
    return _sentinel("bash-watch", {"type": "event", "on": ["tool.result"], "conditions": [
        _cond("toolName", "equals", "Bash")]})


# ----- the event stream -----


def _running_state() -> HankweaveState:
    codon = RunningCodon(codon_id=CODON_ID, start_time="2026-09-02T08:31:56.104Z",
                         claude_pid=952404, claude_log_path=f"{CODON_ID}-claude.log",
                         claude_session_id="83b52eaa-5147-4130-aef4-818c9c663c77",
                         current_cost=0.42, assistant_message_count=12)
    run = Run(run_id=RUN_ID, run_folder=f"/tmp/exec/.hankweave/runs/{RUN_ID}",
              git_branch=f"run-{RUN_ID}", starting_conditions=FreshStart(), codons=[codon],
              start_time="2026-09-02T08:31:56.071Z", server_pid=os.getpid())
    return HankweaveState(runs=[run], current_run_id=RUN_ID)


def agent_turn(number: int) -> list[tuple[str, Any]]:
    """The events one assistant turn with a tool call makes the runtime emit, as
    ``(type, payload model)`` pairs built by the runtime's reporter."""
    out: list[tuple[str, Any]] = []
    reporter = Reporter(lambda event_type, data: out.append((event_type, data)))
    state = _running_state()
    tool_use_id = f"toolu_{number:08d}"
    reporter.assistant_blocks(CODON_ID, [
        {"type": "text", "text": f"Step {number}: I will run the tests and read the failures."},
        {"type": "tool_use", "id": tool_use_id, "name": "Read",
         "input": {"file_path": f"/work/agentRoot/src/module_{number % 7}.py"}}])
    reporter.token_usage(codon_id=CODON_ID, usage=TokenUsage(
        input_tokens=12, output_tokens=180, cache_creation_tokens=300,
        cache_read_tokens=24_000), cost=0.0031, model_id="claude-sonnet-4-5")
    reporter.transition(CostsIncremented(data=CostsIncrementedData(
        run_id=RUN_ID, codon_id=CODON_ID, cost_delta=0.0031,
        tokens_delta=TokenUsage(input_tokens=12, output_tokens=180))), state)
    reporter.transition(AssistantMessageCountUpdated(data=AssistantMessageCountData(
        run_id=RUN_ID, codon_id=CODON_ID, new_count=number + 1)), state)
    reporter.tool_result(codon_id=CODON_ID, tool_use_id=tool_use_id, tool_name="Read",
                         text="def main():\n    return run()\n" * 20, limit=2000,
                         elapsed_ms=4, is_error=False)
    return out


def event_stream(count: int) -> list[tuple[str, Any]]:
    stream: list[tuple[str, Any]] = []
    number = 0
    while len(stream) < count:
        stream += agent_turn(number)
        number += 1
    return stream[:count]


# ----- a manager loaded as a codon's start loads it -----


class _NoStore:
    """The run context's state side: transitions are counted, not stored."""

    def __init__(self) -> None:
        self.transitions = 0

    async def transition(self, transition: Any) -> None:
        self.transitions += 1


def build_context(root: Path, bus: EventBus, env: dict[str, str]) -> SimpleNamespace:
    """What :class:`SentinelManager` reads of a ``RunContext``, with the real registry (the
    built-ins, no installed plugins) and reporter."""
    execution = root / "exec"
    layout = SimpleNamespace(path=execution, agent_root=execution / "agentRoot",
                             sentinels_dir=execution / ".hankweave" / "sentinels")
    layout.agent_root.mkdir(parents=True)
    registry = Registry(make_plugin_manager(load_entrypoints=False, env={}))
    store = _NoStore()
    record = SimpleNamespace(start_time=utc_now_iso())
    return SimpleNamespace(
        config=RuntimeConfig(env=env, sentinels=True), reporter=Reporter(bus.emit),
        registry=registry, hank_dir=root, layout=layout, run_id=RUN_ID,
        prompts=SimpleNamespace(provider_env={}), current=lambda codon_id: record,
        transition=store.transition, store=store)


async def load_manager(ctx: SimpleNamespace, configs: list[dict[str, Any]]) -> SentinelManager:
    manager = SentinelManager(ctx)  # type: ignore[arg-type]  # the parts it reads
    entries = [CodonSentinel.model_validate({"sentinelConfig": config,
                                             "settings": {"failCodonIfNotLoaded": True}})
               for config in configs]
    attempt = SimpleNamespace(codon=SimpleNamespace(sentinels=entries), codon_id=CODON_ID)
    failure = await manager.load(attempt)  # type: ignore[arg-type]
    if failure is not None:
        raise RuntimeError(f"the sentinels did not load: {failure.message}")
    return manager


def _pending(manager: SentinelManager) -> int:
    """Triggers run, queued or buffered: 0 while nothing matched."""
    return sum(s.triggers + len(s.queue) + len(s.batcher._buffer)
               for s in manager._sentinels)


# ----- part 1: non-matching sentinels -----


def _emit_all(bus: EventBus, stream: list[tuple[str, Any]]) -> float:
    emit = bus.emit
    gc.collect()
    started = time.perf_counter()
    for event_type, data in stream:
        emit(event_type, data)
    return time.perf_counter() - started


def _call_all(call: Callable[[ServerEvent], None], events: list[ServerEvent]) -> float:
    gc.collect()
    started = time.perf_counter()
    for event in events:
        call(event)
    return time.perf_counter() - started


def _noop(event: ServerEvent) -> None:
    return None


def _paired_us(pairs: Iterator[tuple[float, float]], count: int) -> list[float]:
    return [(with_ - without) / count * 1e6 for without, with_ in pairs]


def _alternate(rounds: int, a: Callable[[], float], b: Callable[[], float]
               ) -> Iterator[tuple[float, float]]:
    """(a, b) per round, the order swapped every other round: A B, B A, A B, ..."""
    for index in range(rounds):
        if index % 2:
            second = b()
            yield a(), second
        else:
            first = a()
            yield first, b()


async def measure_non_matching(root: Path, events: int, rounds: int) -> dict[str, Any]:
    env = {"HANKWEAVE_SENTINEL_ANTHROPIC_API_KEY": "bench-never-used",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}  # a sentinel that fires fails locally
    plain, observed = EventBus(None), EventBus(None)
    ctx = build_context(root / "non-matching", observed, env)
    manager = await load_manager(ctx, non_matching_sentinels())
    loaded = len(manager._observing)
    observed.subscribe(manager.observe)
    stream = event_stream(events)
    warm = stream[: min(len(stream), 500)]
    _emit_all(plain, warm)
    _emit_all(observed, warm)
    bus_us = _paired_us(_alternate(rounds, lambda: _emit_all(plain, stream),
                                   lambda: _emit_all(observed, stream)), len(stream))
    prebuilt = [make_event(event_type, data, seq=seq)
                for seq, (event_type, data) in enumerate(stream, 1)]
    observe_us = _paired_us(_alternate(rounds, lambda: _call_all(_noop, prebuilt),
                                       lambda: _call_all(manager.observe, prebuilt)),
                            len(prebuilt))
    baseline = min(_emit_all(plain, stream) for _ in range(3)) / len(stream) * 1e6
    matched = _pending(manager)
    await manager.unload_all("codon-complete")
    mix: dict[str, int] = {}
    for event_type, _ in stream:
        mix[event_type] = mix.get(event_type, 0) + 1
    us = statistics.median(bus_us)
    return {
        "sentinels": loaded, "events": len(stream), "rounds": rounds, "event_mix": mix,
        "us_per_event": round(us, 2), "us_per_event_min": round(min(bus_us), 2),
        "us_per_event_max": round(max(bus_us), 2),
        "us_per_event_per_sentinel": round(us / loaded, 2),
        "observe_us_per_event": round(statistics.median(observe_us), 2),
        "emit_us_per_event_without_sentinels": round(baseline, 2),
        "matched_triggers": matched,
    }


async def measure_recording_sequences(root: Path, events: int) -> dict[str, Any]:
    """``observe`` with one sequence sentinel that records the stream but never matches, once
    its history is full (1000 events): the cost of checking the pattern over the window."""
    env = {"HANKWEAVE_SENTINEL_ANTHROPIC_API_KEY": "bench-never-used"}
    figures: dict[str, Any] = {"events": events}
    for consecutive in (True, False):
        bus = EventBus(None)
        ctx = build_context(root / f"sequence-{consecutive}", bus, env)
        manager = await load_manager(ctx, [recording_sequence(consecutive)])
        stream = [make_event(event_type, data) for event_type, data in event_stream(events)]
        _call_all(manager.observe, [make_event(t, d) for t, d in event_stream(2000)])
        elapsed = _call_all(manager.observe, stream) - _call_all(_noop, stream)
        key = "consecutive" if consecutive else "non_consecutive"
        figures[f"{key}_us_per_event"] = round(elapsed / len(stream) * 1e6, 1)
        figures[f"{key}_matched_triggers"] = _pending(manager)
        await manager.unload_all("codon-complete")
    return figures


# ----- part 2: one matching sentinel through litellm and the mock -----


def _time_litellm_import() -> float:
    started = time.perf_counter()
    import litellm  # noqa: F401

    return time.perf_counter() - started


async def measure_matching(root: Path, triggers: int, warmup: int) -> dict[str, Any]:
    from hankweave.mock_provider.server import MockProvider
    from hankweave.testing.mock_provider import as_script

    script = as_script({"rules": [], "default": {
        "text": "Nothing alarming: the agent read a file and moved on.",
        "usage": {"inputTokens": 900, "outputTokens": 14}}})
    async with MockProvider(script) as mock:
        bus = EventBus(None)
        ctx = build_context(root / "matching", bus, mock.client_env())
        manager = await load_manager(ctx, [matching_sentinel()])
        bus.subscribe(manager.observe)
        loop = asyncio.get_running_loop()
        waiting: list[asyncio.Future[float]] = []

        def on_output(event: ServerEvent) -> None:
            if event.type in ("sentinel.output", "sentinel.error") and waiting:
                future = waiting.pop()
                if not future.done():
                    if event.type == "sentinel.error":
                        future.set_exception(RuntimeError(event.data.get("message")))
                    else:
                        future.set_result(time.perf_counter())

        bus.subscribe(on_output)
        turn = next(d for t, d in agent_turn(0) if t == "tool.result")
        data = turn.model_copy(update={"tool_name": "Bash"})

        async def one() -> float:
            future: asyncio.Future[float] = loop.create_future()
            waiting.append(future)
            started = time.perf_counter()
            bus.emit("tool.result", data)
            return await asyncio.wait_for(future, 30) - started

        import_s = _time_litellm_import()
        first = await one()
        for _ in range(warmup):
            await one()
        latencies = sorted([await one() for _ in range(triggers)])
        sentinel = manager._sentinels[0]
        calls, cost = sentinel.llm_calls, sentinel.cost
        await manager.unload_all("codon-complete")
        log = sentinel.outputs.log_file.read_text(encoding="utf-8")
    return {
        "triggers": triggers, "warmup_triggers": warmup, "model": MODEL,
        "litellm_import_s": round(import_s, 3),
        "first_trigger_ms": round(first * 1000, 2),
        "trigger_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "trigger_min_ms": round(latencies[0] * 1000, 2),
        "trigger_p90_ms": round(latencies[int(0.9 * (len(latencies) - 1))] * 1000, 2),
        "trigger_max_ms": round(latencies[-1] * 1000, 2),
        "llm_calls": calls, "cost_usd": round(cost, 6),
        "output_entries": log.count("Nothing alarming"),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hankweave-sentinel-bench-") as tmp:
        root = Path(tmp)
        quiet = await measure_non_matching(root, args.events, args.rounds)
        sequences = await measure_recording_sequences(root, args.sequence_events)
        matching = await measure_matching(root, args.triggers, args.warmup)
    ok = quiet["us_per_event"] <= TARGET_US and quiet["matched_triggers"] == 0 \
        and not blocked and matching["output_entries"] == 1 + args.warmup + args.triggers
    return {"benchmark": "sentinels", "non_matching": quiet, "matching": matching,
            "recording_sequence": sequences,
            "us_per_event": quiet["us_per_event"],
            "trigger_p50_ms": matching["trigger_p50_ms"],
            "litellm_import_s": matching["litellm_import_s"],
            "network_attempts_blocked": len(blocked), "target_us": TARGET_US, "ok": ok}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000,
                        help="events per round (an agent turn emits 6)")
    parser.add_argument("--rounds", type=int, default=24,
                        help="interleaved rounds (with sentinels / without, alternating)")
    parser.add_argument("--triggers", type=int, default=50,
                        help="timed triggers of the matching sentinel")
    parser.add_argument("--warmup", type=int, default=5,
                        help="untimed triggers after the first one")
    parser.add_argument("--sequence-events", type=int, default=1200,
                        help="events timed for each recording sequence sentinel")
    parser.add_argument("--quick", action="store_true",
                        help="1200 events, 6 rounds, 10 triggers, 300 sequence events"
                             " (a few seconds + the import)")
    args = parser.parse_args()
    if args.quick:
        args.events, args.rounds, args.triggers, args.warmup = 1200, 6, 10, 2
        args.sequence_events = 300
    if min(args.events, args.rounds, args.triggers, args.sequence_events) < 1 \
            or args.warmup < 0:
        parser.error("--events, --rounds, --triggers and --sequence-events must be positive")
    result = asyncio.run(run(args))
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
