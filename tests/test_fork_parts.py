"""The parts of ``hankweave fork`` and ``compare`` that need no checkpoint backend: where a fork
leaves its source, the state and journal it keeps, the family, and how compare pairs codons
and shows a file (docs/fork.md).  The journeys through the CLI, on both backends, are in
integration/test_fork_journeys.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hankweave.app.compare import FileDifference, _content_change, _pairs, _text_diff
from hankweave.app.fork import ForkError, ForkPoint, cut_state, fork_point, journal_prefix
from hankweave.checkpoints import StoredFile
from hankweave.execution.family import family_of
from hankweave.execution.layout import ExecutionLayout
from hankweave.execution.meta import ExecutionMeta, ForkOrigin, save_execution_meta
from hankweave.state.types import Interruption
from tests.state_builders import (
    completed,
    continuation_run,
    failed,
    fresh_run,
    make_state,
    running,
    ts,
)


def test_a_fork_point_is_the_newest_finished_record_in_the_thread() -> None:
    state = make_state(
        continuation_run("r2", completed("b", sha="b2"), parent="r1", after="a"),
        fresh_run("r1", completed("a", sha="a1"), completed("b", sha="b1")))

    assert fork_point(state, "b") == ForkPoint("b", "r2", "b2", ts(1))
    assert fork_point(state, "a").run_id == "r1"


def test_a_codon_that_never_finished_is_refused_with_the_choices() -> None:
    state = make_state(fresh_run("r1", completed("a"), failed("b"), running("c"),
                                 status="running"))

    with pytest.raises(ForkError) as raised:
        fork_point(state, "b")
    assert "its newest record is failed" in str(raised.value)
    assert "Choose one of: a" in str(raised.value)
    with pytest.raises(ForkError, match=r"it is not in the execution's thread.*Choose one of: a"):
        fork_point(state, "zzz")


def test_the_cut_state_ends_with_the_fork_point_and_ends_a_running_run() -> None:
    older = fresh_run("r1", completed("a", sha="a1"), failed("b"))
    current = continuation_run("r2", completed("b", sha="b2"), running("c"), parent="r1",
                               after="a", status="running")
    state = make_state(current, older)
    state = state.model_copy(update={"interruptions": [
        _interruption("q1", "r2", "b", ts(0)), _interruption("q2", "r2", "c", ts(0))]})

    cut = cut_state(state, fork_point(state, "b"))

    assert [run.run_id for run in cut.runs] == ["r2", "r1"]
    assert [c.codon_id for c in cut.runs[0].codons] == ["b"]
    assert cut.runs[0].status == "completed" and cut.runs[0].end_time == ts(1)
    assert cut.runs[1] == older  # what ended before is kept as it was
    assert [item.id for item in cut.interruptions] == ["q1"]
    assert cut.current_run_id == "r2"
    assert state.runs[0].status == "running"  # the source's state object is not changed


def test_a_later_run_is_left_out() -> None:
    state = make_state(
        continuation_run("r2", completed("c"), parent="r1", after="b"),
        fresh_run("r1", completed("a"), completed("b")))

    cut = cut_state(state, fork_point(state, "a"))

    assert [run.run_id for run in cut.runs] == ["r1"]
    assert [c.codon_id for c in cut.runs[0].codons] == ["a"]


def _interruption(item_id: str, run_id: str, codon_id: str, at: str) -> Interruption:
    return Interruption(id=item_id, run_id=run_id, codon_id=codon_id, kind="question",
                        question="?", created_at=at)


def _event(seq: int, kind: str, run_id: str, **data: object) -> bytes:
    return (json.dumps({"seq": seq, "id": f"e{seq}", "timestamp": ts(seq), "type": kind,
                        "data": data, "runId": run_id}, separators=(",", ":")) + "\n").encode()


def test_the_journal_prefix_ends_at_the_fork_point_s_completion(tmp_path: Path) -> None:
    layout = ExecutionLayout(tmp_path)
    layout.events_dir.mkdir(parents=True)
    lines = [
        _event(1, "codon.completed", "r1", codonId="b", success=False),
        _event(2, "codon.completed", "r1", codonId="a", success=True),
        _event(3, "codon.completed", "r2", codonId="b", success=True),
        _event(4, "codon.started", "r2", codonId="c"),
    ]
    layout.events_file.write_bytes(b"".join(lines) + b'{"seq":5,"torn')

    def prefix(point: ForkPoint) -> bytes:
        return b"".join(journal_prefix(layout, point))

    assert prefix(ForkPoint("b", "r2", "sha", ts(3))) == b"".join(lines[:3])
    assert prefix(ForkPoint("a", "r1", "sha", ts(2))) == b"".join(lines[:2])
    # A point the journal never completed (a torn tail): the whole complete journal, no torn line.
    assert prefix(ForkPoint("c", "r2", "sha", ts(5))) == b"".join(lines)


def _execution(path: Path, origin: ForkOrigin | None) -> Path:
    layout = ExecutionLayout(path)
    layout.hankweave_dir.mkdir(parents=True)
    save_execution_meta(layout.meta_file, ExecutionMeta(
        read_only_source_data_path="/data", data_hash="h", created_at=ts(0), last_used=ts(0),
        forked_from=origin))
    return layout.path


def _origin(source: Path, codon: str, at: int) -> ForkOrigin:
    return ForkOrigin(execution=str(source), codon=codon, run_id="r1", checkpoint="c" * 40,
                      forked_at=ts(at))


def test_the_family_follows_the_sources_and_finds_the_forks_beside(tmp_path: Path) -> None:
    root = _execution(tmp_path / "exec", None)
    first = _execution(tmp_path / "exec-fork-1", _origin(root, "draft", 1))
    second = _execution(tmp_path / "exec-fork-2", _origin(root, "outline", 2))
    grandchild = _execution(tmp_path / "deeper", _origin(first, "review", 3))
    (tmp_path / "not-an-execution").mkdir()

    assert [(m.path, m.codon) for m in family_of(root).forks] == [
        (str(first), "draft"), (str(second), "outline")]
    assert family_of(root).ancestors == []
    assert [(m.path, m.codon) for m in family_of(grandchild).ancestors] == [
        (str(first), "review"), (str(root), "draft")]
    assert family_of(Path(tmp_path / "deeper")).forks == []


def test_a_gone_source_and_a_cycle_end_the_chain(tmp_path: Path) -> None:
    orphan = _execution(tmp_path / "orphan", _origin(tmp_path / "deleted", "a", 1))
    [gone] = family_of(orphan).ancestors
    assert gone.path == str(tmp_path / "deleted") and not gone.exists

    a = tmp_path / "a"
    _execution(a, _origin(tmp_path / "b", "x", 1))
    _execution(tmp_path / "b", _origin(a, "y", 2))
    assert len(family_of(a).ancestors) == 2  # b, then a again: stop


def test_codons_pair_by_id_in_order() -> None:
    assert list(_pairs(["a", "b", "c"], ["a", "b", "c"])) == [(0, 0), (1, 1), (2, 2)]
    assert list(_pairs(["a", "l#0", "l#1", "z"], ["a", "l#0", "z"])) == [
        (0, 0), (1, 1), (2, None), (3, 2)]
    assert list(_pairs(["a", "x"], ["a", "y"])) == [(0, 0), (1, None), (None, 1)]


def test_a_text_change_is_a_unified_diff_and_a_binary_change_gives_sizes() -> None:
    one, other = StoredFile("sha256:1", 6), StoredFile("sha256:2", 6, executable=True)

    text = _content_change("notes.md", one, other, b"a\nb\nc\n", b"a\nB\nc\n")
    assert text == FileDifference(path="notes.md", change="changed", size_a=6, size_b=6,
                                  mode="executable", diff=_text_diff("a\nb\nc\n", "a\nB\nc\n",
                                                                     "notes.md")[0])
    assert "-b\n+B\n" in (text.diff or "")
    binary = _content_change("blob.bin", one, other, b"\0\1", b"\0\2")
    assert binary.binary and binary.diff is None


def test_a_long_diff_is_cut_and_says_so() -> None:
    diff, cut = _text_diff("".join(f"{i}\n" for i in range(500)), "", "long.txt")
    assert cut and diff.count("\n") == 200
    assert _text_diff("no newline", "no newline at all", "f")[0].endswith(
        "\\ No newline at end of file\n")


def test_a_fork_s_result_counts_its_time_from_its_own_first_run(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from hankweave.runtime.result import _own_first_run

    inherited, own = fresh_run("r1", completed("a")), fresh_run("r2", completed("b"))
    own = own.model_copy(update={"start_time": ts(60)})
    ctx = SimpleNamespace(layout=ExecutionLayout(tmp_path))
    _execution(tmp_path, None)
    assert _own_first_run(ctx, [own, inherited]) is inherited  # type: ignore[arg-type]
    save_execution_meta(ExecutionLayout(tmp_path).meta_file, ExecutionMeta(
        read_only_source_data_path="/data", data_hash="h", created_at=ts(0), last_used=ts(0),
        forked_from=_origin(tmp_path / "source", "a", 50)))
    assert _own_first_run(ctx, [own, inherited]) is own  # type: ignore[arg-type]


def test_the_journal_cut_keeps_a_retry_and_a_skipped_codon_s_end(tmp_path: Path) -> None:
    layout = ExecutionLayout(tmp_path)
    layout.events_dir.mkdir(parents=True)
    lines = [
        _event(1, "codon.started", "r1", codonId="b"),
        _event(2, "codon.completed", "r1", codonId="b", success=False),  # failed, retried
        _event(3, "codon.started", "r1", codonId="b"),
        _event(4, "codon.completed", "r1", codonId="b", success=True),
        _event(5, "codon.started", "r1", codonId="c"),
        _event(6, "codon.completed", "r1", codonId="c", success=False),  # skipped
        _event(7, "codon.started", "r1", codonId="d"),
    ]
    layout.events_file.write_bytes(b"".join(lines))

    assert b"".join(journal_prefix(layout, ForkPoint("b", "r1", "s", ts(4)))) == \
        b"".join(lines[:4])
    assert b"".join(journal_prefix(layout, ForkPoint("c", "r1", "s", ts(6)))) == \
        b"".join(lines[:6])


def test_a_fifo_beside_an_execution_is_no_fork_and_never_blocks(tmp_path: Path) -> None:
    import os
    from concurrent.futures import ThreadPoolExecutor

    root = _execution(tmp_path / "exec", None)
    (tmp_path / "trap" / ".hankweave").mkdir(parents=True)
    os.mkfifo(tmp_path / "trap" / ".hankweave" / "execution-meta.json")

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(family_of, root).result(timeout=10).forks == []


def test_a_family_line_is_printed_as_text(tmp_path: Path) -> None:
    from hankweave.cli.inspect import family_lines

    root = _execution(tmp_path / "exec", None)
    fork = _execution(tmp_path / "fork", _origin(root, "draft\x1b[41m[/]", 1))
    [line] = family_lines(family_of(fork))
    assert "\x1b" not in line and "draft\\x1b[41m[/]" in line
