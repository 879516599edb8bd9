"""The runtime settings file, `hankweave.json` (reference spec §1.12).

It is read from the directory hankweave is launched in. Every field is optional: the model keeps
only what the file says, so the settings resolver can tell "unset" from "set to the default" when
it merges defaults, this file, the hank's `overrides`, environment variables and CLI flags.
Unlike Hankweave 0.10.0, an invalid file is an error, never silently ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from hankweave.config.errors import (
    RuntimeConfigValidationError,
    issues_from_validation_error,
    read_config_json,
)
from hankweave.config.hank import (
    Check,
    ModelName,
    Opt,
    PositiveInt,
    PositiveNumber,
    SentinelSystemSettings,
    ShimIdleTimeout,
    StrictModel,
)


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


class RuntimeBudget(StrictModel):
    """Global ceilings; the effective one is the smaller of this and the hank's overrides."""

    max_dollars: Opt[PositiveNumber] = None
    max_time_seconds: Opt[PositiveNumber] = None


class RuntimeConfig(StrictModel):
    """Runtime settings from `hankweave.json`. Defaults are applied when settings are resolved."""

    port: Opt[PositiveInt] = None
    """WebSocket server port (default: 0, a free port chosen by the OS)."""
    autostart: Opt[bool] = None
    """Start running codons as soon as the server is up (default: true)."""
    show_costs: Opt[bool] = None
    """Show cost figures in the terminal UI (default: false)."""
    without_proxy: Opt[bool] = None
    """Bypass the internal LLM proxy (default: true)."""
    model: Opt[ModelName] = None
    """Model for every codon, resolved against the model registry."""
    anthropic_base_url: Opt[Annotated[str, Check(_base_url_problem)]] = None
    output_directory: Opt[str] = None
    """Where codon outputs are copied, relative to the launch directory (default: not copied)."""
    execution_base_dir: Opt[str] = None
    """Informational only: executions live under HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR or the default."""
    log_parsing_interval: Opt[PositiveInt] = None
    """Milliseconds between reads of the agent log (default: 1000)."""
    data_hash_time_limit: Opt[PositiveInt] = None
    """Milliseconds allowed for hashing the data directory (default: 5000)."""
    idle_timeout: Opt[Annotated[int, Check(_idle_timeout_problem, minimum=0, maximum=255)]] = None
    """WebSocket and proxy idle timeout in seconds, 0-255 (default: 0, no timeout)."""
    shim_idle_timeout: Opt[ShimIdleTimeout] = None
    ignore_rig_failures: Opt[bool] = None
    """Treat every rig operation as `allowFailure: true` (default: false)."""
    sentinel: Opt[SentinelSystemSettings] = None
    telemetry: Opt[dict[str, Any]] = None
    """Telemetry settings; read by the telemetry component, never blocking startup."""
    budget: Opt[RuntimeBudget] = None


def load_runtime_config(path: Path) -> RuntimeConfig:
    """Read and validate the runtime settings file at `path`.

    Raises :class:`~hankweave.config.errors.ConfigError` when the file is missing or unreadable,
    and :class:`RuntimeConfigValidationError` (a `ConfigError`) naming the file and every
    problem when it is not valid JSON or not valid settings.
    """
    data = read_config_json(path, what="Runtime config file", invalid=RuntimeConfigValidationError)
    try:
        return RuntimeConfig.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, RuntimeConfig)
        raise RuntimeConfigValidationError(str(path), issues) from None
