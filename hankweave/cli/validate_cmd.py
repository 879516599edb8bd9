"""``hankweave validate``: the full preflight of a hank, without creating anything.

It runs what ``hankweave run`` checks before its first codon (schema, file references,
semantic rules, model resolution and harness availability, each codon's harness preflight
(packages, credentials in the environment its agent will receive), ``requirements.env``, the
runtime settings layers), hashes the data source, and works out which execution directory a run would
use, only reading the disk. Every problem is reported at once, each at its JSON path (or the
setting, variable or file it concerns), and the exit code is 0 (valid) or 2 (not valid).

The report is built once as a JSON-shaped dict (:func:`build_report`); ``--json`` prints it and
the human summary is rendered from it, so both always say the same thing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hankweave.cli.errors import CLIError
from hankweave.exitcodes import EXIT_USAGE

if TYPE_CHECKING:
    from rich.console import Console

    from hankweave.app.hank_source import HankSource
    from hankweave.app.preflight import PreflightReport, ResolvedCodonModel
    from hankweave.config.errors import ConfigError, HankIssue
    from hankweave.config.hank import CodonBudget, CodonSite, ContainerBudget, HankFile
    from hankweave.config.settings import ResolvedSettings, Settings
    from hankweave.harness import HarnessConfig
    from hankweave.registry import Registry

# Values of HANKWEAVE_<X> variables are often credentials: show only enough to recognise one.
_MASK = "****"
_MASK_KEEP = 3
_MASK_MIN_LENGTH = 12
_PIPE_WIDTH = 160


@click.command("validate")
@click.argument("hank", required=False, metavar="[HANK]")
@click.argument("data", required=False, metavar="[DATA]")
@click.option("--config", metavar="HANK", help="The hank, instead of the HANK argument.")
@click.option("--data", "data_option", metavar="DATA", help="The data, instead of the DATA"
              " argument.")
@click.option(
    "-e",
    "--execution",
    metavar="DIR",
    help="Preview this execution directory instead of auto mode's choice.",
)
@click.option("-m", "--model", help="Check every codon with this model (a global override).")
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0, min_open=True),
    metavar="USD",
    help="Resolve the budgets under this run-wide dollar ceiling, as `run --max-cost` would.",
)
@click.option(
    "--max-time",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Resolve the budgets under this run-wide time ceiling, as `run --max-time` would.",
)
@click.option(
    "--offline",
    is_flag=True,
    help="Skip the credential check (a hank meant for `run --mock-provider`, or checked where"
    " its keys are not set).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a machine-readable report on stdout instead of the summary.",
)
def validate_command(
    hank: str | None,
    data: str | None,
    config: str | None,
    data_option: str | None,
    execution: str | None,
    model: str | None,
    max_cost: float | None,
    max_time: float | None,
    offline: bool,
    as_json: bool,
) -> None:
    """Check HANK (a hank.json, a directory holding one, a .hank bundle or a repository address)
    against DATA (default: the current directory) without running or creating anything (a
    bundle is verified and a remote hank fetched into the cache first).

    Prints a summary: codons with their resolved models and harnesses, loops, prompt files, rig
    operations, checkpointed files, the budget each plan entry would start with (its dollar,
    time and token limits and where each comes from), the execution directory a run would use,
    the HANKWEAVE_* variables passed to agents (masked) and warnings. Exits 0 when the hank can
    run; otherwise prints every problem with its JSON path and exits 2.
    """
    from hankweave.cli.hank_and_data import hank_and_data
    from hankweave.execution.setup import resolve_data_and_hank_paths
    from hankweave.registry import get_registry

    given = hank_and_data(hank, data, config=config, data=data_option)
    hank, data = given.hank, given.data
    if data == "-":
        # run stores stdin data in the input cache first; validate must not create anything.
        raise CLIError(
            "validate cannot read DATA from stdin (-): pass the data as a file or directory"
        )
    env = dict(os.environ)
    cwd = Path.cwd()
    source = _hank_source(hank, cwd, env, quiet=as_json)
    hank = source.argument
    paths = resolve_data_and_hank_paths(
        cwd=cwd, hank_arg=hank, data_arg=data, execution_arg=execution, env=env
    )
    report = build_report(
        hank_path=paths.hank_path,
        data_path=paths.data_path,
        cwd=cwd,
        env=env,
        registry=get_registry(),
        model=model,
        execution=Path(os.path.abspath(execution)) if execution is not None else None,
        max_cost=max_cost,
        max_time=max_time,
        offline=offline,
    )
    report["dataNote"] = given.data_note()
    from pydantic.alias_generators import to_camel

    report["hankSource"] = ({to_camel(key): value for key, value in source.meta_fields().items()}
                            or None)
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    elif report["valid"]:
        _render_summary(report, _console())
    else:
        _render_failure(report)
    if not report["valid"]:
        # SystemExit rather than ctx.exit(): run_cli calls main(standalone_mode=False), which
        # returns the code of click's Exit instead of raising it, and would report success.
        raise SystemExit(EXIT_USAGE)


def _hank_source(hank: str | None, cwd: Path, env: dict[str, str], *,
                quiet: bool) -> HankSource:
    """HANK as a local hank file: a bundle verified and extracted, a remote hank fetched (the
    cache is the only thing validate writes)."""
    from hankweave.app.hank_source import resolve_hank_source
    from hankweave.config.errors import ConfigError

    try:
        source = resolve_hank_source(hank, cwd=cwd, env=env, notify=None if quiet else (
            lambda text: click.echo(text, err=True)))
    except ConfigError as exc:
        raise CLIError(str(exc)) from None
    return source


# ----- the report -----


def build_report(
    *,
    hank_path: Path,
    data_path: Path,
    cwd: Path,
    env: Mapping[str, str],
    registry: Registry,
    model: str | None = None,
    execution: Path | None = None,
    max_cost: float | None = None,
    max_time: float | None = None,
    offline: bool = False,
) -> dict[str, Any]:
    """Check a hank the way ``hankweave run`` would before starting, and describe it.

    Nothing is created or changed: the managed root and the execution directory are only read.
    ``offline`` leaves out the credential check, as ``run --mock-provider`` does.

    Returns the ``--json`` report: ``valid``, ``errors`` (``[{path, message}]``), ``warnings``,
    ``codons``, ``loops``, ``executionDir`` and the other keys documented in ``docs/cli.md``.
    """
    errors: list[HankIssue] = []
    warnings: list[str] = []
    read, loaded, load_failed = _load_hank(hank_path, errors)
    cli = _command_line_settings(model, max_cost, max_time)
    resolved = _resolve_settings(cwd, loaded, env, cli, errors, warnings)
    settings = resolved.settings if resolved is not None else None
    override = settings.model_override if settings is not None else model
    preflight: PreflightReport | None = None
    if not load_failed:
        preflight = _run_preflight(hank_path, read, env, registry, override, errors, warnings)
    configs: dict[str, HarnessConfig] = {}  # unresolved settings: each harness's defaults
    if resolved is not None:
        configs = _check_plugin_settings(registry, resolved, env, errors, warnings)
    if preflight is not None:
        _check_agents(preflight, registry, configs, env, offline, errors, warnings)

    data_hash = _hash_data(data_path, settings, errors)
    execution_dir: dict[str, Any] | None = None
    if data_hash is not None:
        execution_dir = _preview_execution_dir(
            hank_path, data_hash, env, execution, errors, warnings,
            configured_root=settings.execution_base_dir if settings is not None else None,
        )

    hank_file = preflight.hank if preflight is not None else None
    return {
        "valid": not errors,
        "hankPath": str(hank_path),
        "dataPath": str(data_path),
        "dataHash": data_hash,
        "errors": [{"path": issue.path, "message": issue.message} for issue in errors],
        "warnings": warnings,
        "modelOverride": override,
        **_describe_hank(hank_file, preflight),
        "budget": _describe_run_budget(settings),
        "budgetTable": _budget_table(hank_file, settings),
        "executionDir": execution_dir,
        "env": _describe_env(env, hank_file),
    }


def _load_hank(hank_path: Path, errors: list[HankIssue]
               ) -> tuple[HankFile | ConfigError, HankFile | None, bool]:
    """The hank read once (or why it cannot be), the hank for the settings layers (its
    overrides), and whether loading it failed outright.

    Schema problems leave it unloaded but not failed: the preflight reports them, each at its
    path.  Any other problem (no file, not JSON) is one error, and the preflight is skipped."""
    from hankweave.app.preflight import read_hank
    from hankweave.config.errors import ROOT_PATH, HankIssue, HankValidationError
    from hankweave.config.hank import HankFile

    loaded = read_hank(hank_path)
    if isinstance(loaded, HankFile):
        return loaded, loaded, False
    if isinstance(loaded, HankValidationError):
        return loaded, None, False
    errors.append(HankIssue(ROOT_PATH, str(loaded)))
    return loaded, None, True


def _command_line_settings(model: str | None, max_cost: float | None, max_time: float | None
                           ) -> dict[str, Any]:
    """The command-line layer of the settings: ``-m``, ``--max-cost``, ``--max-time``."""
    ceiling = {"maxDollars": max_cost, "maxTimeSeconds": max_time}
    cli: dict[str, Any] = {"model": model}
    if max_cost is not None or max_time is not None:
        cli["budget"] = {key: value for key, value in ceiling.items() if value is not None}
    return cli


def _run_preflight(
    hank_path: Path,
    read: HankFile | ConfigError,
    env: Mapping[str, str],
    registry: Registry,
    model_override: str | None,
    errors: list[HankIssue],
    warnings: list[str],
) -> PreflightReport:
    from hankweave.app.preflight import run_preflight

    preflight = run_preflight(hank_path, env=env, registry=registry, model_override=model_override,
                              loaded=read)
    errors += preflight.errors
    warnings += preflight.warnings
    return preflight


def _check_plugin_settings(
    registry: Registry,
    resolved: ResolvedSettings,
    env: Mapping[str, str],
    errors: list[HankIssue],
    warnings: list[str],
) -> dict[str, HarnessConfig]:
    """Each plugin's section of the settings, checked by its own config model; the valid
    harness settings."""
    from hankweave.app.preflight import check_plugin_settings
    from hankweave.plugins import strict_plugins

    plugin_check = check_plugin_settings(registry, resolved, strict=strict_plugins(env))
    errors += plugin_check.errors
    warnings += plugin_check.warnings
    return plugin_check.harness_configs


def _check_agents(
    preflight: PreflightReport,
    registry: Registry,
    configs: Mapping[str, HarnessConfig],
    env: Mapping[str, str],
    offline: bool,
    errors: list[HankIssue],
    warnings: list[str],
) -> None:
    """Each codon's harness preflight, as ``run`` does it before creating anything."""
    from hankweave.app.preflight import check_agents

    found = check_agents(preflight, registry, configs, env, credentials=not offline)
    errors += found.errors
    warnings += found.warnings


def _resolve_settings(
    cwd: Path,
    hank: HankFile | None,
    env: Mapping[str, str],
    cli: Mapping[str, Any],
    errors: list[HankIssue],
    warnings: list[str],
) -> ResolvedSettings | None:
    """The launch settings (hankweave.json, overrides, HANKWEAVE_RUNTIME_*, -m); problems with
    them become errors that name the file or variable."""
    from hankweave.config.errors import ROOT_PATH, ConfigError, ConfigValidationError, HankIssue
    from hankweave.config.settings import (
        RUNTIME_CONFIG_FILE,
        EnvironmentSettingsError,
        RuntimeConfigValidationError,
        resolve_settings,
    )

    try:
        resolved = resolve_settings(cwd=cwd, hank=hank, env=env, cli=dict(cli))
    except RuntimeConfigValidationError as exc:
        errors.extend(HankIssue(f"{RUNTIME_CONFIG_FILE}:{i.path}", i.message) for i in exc.errors)
        return None
    except (EnvironmentSettingsError, ConfigValidationError) as exc:
        errors.extend(exc.errors)  # their paths are variable names already
        return None
    except ConfigError as exc:
        errors.append(HankIssue(f"{RUNTIME_CONFIG_FILE}:{ROOT_PATH}", str(exc)))
        return None
    warnings.extend(resolved.warnings)
    return resolved


def _hash_data(data_path: Path, settings: Settings | None, errors: list[HankIssue]) -> str | None:
    from hankweave.config.errors import HankIssue
    from hankweave.execution.datahash import DEFAULT_TIME_LIMIT_MS, hash_data_source

    limit = settings.data_hash_time_limit if settings is not None else DEFAULT_TIME_LIMIT_MS
    try:
        return hash_data_source(data_path, limit)
    except (FileNotFoundError, NotADirectoryError):
        message = (
            f"Data source not found: {data_path}. Pass an existing file or directory as "
            "DATA, or run from the directory that holds the data."
        )
    except ValueError as exc:
        message = str(exc)
    except OSError as exc:
        message = f"Cannot read the data source {data_path}: {exc.strerror or exc}"
    errors.append(HankIssue("data", message))
    return None


def _preview_execution_dir(
    hank_path: Path,
    data_hash: str,
    env: Mapping[str, str],
    execution: Path | None,
    errors: list[HankIssue],
    warnings: list[str],
    configured_root: str | None = None,
) -> dict[str, Any]:
    """Which execution directory ``hankweave run`` would use, found by reading only."""
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.execution.setup import find_execution_dir_for_resume, managed_executions_root

    root = managed_executions_root(env, configured_root)
    preview: dict[str, Any] = {
        "mode": "auto" if execution is None else "explicit",
        "managedRoot": str(root),
        "path": None,
        "action": "create",
        "hankChanged": False,
    }
    if execution is None:
        found = find_execution_dir_for_resume(data_hash, root)
        if found is None:
            return preview
        preview.update(path=str(found), action="resume")
    else:
        preview["path"] = str(execution)
        if not ExecutionLayout(execution).meta_file.is_file():
            _preview_new_execution(execution, root, preview, errors)
            return preview
        preview["action"] = "resume"
    _check_resume(hank_path, data_hash, preview, warnings)
    return preview


def _preview_new_execution(
    execution: Path, root: Path, preview: dict[str, Any], errors: list[HankIssue]
) -> None:
    """``-e DIR`` holding no execution: refused inside the managed root; a non-empty directory
    is used after a confirmation."""
    from hankweave.config.errors import HankIssue
    from hankweave.execution.setup import is_within

    if is_within(execution, root):
        errors.append(
            HankIssue(
                "execution",
                (
                    f"Cannot create a new execution in {root}: this location is reserved for "
                    f"auto-managed executions, and {execution} holds no execution to resume. "
                    "Leave out -e, or pass -e with a directory outside it."
                ),
            )
        )
    if execution.exists() and any(execution.iterdir()):
        preview["action"] = "use"  # non-empty: run asks for confirmation first


def _check_resume(
    hank_path: Path, data_hash: str, preview: dict[str, Any], warnings: list[str]
) -> None:
    """What a run would say before resuming ``preview["path"]``: unreadable metadata, a changed
    data source, a changed hank.json (which also sets ``hankChanged``)."""
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.execution.meta import ExecutionMetaError, load_execution_meta
    from hankweave.execution.setup import ExecutionSetupError, compute_hank_hash

    try:
        meta = load_execution_meta(ExecutionLayout(Path(preview["path"])).meta_file)
    except ExecutionMetaError as exc:
        warnings.append(f"execution: {exc}; a run would refuse to resume it")
        return
    if meta.data_hash != data_hash:
        warnings.append(
            f"execution: the data source changed since {preview['path']} was created (hash "
            f"{meta.data_hash}, now {data_hash}); a run needs --force to resume it"
        )
    try:
        hank_hash = compute_hank_hash(hank_path)
    except ExecutionSetupError:
        hank_hash = None
    if hank_hash is not None and meta.hank_hash and meta.hank_hash != hank_hash:
        preview["hankChanged"] = True
        warnings.append(
            f"execution: hank.json changed since the last run of {preview['path']}; a run asks "
            "for confirmation (or -y) before continuing with it"
        )


def _describe_hank(hank: HankFile | None, preflight: PreflightReport | None) -> dict[str, Any]:
    """Codons, loops, files, rig operations and budgets of a loaded hank (empty when none)."""
    from hankweave.config.refs import iter_hank_refs

    described: dict[str, Any] = {
        "meta": None,
        "codons": [],
        "loops": [],
        "promptFiles": [],
        "systemPromptFiles": [],
        "rigOperations": 0,
        "checkpointedCodons": [],
        "sentinels": [],
        "humanInTheLoop": [],
    }
    if hank is None or preflight is None:
        return described
    if hank.meta is not None:
        described["meta"] = hank.meta.model_dump(by_alias=True, exclude_none=True)

    sites = list(hank.codon_sites())
    # The preflight resolves codons in codon_sites() order, one entry each.
    resolved = preflight.models if len(preflight.models) == len(sites) else []
    described["codons"] = [
        _describe_codon(site, resolved[position] if resolved else None)
        for position, site in enumerate(sites)
    ]
    described["loops"] = _describe_loops(hank)
    refs = list(iter_hank_refs(hank))
    described["promptFiles"] = _unique(site.relative for site in refs if site.kind == "prompt")
    described["systemPromptFiles"] = _unique(
        site.relative for site in refs if site.kind == "system-prompt"
    )
    described["rigOperations"] = sum(len(site.codon.rig_setup or []) for site in sites)
    described["checkpointedCodons"] = [
        site.codon.id for site in sites if site.codon.checkpointed_files
    ]
    described["sentinels"] = _sentinels(sites)
    described["humanInTheLoop"] = _human_in_the_loop(hank, sites)
    return described


def _describe_codon(site: CodonSite, entry: ResolvedCodonModel | None) -> dict[str, Any]:
    """One codon of the report, with the model and harness the preflight resolved for it."""
    from hankweave.config.hank import RigCommand

    codon = site.codon
    model = entry.model if entry is not None else None
    rig = codon.rig_setup or []
    return {
        "id": codon.id,
        "name": codon.name,
        "path": site.path,
        "loop": site.loop.id if site.loop is not None else None,
        "model": codon.model,
        "resolvedModel": model.full_id if model is not None else None,
        "reasoningEffort": model.reasoning_effort if model is not None else None,
        "harness": entry.harness if entry is not None else None,
        "continuationMode": codon.continuation_mode,
        "rigOperations": {
            "copy": sum(1 for op in rig if not isinstance(op, RigCommand)),
            "command": sum(1 for op in rig if isinstance(op, RigCommand)),
        },
        "checkpointedFiles": list(codon.checkpointed_files or []),
        "outputFiles": sum(len(group.copy_) for group in codon.output_files or []),
        "onFailure": codon.on_failure or "abort",
        "budget": _budget_json(codon.budget),
    }


def _describe_loops(hank: HankFile) -> list[dict[str, Any]]:
    from hankweave.config.hank import Loop

    return [
        {
            "id": item.id,
            "name": item.name,
            "termination": item.terminate_on.model_dump(by_alias=True),
            "codons": [codon.id for codon in item.codons],
            "budget": _budget_json(item.budget),
        }
        for item in hank.hank
        if isinstance(item, Loop)
    ]


def _human_in_the_loop(hank: Any, sites: list[Any]) -> list[str]:
    """What waits for a person (docs/human-in-the-loop.md): gates, tool rules, questions off,
    budgets that ask (docs/budgets.md)."""
    from hankweave.config.hank import Loop

    found = [f"hank: {len(hank.tool_approval)} tool rule(s)"] if hank.tool_approval else []
    overrides = getattr(hank, "overrides", None)
    if _asks(getattr(overrides, "budget", None)):
        found.append("hank: its budget ceiling asks")
    found += [f"loop {item.id}: its budget asks" for item in hank.hank
              if isinstance(item, Loop) and _asks(item.budget)]
    for site in sites:
        codon, parts = site.codon, []
        gate = codon.approval_gate()
        if gate is not None:
            parts.append(f"approval {gate.when}")
        if _asks(codon.budget):
            parts.append("its budget asks")
        if codon.tool_approval:
            parts.append(f"{len(codon.tool_approval)} tool rule(s)")
        if not codon.ask_human_settings().enabled:
            parts.append("askHuman off")
        if parts:
            found.append(f"{codon.id}: {', '.join(parts)}")
    return found


def _asks(budget: Any) -> bool:
    return getattr(budget, "on_exceeded", None) == "ask"


def _sentinels(sites: list[Any]) -> list[str]:
    """``<codon>: <config>`` for each sentinel a codon attaches."""
    if not any(site.codon.sentinels for site in sites):
        return []
    from hankweave.sentinels.config import entry_ref

    return [f"{site.codon.id}: {entry_ref(entry)}" for site in sites
            for entry in site.codon.sentinels or []]


def _unique(values: Any) -> list[str]:
    return list(dict.fromkeys(values))


def _budget_json(budget: CodonBudget | ContainerBudget | None) -> dict[str, Any] | None:
    if budget is None:
        return None
    return budget.model_dump(by_alias=True, exclude_none=True)


def _describe_run_budget(settings: Settings | None) -> dict[str, Any] | None:
    """The run-wide ceiling after every settings layer (hankweave.json, overrides)."""
    if settings is None:
        return None
    return settings.budget.model_dump(by_alias=True, exclude_none=True)


def _budget_table(hank: HankFile | None, settings: Settings | None) -> dict[str, Any] | None:
    """The limits each entry of the initial plan would start with, nothing spent yet
    (docs/behaviour.md §3.9): ``{ceiling, entries: [...], loops: [...]}``."""
    if hank is None or settings is None:
        return None
    from hankweave.runtime.allocation import BudgetPlan, Pool, Progress
    from hankweave.runtime.planner import build_initial_plan

    pool = Pool.of_json(settings.budget.model_dump(by_alias=True, exclude_none=True)) or Pool()
    plan = BudgetPlan(build_initial_plan(hank), pool)
    nothing = Progress()
    return {
        "ceiling": pool.to_json(),
        "entries": [limits.to_json() for limits in plan.resolve_all(nothing)],
        "loops": [plan.resolve_loop(loop_id, nothing).to_json() for loop_id in plan.loop_ids()],
    }


def _describe_env(env: Mapping[str, str], hank: HankFile | None) -> dict[str, Any]:
    from hankweave.config.settings import PASSTHROUGH_ENV_PREFIX, hankweave_passthrough

    passthrough = hankweave_passthrough(env)
    variables: list[dict[str, str | None]] = [
        {"variable": PASSTHROUGH_ENV_PREFIX + name, "name": name, "value": mask_value(value)}
        for name, value in sorted(passthrough.set.items())
    ]
    variables += [
        {"variable": PASSTHROUGH_ENV_PREFIX + name, "name": name, "value": None}
        for name in sorted(passthrough.unset)
    ]
    codon_env: dict[str, dict[str, str]] = {}
    if hank is not None:
        for codon in (site.codon for site in hank.codon_sites()):
            if codon.env:
                codon_env[codon.id] = {k: mask_value(v) for k, v in sorted(codon.env.items())}
    return {"passthrough": variables, "codons": codon_env}


def mask_value(value: str) -> str:
    """A secret-safe rendering: the first characters of long values, ``****`` for the rest."""
    if len(value) < _MASK_MIN_LENGTH:
        return _MASK
    return value[:_MASK_KEEP] + _MASK


# ----- human output -----


def _console() -> Console:
    from rich.console import Console

    console = Console(highlight=False, markup=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = _PIPE_WIDTH
    return console


def _render_failure(report: dict[str, Any]) -> None:
    lines = ["Validation failed:"]
    lines += [f"  - {error['path']}: {error['message']}" for error in report["errors"]]
    if report["warnings"]:
        lines.append("Warnings:")
        lines += [f"  - {warning}" for warning in report["warnings"]]
    click.echo("\n".join(lines), err=True)


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.2f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}s"


def _budget_text(budget: dict[str, Any] | None) -> str:
    if not budget:
        return "-"
    parts = []
    if "maxDollars" in budget:
        parts.append(_money(budget["maxDollars"]))
    if "maxTimeSeconds" in budget:
        parts.append(_seconds(budget["maxTimeSeconds"]))
    if "maxOutputTokens" in budget:
        parts.append(f"{budget['maxOutputTokens']} out tokens")
    if "maxContextTokens" in budget:
        parts.append(f"{budget['maxContextTokens']} context tokens")
    if budget.get("allocation", "shared") != "shared":
        parts.append(budget["allocation"])
    if "onExceeded" in budget:
        parts.append(f"onExceeded {budget['onExceeded']}")
    return ", ".join(parts) or "-"


def _termination_text(termination: dict[str, Any]) -> str:
    if termination["type"] == "iterationLimit":
        return f"{termination['limit']} iterations"
    return "until the context is exceeded"


def _render_summary(report: dict[str, Any], console: Console) -> None:
    _render_header(report, console)
    _render_codons(report["codons"], console)
    _render_loops(report["loops"], console)
    _print_list(console, "Prompt files", report["promptFiles"])
    _print_list(console, "System prompt files", report["systemPromptFiles"])
    console.print(f"Rig operations: {report['rigOperations']}")
    _print_list(console, "Codons with checkpointed files", report["checkpointedCodons"])
    _print_list(console, "Sentinels", report["sentinels"])
    _print_list(console, "Human in the loop", report["humanInTheLoop"])
    _render_ceiling(report["budget"] or {}, console)
    _render_budget_table(report["budgetTable"], console)
    console.print(f"\nExecution directory: {_execution_text(report['executionDir'])}")
    _render_env(report["env"], console)
    if report["warnings"]:
        console.print("\nWarnings:")
        for warning in report["warnings"]:
            console.print(f"  - {warning}")
    console.print("\nThe hank is valid.")


def _render_header(report: dict[str, Any], console: Console) -> None:
    """The hank's name and description, the data source and the model override."""
    meta = report["meta"] or {}
    title = f"{meta['name']} {meta.get('version', '')}".strip() if meta.get("name") else "hank"
    console.print(f"Hank: {title}  ({report['hankPath']})")
    source = report.get("hankSource") or {}
    if source.get("remote"):
        remote = source["remote"]
        console.print(f"  from {remote['url']} {remote.get('ref', '')} at {remote['commit'][:12]}"
                      f"{'  path ' + remote['path'] if remote.get('path') else ''}",
                      markup=False, highlight=False)
    if source.get("bundleHash"):
        console.print(f"  from bundle {source['bundlePath']}, verified (bundleHash"
                      f" {source['bundleHash']})", markup=False, highlight=False)
    if meta.get("description"):
        console.print(f"  {meta['description']}")
    console.print(f"Data: {report['dataPath']}  (hash {report['dataHash']})")
    if report.get("dataNote"):
        console.print(f"  {report['dataNote']}")
    if report["modelOverride"]:
        console.print(f"Model override: every codon uses {report['modelOverride']}")


def _render_codons(codons: list[dict[str, Any]], console: Console) -> None:
    from hankweave.cli.tables import FitTable, TableColumn

    console.print(f"\nCodons: {len(codons)}")
    # Key columns: #, id, model; the rest fold into a line under each row when narrow.
    table = FitTable([
        TableColumn("#", key=True, justify="right"), TableColumn("Id", key=True), TableColumn("Name", priority=1),
        TableColumn("Model", key=True), TableColumn("Harness", priority=2), TableColumn("Session", priority=3),
        TableColumn("Loop", priority=0), TableColumn("Budget", priority=4, wrap_at=20),
    ])
    for index, codon in enumerate(codons):
        table.add_row(
            str(index),
            codon["id"],
            codon["name"],
            _model_text(codon),
            codon["harness"] or "-",
            codon["continuationMode"],
            codon["loop"] or "-",
            _budget_text(codon["budget"]),
        )
    console.print(table)


def _model_text(codon: dict[str, Any]) -> str:
    """The model a codon runs, with the reasoning effort a variant spelling asks for."""
    model = codon["resolvedModel"] or codon["model"]
    effort = codon["reasoningEffort"]
    return f"{model} (reasoning {effort})" if effort else model


def _render_loops(loops: list[dict[str, Any]], console: Console) -> None:
    console.print(f"\nLoops: {len(loops)}")
    for loop in loops:
        loop_budget = f"; budget {_budget_text(loop['budget'])}" if loop["budget"] else ""
        console.print(
            f"  {loop['id']} ({loop['name']}): {_termination_text(loop['termination'])}, "
            f"codons {', '.join(loop['codons'])}{loop_budget}"
        )


def _render_ceiling(budget: dict[str, Any], console: Console) -> None:
    """The run-wide budget ceiling after every settings layer."""
    ceiling = [
        f"dollars {_money(budget.get('maxDollars'))}",
        f"time {_seconds(budget.get('maxTimeSeconds'))}",
        f"allocation {budget.get('allocation', 'shared')}",
    ]
    if budget.get("shares"):
        ceiling.append("shares " + ", ".join(f"{k} {v:.0%}" for k, v in budget["shares"].items()))
    console.print(f"\nBudget ceiling: {', '.join(ceiling)}")


def _render_env(env: dict[str, Any], console: Console) -> None:
    """The HANKWEAVE_* passthrough and each codon's own environment, values masked."""
    if env["passthrough"]:
        console.print("\nHANKWEAVE_* variables passed to agents:")
        for variable in env["passthrough"]:
            shown = (
                "unset (removed from the agent environment)"
                if variable["value"] is None
                else variable["value"]
            )
            console.print(f"  {variable['variable']} -> {variable['name']}={shown}")
    for codon_id, values in env["codons"].items():
        console.print(
            f"Environment of codon {codon_id}: " + ", ".join(f"{k}={v}" for k, v in values.items())
        )


def _render_budget_table(table_json: dict[str, Any] | None, console: Console) -> None:
    """Each plan entry's limits at the start, with where they come from."""
    from hankweave.cli.tables import FitTable, TableColumn

    if table_json is None:
        return
    entries = table_json["entries"]
    limited = [e for e in entries if any(key in e for key in _LIMIT_KEYS)]
    if not limited and not table_json["loops"]:
        console.print("Budgets: no limits")
        return
    console.print("Budgets at the start (nothing spent; later loop iterations resolve as they"
                  " start):")
    # Key columns: codon, dollars; the rest fold into a line under each row when narrow.
    table = FitTable([
        TableColumn("Codon", key=True), TableColumn("Loop", priority=0), TableColumn("Dollars", key=True, wrap_at=20),
        TableColumn("Time", priority=1, wrap_at=16), TableColumn("Out tokens", priority=2),
        TableColumn("Context", priority=3), TableColumn("On exceeded", priority=4, wrap_at=16),
    ])
    for entry in entries:
        table.add_row(
            entry["codonId"],
            entry.get("loopId") or "-",
            _with_source(_money(entry.get("maxDollars")), entry.get("dollarsSource")),
            _with_source(_seconds(entry.get("maxTimeSeconds")), entry.get("timeSource")),
            str(entry.get("maxOutputTokens", "-")),
            str(entry.get("maxContextTokens", "-")),
            f"{entry['onExceeded']} ({entry['onExceededSource']})",
        )
    console.print(table)
    for loop in table_json["loops"]:
        console.print(
            f"Loop {loop['loopId']}: dollars "
            f"{_with_source(_money(loop.get('maxDollars')), loop.get('dollarsSource'))}, time "
            f"{_with_source(_seconds(loop.get('maxTimeSeconds')), loop.get('timeSource'))}"
        )


_LIMIT_KEYS = ("maxDollars", "maxTimeSeconds", "maxOutputTokens", "maxContextTokens")


def _with_source(value: str, source: str | None) -> str:
    return f"{value} ({source})" if source else value


def _print_list(console: Console, label: str, values: list[str]) -> None:
    console.print(f"{label}: {len(values)}" + (f" ({', '.join(values)})" if values else ""))


def _execution_text(preview: dict[str, Any] | None) -> str:
    if preview is None:
        return "unknown"
    if preview["action"] == "resume":
        changed = " (hank.json changed since its last run)" if preview["hankChanged"] else ""
        return f"would resume {preview['path']}{changed}"
    if preview["mode"] == "auto":
        return f"a new directory would be created under {preview['managedRoot']}"
    if preview["action"] == "use":
        return (
            f"would use {preview['path']} (not empty, holds no execution: a run asks for "
            "confirmation first)"
        )
    return f"a new execution would be created in {preview['path']}"


__all__ = ["build_report", "mask_value", "validate_command"]
