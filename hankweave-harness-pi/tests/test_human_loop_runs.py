"""Human in the loop end to end: real ``hankweave run`` processes whose pi codons stop for a
person (exit 3), ``hankweave answer``, and the resumed run, where the pending tool call runs
again and the answer is its result. The agents talk to the mock provider each run serves on
127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pi_helpers import PiProject

from hankweave.testing.mock_provider import LoggedRequest

QUESTION = "Which colour?"
OPTIONS = ["red", "blue"]
ASK_SCRIPT = {"rules": [
    {"name": "ask", "when": {"lastUserMessage": "Pick a colour", "afterToolResult": False},
     "reply": {"text": "I need to ask.", "toolCalls": [
         {"name": "ask_human", "id": "call_ask",
          "input": {"question": QUESTION, "options": OPTIONS}}]}},
    {"name": "answered", "when": {"lastUserMessage": "Pick a colour", "afterToolResult": True},
     "reply": {"text": "Blue it is."}},
]}

RM = "rm -f scratch.txt && echo gone"
TIDY_SCRIPT = {"rules": [
    {"name": "create", "when": {"lastUserMessage": "Tidy up", "turn": 1},
     "reply": {"toolCalls": [{"name": "bash", "id": "call_create",
                              "input": {"command": "echo scratch > scratch.txt"}}]}},
    {"name": "remove", "when": {"lastUserMessage": "Tidy up", "turn": 2},
     "reply": {"toolCalls": [{"name": "bash", "id": "call_ls", "input": {"command": "ls"}},
                             {"name": "bash", "id": "call_rm", "input": {"command": RM}}]}},
    {"name": "done", "when": {"lastUserMessage": "Tidy up", "turn": 3},
     "reply": {"text": "Tidied."}},
]}


def codon(codon_id: str, prompt: str) -> dict[str, Any]:
    return {"id": codon_id, "name": codon_id.title(), "model": "gpt-5.2",
            "continuationMode": "fresh", "promptText": prompt}


def asking(root: Path) -> PiProject:
    project = PiProject(root, ASK_SCRIPT)
    project.write_hank([codon("colour", "Pick a colour.")])
    return project


def rule(logged: LoggedRequest) -> str:
    return (logged.rule or "").rpartition("(")[2].rstrip(")")


def user_texts(logged: LoggedRequest) -> list[str]:
    return [m["content"] for m in logged.messages
            if m.get("role") == "user" and isinstance(m.get("content"), str)]


def tool_results(logged: LoggedRequest) -> dict[str, str]:
    """The tool results the request carries (OpenAI protocol), by call id."""
    return {m["tool_call_id"]: m["content"] for m in logged.messages if m.get("role") == "tool"}


def results_in_log(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [block for r in records if r["type"] == "user" for block in r["message"]["content"]]


def tool_uses_in_log(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [block for r in records if r["type"] == "assistant"
            for block in r["message"]["content"] if block["type"] == "tool_use"]


def only_pending(project: PiProject) -> dict[str, Any]:
    (item,) = project.state()["interruptions"]
    assert item["status"] == "pending"
    return item


def test_an_answer_to_ask_human_is_the_result_of_the_resumed_call(tmp_path: Path) -> None:
    project = asking(tmp_path)

    first = project.run()

    assert first.code == 3, first.stderr
    state = project.state()
    assert state["runs"][0]["status"] == "interrupted"
    item = only_pending(project)
    assert (item["kind"], item["codonId"]) == ("question", "colour")
    assert (item["question"], item["options"]) == (QUESTION, OPTIONS)
    interrupted = project.records()["colour"]
    session = interrupted["claudeSessionId"]
    assert item["sessionId"] == session
    first_log = project.codon_log(interrupted)
    (use,) = tool_uses_in_log(first_log)
    assert use["name"] == "ask_human"
    assert results_in_log(first_log) == []  # the call is pending
    before = len(project.model_requests())
    assert before == 1

    answered = project.answer(item["id"], "blue")
    assert answered.code == 0, answered.stderr

    second = project.run()

    assert second.code == 0, second.stderr
    run = project.state()["runs"][0]
    assert run["status"] == "completed"
    assert run["startingConditions"]["reason"] == "resume"
    assert run["startingConditions"]["resumedRunId"] == state["runs"][0]["runId"]
    record = project.records()["colour"]
    assert record["status"] == "completed"
    # The resumed attempt went on in a copy of the interrupted session (forked).
    assert record["previousSessionId"] == session
    assert record["claudeSessionId"] != session
    (resumed,) = project.model_requests()[before:]
    # The first request of the resumed run answers the original call with the answer: no
    # model call and no user turn before it (the resume prompt is not sent).
    assert rule(resumed) == "answered"
    assert user_texts(resumed) == ["Pick a colour."]
    assert "They have answered" not in resumed.conversation_text()
    (assistant,) = [m for m in resumed.messages if m.get("role") == "assistant"]
    (call,) = assistant["tool_calls"]
    assert call["id"] == "call_ask" and call["function"]["name"] == "ask_human"
    assert json.loads(call["function"]["arguments"]) == {"question": QUESTION,
                                                        "options": OPTIONS}
    assert tool_results(resumed) == {"call_ask": "blue"}
    assert resumed.messages[-1]["role"] == "tool"
    # The resumed log answers the call the first log showed, under the same id.
    log = project.codon_log(record)
    assert [r["type"] for r in log] == ["system", "user", "assistant", "result"]
    assert log[0]["session_id"] == record["claudeSessionId"]
    (result,) = results_in_log(log)
    assert result["tool_use_id"] == use["id"] and result["content"] == "blue"
    assert not result.get("is_error")
    assert log[-1]["result"] == "Blue it is."
    (done,) = project.state()["interruptions"]
    assert (done["status"], done["answer"]) == ("answered", "blue")


@pytest.mark.parametrize("answer", ["--approve", "--reject"])
def test_a_held_bash_call_runs_or_is_denied_on_resume(tmp_path: Path, answer: str) -> None:
    project = PiProject(tmp_path, TIDY_SCRIPT)
    project.write_hank([codon("tidy", "Tidy up.")],
                       toolApproval=[{"tool": "Bash", "input": "rm "}])
    scratch = project.agent_root / "scratch.txt"

    first = project.run()

    assert first.code == 3, first.stderr
    assert scratch.read_text() == "scratch\n"  # the first call ran: no rule holds it
    item = only_pending(project)  # ls, in the same turn as rm, is not held
    assert (item["kind"], item["codonId"]) == ("tool-approval", "tidy")
    assert (item["toolName"], item["toolInput"]) == ("Bash", {"command": RM})
    assert "Bash" in item["question"] and RM in item["question"]
    assert item["options"] == ["approve", "reject"]
    session = project.records()["tidy"]["claudeSessionId"]
    before = len(project.model_requests())
    assert before == 2

    answered = project.answer(item["id"], answer)
    assert answered.code == 0, answered.stderr

    second = project.run()

    assert second.code == 0, second.stderr
    record = project.records()["tidy"]
    assert record["status"] == "completed"
    assert record["previousSessionId"] == session  # resumed in a copy of it
    assert record["claudeSessionId"] != session
    (resumed,) = project.model_requests()[before:]
    assert rule(resumed) == "done"
    assert user_texts(resumed) == ["Tidy up."]  # no resume prompt
    results = tool_results(resumed)
    assert list(results) == ["call_create", "call_ls", "call_rm"]
    assert "read_only_data_source" in results["call_ls"]  # ls ran, unheld
    (held,) = [b for b in results_in_log(project.codon_log(record))
               if b["content"] == results["call_rm"]]
    if answer == "--approve":
        assert not scratch.exists()
        assert results["call_rm"] == "gone"  # the command's output
        assert not held.get("is_error")
    else:
        assert scratch.read_text() == "scratch\n"
        assert "A person denied this call" in results["call_rm"]
        assert held["is_error"] is True
    (done,) = project.state()["interruptions"]  # nothing else was held on resume
    assert (done["status"], done["answer"]) == ("answered", answer.removeprefix("--"))


def test_an_answer_outside_the_options_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    project = asking(tmp_path)
    assert project.run().code == 3
    item = only_pending(project)
    kept = ["state.json", "state.wal", "events/events.jsonl"]
    before = {name: (project.hankweave_dir / name).read_bytes() for name in kept}
    runs = len(project.state()["runs"])

    refused = project.answer(item["id"], "green")

    assert refused.code == 2
    assert "green" in refused.stderr and "'red', 'blue'" in refused.stderr
    assert {name: (project.hankweave_dir / name).read_bytes() for name in kept} == before
    assert only_pending(project) == item
    # Still unanswered: the next run starts nothing and exits 3 again.
    again = project.run()
    assert again.code == 3, again.stderr
    assert len(project.state()["runs"]) == runs
    assert len(project.model_requests()) == 1
