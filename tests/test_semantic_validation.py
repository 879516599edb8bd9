"""Semantic validation: cross-item rules, loop rules, rig checks, continuations, budget warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hankweave.config import HankFile, parse_hank
from hankweave.config.semantic import SemanticReport, validate_hank_semantics
from hankweave.config.settings import BudgetSettings


def codon(codon_id: str = "a", **fields: Any) -> dict[str, Any]:
    return {
        "id": codon_id,
        "name": f"Codon {codon_id}",
        "promptText": "Go.",
        "model": "sonnet",
        "continuationMode": "fresh",
        "checkpointedFiles": ["out.md"],
        **fields,
    }


def loop(loop_id: str = "L", *codons: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "type": "loop",
        "id": loop_id,
        "name": f"Loop {loop_id}",
        "terminateOn": {"type": "iterationLimit", "limit": 3},
        "codons": list(codons) or [codon(f"{loop_id}-step", onFailure="retry")],
        **fields,
    }


def hank(*items: dict[str, Any], **root: Any) -> HankFile:
    return parse_hank({"hank": list(items), **root})


def check(h: HankFile, hank_dir: Path | None = None, **options: Any) -> SemanticReport:
    return validate_hank_semantics(h, hank_dir or Path("/nonexistent-hank"), **options)


def errors(report: SemanticReport) -> list[tuple[str, str]]:
    return [(issue.path, issue.message) for issue in report.errors]


def only_warning(report: SemanticReport) -> str:
    assert len(report.warnings) == 1, report.warnings
    assert report.errors == []
    return report.warnings[0]


def test_a_sound_hank_has_no_errors_and_no_warnings() -> None:
    report = check(
        hank(
            codon("plan"),
            loop("L", codon("impl", onFailure="retry"), codon("review", onFailure="ignore")),
            codon("ship", continuationMode="continue-previous"),
        )
    )

    assert report.ok
    assert report.warnings == []


# --- ids and names ----------------------------------------------------------------------------


def test_duplicate_top_level_codon_ids_are_errors() -> None:
    report = check(hank(codon("a"), codon("a")))

    assert errors(report) == [
        (
            "hank[1].id",
            'Duplicate codon ID "a" (already used at hank[0]). Ids must be unique across all '
            "codons and loops.",
        )
    ]


def test_loop_id_shares_one_id_set_with_codons() -> None:
    report = check(hank(codon("work"), loop("work")))

    assert errors(report)[0][0] == "hank[1].id"
    assert 'Duplicate loop ID "work"' in errors(report)[0][1]


def test_duplicate_codon_ids_within_a_loop_are_errors() -> None:
    report = check(hank(loop("L", codon("x", onFailure="retry"), codon("x", onFailure="retry"))))

    assert errors(report) == [("hank[0].codons[1].id", 'Duplicate codon ID "x" within loop')]


def test_a_loop_codon_may_not_reuse_a_top_level_id() -> None:
    report = check(hank(codon("x"), loop("L", codon("x", onFailure="retry"))))

    assert [path for path, _ in errors(report)] == ["hank[1].codons[0].id"]


def test_duplicate_names_are_only_a_warning() -> None:
    report = check(hank(codon("a", name="Same"), codon("b", name="Same")))

    assert only_warning(report).startswith('hank[0]: Duplicate name "Same" (also used at hank[1])')


# --- loops ------------------------------------------------------------------------------------


def test_context_exceeded_loop_with_a_fresh_codon_is_an_error() -> None:
    report = check(
        hank(
            loop(
                "L",
                codon("x", onFailure="retry", continuationMode="continue-previous"),
                codon("y", onFailure="retry"),
                terminateOn={"type": "contextExceeded"},
            )
        )
    )

    ((path, message),) = errors(report)
    assert path == "hank[0].codons[1].continuationMode"
    assert "the loop would never end" in message


def test_continuing_loop_codon_must_keep_the_previous_model() -> None:
    report = check(
        hank(
            loop(
                "L",
                codon("x", onFailure="retry"),
                codon("y", onFailure="retry", model="opus", continuationMode="continue-previous"),
            )
        )
    )

    ((path, message),) = errors(report)
    assert path == "hank[0].codons[1].model"
    assert message.startswith("Different models cannot share the same session ID")


def test_model_key_decides_what_counts_as_the_same_model() -> None:
    h = hank(
        loop(
            "L",
            codon("x", onFailure="retry", model="sonnet"),
            codon(
                "y",
                onFailure="retry",
                model="anthropic/claude-sonnet",
                continuationMode="continue-previous",
            ),
        )
    )

    resolved = {"sonnet": "claude-sonnet", "anthropic/claude-sonnet": "claude-sonnet"}
    assert check(h, model_key=lambda c: resolved[c.model]).ok
    assert not check(h).ok


def test_loop_codons_are_warned_about_rig_failures_and_abort_policy() -> None:
    report = check(
        hank(
            loop(
                "L",
                codon(
                    "x",
                    rigSetup=[
                        {"type": "command", "command": {"run": "make"}},
                        {"type": "command", "command": {"run": "lint"}, "allowFailure": True},
                    ],
                ),
            )
        )
    )

    assert report.ok
    assert [w.split(":")[0] for w in report.warnings] == [
        "hank[0].codons[0].rigSetup[0]",
        "hank[0].codons[0]",
    ]
    assert "halt the entire loop run" in report.warnings[1]


# --- prompt files and rig operations ----------------------------------------------------------


def test_empty_prompt_file_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "empty.md").write_text("  \n")

    warning = only_warning(check(hank(codon(promptFile="empty.md")), tmp_path))

    assert warning == 'hank[0].promptFile: prompt file "empty.md" is empty'


def test_prompt_file_over_one_mebibyte_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "huge.md").write_bytes(b"x" * (1024 * 1024 + 1))

    warning = only_warning(check(hank(codon(promptFile=["ok.md", "huge.md"])), tmp_path))

    assert warning.startswith('hank[0].promptFile[1]: prompt file "huge.md" is 1.0 MiB')


def test_prompt_behind_a_symlink_is_never_read(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")

    assert check(hank(codon(promptFile="link.md")), tmp_path).warnings == []


@pytest.mark.parametrize("target", ["../outside", "a/../../outside", "/abs/path"])
def test_copy_target_escaping_agent_root_is_an_error(target: str) -> None:
    report = check(hank(codon(rigSetup=[{"type": "copy", "copy": {"from": "t", "to": target}}])))

    assert errors(report) == [
        (
            "hank[0].rigSetup[0].copy.to",
            f'Invalid target path "{target}": copy targets are relative to agentRoot and must '
            "stay inside it",
        )
    ]


def test_existing_copy_target_in_agent_root_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    h = hank(codon(rigSetup=[{"type": "copy", "copy": {"from": "t", "to": "app"}}]))

    warning = only_warning(check(h, agent_root=tmp_path))

    assert warning.startswith('hank[0].rigSetup[0].copy.to: copy target "app" already exists')


def test_blank_command_is_an_error() -> None:
    report = check(hank(codon(rigSetup=[{"type": "command", "command": {"run": "   "}}])))

    assert errors(report) == [("hank[0].rigSetup[0].command.run", "Empty command")]


@pytest.mark.parametrize(
    "run", ["rm -rf /", "sudo rm -rf ~", "cat x > /dev/sda", "format c:", "DEL /S /Q C:\\"]
)
def test_dangerous_commands_are_warnings(run: str) -> None:
    report = check(hank(codon(rigSetup=[{"type": "command", "command": {"run": run}}])))

    assert "Potentially dangerous command" in only_warning(report)


@pytest.mark.parametrize("run", ["rm -rf /tmp/build", "clang-format -i x.c", "rm -rf ./dist"])
def test_ordinary_commands_are_not_flagged(run: str) -> None:
    report = check(hank(codon(rigSetup=[{"type": "command", "command": {"run": run}}])))

    assert report.warnings == []


# --- continuation rules -----------------------------------------------------------------------


def test_first_codon_continuing_is_a_warning() -> None:
    warning = only_warning(check(hank(codon("a", continuationMode="continue-previous"))))

    assert warning.startswith("hank[0].continuationMode: the first codon")


def test_continuing_after_a_context_exceeded_loop_is_an_error() -> None:
    h = hank(
        loop(
            "L",
            codon("x", onFailure="retry", continuationMode="continue-previous"),
            terminateOn={"type": "contextExceeded"},
        ),
        codon("after", continuationMode="continue-previous"),
    )

    ((path, message),) = errors(check(h))

    assert path == "hank[1].continuationMode"
    assert "context is exhausted" in message


def test_continuing_after_an_exhausting_codon_is_an_error() -> None:
    h = hank(
        codon("a", exhaustWithPrompt="More."), codon("b", continuationMode="continue-previous")
    )

    ((path, message),) = errors(check(h))

    assert path == "hank[1].continuationMode"
    assert 'continue codon "a", which uses exhaustWithPrompt' in message


def test_continuing_after_a_loop_whose_last_codon_exhausts_is_an_error() -> None:
    h = hank(
        loop("L", codon("x", onFailure="retry", exhaustWithPrompt="More.")),
        codon("b", continuationMode="continue-previous"),
    )

    assert [path for path, _ in errors(check(h))] == ["hank[1].continuationMode"]


def test_continuing_with_a_different_model_is_an_error() -> None:
    h = hank(codon("a"), codon("b", model="opus", continuationMode="continue-previous"))

    ((path, message),) = errors(check(h))

    assert path == "hank[1].continuationMode"
    assert 'codon "b" (model "opus") continues codon "a" (model "sonnet")' in message


def test_continuing_a_codon_without_checkpointed_files_is_a_warning() -> None:
    h = hank(
        codon("a", checkpointedFiles=[]),
        codon("b", continuationMode="continue-previous"),
    )

    assert "checkpoints no files" in only_warning(check(h))


def test_continuing_after_an_ignored_failure_is_a_warning() -> None:
    h = hank(codon("a", onFailure="ignore"), codon("b", continuationMode="continue-previous"))

    assert 'whose onFailure is "ignore"' in only_warning(check(h))


# --- runtime ids after loop expansion ---------------------------------------------------------


def test_top_level_id_equal_to_a_loop_runtime_id_is_an_error() -> None:
    h = hank(codon("review#0"), loop("L", codon("review", onFailure="retry")))

    assert errors(check(h)) == [
        (
            "hank[0].id",
            'Codon ID "review#0" is also the runtime id of iteration 0 of loop codon "review" '
            "(hank[1].codons[0]) after loop expansion. Fix: rename one of them.",
        )
    ]


def test_iterations_beyond_the_limit_do_not_collide() -> None:
    h = hank(codon("review#5"), loop("L", codon("review", onFailure="retry")))

    assert check(h).ok


def test_context_exceeded_loops_collide_at_any_iteration() -> None:
    h = hank(
        codon("review#7"),
        loop(
            "L",
            codon("review", onFailure="retry", continuationMode="continue-previous"),
            terminateOn={"type": "contextExceeded"},
        ),
    )

    assert [path for path, _ in errors(check(h))] == ["hank[0].id"]


def test_ids_that_share_a_log_file_name_are_errors() -> None:
    h = hank(
        codon("a#b"),
        codon("a-b"),
        codon("review-1"),
        loop("L", codon("review", onFailure="retry")),
    )

    found = errors(check(h))

    assert [path for path, _ in found] == ["hank[2].id", "hank[1].id"]
    assert 'would write the same log file "review-1-claude.log"' in found[0][1]
    assert 'would write the same log file "a-b-claude.log"' in found[1][1]


# --- budget warnings --------------------------------------------------------------------------


def proportional(**budget: Any) -> dict[str, Any]:
    return {"budget": {"maxDollars": 10, "allocation": "proportional", **budget}}


def test_w1_codon_cap_above_its_share_is_a_warning() -> None:
    h = hank(
        codon("a", budget={"maxDollars": 5}),
        codon("b"),
        overrides=proportional(shares={"a": 0.2}),
    )

    warning = only_warning(check(h))

    assert warning.startswith("hank[0].budget.maxDollars: maxDollars $5.00 exceeds the share")
    assert "The cap will never be reached." in warning


def test_w2_loop_cap_above_its_share_is_a_warning() -> None:
    h = hank(
        codon("a"),
        loop("L", budget={"maxDollars": 9}),
        overrides=proportional(shares={"L": 0.5}),
    )

    assert only_warning(check(h)).startswith("hank[1].budget.maxDollars:")


def test_w3_unallocated_remainder_is_a_warning() -> None:
    h = hank(
        codon("a", budget={"maxDollars": 1}),
        codon("b"),
        overrides=proportional(shares={"b": 0.5}),
    )

    warning = only_warning(check(h))

    assert warning.startswith("overrides.budget.shares: shares sum to 50%")
    assert "is never allocated" in warning


def test_w4_loop_budget_shares_are_checked_like_the_hanks() -> None:
    h = hank(
        loop(
            "L",
            codon("x", onFailure="retry", budget={"maxDollars": 4}),
            codon("y", onFailure="retry"),
            **proportional(shares={"x": 0.1, "y": 0.2}),
        )
    )

    assert [w.split(": ")[0] for w in check(h).warnings] == [
        "hank[0].codons[0].budget.maxDollars",
        "hank[0].budget.shares",
    ]


def test_w5_exhaust_with_prompt_under_a_time_budget_is_a_warning() -> None:
    h = hank(codon("a", exhaustWithPrompt="More."), overrides={"budget": {"maxTimeSeconds": 60}})

    assert "exhaustWithPrompt under a time budget of 60s" in only_warning(check(h))


def test_w6_dollar_budget_on_an_unpriced_model_is_a_warning() -> None:
    h = hank(codon("a", model="local/llama", budget={"maxDollars": 1}))

    assert check(h).warnings == []  # without pricing information the check is skipped
    warning = only_warning(check(h, pricing_known=lambda c: c.model != "local/llama"))
    assert 'model "local/llama" has no pricing' in warning


def test_w7_item_without_share_or_cap_when_shares_are_full_is_a_warning() -> None:
    h = hank(codon("a"), codon("b"), overrides=proportional(shares={"a": 1.0}))

    assert "start with a $0 budget" in only_warning(check(h))


def test_w8_fail_on_exceeded_with_retry_is_a_warning() -> None:
    h = hank(codon("a", onFailure="retry", budget={"maxDollars": 1, "onExceeded": "fail"}))

    assert 'onExceeded "fail" and onFailure "retry"' in only_warning(check(h))


def test_w8_inherits_on_exceeded_from_the_container() -> None:
    h = hank(
        codon("a", onFailure="retry"),
        overrides={"budget": {"maxDollars": 2, "onExceeded": "fail"}},
    )

    assert 'onExceeded "fail"' in only_warning(check(h))


def test_w9_fail_policy_item_after_others_in_a_shared_pool_is_a_warning() -> None:
    h = hank(
        codon("a"),
        codon("b", budget={"onExceeded": "fail"}),
        overrides={"budget": {"maxDollars": 2}},
    )

    assert only_warning(check(h)).startswith('hank[1]: "b" has onExceeded "fail" in the shared')


def test_w10_codon_time_above_its_loop_time_is_a_warning() -> None:
    h = hank(
        loop(
            "L",
            codon("x", onFailure="retry", budget={"maxTimeSeconds": 600}),
            budget={"maxTimeSeconds": 60},
        )
    )

    assert only_warning(check(h)).startswith("hank[0].codons[0].budget.maxTimeSeconds:")


def test_resolved_budget_settings_replace_the_hank_budget() -> None:
    h = hank(codon("a", exhaustWithPrompt="More."))

    assert check(h).warnings == []
    assert check(h, budget=BudgetSettings(max_time_seconds=30)).warnings != []
