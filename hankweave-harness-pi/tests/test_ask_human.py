"""The ``ask_human`` tool and the resume of tool calls an interrupted attempt left pending,
with real litellm against the mock provider."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pi_helpers import attempt, log_records, request

from hankweave.api import AttemptPolicy, CodonRequest, HumanReply
from hankweave.testing import MockProviderLog, RecordingPolicy, attempt_context
from hankweave.testing.mock_provider import LoggedRequest, scripted_mock
from hankweave_harness_pi import PiConfig, PiHarness
from hankweave_harness_pi.sessions import Session, SessionStore
from hankweave_harness_pi.tools import Toolbox, ToolOutcome

QUESTION = "Which colour?"
OPTIONS = ["red", "blue"]
ASK = {"name": "ask_human", "input": {"question": QUESTION, "options": OPTIONS}}
RESUME_PROMPT = ("You stopped to wait for a person. They have answered:\n"
                 '- You asked: "Which colour?". The answer: blue\n'
                 "Continue your task from where you stopped.")
SCRIPT = {"rules": [
    {"name": "ask", "when": {"lastUserMessage": {"regex": "^Ask "}, "afterToolResult": False},
     "reply": {"text": "I need to ask.", "toolCalls": [ASK]}},
    {"name": "count-and-ask", "when": {"lastUserMessage": {"regex": "^Count and ask"},
                                       "afterToolResult": False},
     "reply": {"toolCalls": [{"name": "bash", "input": {"command": "echo ran >> runs.txt"}},
                             ASK]}},
    {"name": "answered", "when": {"afterToolResult": True},
     "reply": {"text": "Going on with the answer."}},
    {"name": "told", "when": {"lastUserMessage": "You stopped to wait for a person"},
     "reply": {"text": "Going on as told."}},
    {"name": "recall", "when": {"lastUserMessage": "Which colour was it"},
     "reply": {"text": "I was never told."}},
]}


mock = scripted_mock(SCRIPT)


class WaitingPolicy(RecordingPolicy):
    """Records like :class:`RecordingPolicy`; its ``ask_human`` never answers (the runtime's
    human-in-the-loop layer ends the run to wait for a person, and cancels the attempt)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()

    async def ask_human(self, request: CodonRequest, question: str,
                        options: Sequence[str] | None) -> HumanReply:
        self.questions.append((question, list(options) if options is not None else None))
        self.asked.set()
        await asyncio.Event().wait()  # until the attempt is cancelled
        raise AssertionError("unreachable")


def interrupted_while_asking(req: CodonRequest, root: Path, config: PiConfig,
                             until: Callable[[], bool] | None = None
                             ) -> tuple[list[dict[str, Any]], WaitingPolicy]:
    """One attempt cancelled, as the runtime cancels it, while its ``ask_human`` waits (and,
    with ``until``, once that holds); its records and its policy."""
    records: list[dict[str, Any]] = []

    async def run() -> WaitingPolicy:
        policy = WaitingPolicy()
        harness = PiHarness(config)
        context = attempt_context(root / "exec", req, harness="pi", policy=policy)

        async def iterate() -> None:
            async for record in harness.run_codon(req, context):
                records.append(dict(record))

        task = asyncio.ensure_future(iterate())
        await asyncio.wait_for(policy.asked.wait(), 30)
        while until is not None and not until():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await harness.aclose()
        return policy

    return records, asyncio.run(run())


def conversation(log: Path, prompt: str) -> list[LoggedRequest]:
    """The requests of one test's conversation (its first prompt is unique), in order."""
    return [r for r in MockProviderLog(log).requests() if prompt in r.conversation_text()]


def rules(requests: list[LoggedRequest]) -> list[str]:
    return [(r.rule or "").rpartition("(")[2].rstrip(")") for r in requests]


def tool_results(logged: LoggedRequest) -> list[str]:
    """The tool results a request carries, in order, over either protocol."""
    found = []
    for message in logged.messages:
        if message.get("role") == "tool":
            found.append(message.get("content"))
        blocks = message.get("content")
        for block in blocks if isinstance(blocks, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                content = block.get("content")
                found.append(content if isinstance(content, str) else
                             "".join(part.get("text", "") for part in content or ()))
    return found


def user_texts(logged: LoggedRequest) -> list[str]:
    texts = []
    for message in logged.messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "text":
                texts.append(block.get("text", ""))
    return texts


def results_in_log(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [block for r in records if r["type"] == "user" for block in r["message"]["content"]]


def tool_uses_in_log(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [block for r in records if r["type"] == "assistant"
            for block in r["message"]["content"] if block["type"] == "tool_use"]


def saved_session(sessions: Path) -> Mapping[str, Any]:
    (path,) = sessions.glob("*.json")
    return json.loads(path.read_text())


# --- the tool -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["gpt-5.2", "pi/anthropic/claude-haiku-4-5"],
                         ids=["openai-protocol", "anthropic-protocol"])
def test_the_human_s_answer_is_the_tool_result(tmp_path: Path, mock, spec: str) -> None:
    prompt = f"Ask about the colour ({spec})."
    policy = RecordingPolicy(answers=["blue"])
    run = attempt(request(tmp_path, mock[0], prompt, spec=spec), tmp_path, policy=policy)

    assert run.outcome.success, run.outcome
    assert policy.questions == [(QUESTION, OPTIONS)]
    first, after = conversation(mock[1], prompt)
    offered = [t.get("name") or t.get("function", {}).get("name")
               for t in first.body.get("tools", [])]
    assert "ask_human" in offered
    assert tool_results(after) == ["blue"]
    records = log_records(run)
    (use,) = tool_uses_in_log(records)
    assert use["name"] == "ask_human" and use["input"] == {"question": QUESTION,
                                                          "options": OPTIONS}
    (result,) = results_in_log(records)
    assert result == {"type": "tool_result", "tool_use_id": use["id"], "content": "blue"}
    assert records[-1]["result"] == "Going on with the answer."


def test_without_a_human_the_result_is_the_kernel_s_message_as_an_error(tmp_path: Path,
                                                                         mock) -> None:
    prompt = "Ask about the colour, unattended."
    req = request(tmp_path, mock[0], prompt)
    no_human = asyncio.run(AttemptPolicy().ask_human(req, QUESTION, OPTIONS))
    run = attempt(req, tmp_path)  # the default policy: no human

    assert run.outcome.success, run.outcome
    (result,) = results_in_log(log_records(run))
    assert result["content"] == no_human.message and result["is_error"] is True
    assert tool_results(conversation(mock[1], prompt)[-1]) == [no_human.message]


def test_ask_human_does_not_go_through_the_tool_policy(tmp_path: Path, mock) -> None:
    policy = RecordingPolicy(deny={"ask_human": "no questions"}, answers=["red"])
    run = attempt(request(tmp_path, mock[0], "Ask about the colour, past the policy."),
                  tmp_path, policy=policy)

    assert run.outcome.success, run.outcome
    assert policy.tool_calls == []
    assert policy.questions == [(QUESTION, OPTIONS)]
    (result,) = results_in_log(log_records(run))
    assert result["content"] == "red" and "is_error" not in result


# --- pending calls --------------------------------------------------------------------------

def test_a_cancelled_attempt_keeps_the_pending_call_in_its_session(tmp_path: Path,
                                                                    mock) -> None:
    sessions = tmp_path / "sessions"
    req = request(tmp_path, mock[0], "Ask about the colour, then stop.")
    records, policy = interrupted_while_asking(req, tmp_path,
                                               PiConfig(sessions_dir=str(sessions)))

    assert policy.questions == [(QUESTION, OPTIONS)]
    assert [r["type"] for r in records] == ["system", "assistant"]
    messages = saved_session(sessions)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    (call,) = messages[-1]["tool_calls"]
    assert call["function"]["name"] == "ask_human"


def test_a_resumed_interruption_runs_the_pending_call_again_without_the_prompt(
        tmp_path: Path, mock) -> None:
    sessions = tmp_path / "sessions"
    config = PiConfig(sessions_dir=str(sessions))
    prompt = "Ask about the colour, and resume."
    first, _ = interrupted_while_asking(request(tmp_path / "one", mock[0], prompt),
                                        tmp_path / "one", config)
    session = first[0]["session_id"]

    policy = RecordingPolicy(answers=["blue"])  # the kernel has the recorded answer now
    run = attempt(request(tmp_path / "two", mock[0], RESUME_PROMPT, session_id_to_resume=session,
                          resumes_interruption=True), tmp_path / "two", config=config,
                  policy=policy)

    assert run.outcome.success, run.outcome
    assert policy.questions == [(QUESTION, OPTIONS)]
    requests = conversation(mock[1], prompt)
    assert rules(requests) == ["ask", "answered"]  # no model call before the tool ran again
    resumed = requests[1]
    (assistant,) = [m for m in resumed.messages if m.get("role") == "assistant"]
    (call,) = assistant["tool_calls"]
    assert call["function"]["name"] == "ask_human"
    assert json.loads(call["function"]["arguments"]) == ASK["input"]
    (answer,) = [m for m in resumed.messages if m.get("role") == "tool"]
    assert answer["tool_call_id"] == call["id"] and answer["content"] == "blue"
    assert RESUME_PROMPT not in user_texts(resumed)
    assert RESUME_PROMPT not in resumed.conversation_text()
    # The resumed log answers the call the first log showed, under the same id.
    records = log_records(run)
    assert [r["type"] for r in records] == ["system", "user", "assistant", "result"]
    assert records[0]["session_id"] == session
    (use,) = tool_uses_in_log(first)
    (result,) = results_in_log(records)
    assert result["tool_use_id"] == use["id"] and result["content"] == "blue"
    assert records[-1]["result"] == "Going on with the answer."


def test_results_that_came_in_before_the_cancel_are_kept_and_not_run_again(
        tmp_path: Path, mock, monkeypatch: pytest.MonkeyPatch) -> None:
    finished: list[str] = []
    run_tool = Toolbox.run

    async def noting_run(self: Toolbox, name: str, arguments: Mapping[str, Any]
                         ) -> ToolOutcome:
        outcome = await run_tool(self, name, arguments)
        finished.append(name)  # the agent has the outcome once another task sees this
        return outcome

    monkeypatch.setattr(Toolbox, "run", noting_run)
    sessions = tmp_path / "sessions"
    config = PiConfig(sessions_dir=str(sessions))
    prompt = "Count and ask about the colour."
    req = request(tmp_path, mock[0], prompt)
    runs = tmp_path / "agentRoot" / "runs.txt"
    first, _ = interrupted_while_asking(req, tmp_path, config,
                                        until=lambda: finished == ["bash"])
    messages = saved_session(sessions)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]

    run = attempt(request(tmp_path, mock[0], RESUME_PROMPT,
                          session_id_to_resume=first[0]["session_id"],
                          resumes_interruption=True), tmp_path, config=config,
                  policy=RecordingPolicy(answers=["blue"]))

    assert run.outcome.success, run.outcome
    assert runs.read_text() == "ran\n"  # the command ran once
    resumed = conversation(mock[1], prompt)[-1]
    assert rules([resumed]) == ["answered"]
    calls = next(m for m in resumed.messages if m.get("role") == "assistant")["tool_calls"]
    answers = [m for m in resumed.messages if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in answers] == [c["id"] for c in calls]  # in call order
    assert [m["content"] for m in answers] == ["(no output)", "blue"]


def test_a_resumed_interruption_with_nothing_pending_sends_the_prompt(tmp_path: Path,
                                                                      mock) -> None:
    sessions = tmp_path / "sessions"
    config = PiConfig(sessions_dir=str(sessions))
    prompt = "Ask about the colour, then finish."
    first = attempt(request(tmp_path / "one", mock[0], prompt), tmp_path / "one",
                    config=config, policy=RecordingPolicy(answers=["red"]))
    assert first.outcome.success, first.outcome

    run = attempt(request(tmp_path / "two", mock[0], RESUME_PROMPT,
                          session_id_to_resume=first.record.claude_session_id,
                          resumes_interruption=True), tmp_path / "two", config=config)

    assert run.outcome.success, run.outcome
    told = conversation(mock[1], prompt)[-1]
    assert rules([told]) == ["told"]
    assert user_texts(told)[-1] == RESUME_PROMPT
    assert log_records(run)[-1]["result"] == "Going on as told."


def test_another_pass_on_a_session_with_a_pending_call_closes_it_as_not_run(
        tmp_path: Path, mock) -> None:
    sessions = tmp_path / "sessions"
    config = PiConfig(sessions_dir=str(sessions))
    prompt = "Ask about the colour, then be continued."
    first, _ = interrupted_while_asking(request(tmp_path / "one", mock[0], prompt),
                                        tmp_path / "one", config)

    policy = RecordingPolicy(answers=["blue"])
    run = attempt(request(tmp_path / "two", mock[0], "Which colour was it?",
                          session_id_to_resume=first[0]["session_id"]), tmp_path / "two",
                  config=config, policy=policy)

    assert run.outcome.success, run.outcome
    assert policy.questions == []  # not asked again: this pass is no interruption's resume
    recall = conversation(mock[1], prompt)[-1]
    assert rules([recall]) == ["recall"]
    (closed,) = tool_results(recall)
    assert closed.startswith("Not run:")
    assert user_texts(recall)[-1] == "Which colour was it?"
    (result,) = results_in_log(log_records(run))
    assert result["is_error"] is True


def test_a_session_knows_which_tool_calls_have_no_result(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session: Session = store.new("openai/gpt-5.2", "system")
    assert session.pending_tool_calls() == (-1, [])
    calls = [{"id": f"call_{n}", "type": "function",
              "function": {"name": "ls", "arguments": "{}"}} for n in (1, 2, 3)]
    session.messages += [{"role": "user", "content": "go"},
                         {"role": "assistant", "content": "", "tool_calls": calls},
                         {"role": "tool", "tool_call_id": "call_2", "content": "two"}]
    assert session.pending_tool_calls() == (2, [calls[0], calls[2]])

    session.add_tool_results(2, [("call_3", "three"), ("call_1", "one")])
    assert [m["content"] for m in session.messages[3:]] == ["one", "two", "three"]
    assert session.pending_tool_calls() == (-1, [])
    store.save(session)
    assert store.load(session.id).messages == session.messages
