"""Budgets that ask (docs/budgets.md): a ceiling with ``onExceeded: "ask"`` pauses its codon as
a ``budget`` interruption; a person extends it (the same attempt goes on, its conversation
resumed) or rejects it (the codon ends as the breach ends it, completed); ``budget.warning``
goes out at 80% and 95% of each ceiling.

The fake model costs $1/M input and $5/M output tokens; each scripted message uses 10 input and
20 output tokens, so one message costs $0.00011.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner

from hankweave.cli import cli
from hankweave.exitcodes import EXIT_INTERRUPTED
from hankweave.server.client import ControlClient, server_address
from hankweave.state.interruptions import GivenAnswer
from hankweave.state.types import Interruption
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Outcome, Project, codon

ONE_MESSAGE = 0.00011
ASK_CAP = {"maxDollars": 0.0002, "onExceeded": "ask"}
"""Crossed by the second message of an attempt."""


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


def answer(project: Project, interruption_id: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["answer", "-e", str(project.exec_dir), interruption_id,
                                       *args])
    assert result.exit_code == 0, result.output
    return result.output


def pending(outcome: Outcome) -> list[Interruption]:
    return [item for item in outcome.state.interruptions if item.status == "pending"]


# ----- the run stops to ask, a later run carries the attempt on -----


def test_an_ask_ceiling_pauses_the_codon_and_an_extension_continues_its_conversation(project):
    project.write_hank([codon("a", budget=ASK_CAP), codon("b")])
    first = project.run({"a": {"messages": 5, "writeFiles": {"draft.md": "v1"}}})

    assert first.code == EXIT_INTERRUPTED, first.notices
    assert first.state.runs[0].status == "interrupted"
    [item] = pending(first)
    assert item.kind == "budget" and item.codon_id == "a"
    assert item.budget.scope == "codon" and item.budget.currency == "cost"
    assert item.budget.limit == 0.0002 and item.budget.used == pytest.approx(2 * ONE_MESSAGE)
    assert item.question == ("codon a reached its $0.0002 ceiling (codon cap); spent $0.00022;"
                             " extend by?")
    interrupted = first.record("a")
    assert interrupted.assistant_message_count == 2  # stopped at the message that crossed
    created = first.of_type("interruption.created")[0]
    assert created["kind"] == "budget" and created["budget"]["source"] == "codon cap"

    said = answer(project, item.id, "--extend", "0.001")
    assert "Resume with: hankweave run -e" in said
    second = project.run({"a": {"messages": 1, "writeFiles": {"draft.md": "v2"}}})

    assert second.code == 0, second.notices
    resumed = second.state.runs[0]
    assert [(c.codon_id, c.status) for c in resumed.codons] == [("a", "completed"),
                                                                ("b", "completed")]
    a = resumed.codons[0]
    # The interrupted attempt's conversation goes on, told that the limit was raised.
    assert a.previous_session_id == interrupted.claude_session_id
    assert a.budget_exceeded is None
    assert (project.agent_root / "draft.md").read_text() == "v2"
    answered = second.state.interruption(item.id)
    assert answered.answer == {"extend": 0.001} and answered.answered_by.startswith("cli:")


def test_the_extended_ceiling_counts_what_the_interrupted_attempt_spent(project):
    """Cap $0.0002 + $0.0002 granted: the attempt spent $0.00022 before the pause, so the
    second message of the resumed part crosses the raised cap (4 x $0.00011 >= $0.0004)."""
    project.write_hank([codon("a", budget=ASK_CAP)])
    first = project.run({"a": {"messages": 5}})
    [item] = pending(first)
    answer(project, item.id, "--extend", "$0.0002")

    second = project.run({"a": {"messages": 5}})

    assert second.code == EXIT_INTERRUPTED
    [again] = pending(second)
    assert again.budget.limit == pytest.approx(0.0004)
    assert again.budget.used == pytest.approx(4 * ONE_MESSAGE)
    assert second.state.runs[0].codons[0].assistant_message_count == 2


def test_a_rejected_ceiling_ends_the_codon_completed_without_running_the_agent(project):
    project.write_hank([codon("a", budget={**ASK_CAP, "maxDollars": 0.0003}), codon("b")])
    # The write is the second message; the third crosses the cap.
    first = project.run({"a": {"messages": 1, "writeFiles": {"draft.md": "v1"},
                               "tools": [{"name": "Read", "input": {"file_path": "x"}}]}})
    [item] = pending(first)

    answer(project, item.id, "--reject")
    second = project.run({"a": {"messages": 1, "writeFiles": {"draft.md": "never"}}})

    assert second.code == 0, second.notices
    a = second.state.runs[0].codons[0]
    assert a.status == "completed" and a.budget_exceeded.currency == "cost"
    assert a.assistant_message_count in (None, 0)  # no agent ran again
    assert (project.agent_root / "draft.md").read_text() == "v1"
    assert second.statuses() == [("a", "completed"), ("b", "completed")]
    assert any("declined to raise the budget limit" in m for m in second.infos())


def test_a_budget_ask_refuses_answers_that_are_not_an_extension(project):
    project.write_hank([codon("a", budget=ASK_CAP)])
    first = project.run({"a": {"messages": 5}})
    [item] = pending(first)

    for args, message in ((["--approve"], "--extend AMOUNT or --reject"),
                          (["yes"], "--extend AMOUNT or --reject"),
                          (["--extend", "-1"], "positive amount in dollars"),
                          (["--extend", "lots"], "positive amount in dollars")):
        result = CliRunner().invoke(cli, ["answer", "-e", str(project.exec_dir), item.id,
                                          *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
    assert pending(Outcome(0, [], project.state(), [])) == [item]


def test_extend_is_refused_for_an_interruption_that_is_not_a_budget(project):
    project.write_hank([codon("a")])
    first = project.run({"a": {"askHuman": "Which colour?"}})
    [item] = pending(first)

    result = CliRunner().invoke(cli, ["answer", "-e", str(project.exec_dir), item.id,
                                      "--extend", "1"])
    assert result.exit_code == 2 and "not a budget ceiling" in result.output


# ----- the run waits for the answer -----


async def _pending_budget(runtime: Any) -> Interruption:
    for _ in range(2000):
        found = [item for item in runtime.state.interruptions
                 if item.status == "pending" and item.kind == "budget"]
        if found:
            return found[0]
        await asyncio.sleep(0.005)
    raise AssertionError("no pending budget ask")


def test_waiting_for_answers_the_same_attempt_goes_on_after_an_extension(project):
    project.write_hank([codon("a", budget=ASK_CAP), codon("b")])

    async def control(runtime):
        item = await _pending_budget(runtime)
        await runtime.commands.answer(item.id, GivenAnswer(extend="0.01"), "test")

    script = {"a": [{"messages": 5}, {"messages": 2, "writeFiles": {"out.md": "done"}}]}
    outcome = project.run_controlled(control, script, wait_for_answers=True)

    assert outcome.code == 0, outcome.notices
    assert len(outcome.state.runs) == 1
    [a] = outcome.records("a")  # one attempt: its conversation resumed in place
    assert a.status == "completed" and a.budget_exceeded is None
    assert a.assistant_message_count == 2 + 3  # the first pass's two, then two and a write
    assert (project.agent_root / "out.md").read_text() == "done"
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]
    log = (project.exec_dir / a.claude_log_path).read_text().splitlines()
    assert sum('"subtype":"init"' in line.replace(" ", "") for line in log) == 2  # two passes


def test_waiting_for_answers_a_rejection_completes_the_codon_as_the_breach_does(project):
    project.write_hank([codon("a", budget=ASK_CAP), codon("b")])

    async def control(runtime):
        item = await _pending_budget(runtime)
        await runtime.commands.answer(item.id, GivenAnswer(reject=True), "test")

    outcome = project.run_controlled(control, {"a": {"messages": 5}}, wait_for_answers=True)

    assert outcome.code == 0, outcome.notices
    [a] = outcome.records("a")
    assert a.status == "completed" and a.budget_exceeded.currency == "cost"
    assert a.assistant_message_count == 2
    assert outcome.statuses() == [("a", "completed"), ("b", "completed")]


def test_a_run_ceiling_that_asks_is_raised_for_the_rest_of_the_execution(project):
    project.write_hank([codon("a"), codon("b")],
                       overrides={"budget": {"maxDollars": 0.0003, "onExceeded": "ask"}})
    first = project.run({"a": {"messages": 5}})
    [item] = pending(first)
    assert item.budget.scope == "run"
    assert item.question.startswith("codon a reached the run's $0.0003 ceiling")

    answer(project, item.id, "--extend", "0.01")
    second = project.run({"a": {"messages": 1}, "b": {"messages": 2}})

    assert second.code == 0, second.notices
    assert second.statuses() == [("a", "completed"), ("b", "completed")]
    summary = second.of_type("budget.limits")
    assert summary[-1]["ceiling"]["maxDollars"] == pytest.approx(0.0103)


# ----- warnings -----


def test_warnings_go_out_at_80_and_95_percent_of_each_ceiling(project):
    project.write_hank([codon("a", budget={"maxOutputTokens": 210})])
    outcome = project.run({"a": {"messages": 10}})  # 20 output tokens each

    warnings = outcome.of_type("budget.warning")
    assert [(w["scope"], w["currency"], w["fraction"], w["used"]) for w in warnings] == [
        ("codon", "outputTokens", 0.8, 180), ("codon", "outputTokens", 0.95, 200)]
    assert warnings[0]["message"] == ("80% of the codon's 210-token output limit used"
                                      " (180 tokens; codon cap)")


def test_warn_at_chooses_the_fractions(project):
    project.write_hank([codon("a")], overrides={"budget": {"maxDollars": 0.001}})
    (project.root / "hankweave.json").write_text(json.dumps({"budget": {"warnAt": [0.5]}}))
    outcome = project.run({"a": {"messages": 6}})

    warnings = outcome.of_type("budget.warning")
    assert [(w["scope"], w["fraction"]) for w in warnings] == [("run", 0.5)]
    assert warnings[0]["used"] == pytest.approx(5 * ONE_MESSAGE)


async def _ask_of(runtime: Any, codon_id: str | None = None) -> Interruption:
    for _ in range(4000):
        found = [i for i in runtime.state.interruptions if i.status == "pending"
                 and i.kind == "budget" and (codon_id is None or i.codon_id == codon_id)]
        if found:
            return found[0]
        await asyncio.sleep(0.005)
    raise AssertionError("no ask")


# ----- found by review: the journeys around an ask -----


def test_rejecting_a_run_ceiling_ask_completes_the_codon_though_the_money_is_spent(project):
    project.write_hank([codon("a"), codon("b")],
                       overrides={"budget": {"maxDollars": 0.0003, "onExceeded": "ask"}})
    [item] = pending(project.run({"a": {"messages": 5}}))
    answer(project, item.id, "--reject")
    second = project.run({"a": {"messages": 1}, "b": {"messages": 1}})
    # Its money is spent, yet the rejected attempt is carried on to its end (completed).
    assert ("a", "completed") in second.statuses(), (second.infos(), second.statuses())


def test_a_resumed_attempt_keeps_to_its_own_extended_cap_under_a_looser_run_ceiling(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002, "onExceeded": "ask"})],
                       overrides={"budget": {"maxDollars": 0.0005, "onExceeded": "ask"}})
    [item] = pending(project.run({"a": {"messages": 5}}))
    answer(project, item.id, "--extend", "0.0002")          # codon cap -> $0.0004
    second = project.run({"a": {"messages": 5}})
    [again] = pending(second)
    # carried $0.00022 + 2 messages crosses the $0.0004 cap: that should be what asks
    assert again.budget.scope == "codon", again.question


def test_stopping_while_waiting_keeps_what_was_spent_before_the_pause(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002, "onExceeded": "ask"})])

    async def control(runtime):
        await _ask_of(runtime)
        runtime.commands.request_shutdown("SIGINT")   # Ctrl-C while --wait-for-answers waits

    first = project.run_controlled(control, {"a": {"messages": 10}}, wait_for_answers=True)
    [item] = pending(first)
    answer(project, item.id, "--extend", "0.0002")
    second = project.run({"a": {"messages": 10}})
    assert second.state.runs[0].codons[0].assistant_message_count == 2


def test_time_waiting_for_a_person_does_not_count_in_later_runs(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002, "onExceeded": "ask"}),
                        codon("b", budget={"maxDollars": 0.0002, "onExceeded": "ask"})],
                       overrides={"budget": {"maxTimeSeconds": 3600}})

    async def control(runtime):
        item = await _ask_of(runtime, "a")
        await asyncio.sleep(5)  # a person takes their time
        await runtime.commands.answer(item.id, GivenAnswer(extend="0.01"), "t")
        await _ask_of(runtime, "b")
        runtime.commands.request_shutdown("SIGINT")

    first = project.run_controlled(control, {"a": [{"messages": 5}, {"messages": 1}],
                                             "b": {"messages": 5}}, wait_for_answers=True)
    [item] = pending(first)
    answer(project, item.id, "--extend", "0.01")
    second = project.run({"b": {"messages": 1}})
    elapsed = second.of_type("budget.limits")[0]["elapsedSeconds"]
    # The wait is not counted (the runs' own time, on a loaded machine, stays well below it).
    assert elapsed < 3.0, elapsed


def test_a_codon_skipped_while_it_asks_leaves_no_ask_behind(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002, "onExceeded": "ask"}),
                        codon("b")])

    async def control(runtime):
        await _ask_of(runtime)
        runtime.commands.skip()

    first = project.run_controlled(
        control, {"a": {"messages": 10}, "b": {"result": "error",
                                               "errorText": "API Error: 400 bad request"}},
        wait_for_answers=True)
    assert first.statuses()[0] == ("a", "skipped")
    assert pending(first) == []


def test_a_boolean_extension_over_the_websocket_is_refused(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002, "onExceeded": "ask"})])
    got = {}

    async def control(runtime):
        item = await _ask_of(runtime)
        addr = server_address(project.exec_dir)
        client = await ControlClient.connect(addr.url, token=addr.token, require_control=True)
        async with client:
            got["reply"] = await client.command("interruption.answer",
                                                {"interruptionId": item.id, "extend": True})
        if got["reply"].ok is False:
            await runtime.commands.answer(item.id, GivenAnswer(reject=True), "t")

    project.run_controlled(control, {"a": [{"messages": 5}, {"messages": 1}]},
                           wait_for_answers=True)
    assert not got["reply"].ok, got["reply"].result


def test_a_run_ceiling_ask_names_the_whole_ceiling(project):
    project.write_hank([codon("a"), codon("b")],
                       overrides={"budget": {"maxDollars": 0.0004, "onExceeded": "ask"}})
    o = project.run({"a": {"messages": 2}, "b": {"messages": 5}})
    [item] = pending(o)

    assert "$0.0004 ceiling" in item.question, item.question


def test_a_warning_is_not_given_again_on_resume(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.001}, askHuman={"enabled": True})])
    first = project.run({"a": {"messages": 7, "askHuman": "Which?"}})
    assert [w["fraction"] for w in first.of_type("budget.warning")] == [0.8]
    [item] = pending(first)
    answer(project, item.id, "blue")
    second = project.run({"a": {"messages": 1}})
    assert [w["fraction"] for w in second.of_type("budget.warning")] == [0.95]


def test_the_budget_summary_shows_the_raised_ceiling(project):
    project.write_hank([codon("a"), codon("b")],
                       overrides={"budget": {"maxDollars": 0.0003, "onExceeded": "ask"}})
    [item] = pending(project.run({"a": {"messages": 5}}))
    answer(project, item.id, "--extend", "0.01")
    second = project.run({"a": {"messages": 1}, "b": {"messages": 1}})
    summary = second.of_type("budget.summary")[-1]
    assert summary["ceiling"]["maxDollars"] == pytest.approx(0.0103), summary["ceiling"]

