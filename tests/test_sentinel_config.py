"""Sentinel configs: the strict models, loading a codon's sentinels, and trigger conditions."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from hankweave.config.hank import CodonSentinel
from hankweave.sentinels.conditions import (
    OPERATORS,
    compile_js_regex,
    conditions_hold,
    observable,
    path_in_payload,
    value_at,
)
from hankweave.sentinels.config import (
    DebounceExecution,
    EqualityCondition,
    EventTrigger,
    MaxTokensTrimming,
    SentinelConfig,
    SentinelConfigLoader,
    SentinelConfigValidationError,
    SequenceTrigger,
    load_sentinel_configs,
    parse_sentinel_config,
)

COMPAT_SENTINELS = Path(__file__).parent / "compat" / "sentinels"


def sentinel(**fields: Any) -> dict[str, Any]:
    """A valid minimal sentinel config, with ``fields`` added or replaced."""
    return {
        "id": "watcher",
        "name": "Watcher",
        "trigger": {"type": "event", "on": ["tool.result"]},
        "execution": {"strategy": "immediate"},
        "userPromptText": "What happened?",
        "model": "anthropic/claude-haiku-4-5",
        **fields,
    }


def event_trigger(on: list[str], *conditions: dict[str, Any]) -> dict[str, Any]:
    trigger: dict[str, Any] = {"type": "event", "on": on}
    if conditions:
        trigger["conditions"] = list(conditions)
    return trigger


def cond(path: str, operator: str, value: Any) -> dict[str, Any]:
    return {"path": path, "operator": operator, "value": value}


def problems(data: object) -> list[tuple[str, str]]:
    """The ``(path, message)`` pairs reported for ``data``, which must be invalid."""
    with pytest.raises(SentinelConfigValidationError) as caught:
        parse_sentinel_config(data, "watch.json")
    return [(issue.path, issue.message) for issue in caught.value.errors]


def only_problem(data: object) -> tuple[str, str]:
    found = problems(data)
    assert len(found) == 1, found
    return found[0]


def entry(config: str | dict[str, Any], **settings: Any) -> CodonSentinel:
    raw: dict[str, Any] = {"sentinelConfig": config}
    if settings:
        raw["settings"] = settings
    return CodonSentinel.model_validate(raw, by_alias=True, by_name=False)


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# Valid shapes
# --------------------------------------------------------------------------------------------


def test_a_minimal_config_validates_with_defaults() -> None:
    config = parse_sentinel_config(sentinel(), "watch.json")
    assert isinstance(config.trigger, EventTrigger)
    assert config.warnings == []
    assert config.join_separator == "\n---\n"
    assert config.max_consecutive_failures == 3
    params = config.resolved_llm_params
    assert (params.temperature, params.max_output_tokens, params.max_retries) == (0, 8192, 2)


def test_every_field_at_once_validates() -> None:
    config = parse_sentinel_config(sentinel(
        description="Watches tools.",
        trigger={
            "type": "sequence",
            "interestFilter": {"on": ["assistant.action", "tool.result"]},
            "pattern": [{"type": "assistant.action"}, {"type": "*"}],
            "options": {"consecutive": False},
        },
        execution={"strategy": "debounce", "milliseconds": 300000},
        systemPromptFile=["a.md", "b.md"],
        systemPromptText="Be brief.",
        userPromptFile="user.md",
        conversational={"trimmingStrategy": {"type": "maxTokens", "maxTokens": 100000},
                        "continueOnError": True},
        errorHandling={"maxConsecutiveFailures": 1, "unloadOnFatalError": False},
        llmParams={"temperature": 1.5, "maxOutputTokens": 100, "maxRetries": 0,
                   "providerOptions": {"openai": {"promptCacheKey": "k"}}},
        joinString="\\n\\t\\r\\\\|",
        reportToWebsocket={"lifecycle": False, "errors": True, "outputs": True,
                           "triggers": True},
        output={"format": "jsonl", "file": "out.jsonl", "lastValueFile": "last.json"},
    ), "watch.json")
    assert isinstance(config.trigger, SequenceTrigger) and not config.trigger.consecutive
    assert isinstance(config.execution, DebounceExecution)
    assert config.conversational is not None
    assert isinstance(config.conversational.trimming_strategy, MaxTokensTrimming)
    assert config.join_separator == "\n\t\r\\|"
    assert config.max_consecutive_failures == 1
    assert config.resolved_llm_params.max_retries == 0
    assert config.resolved_llm_params.temperature == 1.5


@pytest.mark.parametrize("execution", [
    {"strategy": "immediate"},
    {"strategy": "debounce", "milliseconds": 1},
    {"strategy": "count", "threshold": 1000},
    {"strategy": "timeWindow", "milliseconds": 3600000},
])
def test_each_execution_strategy_validates_at_its_bounds(execution: dict[str, Any]) -> None:
    config = parse_sentinel_config(sentinel(execution=execution), "watch.json")
    assert config.execution.strategy == execution["strategy"]


def test_structured_output_modes_validate() -> None:
    for structured in (
        {"output": "object", "schemaStr": "z.object({ a: z.string() })"},
        {"output": "array", "schemaFile": "schemas/item.zod"},
        {"output": "enum", "enumValues": ["ok", "bad"], "schemaName": "Verdict"},
    ):
        config = parse_sentinel_config(sentinel(structuredOutput=structured), "watch.json")
        assert config.structured_output is not None


def test_sequence_triggers_are_consecutive_by_default() -> None:
    trigger = {"type": "sequence", "interestFilter": {"on": ["tool.result"]},
               "pattern": [{"type": "tool.result"}]}
    config = parse_sentinel_config(sentinel(trigger=trigger), "watch.json")
    assert isinstance(config.trigger, SequenceTrigger) and config.trigger.consecutive


def test_join_string_escapes_decode_left_to_right() -> None:
    config = parse_sentinel_config(sentinel(joinString="a\\\\nb\\x"), "watch.json")
    # "\\\\n" is an escaped backslash followed by "n", not a newline.
    assert config.join_separator == "a\\nb\\x"


@pytest.mark.parametrize("name", sorted(p.name for p in COMPAT_SENTINELS.glob("*.json")))
def test_compat_sentinel_files_load_cleanly(name: str) -> None:
    result = load_sentinel_configs([entry(name)], COMPAT_SENTINELS)
    assert result.errors == []
    (loaded,) = result.configs
    assert loaded.config.warnings == []
    assert loaded.source_path == COMPAT_SENTINELS / name


def test_compat_fixtures_cover_the_documented_shapes() -> None:
    configs = {
        path.stem: parse_sentinel_config(json.loads(path.read_text()), str(path))
        for path in COMPAT_SENTINELS.glob("*.json")
    }
    assert isinstance(configs["failure-streak"].trigger, SequenceTrigger)
    assert configs["narrator"].conversational is not None
    review = configs["change-review"].structured_output
    assert review is not None and (review.schema_str or "").startswith("z.object(")
    classifier = configs["file-classifier"].structured_output
    assert classifier is not None and classifier.output == "enum"


# --------------------------------------------------------------------------------------------
# Rejections, each at its JSON path
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "path", "message"), [
    ({"id": "Watcher_1"}, "id",
     'ID must contain only lowercase letters, numbers, and hyphens (got "Watcher_1")'),
    ({"id": ""}, "id", "Sentinel id cannot be empty"),
    ({"name": ""}, "name", "Sentinel name cannot be empty"),
    ({"model": ""}, "model", "Model cannot be empty"),
    ({"output": {"format": "json"}}, "output.format",
     "format \"json\" must be one of 'text' or 'jsonl'"),
    ({"description": None}, "description", "null is not allowed; omit the field instead"),
    ({"execution": {"strategy": "debounce", "milliseconds": 300001}},
     "execution.milliseconds", "Input should be less than or equal to 300000 (got 300001)"),
    ({"execution": {"strategy": "count", "threshold": 0}},
     "execution.threshold", "Input should be greater than or equal to 1 (got 0)"),
    ({"execution": {"strategy": "timeWindow", "milliseconds": 3600001}},
     "execution.milliseconds", "Input should be less than or equal to 3600000 (got 3600001)"),
    ({"execution": {"strategy": "debounce", "milliseconds": 1.5}},
     "execution.milliseconds", "Input should be a valid integer (got 1.5)"),
    ({"execution": {"strategy": "sometimes"}}, "execution",
     "\"strategy\" must be one of 'immediate', 'debounce', 'count', 'timeWindow', "
     "not 'sometimes'"),
    ({"errorHandling": {"maxConsecutiveFailures": 0}}, "errorHandling.maxConsecutiveFailures",
     "Input should be greater than or equal to 1 (got 0)"),
    ({"llmParams": {"temperature": 2.5}}, "llmParams.temperature",
     "Input should be less than or equal to 2 (got 2.5)"),
    ({"userPromptFile": "/etc/prompt.md"}, "userPromptFile",
     '"/etc/prompt.md" is an absolute or drive-qualified path; '
     "hank refs must be relative paths inside the hank directory"),
    ({"userPromptFile": ["ok.md", ""]}, "userPromptFile[1]",
     "userPromptFile cannot be an empty string; omit the field instead"),
    ({"systemPromptFile": 3}, "systemPromptFile", "Input should be a path or an array of paths"
     " (got 3)"),
    ({"systemPromptFile": "a\\b.md"}, "systemPromptFile",
     '"a\\b.md" contains a backslash; hank refs use "/" as the only path separator'),
    ({"shape": "round"}, "shape",
     'Unrecognized field "shape". Valid fields are: id, name, description, trigger, execution, '
     "systemPromptFile, systemPromptText, userPromptFile, userPromptText, conversational, "
     "errorHandling, llmParams, model, kind, options, structuredOutput, joinString, reportToWebsocket, "
         "output."),
])
def test_a_broken_field_is_reported_at_its_path(
    fields: dict[str, Any], path: str, message: str
) -> None:
    assert only_problem(sentinel(**fields)) == (path, message)


def test_a_user_prompt_is_required() -> None:
    data = sentinel()
    del data["userPromptText"]
    assert only_problem(data) == ("<root>", (
        "Each sentinel must have at least one of `userPromptFile` or `userPromptText` "
        "defined."))


def test_an_empty_user_prompt_text_counts_as_missing() -> None:
    assert only_problem(sentinel(userPromptText=""))[0] == "<root>"


def test_a_conversational_sentinel_requires_a_system_prompt() -> None:
    data = sentinel(conversational={"trimmingStrategy": {"type": "maxTurns", "maxTurns": 5}})
    assert only_problem(data) == ("conversational", (
        "Conversational sentinels require a system prompt "
        "(systemPromptFile or systemPromptText)."))


def test_trimming_strategies_are_bounded() -> None:
    data = sentinel(systemPromptText="s", conversational={
        "trimmingStrategy": {"type": "maxTurns", "maxTurns": 101}})
    assert only_problem(data) == ("conversational.trimmingStrategy.maxTurns",
                                  "Input should be less than or equal to 100 (got 101)")


@pytest.mark.parametrize(("structured", "expected"), [
    ({"output": "enum"}, [("structuredOutput", 'output "enum" requires enumValues')]),
    ({"output": "enum", "enumValues": ["a"], "schemaStr": "z.string()"},
     [("structuredOutput.schemaStr", 'schemaStr is not allowed with output "enum"')]),
    ({"output": "object"}, [("structuredOutput",
      'output "object" requires exactly one of schemaStr or schemaFile (got neither)')]),
    ({"output": "array", "schemaStr": "z.string()", "schemaFile": "s.zod"},
     [("structuredOutput",
       'output "array" requires exactly one of schemaStr or schemaFile (got both)')]),
    ({"output": "object", "schemaStr": "z.object({})", "enumValues": ["a"]},
     [("structuredOutput.enumValues", 'enumValues is only allowed with output "enum"')]),
    ({"output": "enum", "enumValues": []},
     [("structuredOutput.enumValues", "List should have at least 1 item after validation, "
       "not 0"), ("structuredOutput", 'output "enum" requires enumValues')]),
])
def test_structured_output_rules(
    structured: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert problems(sentinel(structuredOutput=structured)) == expected


def test_join_string_and_output_format_do_not_combine_with_structured_output() -> None:
    data = sentinel(structuredOutput={"output": "enum", "enumValues": ["a"]},
                    joinString="\\n", output={"format": "text"})
    assert problems(data) == [
        ("joinString", "joinString is only valid for text output, not structured output"),
        ("output.format", "output.format cannot be combined with structuredOutput; "
                          "the structured output format is determined by the schema"),
    ]


def test_rules_are_reported_beside_field_errors() -> None:
    data = sentinel(id="Bad Id")
    del data["userPromptText"]
    assert [path for path, _ in problems(data)] == ["id", "<root>"]


def test_unknown_event_types_are_rejected() -> None:
    assert only_problem(sentinel(trigger=event_trigger(["tool.finished"]))) == (
        "trigger.on[0]",
        'Invalid event type "tool.finished" (an event type of the catalogue, or "*")')


def test_a_trigger_must_list_an_event_type() -> None:
    assert only_problem(sentinel(trigger=event_trigger([]))) == (
        "trigger.on", "List should have at least 1 item after validation, not 0")


def test_a_trigger_needs_a_known_type() -> None:
    assert only_problem(sentinel(trigger={"type": "timer", "on": ["*"]})) == (
        "trigger.type", "\"type\" must be one of 'event', 'sequence', not 'timer'")


def test_condition_values_are_typed_by_operator() -> None:
    found = problems(sentinel(trigger=event_trigger(
        ["tool.result"],
        cond("toolName", "in", []),
        cond("toolName", "contains", 3),
        cond("executionTimeMs", "greaterThan", True),
        cond("toolName", "equals", {"a": 1}),
        cond("toolName", "in", ["Bash", False]),
        cond("toolName", "startsWith", "B"),
    )))
    assert found == [
        ("trigger.conditions[0].value", "List should have at least 1 item after validation, "
                                        "not 0"),
        ("trigger.conditions[1].value", "Input should be a valid string (got 3)"),
        ("trigger.conditions[2].value", "Input should be a number (got true)"),
        ("trigger.conditions[3].value", "Input should be a string, number, boolean or null"),
        ("trigger.conditions[4].value[1]", "Input should be a string or a number (got false)"),
        ("trigger.conditions[5]", "\"operator\" must be one of 'equals', 'notEquals', 'in', "
                                  "'notIn', 'contains', 'matches', 'greaterThan', 'lessThan', "
                                  "not 'startsWith'"),
    ]


def test_unknown_keys_in_nested_objects_are_ignored_with_a_warning() -> None:
    config = parse_sentinel_config(sentinel(
        execution={"strategy": "immediate", "delay": 5},
        trigger={"type": "event", "on": ["tool.result"], "priority": 1},
    ), "watch.json")
    assert [(w.path, w.message) for w in config.warnings] == [
        ("trigger.priority", 'unknown key "priority" is ignored (this object accepts: type, '
                             "on, conditions)"),
        ("execution.delay", 'unknown key "delay" is ignored (this object accepts: strategy)'),
    ]


def test_events_sentinels_never_see_are_warned_about() -> None:
    config = parse_sentinel_config(
        sentinel(trigger=event_trigger(["sentinel.output", "tool.result", "pong"])), "w.json")
    assert [w.path for w in config.warnings] == ["trigger.on[0]", "trigger.on[2]"]


def test_the_error_message_names_the_file_and_each_path() -> None:
    with pytest.raises(SentinelConfigValidationError) as caught:
        parse_sentinel_config(sentinel(id="X", output={"format": "xml"}), "/hank/s/watch.json")
    assert str(caught.value).splitlines() == [
        "Invalid sentinel config /hank/s/watch.json: 2 problems",
        '  - id: ID must contain only lowercase letters, numbers, and hyphens (got "X")',
        "  - output.format: format \"xml\" must be one of 'text' or 'jsonl'",
    ]


# --------------------------------------------------------------------------------------------
# Condition paths against the event catalogue
# --------------------------------------------------------------------------------------------


def test_a_nested_condition_path_validates() -> None:
    trigger = event_trigger(["codon.completed"], cond("failureReason.type", "equals", "timeout"),
                            cond("exitStatus.code", "greaterThan", 0))
    parse_sentinel_config(sentinel(trigger=trigger), "watch.json")


def test_a_misspelt_condition_path_is_rejected_with_the_fields_it_could_be() -> None:
    trigger = event_trigger(["rig.output"], cond("strem", "equals", "stderr"))
    assert only_problem(sentinel(trigger=trigger)) == (
        "trigger.conditions[0].path",
        'Invalid path "strem" for event type "rig.output" '
        "(its data has: codonId, commandIndex, line, stream)")


def test_a_path_needs_only_one_listed_event_type_to_have_it() -> None:
    ok = event_trigger(["rig.output", "tool.result"], cond("toolName", "equals", "Bash"))
    parse_sentinel_config(sentinel(trigger=ok), "watch.json")
    bad = event_trigger(["rig.output", "tool.result"], cond("nope", "equals", 1))
    assert only_problem(sentinel(trigger=bad)) == (
        "trigger.conditions[0].path",
        'Path "nope" is not valid for any of the specified event types (rig.output, tool.result)')


def test_a_wildcard_skips_the_path_check() -> None:
    trigger = event_trigger(["*", "tool.result"], cond("anything.at.all", "equals", 1))
    parse_sentinel_config(sentinel(trigger=trigger), "watch.json")


def test_pattern_step_paths_are_checked_against_their_own_type() -> None:
    trigger = {
        "type": "sequence",
        "interestFilter": {"on": ["*"]},
        "pattern": [
            {"type": "*", "conditions": [cond("whatever", "equals", 1)]},
            {"type": "tool.result", "conditions": [cond("isError", "equals", True),
                                                   cond("stream", "equals", "stderr")]},
        ],
    }
    assert only_problem(sentinel(trigger=trigger)) == (
        "trigger.pattern[1].conditions[1].path",
        'Invalid path "stream" for event type "tool.result" (its data has: codonId, '
        "executionTimeMs, isError, originalLength, result, toolName, toolUseId, truncated)")


def test_paths_descend_through_unions_and_optionals() -> None:
    # source: ToolUseSource | CodonStartSource | None; only the tool_use arm has toolUseId.
    assert path_in_payload("file.updated", "source.toolUseId")
    assert path_in_payload("file.updated", "source.kind")
    assert not path_in_payload("file.updated", "source.nothing")
    # exitStatus: success | error{code} | killed{signal}
    assert path_in_payload("codon.completed", "exitStatus.signal")
    assert path_in_payload("state.snapshot", "currentCodon.failureReason.retriable")


def test_paths_stop_at_leaves_lists_and_untyped_fields() -> None:
    assert not path_in_payload("rig.output", "line.length")
    assert not path_in_payload("assistant.action", "toolInput.command")
    assert not path_in_payload("filetree.updated", "tree.name")
    assert not path_in_payload("no.such.event", "codonId")


def test_paths_use_json_names() -> None:
    assert path_in_payload("file.updated", "bytes")
    assert not path_in_payload("file.updated", "byte_count")
    assert not path_in_payload("tool.result", "tool_name")


def test_content_on_file_updated_is_a_virtual_field() -> None:
    assert path_in_payload("file.updated", "content")
    assert not path_in_payload("file.updated", "content.length")
    assert not path_in_payload("rig.output", "content")


def test_only_server_state_and_agentic_backbone_events_are_observable() -> None:
    assert observable("codon.completed") and observable("file.updated")
    assert observable("budget.summary") and observable("rig.output")
    assert not observable("sentinel.output")
    assert not observable("server.ready")
    assert not observable("no.such.event")


# --------------------------------------------------------------------------------------------
# Loading a codon's sentinels
# --------------------------------------------------------------------------------------------


def test_a_file_config_resolves_from_the_hank_directory(tmp_path: Path) -> None:
    write_json(tmp_path / "sentinels" / "watch.json", sentinel(userPromptFile="prompt.md"))
    (tmp_path / "sentinels" / "prompt.md").write_text("Watch.", encoding="utf-8")
    result = load_sentinel_configs([entry("sentinels/watch.json")], tmp_path)
    assert result.errors == []
    (loaded,) = result.configs
    assert loaded.source == "file"
    assert loaded.source_path == tmp_path / "sentinels" / "watch.json"
    assert loaded.config_directory == tmp_path / "sentinels"


def test_an_inline_config_uses_the_hank_directory_as_its_base(tmp_path: Path) -> None:
    result = load_sentinel_configs([entry(sentinel())], tmp_path)
    (loaded,) = result.configs
    assert (loaded.source, loaded.source_path, loaded.config_directory) == (
        "inline", None, tmp_path)


def test_file_configs_are_cached_by_absolute_path(tmp_path: Path) -> None:
    path = write_json(tmp_path / "watch.json", sentinel())
    loader = SentinelConfigLoader()
    first = loader.load([entry("watch.json")], tmp_path).configs[0].config
    path.write_text("not json", encoding="utf-8")
    second = loader.load([entry("./watch.json")], tmp_path).configs[0].config
    assert second is first
    loader.clear()
    assert loader.load([entry("watch.json")], tmp_path).configs == []


def test_a_failed_load_is_not_cached(tmp_path: Path) -> None:
    path = tmp_path / "watch.json"
    path.write_text("{", encoding="utf-8")
    loader = SentinelConfigLoader()
    assert loader.load([entry("watch.json")], tmp_path).errors
    write_json(path, sentinel())
    assert loader.load([entry("watch.json")], tmp_path).errors == []


def test_an_invalid_file_is_reported_with_its_path_and_json_paths(tmp_path: Path) -> None:
    path = write_json(tmp_path / "s" / "watch.json", sentinel(output={"format": "json"}))
    result = load_sentinel_configs([entry("s/watch.json", failCodonIfNotLoaded=True)], tmp_path)
    assert result.configs == []
    (error,) = result.errors
    assert error.ref == "s/watch.json" and error.fatal
    assert error.error == (
        f"Invalid sentinel config {path}: 1 problem\n"
        "  - output.format: format \"json\" must be one of 'text' or 'jsonl'")
    assert "Traceback" not in error.error


def test_a_missing_file_is_a_load_error(tmp_path: Path) -> None:
    (error,) = load_sentinel_configs([entry("gone.json")], tmp_path).errors
    assert error.error == f"Sentinel config not found: {tmp_path / 'gone.json'}"
    assert not error.fatal


def test_malformed_json_is_located(tmp_path: Path) -> None:
    (tmp_path / "watch.json").write_text('{"id": }', encoding="utf-8")
    (error,) = load_sentinel_configs([entry("watch.json")], tmp_path).errors
    assert error.error.endswith("<root>: Invalid JSON at line 1, column 8: Expecting value")


def test_an_inline_config_error_names_the_entry(tmp_path: Path) -> None:
    result = load_sentinel_configs(
        [entry(sentinel()), entry(sentinel(id="bad id"))], tmp_path, codon_id="review")
    (error,) = result.errors
    assert error.ref == "inline:bad id"
    assert error.error.splitlines()[0] == (
        'Invalid sentinel config codon "review" sentinels[1].sentinelConfig (inline): 1 problem')


def test_an_inline_config_without_an_id_is_named_unknown(tmp_path: Path) -> None:
    data = sentinel()
    del data["id"]
    (error,) = load_sentinel_configs([entry(data)], tmp_path).errors
    assert error.ref == "inline:unknown"


def test_a_config_ref_that_escapes_the_hank_directory_is_rejected(tmp_path: Path) -> None:
    hank = tmp_path / "hank"
    write_json(tmp_path / "outside.json", sentinel())
    entries = [CodonSentinel.model_construct(sentinel_config="sub/../../outside.json")]
    (error,) = load_sentinel_configs(entries, hank).errors
    assert error.error == (
        f'sentinelConfig: "sub/../../outside.json" resolves outside the hank directory '
        f"({tmp_path / 'outside.json'}); move the file into the hank directory")


def test_a_config_ref_through_a_symlink_is_rejected(tmp_path: Path) -> None:
    write_json(tmp_path / "real" / "watch.json", sentinel())
    os.symlink(tmp_path / "real", tmp_path / "linked")
    (error,) = load_sentinel_configs([entry("linked/watch.json")], tmp_path).errors
    assert error.error == (
        'sentinelConfig: "linked/watch.json" passes through a symlink at "linked"; '
        "symlinks are not allowed in hank refs")


def test_a_file_configs_own_refs_resolve_from_its_directory(tmp_path: Path) -> None:
    # "../prompts/x.md" from sentinels/ stays inside the hank: fine.
    write_json(tmp_path / "sentinels" / "ok.json", sentinel(userPromptFile="../prompts/x.md"))
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "x.md").write_text("Look.", encoding="utf-8")
    assert load_sentinel_configs([entry("sentinels/ok.json")], tmp_path).errors == []
    path = write_json(tmp_path / "sentinels" / "bad.json", sentinel(
        systemPromptFile=["ok.md", "../../secret.md"],
        structuredOutput={"output": "object", "schemaFile": "../../s.zod"}))
    (error,) = load_sentinel_configs([entry("sentinels/bad.json")], tmp_path).errors
    assert error.error.splitlines() == [
        f"Invalid sentinel config {path}: 2 problems",
        f'  - systemPromptFile[1]: "../../secret.md" resolves outside the hank directory '
        f"({tmp_path.parent / 'secret.md'}); move the file into the hank directory",
        f'  - structuredOutput.schemaFile: "../../s.zod" resolves outside the hank directory '
        f"({tmp_path.parent / 's.zod'}); move the file into the hank directory",
    ]


def test_an_inline_configs_refs_that_escape_are_rejected(tmp_path: Path) -> None:
    # The hank model rejects these already; a config built in code is checked again here.
    entries = [CodonSentinel.model_construct(sentinel_config=sentinel(userPromptFile="../x.md"))]
    (error,) = load_sentinel_configs(entries, tmp_path).errors
    assert "userPromptFile: \"../x.md\" resolves outside the hank directory" in error.error


def test_duplicate_ids_in_one_codon_fail_the_later_entry(tmp_path: Path) -> None:
    write_json(tmp_path / "watch.json", sentinel())
    result = load_sentinel_configs(
        [entry("watch.json"), entry(sentinel(), failCodonIfNotLoaded=True)], tmp_path,
        codon_id="build")
    assert [loaded.source for loaded in result.configs] == ["file"]
    assert result.errors == [type(result.errors[0])(
        "inline:watcher", "Duplicate sentinel ID 'watcher' in codon build", True)]


def test_errors_are_collected_and_only_required_sentinels_are_fatal(tmp_path: Path) -> None:
    result = load_sentinel_configs([
        entry("a.json"),
        entry("b.json", failCodonIfNotLoaded=True),
        entry(sentinel(id="fine")),
        entry("c.json", failCodonIfNotLoaded=False),
    ], tmp_path)
    assert [loaded.config.id for loaded in result.configs] == ["fine"]
    assert [(error.ref, error.fatal) for error in result.errors] == [
        ("a.json", False), ("b.json", True), ("c.json", False)]
    assert result.failed_refs == ["b.json"]


def test_codon_settings_travel_with_the_config(tmp_path: Path) -> None:
    result = load_sentinel_configs([entry(
        sentinel(reportToWebsocket={"outputs": False, "errors": False}),
        failCodonIfNotLoaded=True,
        outputPaths={"logFile": "watch.md"},
        reportToWebsocket={"outputs": True, "triggers": True},
    )], tmp_path)
    (loaded,) = result.configs
    assert loaded.fail_codon_if_not_loaded
    assert loaded.output_paths is not None and loaded.output_paths.log_file == "watch.md"
    reporting = loaded.report_to_websocket
    assert (reporting.lifecycle, reporting.errors, reporting.outputs, reporting.triggers) == (
        None, False, True, True)


def test_the_existing_compat_hanks_sentinel_configs_load(tmp_path: Path) -> None:
    hanks = Path(__file__).parent / "compat" / "hanks"
    for case in ("sentinel-file-ref", "sentinel-inline-config", "lenient-sentinel-keys"):
        copied = shutil.copytree(hanks / case, tmp_path / case)
        hank = json.loads((copied / "hank.json").read_text())
        raw = hank["hank"][0]["sentinels"]
        entries = [entry(item["sentinelConfig"]) for item in raw]
        result = load_sentinel_configs(entries, copied)
        assert result.errors == [], case


# --------------------------------------------------------------------------------------------
# Evaluating conditions
# --------------------------------------------------------------------------------------------


def holds(operator: str, value: Any, data: dict[str, Any], path: str = "x") -> bool:
    condition = EqualityCondition.model_construct(operator=operator, path=path, value=value)
    return conditions_hold([condition], data)


def test_no_conditions_always_hold() -> None:
    assert conditions_hold([], {}) and conditions_hold(None, {})


def test_conditions_combine_with_and() -> None:
    a = EqualityCondition.model_construct(operator="equals", path="a", value=1)
    b = EqualityCondition.model_construct(operator="equals", path="b", value=2)
    assert conditions_hold([a, b], {"a": 1, "b": 2})
    assert not conditions_hold([a, b], {"a": 1, "b": 3})


def test_equals_is_strict() -> None:
    assert holds("equals", 1, {"x": 1}) and holds("equals", 1, {"x": 1.0})
    assert not holds("equals", 1, {"x": True})
    assert not holds("equals", True, {"x": 1})
    assert not holds("equals", "1", {"x": 1})
    assert not holds("equals", 0, {"x": False})
    assert holds("equals", None, {"x": None})
    assert not holds("equals", math.nan, {"x": math.nan})
    assert not holds("equals", "a", {"x": ["a"]})


def test_not_equals_is_strict_but_false_when_missing() -> None:
    assert holds("notEquals", 1, {"x": True})
    assert holds("notEquals", "a", {"x": {"a": 1}})
    assert not holds("notEquals", 1, {"x": 1})
    assert not holds("notEquals", 1, {})


def test_a_missing_path_is_false_for_every_operator() -> None:
    for operator in OPERATORS:
        assert not holds(operator, 1, {"y": 1}), operator
        assert not holds(operator, 1, {"x": {}}, path="x.y.z"), operator


def test_a_present_null_is_not_missing() -> None:
    assert holds("notEquals", "a", {"x": None})
    assert holds("notIn", ["a"], {"x": None})


def test_in_and_not_in() -> None:
    assert holds("in", ["Bash", "Edit"], {"x": "Edit"})
    assert holds("in", [1, 2], {"x": 2.0})
    assert not holds("in", [1], {"x": True})
    assert not holds("in", ["Bash"], {"x": "bash"})
    assert holds("notIn", ["Bash"], {"x": "Edit"})
    assert not holds("notIn", ["Bash"], {"x": "Bash"})
    assert holds("in", [math.nan], {"x": math.nan})  # includes() finds NaN


def test_contains_is_substring_or_membership() -> None:
    assert holds("contains", "TODO", {"x": "a TODO here"})
    assert not holds("contains", "todo", {"x": "a TODO here"})
    assert holds("contains", "b", {"x": ["a", "b"]})
    assert not holds("contains", "b", {"x": ["abc"]})
    assert not holds("contains", "1", {"x": [1]})
    assert not holds("contains", "a", {"x": {"a": 1}})
    assert not holds("contains", "1", {"x": 1})


def test_matches_is_a_regex_search() -> None:
    assert holds("matches", r"\.py$", {"x": "src/app.py"})
    assert not holds("matches", r"\.py$", {"x": "src/app.py\n"})  # JS $ is the end of input
    assert holds("matches", "^err", {"x": "error: boom"})
    assert not holds("matches", "^ERR", {"x": "error"})
    assert not holds("matches", "1", {"x": 1})


def test_an_invalid_regex_never_matches() -> None:
    assert not holds("matches", "(unclosed", {"x": "(unclosed"})
    assert not holds("matches", "(?P<n>a)", {"x": "a"})  # Python-only syntax
    assert not holds("matches", "(?i)a", {"x": "a"})


def test_js_regex_translation() -> None:
    def search(pattern: str, text: str) -> bool:
        compiled = compile_js_regex(pattern)
        assert compiled is not None, pattern
        return compiled.search(text) is not None

    assert search(r"(?<word>ab)\k<word>", "abab")
    assert search("a[^]b", "a\nb") and not search("a[]b", "ab")
    assert search(r"\e\A", "eA")  # identity escapes in JavaScript
    assert not search(r"\d", "٣")  # ASCII digits only
    assert search(r"\x41\u0042", "AB")
    assert search(r"\cJ", "\n")
    assert search("[$]", "$")


def test_greater_and_less_than_take_numbers_only() -> None:
    assert holds("greaterThan", 0.5, {"x": 1})
    assert not holds("greaterThan", 1, {"x": 1})
    assert holds("lessThan", 10, {"x": 9.5})
    assert not holds("greaterThan", 0, {"x": True})
    assert not holds("lessThan", 10, {"x": "5"})
    assert not holds("greaterThan", 0, {"x": math.nan})


def test_unknown_operators_are_false() -> None:
    assert not holds("startsWith", "a", {"x": "abc"})


def test_paths_walk_objects_arrays_and_lengths() -> None:
    data = {"tree": [{"name": "a"}, {"name": "b"}], "line": "hello"}
    assert value_at(data, "tree.1.name") == "b"
    assert value_at(data, "tree.length") == 2
    assert value_at(data, "line.length") == 5
    assert holds("greaterThan", 1, data, path="tree.length")
    assert not holds("equals", "a", data, path="tree.01.name")
    assert not holds("equals", "a", data, path="tree.5.name")


def test_event_triggers_match_listed_types_and_conditions() -> None:
    config = parse_sentinel_config(sentinel(trigger=event_trigger(
        ["tool.result"], cond("isError", "equals", True))), "watch.json")
    trigger = config.trigger
    assert isinstance(trigger, EventTrigger)
    assert trigger.accepts("tool.result", {"isError": True})
    assert not trigger.accepts("tool.result", {"isError": False})
    assert not trigger.accepts("rig.output", {"isError": True})
    wildcard = parse_sentinel_config(sentinel(trigger=event_trigger(["*"])), "w.json").trigger
    assert isinstance(wildcard, EventTrigger) and wildcard.accepts("rig.output", {})


def test_pattern_steps_match_their_type_and_conditions() -> None:
    trigger = {"type": "sequence", "interestFilter": {"on": ["*"]}, "pattern": [
        {"type": "tool.result", "conditions": [cond("toolName", "in", ["Bash"])]},
        {"type": "*"}]}
    config = parse_sentinel_config(sentinel(trigger=trigger), "watch.json")
    assert isinstance(config.trigger, SequenceTrigger)
    first, anything = config.trigger.pattern
    assert first.accepts("tool.result", {"toolName": "Bash"})
    assert not first.accepts("tool.result", {"toolName": "Edit"})
    assert not first.accepts("assistant.action", {"toolName": "Bash"})
    assert anything.accepts("codon.completed", {})


def test_a_config_round_trips_by_json_name() -> None:
    data = sentinel(errorHandling={"maxConsecutiveFailures": 2})
    config = parse_sentinel_config(data, "watch.json")
    dumped = config.model_dump(mode="json", exclude_none=True)
    assert dumped == data
    assert SentinelConfig.model_validate(dumped) == config


def test_a_config_whose_prompt_file_is_missing_does_not_load(tmp_path: Path) -> None:
    write_json(tmp_path / "watch.json", sentinel(userPromptFile="gone.md"))
    (error,) = load_sentinel_configs([entry("watch.json")], tmp_path).errors
    assert error.ref == "watch.json"
    assert error.error.startswith("cannot read prompt file 'gone.md'")


def test_a_template_syntax_error_is_a_load_failure(tmp_path: Path) -> None:
    (error,) = load_sentinel_configs(
        [entry(sentinel(userPromptText="<%= it.events.map(e => e.type %>"))], tmp_path).errors
    assert error.ref == "inline:watcher"
    assert "user prompt (userPromptFile/userPromptText): Template syntax error" in error.error
