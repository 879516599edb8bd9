"""The agent loop with real litellm against the mock provider: tools over both protocols,
sessions that resume, provider errors, context, costs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pi_helpers import attempt, log_records, model, offline_env, request

from hankweave.api import ModelEntry
from hankweave.testing.mock_provider import MockProviderLog, scripted_mock
from hankweave_harness_pi import PiConfig
from hankweave_harness_pi.agent import ToolIds
from hankweave_harness_pi.sessions import SessionStore

EDIT_LOOP = [
    {"name": "write", "when": {"lastUserMessage": "Write the plan", "afterToolResult": False},
     "reply": {"text": "Writing it.", "usage": {"inputTokens": 500, "outputTokens": 40},
               "toolCalls": [{"name": "write", "input": {"path": "plan.md",
                                                         "content": "# Plan\n\nstep one\n"}}]}},
    {"name": "edit", "when": {"lastUserMessage": "Write the plan", "toolResult": "Wrote"},
     "reply": {"usage": {"inputTokens": 600, "outputTokens": 30},
               "toolCalls": [{"name": "edit", "input": {"path": "plan.md",
                                                        "old_text": "step one",
                                                        "new_text": "step one\nstep two"}}]}},
    {"name": "done", "when": {"lastUserMessage": "Write the plan", "afterToolResult": True},
     "reply": {"text": "The plan has two steps.", "usage": {"inputTokens": 700,
                                                            "outputTokens": 10}}},
]
SCRIPT = {"rules": [
    *EDIT_LOOP,
    {"name": "remember", "when": {"lastUserMessage": "Name a fruit"},
     "reply": {"text": "Quince."}},
    {"name": "recall", "when": {"lastUserMessage": "Which fruit"},
     "reply": {"text": "You asked about a fruit: quince."}},
    {"name": "limited", "when": {"lastUserMessage": "Hurry"},
     "reply": {"error": {"kind": "rate_limit", "retryAfter": 7}}},
    {"name": "overflow", "when": {"lastUserMessage": "Read everything"},
     "reply": {"error": {"kind": "context_length"}}},
    {"name": "summary", "when": {"lastUserMessage": "too long to continue"},
     "reply": {"text": "Summary: wrote big.md; next, say done."}},
    {"name": "fill-1", "when": {"lastUserMessage": "Fill the context", "afterToolResult": False},
     "reply": {"usage": {"inputTokens": 500, "outputTokens": 10},
               "toolCalls": [{"name": "write", "input": {"path": "a.md", "content": "a\n"}}]}},
    {"name": "fill-2", "when": {"lastUserMessage": "Fill the context", "toolResult": "a.md"},
     "reply": {"usage": {"inputTokens": 9000, "outputTokens": 10},
               "toolCalls": [{"name": "write", "input": {"path": "big.md", "content": "x\n"}}]}},
    {"name": "big-done", "when": {"afterToolResult": True, "toolResult": "big.md"},
     "reply": {"text": "Done after compaction.", "usage": {"inputTokens": 300,
                                                          "outputTokens": 5}}},
    {"name": "two-at-once", "when": {"lastUserMessage": "Write both", "afterToolResult": False},
     "reply": {"toolCalls": [{"name": "write", "input": {"path": "a.md", "content": "a\n"}},
                             {"name": "bash", "input": {"command": "sleep 0.3; echo slept"}}]}},
    {"name": "both-done", "when": {"lastUserMessage": "Write both", "afterToolResult": True},
     "reply": {"text": "Both done."}},
    {"name": "priced", "when": {"lastUserMessage": "Count the cost"},
     "reply": {"text": "Counted.", "usage": {"inputTokens": 1000000, "outputTokens": 500000}}},
]}


mock = scripted_mock(SCRIPT)


@pytest.mark.parametrize("spec", ["gpt-5.2", "pi/anthropic/claude-haiku-4-5"],
                         ids=["openai-protocol", "anthropic-protocol"])
def test_a_multi_turn_tool_loop_writes_and_edits_files(tmp_path: Path, mock, spec: str) -> None:
    run = attempt(request(tmp_path, mock[0], "Write the plan.", spec=spec), tmp_path)

    assert run.outcome.success, run.outcome
    assert (tmp_path / "agentRoot/plan.md").read_text() == "# Plan\n\nstep one\nstep two\n"
    records = log_records(run)
    kinds = [r["type"] for r in records]
    assert kinds == ["system", "assistant", "user", "assistant", "user", "assistant", "result"]
    init = records[0]
    assert init["subtype"] == "init" and init["tools"] == [
        "Read", "Write", "Edit", "Bash", "Grep", "Glob", "LS", "ask_human"]
    uses = [b for r in records if r["type"] == "assistant" for b in r["message"]["content"]
            if b["type"] == "tool_use"]
    assert [u["name"] for u in uses] == ["Write", "Edit"]
    assert uses[0]["input"]["file_path"] == "plan.md"  # Claude's spelling in the log
    results = [b for r in records if r["type"] == "user" for b in r["message"]["content"]]
    assert [b["tool_use_id"] for b in results] == [u["id"] for u in uses]
    assert records[-1]["result"] == "The plan has two steps."
    assert run.record.current_tokens.input_tokens == 1800
    assert run.record.current_tokens.output_tokens == 80
    assert run.record.assistant_message_count == 3


RESUME_IN_A_NEW_PROCESS = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from pi_helpers import attempt, request
from hankweave_harness_pi import PiConfig
root, sessions, session = Path(sys.argv[2]), sys.argv[3], sys.argv[4]
mock_env = json.loads(sys.argv[5])
run = attempt(request(root, mock_env, "Which fruit did I ask about?",
                      session_id_to_resume=session), root,
              config=PiConfig(sessions_dir=sessions))
print(json.dumps({"success": run.outcome.success, "session": run.record.claude_session_id}))
"""


def test_continue_previous_resumes_the_saved_conversation_after_a_restart(tmp_path: Path,
                                                                         mock) -> None:
    sessions = tmp_path / "sessions"
    first = attempt(request(tmp_path / "one", mock[0], "Name a fruit."), tmp_path / "one",
                    config=PiConfig(sessions_dir=str(sessions)))
    session = first.record.claude_session_id
    assert first.outcome.success and session

    # Another process reads the session back from its file and continues it.
    done = subprocess.run(
        [sys.executable, "-c", RESUME_IN_A_NEW_PROCESS, str(Path(__file__).parent),
         str(tmp_path / "two"), str(sessions), session, json.dumps(mock[0])],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout.strip().splitlines()[-1])
    assert again == {"success": True, "session": session}
    recall = MockProviderLog(mock[1]).requests(rule="recall")[-1]
    text = recall.conversation_text()
    assert "Name a fruit." in text and "Quince." in text and "Be brief." in text


def test_each_forked_resume_continues_its_own_copy_and_the_original_stays(tmp_path: Path,
                                                                         mock) -> None:
    sessions = tmp_path / "sessions"
    config = PiConfig(sessions_dir=str(sessions))
    first = attempt(request(tmp_path / "one", mock[0], "Name a fruit."), tmp_path / "one",
                    config=config)
    original = first.record.claude_session_id
    kept = (sessions / f"{original}.json").read_bytes()

    forks = []
    for number, prompt in enumerate(["Which fruit, first try?", "Which fruit, second try?"]):
        run = attempt(request(tmp_path / f"fork{number}", mock[0], prompt,
                              session_id_to_resume=original, fork_session=True),
                      tmp_path / f"fork{number}", config=config)
        assert run.outcome.success, run.outcome
        assert log_records(run)[0]["session_id"] == run.record.claude_session_id
        forks.append(run.record.claude_session_id)

    assert len({original, *forks}) == 3
    assert (sessions / f"{original}.json").read_bytes() == kept
    second = json.loads((sessions / f"{forks[1]}.json").read_text())
    assert second["forkedFrom"] == [{"id": original, "messages": 3}]
    assert [m["content"] for m in second["messages"][1:]] == [
        "Name a fruit.", "Quince.", "Which fruit, second try?",
        "You asked about a fruit: quince."]
    # The second copy's request held the original conversation, not the first copy's turns.
    recall = MockProviderLog(mock[1]).requests(rule="recall")[-1]
    text = recall.conversation_text()
    assert "Quince." in text and "second try" in text and "first try" not in text


def test_a_copy_keeps_the_tool_ids_of_the_history_it_copied(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = store.new("openai/gpt-5.2", "system")
    session.messages += [{"role": "user", "content": "go"}, {"role": "assistant", "content": ""}]
    store.save(session)
    child = store.fork(session.id)
    child.messages += [{"role": "user", "content": "more"}]
    store.save(child)
    grandchild = store.fork(child.id)

    loaded = store.load(grandchild.id)
    assert loaded.origins == [(session.id, 3), (child.id, 4)]
    assert [loaded.origin_of(index) for index in (0, 2, 3, 4)] == [
        session.id, session.id, child.id, grandchild.id]
    ids = ToolIds(loaded)
    assert ids("abc", 2) == ToolIds(session)("abc", 2)  # the call the original made
    assert ids("abc", 4) != ToolIds(child)("abc", 4)  # a new turn: an id of its own
    loaded.rewritten()  # a compaction moves every message
    assert loaded.origin_of(0) == grandchild.id


def test_a_missing_session_fails_the_codon_with_the_reason(tmp_path: Path, mock) -> None:
    run = attempt(request(tmp_path, mock[0], "Which fruit?", session_id_to_resume="gone-1"),
                  tmp_path)
    assert not run.outcome.success
    assert run.outcome.failure_reason is not None
    assert "No pi session gone-1 to resume" in run.outcome.failure_reason.message
    assert run.outcome.failure_reason.retriable is False


def test_the_turn_limit_is_its_own_permanent_failure(tmp_path: Path, mock) -> None:
    run = attempt(request(tmp_path, mock[0], "Write the plan."), tmp_path,
                  config=PiConfig(max_turns=2))

    reason = run.outcome.failure_reason
    assert reason is not None and (reason.type, reason.retriable) == ("turn-limit", False), reason
    assert "after 2 turns" in reason.message and "harnesses.pi.maxTurns" in reason.message
    assert (tmp_path / "agentRoot" / "plan.md").read_text() == "# Plan\n\nstep one\nstep two\n"


def test_a_rate_limit_carries_its_retry_after(tmp_path: Path, mock) -> None:
    run = attempt(request(tmp_path, mock[0], "Hurry."), tmp_path)
    reason = run.outcome.failure_reason
    assert reason is not None and reason.type == "rate-limit" and reason.retriable
    assert reason.retry_after_ms == 7000


def test_a_context_length_error_is_context_exceeded(tmp_path: Path, mock) -> None:
    run = attempt(request(tmp_path, mock[0], "Read everything."), tmp_path)
    assert not run.outcome.success
    assert run.outcome.context_exceeded
    assert run.outcome.failure_reason is not None
    assert run.outcome.failure_reason.retriable is False


def test_auto_compact_summarises_and_keeps_going_past_the_limit(tmp_path: Path, mock) -> None:
    small = model("gpt-5.2").model_copy(update={"context_limit": 10_000})
    run = attempt(request(tmp_path, mock[0], "Fill the context.", entry=small,
                          auto_compact=True), tmp_path)

    assert run.outcome.success, run.outcome
    records = log_records(run)
    boundary = [r for r in records if r.get("subtype") == "compact_boundary"]
    assert boundary and boundary[0]["compact_metadata"]["trigger"] == "auto"
    assert records[-1]["result"] == "Done after compaction."
    after = MockProviderLog(mock[1]).requests(rule="big-done")[-1]
    assert "Summary: wrote big.md" in after.conversation_text()


def test_a_model_priced_in_the_settings_has_its_cost(tmp_path: Path, mock) -> None:
    unknown = ModelEntry(provider_id="openai", model_id="my-local-model", name="Local",
                         context_limit=32_000, output_limit=4_000)
    config = PiConfig.model_validate({"models": {"openai/my-local-model": {
        "input": 2.0, "output": 8.0}}})
    run = attempt(request(tmp_path, mock[0], "Count the cost.", entry=unknown), tmp_path,
                  config=config)
    assert run.outcome.success
    assert run.record.current_cost == pytest.approx(2.0 + 4.0)


def test_an_unpriced_model_has_an_unknown_cost_not_zero(tmp_path: Path, mock) -> None:
    unknown = ModelEntry(provider_id="openai", model_id="my-local-model", name="Local",
                         context_limit=32_000, output_limit=4_000)
    run = attempt(request(tmp_path, mock[0], "Count the cost.", entry=unknown), tmp_path)
    assert run.outcome.success
    assert run.record.current_cost is None or run.record.cost_complete is False


def test_a_missing_key_fails_before_the_agent_starts(tmp_path: Path) -> None:
    req = request(tmp_path, {}, "Say hello.", spec="pi/deepseek/deepseek-chat",
                  env=offline_env({}))
    run = attempt(req, tmp_path)
    reason = run.outcome.failure_reason
    assert reason is not None and reason.retriable is False
    assert "DEEPSEEK_API_KEY" in reason.message


def test_settings_are_strict_with_their_paths() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="maxTurns"):
        PiConfig.model_validate({"maxTurns": 0})
    with pytest.raises(ValidationError, match=r"apiBase|protocol"):
        PiConfig.model_validate({"providers": {"local": {"protocol": "grpc"}}})


def test_a_context_limit_in_the_settings_drives_compaction(tmp_path: Path, mock) -> None:
    config = PiConfig.model_validate({"models": {"openai/gpt-5.2": {
        "input": 1.0, "output": 2.0, "contextLimit": 10_000}}})
    run = attempt(request(tmp_path, mock[0], "Fill the context.", auto_compact=True),
                  tmp_path, config=config)

    assert run.outcome.success, run.outcome
    assert any(r.get("subtype") == "compact_boundary" for r in log_records(run))


def test_parallel_tool_calls_run_together_and_answer_in_one_message(tmp_path: Path,
                                                                      mock) -> None:
    run = attempt(request(tmp_path, mock[0], "Write both files."), tmp_path)

    assert run.outcome.success, run.outcome
    records = log_records(run)
    (results,) = [r for r in records if r["type"] == "user"]
    contents = [b["content"] for b in results["message"]["content"]]
    assert len(contents) == 2 and "slept" in contents[1]
    assert (tmp_path / "agentRoot/a.md").read_text() == "a\n"
    both = MockProviderLog(mock[1]).requests(rule="both-done")[-1]
    roles = [m.get("role") for m in both.messages]
    assert roles[-2:] == ["tool", "tool"]
