"""Preflight: everything that must hold before any codon of a hank starts.

Used by ``hankweave validate`` (which stops here) and ``hankweave run`` (which stops on errors).
Checks, in order, collecting every problem rather than stopping at the first: the hank file's
schema, the global model override, ``requirements.env``, the strict file-reference rules, that
referenced files exist, the semantic rules (ids, loops, continuation, rig, budgets), that every
codon's model resolves through the model catalogue to an installed harness that can do what the
codon asks (resume a session), and, with :func:`check_plugin_settings`, the settings sections
plugins define (``harnesses.<name>``, ``events.sinks``).  Last, once the harness settings are
known, :func:`check_agents` asks each codon's harness whether it could run it (packages,
credentials in the environment the agent will receive: ``Harness.preflight``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hankweave.app.plugin_settings import build_proxy_middleware, build_sinks, harness_settings
from hankweave.config.errors import ConfigError, HankIssue
from hankweave.config.hank import Codon, HankFile, SandboxSettings, load_hank

if TYPE_CHECKING:
    from hankweave.config.settings import ResolvedSettings
    from hankweave.harness import Harness, HarnessConfig, PreflightProblem
    from hankweave.models import ModelEntry
    from hankweave.registry import Registry
    from hankweave.sentinels.config import LoadedSentinelConfig


@dataclass
class ResolvedCodonModel:
    codon_id: str
    model: ModelEntry | None
    harness: str | None
    harness_class: type[Harness] | None = None


@dataclass
class PreflightReport:
    hank_path: Path
    hank: HankFile | None = None
    errors: list[HankIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    models: list[ResolvedCodonModel] = field(default_factory=list)
    sentinels: list[tuple[str, LoadedSentinelConfig]] = field(default_factory=list)
    """Every codon's sentinel configs that loaded, each with where its codon lists it."""

    @property
    def ok(self) -> bool:
        return self.hank is not None and not self.errors

    def raise_for_errors(self) -> None:
        if not self.ok:
            raise PreflightError(self)


class PreflightError(ConfigError):
    """A hank that cannot run: every problem, each with where it is."""

    def __init__(self, report: PreflightReport) -> None:
        self.report = report
        count = len(report.errors)
        lines = [f"{report.hank_path}: {count} problem{'s' if count != 1 else ''}"
                 " prevent this hank from running:"]
        lines += [f"  - {issue.path}: {issue.message}" for issue in report.errors]
        super().__init__("\n".join(lines))


def read_hank(hank_path: Path) -> HankFile | ConfigError:
    """The hank at ``hank_path``, or why it cannot be loaded.  Read once per launch: the
    settings layers take its overrides and :func:`run_preflight` reports the problem."""
    try:
        return load_hank(hank_path)
    except ConfigError as exc:
        return exc


def run_preflight(hank_path: Path, *, env: Mapping[str, str], registry: Registry,
                  model_override: str | None = None,
                  check_harnesses: bool = True,
                  loaded: HankFile | ConfigError | None = None) -> PreflightReport:
    """Check a hank completely without creating or changing anything (``loaded``: what
    :func:`read_hank` gave, when the caller has read it already)."""
    from hankweave.config.errors import HankValidationError
    from hankweave.config.refs import check_hank_refs, check_ref_files_exist
    from hankweave.config.semantic import validate_hank_semantics
    from hankweave.config.settings import (
        MissingEnvironmentError,
        apply_model_override,
        missing_required_env,
    )

    report = PreflightReport(hank_path=hank_path)
    if loaded is None:
        loaded = read_hank(hank_path)
    if isinstance(loaded, HankValidationError):
        report.errors = list(loaded.errors) + _raw_ref_problems(hank_path, loaded.errors)
        report.warnings = [str(issue) for issue in loaded.warnings]
        return report
    if isinstance(loaded, ConfigError):  # missing or unreadable file
        report.errors = [HankIssue("<root>", str(loaded))]
        return report
    report.warnings = [str(issue) for issue in loaded.ignored_keys]
    hank = apply_model_override(loaded, model_override)
    report.hank = hank
    hank_dir = hank_path.parent
    missing = missing_required_env(hank, env)
    if missing:
        report.errors.append(HankIssue("requirements.env", str(MissingEnvironmentError(missing))))
    report.errors += _check_tools(hank, env)
    ref_errors = check_hank_refs(hank, hank_dir)
    report.errors += ref_errors
    if not ref_errors:
        report.errors += check_ref_files_exist(hank, hank_dir)
    report.errors += _check_models(hank, registry, report, check_harnesses)
    resolved = {m.codon_id: m.model for m in report.models}

    def model_key(codon: Codon) -> str:
        model = resolved.get(codon.id)
        return model.full_id if model is not None else codon.model

    def pricing_known(codon: Codon) -> bool:
        model = resolved.get(codon.id)
        return model is None or model.cost is not None

    semantic = validate_hank_semantics(hank, hank_dir, model_key=model_key,
                                       pricing_known=pricing_known)
    report.errors += semantic.errors
    report.warnings += semantic.warnings
    # Only a hank whose own refs are sound: a missing config file is already an error above.
    if not report.errors and any(site.codon.sentinels for site in hank.codon_sites()):
        _check_sentinels(hank, hank_dir, registry, report)
    return report


def _check_tools(hank: HankFile, env: Mapping[str, str]) -> list[HankIssue]:
    """``requirements.tools`` against the agents' ``PATH`` (probed as docs/behaviour.md §1.1
    says: looked up, and asked ``--version`` when a version is required)."""
    from hankweave.config.settings import agent_env
    from hankweave.config.tools import check_required_tools

    tools = hank.requirements.tools if hank.requirements and hank.requirements.tools else []
    if not tools:
        return []
    agents = agent_env(env)
    return [HankIssue("requirements.tools", problem)
            for problem in check_required_tools(list(tools), agents)]


def _check_sentinels(hank: HankFile, hank_dir: Path, registry: Registry,
                     report: PreflightReport) -> None:
    """Load every codon's sentinel configs as its start will.  A config that cannot load is an
    error whether or not the codon requires it (``failCodonIfNotLoaded``), as in the original:
    a broken config is the author's to fix.  Their credentials are :func:`check_agents`'s."""
    from hankweave.config.errors import format_path
    from hankweave.sentinels.config import SentinelConfigLoader

    loader = SentinelConfigLoader(triggers=registry.sentinel_triggers(),
                                  kinds=registry.sentinel_kinds())
    for site in hank.codon_sites():
        entries = site.codon.sentinels or []
        if not entries:
            continue
        where = format_path((*site.at, "sentinels"))
        result = loader.load(entries, hank_dir, codon_id=site.codon.id)
        # A config's own problems are listed under it, indented.
        report.errors += [HankIssue(where, f"{error.ref}: {error.error}".replace("\n", "\n    "))
                          for error in result.errors]
        for loaded in result.configs:
            report.sentinels.append((where, loaded))
            report.warnings += [f"{where}: sentinel {loaded.config.id}: {issue}"
                                for issue in loaded.config.warnings]


def _raw_ref_problems(hank_path: Path, known: list[HankIssue]) -> list[HankIssue]:
    """Symlink violations of a hank that failed its schema, so all are reported together."""
    import json
    import os

    from hankweave.config.refs import raw_hank_refs, ref_policy_problem

    try:
        data = json.loads(hank_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    hank_dir = Path(os.path.abspath(hank_path.parent))
    reported = {issue.path for issue in known}
    problems = []
    for site in raw_hank_refs(data):
        if site.path in reported:
            continue
        problem = ref_policy_problem(site, hank_dir)
        if problem is not None:
            problems.append(site.issue(problem))
    return problems


def _check_models(hank: HankFile, registry: Registry, report: PreflightReport,
                  check_harnesses: bool = True) -> list[HankIssue]:
    from hankweave.harness import HarnessSelectionError
    from hankweave.models import UnknownModelError

    problems: list[HankIssue] = []
    explained: set[str] = set()
    for site in hank.codon_sites():
        path, codon = site.path, site.codon
        try:
            resolution = registry.resolve(codon.model)
        except UnknownModelError as exc:
            problems.append(HankIssue(f"{path}.model", f"Invalid model '{codon.model}' (codon"
                                                       f" {codon.id}): {exc}"))
            report.models.append(ResolvedCodonModel(codon.id, None, None))
            continue
        model = resolution.model
        # A name that is not plainly one model is explained once, at its first codon.
        if resolution.notice is not None and codon.model not in explained:
            explained.add(codon.model)
            report.warnings.append(f"{path}.model: {resolution.notice}")
        harness, harness_class = None, None
        if check_harnesses:  # a replay plays every codon, whatever its model's harness
            try:
                selected = registry.select_harness(model)
            except HarnessSelectionError as exc:
                problems.append(HankIssue(f"{path}.model", str(exc)))
            else:
                harness, harness_class = selected.name, selected
                problems += _resume_problems(path, codon, selected.name, selected.supports_resume)
        report.models.append(ResolvedCodonModel(codon.id, model, harness, harness_class))
    return problems


def _resume_problems(path: str, codon: Codon, harness: str, supports_resume: bool
                     ) -> list[HankIssue]:
    """A codon that continues an agent session needs a harness that can resume one."""
    if supports_resume:
        return []
    found = []
    if codon.continuation_mode == "continue-previous":
        found.append(HankIssue(f"{path}.continuationMode", f'"continue-previous" needs a harness'
                               f' that resumes sessions; "{harness}" cannot'))
    if codon.exhaust_with_prompt is not None:
        found.append(HankIssue(f"{path}.exhaustWithPrompt", f'extensions resume the session;'
                               f' harness "{harness}" cannot'))
    return found


@dataclass
class PluginSettingsCheck:
    """What :func:`check_plugin_settings` found."""

    harness_configs: dict[str, HarnessConfig] = field(default_factory=dict)
    errors: list[HankIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_plugin_settings(registry: Registry, resolved: ResolvedSettings, *,
                          strict: bool) -> PluginSettingsCheck:
    """Validate the ``harnesses.<name>`` sections, the enabled sinks' and proxy middleware's
    settings.

    A bad harness section or proxy middleware is an error.  A sink that cannot be built is a warning (it would be
    skipped), an error when ``strict`` (``HANKWEAVE_STRICT_PLUGINS=1``, where it is fatal).
    """
    settings = resolved.settings
    harnesses = harness_settings(registry, settings.harnesses, resolved.harness_sources)
    check = PluginSettingsCheck(harnesses.configs, list(harnesses.errors),
                                list(harnesses.warnings))
    for problem in build_sinks(registry, settings.events.sinks, construct=False).problems:
        if strict:
            path, _, message = problem.partition(": ")
            check.errors.append(HankIssue(path, message))
        else:
            check.warnings.append(f"{problem}; the sink would be skipped")
    # Middleware decide what reaches a provider: one that cannot be built is always an error.
    _, problems = build_proxy_middleware(registry, settings.proxy.middleware, construct=False)
    from hankweave.config.settings import RUNTIME_CONFIG_FILE

    where = resolved.runtime_config_path or RUNTIME_CONFIG_FILE
    for problem in problems:
        path, _, message = problem.partition(": ")
        check.errors.append(HankIssue(path, f"{message} (set in {where})"))
    if settings.proxy.middleware and settings.without_proxy:
        check.warnings.append(
            "proxy.middleware is set, but agents call their providers directly: it runs only"
            " with the LLM proxy (run --proxy, or \"withoutProxy\": false)")
    return check


@dataclass
class AgentCheck:
    """What :func:`check_agents` found."""

    errors: list[HankIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_agents(report: PreflightReport, registry: Registry,
                 harness_configs: Mapping[str, HarnessConfig], env: Mapping[str, str], *,
                 credentials: bool = True) -> AgentCheck:
    """Ask every codon's harness whether it could run the codon (``Harness.preflight``).

    ``env`` is the runtime's environment; each codon's agent gets it with the ``HANKWEAVE_<X>``
    passthrough and the codon's ``env`` applied, as the runtime will.  ``credentials=False``
    (the mock provider, ``validate --offline``) leaves out the credential problems.  The same
    problem on several codons is reported once, at the first, naming how many more share it.
    """
    from hankweave.harness import PreflightKind

    if report.hank is None:
        return AgentCheck()
    catalogue = registry.models()
    found: dict[str, list[str]] = {}  # message -> paths, in codon order
    warnings: dict[str, list[str]] = {}
    # _check_models resolved one model per site, in this order.
    for site, resolved in zip(report.hank.codon_sites(), report.models, strict=True):
        harness, model = resolved.harness_class, resolved.model
        if harness is None or model is None:
            continue  # already an error, or a replay (its recording plays every codon)
        config = harness_configs.get(harness.name) or harness.Config()
        for problem in _agent_problems(harness, model, config, env, site.codon.env or {},
                                       model.full_id.lower() in catalogue):
            if problem.kind is PreflightKind.CREDENTIALS and not credentials:
                continue
            target = warnings if problem.warning else found
            target.setdefault(problem.message, []).append(f"{site.path}.model")
    check = AgentCheck()
    for message, paths in found.items():
        check.errors.append(HankIssue(paths[0], message + _also(paths)))
    check.warnings += [f"{paths[0]}: {message}{_also(paths)}" for message, paths in warnings.items()]
    if credentials:
        _check_sentinel_credentials(report, env, check)
    return check


def _check_sentinel_credentials(report: PreflightReport, env: Mapping[str, str],
                                check: AgentCheck) -> None:
    """An LLM sentinel without a key for its model would fail to load at its codon's start:
    an error when the entry says ``failCodonIfNotLoaded`` (the codon would fail, after the
    codons before it spent money), else a warning (the codon would run without it)."""
    from hankweave.providers import CredentialsError, sentinel_route

    for where, loaded in report.sentinels:
        config = loaded.config
        if config.kind_name != "llm" or not config.model:
            continue
        try:
            sentinel_route(config.model, env)
        except CredentialsError as exc:
            if loaded.fail_codon_if_not_loaded:
                check.errors.append(HankIssue(where, f"sentinel {config.id}: {exc}"))
            else:
                check.warnings.append(f"{where}: sentinel {config.id}: {exc}; its codon would"
                                      " run without it")


def _agent_problems(harness: type[Harness], model: ModelEntry, config: HarnessConfig,
                    env: Mapping[str, str], codon_env: Mapping[str, str], catalogued: bool
                    ) -> list[PreflightProblem]:
    """One codon's problems, its agent environment built as the runtime builds it."""
    from hankweave.config.settings import agent_env, hankweave_passthrough
    from hankweave.harness import PreflightRequest

    overlay = {**hankweave_passthrough(env).set, **codon_env}
    request = PreflightRequest(model=model, env=agent_env(env, codon_env),
                               env_overlay=overlay, catalogued=catalogued)
    return harness.preflight(request, config)


def _also(paths: list[str]) -> str:
    more = len(paths) - 1
    return "" if not more else f" (and {more} more codon{'s' if more != 1 else ''} on it)"


def check_sandbox(hank: HankFile, run: SandboxSettings) -> tuple[list[HankIssue], str | None]:
    """The sandbox the hank's agents get (docs/sandbox.md): a problem when a codon's sandbox
    is ``required`` and bubblewrap cannot give one here, and what to tell the person (the
    launch says it once per execution; None: every codon has it off)."""
    from hankweave.config.settings import effective_sandbox
    from hankweave.sandbox import bubblewrap_problem

    modes = {codon_id: effective_sandbox(codon, run).mode
             for codon_id, codon in hank.codon_configs().items()}
    if all(mode == "off" for mode in modes.values()):
        return [], None
    problem = bubblewrap_problem()
    if problem is None:
        return [], ("Agents run in a bubblewrap sandbox: they write only in agentRoot/, read the"
                    " data, and see neither your home directory nor .hankweave/ (docs/sandbox.md)")
    required = sorted(codon_id for codon_id, mode in modes.items() if mode == "required")
    if required:
        where = "sandbox.mode" if run.mode == "required" else f"codon {required[0]}: sandbox.mode"
        return [HankIssue(where, f"a sandbox is required, but {problem}; install bubblewrap, or"
                                 " set sandbox.mode to auto to run unsandboxed")], None
    return [], (f"warning: agents run without a sandbox: {problem}. They can read and change"
                " anything you can; set sandbox.mode to off to silence this, or required to"
                " refuse (docs/sandbox.md)")
