"""``hankweave run --mock-provider SCRIPT``: the run serves the script and points every codon's
agent at it (docs/testing-hanks.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hankweave.config.errors import ConfigError
from hankweave.mock_provider.script import load_script
from hankweave.registry import get_registry
from hankweave.testing.mock_provider import MockProviderLog
from tests.runtime_harness import Project, codon


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    project.env["HANKWEAVE_PLUGIN_MODULES"] = (
        "tests.http_agent,hankweave.testing.memory_checkpoints")
    return project


def write_script(project: Project, script: dict) -> str:
    path = project.root / "script.json"
    path.write_text(json.dumps(script))
    return str(path)


def test_a_dry_run_sends_each_codon_to_the_mock_and_prices_its_usage(project):
    project.write_hank([codon("plan", model="sonnet", promptText="Write the plan."),
                        codon("build", model="gpt-5.2", promptText="Build it.")])
    script = write_script(project, {"rules": [
        {"name": "plan", "when": {"lastUserMessage": "plan"},
         "reply": {"text": "Planned.", "usage": {"inputTokens": 1000, "outputTokens": 100}}},
        {"name": "build", "when": {"lastUserMessage": "Build"},
         "reply": {"text": "Built.", "usage": {"inputTokens": 2000, "outputTokens": 200}}}]})
    # A real key in the user's environment must not reach the agents.
    project.env["ANTHROPIC_API_KEY"] = "sk-real-key"

    outcome = project.run(mock_provider=script)

    assert outcome.code == 0
    assert outcome.statuses() == [("plan", "completed"), ("build", "completed")]
    log = MockProviderLog(project.hankweave_dir / "mock-provider" / "requests.jsonl")
    plan, build = log.requests()
    assert (plan.rule, build.rule) == ("rules[0] (plan)", "rules[1] (build)")
    assert "Write the plan." in plan.conversation_text()
    registry = get_registry()
    for codon_id, model, usage in (("plan", "sonnet", (1000, 100)),
                                   ("build", "gpt-5.2", (2000, 200))):
        price = registry.resolve_model(model).cost
        assert price is not None
        expected = (usage[0] * price.input + usage[1] * price.output) / 1_000_000
        assert outcome.record(codon_id).final_cost == pytest.approx(expected)
    assert any("mock provider at http://127.0.0.1:" in notice for notice in outcome.notices)


def test_the_mocks_dummy_key_replaces_the_users_and_the_codons_own(project, tmp_path):
    project.write_hank([codon("a", model="sonnet", env={"ANTHROPIC_API_KEY": "sk-codon"})])
    script = write_script(project, {"rules": [], "default": {"text": "ok"}})
    project.env["ANTHROPIC_API_KEY"] = "sk-user"

    assert project.run(mock_provider=script).code == 0
    (request,) = MockProviderLog(project.hankweave_dir / "mock-provider" / "requests.jsonl"
                                 ).requests()
    assert request.rule == "default"
    assert request.entry["auth"] == "mock"  # neither sk-user nor sk-codon reached the mock


def test_an_unmatched_request_fails_the_codon_with_the_mocks_error(project):
    project.write_hank([codon("a", model="sonnet")])
    script = write_script(project, {"rules": [
        {"when": {"lastUserMessage": "something else"}, "reply": {"text": "no"}}]})

    outcome = project.run(mock_provider=script)

    assert outcome.code == 1
    assert outcome.record("a").status == "failed"


def test_a_malformed_script_stops_the_launch_before_anything_is_created(project):
    project.write_hank([codon("a", model="sonnet")])
    script = write_script(project, {"rules": [{"name": "plan", "reply": {}}]})

    with pytest.raises(ConfigError, match=r"rules\[0\] \(plan\)\.reply"):
        project.run(mock_provider=script)
    assert not project.exec_dir.exists()


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mock-provider"


def test_the_documented_example_script_is_the_bundled_one_and_parses():
    text = (EXAMPLE / "script.json").read_text(encoding="utf-8")
    docs = (EXAMPLE.parents[1] / "docs" / "testing-hanks.md").read_text(encoding="utf-8")

    assert f"```json\n{text}```" in docs
    assert [rule.name for rule in load_script(EXAMPLE / "script.json").rules] == [
        "survey", "survey-done", "overloaded-once", "polish"]


def test_the_example_hank_dry_runs_with_its_script(project):
    shutil.copytree(EXAMPLE, project.hank_dir, dirs_exist_ok=True)

    outcome = project.run(mock_provider=str(EXAMPLE / "script.json"))

    assert outcome.code == 0, outcome.notices
    assert [(r.codon_id, r.status) for r in outcome.records("polish")] == [
        ("polish", "failed"), ("polish", "completed")]  # overloaded once, then retried
    rules = [r.rule for r in MockProviderLog(
        project.hankweave_dir / "mock-provider" / "requests.jsonl").requests()]
    assert rules == ["rules[0] (survey)", "rules[2] (overloaded-once)", "rules[3] (polish)"]


def test_the_mock_answers_even_with_an_anthropic_base_url_and_the_run_says_so(project):
    project.write_hank([codon("a", model="sonnet")])
    script = write_script(project, {"rules": [], "default": {"text": "ok"}})

    outcome = project.run(mock_provider=script, anthropic_base_url="http://127.0.0.1:9")

    assert outcome.code == 0
    assert len(MockProviderLog(project.hankweave_dir / "mock-provider" / "requests.jsonl"
                               ).requests()) == 1
    assert any("anthropicBaseUrl http://127.0.0.1:9 is not used" in notice
               for notice in outcome.notices)
