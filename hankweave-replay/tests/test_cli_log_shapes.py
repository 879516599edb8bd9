"""Replaying logs of the shapes the real Claude CLI writes: costs, tokens, message counts and
outcomes come out as in a live run (the kernel's tests/test_cli_log_shapes.py has the parser
and the runner)."""

from __future__ import annotations

import pytest
from test_minimal_execution import minimal_execution

from hankweave.api import (
    TokenUsage,
    assistant_record,
    init_record,
    load_state,
    result_record,
    text_block,
    tool_result_record,
    tool_use_block,
)

TIMEOUT_TEXT = "API Error: Request timed out."
TOTAL = TokenUsage(input_tokens=250, output_tokens=110, cache_read_tokens=22_000)


def frames(message_id: str, *steps: tuple[dict, TokenUsage]) -> list[dict]:
    return [assistant_record([block], model="claude-sonnet-4-5", usage=so_far,
                             message_id=message_id) for block, so_far in steps]


def session() -> list[dict]:
    """Two messages written as five frames, each with its message's usage so far."""
    return [
        init_record("s1", model="claude-sonnet-4-5"),
        *frames("msg_A", (text_block("I'll write it."), TokenUsage(input_tokens=100,
                                                                   output_tokens=40,
                                                                   cache_read_tokens=10_000)),
                (tool_use_block("Write", {"file_path": "a.md", "content": "x"},
                                tool_use_id="toolu_1"),
                 TokenUsage(input_tokens=100, output_tokens=80, cache_read_tokens=10_000))),
        tool_result_record("toolu_1", "File created"),
        *frames("msg_B", *[(text_block("Done."), TokenUsage(input_tokens=150, output_tokens=n,
                                                            cache_read_tokens=12_000))
                           for n in (10, 20, 30)]),
    ]


def replayed_record(project, lines: list[dict], **codon_fields):
    source = minimal_execution(project, {"a": lines}, **codon_fields)
    replayed = project.replay(source)
    (record,) = [c for c in load_state(replayed.exec_dir / ".hankweave")[0].runs[0].codons
                 if c.codon_id == "a"][-1:]
    return replayed, record


def test_frames_replay_as_lines_and_one_turn_per_message_with_the_results_cost(project):
    lines = [*session(), result_record(session_id="s1", text="Done.", usage=TOTAL,
                                       total_cost_usd=0.05)]

    replayed, record = replayed_record(project, lines)

    assert replayed.code == 0, replayed.notices
    assert record.status == "completed"
    # Every assistant line counts, as in the original; each message id is one turn.
    assert (record.assistant_message_count, record.assistant_turn_count) == (5, 2)
    assert (record.final_cost, record.final_tokens) == (0.05, TOTAL)


def test_a_timeout_then_its_result_replays_as_a_timeout_with_the_real_cost(project):
    lines = [*session(),
             assistant_record([text_block(TIMEOUT_TEXT)], model="<synthetic>",
                              usage=TokenUsage(), message_id="msg_timeout"),
             result_record(session_id="s1", is_error=True, text=TIMEOUT_TEXT, usage=TOTAL,
                           total_cost_usd=0.0907)]

    replayed, record = replayed_record(project, lines)

    assert replayed.code == 1
    assert record.status == "failed"
    assert record.failure_reason.type == "timeout" and record.failure_reason.retriable
    assert (record.partial_cost, record.partial_tokens) == (0.0907, TOTAL)
    assert (record.assistant_message_count, record.assistant_turn_count) == (6, 3)


@pytest.mark.parametrize("policy", ["abort", "retry"])
def test_an_sdk_error_after_the_success_replays_as_a_completed_codon(project, policy):
    lines = [*session(),
             result_record(session_id="s1", text="Done.", usage=TOTAL, total_cost_usd=0.05),
             result_record(session_id="s1", success=False, subtype="error_during_execution",
                           text="only prompt commands are supported in streaming mode")]

    replayed, record = replayed_record(project, lines, onFailure=policy)

    assert replayed.code == 0, replayed.notices
    assert [c.status for c in replayed.state.runs[0].codons] == ["completed"]
    assert record.final_cost == 0.05
