"""Compatibility suite: hanks in Hankweave 0.10.0's format, checked as the original would.

Each directory under ``hanks/`` is one case: a ``hank.json`` (with the files it references) and an
``expected.json`` saying what the original's documented behaviour, with hankweave's deliberate
differences (docs/differences.md), makes of it.  The format of ``expected.json`` is in
``README.md``.  Every case is validated the way ``hankweave validate`` does, without creating
anything; every valid case is also run to completion in-process, with the scripted fake agent
standing in for every model.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hankweave.app.preflight import PreflightReport, run_preflight
from hankweave.config.errors import ConfigError
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry
from hankweave.testing.fake_harness import CLAIM_ALL_ENV, use_script
from tests.runtime_harness import Project

HANKS = Path(__file__).parent / "hanks"

_CASE_KEYS = {"description", "spec", "env", "valid", "errors", "warnings", "models", "run", "xfail"}
_MODEL_KEYS = {"provider", "model", "modelPrefix", "harness"}
_RUN_KEYS = {"completed", "statuses", "exitCode", "fakeScript", "agentFiles", "outputs", "skip", "xfail"}


@dataclass(frozen=True)
class Case:
    name: str
    directory: Path
    expected: dict[str, Any]

    @property
    def env(self) -> dict[str, str]:
        return dict(self.expected.get("env", {}))

    @property
    def run(self) -> dict[str, Any]:
        return dict(self.expected.get("run", {}))


def _cases() -> list[Case]:
    return [
        Case(path.name, path, json.loads((path / "expected.json").read_text(encoding="utf-8")))
        for path in sorted(HANKS.iterdir())
        if path.is_dir()
    ]


CASES = _cases()


def _validation_params() -> Iterator[Any]:
    for case in CASES:
        marks = []
        if "xfail" in case.expected:
            marks.append(pytest.mark.xfail(reason=case.expected["xfail"], strict=True,
                                           raises=AssertionError))
        yield pytest.param(case, id=case.name, marks=marks)


def _run_params() -> Iterator[Any]:
    for case in CASES:
        if not case.expected.get("valid"):
            continue
        marks = []
        if "skip" in case.run:
            marks.append(pytest.mark.skip(reason=case.run["skip"]))
        if "xfail" in case.run:
            # A run that disagrees fails an assertion, or is refused by its preflight.
            marks.append(pytest.mark.xfail(reason=case.run["xfail"], strict=True,
                                           raises=(AssertionError, ConfigError)))
        yield pytest.param(case, id=case.name, marks=marks)


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The built-in model catalogue and routing only: no installed plugin changes a verdict."""
    return Registry(make_plugin_manager(load_entrypoints=False, env={}))


def _copy_case(case: Case, destination: Path) -> Path:
    """The case's hank directory, without its expectations, at ``destination``."""
    shutil.copytree(case.directory, destination, ignore=shutil.ignore_patterns("expected.json"))
    return destination


def _placeholders(text: str, hank_dir: Path) -> str:
    return text.replace("{hankDir}", str(hank_dir)).replace("{hankParent}", str(hank_dir.parent))


def _harness_of(registry: Registry, model: Any) -> str | None:
    """The harness the original's routing (reference §4.3) picks, without it being installed."""
    if model.harness_override:
        return str(model.harness_override)
    provider = registry.provider_for(model)
    return provider.harness if provider is not None else None


def _model_mismatches(case: Case, report: PreflightReport, registry: Registry) -> list[str]:
    resolved = {entry.codon_id: entry.model for entry in report.models}
    problems = []
    for codon_id, want in case.expected.get("models", {}).items():
        model = resolved.get(codon_id)
        if model is None:
            problems.append(f"codon {codon_id!r}: model did not resolve")
            continue
        seen = {"provider": model.provider_id, "model": model.model_id,
                "harness": _harness_of(registry, model)}
        for key in ("provider", "model", "harness"):
            if key in want and want[key] != seen[key]:
                problems.append(f"codon {codon_id!r}: {key} {seen[key]!r}, expected {want[key]!r}")
        prefix = want.get("modelPrefix")
        if prefix is not None and not model.model_id.startswith(prefix):
            problems.append(f"codon {codon_id!r}: model {model.model_id!r} does not start with "
                            f"{prefix!r}")
    return problems


def _differences(label: str, seen: Counter[Any], expected: Counter[Any]) -> list[str]:
    lines = [f"unexpected {label}: {item}" for item in (seen - expected).elements()]
    lines += [f"missing {label}: {item}" for item in (expected - seen).elements()]
    return lines


def test_every_case_is_well_formed() -> None:
    """Expectation files say what they mean: no misspelt keys, verdicts that match the errors."""
    assert CASES, f"no cases under {HANKS}"
    problems = []
    for case in CASES:
        exp = case.expected
        where = case.name
        if not (case.directory / "hank.json").is_file():
            problems.append(f"{where}: no hank.json")
        problems += [f"{where}: unknown key {key!r}" for key in sorted(set(exp) - _CASE_KEYS)]
        for key in ("description", "valid", "errors", "warnings"):
            if key not in exp:
                problems.append(f"{where}: missing {key!r}")
        if exp.get("valid") is not (not exp.get("errors")):
            problems.append(f"{where}: 'valid' must be true exactly when 'errors' is empty")
        for error in exp.get("errors", []):
            if set(error) != {"path", "message"}:
                problems.append(f"{where}: error {error} needs exactly 'path' and 'message'")
        if not all(isinstance(w, str) for w in exp.get("warnings", [])):
            problems.append(f"{where}: warnings must be strings")
        for codon_id, want in exp.get("models", {}).items():
            problems += [f"{where}: models.{codon_id}: unknown key {key!r}"
                         for key in sorted(set(want) - _MODEL_KEYS)]
        run = exp.get("run")
        if exp.get("valid"):
            if not run or len({"completed", "statuses", "skip"} & set(run)) != 1:
                problems.append(f"{where}: a valid case says how it runs (one of 'completed', "
                                "'statuses' or 'skip')")
        elif run is not None:
            problems.append(f"{where}: an invalid case cannot run")
        problems += [f"{where}: run: unknown key {key!r}" for key in sorted(set(run or {}) - _RUN_KEYS)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("case", list(_validation_params()))
def test_case_validates_as_in_the_original(case: Case, tmp_path: Path, registry: Registry) -> None:
    hank_dir = _copy_case(case, tmp_path / case.name)
    hank_file = hank_dir / "hank.json"
    before = hank_file.read_bytes()

    report = run_preflight(hank_file, env=case.env, registry=registry, check_harnesses=False)

    exp = case.expected
    seen_errors = Counter((issue.path, issue.message) for issue in report.errors)
    expected_errors = Counter((e["path"], _placeholders(e["message"], hank_dir))
                              for e in exp["errors"])
    problems = _differences("error", seen_errors, expected_errors)
    problems += _differences("warning", Counter(report.warnings),
                             Counter(_placeholders(w, hank_dir) for w in exp["warnings"]))
    if (not report.errors) != exp["valid"]:
        problems.insert(0, f"verdict: valid={not report.errors}, expected valid={exp['valid']}")
    problems += _model_mismatches(case, report, registry)
    # The original added "$schema" to the file on every validation; hankweave never writes it.
    if hank_file.read_bytes() != before:
        problems.append("validation rewrote hank.json")
    assert not problems, f"{case.name}: {exp['description']}\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("case", list(_run_params()))
def test_valid_case_runs_on_the_fake_harness(case: Case, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    project = Project(tmp_path / "project")
    shutil.rmtree(project.hank_dir)
    _copy_case(case, project.hank_dir)
    project.env.update(case.env)
    monkeypatch.setenv(CLAIM_ALL_ENV, "1")  # the fake agent plays every model, priced as that model
    run = case.run
    try:
        outcome = project.run(run.get("fakeScript"), output=str(project.output_dir))
    finally:
        use_script(None)

    expected_code = run.get("exitCode", 0)
    assert outcome.code == expected_code, (
        f"{case.name}: exit {outcome.code}, expected {expected_code}\n" + "\n".join(outcome.notices))
    statuses = ([(codon_id, "completed") for codon_id in run["completed"]] if "completed" in run
                else [tuple(pair) for pair in run["statuses"]])
    assert outcome.statuses() == statuses
    missing = [f for f in run.get("agentFiles", []) if not (project.agent_root / f).exists()]
    assert not missing, f"not in agentRoot after the run: {missing}"
    missing = [f for f in run.get("outputs", []) if not (project.output_dir / f).exists()]
    assert not missing, f"not copied to the output directory: {missing}"
