"""Human in the loop through the runtime (docs/human-in-the-loop.md): FakeHarness agents ask
questions and make held tool calls, codons have approval gates; the run ends ``interrupted``
(exit 3), ``hankweave answer`` records answers, and the next run resumes with them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner

from hankweave.cli import cli
from hankweave.exitcodes import EXIT_INTERRUPTED
from hankweave.state.interruptions import GivenAnswer
from hankweave.state.types import ContinuationStart, Interruption
from tests.runtime_harness import Outcome, Project, codon


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path)


def answer(project: Project, interruption_id: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["answer", "-e", str(project.exec_dir), interruption_id,
                                       *args])
    assert result.exit_code == 0, result.output
    return result


def pending(outcome: Outcome) -> list[Interruption]:
    return [item for item in outcome.state.interruptions if item.status == "pending"]


def tool_results(project: Project, record: Any) -> dict[str, dict[str, Any]]:
    """The tool results of a codon record's log, by tool use id."""
    log = project.exec_dir / record.claude_log_path
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return {block["tool_use_id"]: block for record in records if record["type"] == "user"
            for block in record["message"]["content"]}


# ----- a question -----


def test_a_question_ends_the_run_interrupted_and_the_answer_resumes_it(project):
    project.write_hank([codon("a"), codon("b")])
    script = {"a": {"messages": 1, "writeFiles": {"draft.md": "v1"},
                    "askHuman": "Which colour?"}}
    first = project.run(script)

    assert first.code == EXIT_INTERRUPTED
    run = first.state.runs[0]
    assert run.status == "interrupted"
    assert [(c.codon_id, c.status) for c in run.codons] == [("a", "failed")]
    [item] = pending(first)
    assert (item.kind, item.question, item.codon_id, item.run_id) == (
        "question", "Which colour?", "a", run.run_id)
    assert first.of_type("interruption.created")[0]["interruptionId"] == item.id
    assert any(item.id in notice and "hankweave answer" in notice for notice in first.notices)
    # The work of the interrupted attempt is kept (no rollback on resume).
    assert (project.agent_root / "draft.md").read_text() == "v1"

    answer(project, item.id, "Blue")
    second = project.run(script)

    assert second.code == 0, second.notices
    resumed = second.state.runs[0]
    assert isinstance(resumed.starting_conditions, ContinuationStart)
    assert resumed.starting_conditions.reason == "resume"
    assert resumed.starting_conditions.resumed_run_id == run.run_id
    assert [(c.codon_id, c.status) for c in resumed.codons] == [("a", "completed"),
                                                                ("b", "completed")]
    # The agent asked again and got the recorded answer as the tool's result.
    results = tool_results(project, resumed.codons[0])
    assert results["toolu_fakecall0"]["content"] == "Blue"
    assert "is_error" not in results["toolu_fakecall0"]
    # It resumed the interrupted attempt's session, told the answers.
    assert resumed.codons[0].previous_session_id == run.codons[0].claude_session_id
    assert second.state.interruption(item.id).status == "answered"


def test_a_run_with_answers_missing_stops_at_once(project):
    project.write_hank([codon("a")])
    script = {"a": {"askHuman": "Which colour?"}}
    first = project.run(script)
    again = project.run(script)

    assert again.code == EXIT_INTERRUPTED
    assert len(again.state.runs) == len(first.state.runs)  # no run was started
    assert any("Still waiting" in info for info in again.infos())


# ----- held tool calls -----


@pytest.mark.parametrize("decision", ["--approve", "--reject"])
def test_a_held_tool_call_is_run_or_denied_as_the_person_decides(project, decision):
    project.write_hank([codon("a")], toolApproval=[{"tool": "Bash", "input": "rm |git push"}])
    script = {"a": {"tools": [{"name": "Bash", "input": {"command": "ls"}, "result": "a.md"},
                              {"name": "Bash", "input": {"command": "rm -rf build"},
                               "result": "removed"}]}}
    first = project.run(script)

    assert first.code == EXIT_INTERRUPTED
    [item] = pending(first)
    assert (item.kind, item.tool_name, item.tool_input, item.options) == (
        "tool-approval", "Bash", {"command": "rm -rf build"}, ["approve", "reject"])
    answer(project, item.id, decision)
    second = project.run(script)

    assert second.code == 0, second.notices
    results = tool_results(project, second.state.runs[0].codons[0])
    assert results["toolu_fakecall0"]["content"] == "a.md"  # not matched: never held
    held = results["toolu_fakecall1"]
    if decision == "--approve":
        assert held["content"] == "removed" and "is_error" not in held
    else:
        assert held["is_error"] is True and "A person denied this call" in held["content"]


def test_a_codon_rule_holds_calls_the_hank_rules_do_not(project):
    project.write_hank([codon("a", toolApproval=[{"tool": "Write|Edit"}]), codon("b")])
    script = {"a": {"tools": [{"name": "Edit", "input": {"file_path": "x"}}]},
              "b": {"tools": [{"name": "Edit", "input": {"file_path": "x"}}]}}
    first = project.run(script)
    [item] = pending(first)
    assert item.codon_id == "a"
    answer(project, item.id, "--approve")

    assert project.run(script).code == 0  # b's Edit is not held


# ----- approval gates -----


def test_a_before_gate_approved_starts_the_codon(project):
    project.write_hank([codon("a"), codon("b", approval="before")])
    first = project.run()

    assert first.code == EXIT_INTERRUPTED
    assert first.statuses() == [("a", "completed")]  # b has not started
    [item] = pending(first)
    assert (item.kind, item.gate, item.codon_id) == ("approval", "before", "b")
    answer(project, item.id, "--approve")
    second = project.run()

    assert second.code == 0
    assert second.statuses() == [("b", "completed")]


def test_a_before_gate_rejected_skips_the_codon(project):
    project.write_hank([codon("a", approval={"when": "before", "question": "Deploy?"}),
                        codon("b")])
    [item] = pending(project.run())
    assert item.question == "Deploy?"
    answer(project, item.id, "--reject")
    second = project.run()

    assert second.code == 0
    assert second.statuses() == [("a", "skipped"), ("b", "completed")]


def test_an_after_gate_holds_the_plan_until_the_result_is_approved(project):
    project.write_hank([codon("a", approval="after"), codon("b")])
    first = project.run({"a": {"writeFiles": {"report.md": "done"}}})

    assert first.code == EXIT_INTERRUPTED
    assert first.statuses() == [("a", "completed")]
    [item] = pending(first)
    assert item.gate == "after"
    answer(project, item.id, "--approve")
    second = project.run()

    assert second.code == 0
    assert second.statuses() == [("b", "completed")]


def test_an_after_gate_rejected_stops_the_run(project):
    project.write_hank([codon("a"), codon("b", approval="after")])
    [item] = pending(project.run())
    answer(project, item.id, "--reject")
    second = project.run()

    assert second.code == 1
    assert second.state.runs[0].status == "failed"
    assert any("rejected the result of codon b" in e["message"]
               for e in second.of_type("error"))


# ----- several at once, deadlines -----


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_two_pending_interruptions_are_answered_in_either_order(project, order):
    project.write_hank([codon("a")], toolApproval=[{"tool": "Bash"}])
    script = {"a": {"parallel": True, "tools": [{"name": "Bash", "input": {"command": "make"},
                                                 "result": "built"}],
                    "askHuman": "Ship it?", "askOptions": ["yes", "no"]}}
    first = project.run(script)

    assert first.code == EXIT_INTERRUPTED
    both = pending(first)
    assert sorted(item.kind for item in both) == ["question", "tool-approval"]
    answers = {"question": ["yes"], "tool-approval": ["--approve"]}
    for index in order:
        answer(project, both[index].id, *answers[both[index].kind])
        if index == order[0]:
            assert project.run(script).code == EXIT_INTERRUPTED  # one still missing
    second = project.run(script)

    assert second.code == 0, second.notices
    results = tool_results(project, second.state.runs[0].codons[0])
    assert results["toolu_fakecall0"]["content"] == "built"
    assert results["toolu_fakecall1"]["content"] == "yes"


def test_an_answer_outside_the_options_is_refused(project):
    project.write_hank([codon("a")])
    [item] = pending(project.run({"a": {"askHuman": "Ship?", "askOptions": ["yes", "no"]}}))
    result = CliRunner().invoke(cli, ["answer", "-e", str(project.exec_dir), item.id, "maybe"])

    assert result.exit_code == 2
    assert "not an answer" in result.output
    assert project.state().interruption(item.id).status == "pending"


def test_a_passed_deadline_applies_the_default_answer_on_resume(project):
    project.write_hank([codon("a", askHuman={"deadlineSeconds": 0.01,
                                              "defaultAnswer": "Use blue."})])
    script = {"a": {"askHuman": "Which colour?"}}
    first = project.run(script)
    [item] = pending(first)
    assert item.deadline is not None and item.default_answer == "Use blue."
    second = project.run(script)

    assert second.code == 0, second.notices
    done = second.state.interruption(item.id)
    assert (done.answer, done.answered_by) == ("Use blue.", "deadline")
    results = tool_results(project, second.state.runs[0].codons[0])
    assert results["toolu_fakecall0"]["content"] == "Use blue."


# ----- waiting for answers -----


def test_with_wait_for_answers_the_run_waits_and_an_answer_lets_it_go_on(project):
    project.write_hank([codon("a"), codon("b", approval="before")])

    async def control(runtime):
        for expected in ("question", "approval"):
            item = await _pending_of(runtime, expected)
            if expected == "question":
                await runtime.commands.answer(item.id, GivenAnswer(text="Green"), "test")
            else:
                await runtime.commands.answer(item.id, GivenAnswer(approve=True), "test")

    outcome = project.run_controlled(control, {"a": {"askHuman": "Which colour?"}},
                                     wait_for_answers=True, shim_idle_timeout=1)

    assert outcome.code == 0, outcome.notices
    assert len(outcome.state.runs) == 1
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]
    results = tool_results(project, outcome.state.runs[0].codons[0])
    assert results["toolu_fakecall0"]["content"] == "Green"


async def _pending_of(runtime: Any, kind: str) -> Interruption:
    for _ in range(2000):
        found = [item for item in runtime.state.interruptions
                 if item.status == "pending" and item.kind == kind]
        if found:
            return found[0]
        await asyncio.sleep(0.005)
    raise AssertionError(f"no pending {kind}")


# ----- over the control server -----


def test_an_interruption_is_answered_over_the_websocket_and_the_execution_is_served(project):
    import urllib.error
    import urllib.request

    from tests.test_server_support import ServedRun, command, open_client

    project.write_hank([codon("a")])

    def get(url: str) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    async def scenario():
        async with ServedRun(project, {"a": {"askHuman": "Ship?", "askOptions": ["yes", "no"]}},
                             wait_for_answers=True) as served:
            item = await _pending_of(served.runtime, "question")
            http = served.url.replace("ws://", "http://")
            status, document = await asyncio.to_thread(get, f"{http}/api/execution")
            assert status == 200
            assert document["documentVersion"] == 1
            # It waits live: still running, with one interruption pending.
            assert document["execution"]["status"] == "running"
            assert document["execution"]["pendingInterruptions"] == 1
            assert [i["id"] for i in document["interruptions"]] == [item.id]
            status, missing = await asyncio.to_thread(get, f"{http}/api/nothing")
            assert status == 404 and "/api/execution" in missing["message"]

            watcher, _ = await open_client(served.url)  # read-only
            reply = await command(watcher, "interruption.answer",
                                  {"interruptionId": item.id, "answer": "yes"})
            assert reply["data"]["code"] == "INSUFFICIENT_PERMISSIONS"
            ws, _ = await open_client(served.url, token=served.token)
            for bad, why in (({"interruptionId": "int-nope", "answer": "yes"}, "no interruption"),
                             ({"interruptionId": item.id, "answer": "maybe"}, "not an answer"),
                             ({"interruptionId": item.id, "approve": True}, "not an approval")):
                reply = await command(ws, "interruption.answer", bad)
                assert reply["type"] == "error" and why in reply["data"]["message"], reply
            reply = await command(ws, "interruption.answer",
                                  {"interruptionId": item.id, "answer": "yes",
                                   "answeredBy": "alice"})
            assert reply["type"] == "command.response", reply
            assert reply["data"]["result"]["answeredBy"] == "alice"
            assert await served.wait() == 0
        return served.outcome

    outcome = asyncio.run(scenario())
    assert outcome.state.interruption(item_id(outcome)).answer == "yes"
    results = tool_results(project, outcome.state.runs[0].codons[0])
    assert results["toolu_fakecall0"]["content"] == "yes"


def item_id(outcome: Outcome) -> str:
    [item] = outcome.state.interruptions
    return item.id


@pytest.mark.parametrize("where", ["gate", "question"])
def test_a_shutdown_while_waiting_stops_the_wait_and_the_interruption_stays(project, where):
    project.write_hank([codon("a", approval="before" if where == "gate" else None)])
    script = {"a": {"askHuman": "Which colour?"}} if where == "question" else {}
    kind = "approval" if where == "gate" else "question"

    async def control(runtime):
        await _pending_of(runtime, kind)
        runtime.commands.request_shutdown("SIGINT")

    stopped = project.run_controlled(control, script, wait_for_answers=True)

    assert stopped.code == 130
    [item] = pending(stopped)
    again = project.run(script)
    assert again.code == EXIT_INTERRUPTED  # still waiting: no run was started
    answer(project, item.id, "--approve" if where == "gate" else "Red")
    done = project.run(script)
    assert done.code == 0, done.notices
    assert done.statuses() == [("a", "completed")]


def test_answer_submit_needs_an_executor_plugin(project):
    project.write_hank([codon("a")])
    [item] = pending(project.run({"a": {"askHuman": "Which colour?"}}))
    result = CliRunner().invoke(cli, ["answer", "-e", str(project.exec_dir), item.id, "Red",
                                      "--submit"])

    assert result.exit_code == 2
    assert "--submit needs an executor plugin" in result.output
    assert project.state().interruption(item.id).status == "pending"  # nothing recorded
