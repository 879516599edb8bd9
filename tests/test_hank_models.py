"""The hank file and runtime settings models: what they accept, and how they report problems."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hankweave.config import (
    VALID_ROOT_FIELDS,
    Codon,
    ConfigError,
    HankFile,
    HankIssue,
    HankValidationError,
    Loop,
    RigCommand,
    RigCopy,
    RuntimeConfigValidationError,
    SettingsFile,
    hank_json_schema,
    load_hank,
    load_runtime_config,
    parse_hank,
)

FIXTURES = Path(__file__).parent / "fixtures" / "hanks"


def codon(**fields: Any) -> dict[str, Any]:
    """A valid codon, with ``fields`` added or replaced."""
    return {
        "id": "write",
        "name": "Write",
        "promptText": "Write the report.",
        "model": "sonnet",
        "continuationMode": "fresh",
        **fields,
    }


def loop(**fields: Any) -> dict[str, Any]:
    """A valid loop of one codon, with ``fields`` added or replaced."""
    return {
        "type": "loop",
        "id": "refine",
        "name": "Refine",
        "terminateOn": {"type": "iterationLimit", "limit": 2},
        "codons": [codon(id="edit")],
        **fields,
    }


def problems(data: object) -> list[tuple[str, str]]:
    """The ``(path, message)`` pairs reported for ``data``, which must be invalid."""
    with pytest.raises(HankValidationError) as caught:
        parse_hank(data)
    return [(issue.path, issue.message) for issue in caught.value.errors]


def only_problem(data: object) -> tuple[str, str]:
    found = problems(data)
    assert len(found) == 1, found
    return found[0]


# --- accepting valid hanks ----------------------------------------------------------------


def test_full_featured_hank_round_trips_to_the_same_json() -> None:
    raw = json.loads((FIXTURES / "full.json").read_text())

    hank = parse_hank(raw)

    assert hank.model_dump(by_alias=True, exclude_none=True) == raw


def test_parsed_items_are_typed_codons_and_loops() -> None:
    hank = load_hank(FIXTURES / "full.json")

    plan, build_loop, _ = hank.hank
    assert isinstance(plan, Codon)
    assert isinstance(build_loop, Loop)
    assert isinstance(plan.rig_setup[0], RigCopy)
    assert plan.rig_setup[0].copy_.from_ == "templates/site"
    assert isinstance(plan.rig_setup[1], RigCommand)
    assert build_loop.terminate_on.type == "iterationLimit"
    assert hank.overrides.budget.shares == {"plan": 0.25, "build-loop": 0.75}


def test_omitted_fields_get_the_reference_defaults() -> None:
    hank = load_hank(FIXTURES / "minimal.json")

    first, refine = hank.hank
    assert first.type == "codon"
    assert first.max_extensions == 100
    copy_op, command_op = first.rig_setup
    assert copy_op.allow_failure is False
    assert command_op.command.working_directory == "project"
    assert refine.budget.allocation == "shared"


def test_schema_key_is_accepted_at_the_root() -> None:
    hank = parse_hank({"$schema": "https://example.test/hank.schema.json", "hank": [codon()]})

    assert hank.schema_url == "https://example.test/hank.schema.json"


def test_models_can_be_built_from_python_names() -> None:
    built = Codon(id="a", name="A", model="sonnet", continuation_mode="fresh", prompt_text="Go.")

    assert built.model_dump(exclude_none=True)["continuationMode"] == "fresh"


def test_requirement_env_names_are_trimmed() -> None:
    hank = parse_hank({"requirements": {"env": ["  API_KEY "]}, "hank": [codon()]})

    assert hank.requirements.env == ["API_KEY"]


def test_ref_that_goes_down_and_back_up_inside_the_hank_is_allowed() -> None:
    hank = parse_hank({"hank": [codon(promptFile="prompts/../shared/main.md")]})

    assert hank.hank[0].prompt_file == "prompts/../shared/main.md"


# --- the error report ---------------------------------------------------------------------


def test_problems_from_all_items_are_reported_together() -> None:
    with pytest.raises(HankValidationError) as caught:
        load_hank(FIXTURES / "several-broken-items.json")

    assert [issue.path for issue in caught.value.errors] == [
        "hank[0].tracking",
        "hank[3].model",
        "hank[3].rigSetup[0].command.run",
    ]


def test_error_message_has_a_headline_and_one_line_per_problem() -> None:
    error = HankValidationError(
        "site/hank.json",
        [HankIssue("hank[0].model", "Model cannot be empty"), HankIssue("<root>", "Bad")],
    )

    assert str(error) == (
        "Invalid hank file site/hank.json: 2 problems\n"
        "  - hank[0].model: Model cannot be empty\n"
        "  - <root>: Bad"
    )


def test_validation_error_is_a_config_error_naming_its_source() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_hank({"hank": []}, source="demo/hank.json")

    assert caught.value.source == "demo/hank.json"
    assert str(caught.value).startswith("Invalid hank file demo/hank.json: 1 problem\n")


def test_invalid_json_is_reported_at_the_root_with_line_and_column() -> None:
    with pytest.raises(HankValidationError) as caught:
        load_hank(FIXTURES / "broken-json.json")

    [issue] = caught.value.errors
    assert issue.path == "<root>"
    assert issue.message == (
        "Invalid JSON at line 3, column 18: Expecting property name enclosed in double quotes"
    )


def test_missing_hank_file_is_a_config_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "hank.json"

    with pytest.raises(ConfigError, match=r"Hank file not found: .*nope/hank\.json") as caught:
        load_hank(missing)

    assert not isinstance(caught.value, HankValidationError)


def test_document_that_is_not_an_object_is_reported_at_the_root() -> None:
    assert only_problem([codon()]) == ("<root>", "Input should be an object (got an array)")


# --- hank[] items -------------------------------------------------------------------------


def test_empty_hank_needs_at_least_one_codon() -> None:
    assert only_problem({"hank": []}) == ("hank", "At least one codon required")


def test_missing_hank_array_is_reported() -> None:
    assert only_problem({}) == ("hank", "Field required")


def test_item_that_is_not_an_object_is_named_by_index() -> None:
    assert only_problem({"hank": [codon(), "oops"]}) == (
        "hank[1]",
        "Item at index 1 must be an object (codon or loop)",
    )


def test_known_typo_in_a_codon_suggests_the_right_field() -> None:
    assert only_problem({"hank": [codon(systemPromptFile="sys.md")]}) == (
        "hank[0].systemPromptFile",
        'Unknown field "systemPromptFile". Did you mean "appendSystemPromptFile"?',
    )


def test_budget_typo_in_a_codon_points_into_budget() -> None:
    assert only_problem({"hank": [codon(maxCost=3)]}) == (
        "hank[0].maxCost",
        'Unknown field "maxCost". Did you mean "budget.maxDollars"?',
    )


def test_unknown_codon_field_lists_the_valid_fields() -> None:
    path, message = only_problem({"hank": [codon(colour="blue")]})

    assert path == "hank[0].colour"
    assert message.startswith('Unrecognized field "colour". Valid fields are: type, id, name, ')
    assert message.endswith("shimIdleTimeout, budget, approval, toolApproval, askHuman, sandbox.")


def test_typo_in_a_codon_inside_a_loop_is_caught() -> None:
    assert only_problem({"hank": [loop(codons=[codon(rig=[])])]}) == (
        "hank[0].codons[0].rig",
        'Unknown field "rig". Did you mean "rigSetup"?',
    )


def test_loop_is_only_offered_suggestions_it_can_use() -> None:
    # Loops have no outputFiles, so the codon typo hint would mislead.
    path, message = only_problem({"hank": [loop(outputs=["a"])]})

    assert path == "hank[0].outputs"
    assert message == (
        'Unrecognized field "outputs". Valid fields are: '
        "type, id, name, description, terminateOn, codons, budget, archiveOnSuccess."
    )


def test_json_keys_must_use_camel_case_names() -> None:
    assert only_problem({"hank": [codon(exhaust_with_prompt="More.")]})[0] == (
        "hank[0].exhaust_with_prompt"
    )


def test_unknown_key_in_a_nested_object_is_ignored_with_a_warning_listing_valid_fields() -> None:
    op = {"type": "copy", "copy": {"from": "a", "to": "b", "mode": "0644"}}

    hank = parse_hank({"hank": [codon(rigSetup=[op])]})

    assert [(i.path, i.message) for i in hank.ignored_keys] == [
        (
            "hank[0].rigSetup[0].copy.mode",
            'unknown key "mode" is ignored (this object accepts: from, to)',
        )
    ]
    assert hank.model_dump(by_alias=True, exclude_none=True)["hank"][0]["rigSetup"][0]["copy"] == {
        "from": "a",
        "to": "b",
    }


def test_an_unknown_key_in_an_output_group_stays_an_error() -> None:
    group = {"copy": ["out.md"], "overwrite": True}

    assert only_problem({"hank": [codon(outputFiles=[group])]}) == (
        "hank[0].outputFiles[0].overwrite",
        'Unrecognized field "overwrite". Valid fields are: copy, beforeCopy.',
    )


def test_ignored_keys_are_reported_beside_the_errors_of_an_invalid_hank() -> None:
    item = codon(model="", retryConfig={"backoff": 2}, onFailure="retry")

    with pytest.raises(HankValidationError) as caught:
        parse_hank({"hank": [item]})

    assert [i.path for i in caught.value.errors] == ["hank[0].model"]
    assert [i.path for i in caught.value.warnings] == ["hank[0].retryConfig.backoff"]


# --- root ---------------------------------------------------------------------------------


def test_codon_field_at_the_root_is_pointed_back_into_a_codon() -> None:
    assert only_problem({"model": "opus", "hank": [codon()]}) == (
        "<root>",
        'Unrecognized field(s) at hank root: model. "model" is a per-codon field '
        '— move it inside a codon in the "hank" array.',
    )


def test_other_unknown_root_fields_are_listed_together() -> None:
    assert only_problem({"recommendations": {}, "version": 2, "hank": [codon()]}) == (
        "<root>",
        "Unrecognized field(s) at hank root: recommendations, version. Valid root fields are: "
        + ", ".join(VALID_ROOT_FIELDS)
        + ".",
    )


def test_both_global_system_prompts_are_rejected() -> None:
    data = {
        "globalSystemPromptFile": "g.md",
        "globalSystemPromptText": "Be kind.",
        "hank": [codon()],
    }

    assert only_problem(data) == (
        "<root>",
        "Cannot specify both globalSystemPromptFile and globalSystemPromptText",
    )


def test_unknown_meta_keys_are_ignored() -> None:
    data = {"meta": {"name": "n", "version": "1", "license": "MIT"}, "hank": [codon()]}

    assert [i.path for i in parse_hank(data).ignored_keys] == ["meta.license"]


# --- codon refinements --------------------------------------------------------------------


def test_codon_without_any_prompt_is_rejected() -> None:
    path, message = only_problem({"hank": [codon(promptText="")]})

    assert path == "hank[0]"
    assert message.startswith("Either promptFile or promptText must be provided.")


def test_both_append_system_prompt_fields_are_rejected() -> None:
    item = codon(appendSystemPromptFile="sys.md", appendSystemPromptText="Extra.")

    path, message = only_problem({"hank": [item]})

    assert path == "hank[0]"
    assert message.startswith(
        "Cannot specify both appendSystemPromptFile and appendSystemPromptText."
    )


def test_retry_config_needs_on_failure_retry() -> None:
    item = codon(onFailure="ignore", retryConfig={"maxAttempts": 2})

    path, message = only_problem({"hank": [item]})

    assert path == "hank[0].retryConfig"
    assert message.startswith("retryConfig can only be used when onFailure is 'retry'.")


def test_all_broken_codon_rules_are_reported_at_once() -> None:
    item = codon(
        promptText="", appendSystemPromptFile="s.md", appendSystemPromptText="t", retryConfig={}
    )

    assert [path for path, _ in problems({"hank": [item]})] == [
        "hank[0]",
        "hank[0]",
        "hank[0].retryConfig",
    ]


def test_missing_continuation_mode_gets_the_explanation() -> None:
    item = codon()
    del item["continuationMode"]

    path, message = only_problem({"hank": [item]})

    assert path == "hank[0].continuationMode"
    assert message.startswith("continuationMode must be either 'fresh' or 'continue-previous'.")


def test_empty_model_is_rejected() -> None:
    assert only_problem({"hank": [codon(model="")]}) == ("hank[0].model", "Model cannot be empty")


def test_empty_codon_id_is_rejected() -> None:
    path, message = only_problem({"hank": [codon(id="")]})

    assert path == "hank[0].id"
    assert message.startswith("Codon ID cannot be empty.")


def test_shim_idle_timeout_is_capped_at_thirty_minutes() -> None:
    assert only_problem({"hank": [codon(shimIdleTimeout=1801)]}) == (
        "hank[0].shimIdleTimeout",
        "shimIdleTimeout must be at most 1800 (30 minutes) (got 1801)",
    )


def test_retry_attempts_are_bounded() -> None:
    item = codon(onFailure="retry", retryConfig={"maxAttempts": 11})

    assert only_problem({"hank": [item]})[0] == "hank[0].retryConfig.maxAttempts"


def test_numbers_must_be_json_numbers_not_strings() -> None:
    assert only_problem({"hank": [codon(maxExtensions="5")]}) == (
        "hank[0].maxExtensions",
        'Input should be a valid integer (got "5")',
    )


def test_null_is_not_a_way_to_omit_a_field() -> None:
    assert only_problem({"hank": [codon(description=None)]}) == (
        "hank[0].description",
        "null is not allowed; omit the field instead",
    )


def test_empty_requirement_env_name_is_rejected() -> None:
    assert only_problem({"requirements": {"env": ["A", "  "]}, "hank": [codon()]}) == (
        "requirements.env[1]",
        "Environment variable name cannot be empty",
    )


# --- rig setup and outputs ----------------------------------------------------------------


def test_empty_copy_target_is_rejected() -> None:
    op = {"type": "copy", "copy": {"from": "templates", "to": ""}}

    assert only_problem({"hank": [codon(rigSetup=[op])]}) == (
        "hank[0].rigSetup[0].copy.to",
        "Target path cannot be empty",
    )


def test_empty_rig_command_is_rejected_in_any_item() -> None:
    op = {"type": "command", "command": {"run": ""}}
    data = {"hank": [codon(id="a"), codon(id="b"), codon(id="c", rigSetup=[op])]}

    assert only_problem(data) == ("hank[2].rigSetup[0].command.run", "Command cannot be empty")


def test_unknown_rig_operation_type_is_rejected() -> None:
    assert only_problem({"hank": [codon(rigSetup=[{"type": "move"}])]}) == (
        "hank[0].rigSetup[0]",
        "\"type\" must be one of 'copy', 'command', not 'move'",
    )


def test_rig_operation_without_type_is_rejected() -> None:
    assert only_problem({"hank": [codon(rigSetup=[{"command": {"run": "ls"}}])]}) == (
        "hank[0].rigSetup[0]",
        'Field "type" is required',
    )


def test_last_copied_is_not_a_working_directory_for_output_commands() -> None:
    group = {
        "copy": ["out/*"],
        "beforeCopy": [
            {"type": "command", "command": {"run": "ls", "workingDirectory": "lastCopied"}}
        ],
    }

    path, _ = only_problem({"hank": [codon(outputFiles=[group])]})

    assert path == "hank[0].outputFiles[0].beforeCopy[0].command.workingDirectory"


def test_output_group_needs_at_least_one_glob() -> None:
    assert only_problem({"hank": [codon(outputFiles=[{"copy": []}])]}) == (
        "hank[0].outputFiles[0].copy",
        "The 'copy' array cannot be empty.",
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "Archive path cannot be empty"),
        ("logs/../../x", 'Archive path cannot contain parent traversal (..) (got "logs/../../x")'),
        ("/tmp/x", 'Archive path must be relative, not absolute (got "/tmp/x")'),
    ],
    ids=["empty", "parent-traversal", "absolute"],
)
def test_archive_paths_must_stay_relative(path: str, message: str) -> None:
    assert only_problem({"hank": [codon(archiveOnSuccess=["ok/**", path])]}) == (
        "hank[0].archiveOnSuccess[1]",
        message,
    )


# --- hank refs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "/etc/passwd",
            '"/etc/passwd" is an absolute or drive-qualified path; '
            "hank refs must be relative paths inside the hank directory",
        ),
        (
            "C:prompt.md",
            '"C:prompt.md" is an absolute or drive-qualified path; '
            "hank refs must be relative paths inside the hank directory",
        ),
        (
            "prompts\\main.md",
            '"prompts\\main.md" contains a backslash; hank refs use "/" as the only path separator',
        ),
        ("main\0.md", '"main\0.md" contains an invalid character (NUL)'),
        (
            "../shared/main.md",
            '"../shared/main.md" resolves outside the hank directory; '
            "move the file into the hank directory",
        ),
        (
            "a/../../hank/main.md",
            '"a/../../hank/main.md" resolves outside the hank directory; '
            "move the file into the hank directory",
        ),
    ],
    ids=["absolute", "drive", "backslash", "nul", "escapes", "leaves-and-reenters"],
)
def test_prompt_file_refs_follow_the_strict_ref_rules(raw: str, message: str) -> None:
    assert only_problem({"hank": [codon(promptFile=raw)]}) == ("hank[0].promptFile", message)


def test_empty_scalar_ref_asks_to_omit_the_field() -> None:
    item = codon(appendSystemPromptFile="")

    assert only_problem({"hank": [item]}) == (
        "hank[0].appendSystemPromptFile",
        "appendSystemPromptFile cannot be an empty string; omit the field instead",
    )


def test_bad_ref_inside_a_ref_array_is_named_by_index() -> None:
    data = {"globalSystemPromptFile": ["ok.md", "/abs.md"], "hank": [codon()]}

    assert only_problem(data)[0] == "globalSystemPromptFile[1]"


def test_copy_source_is_a_strict_ref() -> None:
    op = {"type": "copy", "copy": {"from": "", "to": "x"}}

    assert only_problem({"hank": [codon(rigSetup=[op])]}) == (
        "hank[0].rigSetup[0].copy.from",
        "copy.from cannot be an empty string; omit the field instead",
    )


def test_sentinel_config_path_is_a_strict_ref() -> None:
    sentinel = {"sentinelConfig": "../sentinels/watch.json"}

    assert only_problem({"hank": [codon(sentinels=[sentinel])]}) == (
        "hank[0].sentinels[0].sentinelConfig",
        '"../sentinels/watch.json" resolves outside the hank directory; '
        "move the file into the hank directory",
    )


def test_refs_inside_an_inline_sentinel_config_are_checked() -> None:
    inline = {
        "id": "watch",
        "userPromptFile": ["ok.md", "C:\\evil.md"],
        "structuredOutput": {"output": "object", "schemaFile": "../schema.ts"},
    }

    assert [
        path for path, _ in problems({"hank": [codon(sentinels=[{"sentinelConfig": inline}])]})
    ] == [
        "hank[0].sentinels[0].sentinelConfig.userPromptFile[1]",
        "hank[0].sentinels[0].sentinelConfig.structuredOutput.schemaFile",
    ]


def test_unknown_sentinel_settings_are_ignored() -> None:
    sentinel = {"sentinelConfig": "s.json", "settings": {"failIfMissing": True}}

    hank = parse_hank({"hank": [codon(sentinels=[sentinel])]})

    assert [i.path for i in hank.ignored_keys] == ["hank[0].sentinels[0].settings.failIfMissing"]


# --- loops --------------------------------------------------------------------------------


def test_loop_needs_at_least_one_codon() -> None:
    assert only_problem({"hank": [loop(codons=[])]}) == (
        "hank[0].codons",
        "Loop must contain at least one codon. Fix: Add codons to the loop.",
    )


def test_loops_cannot_be_nested() -> None:
    inner = {
        "type": "loop",
        "id": "inner",
        "name": "Inner",
        "promptText": "x",
        "model": "m",
        "continuationMode": "fresh",
    }

    assert only_problem({"hank": [loop(codons=[inner])]}) == (
        "hank[0].codons[0].type",
        'A loop cannot contain another loop; "codons" may only hold codons',
    )


def test_iteration_limit_must_be_at_least_one() -> None:
    assert only_problem({"hank": [loop(terminateOn={"type": "iterationLimit", "limit": 0})]}) == (
        "hank[0].terminateOn.limit",
        "Iteration limit must be at least 1 (got 0)",
    )


def test_loop_budget_shares_must_name_the_loop_codons() -> None:
    budget = {"maxDollars": 5, "allocation": "proportional", "shares": {"edit": 0.5, "write": 0.5}}

    assert only_problem({"hank": [loop(budget=budget)]}) == (
        "hank[0].budget.shares",
        "budget.shares references unknown child IDs: write. Valid IDs: edit",
    )


def test_codon_errors_inside_a_loop_name_their_nested_path() -> None:
    assert only_problem({"hank": [codon(), loop(codons=[codon(id="edit", model="")])]}) == (
        "hank[1].codons[0].model",
        "Model cannot be empty",
    )


# --- container budgets --------------------------------------------------------------------


def test_shares_need_a_proportional_allocation() -> None:
    data = {"overrides": {"budget": {"maxDollars": 5, "shares": {"write": 0.5}}}, "hank": [codon()]}

    path, message = only_problem(data)

    assert path == "overrides.budget.shares"
    assert message.startswith(
        "budget.shares requires allocation mode 'proportional' or 'proportional-strict'."
    )


def test_proportional_allocation_needs_max_dollars() -> None:
    data = {"hank": [loop(budget={"allocation": "proportional-strict"})]}

    path, message = only_problem(data)

    assert path == "hank[0].budget.maxDollars"
    assert message.startswith("Proportional allocation requires budget.maxDollars.")


def test_shares_may_not_sum_above_one() -> None:
    budget = {"maxDollars": 5, "allocation": "proportional", "shares": {"write": 0.7, "next": 0.4}}
    data = {"overrides": {"budget": budget}, "hank": [codon(), codon(id="next")]}

    path, message = only_problem(data)

    assert path == "overrides.budget.shares"
    assert message.startswith("budget.shares values must sum to at most 1.0.")


def test_shares_summing_to_one_with_float_rounding_are_accepted() -> None:
    budget = {
        "maxDollars": 5,
        "allocation": "proportional",
        "shares": {"a": 0.1, "b": 0.2, "c": 0.7},
    }
    items = [codon(id="a"), codon(id="b"), codon(id="c")]

    assert parse_hank({"overrides": {"budget": budget}, "hank": items}).overrides is not None


@pytest.mark.parametrize("share", [0, 1.5], ids=["zero", "above-one"])
def test_each_share_is_a_fraction_in_zero_to_one(share: float) -> None:
    budget = {"maxDollars": 5, "allocation": "proportional", "shares": {"write": share}}

    # A share above one also breaks the sum rule, which is reported beside it.
    assert problems({"overrides": {"budget": budget}, "hank": [codon()]})[0][0] == (
        "overrides.budget.shares.write"
    )


def test_root_shares_must_name_top_level_items() -> None:
    budget = {"maxDollars": 5, "allocation": "proportional", "shares": {"edit": 0.5}}

    assert only_problem({"overrides": {"budget": budget}, "hank": [codon(), loop()]}) == (
        "overrides.budget.shares",
        "budget.shares references unknown child IDs: edit. Valid IDs: write, refine",
    )


def test_root_rules_are_reported_alongside_item_errors() -> None:
    budget = {"maxDollars": 5, "allocation": "proportional", "shares": {"ghost": 0.5}}
    data = {"overrides": {"budget": budget}, "hank": [codon(model="")]}

    assert problems(data) == [
        ("hank[0].model", "Model cannot be empty"),
        (
            "overrides.budget.shares",
            "budget.shares references unknown child IDs: ghost. Valid IDs: write",
        ),
    ]


# --- JSON schema --------------------------------------------------------------------------


def test_json_schema_is_draft_2020_12_with_camel_case_names() -> None:
    schema = hank_json_schema()
    text = json.dumps(schema)

    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "Hankweave hank file"
    assert "$schema" in schema["properties"]
    assert schema["required"] == ["hank"]
    assert '"continuationMode"' in text
    assert '"rigSetup"' in text
    assert "continuation_mode" not in text


def test_json_schema_accepts_the_full_fixture() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = hank_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)

    jsonschema.validate(json.loads((FIXTURES / "full.json").read_text()), schema)


def test_hank_file_model_validates_on_its_own() -> None:
    with pytest.raises(ValueError):
        HankFile.model_validate({"hank": [codon(model="")]})


# --- hankweave.json -----------------------------------------------------------------------


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_runtime_config_loads_every_documented_setting(tmp_path: Path) -> None:
    settings = {
        "port": 4242,
        "autostart": False,
        "showCosts": True,
        "withoutProxy": True,
        "model": "opus",
        "anthropicBaseUrl": "https://proxy.example.test/anthropic",
        "outputDirectory": "out",
        "executionBaseDir": "/tmp/executions",
        "logParsingInterval": 500,
        "dataHashTimeLimit": 3000,
        "idleTimeout": 30,
        "shimIdleTimeout": 240,
        "ignoreRigFailures": True,
        "sentinel": {"enablePersistence": False, "healthCheckGracePeriodMs": 100},
        "telemetry": {"enabled": False},
        "budget": {"maxDollars": 10, "maxTimeSeconds": 600},
    }

    config = load_runtime_config(write_json(tmp_path / "hankweave.json", settings))

    assert config.model_dump(exclude_none=True) == settings


def test_runtime_config_leaves_unset_fields_unset(tmp_path: Path) -> None:
    config = load_runtime_config(write_json(tmp_path / "hankweave.json", {}))

    assert config == SettingsFile()
    assert config.model_dump(exclude_none=True) == {}


def test_runtime_config_problems_name_the_file_and_paths(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "hankweave.json",
        {"idleTimeout": 300, "sentinel": {"healthCheckGracePeriodMs": 0}, "budget": {"shares": {}}},
    )

    with pytest.raises(RuntimeConfigValidationError) as caught:
        load_runtime_config(path)

    assert isinstance(caught.value, ConfigError)
    assert str(caught.value).startswith(f"Invalid runtime config {path}: 3 problems")
    assert [(i.path, i.message) for i in caught.value.errors] == [
        ("idleTimeout", "Idle timeout must be at most 255 (got 300)"),
        ("sentinel.healthCheckGracePeriodMs", "Input should be greater than 0 (got 0)"),
        (
            "budget.shares",
            'Unrecognized field "shares". Valid fields are: maxDollars, maxTimeSeconds, warnAt.',
        ),
    ]


def test_runtime_config_with_bad_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hankweave.json"
    path.write_text('{"port": }')

    with pytest.raises(ConfigError, match=r"Invalid runtime config .*hankweave\.json") as caught:
        load_runtime_config(path)

    assert caught.value.errors[0].message.startswith("Invalid JSON at line 1, column 10")


def test_missing_runtime_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Runtime config file not found"):
        load_runtime_config(tmp_path / "hankweave.json")
