"""Codon logs of the shapes the real Claude CLI writes (and the original recorded), through the
parser and the live runner: costs, tokens, message counts and outcomes (docs/codon-log.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hankweave.codonlog import (
    SYNTHETIC_MODEL,
    SYNTHETIC_TIMEOUT_TEXT,
    CodonLogParser,
    assistant_record,
    init_record,
    result_record,
    text_block,
    thinking_block,
    tool_result_record,
    tool_use_block,
)
from hankweave.state.types import TokenUsage
from tests.runtime_harness import Project, codon

MODEL = "claude-sonnet-4-5"


def usage(input_tokens: int, output_tokens: int, cache_write: int = 0,
          cache_read: int = 0) -> TokenUsage:
    return TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens,
                      cache_creation_tokens=cache_write, cache_read_tokens=cache_read)


def frames(message_id: str, *blocks_and_usage: tuple[dict[str, Any], TokenUsage]
           ) -> list[dict[str, Any]]:
    """One assistant message written as the CLI writes it: a frame per content block, each
    with the same id and the message's usage so far."""
    return [assistant_record([block], model=MODEL, usage=so_far, message_id=message_id)
            for block, so_far in blocks_and_usage]


def framed_session() -> list[dict[str, Any]]:
    """Two messages, five frames: the first thinks, says and writes; the second answers."""
    return [
        init_record("s1", model=MODEL),
        *frames("msg_A",
                (thinking_block("Let me plan."), usage(100, 5, 2000, 10_000)),
                (text_block("I'll write it."), usage(100, 40, 2000, 10_000)),
                (tool_use_block("Write", {"file_path": "a.md", "content": "x"},
                                tool_use_id="toolu_1"), usage(100, 80, 2000, 10_000))),
        tool_result_record("toolu_1", "File created"),
        *frames("msg_B",
                (text_block("Done"), usage(150, 10, 0, 12_000)),
                (text_block("Done."), usage(150, 30, 0, 12_000))),
    ]


def timed_out_session() -> list[dict[str, Any]]:
    return [
        *framed_session(),
        assistant_record([text_block(SYNTHETIC_TIMEOUT_TEXT)], model=SYNTHETIC_MODEL,
                         usage=usage(0, 0), message_id="msg_timeout"),
        # The disguised error the CLI writes after a timeout, with the session's real cost.
        result_record(session_id="s1", is_error=True, text=SYNTHETIC_TIMEOUT_TEXT,
                      usage=usage(250, 110, 2000, 22_000), total_cost_usd=0.0907),
    ]


def success_then_sdk_error() -> list[dict[str, Any]]:
    return [
        *framed_session(),
        result_record(session_id="s1", text="Done.", usage=usage(250, 110, 2000, 22_000),
                      total_cost_usd=0.05),
        result_record(session_id="s1", success=False, subtype="error_during_execution",
                      text="only prompt commands are supported in streaming mode"),
    ]


def parse(lines: list[dict[str, Any]], price: Any = None) -> CodonLogParser:
    parser = CodonLogParser(price=price)
    for line in lines:
        parser.feed(line)
    return parser


def per_million(tokens: TokenUsage) -> float:
    """A test price: $1 per million tokens of any kind."""
    return (tokens.input_tokens + tokens.output_tokens + tokens.cache_creation_tokens
            + tokens.cache_read_tokens) / 1_000_000


# ----- the parser -----


def test_frames_of_one_message_count_once_with_the_largest_usage_seen():
    parser = parse(framed_session(), price=per_million)

    assert parser.assistant_messages == 2
    assert [m.message_id for m in parser.messages] == ["msg_A", "msg_B"]
    assert [m.usage for m in parser.messages] == [usage(100, 80, 2000, 10_000),
                                                  usage(150, 30, 0, 12_000)]
    assert parser.tokens == usage(250, 110, 2000, 22_000)
    assert parser.total_cost == pytest.approx(per_million(usage(250, 110, 2000, 22_000)))
    assert parser.cost_complete and parser.tokens_complete


def test_each_frame_adds_only_what_its_message_grew_by():
    parser = CodonLogParser(price=per_million)
    deltas = [parser.feed(line) for line in framed_session()]
    assistant = [d for d in deltas if d.kind == "assistant"]

    assert [d.new_message for d in assistant] == [True, False, False, True, False]
    assert [d.usage_delta for d in assistant] == [
        usage(100, 5, 2000, 10_000), usage(0, 35), usage(0, 40),
        usage(150, 10, 0, 12_000), usage(0, 20)]


def test_a_frame_that_brings_the_first_usage_of_its_message_fills_the_gap():
    lines = [init_record("s1"),
             assistant_record([text_block("a")], message_id="m1"),
             assistant_record([text_block("b")], message_id="m1", usage=usage(10, 5))]
    parser = parse(lines, price=per_million)

    assert parser.messages_without_usage == 0
    assert parser.tokens_complete and parser.cost_complete
    assert parser.tokens == usage(10, 5)


def test_the_result_stays_authoritative_over_the_frames():
    lines = [*framed_session(),
             result_record(session_id="s1", text="Done.", usage=usage(300, 120),
                           total_cost_usd=0.5)]
    parser = parse(lines, price=per_million)

    assert parser.tokens == usage(300, 120)
    assert parser.total_cost == 0.5
    assert parser.success


def test_a_timeout_then_its_disguised_result_is_a_failure_with_the_results_cost():
    parser = parse(timed_out_session(), price=per_million)

    assert parser.synthetic_timeout and not parser.success
    assert parser.total_cost == 0.0907
    assert parser.tokens == usage(250, 110, 2000, 22_000)
    assert parser.assistant_messages == 3  # msg_A, msg_B and the synthetic message


def test_an_error_result_after_a_success_keeps_the_success_and_its_cost():
    parser = parse(success_then_sdk_error(), price=per_million)

    assert parser.success
    assert parser.error_result_text is None
    assert parser.total_cost == 0.05
    assert parser.error_texts == ["only prompt commands are supported in streaming mode"]


# ----- the live runner -----


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    project.env["HANKWEAVE_PLUGIN_MODULES"] = (
        "tests.scripted_log_agent,hankweave.testing.memory_checkpoints")
    return project


def run_lines(project: Project, monkeypatch: pytest.MonkeyPatch,
              lines: dict[str, list[dict[str, Any]]], **codon_fields: Any) -> Any:
    script = project.root / "log-script.json"
    script.write_text(json.dumps(lines))
    monkeypatch.setenv("HANKWEAVE_TEST_LOG_SCRIPT", str(script))
    project.write_hank([codon(codon_id, model="sonnet", **codon_fields) for codon_id in lines])
    return project.run()


def test_a_live_run_counts_every_assistant_line_and_each_message_once_and_prices_its_usage(
        project, monkeypatch):
    lines = [*framed_session(),
             result_record(session_id="s1", text="Done.", usage=usage(250, 110, 2000, 22_000))]

    outcome = run_lines(project, monkeypatch, {"a": lines})

    record = outcome.record("a")
    assert record.status == "completed"
    # The original's count: every assistant line (five frames); turns: two messages.
    assert (record.assistant_message_count, record.assistant_turn_count) == (5, 2)
    assert record.final_tokens == usage(250, 110, 2000, 22_000)
    from hankweave.registry import get_registry

    price = get_registry().resolve_model("sonnet").cost
    assert price is not None
    expected = (250 * price.input + 110 * price.output + 2000 * price.cache_write
                + 22_000 * price.cache_read) / 1_000_000
    assert record.final_cost == pytest.approx(expected)


def test_a_live_run_counts_frames_without_a_result_once_too(project, monkeypatch):
    lines = framed_session()  # cut off: no result

    outcome = run_lines(project, monkeypatch, {"a": lines})

    record = outcome.record("a")
    assert record.status == "failed"
    assert (record.assistant_message_count, record.assistant_turn_count) == (5, 2)
    assert record.partial_tokens == usage(250, 110, 2000, 22_000)


def test_a_timed_out_session_waits_for_its_result_and_fails_as_a_retriable_timeout(
        project, monkeypatch):
    lines = timed_out_session()
    lines.insert(-1, {"sleep": 0.3})  # the CLI writes the result a little later

    outcome = run_lines(project, monkeypatch, {"a": lines})

    record = outcome.record("a")
    assert record.status == "failed"
    assert record.failure_reason.type == "timeout" and record.failure_reason.retriable
    assert record.partial_cost == 0.0907
    assert record.partial_tokens == usage(250, 110, 2000, 22_000)
    assert (record.assistant_message_count, record.assistant_turn_count) == (6, 3)


def test_a_timeout_whose_result_never_comes_still_ends_the_codon(project, monkeypatch):
    lines = [*timed_out_session()[:-1], {"sleep": 30}]

    outcome = run_lines(project, monkeypatch, {"a": lines})

    record = outcome.record("a")
    assert record.status == "failed"
    assert record.failure_reason.type == "timeout"
    assert record.partial_tokens == usage(250, 110, 2000, 22_000)  # what the frames said


def test_an_sdk_error_after_the_success_result_leaves_the_codon_completed(project,
                                                                       monkeypatch):
    outcome = run_lines(project, monkeypatch, {"a": success_then_sdk_error()},
                        onFailure="retry")

    assert [r.status for r in outcome.records("a")] == ["completed"]  # never retried
    assert outcome.record("a").final_cost == 0.05
    warnings = [e for e in outcome.of_type("error") if "after its result" in e["message"]]
    assert len(warnings) == 1


def test_a_success_result_with_a_cost_and_no_usage_settles_the_cost_only():
    # The original's own fixtures write results like this one.
    lines = [*framed_session(), result_record(session_id="s1", text="Done.",
                                              total_cost_usd=0.0001)]
    parser = parse(lines, price=per_million)

    assert parser.total_cost == 0.0001 and parser.cost_complete
    assert parser.tokens == usage(250, 110, 2000, 22_000)  # from the messages


def test_a_live_run_takes_the_cost_of_a_result_without_usage(project, monkeypatch):
    lines = [*framed_session(), result_record(session_id="s1", text="Done.",
                                              total_cost_usd=0.0001)]

    outcome = run_lines(project, monkeypatch, {"a": lines})

    record = outcome.record("a")
    assert record.status == "completed"
    assert record.final_cost == 0.0001
    assert record.final_tokens == usage(250, 110, 2000, 22_000)
