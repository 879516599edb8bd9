"""The runtime in-process: how an agent's attempt ends decides the codon's status.

Error results and their classification, disguised errors, crashes, missing results, idle
timeouts, extensions, context exhaustion, continuation sessions and prompt problems.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from hankweave.harness import AgentStartError
from hankweave.testing.fake_harness import FakeHarness, use_script
from tests.runtime_harness import Project, codon, loop, wait_for_status


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


# ----- failed attempts -----


def test_a_rate_limited_result_fails_retriably_with_the_retry_after_hint(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"result": "error",
                                 "errorText": "API Error: 429 rate limit exceeded; retry-after: 30"}})

    assert outcome.code == 1
    a = outcome.record("a")
    assert a.status == "failed" and a.failed_during == "running"
    assert a.failure_reason.type == "rate-limit"
    assert a.failure_reason.retriable and a.failure_reason.retry_after_ms == 30_000
    completed = outcome.of_type("codon.completed")[-1]
    assert completed["failureReason"]["retryAfterMs"] == 30_000


def test_a_disguised_error_result_fails_the_codon(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"result": "disguised-error",
                                 "errorText": "API Error: 400 invalid_request_error"}})

    assert outcome.code == 1
    a = outcome.record("a")
    assert a.status == "failed"
    assert a.failure_reason.type == "api-error" and not a.failure_reason.retriable
    assert a.failure_reason.message.startswith("API invalid request")


def test_a_harness_that_raises_fails_the_codon_with_a_classified_reason(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"raiseError": "connection reset by peer"}})

    assert outcome.code == 1
    a = outcome.record("a")
    assert a.status == "failed" and a.exit_code == 1
    assert a.failure_reason.message.startswith("API transport error")
    assert a.failure_reason.retriable


def test_a_harness_that_cannot_start_fails_the_codon_without_retry(project, monkeypatch):
    def cannot_start(self):
        raise RuntimeError("agent CLI not found")

    monkeypatch.setattr(FakeHarness, "__init__", cannot_start)
    project.write_hank([codon("a", onFailure="retry", retryConfig={"delayMs": 0}), codon("b")])
    outcome = project.run()

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "failed")]
    a = outcome.record("a")
    assert a.failed_during == "initializing" and not a.failure_reason.retriable
    assert "agent CLI not found" in a.failure_reason.message
    assert outcome.state.runs[0].status == "failed"


def test_an_agent_that_cannot_start_is_never_retried_whatever_its_message_says(
        project, monkeypatch):
    # The message holds "429" (a temp path): as text it would read as a rate limit.
    async def cannot_spawn(self, request, context):
        raise AgentStartError("Could not start /tmp/pytest-429/bin/agent: no such file")
        yield  # pragma: no cover - makes this an async generator like run_codon

    monkeypatch.setattr(FakeHarness, "run_codon", cannot_spawn)
    project.write_hank([codon("a", onFailure="retry", retryConfig={"delayMs": 0}), codon("b")])
    outcome = project.run()

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "failed")]
    reason = outcome.record("a").failure_reason
    assert reason.retriable is False and reason.type == "api-error"
    assert reason.message.startswith("Local setup/process error (no session established): ")


def test_an_agent_that_exits_without_a_result_fails_the_codon(project):
    project.write_hank([codon("a")])
    outcome = project.run({"a": {"result": "none"}})

    assert outcome.code == 1
    a = outcome.record("a")
    assert a.status == "failed"
    assert "exited without a result message" in a.failure_reason.message
    assert '"type":"result"' not in (project.exec_dir / a.claude_log_path).read_text()


def test_an_idle_agent_is_timed_out(project):
    project.write_hank([codon("a", shimIdleTimeout=1)])
    outcome = project.run({"a": {"hang": True}})

    assert outcome.code == 1
    a = outcome.record("a")
    assert a.status == "failed"
    assert a.failure_reason.type == "timeout" and a.failure_reason.retriable
    assert "Idle timeout" in a.failure_reason.message
    log = (project.exec_dir / a.claude_log_path).read_text()
    assert "Idle timeout: no events received for 1000ms" in log


# ----- extensions and context -----


def test_exhaust_with_prompt_extends_the_codon_up_to_max_extensions(project):
    project.write_hank([codon("a", exhaustWithPrompt="Keep going.", maxExtensions=2)])
    outcome = project.run({"a": {"messages": 1}})

    assert outcome.code == 0
    extended = outcome.of_type("codon.extended")
    assert [e["extensionNumber"] for e in extended] == [1, 2]
    assert all(e["exhaustWithPrompt"] == "Keep going." for e in extended)
    updates = [d["transition"]["data"]["extensionCount"]
               for d in outcome.of_type("state.transition")
               if d["transitionType"] == "ExtensionCountUpdated"]
    assert updates == [1, 2]
    a = outcome.record("a")
    assert a.status == "completed" and a.extension_count == 2
    logs = list((project.hankweave_dir / "runs" / outcome.state.runs[0].run_id).iterdir())
    assert [p.name for p in logs] == ["a-claude.log"]
    lines = logs[0].read_text().splitlines()
    assert sum('"subtype":"init"' in line for line in lines) == 3
    assert sum(line.startswith('{"type":"result"') for line in lines) == 3


def test_an_extended_codon_costs_what_all_its_passes_cost(project):
    # Each pass's result covers that pass (the harness contract): the codon's totals add up.
    project.write_hank([codon("a", exhaustWithPrompt="Keep going.", maxExtensions=2)])
    outcome = project.run({"a": [{"messages": 1, "cost": 0.25}, {"messages": 1, "cost": 0.5},
                                 {"messages": 1, "cost": 1.0}]})

    a = outcome.record("a")
    assert a.status == "completed" and a.extension_count == 2
    assert a.final_cost == pytest.approx(1.75)
    results = [json.loads(line) for line in (project.exec_dir / a.claude_log_path).read_text()
               .splitlines() if line.startswith('{"type":"result"')]
    assert len(results) == 3
    assert a.final_tokens.input_tokens == sum(r["usage"]["input_tokens"] for r in results) > 0


def test_an_overflowing_context_ends_the_extensions_as_a_completion(project):
    project.write_hank([codon("a", exhaustWithPrompt="More.", maxExtensions=5), codon("b")])
    outcome = project.run({"a": [{}, {"result": "error",
                                      "errorText": "API Error: 400 prompt is too long"}]})

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]
    assert outcome.record("a").extension_count == 1
    assert any("due to context exceeded" in m for m in outcome.infos())


def test_context_exceeded_ends_a_context_exceeded_loop(project):
    project.write_hank([codon("setup"), loop("L", [
        codon("work", continuationMode="continue-previous")], {"type": "contextExceeded"})])
    # Attempts are counted per runtime id: the second iteration's agent fills its context.
    outcome = project.run({"work#1": {"contextExceeded": True}})

    assert outcome.code == 0
    assert outcome.statuses() == [("setup", "completed"), ("work#0", "completed"),
                                  ("work#1", "completed")]
    assert [e.codon_id for e in outcome.state.execution_plan] == ["setup", "work#0", "work#1"]
    final = outcome.of_type("loop.iteration.completed")[-1]
    assert final["isFinal"] and final["terminationReason"] == "context_exceeded"


# ----- starting a codon -----


def test_continue_previous_after_a_skip_with_messages_resumes_the_skipped_session(project):
    project.write_hank([codon("a"), codon("b", continuationMode="continue-previous")])

    async def skip_a(runtime):
        await wait_for_status(runtime, "a", "running")
        while not runtime.state.runs[0].codons[-1].assistant_message_count:
            await asyncio.sleep(0.005)
        runtime.commands.skip()

    outcome = project.run_controlled(skip_a, {"a": {"hang": True, "sessionId": "s-a"}})

    assert outcome.code == 0
    assert outcome.statuses() == [("a", "skipped"), ("b", "completed")]
    assert outcome.record("b").previous_session_id == "s-a"


def test_continue_previous_after_a_skip_without_messages_fails_without_retry(project):
    project.write_hank([codon("a"), codon("b", continuationMode="continue-previous",
                                          onFailure="retry", retryConfig={"delayMs": 0})])

    async def skip_a(runtime):
        await wait_for_status(runtime, "a", "running")
        runtime.commands.skip()

    outcome = project.run_controlled(skip_a, {"a": {"hang": True, "messages": 0}})

    assert outcome.code == 1
    assert outcome.statuses() == [("a", "skipped"), ("b", "failed")]
    b = outcome.record("b")
    assert b.failed_during == "starting" and not b.failure_reason.retriable
    assert "no valid session found" in b.failure_reason.message


def test_an_unknown_prompt_frontmatter_key_fails_the_codon_at_start(project):
    project.write_file("prompts/a.md", "---\ntitle: A\ncolour: blue\n---\nDo a.\n")
    project.write_hank([codon("a", promptText=None, promptFile="prompts/a.md")])
    outcome = project.run()

    assert outcome.code == 1
    a = outcome.record("a")
    assert a.status == "failed" and a.failed_during == "starting"
    assert "frontmatter" in a.failure_reason.message and "colour" in a.failure_reason.message


def test_a_finished_loop_iteration_reports_its_cost_tokens_and_duration(project):
    project.write_hank([loop("L", [codon("draft"), codon("review")],
                             {"type": "iterationLimit", "limit": 2})])
    outcome = project.run({"draft": {"cost": 0.25, "messages": 2}, "review": {"cost": 0.5}})

    assert outcome.code == 0
    iterations = outcome.of_type("loop.iteration.completed")
    assert [(d["iteration"], d["isFinal"]) for d in iterations] == [(0, False), (1, True)]
    assert iterations[1]["terminationReason"] == "iteration_limit"
    for data in iterations:
        assert data["costUsd"] == pytest.approx(0.75)
        assert data["tokensUsed"] == (10 + 20) * 2 + (10 + 20) * 1
        assert data["durationMs"] >= 0
