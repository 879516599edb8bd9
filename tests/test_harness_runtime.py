"""The kernel's side of the harness contract, in real runs with the fake agent.

The attempt context (process reports, tool authorization, questions for a human), per-harness
settings, the idle timeout a harness declares, one instance per attempt, a bounded close that
kills what the harness reported, an error after a success result, and unknown prices.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import pytest

from hankweave.app import launch
from hankweave.config.errors import ConfigError
from hankweave.fsutil import process_running
from hankweave.harness import CodonRequest
from hankweave.models import ModelEntry
from hankweave.testing import RecordingPolicy, run_attempt, use_script
from hankweave.testing.fake_harness import FAKE_MODEL, FakeHarness
from tests.runtime_harness import Project, codon, wait_for_status


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


def request(tmp_path, codon_id: str = "a", model: ModelEntry = FAKE_MODEL) -> CodonRequest:
    work = tmp_path / "exec" / "agentRoot"
    work.mkdir(parents=True, exist_ok=True)
    return CodonRequest(prompt="go", system_prompt=None, model=model, work_dir=work,
                        codon_id=codon_id, run_id="run-1", codon_name="A")


def log_records(project: Project, codon_id: str) -> list[dict[str, Any]]:
    record = project.state().runs[0].codons[-1]
    assert record.codon_id == codon_id
    path = project.exec_dir / record.claude_log_path
    return [json.loads(line) for line in path.read_text().splitlines()]


def transitions(outcome: Any, kind: str) -> list[dict[str, Any]]:
    return [d["transition"]["data"] for d in outcome.of_type("state.transition")
            if d["transitionType"] == kind]


# ----- the attempt context -----


def test_a_reported_agent_process_is_recorded_and_gone_after_the_attempt(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"process": True, "messages": 1}})

    assert outcome.code == 0
    reported = transitions(outcome, "AgentProcessReported")
    assert len(reported) == 1
    pid = reported[0]["pid"]
    assert pid != os.getpid()
    assert outcome.record("a").claude_pid == pid
    assert not process_running(pid)


def test_an_in_process_agent_is_recorded_with_the_runtime_pid(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"messages": 1}})

    assert outcome.record("a").claude_pid == os.getpid()
    assert transitions(outcome, "AgentProcessReported") == []


def test_the_agent_stderr_goes_to_a_file_next_to_the_codon_log(project):
    project.write_hank([codon("a", exhaustWithPrompt="More.", maxExtensions=1)])
    outcome = project.run({"a": {"messages": 1, "stderr": "warming up\n"}})

    log = project.exec_dir / outcome.record("a").claude_log_path
    assert log.name == "a-claude.log"
    # Both passes of the attempt (the extension too) append to the same file.
    assert (log.parent / "a-stderr.log").read_text() == "warming up\n" * 2


def test_tools_are_allowed_and_nobody_answers_where_ask_human_is_off(project):
    project.write_hank([codon("a", askHuman=False)])
    outcome = project.run({"a": {"tools": [{"name": "Bash", "input": {"command": "ls"},
                                            "result": "a.md"}],
                                 "askHuman": "Which file?"}})

    assert outcome.code == 0
    results = {block["tool_use_id"]: block for record in log_records(project, "a")
               if record["type"] == "user" for block in record["message"]["content"]}
    assert results["toolu_fakecall0"]["content"] == "a.md"
    assert "is_error" not in results["toolu_fakecall0"]
    assert results["toolu_fakecall1"]["is_error"] is True
    assert "No human is available" in results["toolu_fakecall1"]["content"]


def test_a_policy_decides_tool_calls_and_answers_questions(tmp_path):
    use_script({"codons": {"a": {"tools": [{"name": "Bash", "input": {"command": "rm -rf x"}},
                                           {"name": "Read", "input": {"path": "a"}}],
                                 "askHuman": "Proceed?"}}})
    policy = RecordingPolicy(deny={"Bash": "Bash is not allowed here"}, answers=["Yes."])
    try:
        run = asyncio.run(run_attempt(FakeHarness, request(tmp_path), tmp_path / "exec",
                                      policy=policy))
    finally:
        use_script(None)

    assert policy.tool_calls == [("Bash", {"command": "rm -rf x"}), ("Read", {"path": "a"})]
    assert policy.questions == [("Proceed?", None)]
    lines = [json.loads(line) for line in run.log_path.read_text().splitlines()]
    results = [block for line in lines if line["type"] == "user"
               for block in line["message"]["content"]]
    assert results[-3]["is_error"] is True and results[-3]["content"] == "Bash is not allowed here"
    assert "is_error" not in results[-2]
    assert results[-1]["content"] == "Yes."
    assert run.outcome.success


# ----- settings -----


def test_harness_settings_reach_the_harness(project):
    (project.root / "hankweave.json").write_text(json.dumps(
        {"harnesses": {"fake": {"tools": ["Read"], "sessionPrefix": "configured"}}}))
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"messages": 1}})

    init = log_records(project, "a")[0]
    assert init["tools"] == ["Read"]
    assert outcome.record("a").claude_session_id.startswith("configured-a-")


def test_a_harness_setting_from_the_environment(project):
    project.env["HANKWEAVE_RUNTIME_HARNESSES_FAKE_SESSION_PREFIX"] = "from-env"
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"messages": 1}})

    assert outcome.record("a").claude_session_id.startswith("from-env-a-")


def test_a_bad_harness_setting_stops_the_launch_naming_its_path_and_layer(project):
    (project.root / "hankweave.json").write_text(json.dumps(
        {"harnesses": {"fake": {"tools": "Read", "colour": "red"}}}))
    project.write_hank([codon("a")])

    with pytest.raises(ConfigError) as caught:  # the CLI's exit code 2
        project.run()

    message = str(caught.value)
    assert "harnesses.fake.tools: Input should be an array (got \"Read\") (set in hankweave.json)" in message
    assert 'harnesses.fake.colour: Unrecognized field "colour"' in message
    assert not project.exec_dir.exists()


def test_settings_for_a_harness_that_is_not_installed_are_a_warning(project):
    project.write_hank([codon("a")], overrides={"harnesses": {"claude": {"maxTurns": 3}}})
    outcome = project.run({"a": {"messages": 1}})

    assert outcome.code == 0
    assert any('harness "claude", which is not installed' in n for n in outcome.notices)


def test_the_harness_default_idle_timeout_applies_without_a_setting(project, monkeypatch):
    monkeypatch.setattr(FakeHarness, "default_idle_timeout_s", 1)
    project.write_hank([codon("a")])
    started = time.monotonic()
    outcome = project.run({"a": {"hang": True}})

    assert outcome.code == 1
    assert time.monotonic() - started < 30  # (room for a loaded machine: CI runs two tox envs)
    assert "Idle timeout: no events received for 1000ms" in outcome.record(
        "a").failure_reason.message


def test_the_run_setting_beats_the_harness_default_idle_timeout(project, monkeypatch):
    monkeypatch.setattr(FakeHarness, "default_idle_timeout_s", 600)
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"hang": True}}, shim_idle_timeout=1)

    assert "no events received for 1000ms" in outcome.record("a").failure_reason.message


def test_a_harness_that_cannot_resume_refuses_a_continuation_before_it_runs(project,
                                                                          monkeypatch):
    monkeypatch.setattr(FakeHarness, "supports_resume", False)
    project.write_hank([codon("a"), codon("b", continuationMode="continue-previous")])

    with pytest.raises(ConfigError, match=r'hank\[1\]\.continuationMode: "continue-previous"'
                                          r' needs a harness that resumes sessions'):
        project.run()


# ----- one instance per attempt, and its close -----


def test_one_harness_instance_serves_an_attempt_and_its_extensions(project, monkeypatch):
    built: list[FakeHarness] = []
    closed: list[FakeHarness] = []
    original_init, original_close = FakeHarness.__init__, FakeHarness.aclose

    def init(self, config=None):
        original_init(self, config)
        built.append(self)

    async def aclose(self):
        closed.append(self)
        await original_close(self)

    monkeypatch.setattr(FakeHarness, "__init__", init)
    monkeypatch.setattr(FakeHarness, "aclose", aclose)
    project.write_hank([codon("a", exhaustWithPrompt="More.", maxExtensions=2),
                        codon("b", onFailure="retry", retryConfig={"delayMs": 0})])
    outcome = project.run({"a": {"messages": 1},
                           "b": [{"result": "error", "errorText": "API Error: 529"}, {}]})

    assert outcome.code == 0
    assert outcome.record("a").extension_count == 2
    assert len(built) == 3  # a (with its two extensions), b's failed try, b's retry
    assert closed == built


def test_a_close_that_overruns_is_cut_short_and_its_process_killed(project, monkeypatch):
    reported: list[int] = []

    async def hanging_close(self):
        reported.extend(child.pid for child in self._children)
        await asyncio.Event().wait()

    monkeypatch.setattr(FakeHarness, "aclose", hanging_close)
    monkeypatch.setattr(FakeHarness, "close_timeout_s", 0.5)
    project.write_hank([codon("a"), codon("b")])
    started = time.monotonic()
    outcome = project.run({"a": {"process": True, "messages": 1}, "b": {"messages": 1}})

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]
    assert time.monotonic() - started < 30  # (room for a loaded machine: CI runs two tox envs)
    assert reported and not any(process_running(pid) for pid in reported)


def test_a_process_the_harness_leaves_behind_is_killed_after_its_close(project, monkeypatch):
    left: list[int] = []

    async def forgetful_close(self):
        left.extend(child.pid for child in self._children)  # and ends none of them

    monkeypatch.setattr(FakeHarness, "aclose", forgetful_close)
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"process": True, "messages": 1}})

    assert outcome.code == 0
    assert left and not any(process_running(pid) for pid in left)


def test_a_harness_that_ignores_cancellation_is_abandoned_and_its_process_killed(
        project, monkeypatch):
    monkeypatch.setattr(FakeHarness, "close_timeout_s", 0.5)
    monkeypatch.setattr(launch, "LEFTOVER_TIMEOUT_S", 0.5)  # it is abandoned at exit too
    stubborn: list[int] = []
    original = FakeHarness.run_codon

    async def run_codon(self, request, context):
        async for record in original(self, request, context):
            yield record
            if request.codon_id == "a" and record["type"] == "system":
                stubborn.extend(context.reported_pids)
                while True:  # swallow every cancellation: a broken harness
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        continue

    monkeypatch.setattr(FakeHarness, "run_codon", run_codon)
    project.write_hank([codon("a"), codon("b")])

    async def skip_a(runtime):
        await wait_for_status(runtime, "a", "running")
        assert runtime.commands.skip()

    started = time.monotonic()
    outcome = project.run_controlled(skip_a, {"a": {"process": True}, "b": {"messages": 1}})

    assert outcome.code == 0
    assert outcome.statuses()[0] == ("a", "skipped")
    assert time.monotonic() - started < 30  # (room for a loaded machine: CI runs two tox envs)
    assert stubborn and not process_running(stubborn[0])


# ----- rules from the original -----


def test_an_error_raised_after_a_success_result_is_a_warning(project):
    project.write_hank([codon("a", onFailure="retry", retryConfig={"delayMs": 0})])
    outcome = project.run({"a": {"messages": 1, "cost": 0.25, "raiseAfterResult":
                                 "only prompt commands are supported in streaming mode"}})

    assert outcome.code == 0
    a = outcome.record("a")
    assert a.status == "completed" and a.final_cost == 0.25
    assert len(outcome.records("a")) == 1  # completed: not retried
    warnings = [e for e in outcome.of_type("error") if e.get("severity") == "warning"]
    assert any("only prompt commands" in e["message"] for e in warnings)


def test_an_error_raised_before_any_result_still_fails_the_codon(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"raiseError": "the SDK broke"}})

    assert outcome.code == 1
    assert "the SDK broke" in outcome.record("a").failure_reason.message


UNPRICED = ModelEntry(provider_id="fake", model_id="unpriced", name="Unpriced",
                      aliases=("unpriced",), context_limit=1000, output_limit=1000, cost=None)


def test_usage_without_a_price_is_recorded_as_unknown_not_zero(tmp_path):
    use_script({"codons": {"a": {"messages": 2, "result": "none"}}})
    try:
        run = asyncio.run(run_attempt(FakeHarness, request(tmp_path, model=UNPRICED),
                                      tmp_path / "exec"))
    finally:
        use_script(None)

    record = run.record
    assert record.cost_complete is False
    assert record.current_cost == 0.0 and record.current_tokens.output_tokens == 40
    usage = [data for kind, data in run.events if kind == "token.usage"]
    assert usage and all(u["costComplete"] is False for u in usage)
    assert any(kind == "error" and "has no price" in data["message"]
               for kind, data in run.events)


def test_a_result_with_its_own_cost_settles_an_unpriced_model(tmp_path):
    use_script({"codons": {"a": {"messages": 2, "cost": 0.5}}})
    try:
        run = asyncio.run(run_attempt(FakeHarness, request(tmp_path, model=UNPRICED),
                                      tmp_path / "exec"))
    finally:
        use_script(None)

    assert run.record.current_cost == 0.5
    assert run.record.cost_complete is None  # the result's total is authoritative


def test_a_codon_on_an_unpriced_model_completes_with_its_cost_marked_incomplete(project):
    project.env["HANKWEAVE_PLUGIN_MODULES"] += ",tests.unpriced_model"
    project.write_hank([codon("a", model="unpriced")])
    outcome = project.run({"a": {"messages": 1}})

    assert outcome.code == 0
    a = outcome.record("a")
    assert a.status == "completed" and a.cost_complete is False
    completed = outcome.of_type("codon.completed")[-1]
    assert completed["costComplete"] is False
