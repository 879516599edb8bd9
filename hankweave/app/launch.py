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
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hankweave.app.playback import REPLAY_HARNESS, Playback
from hankweave.config.errors import ConfigError
from hankweave.exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_SIGTERM, EXIT_USAGE
from hankweave.fsutil import open_private, private_dir
from hankweave.secrets import MaskingFormatter

if TYPE_CHECKING:
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
    from hankweave.registry import Registry
    from hankweave.runtime.orchestrator import Runtime
    from hankweave.runtime.rig import CommandPolicy
    from hankweave.state.boot import OwnedExecution
    from hankweave.state.lock import LockInfo
    from hankweave.state.types import HankweaveState, Interruption

log = logging.getLogger("hankweave")

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
    no_wipe: bool = False
    copy: bool = False
    input_text: str | None = None
    output: str | None = None
    model: str | None = None
    port: int | None = None
    host: str | None = None
    headless: bool = False
    autostart: bool | None = None
    max_cost: float | None = None
    max_time: float | None = None
    shim_idle_timeout: int | None = None
    ignore_rig_failures: bool | None = None
    """True or False: given (``--[no-]ignore-rig-failures``); None: as recorded (a resume)."""
    overwrite_output: bool = False
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


@dataclass
class Prepared:
    """What a launch prepared before the runtime starts (used by ``run`` and tests)."""

    hank: HankFile
    hank_path: Path
    settings: Settings
    setup: ExecutionSetup
    registry: Registry
    checkpoint_backend: type[CheckpointStore]
    harness_configs: dict[str, HarnessConfig] = field(default_factory=dict)
    sinks: list[EventSink] = field(default_factory=list)
    recording: Playback | None = None
    mock_script: MockScript | None = None
    """The mock provider this run serves to its agents, if any."""
    intent: RunIntent | None = None
    """Where and how the run's agents run, recorded once the run owns the execution."""
    intent_script: bytes | None = None
    """The ``--mock-provider`` script given to this run, copied into the execution with it."""

    def release(self) -> None:
        """Give back what preparing took (sinks, an unpacked recording) if no run follows."""
        for sink in self.sinks:
            _close_quietly(sink)
        if self.recording is not None:
            self.recording.close()


def prepare(request: LaunchRequest) -> Prepared:
    """Everything up to (not including) taking ownership of the execution directory."""
    from hankweave.plugins import make_plugin_manager
    from hankweave.registry import Registry, get_registry

    registry = get_registry() if dict(request.env) == dict(os.environ) else Registry(
        make_plugin_manager(env=request.env))
    given, (request, intent, script) = request, _with_intent(request)
    recording = (_open_recording(request, registry) if request.replay
                 else _kept_recording(request, registry))
    try:
        prepared = _prepare(request, registry, recording)
    except BaseException:
        if recording is not None:
            recording.close()
        raise
    prepared.intent, prepared.intent_script = intent, script
    _list_recorded_commands(prepared, request)
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
        no_mock_provider=request.no_mock_provider, model=request.model,
        max_cost=request.max_cost, max_time=request.max_time,
        shim_idle_timeout=request.shim_idle_timeout,
        ignore_rig_failures=request.ignore_rig_failures, allow_commands=request.allow_commands)
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
    return replace(request, mock_provider=mock, model=intent.model, max_cost=intent.max_cost,
                   max_time=intent.max_time, shim_idle_timeout=intent.shim_idle_timeout,
                   ignore_rig_failures=intent.ignore_rig_failures,
                   allow_commands=intent.allow_commands), intent, script


def command_policy(prepared: Prepared) -> CommandPolicy:
    """What the run does with its hank's shell commands: a replay's hank is its recording
    author's code, so a replay skips them unless ``--allow-commands`` (recorded in the run
    intent, so a resume keeps the choice) asks to run them, each printed first."""
    from hankweave.runtime.rig import CommandPolicy

    if prepared.recording is None:
        return CommandPolicy.RUN
    allowed = prepared.intent is not None and prepared.intent.allow_commands
    return CommandPolicy.ANNOUNCE if allowed else CommandPolicy.SKIP


def _list_recorded_commands(prepared: Prepared, request: LaunchRequest) -> None:
    """Before a replay starts: one notice listing every command its hank would run, and
    whether they run."""
    from hankweave.config.hank import RigCommand
    from hankweave.runtime.rig import CommandPolicy

    policy = command_policy(prepared)
    if policy is CommandPolicy.RUN:
        return
    lines = []
    for codon_id, codon in prepared.hank.codon_configs().items():
        for op in codon.rig_setup or ():
            if isinstance(op, RigCommand):
                lines.append(f"  codon {codon_id}, rig setup: {op.command.run}")
        for index, group in enumerate(codon.output_files or ()):
            for before in group.before_copy or ():
                lines.append(f"  codon {codon_id}, output group {index} beforeCopy:"
                             f" {before.command.run}")
    if not lines:
        return
    if policy is CommandPolicy.SKIP:
        head = (f"[REPLAY] The recording's hank holds {len(lines)} shell command(s). None of"
                " them runs: a recording's commands are its author's code; pass"
                " --allow-commands to run them (rig copies and the recorded file changes still"
                " apply):")
        lines.append(f"Read them; to replay with them: {_allow_commands_hint(request)}")
    else:
        head = (f"[REPLAY] --allow-commands: the recording's {len(lines)} shell command(s) run"
                " on this machine as you, each printed before it runs:")
    request.notify("\n".join([head, *lines]))


def _allow_commands_hint(request: LaunchRequest) -> str:
    """The pasteable command that plays the same recording with its commands: a fresh replay
    with the same hank, data, output folder and pace (in a new managed directory), or the
    resumed replay's directory again."""
    if request.replay is not None:
        words = ["hankweave", "replay", request.replay,
                 *(given for given in (request.hank, request.data) if given is not None)]
        if request.output is not None:
            words += ["-o", request.output]
        if request.replay_speed != "instant":
            words += ["--replay-speed", request.replay_speed]
        return shlex.join([*words, "--allow-commands"])
    return f"hankweave run -e {shlex.quote(request.execution or '.')} --allow-commands"


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


def _open_recording(request: LaunchRequest, registry: Registry) -> Playback:
    """Open the replay source; replay always starts a new execution directory."""
    if request.execution:
        from hankweave.execution.layout import ExecutionLayout

        if ExecutionLayout(Path(request.cwd, request.execution)).state_file.exists():
            raise LaunchError(f"{request.execution} already holds an execution; a replay always"
                              " starts a fresh one (omit -e, or give a new directory; to resume"
                              f" a replay: hankweave run -e {shlex.quote(request.execution)})")
    recording = _play(request, registry, Path(request.cwd, request.replay or ""),
                      f"replay {request.replay}")
    request.notify(f"[REPLAY] Starting a fresh run from the recording {request.replay}")
    return recording


def _kept_recording(request: LaunchRequest, registry: Registry) -> Playback | None:
    """The recording a replayed execution keeps, when ``-e`` resumes one: the rest of a replay
    is played from it, never by a live agent."""
    if not request.execution or request.start_new:
        return None
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.execution.meta import ExecutionMetaError, load_execution_meta

    layout = ExecutionLayout(Path(request.cwd, request.execution))
    try:
        kept = load_execution_meta(layout.meta_file).recording
    except ExecutionMetaError:
        return None  # no execution yet, or one whose metadata setup reports on
    if kept is None:
        return None
    recording = _play(request, registry, layout.path / kept,
                      f"resume the replay in {request.execution}")
    request.notify(f"[REPLAY] Resuming the replay in {layout.path} from the recording it keeps")
    return recording


def _play(request: LaunchRequest, registry: Registry, source: Path, action: str) -> Playback:
    """Open ``source`` with the replay plugin; ``action`` names what it is for in errors."""
    harness = registry.harnesses().get(REPLAY_HARNESS)
    opener = getattr(harness, "open_recording", None)
    if opener is None:
        raise LaunchError(f"Cannot {action}: replay needs the replay plugin: pip install"
                          " hankweave-replay")
    limit = request.env.get("HANKWEAVE_REPLAY_MAX_DELAY_MS")
    try:
        recording: Playback = opener(source, speed=request.replay_speed,
                                     max_delay_ms=int(limit) if limit else None)
    except (ValueError, OSError) as exc:
        raise LaunchError(f"Cannot {action}: {exc}") from None
    for warning in recording.warnings:
        request.notify(f"warning: {warning}")
    return recording


def _prepare(request: LaunchRequest, registry: Registry,
             recording: Playback | None) -> Prepared:
    # The order is the order of the checks a user sees: the mock script and the paths before
    # the hank is read, every preflight problem before anything is built, and the sinks built
    # before the execution directory is set up (a failing setup closes them).
    mock_script = _mock_script(request, recording)
    paths = _locate(request, recording)
    checked = _check_hank_and_settings(request, registry, recording, paths.hank_path)
    backend = _checkpoint_backend(registry, checked.settings.checkpoints.backend)
    if recording is not None:
        _check_recording(recording, checked.hank)
    sinks = _build_sinks(registry, checked.settings, request, strict=checked.strict)
    setup = _set_up_execution(request, paths, checked.settings, recording, sinks)
    for notice in setup.notices:
        request.notify(notice)
    # The runtime reads the hank's files where the execution recorded it (a replay: its copy).
    return Prepared(checked.hank, setup.hank_path or paths.hank_path, checked.settings, setup,
                    registry, backend, checked.harness_configs, sinks, recording, mock_script)


def _kept_by_replay(request: LaunchRequest, recording: Playback | None) -> Playback | None:
    """The recording the new execution keeps a copy of.

    Replaying a source starts afresh and keeps a copy of its recording; without a source,
    the recording is the one the resumed replay kept.
    """
    return recording if request.replay is not None else None


def _locate(request: LaunchRequest, recording: Playback | None) -> ResolvedPaths:
    """The data and the hank file of the run; a replay falls back to its recording's."""
    from hankweave.execution.setup import resolve_data_and_hank_paths

    hank_arg, data_arg = request.hank, request.data
    if recording is not None:
        hank_arg = hank_arg or str(recording.hank_path)
        data_arg = data_arg or (str(recording.data_path) if recording.data_path else
                                str(_empty_data_dir(request)))
    paths = resolve_data_and_hank_paths(
        cwd=request.cwd, hank_arg=hank_arg, data_arg=data_arg,
        execution_arg=request.execution, inline_text=request.input_text,
        stdin_text=request.stdin_text, env=request.env)
    if not paths.hank_path.is_file():
        raise LaunchError(f"{paths.hank_path}: no hank file here (give HANK as a hank.json or"
                          " a directory holding one)")
    return paths


@dataclass(frozen=True)
class _CheckedHank:
    """The hank and the settings of a run once every preflight rule has passed."""

    hank: HankFile
    settings: Settings
    harness_configs: dict[str, HarnessConfig]
    strict: bool
    """``HANKWEAVE_STRICT_PLUGINS``: a sink that cannot be built is fatal."""


def _check_hank_and_settings(request: LaunchRequest, registry: Registry,
                             recording: Playback | None, hank_path: Path) -> _CheckedHank:
    """Read the hank, resolve the settings layers and preflight both; raise on any error."""
    from hankweave.app.preflight import check_plugin_settings, read_hank, run_preflight
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
    report = run_preflight(hank_path, env=request.env, registry=registry,
                           model_override=settings.model_override,
                           check_harnesses=recording is None, loaded=loaded)
    strict = strict_plugins(request.env)
    plugins = check_plugin_settings(registry, resolved, strict=strict)
    report.errors += plugins.errors
    for warning in report.warnings + plugins.warnings:
        request.notify(f"warning: {warning}")
    report.raise_for_errors()
    assert report.hank is not None  # raise_for_errors() passed
    return _CheckedHank(report.hank, settings, plugins.harness_configs, strict)


def _set_up_execution(request: LaunchRequest, paths: ResolvedPaths, settings: Settings,
                      recording: Playback | None, sinks: list[EventSink]) -> ExecutionSetup:
    """Prepare the execution directory; if that fails, close the sinks already built."""
    from hankweave.execution.setup import SetupRequest, decline, setup_execution
    from hankweave.state.lock import LockError

    to_keep = _kept_by_replay(request, recording)
    try:
        return setup_execution(SetupRequest(
            data_path=paths.data_path, hank_path=paths.hank_path,
            execution_path=(Path(os.path.abspath(request.cwd / request.execution))
                            if request.execution else None),
            start_new=request.start_new or to_keep is not None, force=request.force,
            yes=request.yes, no_wipe=request.no_wipe,
            # A replay's data is copied: the execution holds everything it plays.
            copy_data=request.copy or paths.inline_data or recording is not None,
            data_hash_time_limit_ms=settings.data_hash_time_limit,
            confirm=request.confirm or decline, env=request.env,
            recording=to_keep.root if to_keep is not None else None))
    except BaseException as exc:
        for sink in sinks:
            _close_quietly(sink)
        if isinstance(exc, LockError):  # -n -f on a directory a live runtime holds
            raise _refusal(exc) from None
        raise


def _mock_script(request: LaunchRequest, recording: Playback | None) -> MockScript | None:
    """The ``--mock-provider`` script, checked before anything is created."""
    if request.mock_provider is None:
        return None
    if recording is not None:
        raise LaunchError("--mock-provider does not go with a replay: a replay plays its"
                          " recording and talks to no provider")
    from hankweave.mock_provider.script import load_script

    return load_script(Path(request.cwd, request.mock_provider))


def _checkpoint_backend(registry: Registry, name: str) -> type[CheckpointStore]:
    from hankweave.checkpoints import CheckpointError

    try:
        return registry.checkpoint_backend(name)
    except CheckpointError as exc:
        raise LaunchError(str(exc)) from None


def _check_recording(recording: Playback, hank: HankFile) -> None:
    from hankweave.runtime.planner import expected_codon_ids

    missing = recording.missing_logs(expected_codon_ids(hank))
    if missing:
        raise LaunchError(f"Cannot replay: {len(missing)} codon log(s) not found in the"
                          f" recording: {', '.join(missing)} (was it recorded from another"
                          " version of this hank?)")


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


def _empty_data_dir(request: LaunchRequest) -> Path:
    """A stable, empty data source for replays whose recording carries no data."""
    from hankweave.execution.setup import default_input_cache_dir

    path = default_input_cache_dir(request.env).parent / "empty-data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cli_layer(request: LaunchRequest) -> dict[str, Any]:
    budget = {"maxDollars": request.max_cost, "maxTimeSeconds": request.max_time}
    return {
        "port": request.port, "host": request.host, "model": request.model,
        "outputDirectory": request.output, "shimIdleTimeout": request.shim_idle_timeout,
        "ignoreRigFailures": request.ignore_rig_failures or None,
        "overwriteOutput": request.overwrite_output or None,
        "headless": request.headless or None, "autostart": request.autostart,
        "budget": budget if any(v is not None for v in budget.values()) else None,
    }


def _nothing_to_do(state: HankweaveState) -> bool:
    """Whether the execution has run every codon of its plan, so a resume has nothing to run.

    The thread's ``next_codon_id`` follows the original, which names no next codon after a
    failed run; a run stopped between codons (its ceiling spent, a stop) has codons left, and
    the runtime's resume finds them.
    """
    from hankweave.state.interruptions import resumable_run
    from hankweave.state.thread import analyze_execution_thread

    if not state.runs or state.runs[0].status in ("failed", "crashed"):
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
        heartbeat = asyncio.create_task(heartbeat_forever(owned.lock))
        try:
            code = await _drive(prepared, request, owned)
        finally:
            heartbeat.cancel()
        if code == EXIT_INTERRUPTED:
            _waiting(owned.store.state, layout, request.notify)
        _where(layout, request.notify)
        return code
    finally:
        await owned.release()
        if prepared.recording is not None:
            prepared.recording.close()


def _runtime(prepared: Prepared, request: LaunchRequest, owned: OwnedExecution,
             checkpoints: CheckpointStore, emit: Callable[[str, Any], Any], *,
             provider_env: Mapping[str, str]) -> Runtime:
    from hankweave.runtime.budget import RunBudget, log_last_write
    from hankweave.runtime.orchestrator import PromptBuilder, Runtime, RuntimeConfig
    from hankweave.runtime.planner import build_initial_plan

    settings, layout = prepared.settings, prepared.setup.layout
    # Ceilings are cumulative across resumes: every earlier run's money and time count.
    budget = RunBudget(
        max_dollars=settings.budget.max_dollars, max_seconds=settings.budget.max_time_seconds,
        allocation=settings.budget.allocation, shares=dict(settings.budget.shares or {}),
        on_exceeded=settings.budget.on_exceeded, hank=prepared.hank,
    ).seed(owned.store.state, log_last_write(layout.path))
    config = RuntimeConfig(
        headless=settings.headless, autostart=settings.autostart,
        ignore_rig_failures=settings.ignore_rig_failures,
        output_dir=settings.output_directory, overwrite_output=settings.overwrite_output,
        shim_idle_timeout=settings.shim_idle_timeout,
        keep_checkpoints_per_run=settings.checkpoints.keep_last_per_run,
        checkpoint_change_hints=settings.checkpoints.change_hints, env=request.env,
        harness_override=prepared.recording.harness if prepared.recording else None,
        harness_configs=prepared.harness_configs,
        wait_for_answers=request.wait_for_answers, commands=command_policy(prepared),
        # A replay runs no sentinels and asks no one.
        sentinels=prepared.recording is None, humans=prepared.recording is None)
    return Runtime(
        hank=prepared.hank, hank_dir=prepared.hank_path.parent, execution_dir=layout.path,
        owned=owned, checkpoints=checkpoints, registry=prepared.registry, emit=emit, config=config, budget=budget,
        prompt_builder=PromptBuilder(prepared.hank, prepared.hank_path.parent,
                                     layout.agent_root, request.env, provider_env=provider_env),
        plan_builder=build_initial_plan)


async def _drive(prepared: Prepared, request: LaunchRequest, owned: OwnedExecution) -> int:
    from hankweave.app.stop_latch import rearm_latch
    from hankweave.events.bus import EventBus
    from hankweave.events.delivery import QueuedSink
    from hankweave.events.journal import EventJournal
    from hankweave.server import ControlServerError, serve_runtime

    settings, layout = prepared.settings, prepared.setup.layout
    mock = await _start_mock_provider(prepared, request)
    handler = _server_log(layout.server_log)
    checkpoints = prepared.checkpoint_backend(layout.path)
    bus = EventBus(EventJournal(layout.events_file))
    for sink in prepared.sinks:  # each fed from its own worker thread, never blocking a codon
        bus.add_sink(QueuedSink(sink, report=bus.emit))
    on_event = request.on_event
    if on_event is not None:
        bus.subscribe(lambda event: on_event(event.to_wire()))
    runtime = _runtime(prepared, request, owned, checkpoints, bus.emit,
                       provider_env=mock.client_env() if mock is not None else {})
    bus.subscribe(runtime.services.sentinels.observe)
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
                                         port=settings.port, notify=request.notify)
        except ControlServerError as exc:
            raise LaunchError(str(exc)) from None
        await runtime.boot()
        code = await runtime.drive()
        await runtime.finish()
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
        if mock is not None:
            await mock.stop()
        logging.getLogger("hankweave").removeHandler(handler)
        handler.close()


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
                     f" {shlex.quote(item.id)} {_answer_placeholder(item)}")
    # The execution's recorded intent (mock provider, model override, ...) comes with it.
    lines.append(f"Resume:  hankweave run -e {execution}")
    notify("\n".join(lines))


def _answer_placeholder(item: Interruption) -> str:
    """The answer part of an ``answer`` hint: an approval's ``--approve``, a question's first
    option, or a placeholder for free text (quoted: it pastes as one argument)."""
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
        f"Inspect it:   hankweave inspect thread -e {execution}\n"
        f"              hankweave inspect state -e {execution}\n"
        f"              hankweave journal -e {execution}")


def _install_signals(loop: asyncio.AbstractEventLoop, runtime: Runtime) -> list[int]:
    installed: list[int] = []
    for signum, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
        try:
            loop.add_signal_handler(signum, runtime.commands.request_shutdown, name)
            installed.append(signum)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals
            pass
    return installed


def _server_log(path: Path) -> logging.Handler:
    private_dir(path.parent)
    os.close(open_private(path, os.O_WRONLY | os.O_APPEND))  # 0600 before the handler opens it
    handler = logging.FileHandler(path, encoding="utf-8")
    # Masks URL credentials in every line, whatever logged it (a library's error text too).
    handler.setFormatter(MaskingFormatter("[%(asctime)s] [%(levelname)s] %(name)s: %(message)s"))
    logger = logging.getLogger("hankweave")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler


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
