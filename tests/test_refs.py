"""The strict-reference preflight: every rule, all violations together, then the existence pass."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hankweave.config import Codon, CopySpec, HankFile, HankValidationError, Loop, RigCopy
from hankweave.config.hank import CodonSentinel, IterationLimit
from hankweave.config.refs import (
    check_hank_refs,
    check_ref_files_exist,
    iter_hank_refs,
    verify_hank_refs,
)

ABSOLUTE = (
    "is an absolute or drive-qualified path; "
    "hank refs must be relative paths inside the hank directory"
)


def make_codon(codon_id: str = "c", **fields: Any) -> Codon:
    """A codon built without schema validation, so refs the schema rejects reach the preflight."""
    values: dict[str, Any] = {
        "id": codon_id,
        "name": codon_id.title(),
        "model": "sonnet",
        "continuation_mode": "fresh",
        "prompt_text": "Go.",
    }
    values.update(fields)
    return Codon.model_construct(**values)


def copy_op(source: str, target: str = "out") -> RigCopy:
    return RigCopy.model_construct(
        type="copy", copy_=CopySpec.model_construct(from_=source, to=target), allow_failure=False
    )


def sentinel(config: str | dict[str, Any]) -> CodonSentinel:
    return CodonSentinel.model_construct(sentinel_config=config, settings=None)


def make_hank(*items: Codon | Loop, **root: Any) -> HankFile:
    return HankFile.model_construct(hank=list(items), **root)


def found(hank: HankFile, hank_dir: Path) -> list[tuple[str, str]]:
    return [(issue.path, issue.message) for issue in check_hank_refs(hank, hank_dir)]


@pytest.fixture
def hank_dir(tmp_path: Path) -> Path:
    root = tmp_path / "hank"
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "main.md").write_text("Do it.")
    (root / "prompts" / "system.md").write_text("Be careful.")
    (root / "templates" / "app" / "src").mkdir(parents=True)
    (root / "templates" / "app" / "src" / "index.js").write_text("x")
    (root / "sentinels").mkdir()
    return root


# --- the policy pass --------------------------------------------------------------------------


def test_clean_refs_pass_the_preflight_and_the_existence_pass(hank_dir: Path) -> None:
    hank = make_hank(
        make_codon(
            prompt_file=["prompts/main.md", "prompts/../prompts/system.md"],
            append_system_prompt_file="prompts/system.md",
            rig_setup=[copy_op("templates/app")],
        ),
        global_system_prompt_file="prompts/system.md",
    )

    assert check_hank_refs(hank, hank_dir) == []
    assert check_ref_files_exist(hank, hank_dir) == []


def test_every_spelling_violation_is_reported_together_with_its_path(hank_dir: Path) -> None:
    hank = make_hank(
        make_codon(
            "a",
            prompt_file=["/etc/passwd", "C:/prompts/a.md"],
            append_system_prompt_file="prompts\\system.md",
        ),
        make_codon("b", prompt_file="prompts/a\0.md", rig_setup=[copy_op("../outside")]),
        global_system_prompt_file=["prompts/system.md", "d:relative.md"],
    )

    assert found(hank, hank_dir) == [
        ("globalSystemPromptFile[1]", f'"d:relative.md" {ABSOLUTE}'),
        ("hank[0].promptFile[0]", f'"/etc/passwd" {ABSOLUTE}'),
        ("hank[0].promptFile[1]", f'"C:/prompts/a.md" {ABSOLUTE}'),
        (
            "hank[0].appendSystemPromptFile",
            '"prompts\\system.md" contains a backslash; hank refs use "/" as the only path '
            "separator",
        ),
        ("hank[1].promptFile", '"prompts/a\0.md" contains an invalid character (NUL)'),
        (
            "hank[1].rigSetup[0].copy.from",
            f'"../outside" resolves outside the hank directory ({hank_dir.parent / "outside"}); '
            "move the file into the hank directory",
        ),
    ]


def test_a_ref_that_leaves_and_reenters_the_hank_directory_is_rejected(hank_dir: Path) -> None:
    hank = make_hank(make_codon(prompt_file="../hank/prompts/main.md"))

    ((path, message),) = found(hank, hank_dir)

    assert path == "hank[0].promptFile"
    assert "resolves outside the hank directory" in message


def test_an_empty_string_inside_a_ref_list_is_reported(hank_dir: Path) -> None:
    hank = make_hank(make_codon(prompt_file=["prompts/main.md", ""]))

    assert found(hank, hank_dir) == [
        ("hank[0].promptFile[1]", "promptFile cannot be an empty string; omit the field instead")
    ]


def test_a_symlinked_directory_on_the_way_is_rejected(hank_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "main.md").write_text("x")
    (hank_dir / "linked").symlink_to(elsewhere)
    hank = make_hank(make_codon(prompt_file="linked/main.md"))

    assert found(hank, hank_dir) == [
        (
            "hank[0].promptFile",
            '"linked/main.md" passes through a symlink at "linked"; symlinks are not allowed in '
            "hank refs",
        )
    ]


def test_a_symlinked_file_is_rejected_even_when_it_points_inside(hank_dir: Path) -> None:
    (hank_dir / "prompts" / "alias.md").symlink_to(hank_dir / "prompts" / "main.md")
    hank = make_hank(make_codon(prompt_file="prompts/alias.md"))

    ((_, message),) = found(hank, hank_dir)

    assert 'passes through a symlink at "prompts/alias.md"' in message


def test_reaching_the_hank_directory_through_a_symlink_is_allowed(
    hank_dir: Path, tmp_path: Path
) -> None:
    via_link = tmp_path / "via-link"
    via_link.symlink_to(hank_dir)
    hank = make_hank(
        make_codon(prompt_file="prompts/main.md", rig_setup=[copy_op("templates/app")])
    )

    assert found(hank, via_link) == []


def test_a_missing_file_is_left_to_the_existence_pass(hank_dir: Path) -> None:
    hank = make_hank(make_codon(prompt_file="prompts/missing/deeper.md"))

    assert found(hank, hank_dir) == []


def test_symlinks_anywhere_in_a_copied_tree_are_reported(hank_dir: Path) -> None:
    app = hank_dir / "templates" / "app"
    (app / "src" / "link.js").symlink_to(app / "src" / "index.js")
    (app / "dangling").symlink_to(hank_dir / "nowhere")
    hank = make_hank(make_codon(rig_setup=[copy_op("templates/app")]))

    assert found(hank, hank_dir) == [
        (
            "hank[0].rigSetup[0].copy.from",
            '"templates/app" contains a symlink at "templates/app/dangling"; symlinks are not '
            "allowed anywhere in a copied tree",
        ),
        (
            "hank[0].rigSetup[0].copy.from",
            '"templates/app" contains a symlink at "templates/app/src/link.js"; symlinks are not '
            "allowed anywhere in a copied tree",
        ),
    ]


def test_a_fifo_in_a_copied_tree_is_reported(hank_dir: Path) -> None:
    os.mkfifo(hank_dir / "templates" / "app" / "src" / "pipe")
    hank = make_hank(make_codon(rig_setup=[copy_op("templates/app")]))

    assert found(hank, hank_dir) == [
        (
            "hank[0].rigSetup[0].copy.from",
            '"templates/app" contains a non-regular file at "templates/app/src/pipe"; only '
            "regular files and directories can be copied",
        )
    ]


def test_a_copy_source_that_is_itself_a_fifo_is_reported(hank_dir: Path) -> None:
    os.mkfifo(hank_dir / "pipe")
    hank = make_hank(make_codon(rig_setup=[copy_op("pipe")]))

    ((_, message),) = found(hank, hank_dir)

    assert message.startswith('"pipe" contains a non-regular file at "pipe"')


def test_refs_in_loop_codons_and_inline_sentinels_carry_their_paths(hank_dir: Path) -> None:
    loop = Loop.model_construct(
        type="loop",
        id="L",
        name="Loop",
        terminate_on=IterationLimit(type="iterationLimit", limit=2),
        codons=[
            make_codon("x"),
            make_codon(
                "y",
                prompt_file=["prompts/main.md", "/abs.md"],
                sentinels=[sentinel({"id": "s", "systemPromptFile": ["ok.md", "../up.md"]})],
            ),
        ],
    )
    hank = make_hank(make_codon(), loop)

    assert [path for path, _ in found(hank, hank_dir)] == [
        "hank[1].codons[1].promptFile[1]",
        "hank[1].codons[1].sentinels[0].sentinelConfig.systemPromptFile[1]",
    ]


def test_refs_inside_a_sentinel_file_resolve_from_its_directory_but_stay_in_the_hank(
    hank_dir: Path,
) -> None:
    config = {
        "id": "watch",
        "systemPromptFile": "../prompts/system.md",
        "userPromptFile": "../../escape.md",
        "structuredOutput": {"schemaFile": "/schema.json"},
    }
    (hank_dir / "sentinels" / "watch.json").write_text(json.dumps(config))
    hank = make_hank(make_codon(sentinels=[sentinel("sentinels/watch.json")]))

    assert found(hank, hank_dir) == [
        (
            "hank[0].sentinels[0].sentinelConfig",
            'userPromptFile in "sentinels/watch.json": "../../escape.md" resolves outside the '
            f"hank directory ({hank_dir.parent / 'escape.md'}); move the file into the hank "
            "directory",
        ),
        (
            "hank[0].sentinels[0].sentinelConfig",
            f'structuredOutput.schemaFile in "sentinels/watch.json": "/schema.json" {ABSOLUTE}',
        ),
    ]


def test_iter_hank_refs_lists_every_ref_bearing_field(hank_dir: Path) -> None:
    hank = make_hank(
        make_codon(
            prompt_file="p.md",
            append_system_prompt_file=["s.md"],
            rig_setup=[copy_op("t")],
            sentinels=[sentinel("sentinels/a.json"), sentinel({"userPromptFile": "u.md"})],
        ),
        global_system_prompt_file="g.md",
    )

    assert [(site.path, site.kind) for site in iter_hank_refs(hank)] == [
        ("globalSystemPromptFile", "system-prompt"),
        ("hank[0].promptFile", "prompt"),
        ("hank[0].appendSystemPromptFile[0]", "system-prompt"),
        ("hank[0].rigSetup[0].copy.from", "copy-source"),
        ("hank[0].sentinels[0].sentinelConfig", "sentinel-config"),
        ("hank[0].sentinels[1].sentinelConfig.userPromptFile", "sentinel-file"),
    ]


# --- the existence pass -----------------------------------------------------------------------


def test_existence_pass_reports_missing_and_non_regular_files(hank_dir: Path) -> None:
    hank = make_hank(
        make_codon(
            prompt_file=["prompts/main.md", "prompts/missing.md"],
            append_system_prompt_file="prompts",
            rig_setup=[copy_op("templates/none")],
        )
    )

    assert [(i.path, i.message) for i in check_ref_files_exist(hank, hank_dir)] == [
        (
            "hank[0].promptFile[1]",
            f'"prompts/missing.md" does not exist ({hank_dir / "prompts" / "missing.md"})',
        ),
        (
            "hank[0].appendSystemPromptFile",
            f'"prompts" is not a regular file ({hank_dir / "prompts"})',
        ),
        (
            "hank[0].rigSetup[0].copy.from",
            f'source path "{hank_dir / "templates" / "none"}" does not exist',
        ),
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files without read permission")
def test_existence_pass_reports_unreadable_prompt_files(hank_dir: Path) -> None:
    secret = hank_dir / "prompts" / "secret.md"
    secret.write_text("x")
    secret.chmod(0)
    hank = make_hank(make_codon(prompt_file="prompts/secret.md"))

    ((issue,),) = [check_ref_files_exist(hank, hank_dir)]

    assert "is not readable" in issue.message


def test_copying_the_hank_directory_itself_is_rejected(hank_dir: Path) -> None:
    hank = make_hank(make_codon(rig_setup=[copy_op("."), copy_op("templates/..")]))

    messages = [issue.message for issue in check_ref_files_exist(hank, hank_dir)]

    assert messages == [
        'copy source "." is the hank directory itself; move the files into a subdirectory and '
        "copy that",
        'copy source "templates/.." is the hank directory itself; move the files into a '
        "subdirectory and copy that",
    ]


def test_sentinel_config_files_must_exist_and_hold_json(hank_dir: Path) -> None:
    (hank_dir / "sentinels" / "broken.json").write_text("{not json")
    (hank_dir / "sentinels" / "list.json").write_text("[]")
    (hank_dir / "sentinels" / "ok.json").write_text(json.dumps({"userPromptFile": "gone.md"}))
    hank = make_hank(
        make_codon(
            sentinels=[
                sentinel("sentinels/missing.json"),
                sentinel("sentinels/broken.json"),
                sentinel("sentinels/list.json"),
                sentinel("sentinels/ok.json"),
            ]
        )
    )

    issues = check_ref_files_exist(hank, hank_dir)

    assert [issue.path for issue in issues] == [
        f"hank[0].sentinels[{n}].sentinelConfig" for n in range(4)
    ]
    assert "does not exist" in issues[0].message
    assert issues[1].message.startswith('"sentinels/broken.json" is not valid JSON (line 1')
    assert issues[2].message == '"sentinels/list.json" must hold a JSON object (a sentinel config)'
    assert issues[3].message.startswith(
        'userPromptFile in "sentinels/ok.json": "gone.md" does not exist'
    )


def test_verify_reports_policy_problems_before_reading_anything(hank_dir: Path) -> None:
    hank = make_hank(make_codon(prompt_file=["prompts/missing.md", "/etc/passwd"]))

    with pytest.raises(HankValidationError) as caught:
        verify_hank_refs(hank, hank_dir, source="my/hank.json")

    assert [issue.path for issue in caught.value.errors] == ["hank[0].promptFile[1]"]
    assert str(caught.value).startswith("Invalid hank file my/hank.json: 1 problem")


def test_verify_runs_the_existence_pass_once_the_policy_passes(hank_dir: Path) -> None:
    hank = make_hank(make_codon(prompt_file="prompts/missing.md"))

    with pytest.raises(HankValidationError) as caught:
        verify_hank_refs(hank, hank_dir)

    assert "does not exist" in caught.value.errors[0].message
