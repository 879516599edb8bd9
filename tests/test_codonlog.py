"""Codon logs: the record models, the kernel parser, the writer and tolerant file reading."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hankweave.codonlog import (
    AssistantRecord,
    CodonLogParser,
    CodonLogWriter,
    CompactBoundaryRecord,
    HookResponseRecord,
    InitRecord,
    LogReadReport,
    ResultRecord,
    StatusRecord,
    SystemRecord,
    ToolResultBlock,
    UnknownRecord,
    UserRecord,
    catalogue_price,
    final_cost_of,
    parse_record,
    read_log,
    summarize_log,
    usage_from,
)
from hankweave.harness import CodonRequest
from hankweave.models import ModelCost, ModelEntry
from hankweave.state.types import TokenUsage
from hankweave.testing import attempt_context, collect
from hankweave.testing.fake_harness import FAKE_MODEL, FakeHarness, use_script

TS = "2026-02-05T10:00:00.123Z"
SESSION = "8c1f6a2e-0d7b-4c1e-9a55-3b0e5f1d2c44"


# ----- real-looking records (Claude Agent SDK shape, with fields we do not model) -----


def init(session: str = SESSION) -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "cwd": "/exec/agentRoot", "session_id": session,
            "tools": ["Read", "Write", "Bash"], "mcp_servers": [], "model": "claude-sonnet-4-5",
            "permissionMode": "bypassPermissions", "apiKeySource": "ANTHROPIC_API_KEY",
            "slash_commands": ["compact"], "output_style": "default",
            "uuid": "0b6f0e0a-1111-4c1e-9a55-3b0e5f1d2c44", "timestamp": TS}


def usage(inp: int = 10, out: int = 200, created: int = 0, read: int = 0) -> dict[str, Any]:
    return {"input_tokens": inp, "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read, "output_tokens": out, "service_tier": "standard",
            "cache_creation": {"ephemeral_5m_input_tokens": created,
                               "ephemeral_1h_input_tokens": 0}}


def assistant(content: Any = None, *, use: dict[str, Any] | None = None,
              model: str = "claude-sonnet-4-5", number: int = 1) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": f"msg_01Abc{number}", "type": "message", "role": "assistant", "model": model,
        "content": content if content is not None else [{"type": "text", "text": "Done."}],
        "stop_reason": "end_turn", "stop_sequence": None}
    if use is not None:
        message["usage"] = use
    return {"type": "assistant", "message": message, "parent_tool_use_id": None,
            "session_id": SESSION, "uuid": f"a-{number}", "timestamp": TS}


def rich_assistant() -> dict[str, Any]:
    return assistant([
        {"type": "thinking", "thinking": "Plan the file.", "signature": "EqQBCkYIBxgCKkD"},
        {"type": "text", "text": "Writing a.md now.", "citations": None},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "Write",
         "input": {"file_path": "a.md", "content": "# A\n"}},
    ], use=usage(10, 200, 5, 1000))


def tool_result(content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
         "content": content, **extra}]},
        "parent_tool_use_id": None, "session_id": SESSION, "uuid": "u-1",
        "tool_use_result": {"type": "create", "filePath": "a.md"}, "timestamp": TS}


def result(subtype: str = "success", *, is_error: bool = False, text: str = "All done.",
           cost: float | None = 0.0123, use: dict[str, Any] | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": "result", "subtype": subtype, "is_error": is_error, "duration_ms": 1234,
        "duration_api_ms": 1000, "num_turns": 3, "result": text, "session_id": SESSION,
        "usage": use if use is not None else usage(30, 600, 5, 3000),
        "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 30, "outputTokens": 600,
                                             "costUSD": 0.0123}},
        "permission_denials": [], "uuid": "r-1", "timestamp": TS}
    if cost is not None:
        record["total_cost_usd"] = cost
    return record


def per_million(usage: TokenUsage) -> float:
    """A price of $1 per million tokens of every kind, so costs are easy to read."""
    return (usage.input_tokens + usage.output_tokens + usage.cache_creation_tokens
            + usage.cache_read_tokens) / 1_000_000


def fed(*records: dict[str, Any], price: Any = None) -> CodonLogParser:
    parser = CodonLogParser(price=price)
    for record in records:
        parser.feed(record)
    return parser


# ----- models -----


@pytest.mark.parametrize(("record", "model"), [
    (init(), InitRecord),
    ({"type": "system", "subtype": "compact_boundary", "session_id": SESSION,
      "compact_metadata": {"trigger": "auto", "pre_tokens": 187000}, "uuid": "c", "timestamp": TS},
     CompactBoundaryRecord),
    ({"type": "system", "subtype": "hook_response", "session_id": SESSION, "hook_name": "lint",
      "hook_event": "PostToolUse", "stdout": "ok", "stderr": "", "exit_code": 0, "timestamp": TS},
     HookResponseRecord),
    ({"type": "system", "subtype": "status", "status": "compacting", "session_id": SESSION},
     StatusRecord),
    ({"type": "system", "subtype": "api_retry", "attempt": 2, "session_id": SESSION},
     SystemRecord),
    (rich_assistant(), AssistantRecord),
    (assistant("A plain string reply.", use=usage()), AssistantRecord),
    (tool_result("File written: a.md"), UserRecord),
    (tool_result([{"type": "text", "text": "line 1"}, {"type": "image", "source": {}}]),
     UserRecord),
    (tool_result({"is_error": True, "error": "no such file"}), UserRecord),
    (result(), ResultRecord),
    (result("error_during_execution", is_error=True, text=""), ResultRecord),
    (result("success", is_error=True, text="API Error: 529 overloaded"), ResultRecord),
], ids=["init", "compact", "hook", "status", "other-system", "assistant", "string-content",
        "tool-result-text", "tool-result-list", "tool-result-object", "success", "error",
        "disguised-error"])
def test_every_record_type_round_trips_to_the_same_json(record: dict[str, Any],
                                                        model: type) -> None:
    parsed = parse_record(record)

    assert type(parsed) is model
    assert json.dumps(parsed.to_dict()) == json.dumps(record)


def test_fields_the_models_do_not_declare_are_kept_and_reachable() -> None:
    parsed = parse_record(rich_assistant())

    assert isinstance(parsed, AssistantRecord)
    assert parsed.model_extra == {"uuid": "a-1"}
    assert parsed.message.usage is not None
    assert parsed.message.usage.model_extra == {
        "service_tier": "standard",
        "cache_creation": {"ephemeral_5m_input_tokens": 5, "ephemeral_1h_input_tokens": 0}}


def test_init_fields_are_typed_under_their_python_names() -> None:
    parsed = parse_record(init())

    assert isinstance(parsed, InitRecord)
    assert (parsed.session_id, parsed.permission_mode, parsed.api_key_source) == (
        SESSION, "bypassPermissions", "ANTHROPIC_API_KEY")


def test_assistant_blocks_are_typed_and_a_string_is_one_text_block() -> None:
    rich = parse_record(rich_assistant())
    plain = parse_record(assistant("Just text."))

    assert isinstance(rich, AssistantRecord) and isinstance(plain, AssistantRecord)
    assert [block.type for block in rich.message.blocks] == ["thinking", "text", "tool_use"]
    assert plain.message.texts == ["Just text."]


@pytest.mark.parametrize(("content", "text", "failed"), [
    ("File written: a.md", "File written: a.md", False),
    ([{"type": "text", "text": "one"}, {"type": "image", "source": {}},
      {"type": "text", "text": "two"}], "one\ntwo", False),
    ({"is_error": True, "error": "no such file"},
     json.dumps({"is_error": True, "error": "no such file"}, indent=2), True),
], ids=["string", "list", "object"])
def test_tool_result_text_in_its_three_content_shapes(content: Any, text: str,
                                                      failed: bool) -> None:
    parsed = parse_record(tool_result(content))

    assert isinstance(parsed, UserRecord)
    [block] = parsed.message.tool_results
    assert isinstance(block, ToolResultBlock)
    assert (block.text, block.failed) == (text, failed)


def test_an_unknown_type_becomes_an_unknown_record_not_an_error() -> None:
    record = {"type": "stream_event", "event": {"type": "content_block_delta"}}

    parsed = parse_record(record)

    assert isinstance(parsed, UnknownRecord)
    assert not parsed.invalid
    assert parsed.to_dict() == record
    assert "stream_event" in parsed.reason


def test_a_known_type_with_the_wrong_shape_is_an_invalid_unknown_record() -> None:
    parsed = parse_record({"type": "assistant", "message": "not an object"})

    assert isinstance(parsed, UnknownRecord)
    assert parsed.invalid
    assert parsed.reason.startswith("invalid 'assistant' record: message:")


def test_an_init_without_a_session_id_is_invalid() -> None:
    record = init()
    del record["session_id"]

    assert isinstance(parse_record(record), UnknownRecord)


# ----- usage and cost helpers -----


def test_usage_includes_cache_tokens() -> None:
    assert usage_from(usage(10, 200, 5, 1000)) == TokenUsage(
        input_tokens=10, output_tokens=200, cache_creation_tokens=5, cache_read_tokens=1000)


def test_usage_without_any_count_is_unknown_not_zero() -> None:
    assert usage_from({}) is None
    assert usage_from({"service_tier": "standard"}) is None
    assert usage_from(None) is None
    assert usage_from({"output_tokens": 7}) == TokenUsage(output_tokens=7)


def test_final_cost_of_reads_total_cost_usd() -> None:
    assert final_cost_of(result(cost=0.5)) == 0.5
    assert final_cost_of(result(cost=None)) is None


def test_catalogue_price_is_per_million_tokens_with_cache_prices() -> None:
    model = ModelEntry(provider_id="p", model_id="m", name="M", context_limit=1000,
                       output_limit=100, cost=ModelCost(input=3, output=15, cache_read=0.3,
                                                        cache_write=3.75))
    unpriced = model.model_copy(update={"cost": None})
    used = TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000,
                      cache_read_tokens=1_000_000, cache_creation_tokens=1_000_000)

    assert catalogue_price(model)(used) == pytest.approx(3 + 15 + 0.3 + 3.75)
    assert catalogue_price(unpriced)(used) is None


# ----- the parser -----


def test_the_session_id_comes_from_the_first_init() -> None:
    parser = fed(init("first"), init("second"))

    assert parser.session_id == "first"


def test_assistant_messages_are_counted_with_their_usage() -> None:
    parser = fed(init(), rich_assistant(), assistant(use=usage(1, 2), number=2))

    assert parser.assistant_messages == 2
    assert parser.usage_total == TokenUsage(input_tokens=11, output_tokens=202,
                                            cache_creation_tokens=5, cache_read_tokens=1000)
    assert parser.usage_complete
    assert [m.message_id for m in parser.messages] == ["msg_01Abc1", "msg_01Abc2"]


def test_live_feed_says_what_each_record_means() -> None:
    parser = CodonLogParser(price=per_million)

    kinds = [parser.feed(r).kind for r in (init(), rich_assistant(), tool_result("ok"),
                                           {"type": "system", "subtype": "status"}, result(),
                                           {"type": "nope"})]
    message = parser.feed(assistant(use=usage(1, 2)))

    assert kinds == ["init", "assistant", "user", "system", "result", "unknown"]
    assert message.usage == TokenUsage(input_tokens=1, output_tokens=2)
    assert message.cost == pytest.approx(3e-6)
    assert message.blocks == ({"type": "text", "text": "Done."},)


def test_missing_usage_is_reported_as_unknown_not_as_zero() -> None:
    parser = fed(init(), assistant(use=usage(100, 100)), assistant(number=2),
                 price=per_million)

    assert parser.messages_without_usage == 1
    assert not parser.usage_complete
    assert [m.usage is None for m in parser.messages] == [False, True]
    assert [m.cost for m in parser.messages] == [pytest.approx(200e-6), None]
    assert parser.total_cost == pytest.approx(200e-6)  # a lower bound ...
    assert not parser.cost_complete  # ... and said to be one
    assert not parser.tokens_complete


def test_with_no_usage_at_all_the_cost_is_unknown() -> None:
    parser = fed(init(), assistant(), assistant(number=2), price=per_million)

    assert parser.total_cost is None
    assert not parser.cost_complete


def test_without_a_price_the_cost_is_unknown_until_a_result_states_it() -> None:
    parser = fed(init(), assistant(use=usage(100, 100)))
    assert parser.total_cost is None

    parser.feed(result(cost=0.25))

    assert parser.total_cost == 0.25
    assert parser.cost_complete


def test_per_message_and_total_cost_with_a_price_function() -> None:
    parser = fed(init(), assistant(use=usage(100, 200)),
                 assistant(use=usage(10, 20, created=30, read=40), number=2), price=per_million)

    assert [m.cost for m in parser.messages] == [pytest.approx(300e-6), pytest.approx(100e-6)]
    assert parser.total_cost == pytest.approx(400e-6)
    assert parser.cost_complete


def test_a_success_results_total_cost_is_authoritative() -> None:
    parser = fed(init(), assistant(use=usage(100, 200)),
                 result(cost=0.5, use=usage(1000, 2000)), price=per_million)

    assert parser.total_cost == 0.5
    assert parser.tokens == TokenUsage(input_tokens=1000, output_tokens=2000)
    assert parser.usage_total == TokenUsage(input_tokens=100, output_tokens=200)


def test_a_success_result_without_total_cost_is_priced_from_its_usage() -> None:
    parser = fed(init(), assistant(use=usage(100, 200)),
                 result(cost=None, use=usage(1000, 2000)), price=per_million)

    assert parser.total_cost == pytest.approx(3000e-6)


def test_a_success_result_settles_messages_that_lacked_usage() -> None:
    parser = fed(init(), assistant(), result(cost=0.5), price=per_million)

    assert parser.total_cost == 0.5
    assert parser.cost_complete and parser.tokens_complete
    assert not parser.usage_complete  # the message itself still had none


def test_an_error_result_never_sets_a_final_cost() -> None:
    parser = fed(init(), assistant(use=usage(100, 200)),
                 result("error", is_error=True, text="API Error: 500", cost=9.99,
                        use=usage(5000, 5000)), price=per_million)

    assert parser.total_cost == pytest.approx(300e-6)
    assert parser.tokens == TokenUsage(input_tokens=100, output_tokens=200)
    assert not parser.success
    assert parser.error_result_text == "API Error: 500"
    assert parser.error_texts == ["API Error: 500"]


def test_a_disguised_error_sets_the_final_cost_but_is_no_success() -> None:
    parser = fed(init(), result("success", is_error=True, text="API Error: 529 overloaded",
                                cost=0.07))

    assert parser.total_cost == 0.07
    assert parser.result_received and not parser.success
    assert parser.error_result_text == "API Error: 529 overloaded"


def test_an_error_result_without_text_still_has_an_error_text() -> None:
    bare = fed(result("error_max_turns", is_error=True, text=""))
    listed = fed({**result("error_during_execution", is_error=True, text=""),
                  "errors": ["tool crashed", "gave up"]})

    assert bare.error_result_text == "error result (error_max_turns) without a message"
    assert listed.error_result_text == "tool crashed; gave up"


def test_messages_after_a_result_add_to_its_total() -> None:
    parser = fed(init(), assistant(use=usage(1, 1)), result(cost=0.5, use=usage(1, 1)),
                 assistant(use=usage(100, 200), number=2), price=per_million)

    assert parser.total_cost == pytest.approx(0.5 + 300e-6)
    assert parser.tokens == TokenUsage(input_tokens=101, output_tokens=201)


def test_begin_extension_forgets_the_previous_result_but_not_the_counts() -> None:
    parser = fed(init(), assistant(use=usage()), result())

    parser.begin_extension()

    assert not parser.result_received
    assert (parser.assistant_messages, parser.results, parser.session_id) == (1, 1, SESSION)


def test_a_log_without_a_result_is_recognisable() -> None:
    parser = fed(init(), rich_assistant())

    assert not parser.result_received
    assert not parser.success
    assert parser.error_result_text is None


def synthetic(text: str) -> dict[str, Any]:
    return assistant([{"type": "text", "text": text}], model="<synthetic>",
                     use=usage(0, 0))


OUTPUT_MAX = ("API Error: Claude's response exceeded the 32000 output token maximum. To"
              " configure this behavior, set the CLAUDE_CODE_MAX_OUTPUT_TOKENS environment"
              " variable.")


@pytest.mark.parametrize(("record", "context", "output", "signal"), [
    (synthetic("API Error: terminated"), True, False, "api-terminated"),
    (synthetic(OUTPUT_MAX), True, True, "output-token-maximum"),
    (assistant(OUTPUT_MAX), True, True, "output-token-maximum"),
    (result("error", is_error=True, text=OUTPUT_MAX), True, True, "output-token-maximum"),
    (result("error", is_error=True, text="prompt is too long: 208000 tokens > 200000 maximum"),
     True, False, "input-overflow"),
    (result("success", is_error=True,
            text='400 {"error":{"code":"context_length_exceeded"}}'),
     True, False, "input-overflow"),
    ({"type": "system", "subtype": "compact_boundary", "session_id": SESSION,
      "compact_metadata": {"trigger": "auto", "pre_tokens": 190000}},
     True, False, "auto-compaction"),
], ids=["synthetic-terminated", "synthetic-output-max", "api-error-output-max",
        "error-result-output-max", "prompt-too-long", "context-length-exceeded",
        "auto-compaction"])
def test_context_exceeded_patterns(record: dict[str, Any], context: bool, output: bool,
                                   signal: str) -> None:
    parser = CodonLogParser()

    parsed = parser.feed(record)

    assert (parser.context_exceeded, parser.output_tokens_exceeded) == (context, output)
    assert parser.context_signals == [signal]
    assert (parsed.context_exceeded, parsed.output_tokens_exceeded) == (context, output)


@pytest.mark.parametrize("record", [
    assistant("API Error: terminated"),  # not synthetic: an agent quoting the text
    synthetic("API Error: terminated, retrying"),
    assistant("The log said the response exceeded the 32000 output token maximum."),
    result(text="Summarised why prompts fail with 'prompt is too long'."),  # a success
    {"type": "system", "subtype": "compact_boundary", "session_id": SESSION,
     "compact_metadata": {"trigger": "manual"}},
], ids=["agent-terminated", "synthetic-other-text", "agent-text", "success-result",
        "manual-compaction"])
def test_lookalikes_are_not_context_exceeded(record: dict[str, Any]) -> None:
    parser = fed(record)

    assert not parser.context_exceeded
    assert not parser.output_tokens_exceeded


def test_the_synthetic_timeout_is_detected() -> None:
    parser = CodonLogParser()

    parsed = parser.feed(synthetic("API Error: Request timed out."))

    assert parsed.synthetic_timeout and parser.synthetic_timeout
    assert not parser.context_exceeded


def test_unknown_records_are_counted_not_fatal() -> None:
    parser = fed(init(), {"type": "tool_progress", "elapsed": 3}, {"type": "user"}, result())

    assert parser.unknown_records == 2
    assert [u.invalid for u in parser.unknown] == [False, True]
    assert parser.success


# ----- the writer and reading files -----


def write_lines(path: Path, *lines: str | bytes) -> Path:
    path.write_bytes(b"".join(line.encode() if isinstance(line, str) else line
                              for line in lines))
    return path


def test_the_writer_stamps_every_line_with_a_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r1" / "write-claude.log"
    with CodonLogWriter(path) as writer:
        stamped = writer.write({"type": "system", "subtype": "init", "session_id": "s"})
        kept = writer.write(result())

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [stamped, kept]
    assert stamped["timestamp"].endswith("Z")
    assert kept["timestamp"] == TS


def test_the_writer_accepts_models(tmp_path: Path) -> None:
    path = tmp_path / "a-claude.log"
    with CodonLogWriter(path) as writer:
        writer.write(parse_record(rich_assistant()))

    assert json.loads(path.read_text()) == rich_assistant()


def test_a_record_written_and_read_back_is_the_same_record(tmp_path: Path) -> None:
    records = [init(), rich_assistant(), tool_result("ok"), result()]
    path = tmp_path / "a-claude.log"
    with CodonLogWriter(path) as writer:
        for record in records:
            writer.write(record)

    assert [r.to_dict() for r in read_log(path)] == records


def test_appending_removes_a_torn_last_line_first(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()) + "\n", '{"type":"assi')

    with CodonLogWriter(path, append=True) as writer:
        writer.write(result())
    report = LogReadReport()
    records = list(read_log(path, report))

    assert [type(r) for r in records] == [InitRecord, ResultRecord]
    assert report.clean


def test_appending_terminates_a_whole_last_line_without_its_newline(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()))

    with CodonLogWriter(path, append=True) as writer:
        writer.write(result())

    assert [type(r) for r in read_log(path)] == [InitRecord, ResultRecord]


def test_a_new_writer_starts_an_empty_log(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()) + "\n")

    with CodonLogWriter(path) as writer:
        writer.write(result())

    assert [type(r) for r in read_log(path)] == [ResultRecord]


def test_reading_ignores_and_reports_a_torn_last_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()) + "\n",
                       '{"type":"assistant","mess')
    report = LogReadReport()

    records = list(read_log(path, report))

    assert [type(r) for r in records] == [InitRecord]
    assert report.torn_tail and report.torn_tail_bytes == len('{"type":"assistant","mess')
    assert not report.clean


def test_reading_accepts_a_whole_last_line_without_its_newline(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()) + "\n",
                       json.dumps(result()))
    report = LogReadReport()

    records = list(read_log(path, report))

    assert [type(r) for r in records] == [InitRecord, ResultRecord]
    assert report.clean


def test_reading_reports_lines_that_are_not_json_objects_by_number(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()) + "\n", "not json\n", "\n",
                       "[1, 2]\n", b"\xff\xfe{}\n", json.dumps(result()) + "\n")
    report = LogReadReport()

    records = list(read_log(path, report))

    assert [type(r) for r in records] == [InitRecord, ResultRecord]
    assert report.invalid_lines == [2, 4, 5]
    assert [p.kind for p in report.problems] == ["not-json", "not-an-object", "not-json"]
    assert report.warnings()[0].startswith(f"{path}: line 2: not JSON")


def test_reading_keeps_unknown_types_as_unknown_records(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()) + "\n",
                       json.dumps({"type": "stream_event", "event": {}}) + "\n",
                       json.dumps({"type": "result"}) + "\n", json.dumps(result()) + "\n")
    report = LogReadReport()

    records = list(read_log(path, report))

    assert [type(r) for r in records] == [InitRecord, UnknownRecord, UnknownRecord, ResultRecord]
    assert report.unknown_lines == [2, 3]
    assert report.unknown_records == 2
    assert [p.kind for p in report.problems] == ["unknown-type", "invalid-record"]
    assert report.records == 4


def test_summarize_log_gives_the_facts_the_live_parser_derived(tmp_path: Path) -> None:
    records = [init(), rich_assistant(), tool_result("ok"), assistant(number=2),
               {"type": "rate_limit_event"}, result(cost=None)]
    path = tmp_path / "a-claude.log"
    live = CodonLogParser(price=per_million)
    with CodonLogWriter(path) as writer:
        for record in records:
            live.feed(writer.write(record))

    after, report = summarize_log(path, price=per_million)

    assert after.summary() == live.summary()
    assert after.summary().cost == pytest.approx(3635e-6)  # priced from the result's usage
    assert report.unknown_lines == [5]


def test_a_truncated_log_summarizes_without_a_result(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a-claude.log", json.dumps(init()) + "\n",
                       json.dumps(rich_assistant()) + "\n", '{"type":"res')

    parser, report = summarize_log(path)

    assert not parser.result_received
    assert parser.assistant_messages == 1
    assert report.torn_tail


# ----- the fake harness's output -----


@pytest.fixture
def fake_script() -> Iterator[Any]:
    yield use_script
    use_script(None)


def fake_records(tmp_path: Path, codon_id: str = "write") -> list[dict[str, Any]]:
    request = CodonRequest(prompt="go", system_prompt=None, model=FAKE_MODEL, work_dir=tmp_path,
                           codon_id=codon_id, run_id="run-1")

    return asyncio.run(collect(FakeHarness(), request, attempt_context(tmp_path, request)))


def test_parser_over_fake_harness_output(tmp_path: Path, fake_script: Any) -> None:
    fake_script({"codons": {"write": {"sessionId": "fake-s", "messages": 3, "cost": 0.02,
                                      "writeFiles": {"a.md": "A", "b.md": "B"}}}})
    parser = CodonLogParser(price=catalogue_price(FAKE_MODEL))

    kinds = [parser.feed(record).kind for record in fake_records(tmp_path)]

    assert kinds.count("user") == 2 and kinds[0] == "init" and kinds[-1] == "result"
    assert parser.session_id == "fake-s"
    assert parser.assistant_messages == 5
    assert parser.usage_total == TokenUsage(input_tokens=50, output_tokens=100)
    assert parser.usage_complete
    assert parser.tokens == TokenUsage(input_tokens=50, output_tokens=100)
    assert parser.total_cost == 0.02 and parser.cost_complete
    assert parser.success and not parser.context_exceeded
    assert parser.unknown_records == 0


def test_parser_over_a_fake_error_result(tmp_path: Path, fake_script: Any) -> None:
    fake_script({"codons": {"write": {"messages": 2, "result": "error", "cost": 1.0,
                                      "errorText": "API Error: 529 overloaded"}}})
    parser = fed(*fake_records(tmp_path), price=catalogue_price(FAKE_MODEL))

    assert parser.result_received and not parser.success
    assert parser.error_result_text == "API Error: 529 overloaded"
    # Two messages of 10 input and 20 output tokens at $1 / $5 per million; the result's
    # cost is ignored.
    assert parser.total_cost == pytest.approx(2 * (10 * 1 + 20 * 5) / 1_000_000)


def test_parser_over_fake_output_without_usage_or_result(tmp_path: Path,
                                                         fake_script: Any) -> None:
    fake_script({"codons": {"write": {"messages": 2, "usage": None, "result": "none",
                                      "contextExceeded": True}}})
    parser = fed(*fake_records(tmp_path), price=catalogue_price(FAKE_MODEL))

    assert parser.assistant_messages == 2
    assert parser.messages_without_usage == 2
    assert parser.total_cost is None
    assert not parser.result_received
    assert parser.context_signals == ["auto-compaction"]
