"""``file.updated`` and ``filetree.updated`` as runs send them (issue 36, item 1): a file the
agent writes is reported once it is written, with the bytes' fingerprint and the tool call
that wrote it; the ``checkpointedFiles`` in force are reported at the codon's start; what is
not watched is not reported, and a flood is capped."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hankweave.events.catalogue import make_event
from hankweave.runtime.file_events import FILE_EVENT_CAP, FileTracker, with_file_content
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_file_the_agent_writes_is_reported_with_its_bytes_and_tool_call(project):
    project.write_hank([codon("a"), codon("b")])
    outcome = project.run({"a": {"writeFiles": {"notes/plan.md": "one\n"}},
                           "b": {"writeFiles": {"notes/plan.md": "two\n"}}})

    updates = outcome.of_type("file.updated")
    assert [(u["path"], u["filename"], u["action"], u["sha256"], u["bytes"]) for u in updates] == [
        ("notes/plan.md", "plan.md", "created", sha("one\n"), 4),
        ("notes/plan.md", "plan.md", "modified", sha("two\n"), 4)]
    assert all(u["source"]["kind"] == "tool_use" and u["source"]["toolUseId"] for u in updates)
    # After its tool's result, before the next assistant line.
    kinds = [e["type"] for e in outcome.events]
    first = kinds.index("file.updated")
    assert kinds[first - 1] == "tool.result" and kinds[first + 1] == "filetree.updated"
    (tree, _) = outcome.of_type("filetree.updated")
    assert tree["tree"][0]["name"] == "notes" and tree["tree"][0]["isDirectory"]
    assert tree["tree"][0]["children"][0]["path"] == "notes/plan.md"


def test_the_checkpointed_files_in_force_are_reported_at_the_codons_start(project):
    project.write_hank([codon("a", checkpointedFiles=["*.md"]), codon("b")])
    outcome = project.run({"a": {"writeFiles": {"plan.md": "x", "scratch.txt": "y"}}})

    updates = outcome.of_type("file.updated")
    # a: its write of plan.md (scratch.txt is not checkpointed); b: plan.md exists at its start
    assert [(u["path"], u["source"]["kind"])
            for u in updates] == [("plan.md", "tool_use"), ("plan.md", "codon-start")]


def test_nothing_outside_the_workspace_or_in_its_own_folders_is_watched(tmp_path):
    root = tmp_path / "agentRoot"
    (root / ".git").mkdir(parents=True)
    sent: list[tuple[str, object]] = []
    tracker = FileTracker(root, [], lambda kind, data: sent.append((kind, data)), "a")
    for number, target in enumerate([str(tmp_path / "elsewhere.txt"), "../up.txt",
                                     ".git/config", ".hankweave/state.json"]):
        Path(tmp_path / "elsewhere.txt").write_text("x")
        tracker.tool_used(f"t{number}", "Write", {"file_path": target})
        tracker.tool_finished(f"t{number}", failed=False)
    tracker.tool_used("r", "Read", {"file_path": "read.txt"})
    (root / "failed.txt").write_text("x")
    tracker.tool_used("f", "Write", {"file_path": "failed.txt"})
    tracker.tool_finished("f", failed=True)

    assert sent == []


def test_a_flood_of_writes_is_capped_with_one_notice(tmp_path):
    root = tmp_path / "agentRoot"
    root.mkdir()
    sent: list[str] = []
    tracker = FileTracker(root, [], lambda kind, data: sent.append(kind), "a")
    for number in range(FILE_EVENT_CAP + 20):
        (root / f"f{number}.txt").write_text(str(number))
        tracker.tool_used(f"t{number}", "Write", {"file_path": f"f{number}.txt"})
        tracker.tool_finished(f"t{number}", failed=False)

    assert sent.count("file.updated") == FILE_EVENT_CAP
    assert sent.count("info") == 1


def test_a_sentinel_sees_the_content_only_while_the_reported_bytes_are_there(tmp_path):
    (tmp_path / "plan.md").write_text("# Plan\n")
    event = make_event("file.updated", {"path": "plan.md", "filename": "plan.md",
                                        "action": "created", "sha256": sha("# Plan\n"),
                                        "bytes": 7})

    assert with_file_content(event, tmp_path).data["content"] == "# Plan\n"
    (tmp_path / "plan.md").write_text("changed")
    assert "content" not in with_file_content(event, tmp_path).data
