"""The kernel's side of the harness preflight (issue 36): each codon's harness is asked with the
environment its agent will receive, credential problems are left out under the mock provider
and ``--offline``, the same problem on several codons is reported once, and ``validate`` fails
with exit 2 naming the variable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from hankweave.app.preflight import AgentCheck, check_agents, run_preflight
from hankweave.harness import (
    Harness,
    HarnessConfig,
    PreflightKind,
    PreflightProblem,
    PreflightRequest,
)
from hankweave.hookspecs import hookimpl
from hankweave.models import ModelCost, ModelEntry, ProviderEntry
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry

KEY = "KEYED_API_KEY"


class KeyedHarness(Harness):
    """Needs ``KEYED_API_KEY``; ``KEYED_TOOL_MISSING=1`` in the agent's environment says its
    SDK is missing; a model id ending in ``-unsure`` gives a warning."""

    name: ClassVar[str] = "keyed"
    package: ClassVar[str] = "hankweave-test-keyed"

    @classmethod
    def preflight(cls, request: PreflightRequest, config: HarnessConfig
                  ) -> list[PreflightProblem]:
        problems = []
        if request.env.get("KEYED_TOOL_MISSING") == "1":
            problems.append(PreflightProblem(PreflightKind.INSTALL, "keyed-sdk is missing"))
        if not request.env.get(KEY):
            problems.append(PreflightProblem(
                PreflightKind.CREDENTIALS, f"set {KEY} (or HANKWEAVE_{KEY}) in the environment"))
        if request.model.model_id.endswith("-unsure"):
            problems.append(PreflightProblem(PreflightKind.MODEL, "cannot tell", warning=True))
        return problems

    def run_codon(self, request: Any, context: Any) -> Any:
        raise NotImplementedError("never run: these tests stop at the preflight")


class KeyedPlugin:
    @hookimpl
    def register_harnesses(self, register: Callable[[type[Harness]], None]) -> None:
        register(KeyedHarness)

    @hookimpl
    def register_models(self, register: Callable[[Any], None]) -> None:
        for model_id in ("keyed-1", "keyed-unsure"):
            register(ModelEntry(provider_id="keyed", model_id=model_id, name=model_id,
                                context_limit=100_000, output_limit=8_000,
                                cost=ModelCost(input=1, output=1)))
        register(ProviderEntry(provider_id="keyed", harness="keyed",
                               package="hankweave-test-keyed"))


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    pm = make_plugin_manager(load_entrypoints=False, env={})
    pm.register(KeyedPlugin())
    found = Registry(pm)
    monkeypatch.setattr("hankweave.registry.get_registry", lambda: found)
    return found


def write_hank(root: Path, *codons: dict[str, Any]) -> Path:
    items = [{"id": f"c{i}", "name": f"C{i}", "model": "keyed/keyed-1",
              "continuationMode": "fresh", "promptText": "x", **codon}
             for i, codon in enumerate(codons)]
    (root / "hank.json").write_text(json.dumps({"hank": items}))
    return root / "hank.json"


def agents(registry: Registry, hank: Path, env: dict[str, str], *,
           credentials: bool = True) -> AgentCheck:
    report = run_preflight(hank, env=env, registry=registry)
    assert not report.errors, report.errors
    return check_agents(report, registry, {}, env, credentials=credentials)


def test_a_missing_key_is_one_error_at_the_first_codon(registry: Registry, tmp_path: Path
                                                       ) -> None:
    found = agents(registry, write_hank(tmp_path, {}, {}, {}), {})

    assert [(e.path, e.message) for e in found.errors] == [
        ("hank[0].model", f"set {KEY} (or HANKWEAVE_{KEY}) in the environment"
                          " (and 2 more codons on it)")]


@pytest.mark.parametrize(("env", "codon_env"), [
    ({KEY: "k"}, {}),
    ({f"HANKWEAVE_{KEY}": "k"}, {}),  # the passthrough gives agents X
    ({}, {KEY: "k"}),  # the codon's own env
])
def test_the_key_counts_wherever_the_agent_will_get_it(registry: Registry, tmp_path: Path,
                                                       env: dict[str, str],
                                                       codon_env: dict[str, str]) -> None:
    found = agents(registry, write_hank(tmp_path, {"env": codon_env}), env)

    assert found.errors == []


def test_a_key_the_passthrough_unsets_does_not_count(registry: Registry, tmp_path: Path
                                                     ) -> None:
    found = agents(registry, write_hank(tmp_path, {}), {KEY: "k", f"HANKWEAVE_{KEY}": "unset"})

    assert [e.path for e in found.errors] == ["hank[0].model"]


def test_without_the_credential_check_other_problems_remain(registry: Registry, tmp_path: Path
                                                           ) -> None:
    hank = write_hank(tmp_path, {"model": "keyed/keyed-unsure"})

    found = agents(registry, hank, {"KEYED_TOOL_MISSING": "1"}, credentials=False)

    assert [e.message for e in found.errors] == ["keyed-sdk is missing"]
    assert found.warnings == ["hank[0].model: cannot tell"]


def test_validate_exits_2_naming_the_variable_and_offline_passes(
        registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hankweave.cli.validate_cmd import validate_command

    monkeypatch.delenv(KEY, raising=False)
    monkeypatch.setenv("HANKWEAVE_HOME", str(tmp_path / "managed"))
    monkeypatch.chdir(tmp_path)
    hank = write_hank(tmp_path, {})

    failed = CliRunner().invoke(validate_command, [str(hank), str(tmp_path)])
    offline = CliRunner().invoke(validate_command, [str(hank), str(tmp_path), "--offline"])

    assert failed.exit_code == 2, failed.output
    assert f"hank[0].model: set {KEY}" in failed.output
    assert offline.exit_code == 0, offline.output
    assert "The hank is valid." in offline.output


SENTINEL_KEY = "GEMINI_API_KEY"


def sentinel(fail_codon: bool) -> dict[str, Any]:
    """A codon's inline LLM sentinel on a Google model, which needs its key."""
    config = {"id": "watch", "name": "Watch", "model": "google/gemini-2.5-flash",
              "trigger": {"type": "event", "on": ["assistant.action"]},
              "execution": {"strategy": "immediate"}, "userPromptText": "Say OK."}
    return {"sentinels": [{"sentinelConfig": config, "settings": {"failCodonIfNotLoaded": fail_codon}}]}


@pytest.mark.parametrize(("fail_codon", "error"), [(True, True), (False, False)])
def test_a_sentinel_without_its_key_is_found_before_the_run(
        registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        fail_codon: bool, error: bool) -> None:
    for variable in (SENTINEL_KEY, "GOOGLE_API_KEY", "HANKWEAVE_SENTINEL_GOOGLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    hank = write_hank(tmp_path, sentinel(fail_codon))

    found = agents(registry, hank, {KEY: "k"})
    keyed = agents(registry, hank, {KEY: "k", "HANKWEAVE_SENTINEL_GOOGLE_API_KEY": "g"})
    offline = agents(registry, hank, {KEY: "k"}, credentials=False)

    problems = [e.message for e in found.errors] if error else found.warnings
    assert len(problems) == 1 and "sentinel watch:" in problems[0], found
    assert "HANKWEAVE_SENTINEL_GOOGLE_API_KEY" in problems[0]
    assert bool(found.errors) is error
    assert (keyed.errors, keyed.warnings) == ([], [])
    assert (offline.errors, offline.warnings) == ([], [])
