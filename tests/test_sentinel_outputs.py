"""A sentinel's output files: where they resolve, what is refused, and what each write leaves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hankweave.config.hank import SentinelOutputPaths
from hankweave.sentinels.outputs import SentinelOutputFiles, default_log_name

EPOCH = 1_767_225_600_000


@pytest.fixture
def exec_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


def outputs_root(exec_dir: Path) -> Path:
    return exec_dir / ".hankweave" / "sentinels" / "outputs"


def resolve(
    exec_dir: Path,
    *,
    structured: bool = False,
    log_file: str | None = None,
    last_value_file: str | None = None,
    agent_root: Path | None = None,
    codon_id: str = "review#2",
) -> SentinelOutputFiles:
    raw = {key: value for key, value in (("logFile", log_file),
                                         ("lastValueFile", last_value_file)) if value is not None}
    paths = SentinelOutputPaths.model_validate(raw, by_alias=True, by_name=False) if raw else None
    return SentinelOutputFiles.resolve(
        sentinel_id="watcher",
        codon_id=codon_id,
        epoch_ms=EPOCH,
        structured=structured,
        output_paths=paths,
        outputs_root=outputs_root(exec_dir),
        execution_dir=exec_dir,
        agent_root=agent_root or exec_dir / "agentRoot",
    )


# --------------------------------------------------------------------------------------------
# Resolving the paths
# --------------------------------------------------------------------------------------------


def test_default_log_of_a_text_sentinel_is_markdown(exec_dir: Path) -> None:
    files = resolve(exec_dir)
    assert files.log_file == outputs_root(exec_dir) / "watcher" / f"watcher-review#2-{EPOCH}.md"
    assert files.last_value_file is None


def test_default_log_of_a_structured_sentinel_is_ndjson(exec_dir: Path) -> None:
    files = resolve(exec_dir, structured=True)
    assert files.log_file.name == f"watcher-review#2-{EPOCH}.ndjson"


def test_default_log_name_replaces_separators_in_the_codon_id() -> None:
    assert default_log_name("watcher", "a/../b", 7, False) == "watcher-a_.._b-7.md"


def test_output_paths_without_settings_are_the_defaults(exec_dir: Path) -> None:
    assert resolve(exec_dir, log_file="") == resolve(exec_dir)


def test_a_bare_name_goes_in_the_sentinels_own_directory(exec_dir: Path) -> None:
    files = resolve(exec_dir, log_file="notes.md", last_value_file="latest.txt")
    own = outputs_root(exec_dir) / "watcher"
    assert files.log_file == own / "notes.md"
    assert files.last_value_file == own / "latest.txt"


def test_a_path_with_a_slash_is_taken_from_the_agent_root(exec_dir: Path) -> None:
    files = resolve(exec_dir, log_file="reports/notes.md", last_value_file="./latest.txt")
    assert files.log_file == exec_dir / "agentRoot" / "reports" / "notes.md"
    assert files.last_value_file == exec_dir / "agentRoot" / "latest.txt"


def test_a_path_may_climb_from_the_agent_root_into_the_execution_dir(exec_dir: Path) -> None:
    files = resolve(exec_dir, log_file="../findings/notes.md")
    assert files.log_file == exec_dir / "findings" / "notes.md"


def test_an_agent_root_outside_the_execution_dir_is_allowed(tmp_path: Path,
                                                            exec_dir: Path) -> None:
    agent_root = tmp_path / "workspace"
    files = resolve(exec_dir, log_file="out/log.md", agent_root=agent_root)
    assert files.log_file == agent_root / "out" / "log.md"
    assert files.relative_to_execution(files.log_file) == str(agent_root / "out" / "log.md")


def test_an_absolute_path_inside_the_execution_dir_is_allowed(exec_dir: Path) -> None:
    target = exec_dir / "logs" / "s.md"
    assert resolve(exec_dir, log_file=str(target)).log_file == target


@pytest.mark.parametrize(("setting", "raw"), [
    ("logFile", "../../outside.md"),
    ("logFile", "/etc/passwd"),
    ("lastValueFile", "a/../../../x.txt"),
    ("lastValueFile", "../../../../tmp/x.txt"),
])
def test_paths_that_escape_are_rejected(exec_dir: Path, setting: str, raw: str) -> None:
    kwargs = {"log_file": raw} if setting == "logFile" else {"last_value_file": raw}
    with pytest.raises(ValueError) as error:
        resolve(exec_dir, **kwargs)
    message = str(error.value)
    assert f"outputPaths.{setting}" in message and raw in message and "outside" in message


def test_the_execution_dir_itself_is_not_a_file(exec_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"outputPaths\.logFile"):
        resolve(exec_dir, log_file=str(exec_dir))


@pytest.mark.parametrize("raw", ["..", ".", "logs/", "logs/.."])
def test_names_of_directories_are_rejected(exec_dir: Path, raw: str) -> None:
    with pytest.raises(ValueError, match="names a directory"):
        resolve(exec_dir, log_file=raw)


@pytest.mark.parametrize("raw", ["out.ndjson", "out.jsonl", "dir/out.jsonl"])
def test_structured_logs_accept_line_json_extensions(exec_dir: Path, raw: str) -> None:
    assert resolve(exec_dir, structured=True, log_file=raw).log_file.name == Path(raw).name


@pytest.mark.parametrize("raw", ["out.md", "out.json", "out.NDJSON", "out.ndjson.txt"])
def test_structured_logs_refuse_other_extensions(exec_dir: Path, raw: str) -> None:
    with pytest.raises(ValueError, match=r"outputPaths\.logFile .* \.ndjson or \.jsonl"):
        resolve(exec_dir, structured=True, log_file=raw)


def test_a_structured_last_value_must_be_json(exec_dir: Path) -> None:
    assert resolve(exec_dir, structured=True, last_value_file="v.json").last_value_file
    with pytest.raises(ValueError, match=r"outputPaths\.lastValueFile 'v\.txt' must end with "
                                         r"\.json"):
        resolve(exec_dir, structured=True, last_value_file="v.txt")


def test_text_output_has_no_extension_rule(exec_dir: Path) -> None:
    files = resolve(exec_dir, log_file="log.ndjson", last_value_file="v.txt")
    assert (files.log_file.name, files.last_value_file and files.last_value_file.name) == (
        "log.ndjson", "v.txt")


def test_log_and_last_value_cannot_be_one_file(exec_dir: Path) -> None:
    with pytest.raises(ValueError, match="same file"):
        resolve(exec_dir, log_file="same.md", last_value_file="same.md")


def test_paths_relative_to_the_execution_dir(exec_dir: Path) -> None:
    files = resolve(exec_dir, last_value_file="v.txt")
    assert files.relative_to_execution(files.log_file) == (
        f".hankweave/sentinels/outputs/watcher/watcher-review#2-{EPOCH}.md")


# --------------------------------------------------------------------------------------------
# Creating and writing
# --------------------------------------------------------------------------------------------


def test_create_makes_an_empty_log_and_no_last_value(exec_dir: Path) -> None:
    files = resolve(exec_dir, last_value_file="deep/dir/v.txt")
    files.create()
    assert files.log_file.read_bytes() == b""
    assert files.last_value_file is not None
    assert files.last_value_file.parent.is_dir()
    assert not files.last_value_file.exists()


def test_create_empties_an_existing_log(exec_dir: Path) -> None:
    files = resolve(exec_dir, log_file="shared.md")
    files.create()
    files.write_text("old", "\n")
    files.create()
    assert files.log_file.read_bytes() == b""


def test_text_answers_are_appended_after_the_join_string(exec_dir: Path) -> None:
    files = resolve(exec_dir)
    files.create()
    files.write_text("first", "\n---\n")
    files.write_text("second ✓", "\n---\n")
    assert files.log_file.read_text(encoding="utf-8") == "\n---\nfirst\n\n---\nsecond ✓\n"


def test_text_last_value_holds_only_the_latest_answer(exec_dir: Path) -> None:
    files = resolve(exec_dir, last_value_file="latest.md")
    files.create()
    files.write_text("a much longer first answer", "")
    files.write_text("short", "")
    assert files.last_value_file is not None
    assert files.last_value_file.read_text(encoding="utf-8") == "short"
    assert files.log_file.read_text(encoding="utf-8") == "a much longer first answer\nshort\n"


def test_structured_answers_are_json_lines(exec_dir: Path) -> None:
    files = resolve(exec_dir, structured=True)
    files.create()
    values: list[Any] = [{"verdict": "ok", "score": 3}, {"note": "é", "tags": ["a", "b"]}]
    for value in values:
        files.write_structured(value)
    text = files.log_file.read_text(encoding="utf-8")
    assert text == '{"verdict":"ok","score":3}\n{"note":"é","tags":["a","b"]}\n'
    assert [json.loads(line) for line in text.splitlines()] == values


def test_structured_last_value_is_pretty_json(exec_dir: Path) -> None:
    files = resolve(exec_dir, structured=True, last_value_file="out/latest.json")
    files.create()
    files.write_structured({"verdict": "bad"})
    files.write_structured({"verdict": "ok", "items": [1]})
    assert files.last_value_file is not None
    assert files.last_value_file.read_text(encoding="utf-8") == (
        '{\n  "verdict": "ok",\n  "items": [\n    1\n  ]\n}')


def test_a_value_that_is_not_json_is_refused_before_writing(exec_dir: Path) -> None:
    files = resolve(exec_dir, structured=True)
    files.create()
    with pytest.raises(ValueError):
        files.write_structured({"score": float("nan")})
    assert files.log_file.read_bytes() == b""


def test_writes_leave_no_temporary_files(exec_dir: Path) -> None:
    files = resolve(exec_dir, last_value_file="latest.md")
    files.create()
    files.write_text("one", "")
    files.write_text("two", "")
    assert sorted(p.name for p in files.log_file.parent.iterdir()) == sorted(
        [files.log_file.name, "latest.md"])


def test_a_write_without_create_still_lands(exec_dir: Path) -> None:
    files = resolve(exec_dir)
    files.write_text("x", "")
    assert files.log_file.read_text(encoding="utf-8") == "x\n"


def test_a_failed_write_raises_os_error(exec_dir: Path) -> None:
    files = resolve(exec_dir)
    files.log_file.parent.mkdir(parents=True)
    files.log_file.mkdir()  # a directory where the log should be
    with pytest.raises(OSError):
        files.write_text("x", "")
