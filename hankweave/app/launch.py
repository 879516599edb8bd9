"""``hankweave run``, end to end: from command-line options to a finished (or stopped) run.

The steps, each with its own module: find the data and the hank (``execution.setup``), load the
hank and the settings layers (``config``), preflight every rule (``app.preflight``), build what
settings enable from the plugins (``app.plugin_settings``), prepare the execution directory,
take ownership of it (lock + state + crash repair), open the event journal and sinks, start the
live-control server, then boot and drive the :class:`~hankweave.runtime.orchestrator.Runtime`
until the plan is done, a failure stops it, or a signal asks it to stop.

This module sits above the runtime and the server: it is what puts the two together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hankweave.app.request import LaunchError, LaunchRequest
from hankweave.app.run_source import RunSource, open_source
from hankweave.exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_SIGTERM
from hankweave.fsutil import open_private, private_dir
from hankweave.secrets import MaskingFormatter, mask_url_credentials

if TYPE_CHECKING:
    from hankweave.app.hank_source import HankSource
    from hankweave.checkpoints import CheckpointStore
    from hankweave.config.hank import HankFile
    from hankweave.config.settings import Settings
    from hankweave.events.sink import EventSink
    from hankweave.execution.intent import GivenIntent, RunIntent
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.execution.setup import ExecutionSetup, ResolvedPaths
    from hankweave.harness import HarnessConfig
    from hankweave.mock_provider.script import MockScript
    from hankweave.mock_provider.server import MockProvider
    from hankweave.proxy.server import LlmProxy
    from hankweave.proxy.types import ProxyMiddleware
    from hankweave.registry import Registry
    from hankweave.runtime.metering import ProxyGate
    from hankweave.runtime.orchestrator import Runtime
    from hankweave.runtime.rig import CommandPolicy
    from hankweave.state.boot import OwnedExecution
    from hankweave.state.types import HankweaveState, Interruption

log = logging.getLogger("hankweave")

@dataclass
class Prepared:
    """What a launch prepared before the runtime starts (used by ``run`` and tests)."""

    hank: HankFile
    hank_path: Path
    settings: Settings
    setup: ExecutionSetup
    registry: Registry
    checkpoint_backend: type[CheckpointStore]
    source: RunSource
    """What plays the codons: the hank's agents, or a recording."""
    harness_configs: dict[str, HarnessConfig] = field(default_factory=dict)
    sinks: list[EventSink] = field(default_factory=list)
    mock_script: MockScript | None = None
    """The mock provider this run serves to its agents, if any."""
    intent: RunIntent | None = None
    """Where and how the run's agents run, recorded once the run owns the execution."""
    intent_script: bytes | None = None
    """The ``--mock-provider`` script given to this run, copied into the execution with it."""
    proxy_middleware: list[ProxyMiddleware] = field(default_factory=list)
    """The LLM proxy's middleware (``proxy.middleware``), built when the proxy runs."""

    def release(self) -> None:
        """Give back what preparing took (sinks, an unpacked recording) if no run follows."""
        for sink in self.sinks:
            _close_quietly(sink)
        self.source.close()


def prepare(request: LaunchRequest) -> Prepared:
    """Everything up to (not including) taking ownership of the execution directory."""
    from hankweave.plugins import make_plugin_manager
    from hankweave.registry import Registry, get_registry

    registry = get_registry() if dict(request.env) == dict(os.environ) else Registry(
        make_plugin_manager(env=request.env))
    given, (request, intent, script) = request, _with_intent(request)
    source = open_source(request, registry)
    try:
        prepared = _prepare(request, registry, source)
    except BaseException:
        source.close()
        raise
    prepared.intent, prepared.intent_script = intent, script
    source.announce(prepared.hank, command_policy(prepared), request)
    if given.execution is None and prepared.setup.is_resuming and given.replay is None:
        # Auto mode chose an execution to resume: its recorded intent applies as with -e (one
        # more pass, only when it differs; a confirmation already given is not asked again).
        from dataclasses import replace

        from hankweave.execution.intent import RunIntentError, load_run_intent

        try:
            recorded = load_run_intent(prepared.setup.layout)
        except RunIntentError as exc:
            prepared.release()
            raise LaunchError(str(exc)) from None
        if recorded is not None and recorded != intent:
            prepared.release()
            return prepare(replace(given, execution=str(prepared.setup.layout.path), yes=True))
    return prepared


def _with_intent(request: LaunchRequest) -> tuple[LaunchRequest, RunIntent, bytes | None]:
    """The request with the execution's recorded intent in every option its command line
    leaves out (a resume with ``-e``: :mod:`hankweave.execution.intent`), the intent this run
    records, and the ``--mock-provider`` script it was given (to copy into the execution)."""
    from dataclasses import replace

    from hankweave.config.run_options import RECORDED_OPTIONS
    from hankweave.execution.intent import (
        GivenIntent,
        RecordedScript,
        RunIntentError,
        load_run_intent,
        merge_intent,
        script_copy,
    )
    from hankweave.execution.layout import ExecutionLayout

    # A replay refuses --mock-provider (_mock_script) before its script is read.
    script = _given_script(request) if request.replay is None else None
    given = GivenIntent(
        mock_provider=(RecordedScript.of(Path(request.cwd, request.mock_provider or ""), script)
                       if script is not None else None),
        no_mock_provider=request.no_mock_provider, allow_commands=request.allow_commands,
        **{option.name: request.options.get(option.name) for option in RECORDED_OPTIONS})
    layout = ExecutionLayout(Path(request.cwd, request.execution or "."))
    resumes = bool(request.execution) and not request.start_new and request.replay is None
    try:
        recorded = load_run_intent(layout) if resumes else None
        intent = merge_intent(recorded, given)
        mock = request.mock_provider if request.mock_provider is not None else (
            str(script_copy(layout, intent)) if intent.mock_provider is not None else None)
    except RunIntentError as exc:
        raise LaunchError(str(exc)) from None
    if recorded is not None:
        _report_intent(request, layout, recorded, intent, given)
    recorded_options = {option.name: intent.value(option.name) for option in RECORDED_OPTIONS}
    return replace(request, mock_provider=mock, options={**request.options, **recorded_options},
                   allow_commands=intent.allow_commands), intent, script


def command_policy(prepared: Prepared) -> CommandPolicy:
    """What the run does with its hank's shell commands: a replay's hank is its recording
    author's code, so a replay skips them unless ``--allow-commands`` (recorded in the run
    intent, so a resume keeps the choice) asks to run them, each printed first."""
    allowed = prepared.intent is not None and prepared.intent.allow_commands
    return prepared.source.command_policy(allowed)


def _given_script(request: LaunchRequest) -> bytes | None:
    """The bytes of the ``--mock-provider`` script given, if one is (checked as a script later,
    with everything else, by :func:`_mock_script`)."""
    if request.mock_provider is None:
        return None
    path = Path(request.cwd, request.mock_provider)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise LaunchError(f"Mock provider script not found: {path}") from None
    except OSError as exc:
        raise LaunchError(f"Cannot read mock provider script {path}:"
                          f" {exc.strerror or exc}") from None


def _report_intent(request: LaunchRequest, layout: ExecutionLayout, recorded: RunIntent,
                   intent: RunIntent, given: GivenIntent) -> None:
    """Say which recorded options a resume reuses, and which it changes."""
    from hankweave.execution.intent import changes, reused

    taken = reused(recorded, given)
    if taken:
        mock = "[MOCK] " if intent.mock_provider is not None and given.mock_provider is None \
            else ""
        request.notify(f"{mock}Resuming with the options recorded in {layout.path}: "
                       f"{', '.join(taken)} (give an option again to replace it;"
                       " --no-mock-provider leaves the mock provider)")
    changed = changes(recorded, intent)
    if changed:
        request.notify("Run options changed since the last run of this execution (recorded"
                       " for its next resume):\n" + "\n".join(f"  {line}" for line in changed))


def _prepare(request: LaunchRequest, registry: Registry, source: RunSource) -> Prepared:
    # The order is the order of the checks a user sees: the mock script and the paths before
    # the hank is read, every preflight problem before anything is built, and the sinks built
    # before the execution directory is set up (a failing setup closes them).
    source.check_request(request)
    mock_script = _mock_script(request)
    paths, hank_source = _locate(request, source)
    checked = _check_hank_and_settings(request, registry, source, paths.hank_path)
    backend = _checkpoint_backend(registry, checked.settings.checkpoints.backend)
    source.check_hank(checked.hank)
    middleware = _build_middleware(registry, checked.settings, source)
    sinks = _build_sinks(registry, checked.settings, request, strict=checked.strict)
    setup = _set_up_execution(request, paths, checked.settings, source, sinks,
                              hank_source.meta_fields())
    for notice in setup.notices:
        request.notify(notice)
    # The runtime reads the hank's files where the execution recorded it (a replay: its copy).
    return Prepared(checked.hank, setup.hank_path or paths.hank_path, checked.settings, setup,
                    registry, backend, source, checked.harness_configs, sinks, mock_script,
                    proxy_middleware=middleware)


def _locate(request: LaunchRequest, source: RunSource) -> tuple[ResolvedPaths, HankSource]:
    """The data and the hank file of the run (a replay falls back to its recording's), and
    where the hank came from (a bundle or a remote repository is fetched and verified here)."""
    from hankweave.app.hank_source import resolve_hank_source
    from hankweave.execution.setup import resolve_data_and_hank_paths

    hank_arg, data_arg = source.hank_and_data(request)
    hank_source = resolve_hank_source(hank_arg, cwd=request.cwd, env=request.env,
                                      notify=request.notify, execution=request.execution)
    hank_arg = hank_source.argument
    paths = resolve_data_and_hank_paths(
        cwd=request.cwd, hank_arg=hank_arg, data_arg=data_arg,
        execution_arg=request.execution, inline_text=request.input_text,
        stdin_text=request.stdin_text, env=request.env)
    if not paths.hank_path.is_file():
        raise LaunchError(f"{paths.hank_path}: no hank file here (give HANK as a hank.json or"
                          " a directory holding one)")
    return paths, hank_source


@dataclass(frozen=True)
class _CheckedHank:
    """The hank and the settings of a run once every preflight rule has passed."""

    hank: HankFile
    settings: Settings
    harness_configs: dict[str, HarnessConfig]
    strict: bool
    """``HANKWEAVE_STRICT_PLUGINS``: a sink that cannot be built is fatal."""


def _check_hank_and_settings(request: LaunchRequest, registry: Registry,
                             source: RunSource, hank_path: Path) -> _CheckedHank:
    """Read the hank, resolve the settings layers and preflight both; raise on any error."""
    from hankweave.app.preflight import (
        check_agents,
        check_plugin_settings,
        check_sandbox,
        read_hank,
        run_preflight,
    )
    from hankweave.config.hank import HankFile
    from hankweave.config.settings import resolve_settings
    from hankweave.plugins import strict_plugins

    # Read once: its overrides are a settings layer; a problem is reported with every other
    # by the preflight below.
    loaded = read_hank(hank_path)
    raw_hank = loaded if isinstance(loaded, HankFile) else None
    resolved = resolve_settings(cwd=request.cwd, hank=raw_hank, env=request.env, cli=_cli_layer(
        request))
    for warning in resolved.warnings:
        request.notify(f"warning: {warning}")
    settings = resolved.settings
    if request.on_settings is not None:
        request.on_settings(settings)
    report = run_preflight(hank_path, env=request.env, registry=registry,
                           model_override=settings.model_override,
                           check_harnesses=source.checks_harnesses, loaded=loaded)
    strict = strict_plugins(request.env)
    plugins = check_plugin_settings(registry, resolved, strict=strict)
    report.errors += plugins.errors
    # The mock provider hands every agent and sentinel its own keys, and a replay calls no
    # model: no credential is needed.
    agents = check_agents(report, registry, plugins.harness_configs, request.env,
                          credentials=request.mock_provider is None and source.checks_harnesses)
    report.errors += agents.errors
    if report.hank is not None and source.checks_harnesses:  # a replay runs no agent
        report.errors += check_sandbox(report.hank, settings.sandbox)[0]
    for warning in report.warnings + plugins.warnings + agents.warnings:
        request.notify(f"warning: {warning}")
    report.raise_for_errors()
    assert report.hank is not None  # raise_for_errors() passed
    return _CheckedHank(report.hank, settings, plugins.harness_configs, strict)


def _set_up_execution(request: LaunchRequest, paths: ResolvedPaths, settings: Settings,
                      source: RunSource, sinks: list[EventSink],
                      hank_source: dict[str, Any]) -> ExecutionSetup:
    """Prepare the execution directory; if that fails, close the sinks already built."""
    from hankweave.execution.setup import (
        SetupRequest,
        decline,
        managed_executions_root,
        setup_execution,
    )
    from hankweave.state.lock import LockError

    to_keep = source.kept
    try:
        return setup_execution(SetupRequest(
            data_path=paths.data_path, hank_path=paths.hank_path,
            execution_path=(Path(os.path.abspath(request.cwd / request.execution))
                            if request.execution else None),
            start_new=request.start_new or to_keep is not None, force=request.force,
            ignore_data_mismatch=request.ignore_data_mismatch, yes=request.yes,
            no_wipe=request.no_wipe,
            copy_data=request.copy or paths.inline_data or source.copies_data,
            data_hash_time_limit_ms=settings.data_hash_time_limit,
            confirm=request.confirm or decline, env=request.env,
            managed_root=managed_executions_root(request.env, settings.execution_base_dir),
            recording=to_keep.root if to_keep is not None else None,
            # Shown in listings: a URL's password stays out of the execution's files.
            recording_source=(mask_url_credentials(request.replay)
                              if to_keep is not None and request.replay else None),
            hank_source=hank_source))
    except BaseException as exc:
        for sink in sinks:
            _close_quietly(sink)
        if isinstance(exc, LockError):  # -n -f on a directory a live runtime holds
            raise _refusal(exc) from None
        raise


def _mock_script(request: LaunchRequest) -> MockScript | None:
    """The ``--mock-provider`` script, checked before anything is created."""
    if request.mock_provider is None:
        return None
    from hankweave.mock_provider.script import load_script

    return load_script(Path(request.cwd, request.mock_provider))


def _checkpoint_backend(registry: Registry, name: str) -> type[CheckpointStore]:
    from hankweave.checkpoints import CheckpointError

    try:
        return registry.checkpoint_backend(name)
    except CheckpointError as exc:
        raise LaunchError(str(exc)) from None


def _build_middleware(registry: Registry, settings: Settings, source: RunSource
                      ) -> list[ProxyMiddleware]:
    """The LLM proxy's middleware, when the proxy runs: one that cannot be built stops the
    launch (it decides what reaches a provider)."""
    if settings.without_proxy or not source.checks_harnesses or not settings.proxy.middleware:
        return []
    from hankweave.app.plugin_settings import build_proxy_middleware

    built, problems = build_proxy_middleware(registry, settings.proxy.middleware)
    if problems:
        raise LaunchError("Cannot start: an enabled proxy middleware cannot be built:\n"
                          + "\n".join(f"  - {problem}" for problem in problems))
    return built


def _build_sinks(registry: Registry, settings: Settings, request: LaunchRequest, *,
                 strict: bool) -> list[EventSink]:
    """The enabled event sinks, built before anything is created: one that cannot be built is
    reported and skipped, or stops the launch under ``HANKWEAVE_STRICT_PLUGINS=1``."""
    from hankweave.app.plugin_settings import build_sinks

    built = build_sinks(registry, settings.events.sinks)
    if built.problems and strict:
        built.close()
        raise LaunchError("Cannot start: an enabled event sink cannot be built"
                          " (HANKWEAVE_STRICT_PLUGINS=1):\n"
                          + "\n".join(f"  - {problem}" for problem in built.problems))
    for problem in built.problems:
        request.notify(f"warning: {problem}; the sink is skipped")
    return built.sinks


def _cli_layer(request: LaunchRequest) -> dict[str, Any]:
    """The command-line settings layer: the run options given, and ``--headless``."""
    from hankweave.config.run_options import settings_layer

    return {**settings_layer(request.options), "headless": request.headless or None}


def _nothing_to_do(state: HankweaveState) -> bool:
    """Whether the execution has run every codon of its plan, so a resume has nothing to run.

    The thread's ``next_codon_id`` follows the original, which names no next codon after a
    failed run; a run stopped between codons (its ceiling spent, a stop) has codons left, and
    the runtime's resume finds them.
    """
    from hankweave.state.interruptions import resumable_run
    from hankweave.state.thread import analyze_execution_thread
    from hankweave.state.types import STOPPED_RUN_STATUSES

    if not state.runs or state.runs[0].status in (*STOPPED_RUN_STATUSES, "crashed"):
        return False
    if resumable_run(state) is not None:
        return False  # it waited for a person: its gate or its codon resumes
    thread = analyze_execution_thread(state)
    return not thread.failed and thread.next_codon_id is None and not thread.has_running_codon


def _refusal(exc: Exception, execution: Path | None = None) -> LaunchError:
    """A runtime lock held by a live runtime (or unreadable), or a state that cannot be
    loaded, as the launch's one-paragraph refusal (exit 2)."""
    from hankweave.state.store import StateUnreadableError

    if isinstance(exc, StateUnreadableError) and execution is not None:
        command = f"hankweave run -e {shlex.quote(str(execution))} --start-fresh"
        return LaunchError(
            f"Cannot resume {execution}: its state cannot be read ({exc}). Nothing was run,"
            " changed or deleted; starting over from an empty state would run every codon"
            f" again. To start over on purpose, keeping the damaged files: {command} (moves"
            f" them to {exc.hankweave_dir}/damaged-<timestamp>/; agentRoot/ and the journal"
            " are kept).")
    return LaunchError(str(exc), held_by=getattr(exc, "holder", None))


async def run_prepared(prepared: Prepared, request: LaunchRequest) -> int:
    """Own the execution directory, run the hank, and give the directory back."""
    from hankweave.state.boot import take_ownership
    from hankweave.state.lock import LockError, heartbeat_forever
    from hankweave.state.store import StateUnreadableError

    layout = prepared.setup.layout
    try:
        owned = await take_ownership(layout.hankweave_dir, start_fresh=request.start_fresh)
    except (LockError, StateUnreadableError) as exc:
        prepared.release()
        raise _refusal(exc, layout.path) from None
    if owned.damaged_dir is not None:
        request.notify(f"--start-fresh: moved the unreadable state files to {owned.damaged_dir}"
                       " (kept); the execution's state starts over, agentRoot/ as it is.")
    try:
        if _stopped_early(request):
            for sink in prepared.sinks:
                _close_quietly(sink)
            return EXIT_SIGTERM
        if prepared.intent is not None:  # under the lock: a refused run records nothing
            from hankweave.execution.intent import save_run_intent

            save_run_intent(layout, prepared.intent, prepared.intent_script)
        # A crashed run found here is told by the runtime's run.crashed event, with what
        # happens next (hankweave/runtime/crashes.py).
        if _nothing_to_do(owned.store.state):
            request.notify(f"Nothing to do: every codon of {layout.path} has finished. Start"
                           " a new execution with -n (or roll back with `hankweave rollback`).")
            for sink in prepared.sinks:
                _close_quietly(sink)
            return EXIT_OK
        if request.on_start is not None:
            request.on_start(owned.store.state, layout.path)
        _announce_sandbox(prepared, request)
        heartbeat = asyncio.create_task(heartbeat_forever(owned.lock))
        try:
            code = await _drive(prepared, request, owned)
        finally:
            heartbeat.cancel()
        if request.on_end is not None:
            request.on_end(owned.store.state, layout.path, code)
            return code
        if code == EXIT_INTERRUPTED:
            _waiting(owned.store.state, layout, request.notify)
        _where(layout, request.notify)
        return code
    finally:
        await owned.release()
        prepared.source.close()


def _runtime(prepared: Prepared, request: LaunchRequest, owned: OwnedExecution,
             checkpoints: CheckpointStore, emit: Callable[[str, Any], Any], *,
             provider_env: Mapping[str, str], observer_env: Mapping[str, str],
             proxy: ProxyGate | None) -> Runtime:
    from hankweave.config.settings import settings_env
    from hankweave.runtime.budget import RunBudget, log_last_write
    from hankweave.runtime.orchestrator import PromptBuilder, Runtime, RuntimeConfig
    from hankweave.runtime.planner import build_initial_plan

    settings, layout = prepared.settings, prepared.setup.layout
    env = {**request.env, **settings_env(settings)}  # anthropicBaseUrl
    # Ceilings are cumulative across resumes: every earlier run's money and time count.
    budget = RunBudget.of_settings(settings, prepared.hank).seed(
        owned.store.state, log_last_write(layout.path))
    config = RuntimeConfig(
        settings=settings, env=env,
        harnesses=prepared.source, harness_configs=prepared.harness_configs,
        wait_for_answers=request.wait_for_answers, commands=command_policy(prepared),
        sentinels=prepared.source.sentinels, humans=prepared.source.humans, proxy=proxy)
    return Runtime(
        hank=prepared.hank, hank_dir=prepared.hank_path.parent, execution_dir=layout.path,
        owned=owned, checkpoints=checkpoints, registry=prepared.registry, emit=emit, config=config, budget=budget,
        prompt_builder=PromptBuilder(prepared.hank, prepared.hank_path.parent,
                                     layout.agent_root, env, provider_env=provider_env,
                                     observer_env=observer_env),
        plan_builder=build_initial_plan)


async def _drive(prepared: Prepared, request: LaunchRequest, owned: OwnedExecution) -> int:
    # The local servers the agents call stop last, however the run ends (or fails to start).
    async with contextlib.AsyncExitStack() as servers:
        mock = await _start_mock_provider(prepared, request)
        if mock is not None:
            servers.push_async_callback(mock.stop)
        gate = _proxy_gate(prepared, request)
        proxy = await _start_proxy(prepared, request, mock, gate) if gate is not None else None
        if proxy is not None:
            servers.push_async_callback(proxy.stop)
        return await _drive_runtime(prepared, request, owned, mock, proxy, gate)


async def _drive_runtime(prepared: Prepared, request: LaunchRequest, owned: OwnedExecution,
                         mock: MockProvider | None, proxy: LlmProxy | None,
                         gate: ProxyGate | None) -> int:
    from hankweave.app.stop_latch import rearm_latch
    from hankweave.events.bus import EventBus
    from hankweave.events.delivery import QueuedSink
    from hankweave.events.journal import EventJournal
    from hankweave.server import ControlServerError, serve_runtime

    settings, layout = prepared.settings, prepared.setup.layout
    handler = _server_log(layout.server_log)
    checkpoints = prepared.checkpoint_backend(layout.path)
    bus = EventBus(EventJournal(layout.events_file))
    for sink in prepared.sinks:  # each fed from its own worker thread, never blocking a codon
        _bind_quietly(sink, layout.path)
        bus.add_sink(QueuedSink(sink, report=bus.emit))
    on_event = request.on_event
    if on_event is not None:
        bus.subscribe(lambda event: on_event(event.to_wire()))
    if proxy is not None:
        proxy.on_record = lambda record: bus.emit("proxy.request", record.event())
    direct = mock.client_env() if mock is not None else {}
    runtime = _runtime(prepared, request, owned, checkpoints, bus.emit,
                       provider_env={**direct, **proxy.client_env()} if proxy else direct,
                       observer_env=direct,
                       proxy=gate)
    bus.subscribe(runtime.services.sentinels.observe)
    bus.run_id_source = lambda: runtime.state.current_run_id
    loop = asyncio.get_running_loop()
    installed = _install_signals(loop, runtime)
    server = None
    try:
        if _stopped_early(request):  # held until the loop took the signals over
            return EXIT_SIGTERM
        # Before boot: a port that cannot be bound stops the launch before anything is
        # recorded; control commands are refused until the runtime waits for one.
        try:
            server = await serve_runtime(runtime, bus, owned, host=settings.host,
                                         port=settings.port, idle_timeout=settings.idle_timeout,
                                         notify=request.notify,
                                         proxy_port=proxy.port if proxy is not None else None)
        except ControlServerError as exc:
            raise LaunchError(str(exc)) from None
        watch = ProxyWatch(proxy, runtime, request) if proxy is not None else None
        watching = asyncio.create_task(watch.watch()) if watch is not None else None
        try:
            await runtime.boot()
            code = await runtime.drive()
            if watch is not None:
                await watch.last_look()
            await runtime.finish()
        finally:
            if watching is not None:
                watching.cancel()
        return code
    finally:
        if server is not None:
            await server.stop()  # after the run's last events, before the bus closes
        for signum in installed:
            loop.remove_signal_handler(signum)
        rearm_latch()
        bus.close()  # flushes every sink's queue
        runtime.ctx.checkpoints.close()
        checkpoints.close()
        for name in _LOGGED:
            logging.getLogger(name).removeHandler(handler)
        handler.close()


def _proxy_gate(prepared: Prepared, request: LaunchRequest) -> ProxyGate | None:
    """The runtime's side of the LLM proxy, when agents call their providers through it (a
    replay calls none)."""
    if prepared.settings.without_proxy:
        return None
    if not prepared.source.checks_harnesses:
        request.notify("The LLM proxy does not run: a replay calls no provider")
        return None
    from hankweave.runtime.metering import ProxyGate, wire_prices

    return ProxyGate(wire_prices(prepared.registry.models()))


async def _start_proxy(prepared: Prepared, request: LaunchRequest,
                       mock: MockProvider | None, gate: ProxyGate) -> LlmProxy:
    """The run's LLM proxy on 127.0.0.1 (``--proxy``; docs/proxy.md), in front of the mock
    provider under ``--mock-provider``: on the WebSocket port + 1 when a port is given (a free
    one if that is taken), else on a free port."""
    from hankweave.config.settings import agent_env, settings_env
    from hankweave.proxy.server import LlmProxy, upstreams_for

    settings = prepared.settings

    env = agent_env({**request.env, **settings_env(settings)}, {})
    upstreams = upstreams_for(env, settings.anthropic_base_url,
                              mock.base_url if mock is not None else None)
    proxy = LlmProxy(upstreams, gate=gate, middleware=prepared.proxy_middleware,
                     log_path=prepared.setup.layout.proxy_log,
                     port=settings.port + 1 if 0 < settings.port < 65535 else 0)
    try:
        await proxy.start()
    except OSError as exc:
        raise LaunchError(f"Cannot start the LLM proxy: {exc.strerror or exc}") from None
    shown = ", ".join(f"{upstream.name} -> {mask_url_credentials(upstream.url)}"
                      for upstream in upstreams)
    for codon in prepared.hank.codon_configs().values():
        overridden = sorted(set(codon.env or {}) & set(proxy.client_env()))
        if overridden:
            request.notify(f"warning: codon {codon.id} sets {', '.join(overridden)} in its env;"
                           " under --proxy its agent calls the proxy, whose upstreams are the"
                           " run's (anthropicBaseUrl, the environment)")
    request.notify(f"LLM proxy: {proxy.base_url} ({shown}; request log:"
                   f" {prepared.setup.layout.proxy_log})")
    return proxy


PROXY_WATCH_S = 0.5
"""How often a run checks that its LLM proxy still answers."""
PROXY_WATCH_MISSES = 3
"""Checks in a row the proxy must miss to be down (one miss may be a moment of load)."""


class ProxyWatch:
    """Stops the run, saying why, once the LLM proxy no longer answers: every agent request
    would fail, and each codon would be recorded failed for a reason that is not its own."""

    def __init__(self, proxy: LlmProxy, runtime: Runtime, request: LaunchRequest) -> None:
        self.proxy, self.runtime, self.request = proxy, runtime, request
        self.reported = False

    async def watch(self) -> None:
        missed = 0
        while not self.reported:
            await asyncio.sleep(PROXY_WATCH_S)
            problem = await self.proxy.answering()
            missed = 0 if problem is None else missed + 1
            if missed >= PROXY_WATCH_MISSES and problem is not None:
                self.report(problem)
                self.runtime.commands.request_shutdown("LLM proxy down")

    async def last_look(self) -> None:
        """When the run ended before the watch saw it (an agent failed at once), still say
        why: its failure was the proxy's."""
        if not self.reported and (problem := await self.proxy.answering()) is not None:
            self.report(problem)

    def report(self, problem: str) -> None:
        self.reported = True
        message = (f"The LLM proxy at {self.proxy.base_url} stopped answering ({problem}):"
                   " agents cannot reach their providers, so the run stops. Resume it with:"
                   f" hankweave run -e {shlex.quote(str(self.runtime.execution_dir))}")
        self.runtime.ctx.reporter.error(message, fatal=True, code="proxy-down")
        self.request.notify(f"error: {message}")


async def _start_mock_provider(prepared: Prepared, request: LaunchRequest) -> MockProvider | None:
    """The run's mock provider, serving on a free port of 127.0.0.1, if it has one."""
    if prepared.mock_script is None:
        return None
    from hankweave.mock_provider.server import MockProvider

    log = prepared.setup.layout.mock_provider_log
    mock = MockProvider(prepared.mock_script, log_path=log)
    try:
        await mock.start()
    except OSError as exc:
        raise LaunchError(f"Cannot start the mock provider: {exc.strerror or exc}") from None
    request.notify(f"[MOCK] Agents talk to the mock provider at {mock.base_url}"
                   f" (request log: {log})")
    if prepared.settings.anthropic_base_url is not None:
        request.notify(f"[MOCK] anthropicBaseUrl {prepared.settings.anthropic_base_url} is not"
                       " used: the mock provider answers every model")
    return mock


def _waiting(state: HankweaveState, layout: ExecutionLayout,
             notify: Callable[[str], None]) -> None:
    """What the run waits for, and how to answer it: complete commands, ready to paste."""
    from hankweave.state.interruptions import pending

    lines = ["\nThe run waits for a person (exit 3). Pending interruptions:"]
    for item in pending(state):
        options = f" [{' | '.join(item.options)}]" if item.options else ""
        deadline = f" (default {item.default_answer!r} at {item.deadline})" if item.deadline \
            else ""
        lines.append(f"  {item.id}  {item.codon_id}: {item.question}{options}{deadline}")
    execution = shlex.quote(str(layout.path))
    for n, item in enumerate(pending(state)):
        lines.append(f"{'Answer:' if n == 0 else '':9}hankweave answer -e {execution}"
                     f" {shlex.quote(item.id)} {answer_placeholder(item)}")
    # The execution's recorded intent (mock provider, model override, ...) comes with it.
    lines.append(f"Resume:  hankweave run -e {execution}")
    notify("\n".join(lines))


def answer_placeholder(item: Interruption) -> str:
    """The answer part of an ``answer`` hint: an approval's ``--approve``, a budget ceiling's
    ``--extend`` by half the ceiling again, a question's first option, or a placeholder for
    free text (quoted: it pastes as one argument)."""
    if item.kind == "budget" and item.budget is not None:
        from hankweave.links import suggested_extensions

        amount = suggested_extensions(item.budget.currency, item.budget.limit)[0]
        return f"--extend {amount:g}{'s' if item.budget.currency == 'duration' else ''}"
    if item.kind != "question":
        return "--approve"
    answer = item.options[0] if item.options else "<your answer>"
    # An answer that looks like an option is passed after `--`.
    return f"-- {shlex.quote(answer)}" if answer.startswith("-") else shlex.quote(answer)


def _where(layout: ExecutionLayout, notify: Callable[[str], None]) -> None:
    """Tell the user where everything this run recorded is, and how to look at it."""
    execution = shlex.quote(str(layout.path))
    notify(
        f"\nExecution directory: {layout.path}\n"
        f"  state        {layout.state_file}\n"
        f"  journal      {layout.events_file}\n"
        f"  codon logs   {layout.runs_dir}/<run>/<codon>-claude.log\n"
        f"  checkpoints  {layout.checkpoints_dir}\n"
        f"  workspace    {layout.agent_root}\n"
        + (f"  proxy log    {layout.proxy_log}\n" if layout.proxy_log.exists() else "")
        + f"Inspect it:   hankweave inspect thread -e {execution}\n"
        f"              hankweave inspect state -e {execution}\n"
        f"              hankweave journal -e {execution}")


def _announce_sandbox(prepared: Prepared, request: LaunchRequest) -> None:
    """Say once per execution whether its agents are sandboxed (docs/sandbox.md)."""
    from hankweave.app.preflight import check_sandbox
    from hankweave.runtime.notices import GivenWarnings

    if not prepared.source.checks_harnesses:
        return  # a replay runs no agent
    _, notice = check_sandbox(prepared.hank, prepared.settings.sandbox)
    layout = prepared.setup.layout
    if notice is not None and GivenWarnings(layout.given_warnings_file).first_time(notice):
        request.notify(notice)


def _install_signals(loop: asyncio.AbstractEventLoop, runtime: Runtime) -> list[int]:
    installed: list[int] = []
    for signum, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
        try:
            loop.add_signal_handler(signum, runtime.commands.request_shutdown, name)
            installed.append(signum)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals
            pass
    return installed


_LOGGED = ("hankweave", "aiohttp", "asyncio")
"""What ``server.log`` records: the runtime's own lines, and its local servers' (the mock's,
the LLM proxy's, the event loop's), which would otherwise go to the terminal."""


def _server_log(path: Path) -> logging.Handler:
    private_dir(path.parent)
    os.close(open_private(path, os.O_WRONLY | os.O_APPEND))  # 0600 before the handler opens it
    handler = logging.FileHandler(path, encoding="utf-8")
    # Masks URL credentials in every line, whatever logged it (a library's error text too).
    handler.setFormatter(MaskingFormatter("[%(asctime)s] [%(levelname)s] %(name)s: %(message)s"))
    for name in _LOGGED:
        logging.getLogger(name).addHandler(handler)
    logging.getLogger("hankweave").setLevel(logging.DEBUG)
    return handler


def _bind_quietly(sink: EventSink, execution_dir: Path) -> None:
    try:
        sink.bind(execution_dir)
    except Exception:
        log.exception("event sink %r failed to take the execution directory", sink.label)


def _close_quietly(sink: EventSink) -> None:
    try:
        sink.close()
    except Exception:
        log.exception("event sink %r failed to close", sink.label)


def warm_up() -> None:
    """Import what a run needs and load the plugins now, ahead of the first :func:`launch`:
    for long-lived processes that run many (an executor's worker processes), whose first
    codon would otherwise start half a second late."""
    import importlib

    from hankweave.registry import get_registry

    for module in ("hankweave.runtime.orchestrator", "hankweave.server"):
        importlib.import_module(module)
    get_registry().checkpoint_backends()


def launch(request: LaunchRequest) -> int:
    """Run a hank from start to finish; return the process exit code.  A SIGTERM before the
    run's event loop handles it stops the launch cleanly too (:mod:`hankweave.app.stop_latch`)."""
    from hankweave.app.stop_latch import StopLatch

    with StopLatch():
        prepared = prepare(request)
        if _stopped_early(request):
            prepared.release()
            return EXIT_SIGTERM
        return run_async(run_prepared(prepared, request))


def _stopped_early(request: LaunchRequest) -> bool:
    from hankweave.app.stop_latch import latched_stop

    name = latched_stop()
    if name is not None:
        request.notify(f"Stopped by {name} before the run started; nothing ran")
    return name is not None


LEFTOVER_TIMEOUT_S = 5.0
"""How long tasks still running when a run ends get to finish once cancelled."""

T = TypeVar("T")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, except that what is left running at the end is cancelled and given
    :data:`LEFTOVER_TIMEOUT_S` to finish, then abandoned: a harness that ignores cancellation
    (which the runtime already stopped waiting for) cannot keep the process from exiting."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not pending:
        return
    for task in pending:
        task.cancel()
    done, stuck = loop.run_until_complete(asyncio.wait(pending, timeout=LEFTOVER_TIMEOUT_S))
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.debug("a task left at the end failed: %r", task.exception())
    if stuck:
        log.warning("%d task(s) ignored cancellation and were abandoned at exit (a harness"
                    " that does not stop?)", len(stuck))
