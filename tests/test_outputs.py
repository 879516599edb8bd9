"""outputFiles: beforeCopy commands, glob expansion, conflicts, overwrite and symlinks."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import pytest

import hankweave.runtime.outputs as outputs_module
from hankweave.config.hank import OutputFileGroup
from hankweave.runtime.outputs import (
    MAX_CONFLICT_COPIES,
    OutputCopyError,
    OutputCopyResult,
    copy_outputs,
    expand_output_globs,
    resolve_conflict,
)


def group(*globs: str, before: list[str] | None = None) -> OutputFileGroup:
    data: dict[str, Any] = {"copy": list(globs)}
    if before is not None:
        data["beforeCopy"] = [{"type": "command", "command": {"run": run}} for run in before]
    return OutputFileGroup.model_validate(data, by_alias=True)


@pytest.fixture
def agent_root(tmp_path: Path) -> Path:
    root = tmp_path / "agentRoot"
    (root / "reports" / "deep").mkdir(parents=True)
    (root / "reports" / "summary.md").write_text("summary")
    (root / "reports" / "deep" / "detail.md").write_text("detail")
    (root / ".env.example").write_text("KEY=")
    (root / "notes.txt").write_text("notes")
    return root


@pytest.fixture
def output_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"


def copy(
    groups: list[OutputFileGroup],
    agent_root: Path,
    output_dir: Path,
    *,
    overwrite: bool = False,
    env: dict[str, str] | None = None,
    resume: bool = False,
) -> OutputCopyResult:
    return asyncio.run(
        copy_outputs(
            groups,
            agent_root=agent_root,
            output_dir=output_dir,
            env=env or {},
            overwrite=overwrite,
            resume=resume,
        )
    )


def test_glob_copies_matches_keeping_relative_paths(agent_root: Path, output_dir: Path) -> None:
    result = copy([group("reports/**/*.md")], agent_root, output_dir)

    assert (output_dir / "reports" / "summary.md").read_text() == "summary"
    assert (output_dir / "reports" / "deep" / "detail.md").read_text() == "detail"
    assert not (output_dir / "notes.txt").exists()
    assert result.renamed == []


def test_star_matches_dot_files(agent_root: Path, output_dir: Path) -> None:
    copy([group("*")], agent_root, output_dir)

    assert (output_dir / ".env.example").read_text() == "KEY="
    assert (output_dir / "notes.txt").exists()


def test_a_matched_directory_is_copied_with_everything_below_it(
    agent_root: Path, output_dir: Path
) -> None:
    result = copy([group("reports")], agent_root, output_dir)

    assert (output_dir / "reports" / "deep" / "detail.md").exists()
    assert result.copied == [output_dir / "reports"]


def test_matches_inside_a_matched_directory_are_not_copied_twice(
    agent_root: Path, output_dir: Path
) -> None:
    assert expand_output_globs(agent_root, ["reports/**"]) == [
        "reports/deep",
        "reports/summary.md",
    ]


def test_gitignore_is_not_applied(agent_root: Path, output_dir: Path) -> None:
    (agent_root / ".gitignore").write_text("*.txt\n")

    copy([group("notes.txt")], agent_root, output_dir)

    assert (output_dir / "notes.txt").exists()


def test_the_input_data_link_is_never_copied(agent_root: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "big.csv").write_text("1,2")
    os.symlink(data, agent_root / "read_only_data_source")

    assert "read_only_data_source" not in expand_output_globs(agent_root, ["*"])


def test_existing_destination_gets_a_numbered_timestamped_copy(
    agent_root: Path, output_dir: Path
) -> None:
    (output_dir).mkdir()
    (output_dir / "notes.txt").write_text("older")

    result = copy([group("notes.txt")], agent_root, output_dir)

    ((wanted, written),) = result.renamed
    assert wanted == output_dir / "notes.txt"
    assert re.fullmatch(r"notes_1_\d+\.txt", written.name)
    assert written.read_text() == "notes"
    assert (output_dir / "notes.txt").read_text() == "older"


def test_conflict_numbering_skips_taken_names(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("x")
    (tmp_path / "a_1_1700000000.md").write_text("x")

    assert resolve_conflict(tmp_path / "a.md", now=1700000000).name == "a_2_1700000000.md"


def test_more_than_99_conflicting_copies_is_an_error(output_dir: Path) -> None:
    output_dir.mkdir()
    (output_dir / "notes.txt").write_text("x")
    stamp = 1700000000
    for n in range(1, MAX_CONFLICT_COPIES + 1):
        (output_dir / f"notes_{n}_{stamp}.txt").write_text("x")

    with pytest.raises(FileExistsError, match=r"Too many conflicting copies of 'notes\.txt'"):
        resolve_conflict(output_dir / "notes.txt", now=stamp)


def test_finishing_an_interrupted_copy_keeps_what_it_already_copied(
    agent_root: Path, output_dir: Path
) -> None:
    (output_dir / "reports").mkdir(parents=True)
    (output_dir / "reports" / "summary.md").write_text("summary")  # copied before the crash
    (output_dir / "notes.txt").write_text("older")  # something else: kept, copy beside it

    result = copy([group("reports", "notes.txt")], agent_root, output_dir, resume=True)

    assert (output_dir / "reports" / "deep" / "detail.md").read_text() == "detail"
    assert sorted(p.name for p in (output_dir / "reports").iterdir()) == ["deep", "summary.md"]
    ((wanted, written),) = result.renamed
    assert wanted == output_dir / "notes.txt" and written.read_text() == "notes"
    assert (output_dir / "notes.txt").read_text() == "older"


def test_a_copy_cut_short_leaves_no_partial_output_and_the_resume_completes_it(
    agent_root: Path, output_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_copy2 = outputs_module.shutil.copy2

    def dies_halfway(source, destination, **kwargs):  # type: ignore[no-untyped-def]
        Path(destination).write_text("no")  # part of the bytes, then the process is gone
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs_module.shutil, "copy2", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        copy([group("notes.txt")], agent_root, output_dir)
    assert not (output_dir / "notes.txt").exists()

    monkeypatch.setattr(outputs_module.shutil, "copy2", real_copy2)
    result = copy([group("notes.txt")], agent_root, output_dir, resume=True)

    assert result.renamed == []
    assert sorted(p.name for p in output_dir.iterdir()) == ["notes.txt"]
    assert (output_dir / "notes.txt").read_text() == "notes"


def test_overwrite_replaces_existing_files(agent_root: Path, output_dir: Path) -> None:
    (output_dir / "reports").mkdir(parents=True)
    (output_dir / "reports" / "summary.md").write_text("older")
    (output_dir / "reports" / "keep.md").write_text("kept")

    result = copy([group("reports")], agent_root, output_dir, overwrite=True)

    assert (output_dir / "reports" / "summary.md").read_text() == "summary"
    assert (output_dir / "reports" / "keep.md").read_text() == "kept"
    assert result.renamed == []


def test_symlinks_are_copied_as_symlinks(agent_root: Path, output_dir: Path) -> None:
    os.symlink("summary.md", agent_root / "reports" / "latest.md")

    copy([group("reports/latest.md")], agent_root, output_dir)

    copied = output_dir / "reports" / "latest.md"
    assert copied.is_symlink() and os.readlink(copied) == "summary.md"


def test_before_copy_commands_run_first_in_agent_root_with_the_env(
    agent_root: Path, output_dir: Path
) -> None:
    result = copy(
        [group("build/*", before=["mkdir -p build", 'printf "$FLAVOUR" > build/artifact.txt'])],
        agent_root,
        output_dir,
        env={"FLAVOUR": "vanilla"},
    )

    assert (output_dir / "build" / "artifact.txt").read_text() == "vanilla"
    assert result.copied == [output_dir / "build" / "artifact.txt"]


def test_failing_before_copy_names_its_group_and_stops(agent_root: Path, output_dir: Path) -> None:
    groups = [
        group("notes.txt"),
        group("reports", before=["echo no compiler >&2; exit 4"]),
        group(".env.example"),
    ]

    with pytest.raises(OutputCopyError) as caught:
        copy(groups, agent_root, output_dir)

    assert caught.value.group_index == 1
    assert str(caught.value).startswith("Copy group 1 failed with: Command failed with exit code 4")
    assert "no compiler" in str(caught.value)
    assert (output_dir / "notes.txt").exists()
    assert not (output_dir / ".env.example").exists()


def test_copy_error_names_its_group(agent_root: Path, output_dir: Path) -> None:
    output_dir.mkdir()
    (output_dir / "reports").write_text("a file where a directory must go")

    with pytest.raises(OutputCopyError, match=r"^Copy group 0 failed with: "):
        copy([group("reports/summary.md")], agent_root, output_dir)


def test_skipped_before_copy_commands_do_not_run_and_the_copy_goes_on(
    agent_root: Path, output_dir: Path, tmp_path: Path
) -> None:
    from hankweave.runtime.rig import CommandPolicy

    notices: list[str] = []
    result = asyncio.run(copy_outputs(
        [group("notes.txt", before=[f"touch {tmp_path / 'ran'}", "exit 4"])],
        agent_root=agent_root, output_dir=output_dir, env={}, overwrite=False,
        commands=CommandPolicy.SKIP, on_notice=notices.append))

    assert not (tmp_path / "ran").exists()
    assert result.copied == [output_dir / "notes.txt"]
    assert len(notices) == 2 and notices[1] == (
        "output group 0 beforeCopy: `exit 4` skipped: a recording's commands are its author's"
        " code; pass --allow-commands to run them")
