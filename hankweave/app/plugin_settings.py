"""What settings enable from the installed plugins: each harness's settings, event sinks and
the LLM proxy's middleware.

Settings only carry these sections as data (``harnesses.<name>``, ``events.sinks``,
``proxy.middleware``); this is where they meet the plugins that define them.  Both ``hankweave validate`` and ``hankweave run``
go through here, before an execution directory is created, so a bad section is reported with
its JSON path and where it was set, and nothing is recorded for a launch that cannot start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from hankweave.config.errors import HankIssue, issues_from_validation_error

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from hankweave.config.settings import SinkSpec
    from hankweave.events.sink import EventSink
    from hankweave.harness import Harness, HarnessConfig
    from hankweave.proxy.types import ProxyMiddleware
    from hankweave.registry import Registry


@dataclass
class HarnessSettings:
    """The validated ``harnesses.<name>`` sections, and what was wrong with the others."""

    configs: dict[str, HarnessConfig] = field(default_factory=dict)
    errors: list[HankIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def harness_settings(registry: Registry, sections: Mapping[str, Mapping[str, object]],
                     sources: Mapping[str, Mapping[str, str]] | None = None
                     ) -> HarnessSettings:
    """Validate each section against its harness's ``Config`` model.

    ``sources`` says which settings layer set each key (``ResolvedSettings.harness_sources``);
    errors name it.  A section for a harness that is not installed is a warning: one settings
    file may serve machines with different harnesses.
    """
    report = HarnessSettings()
    installed = registry.harnesses()
    for name, section in sections.items():
        harness = installed.get(name)
        if harness is None:
            report.warnings.append(f'harnesses.{name}: settings for harness "{name}", which is'
                                   " not installed, are ignored")
            continue
        config, errors = harness_config(harness, section, (sources or {}).get(name))
        if config is not None:
            report.configs[name] = config
        report.errors += errors
    return report


def harness_config(harness: type[Harness], section: Mapping[str, object],
                   sources: Mapping[str, str] | None = None
                   ) -> tuple[HarnessConfig | None, list[HankIssue]]:
    """One harness's settings: its validated ``Config``, or the problems, each at its path
    (``harnesses.<name>.<key>``) and naming the layer that set the key."""
    try:
        return harness.Config.model_validate(dict(section)), []
    except ValidationError as exc:
        errors = []
        for issue in issues_from_validation_error(exc, harness.Config):
            key = issue.path.split(".", 1)[0].split("[", 1)[0]
            origin = f" (set in {sources[key]})" if sources and key in sources else ""
            path = f"harnesses.{harness.name}" + (
                "" if issue.path == "<root>" else f".{issue.path}")
            errors.append(HankIssue(path, issue.message + origin))
        return None, errors


@dataclass
class SinkReport:
    """The event sinks settings enable, built; and the ones that could not be."""

    sinks: list[EventSink] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """One line each: ``events.sinks[1]: ...``."""

    def close(self) -> None:
        """Close every sink built (a launch that stops before running hands them back)."""
        for sink in self.sinks:
            sink.close()


def build_sinks(registry: Registry, specs: Sequence[SinkSpec], *,
                construct: bool = True) -> SinkReport:
    """Build each enabled sink from its settings, in order; with ``construct=False`` only
    check that it exists and that its settings are valid (``hankweave validate``)."""
    report = SinkReport()
    report.sinks, report.problems = _build_enabled(
        registry.event_sinks(), specs, "events.sinks", "event sink", construct)
    return report


def build_proxy_middleware(registry: Registry, specs: Sequence[SinkSpec], *,
                           construct: bool = True
                           ) -> tuple[list[ProxyMiddleware], list[str]]:
    """The LLM proxy middleware ``proxy.middleware`` enables, built in order, and the
    problems (one line each: ``proxy.middleware[0]: ...``)."""
    return _build_enabled(registry.proxy_middleware(), specs, "proxy.middleware",
                          "proxy middleware", construct)


def _build_enabled(installed: Mapping[str, type[Any]], specs: Sequence[SinkSpec], key: str,
                   kind: str, construct: bool) -> tuple[list[Any], list[str]]:
    """Each enabled plugin object (``{name, config}``) built with its validated ``Config``."""
    built: list[Any] = []
    problems: list[str] = []
    for index, spec in enumerate(specs):
        where = f"{key}[{index}]"
        cls = installed.get(spec.name)
        if cls is None:
            names = ", ".join(sorted(installed)) or "none"
            problems.append(f'{where}: no installed {kind} is named "{spec.name}"'
                            f" (installed: {names})")
            continue
        try:
            config = cls.Config.model_validate(spec.config or {})
        except ValidationError as exc:
            problems.extend(
                f"{where}.config" + ("" if issue.path == "<root>" else f".{issue.path}")
                + f": {issue.message}"
                for issue in issues_from_validation_error(exc, cls.Config))
            continue
        if not construct:
            continue
        try:
            built.append(cls(config))
        except Exception as exc:  # a plugin's constructor: report it, never crash the launch
            problems.append(f'{where}: {kind} "{spec.name}" could not be built:'
                            f" {type(exc).__name__}: {exc}")
    return built, problems
