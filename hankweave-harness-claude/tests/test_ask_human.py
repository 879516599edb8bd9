"""The ``ask_human`` tool (an in-process MCP server): the real CLI calls it against the mock
provider, the kernel's policy answers, and the answer goes back to the model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from claude_helpers import HankProject, codon, haiku, offline_env

from hankweave.api import AGENT_MARKER_ENV, AttemptPolicy, CodonRequest
from hankweave.testing import RecordingPolicy, attempt_context, run_attempt
from hankweave.testing.mock_provider import MockProviderLog, scripted_mock
from hankweave_harness_claude import ClaudeHarness
from hankweave_harness_claude.human import ASK_HUMAN_TOOL, HUMAN_WAIT_S

QUESTION = {"question": "Which colour should the report use?", "options": ["red", "blue"]}

SCRIPT = {"rules": [
    {"name": "ask", "when": {"lastUserMessage": "Pick a colour", "turn": 1},
     "reply": {"text": "I need to ask.",
               "toolCalls": [{"name": ASK_HUMAN_TOOL, "input": QUESTION}]}},
    {"name": "answered", "when": {"lastUserMessage": "Pick a colour", "afterToolResult": True},
     "reply": {"text": "Going with that."}},
    {"name": "both", "when": {"lastUserMessage": "Check and ask", "turn": 1},
     "reply": {"toolCalls": [{"name": "Bash", "input": {"command": "true"}},
                             {"name": ASK_HUMAN_TOOL, "input": QUESTION}]}},
    {"name": "both-done", "when": {"lastUserMessage": "Check and ask",
                                   "afterToolResult": True},
     "reply": {"text": "Checked and asked."}},
]}


mock = scripted_mock(SCRIPT)


def request(tmp_path: Path, mock_env: dict[str, str], prompt: str) -> CodonRequest:
    work = tmp_path / "agentRoot"
    work.mkdir(parents=True, exist_ok=True)
    marker = {AGENT_MARKER_ENV: f"ask-human/{tmp_path.name}"}
    return CodonRequest(prompt=prompt, system_prompt=None, model=haiku(), work_dir=work,
                        env=offline_env(mock_env, **marker),
                        env_overlay={**mock_env, **marker}, codon_id="c", run_id="r")


def attempt(req: CodonRequest, root: Path, **options: Any) -> Any:
    return asyncio.run(run_attempt(ClaudeHarness, req, root / "exec", **options))


def tool_results(records: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ``tool_result`` blocks of the user messages (codon-log records or API messages)."""
    blocks = []
    for record in records:
        message = record.get("message", record)
        content = message.get("content") if message.get("role") == "user" else None
        blocks += [block for block in content if isinstance(block, dict)
                   and block.get("type") == "tool_result"] if isinstance(content, list) else []
    return blocks


def text_of(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def logged(run: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.log_path.read_text().splitlines() if line.strip()]


def ask_calls(records: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [block for record in records if record.get("type") == "assistant"
            for block in record["message"]["content"]
            if block.get("type") == "tool_use" and block.get("name") == ASK_HUMAN_TOOL]


def test_the_agents_question_reaches_the_policy_and_the_answer_the_model(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    policy = RecordingPolicy(answers=["blue"])
    run = attempt(request(tmp_path, mock[0], "Pick a colour."), tmp_path, policy=policy)

    assert run.outcome.success, run.outcome
    assert policy.questions == [(QUESTION["question"], ["red", "blue"])]
    assert policy.tool_calls == []  # the kernel's own tool is not authorized like others
    records = logged(run)
    (call,) = ask_calls(records)
    (result,) = tool_results(records)
    assert result["tool_use_id"] == call["id"]
    assert text_of(result) == "blue" and not result.get("is_error")
    (answered,) = MockProviderLog(mock[1]).requests(rule="answered")
    (sent,) = [b for b in tool_results(answered.messages) if b["tool_use_id"] == call["id"]]
    assert text_of(sent) == "blue" and not sent.get("is_error")


def test_the_tool_is_offered_with_its_schema_not_behind_tool_search(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    run = attempt(request(tmp_path, mock[0], "Pick a colour."), tmp_path,
                  policy=RecordingPolicy(answers=["red"]))

    assert run.outcome.success, run.outcome
    first = MockProviderLog(mock[1]).requests(rule="ask")[-1]
    tools = {tool["name"]: tool for tool in first.body.get("tools", [])}
    assert "ToolSearch" not in tools
    schema = tools[ASK_HUMAN_TOOL]["input_schema"]
    assert schema["required"] == ["question"]
    assert schema["properties"]["options"]["type"] == "array"
    init = next(r for r in logged(run) if r.get("subtype") == "init")
    assert [(s["name"], s["status"]) for s in init["mcp_servers"]] == [("hankweave", "connected")]


def test_without_a_human_the_agent_is_told_so_as_an_error_result(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    req = request(tmp_path, mock[0], "Pick a colour.")
    no_human = asyncio.run(AttemptPolicy().ask_human(req, "?", None)).message
    run = attempt(req, tmp_path)  # the kernel's default policy: no human

    assert run.outcome.success, run.outcome
    (result,) = tool_results(logged(run))
    assert text_of(result) == no_human and result["is_error"] is True
    sent = tool_results(MockProviderLog(mock[1]).requests(rule="answered")[-1].messages)
    assert [(text_of(b), b.get("is_error")) for b in sent] == [(no_human, True)]


def test_the_tool_policy_is_asked_about_bash_but_not_about_ask_human(
        tmp_path: Path, mock: tuple[dict[str, str], Path]) -> None:
    policy = RecordingPolicy(answers=["red"])
    run = attempt(request(tmp_path, mock[0], "Check and ask."), tmp_path, policy=policy)

    assert run.outcome.success, run.outcome
    assert [name for name, _ in policy.tool_calls] == ["Bash"]
    assert [question for question, _ in policy.questions] == [QUESTION["question"]]
    assert sorted(text_of(b) for b in tool_results(logged(run)))[-1] == "red"


def test_the_pre_tool_use_hook_skips_ask_human_and_waits_long_for_a_person(
        tmp_path: Path) -> None:
    from hankweave_harness_claude.session import tool_policy_hook

    policy = RecordingPolicy(deny={"Bash": "No shell."})
    context = attempt_context(tmp_path, request(tmp_path, {}, "p"), policy=policy)
    matcher = tool_policy_hook(context)
    (hook,) = matcher.hooks

    async def ask(name: str, tool_input: dict[str, Any]) -> Any:
        return await hook({"tool_name": name, "tool_input": tool_input}, "toolu_1", None)

    assert asyncio.run(ask(ASK_HUMAN_TOOL, QUESTION)) == {}
    denied = asyncio.run(ask("Bash", {"command": "ls"}))
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert policy.tool_calls == [("Bash", {"command": "ls"})]
    assert matcher.timeout == HUMAN_WAIT_S == 7 * 24 * 3600


RESUMED = {"rules": [
    {"name": "ask", "when": {"lastUserMessage": "Pick a colour", "turn": 1},
     "reply": {"toolCalls": [{"name": ASK_HUMAN_TOOL, "input": QUESTION}]}},
    {"name": "resumed", "when": {"lastUserMessage": "They have answered"},
     "reply": {"text": "Blue it is."}},
]}


def test_an_answer_after_the_run_ended_arrives_as_the_next_user_turn(
        project: HankProject) -> None:
    project.write([codon("colour", promptText="Pick a colour.")], RESUMED)

    first = project.run()

    assert first.code == 3, first.stderr  # ended waiting for a human
    (item,) = first.state()["interruptions"]
    assert (item["question"], item["options"]) == (QUESTION["question"], ["red", "blue"])
    answered = subprocess.run(
        [sys.executable, "-m", "hankweave", "answer", "-e", str(project.execution),
         item["id"], "blue"], env=project.process_env(), capture_output=True, text=True,
        timeout=60, check=False)
    assert answered.returncode == 0, answered.stderr
    session = first.records()["colour"]["claudeSessionId"]

    second = project.run()

    assert second.code == 0, second.stderr
    assert second.records()["colour"]["status"] == "completed"
    # The resumed attempt continued a fork of the interrupted session (--fork-session).
    assert second.records()["colour"]["previousSessionId"] == session
    assert second.records()["colour"]["claudeSessionId"] != session
    # The interrupted CLI got SIGTERM before its stdin closed: it made no further request
    # (on EOF it would fail the pending call and ask the model again at once).
    requests = project.model_requests()
    assert [r["rule"].split(" ")[-1] for r in requests] == ["(ask)", "(resumed)"]
    messages = requests[-1]["request"]["messages"]
    assert "Pick a colour." in json.dumps(messages)  # the same conversation, resumed
    last = [m for m in messages if m["role"] == "user"][-1]  # the kernel's resume prompt
    assert "blue" in json.dumps(last["content"]) and not tool_results([last])
