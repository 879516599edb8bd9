"""Runtime settings: the `hankweave.json` file and the resolved settings of one launch.

`hankweave.json` (docs/behaviour.md §1.12) is read from the directory hankweave is launched in. Every
field of :class:`SettingsFile` is optional: the model keeps only what the file says, so the
resolver can tell "unset" from "set to the default" when it merges the layers (docs/behaviour.md §2.7):

    defaults < ./hankweave.json < the hank's `overrides` < HANKWEAVE_RUNTIME_* < CLI options

:func:`resolve_settings` does that merge and returns a fully populated :class:`Settings`.
Deliberate differences from Hankweave 0.10.0:

* an invalid `hankweave.json` is an error naming the file (0.10.0 silently dropped it);
* an unknown `HANKWEAVE_RUNTIME_*` variable is a warning (0.10.0 refused to start), while a bad
  value of a known one is an error naming the variable; booleans must look like booleans;
* `HANKWEAVE_RUNTIME_SHIM_IDLE_TIMEOUT` is parsed as a number, so it works;
* every setting does something or is refused: `anthropicBaseUrl` reaches agents (or the LLM
  proxy's upstream, :func:`settings_env`), `executionBaseDir` is the managed root, and the
  settings of mechanisms hankweave lacks (log polling, sentinel health checks, usage
  telemetry) are refused unless their value says what hankweave does anyway
  (:data:`UNSUPPORTED_SETTINGS`), naming the file, variable or flag that set them.

The module also owns the agent side of the environment: the `HANKWEAVE_<X>` passthrough
(:func:`agent_env`) and the hank's `requirements.env` check (:func:`check_required_env`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.alias_generators import to_camel, to_snake

from hankweave.config.errors import (
    ConfigError,
    ConfigValidationError,
    HankIssue,
    RuntimeConfigValidationError,
    issues_from_validation_error,
    read_config_json,
)
from hankweave.config.hank import (
    AllocationMode,
    Check,
    Codon,
    HankFile,
    HarnessSections,
    Loop,
    ModelName,
    OnExceeded,
    Opt,
    PositiveInt,
    PositiveNumber,
    SandboxSettings,
    SentinelSystemSettings,
    ShimIdleTimeout,
    StrictModel,
    WarnFractions,
)
from hankweave.config.run_options import RUN_OPTIONS, RunOption

RUNTIME_CONFIG_FILE = "hankweave.json"
"""The runtime settings file, looked up in the launch directory."""

RUNTIME_ENV_PREFIX = "HANKWEAVE_RUNTIME_"
"""Prefix of the environment variables that set runtime settings."""

SENTINEL_ENV_PREFIX = "HANKWEAVE_SENTINEL_"
"""Prefix of the sentinel provider credentials; never passed to agents."""

PASSTHROUGH_ENV_PREFIX = "HANKWEAVE_"
"""`HANKWEAVE_<X>=v` gives agent processes `X=v` (`unset` removes `X`)."""

CONTROL_ENV_VARS = frozenset(
    {
        "HANKWEAVE_HOME",
        "HANKWEAVE_LOAD_PLUGINS",
        "HANKWEAVE_DISABLE_PLUGINS",
        "HANKWEAVE_TRACE_PLUGINS",
        "HANKWEAVE_STRICT_PLUGINS",
        "HANKWEAVE_REPLAY_MAX_DELAY_MS",
        "HANKWEAVE_REPLAY_MAX_BYTES",
        "HANKWEAVE_REPLAY_MAX_MEMBERS",
        "HANKWEAVE_REPLAY_MAX_RATIO",
        "HANKWEAVE_PLUGIN_MODULES",
        "HANKWEAVE_FAKE_SCRIPT",
        "HANKWEAVE_LINK_KEY_FILE",
        # test-only fault injection (docs/crash-testing.md)
        "HANKWEAVE_TEST_KILL_AT",
        "HANKWEAVE_TEST_DISK_FAULT",
        "HANKWEAVE_TEST_FAULT_TRACE",
    }
)
"""Variables that steer hankweave itself; they are not part of the agent passthrough."""

UNSET_VALUE = "unset"
"""The `HANKWEAVE_<X>` value that removes `X` from the agent environment."""


# --------------------------------------------------------------------------------------------
# hankweave.json
# --------------------------------------------------------------------------------------------


def _base_url_problem(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    return "anthropicBaseUrl must be an http(s) URL"


def _idle_timeout_problem(seconds: int) -> str | None:
    if seconds < 0:
        return "Idle timeout must be at least 0"
    if seconds > 255:
        return "Idle timeout must be at most 255"
    return None


def _non_empty(message: str) -> Check:
    return Check(lambda value: None if value.strip() else message, minLength=1)


class RuntimeBudget(StrictModel):
    """Global ceilings; the effective one is the smaller of this and the hank's overrides."""

    max_dollars: Opt[PositiveNumber] = None
    max_time_seconds: Opt[PositiveNumber] = None
    warn_at: Opt[WarnFractions] = None
    """Fractions of each ceiling (the run's, a loop's, a codon's) at which a `budget.warning`
    goes out (default 0.8 and 0.95; `[]`: none)."""


class CheckpointConfig(StrictModel):
    """Checkpointing (a hankweave addition, absent from Hankweave 0.10.0)."""

    backend: Opt[Annotated[str, _non_empty("Checkpoint backend cannot be empty")]] = None
    """Name of the registered checkpoint backend (default: `git`)."""
    keep_last_per_run: Opt[PositiveInt] = None
    """How many checkpoints of each run pruning keeps (default: 50)."""
    change_hints: Opt[bool] = None
    """Give the backend the paths a workspace watcher saw change, so a checkpoint costs what
    the codon changed (default: true; turn off for a workspace written through shared mmap,
    which no watcher sees)."""


class SinkSpec(StrictModel):
    """One event sink to enable: the registered sink's name and its own settings."""

    name: Annotated[str, _non_empty("Sink name cannot be empty")]
    config: Opt[dict[str, Any]] = None
    """Validated against the sink's own `Config` model when the sinks are built."""


class ProxyConfig(StrictModel):
    """The LLM proxy's plugins (a hankweave addition; docs/proxy.md)."""

    middleware: Opt[list[SinkSpec]] = None
    """The proxy middleware to run on every request, in order: a registered middleware's name
    and its own settings (`config`); none by default."""


class EventsConfig(StrictModel):
    """Event delivery (a hankweave addition)."""

    sinks: Opt[list[SinkSpec]] = None
    """The event sinks to feed, in order; none by default."""


class TelemetryConfig(StrictModel):
    """Hankweave 0.10.0's usage telemetry section; hankweave sends none."""

    enabled: Opt[bool] = None
    endpoint: Opt[str] = None
    debug: Opt[bool] = None


class SettingsFile(StrictModel):
    """Runtime settings from `hankweave.json`. Defaults are applied when settings are resolved."""

    port: Opt[PositiveInt] = None
    """WebSocket server port (default: 0, a free port chosen by the OS)."""
    host: Opt[Annotated[str, _non_empty("Host cannot be empty")]] = None
    """Address the WebSocket server binds to (default: 127.0.0.1; a hankweave addition)."""
    autostart: Opt[bool] = None
    """Start running codons as soon as the server is up (default: true)."""
    show_costs: Opt[bool] = None
    """Show cost figures in the terminal (default: true; Hankweave 0.10.0's default was
    false)."""
    without_proxy: Opt[bool] = None
    """Agents call their providers directly (default: true); false sends every agent request
    through the LLM proxy (docs/proxy.md)."""
    model: Opt[ModelName] = None
    """Model for every codon, resolved against the model registry."""
    anthropic_base_url: Opt[Annotated[str, Check(_base_url_problem)]] = None
    """The Anthropic endpoint agents call (`ANTHROPIC_BASE_URL`), unless a mock provider runs."""
    output_directory: Opt[str] = None
    """Where codon outputs are copied, relative to the launch directory (default: not copied)."""
    execution_base_dir: Opt[Annotated[str, _non_empty("executionBaseDir cannot be empty")]] = None
    """The managed root of auto mode (default: ~/.hankweave-executions; `HANKWEAVE_HOME` wins;
    informational only in Hankweave 0.10.0)."""
    cache_dir: Opt[Annotated[str, _non_empty("cacheDir cannot be empty")]] = None
    """Where remote hanks and extracted bundles are kept (default: ~/.hankweave-cache, or
    `$HANKWEAVE_HOME/.cache`; a hankweave addition)."""
    log_parsing_interval: Opt[PositiveInt] = None
    """Refused (:data:`UNSUPPORTED_SETTINGS`): no agent log is polled."""
    data_hash_time_limit: Opt[PositiveInt] = None
    """Milliseconds allowed for hashing the data directory (default: 5000)."""
    idle_timeout: Opt[Annotated[int, Check(_idle_timeout_problem, minimum=0, maximum=255)]] = None
    """WebSocket idle timeout in seconds, 0-255 (default: 0, the usual keepalive)."""
    shim_idle_timeout: Opt[ShimIdleTimeout] = None
    ignore_rig_failures: Opt[bool] = None
    """Treat every rig operation as `allowFailure: true` (default: false)."""
    sentinel: Opt[SentinelSystemSettings] = None
    """Only the values that describe what hankweave does are accepted
    (:data:`UNSUPPORTED_SETTINGS`)."""
    telemetry: Opt[TelemetryConfig] = None
    """Hankweave 0.10.0's usage telemetry: only "off" is accepted (:data:`UNSUPPORTED_SETTINGS`)."""
    budget: Opt[RuntimeBudget] = None
    sandbox: Opt[SandboxSettings] = None
    """The agents' OS sandbox (docs/sandbox.md; a hankweave addition)."""
    checkpoints: Opt[CheckpointConfig] = None
    harnesses: Opt[HarnessSections] = None
    """Each harness's own settings, by harness name (a hankweave addition)."""
    events: Opt[EventsConfig] = None
    proxy: Opt[ProxyConfig] = None
    executors: Opt[dict[str, dict[str, Any]]] = None
    """Each executor plugin's own settings, by name (``executors.celery.broker``; a hankweave
    addition): the plugin validates its section."""


def load_runtime_config(path: Path) -> SettingsFile:
    """Read and validate the runtime settings file at `path`.

    Raises :class:`~hankweave.config.errors.ConfigError` when the file is missing or unreadable,
    and :class:`RuntimeConfigValidationError` (a `ConfigError`) naming the file and every
    problem when it is not valid JSON or not valid settings.
    """
    data = read_config_json(path, what="Runtime config file", invalid=RuntimeConfigValidationError)
    try:
        return SettingsFile.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, SettingsFile)
        raise RuntimeConfigValidationError(str(path), issues) from None


# --------------------------------------------------------------------------------------------
# Resolved settings
# --------------------------------------------------------------------------------------------


class _ResolvedModel(BaseModel):
    """Base of the resolved settings: complete, immutable, camelCase when serialised."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )


class BudgetSettings(_ResolvedModel):
    """The run-wide budget: ceilings from every layer, allocation from the hank's overrides."""

    max_dollars: float | None = None
    """Dollar ceiling: the CLI value, else the smaller of hankweave.json and the overrides."""
    max_time_seconds: float | None = None
    """Time ceiling, chosen like `max_dollars`."""
    allocation: AllocationMode = "shared"
    shares: dict[str, float] | None = None
    on_exceeded: OnExceeded | None = None
    warn_at: list[float] | None = None
    """Where `budget.warning`s go out (None: the default, 0.8 and 0.95)."""


class CheckpointSettings(_ResolvedModel):
    """Which checkpoint backend runs, and how much history pruning keeps."""

    backend: str = "git"
    keep_last_per_run: int = 50
    change_hints: bool = True


class EventSettings(_ResolvedModel):
    """Which event sinks are fed."""

    sinks: list[SinkSpec] = Field(default_factory=list)


class ProxySettings(_ResolvedModel):
    """Which middleware the LLM proxy runs."""

    middleware: list[SinkSpec] = Field(default_factory=list)


class Settings(_ResolvedModel):
    """The settings of one launch, every layer merged and every default applied."""

    port: int = 0
    """WebSocket server port; 0 lets the OS choose."""
    host: str = "127.0.0.1"
    """Address the WebSocket server binds to."""
    autostart: bool = True
    show_costs: bool = True
    """Cost figures in the terminal output of `run` (the live view and headless lines)."""
    model: str | None = None
    """The global model override (see :attr:`model_override`)."""
    anthropic_base_url: str | None = None
    """`ANTHROPIC_BASE_URL` of every agent, rig command and sentinel (see
    :func:`settings_env`)."""
    output_directory: Path | None = None
    """Absolute; relative values are resolved against the launch directory."""
    execution_base_dir: str | None = None
    """The managed root of auto mode when `HANKWEAVE_HOME` is not set (None: the default,
    `~/.hankweave-executions`); see :func:`hankweave.execution.setup.managed_executions_root`."""
    cache_dir: str | None = None
    """Absolute; see :func:`hankweave.app.hank_source.cache_root`."""
    data_hash_time_limit: int = 5000
    """Milliseconds allowed for hashing the data source (also used by execution setup)."""
    idle_timeout: int = 0
    """Seconds a WebSocket client may leave pings unanswered before it is closed; 0: the
    websockets library's keepalive (docs/cli.md, `--idle-timeout`)."""
    shim_idle_timeout: int | None = None
    """Run-wide default; a codon's own `shimIdleTimeout` wins, then the harness default."""
    ignore_rig_failures: bool = False
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    """The run's sandbox setting; a codon's own `sandbox` wins key by key
    (:func:`effective_sandbox`)."""
    checkpoints: CheckpointSettings = Field(default_factory=CheckpointSettings)
    harnesses: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each harness's settings section, merged over every layer (validated by the harness's
    `Config` model at launch)."""
    events: EventSettings = Field(default_factory=EventSettings)
    without_proxy: bool = True
    """Agents call their providers directly; false: through the LLM proxy (`--proxy`)."""
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    overwrite_output: bool = False
    """Output copies replace existing files instead of getting a numbered name (CLI only)."""
    max_cost_per_codon: float | None = None
    """Dollar ceiling of each codon attempt, over the codon's own cap (CLI only)."""
    headless: bool = False
    """No terminal UI (CLI only)."""
    user: str | None = None
    """Who runs it (``--user``; CLI only): recorded on the run (:func:`hankweave.people.current_user`
    fills in ``$HANKWEAVE_USER`` or the login name when it is not given)."""

    @property
    def model_override(self) -> str | None:
        """The model every codon uses instead of its own, if any layer set `model` (docs/behaviour.md §2.7)."""
        return self.model


@dataclass(frozen=True)
class ResolvedSettings:
    """What :func:`resolve_settings` found: the settings, plus what the user should be told."""

    settings: Settings
    warnings: list[str] = field(default_factory=list)
    """Non-fatal problems, e.g. unknown `HANKWEAVE_RUNTIME_*` variables."""
    runtime_config_path: Path | None = None
    """The `hankweave.json` that was read, if there was one."""
    harness_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    """For each harness setting, the layer that gave its value (`hankweave.json`, `the hank's
    overrides`, the variable's name, `the command line`), so errors can say where to fix it."""

    @property
    def model_override(self) -> str | None:
        """Shortcut for `settings.model_override`."""
        return self.settings.model_override


class _CliLayer(SettingsFile):
    port: Opt[Annotated[int, Field(ge=0)]] = None
    """`-p 0` asks for a dynamic port explicitly, which the file schema does not allow."""
    headless: Opt[bool] = None


def _cli_only_field(option: RunOption) -> Any:
    return (Opt[option.value], None)  # type: ignore[misc,name-defined]  # built at run time


CliSettings: type[_CliLayer] = create_model(
    "CliSettings", __base__=_CliLayer,
    __doc__="The settings layer given by command-line options (JSON names, as in"
            " `hankweave.json`): the file's settings, and the run options only the command"
            " line gives (`hankweave.config.run_options`).",
    **{to_snake(option.key): _cli_only_field(option) for option in RUN_OPTIONS
       if "." not in option.key and to_snake(option.key) not in _CliLayer.model_fields})


class EnvironmentSettingsError(ConfigValidationError):
    """`HANKWEAVE_RUNTIME_*` variables hold values that are not valid settings."""

    kind = "runtime settings in environment variables"

    def _render(self) -> str:
        count = len(self.errors)
        noun = "problem" if count == 1 else "problems"
        lines = [f"Invalid {self.kind}: {count} {noun}"]
        lines.extend(f"  - {issue}" for issue in self.errors)
        lines.append("Fix the values, or unset the variables to use the other settings layers.")
        return "\n".join(lines)


def resolve_settings(
    *,
    cwd: Path,
    hank: HankFile | None,
    env: Mapping[str, str],
    cli: Mapping[str, Any],
) -> ResolvedSettings:
    """Merge the settings layers of one launch (docs/behaviour.md §2.7).

    Args:
        cwd: the launch directory; its `hankweave.json` is read if present, and relative
            `outputDirectory` values are resolved against it.
        hank: the loaded hank, whose `overrides` form the third layer (`None` when the hank
            could not be loaded yet; its errors are reported elsewhere).
        env: the process environment (`HANKWEAVE_RUNTIME_*` variables form the fourth layer).
        cli: command-line options, keyed by their JSON names as in `hankweave.json`
            (`{"port": 8080, "budget": {"maxDollars": 2.5}, "overwriteOutput": True}`),
            plus the CLI-only `overwriteOutput` and `headless`. `None` values are ignored.

    Layers deep-merge; a value that is absent or `None` never overwrites one below it. Budget
    ceilings follow their own rule: a CLI value replaces, otherwise the smaller of
    `hankweave.json` and the hank's overrides applies; allocation, shares and `onExceeded` come
    only from the overrides.

    Raises:
        RuntimeConfigValidationError: `hankweave.json` is not valid JSON or not valid settings.
        EnvironmentSettingsError: a known `HANKWEAVE_RUNTIME_*` variable has a bad value.
        ConfigError: `hankweave.json` cannot be read, or the CLI options are invalid.
    """
    warnings: list[str] = []
    config_path = cwd / RUNTIME_CONFIG_FILE
    file_config: SettingsFile | None = None
    if os.path.lexists(config_path):
        file_config = load_runtime_config(config_path)
    overrides = hank.overrides if hank is not None else None
    env_layer = runtime_env_layer(env, warnings)
    cli_config = _validate_cli(cli)

    file_layer = _dump(file_config)
    override_layer = _dump(overrides)
    cli_layer = _dump(cli_config)
    budget = _resolve_budget(file_layer, override_layer, cli_layer)

    harness_sources = _harness_sources(file_layer, override_layer, env_layer, cli_layer)
    merged: dict[str, Any] = {}
    for layer in (file_layer, override_layer, env_layer, cli_layer):
        layer.pop("budget", None)
        _deep_merge(merged, layer)
    merged["budget"] = budget
    refuse_unsupported(merged, (file_layer, override_layer, env_layer, cli_layer))
    for key in _NOT_RESOLVED:
        merged.pop(key, None)
    for key in ("outputDirectory", "executionBaseDir", "cacheDir"):  # relative to the launch dir
        if merged.get(key) is not None:
            merged[key] = os.path.abspath(cwd / os.path.expanduser(merged[key]))
    settings = Settings.model_validate(merged)
    return ResolvedSettings(
        settings=settings,
        warnings=warnings,
        runtime_config_path=config_path if file_config is not None else None,
        harness_sources=harness_sources,
    )


def _harness_sources(file_layer: Mapping[str, Any], override_layer: Mapping[str, Any],
                     env_layer: Mapping[str, Any], cli_layer: Mapping[str, Any]
                     ) -> dict[str, dict[str, str]]:
    """Which layer set each `harnesses.<name>.<key>` last (the one whose value counts)."""
    sources: dict[str, dict[str, str]] = {}
    for label, layer in ((RUNTIME_CONFIG_FILE, file_layer), ("the hank's overrides",
                                                              override_layer),
                         (None, env_layer), ("the command line", cli_layer)):
        for name, section in (layer.get("harnesses") or {}).items():
            for key in section or {}:
                sources.setdefault(name, {})[key] = label or runtime_env_variable(
                    f"harnesses.{name}.{key}")
    return sources


def _dump(model: BaseModel | None) -> dict[str, Any]:
    if model is None:
        return {}
    return model.model_dump(by_alias=True, exclude_none=True)


def _deep_merge(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    """Merge `source` into `target` recursively; `None` never overwrites (lodash `merge`)."""
    for key, value in source.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _deep_merge(target[key], value)
        elif isinstance(value, Mapping):
            target[key] = {}
            _deep_merge(target[key], value)
        else:
            target[key] = value


def _resolve_budget(
    file_layer: Mapping[str, Any], override_layer: Mapping[str, Any], cli_layer: Mapping[str, Any]
) -> dict[str, Any]:
    file_budget = file_layer.get("budget", {})
    override_budget = dict(override_layer.get("budget", {}))
    cli_budget = cli_layer.get("budget", {})
    resolved: dict[str, Any] = {}
    for key in ("maxDollars", "maxTimeSeconds"):
        if cli_budget.get(key) is not None:
            resolved[key] = cli_budget[key]
            continue
        present = [
            budget[key] for budget in (file_budget, override_budget) if budget.get(key) is not None
        ]
        if present:
            resolved[key] = min(present)
    for key in ("allocation", "shares", "onExceeded"):
        if override_budget.get(key) is not None:
            resolved[key] = override_budget[key]
    if file_budget.get("warnAt") is not None:
        resolved["warnAt"] = file_budget["warnAt"]
    return resolved


def _validate_cli(cli: Mapping[str, Any]) -> _CliLayer:
    data = _without_none(cli)
    try:
        return CliSettings.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, CliSettings)
        raise ConfigError(
            "Invalid command-line options:\n" + "\n".join(f"  - {issue}" for issue in issues)
        ) from None


def _without_none(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            value = _without_none(value)
        elif isinstance(value, os.PathLike):
            # click hands paths over as Path objects; the settings schema holds strings.
            value = os.fspath(value)
        out[key] = value
    return out


# --------------------------------------------------------------------------------------------
# Settings hankweave reads but cannot honour
# --------------------------------------------------------------------------------------------


def _never(value: Any) -> bool:
    return False


_NO_HEALTH_CHECKS = ("hankweave runs no provider health checks before it loads sentinels (a"
                     " sentinel's credentials are checked as it loads), so there is nothing to"
                     " wait for")
_NO_TELEMETRY = ("hankweave sends no usage telemetry; to trace your runs, enable the `otel`"
                 " event sink (events.sinks, docs/observability.md)")


@dataclass(frozen=True)
class UnsupportedSetting:
    """A setting of Hankweave 0.10.0 whose mechanism hankweave does not have: the values that
    describe what hankweave does anyway are accepted, any other is refused with the reason."""

    key: str
    """Dotted, in ``hankweave.json``'s names."""
    accepts: Callable[[Any], bool]
    reason: str
    fix: str


UNSUPPORTED_SETTINGS: tuple[UnsupportedSetting, ...] = (
    UnsupportedSetting("logParsingInterval", _never,
                       "hankweave polls no agent log, it records each agent message as the"
                       " harness produces it", "leave it out"),
    UnsupportedSetting("sentinel.enablePersistence", lambda value: value is True,
                       "sentinel history and outputs are always kept as part of the"
                       " execution's record (.hankweave/sentinels/)", "leave it out"),
    UnsupportedSetting("sentinel.healthCheckGracePeriodMs", _never, _NO_HEALTH_CHECKS,
                       "leave it out"),
    UnsupportedSetting("sentinel.waitForAllHealthChecks", lambda value: value is False,
                       _NO_HEALTH_CHECKS, "leave it out"),
    UnsupportedSetting("telemetry.enabled", lambda value: value is False, _NO_TELEMETRY,
                       "leave it out (or set false)"),
    UnsupportedSetting("telemetry.endpoint", _never, _NO_TELEMETRY, "leave it out"),
    UnsupportedSetting("telemetry.debug", lambda value: value is False, _NO_TELEMETRY,
                       "leave it out"),
)
"""Every setting refused unless its value is what hankweave does (docs/differences.md)."""

_NOT_RESOLVED = ("logParsingInterval", "sentinel", "telemetry")
"""Keys of :data:`UNSUPPORTED_SETTINGS` that have no :class:`Settings` field: their accepted
values change nothing."""


class UnsupportedSettingsError(ConfigValidationError):
    """Settings ask for something hankweave does not do; each issue's path says where the value
    came from (``hankweave.json:withoutProxy``, a variable, a flag, ``overrides.<key>``)."""

    kind = "settings"

    def _render(self) -> str:
        count = len(self.errors)
        lines = [f"Unsupported {self.kind}: {count} {'problem' if count == 1 else 'problems'}"]
        lines.extend(f"  - {issue}" for issue in self.errors)
        return "\n".join(lines)


def refuse_unsupported(merged: Mapping[str, Any],
                       layers: tuple[Mapping[str, Any], ...]) -> None:
    """Refuse each setting of :data:`UNSUPPORTED_SETTINGS` whose merged value is not accepted,
    naming the layer that gave it. ``layers``: hankweave.json, the hank's overrides, the
    ``HANKWEAVE_RUNTIME_*`` variables and the command line, lowest first.

    Raises:
        UnsupportedSettingsError: listing every refused value.
    """
    issues = []
    for rule in UNSUPPORTED_SETTINGS:
        value = _lookup(merged, rule.key)
        if value is None or rule.accepts(value):
            continue
        issues.append(HankIssue(setting_source(rule.key, value, layers),
                                f"{rule.key} {json.dumps(value)} is refused: {rule.reason}."
                                f" Fix: {rule.fix}."))
    if issues:
        raise UnsupportedSettingsError("settings", issues)


def setting_source(key: str, value: Any, layers: tuple[Mapping[str, Any], ...]) -> str:
    """Where the value of ``key`` came from: the last of ``layers`` (as in
    :func:`refuse_unsupported`) that sets it, named as a user finds it."""
    _, override_layer, env_layer, cli_layer = layers
    if _lookup(cli_layer, key) is not None:
        return next((option.flag_for(value) for option in RUN_OPTIONS if option.key == key),
                    "the command line")
    if _lookup(env_layer, key) is not None:
        return runtime_env_variable(key)
    if _lookup(override_layer, key) is not None:
        return f"overrides.{key}"
    return f"{RUNTIME_CONFIG_FILE}:{key}"


def _lookup(layer: Mapping[str, Any], key: str) -> Any:
    value: Any = layer
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


# --------------------------------------------------------------------------------------------
# HANKWEAVE_RUNTIME_* variables
# --------------------------------------------------------------------------------------------

_Kind = Literal["bool", "int", "str", "raw"]

_NOT_IN_ENVIRONMENT = frozenset({"budget"})
"""Sections the environment cannot set: a ceiling comes from a file or the command line,
never from a variable left set in a shell."""


def _scalar_kind(annotation: Any) -> _Kind | None:
    """How a variable's text parses for a field of this type (None: not a scalar)."""
    for arg in (annotation, *get_args(annotation)):
        base = get_args(arg)[0] if get_origin(arg) is Annotated else arg
        if base in (bool, int, str):
            return cast(_Kind, base.__name__)
        if get_origin(base) is Literal and all(isinstance(v, str) for v in get_args(base)):
            return "str"  # one of some words: the model says which
    return None


def _env_kinds(model: type[BaseModel]) -> dict[str, _Kind]:
    """What each scalar key of ``model`` parses as, by its JSON name."""
    kinds = {}
    for name, info in model.model_fields.items():
        kind = _scalar_kind(info.annotation)
        if kind is not None:
            kinds[info.alias or name] = kind
    return kinds


def _env_sections() -> dict[str, dict[str, _Kind]]:
    """The sections of ``hankweave.json`` whose scalar members variables set."""
    sections = {}
    for name, info in SettingsFile.model_fields.items():
        key = info.alias or name
        section = next((arg for arg in get_args(info.annotation)
                        if isinstance(arg, type) and issubclass(arg, BaseModel)), None)
        kinds = _env_kinds(section) if section is not None else {}
        if kinds and key not in _NOT_IN_ENVIRONMENT:
            sections[key] = kinds
    return sections


# What each settable key parses as, from the file's schema: a setting of `hankweave.json` is
# settable through the environment under its name, objects through their scalar members.
_TOP_LEVEL_KINDS: dict[str, _Kind] = _env_kinds(SettingsFile)
_SECTION_KINDS: dict[str, dict[str, _Kind]] = _env_sections()
_HARNESSES_PREFIX = "HARNESSES_"
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def runtime_env_variable(path: str) -> str:
    """The variable that sets a settings key: `sentinel.enablePersistence` ->
    `HANKWEAVE_RUNTIME_SENTINEL_ENABLE_PERSISTENCE`."""
    parts = [_camel_to_snake(part).upper() for part in path.split(".")]
    return RUNTIME_ENV_PREFIX + "_".join(parts)


def _camel_to_snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def runtime_env_layer(env: Mapping[str, str], warnings: list[str]) -> dict[str, Any]:
    """The settings layer given by `HANKWEAVE_RUNTIME_<NAME>` variables (docs/behaviour.md §1.13).

    `<NAME>` is snake case (`SHOW_COSTS` -> `showCosts`); `SENTINEL_<X>` and `CHECKPOINTS_<X>`
    set members of those sections, `HARNESSES_<HARNESS>_<KEY>` a key of one harness's section
    (its value typed by that harness's settings model; JSON when it starts with `[` or `{`). Booleans accept true/false, 1/0, yes/no, on/off; numbers
    must be whole numbers. An empty value counts as unset. Unknown variables are appended to
    `warnings` and ignored.

    Raises:
        EnvironmentSettingsError: listing every variable whose value is invalid.
    """
    layer: dict[str, Any] = {}
    variable_of: dict[str, str] = {}
    issues: list[HankIssue] = []
    for variable in sorted(env):
        if not variable.startswith(RUNTIME_ENV_PREFIX):
            continue
        raw = env[variable]
        located = _locate_env_key(variable[len(RUNTIME_ENV_PREFIX) :])
        if located is None:
            warnings.append(_unknown_env_warning(variable))
            continue
        path, kind = located
        if raw.strip() == "":
            continue
        value, problem = _parse_env_value(raw, kind)
        if problem is not None:
            issues.append(HankIssue(variable, problem))
            continue
        target = layer
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
        variable_of[".".join(path)] = variable
    try:
        SettingsFile.model_validate(layer, by_alias=True, by_name=False)
    except ValidationError as exc:
        for issue in issues_from_validation_error(exc, SettingsFile):
            variable = variable_of.get(issue.path, issue.path)
            issues.append(HankIssue(variable, issue.message))
    if issues:
        raise EnvironmentSettingsError("environment", sorted(issues, key=lambda i: i.path))
    return layer


def _locate_env_key(name: str) -> tuple[tuple[str, ...], _Kind] | None:
    if name.startswith(_HARNESSES_PREFIX):
        # HARNESSES_<NAME>_<KEY>: the harness's own Config model types the value.
        harness, _, key = name[len(_HARNESSES_PREFIX):].partition("_")
        if not harness or not key:
            return None
        return ("harnesses", harness.lower(), to_camel(key.lower())), "raw"
    for section, kinds in _SECTION_KINDS.items():
        prefix = section.upper() + "_"
        if name.startswith(prefix):
            key = to_camel(name[len(prefix) :].lower())
            return ((section, key), kinds[key]) if key in kinds else None
    key = to_camel(name.lower())
    return ((key,), _TOP_LEVEL_KINDS[key]) if key in _TOP_LEVEL_KINDS else None


def _unknown_env_warning(variable: str) -> str:
    if variable.startswith(RUNTIME_ENV_PREFIX + "BUDGET"):
        hint = (
            "budgets cannot be set through the environment; "
            "use --max-cost/--max-time or hankweave.json"
        )
    else:
        hint = "it is not a runtime setting"
    return f"Ignoring environment variable {variable}: {hint}."


def _parse_env_value(raw: str, kind: _Kind) -> tuple[Any, str | None]:
    value = raw.strip()
    if kind == "bool":
        if value.lower() in _TRUE:
            return True, None
        if value.lower() in _FALSE:
            return False, None
        return None, f'expected a boolean (true/false, 1/0, yes/no, on/off), got "{raw}"'
    if kind == "int":
        try:
            return int(value, 10), None
        except ValueError:
            return None, f'expected a whole number, got "{raw}"'
    if kind == "raw" and value[:1] in ("[", "{"):
        try:
            return json.loads(value), None
        except ValueError as exc:
            return None, f"expected JSON (the value starts with {value[0]!r}): {exc}"
    return raw, None


# --------------------------------------------------------------------------------------------
# The model override and per-codon settings
# --------------------------------------------------------------------------------------------


def apply_model_override(hank: HankFile, model: str | None) -> HankFile:
    """The hank with every codon's `model` replaced by `model`, loop codons included.

    As in Hankweave 0.10.0 a `model` from any settings layer replaces each codon's own model;
    it is not a fallback. With `model=None` the hank is returned unchanged.
    """
    if model is None:
        return hank
    items: list[Codon | Loop] = []
    for item in hank.hank:
        if isinstance(item, Loop):
            codons = [codon.model_copy(update={"model": model}) for codon in item.codons]
            items.append(item.model_copy(update={"codons": codons}))
        else:
            items.append(item.model_copy(update={"model": model}))
    return hank.model_copy(update={"hank": items})


def effective_sandbox(codon: Codon, run: SandboxSettings) -> SandboxSettings:
    """The codon's sandbox: its own `sandbox` keys over the run's, `mode` `auto` when neither
    says."""
    own = codon.sandbox or SandboxSettings()
    network = own.network or run.network
    return SandboxSettings(mode=own.mode or run.mode or "auto",
                           **({"network": network} if network is not None else {}))


def effective_shim_idle_timeout(codon: Codon, run_default: int | None,
                                harness_default: int | None) -> int | None:
    """Seconds without an agent event before a codon's session is aborted (docs/behaviour.md §2.7).

    The codon's own `shimIdleTimeout`, else the run's setting (`Settings.shim_idle_timeout`,
    from every settings layer), else the harness's default (180 s for the Claude Agent SDK
    harness, 120 s for pi); None when none sets one.
    """
    if codon.shim_idle_timeout is not None:
        return codon.shim_idle_timeout
    if run_default is not None:
        return run_default
    return harness_default


# --------------------------------------------------------------------------------------------
# The agent environment
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PassthroughEnv:
    """What the `HANKWEAVE_<X>` variables ask for in agent environments."""

    set: dict[str, str]
    """`X` -> value, from `HANKWEAVE_X=value`."""
    unset: frozenset[str]
    """Names removed by `HANKWEAVE_X=unset`."""


def hankweave_passthrough(env: Mapping[str, str]) -> PassthroughEnv:
    """Collect the `HANKWEAVE_<X>` passthrough variables of `env` (docs/behaviour.md §1.13).

    The `HANKWEAVE_RUNTIME_` and `HANKWEAVE_SENTINEL_` prefixes and hankweave's own control
    variables (:data:`CONTROL_ENV_VARS`) are not passed through.
    """
    values: dict[str, str] = {}
    unset: set[str] = set()
    for variable, value in env.items():
        if not _is_passthrough(variable):
            continue
        name = variable[len(PASSTHROUGH_ENV_PREFIX) :]
        if value == UNSET_VALUE:
            unset.add(name)
        else:
            values[name] = value
    return PassthroughEnv(set=values, unset=frozenset(unset))


def _is_passthrough(variable: str) -> bool:
    return (
        variable.startswith(PASSTHROUGH_ENV_PREFIX)
        and len(variable) > len(PASSTHROUGH_ENV_PREFIX)
        and not variable.startswith(RUNTIME_ENV_PREFIX)
        and not variable.startswith(SENTINEL_ENV_PREFIX)
        and variable not in CONTROL_ENV_VARS
    )


def agent_env(env: Mapping[str, str], codon_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an agent process or rig command started with base environment `env`.

    `HANKWEAVE_X=v` sets `X=v`; `HANKWEAVE_X=unset` removes `X`; the codon's own `env` is applied
    last and wins. Harnesses that start from an allowlist instead of the whole environment use
    :func:`hankweave_passthrough` directly.
    """
    result = dict(env)
    passthrough = hankweave_passthrough(env)
    for name in passthrough.unset:
        result.pop(name, None)
    result.update(passthrough.set)
    if codon_env:
        result.update(codon_env)
    return result


def settings_env(settings: Settings) -> dict[str, str]:
    """What the settings put in the environment agents, rig commands and sentinels start from:
    ``ANTHROPIC_BASE_URL`` from ``anthropicBaseUrl`` (the Claude CLI reads it, and litellm's
    ``api_base`` for Anthropic models comes from it). Applied over the launch environment, so
    ``HANKWEAVE_ANTHROPIC_BASE_URL``, a codon's ``env`` and a mock provider still win."""
    if settings.anthropic_base_url is None:
        return {}
    return {"ANTHROPIC_BASE_URL": settings.anthropic_base_url}


class MissingEnvironmentError(ConfigError):
    """Variables listed in the hank's `requirements.env` are not set."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = list(missing)
        super().__init__(
            f"Missing required environment variables: {', '.join(missing)}\n"
            "These are declared in the hank's requirements.env field. Set each one, or "
            "HANKWEAVE_<NAME> to give it to agents only."
        )


def missing_required_env(hank: HankFile, env: Mapping[str, str]) -> list[str]:
    """The names in `requirements.env` that agents would not see with a non-empty value."""
    required = hank.requirements.env if hank.requirements and hank.requirements.env else []
    missing: list[str] = []
    for name in dict.fromkeys(required):
        prefixed = env.get(PASSTHROUGH_ENV_PREFIX + name)
        # HANKWEAVE_X=unset removes X from agents, so it cannot satisfy the requirement.
        removed = prefixed == UNSET_VALUE
        if removed or not (prefixed or env.get(name)):
            missing.append(name)
    return missing


def check_required_env(hank: HankFile, env: Mapping[str, str]) -> None:
    """Check the hank's `requirements.env`: each `X` needs a non-empty `X` or `HANKWEAVE_X`.

    Raises:
        MissingEnvironmentError: naming every missing variable.
    """
    missing = missing_required_env(hank, env)
    if missing:
        raise MissingEnvironmentError(missing)
