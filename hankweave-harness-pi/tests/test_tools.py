"""The pi agent's tools: what each one answers, and that no path argument leaves the workspace."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hankweave_harness_pi.tools import (
    AGENT_TOOL_SPECS,
    ASK_HUMAN_SPEC,
    CLAUDE_NAMES,
    TOOL_SPECS,
    CappedOutput,
    Toolbox,
    ToolError,
    ToolOutcome,
    log_input,
    question_arguments,
)

ENV = {"PATH": os.environ.get("PATH", os.defpath), "GREETING": "hi"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "agentRoot"
    workspace.mkdir()
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workspace, with a secret the agent must not reach."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("the secret\n")
    return folder


@pytest.fixture
def data(tmp_path: Path, root: Path) -> Path:
    """The hank's data folder, linked into the workspace as read_only_data_source."""
    folder = tmp_path / "data"
    (folder / "tables").mkdir(parents=True)
    (folder / "tables" / "prices.csv").write_text("item,price\napple,3\n")
    (root / "read_only_data_source").symlink_to(folder)
    return folder


def run(toolbox: Toolbox, name: str, **arguments: Any) -> ToolOutcome:
    return asyncio.run(toolbox.run(name, arguments))


def ok(toolbox: Toolbox, name: str, **arguments: Any) -> str:
    outcome = run(toolbox, name, **arguments)
    assert not outcome.is_error, outcome.text
    return outcome.text


def error(toolbox: Toolbox, name: str, **arguments: Any) -> str:
    outcome = run(toolbox, name, **arguments)
    assert outcome.is_error, outcome.text
    return outcome.text


def make_toolbox(root: Path, **options: Any) -> Toolbox:
    return Toolbox(root, env=ENV, **options)


@pytest.fixture
def toolbox(root: Path) -> Toolbox:
    return make_toolbox(root)


def process_gone(pid: int) -> bool:
    """Ended: no such process, or a zombie that this container's init never reaps."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


# --- read -----------------------------------------------------------------------------------

def test_read_numbers_lines_like_cat_n(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("first\nsecond\n")
    assert ok(toolbox, "read", path="notes.md") == "     1\tfirst\n     2\tsecond"


def test_read_with_offset_and_limit_says_how_to_read_on(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    text = ok(toolbox, "read", path="notes.md", offset=3, limit=2)
    assert text == "     3\tline 3\n     4\tline 4\n... (6 more lines; read with offset=5)"


def test_read_returns_at_most_2000_lines_by_default(toolbox: Toolbox, root: Path) -> None:
    (root / "long.txt").write_text("x\n" * 2500)
    lines = ok(toolbox, "read", path="long.txt").split("\n")
    assert len(lines) == 2001
    assert lines[-1] == "... (500 more lines; read with offset=2001)"


def test_read_cuts_long_lines_with_a_note(toolbox: Toolbox, root: Path) -> None:
    (root / "min.js").write_text("a" * 5000 + "\n")
    text = ok(toolbox, "read", path="min.js")
    assert text.startswith("     1\t" + "a" * 2000 + " ... (line cut: 5000 characters in all)")


def test_read_offset_past_the_end_is_an_error(toolbox: Toolbox, root: Path) -> None:
    (root / "short.txt").write_text("one\n")
    assert "past the end" in error(toolbox, "read", path="short.txt", offset=5)


def test_read_of_a_binary_file_is_an_error(toolbox: Toolbox, root: Path) -> None:
    (root / "image.png").write_bytes(b"\x89PNG\0\0\0binary")
    assert "binary" in error(toolbox, "read", path="image.png")


def test_read_of_a_missing_file_or_a_folder_is_an_error(toolbox: Toolbox, root: Path) -> None:
    (root / "src").mkdir()
    assert "does not exist" in error(toolbox, "read", path="nope.txt")
    assert "folder" in error(toolbox, "read", path="src")


def test_read_refuses_what_is_not_a_regular_file(toolbox: Toolbox, root: Path) -> None:
    os.mkfifo(root / "pipe")
    assert error(toolbox, "read", path="pipe") == "pipe is not a regular file"


# --- write and edit -------------------------------------------------------------------------

def test_write_creates_parent_folders(toolbox: Toolbox, root: Path) -> None:
    text = ok(toolbox, "write", path="docs/plan/notes.md", content="a\nb\nc\n")
    assert text == "Wrote 3 lines to docs/plan/notes.md (new file)"
    assert (root / "docs/plan/notes.md").read_text() == "a\nb\nc\n"


def test_write_overwrites_and_says_so(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("old\n")
    assert "overwrote" in ok(toolbox, "write", path="notes.md", content="new")
    assert (root / "notes.md").read_text() == "new"


def test_write_below_a_file_is_an_error(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("x")
    assert error(toolbox, "write", path="notes.md/inner.md", content="y") == (
        "Cannot write notes.md/inner.md: part of its folder path is a file")


def test_edit_replaces_a_unique_match(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("alpha\nbeta\ngamma\n")
    assert ok(toolbox, "edit", path="notes.md", old_text="beta", new_text="BETA") == (
        "Edited notes.md at line 2")
    assert (root / "notes.md").read_text() == "alpha\nBETA\ngamma\n"


def test_edit_without_a_match_is_an_error(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("alpha\n")
    text = error(toolbox, "edit", path="notes.md", old_text="omega", new_text="x")
    assert text.startswith("old_text not found in notes.md")


def test_edit_with_several_matches_names_the_count(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("x = 1\nx = 1\nx = 1\n")
    text = error(toolbox, "edit", path="notes.md", old_text="x = 1", new_text="x = 2")
    assert text == ("old_text matches 3 places in notes.md; include more context to make it "
                    "unique")
    assert (root / "notes.md").read_text() == "x = 1\nx = 1\nx = 1\n"


def test_edit_with_empty_or_unchanged_text_is_an_error(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("alpha\n")
    assert "empty" in error(toolbox, "edit", path="notes.md", old_text="", new_text="x")
    assert "same" in error(toolbox, "edit", path="notes.md", old_text="alpha", new_text="alpha")


# --- bash -----------------------------------------------------------------------------------

def test_bash_returns_stdout_and_stderr_interleaved(toolbox: Toolbox) -> None:
    assert ok(toolbox, "bash", command="echo out; echo err >&2; echo out2") == "out\nerr\nout2"


def test_bash_non_zero_exit_is_an_error_with_the_code(toolbox: Toolbox) -> None:
    assert error(toolbox, "bash", command="echo failing; exit 2") == "failing\n[exit code 2]"


def test_bash_sees_the_given_environment_only(toolbox: Toolbox) -> None:
    assert ok(toolbox, "bash", command='echo "$GREETING ${HOME:-no home}"') == "hi no home"


def test_bash_runs_in_the_workspace_root(toolbox: Toolbox, root: Path) -> None:
    assert ok(toolbox, "bash", command="pwd -P") == os.path.realpath(root)


def test_bash_timeout_kills_the_process_group(toolbox: Toolbox) -> None:
    text = error(toolbox, "bash", command="sleep 60 & echo $!; sleep 60", timeout=1)
    assert text.startswith("Command timed out after 1 s and was killed. Output so far:\n")
    assert process_gone(int(text.splitlines()[-1]))


def test_bash_kills_processes_that_ignore_sigterm(toolbox: Toolbox) -> None:
    started = time.monotonic()
    text = error(toolbox, "bash", command="trap '' TERM; sleep 60 & echo $!; wait", timeout=0.5)
    assert process_gone(int(text.splitlines()[-1]))
    assert time.monotonic() - started < 30  # not the 60 s sleep (room for a loaded machine)


def test_bash_ends_background_processes_when_the_command_finishes(toolbox: Toolbox) -> None:
    pid = int(ok(toolbox, "bash", command="sleep 60 & echo $!"))
    assert process_gone(pid)


def test_bash_output_keeps_head_and_tail(root: Path) -> None:
    toolbox = make_toolbox(root, max_output_chars=1000)
    text = ok(toolbox, "bash", command="for i in $(seq 1 2000); do echo line$i; done")
    head, note, tail = text.partition("characters of output left out")
    assert head.startswith("line1\nline2\n")
    assert tail.endswith("line1999\nline2000")
    assert note and len(text) < 1100


def test_capped_output_counts_what_it_leaves_out() -> None:
    output = CappedOutput(10)
    for chunk in ("0123456789", "abcdefghij", "KLMNOPQRST"):
        output.add(chunk)
    assert output.render() == "01234\n\n... [20 characters of output left out] ...\n\nPQRST"


def test_cancelling_bash_kills_the_process_group(toolbox: Toolbox, root: Path) -> None:
    pid_file = root / "child.pid"

    async def cancel_midway() -> None:
        task = asyncio.create_task(toolbox.run(
            "bash", {"command": "sleep 60 & echo $! > child.pid; wait"}))
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert process_gone(int(pid_file.read_text()))


# --- grep, find, ls -------------------------------------------------------------------------

@pytest.fixture
def project(root: Path) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "core.py").write_text("import os\n\ndef Main():\n    pass\n")
    (root / "src" / "app.py").write_text("def main():\n    return 1\n")
    (root / "README.md").write_text("# main project\n")
    (root / "logo.bin").write_bytes(b"main\0\0")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("main = yes\n")
    return root


def test_grep_returns_path_line_and_text(toolbox: Toolbox, project: Path) -> None:
    assert ok(toolbox, "grep", pattern=r"def \w+\(") == (
        "src/app.py:1: def main():\nsrc/pkg/core.py:3: def Main():")


def test_grep_skips_binary_files_and_git(toolbox: Toolbox, project: Path) -> None:
    text = ok(toolbox, "grep", pattern="main")
    assert "logo.bin" not in text and ".git" not in text
    assert "README.md:1: # main project" in text


def test_grep_filters_by_glob_and_ignores_case(toolbox: Toolbox, project: Path) -> None:
    text = ok(toolbox, "grep", pattern="def main", glob="*.py", ignore_case=True)
    assert text == "src/app.py:1: def main():\nsrc/pkg/core.py:3: def Main():"
    assert ok(toolbox, "grep", pattern="def", path="src", glob="pkg/*.py") == (
        "src/pkg/core.py:3: def Main():")


def test_grep_stops_at_200_matches(toolbox: Toolbox, root: Path) -> None:
    (root / "many.txt").write_text("hit\n" * 300)
    lines = ok(toolbox, "grep", pattern="hit").split("\n")
    assert len(lines) == 201
    assert lines[-1].startswith("... (stopped at 200 matches")


def test_grep_invalid_regex_is_an_error(toolbox: Toolbox, project: Path) -> None:
    assert error(toolbox, "grep", pattern="def (").startswith("Invalid regex 'def (':")


def test_grep_without_matches_says_so(toolbox: Toolbox, project: Path) -> None:
    assert ok(toolbox, "grep", pattern="nowhere") == "No matches for 'nowhere' in ."


def test_find_returns_sorted_relative_paths(toolbox: Toolbox, project: Path) -> None:
    assert ok(toolbox, "find", pattern="**/*.py") == "src/app.py\nsrc/pkg/core.py"
    assert ok(toolbox, "find", pattern="*.{md,bin}") == "README.md\nlogo.bin"
    assert ok(toolbox, "find", pattern="pkg/*.py", path="src") == "src/pkg/core.py"


def test_find_stops_at_500_paths(toolbox: Toolbox, root: Path) -> None:
    for n in range(520):
        (root / f"f{n:03}.txt").write_text("")
    lines = ok(toolbox, "find", pattern="*.txt").split("\n")
    assert len(lines) == 501
    assert lines[-1].startswith("... (500 of 520 paths shown")


def test_ls_lists_sorted_entries_with_folders_marked(toolbox: Toolbox, project: Path) -> None:
    assert ok(toolbox, "ls") == ".git/\nREADME.md\nlogo.bin\nsrc/"
    assert ok(toolbox, "ls", path="src") == "app.py\npkg/"
    assert "is a file" in error(toolbox, "ls", path="README.md")


# --- confinement ----------------------------------------------------------------------------

def test_relative_escapes_are_refused(toolbox: Toolbox, root: Path, outside: Path) -> None:
    assert error(toolbox, "read", path="../outside/secret.txt") == (
        "Path ../outside/secret.txt is outside the workspace")
    assert "outside the workspace" in error(toolbox, "write", path="../x", content="x")
    assert "outside the workspace" in error(toolbox, "ls", path="..")
    assert not (root.parent / "x").exists()


def test_absolute_paths_outside_are_refused(toolbox: Toolbox) -> None:
    assert error(toolbox, "read", path="/etc/passwd") == "Path /etc/passwd is outside the workspace"
    assert "outside the workspace" in error(toolbox, "grep", pattern="root", path="/etc")


def test_absolute_path_inside_the_root_is_accepted(toolbox: Toolbox, root: Path) -> None:
    (root / "notes.md").write_text("inside\n")
    assert ok(toolbox, "read", path=str(root / "notes.md")) == "     1\tinside"
    assert ok(toolbox, "write", path=str(root / "new.md"), content="x") == (
        "Wrote 1 line to new.md (new file)")


def test_symlinked_file_pointing_out_is_refused(toolbox: Toolbox, root: Path,
                                                outside: Path) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    assert "outside the workspace" in error(toolbox, "read", path="link.txt")
    assert "outside the workspace" in error(toolbox, "write", path="link.txt", content="x")
    assert "outside the workspace" in error(toolbox, "edit", path="link.txt",
                                            old_text="secret", new_text="leaked")
    assert (outside / "secret.txt").read_text() == "the secret\n"


def test_symlinked_folder_pointing_out_is_refused(toolbox: Toolbox, root: Path,
                                                  outside: Path) -> None:
    (root / "escape").symlink_to(outside)
    assert "outside the workspace" in error(toolbox, "read", path="escape/secret.txt")
    assert "outside the workspace" in error(toolbox, "ls", path="escape")
    assert "outside the workspace" in error(toolbox, "write", path="escape/new/planted.txt",
                                            content="x")
    assert not (outside / "new").exists()


def test_dangling_symlink_pointing_out_cannot_be_written_through(toolbox: Toolbox, root: Path,
                                                                 outside: Path) -> None:
    (root / "trap.txt").symlink_to(outside / "not-yet.txt")
    assert "outside the workspace" in error(toolbox, "write", path="trap.txt", content="x")
    assert not (outside / "not-yet.txt").exists()


def test_symlinks_inside_the_root_are_fine(toolbox: Toolbox, root: Path) -> None:
    (root / "real").mkdir()
    (root / "real" / "notes.md").write_text("inside\n")
    (root / "alias").symlink_to(root / "real")
    assert ok(toolbox, "read", path="alias/notes.md") == "     1\tinside"
    ok(toolbox, "edit", path="alias/notes.md", old_text="inside", new_text="edited")
    assert (root / "real" / "notes.md").read_text() == "edited\n"


def test_searches_skip_symlinks_pointing_out(toolbox: Toolbox, root: Path,
                                             outside: Path) -> None:
    (root / "mine.txt").write_text("secret of mine\n")
    (root / "escape").symlink_to(outside)
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    assert ok(toolbox, "grep", pattern="secret") == "mine.txt:1: secret of mine"
    assert ok(toolbox, "find", pattern="**/*.txt") == "mine.txt"
    assert ok(toolbox, "ls") == "mine.txt"


def test_read_only_data_is_readable_through_its_link(root: Path, data: Path) -> None:
    toolbox = make_toolbox(root, read_only_roots=[data])
    assert ok(toolbox, "read", path="read_only_data_source/tables/prices.csv") == (
        "     1\titem,price\n     2\tapple,3")
    assert ok(toolbox, "grep", pattern="apple", path="read_only_data_source") == (
        "read_only_data_source/tables/prices.csv:2: apple,3")
    assert ok(toolbox, "find", pattern="*.csv", path="read_only_data_source") == (
        "read_only_data_source/tables/prices.csv")
    assert ok(toolbox, "ls") == "read_only_data_source/"
    assert ok(toolbox, "ls", path="read_only_data_source") == "tables/"


def test_read_only_data_is_never_written(root: Path, data: Path) -> None:
    toolbox = make_toolbox(root, read_only_roots=[data])
    assert "read-only" in error(toolbox, "write", path="read_only_data_source/new.csv",
                                content="x")
    assert "read-only" in error(toolbox, "edit", path="read_only_data_source/tables/prices.csv",
                                old_text="apple", new_text="pear")
    assert (data / "tables" / "prices.csv").read_text() == "item,price\napple,3\n"
    assert not (data / "new.csv").exists()


def test_a_read_only_root_holding_the_workspace_leaves_it_writable(root: Path) -> None:
    toolbox = make_toolbox(root, read_only_roots=[root.parent])
    ok(toolbox, "write", path="notes.md", content="x")
    assert "outside the workspace" in error(toolbox, "write", path="../x.md", content="x")
    (root.parent / "beside.txt").write_text("readable\n")
    assert ok(toolbox, "read", path="../beside.txt") == "     1\treadable"


def test_without_read_only_roots_the_data_link_is_outside(toolbox: Toolbox, root: Path,
                                                          data: Path) -> None:
    assert "outside the workspace" in error(toolbox, "read",
                                            path="read_only_data_source/tables/prices.csv")


# --- calls, specs and the log ---------------------------------------------------------------

def test_unknown_tool_is_an_error_listing_the_tools(toolbox: Toolbox) -> None:
    text = error(toolbox, "browse", url="https://example.com")
    assert text == "Unknown tool 'browse'; the tools are read, write, edit, bash, grep, find, ls"


def test_missing_or_ill_typed_arguments_are_errors(toolbox: Toolbox) -> None:
    assert error(toolbox, "read").startswith('read needs the argument "path"')
    assert error(toolbox, "edit", path="x", old_text="a").startswith(
        'edit needs the argument "new_text"')
    assert error(toolbox, "read", path="x", limit="many").startswith(
        'read: argument "limit" must be an integer')
    assert error(toolbox, "write", path=["x"], content="y").startswith(
        'write: argument "path" must be a string')


def test_claude_and_pi_spellings_and_numeric_strings_are_accepted(toolbox: Toolbox,
                                                                  root: Path) -> None:
    (root / "notes.md").write_text("one\ntwo\n")
    assert ok(toolbox, "read", file_path="notes.md", limit="1").startswith("     1\tone\n")
    ok(toolbox, "edit", filePath="notes.md", oldText="two", newText="2")
    assert (root / "notes.md").read_text() == "one\n2\n"


def test_log_input_uses_claude_spelling() -> None:
    assert log_input({"path": "a.md", "oldText": "x", "ignoreCase": True, "limit": 3}) == {
        "file_path": "a.md", "old_text": "x", "ignore_case": True, "limit": 3}
    assert log_input({"filePath": "b.md"}) == {"file_path": "b.md"}


def test_tool_specs_offer_the_seven_tools() -> None:
    names = [spec["function"]["name"] for spec in TOOL_SPECS]
    assert names == list(CLAUDE_NAMES)
    for spec in TOOL_SPECS:
        parameters = spec["function"]["parameters"]
        assert spec["type"] == "function" and spec["function"]["description"]
        assert set(parameters["required"]) <= set(parameters["properties"])


def test_the_model_is_offered_ask_human_after_the_seven_tools() -> None:
    names = [spec["function"]["name"] for spec in AGENT_TOOL_SPECS]
    assert names == [*CLAUDE_NAMES, "ask_human"]
    assert AGENT_TOOL_SPECS[-1] is ASK_HUMAN_SPEC
    parameters = ASK_HUMAN_SPEC["function"]["parameters"]
    assert parameters["required"] == ["question"]
    assert parameters["properties"]["options"] == {
        "type": "array", "items": {"type": "string"},
        "description": parameters["properties"]["options"]["description"]}


def test_question_arguments_take_a_question_and_optional_answers() -> None:
    assert question_arguments({"question": "Which?", "options": ["a", "b"]}) == (
        "Which?", ["a", "b"])
    assert question_arguments({"question": "Which?"}) == ("Which?", None)
    assert question_arguments({"question": "Which?", "options": []}) == ("Which?", None)
    with pytest.raises(ToolError, match='needs the argument "question"'):
        question_arguments({"options": ["a"]})
    with pytest.raises(ToolError, match='"options" must be an array of strings'):
        question_arguments({"question": "Which?", "options": "a or b"})
    with pytest.raises(ToolError, match='"question" must be a string'):
        question_arguments({"question": ["Which?"]})
