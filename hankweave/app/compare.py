"""``hankweave compare A B``: two executions codon by codon (docs/fork.md).

The codons of the two threads are paired by id in order (a codon only one side ran is a row
of its own).  For each pair: status, cost, tokens, time and turns; whether the workspaces at
the codons' end checkpoints hold the same files, and which were added, removed or changed
(a unified diff for text, the sizes for a binary); whether the codons' outputs (the agent's
final answer) are the same.  The first pair where anything of that differs is where the
executions diverge.

Both executions are read as ``inspect`` reads them: no lock, nothing written, so either may
be running.  A fork shares its history's checkpoint ids with its source, so those codons
compare equal without reading anything; other checkpoints are compared by their stores
(:meth:`~hankweave.checkpoints.CheckpointStore.differing_files`: equal subtrees and file
lists skipped), and only the files whose digests differ are read, each content once.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from hankweave.checkpoints import CheckpointError, CheckpointStore, StoredFile
from hankweave.execution.document import as_found
from hankweave.execution.layout import ExecutionLayout, codon_log_name, plain_name
from hankweave.execution.meta import ExecutionMetaError, ForkOrigin, load_execution_meta
from hankweave.fsutil import parse_iso
from hankweave.registry import Registry
from hankweave.state.costs import codon_cost, codon_tokens
from hankweave.state.loading import StateLoadError, read_state_strict
from hankweave.state.thread import ThreadCodon, analyze_execution_thread
from hankweave.state.types import CodonExecution, HankweaveState, end_checkpoint

TEXT_LIMIT = 1 << 20
"""A file larger than this (or not UTF-8, or holding a NUL) is compared by size only."""
DIFF_LINES = 200
"""The longest unified diff kept for one file; a longer one is cut and says so."""


class CompareError(Exception):
    """An execution cannot be compared; the message says which and why."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True)


class CodonSide(_Model):
    """One execution's record of a codon."""

    run_id: str
    status: str
    cost: float
    input_tokens: int
    output_tokens: int
    seconds: float | None
    turns: int | None
    checkpoint: str | None
    """The end checkpoint (completion, error or skip); None while the codon runs."""


class FileDifference(_Model):
    path: str
    change: Literal["added", "removed", "changed"]
    """From A to B: ``added`` is only in B's workspace."""
    binary: bool = False
    size_a: int | None = None
    size_b: int | None = None
    mode: str | None = None
    """A change of kind only: ``executable``, ``not executable``, ``symlink``, ``file``."""
    diff: str | None = None
    """The unified diff of a text file (``a/PATH`` to ``b/PATH``)."""
    truncated: bool = False


class CodonComparison(_Model):
    position: int
    codon_id: str
    a: CodonSide | None
    b: CodonSide | None
    same_checkpoint: bool
    """Both sides name the same checkpoint: shared history, nothing read."""
    same_workspace: bool | None
    """None when a side has no end checkpoint to compare."""
    files: list[FileDifference] = []
    same_output: bool | None = None
    output_diff: str | None = None
    differences: list[str] = []
    """What differs, in words (``status``, ``workspace``, ``output``, ``only in A``)."""


class ExecutionSummary(_Model):
    path: str
    forked_from: ForkOrigin | None = None
    status: str
    cost: float
    input_tokens: int
    output_tokens: int
    codons: int


class Comparison(_Model):
    """``hankweave compare A B --json``."""

    a: ExecutionSummary
    b: ExecutionSummary
    relation: str | None
    """How the two are related (``B is a fork of A at draft``), when one forked the other."""
    codons: list[CodonComparison]
    first_divergence: int | None
    """The position (1-based) of the first codon that differs; None when none does."""


@dataclass
class _Execution:
    layout: ExecutionLayout
    state: HankweaveState
    thread: list[ThreadCodon]
    """Oldest first."""
    forked_from: ForkOrigin | None
    open_store: Callable[[], CheckpointStore | None]
    _store: CheckpointStore | None = None
    _opened: bool = False
    contents: dict[str, bytes] = field(default_factory=dict)
    """File contents read, by digest."""

    def store(self) -> CheckpointStore | None:
        if not self._opened:
            self._store, self._opened = self.open_store(), True
        return self._store

    def read(self, checkpoint: str, path: str, entry: StoredFile) -> bytes:
        """A file's bytes, read once per content: a change carried on through the codons
        after it is the same content at every one of them."""
        if entry.digest in self.contents:
            return self.contents[entry.digest]
        store = self.store()
        assert store is not None
        try:
            data = store.read_file(checkpoint, path)
        except CheckpointError as exc:
            raise CompareError(f"{self.layout.path}: cannot read {path} of checkpoint "
                               f"{checkpoint[:12]}: {exc}") from None
        self.contents[entry.digest] = data
        return data


def compare_executions(a: Path, b: Path, *, registry: Registry) -> Comparison:
    """Compare the executions in ``a`` and ``b`` (see the module docstring)."""
    left, right = _open(a, registry), _open(b, registry)
    pairs = list(_pairs([item.codon.codon_id for item in left.thread],
                        [item.codon.codon_id for item in right.thread]))
    rows = [_compare_codon(position, left, right, i, j)
            for position, (i, j) in enumerate(pairs, start=1)]
    first = next((row.position for row in rows if row.differences), None)
    return Comparison(a=_summary(left), b=_summary(right), relation=_relation(left, right),
                      codons=rows, first_divergence=first)


def _open(path: Path, registry: Registry) -> _Execution:
    layout = ExecutionLayout(path)
    if not layout.state_file.exists() and not layout.state_log_file.exists():
        raise CompareError(f"{layout.path}: not an execution directory (no .hankweave/state.json)")
    try:
        state = as_found(layout.path, read_state_strict(layout.hankweave_dir)[0])
    except (StateLoadError, OSError) as exc:
        raise CompareError(f"cannot read the state of {layout.path}: {exc}") from None
    try:
        forked_from = load_execution_meta(layout.meta_file).forked_from
    except ExecutionMetaError:
        forked_from = None

    def open_store() -> CheckpointStore | None:
        from hankweave.app.backends import detect_backend

        backend = detect_backend(layout, state, registry)
        return backend(layout.path) if backend is not None else None

    thread = list(reversed(analyze_execution_thread(state).codons))
    return _Execution(layout, state, thread, forked_from, open_store)


def _pairs(left: list[str], right: list[str]) -> Iterator[tuple[int | None, int | None]]:
    """Indexes into both threads, paired by codon id in order (``None``: only one side)."""
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            yield from zip(range(i1, i2), range(j1, j2), strict=True)
            continue
        common = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for offset in range(common):
            if left[i1 + offset] == right[j1 + offset]:
                yield i1 + offset, j1 + offset
            else:
                yield i1 + offset, None
                yield None, j1 + offset
        for i in range(i1 + common, i2):
            yield i, None
        for j in range(j1 + common, j2):
            yield None, j


def _compare_codon(position: int, left: _Execution, right: _Execution,
                   i: int | None, j: int | None) -> CodonComparison:
    a = left.thread[i] if i is not None else None
    b = right.thread[j] if j is not None else None
    codon_id = (a or b).codon.codon_id  # type: ignore[union-attr]
    side_a, side_b = (_side(item) if item else None for item in (a, b))
    row = CodonComparison(position=position, codon_id=codon_id, a=side_a, b=side_b,
                          same_checkpoint=False, same_workspace=None)
    if side_a is None or side_b is None:
        row.differences.append("only in A" if side_b is None else "only in B")
        return row
    if side_a.status != side_b.status:
        row.differences.append("status")
    if side_a.checkpoint and side_a.checkpoint == side_b.checkpoint:
        row.same_checkpoint = row.same_workspace = True
    elif side_a.checkpoint and side_b.checkpoint:
        row.files = _workspace_diff(left, side_a.checkpoint, right, side_b.checkpoint)
        row.same_workspace = not row.files
        if row.files:
            row.differences.append("workspace")
    out_a = _final_answer(left.layout, side_a.run_id, codon_id)
    out_b = _final_answer(right.layout, side_b.run_id, codon_id)
    if out_a is not None or out_b is not None:
        row.same_output = out_a == out_b
        if not row.same_output:
            # An answer is text, not a file: no "no newline at end" marker.
            row.output_diff = _text_diff(f"{out_a or ''}\n", f"{out_b or ''}\n", "output")[0]
            row.differences.append("output")
    return row


def _side(item: ThreadCodon) -> CodonSide:
    record = item.codon
    tokens = codon_tokens(record)
    return CodonSide(run_id=item.run_id, status=record.status, cost=codon_cost(record),
                     input_tokens=tokens.input_tokens, output_tokens=tokens.output_tokens,
                     seconds=_seconds(record),
                     turns=getattr(record, "assistant_turn_count", None)
                     or getattr(record, "assistant_message_count", None),
                     checkpoint=end_checkpoint(record))


def _seconds(record: CodonExecution) -> float | None:
    end = getattr(record, "end_time", None)
    if not end:
        return None
    return round((parse_iso(end) - parse_iso(record.start_time)).total_seconds(), 3)


def _workspace_diff(left: _Execution, a: str, right: _Execution, b: str
                    ) -> list[FileDifference]:
    store_a, store_b = left.store(), right.store()
    if store_a is None or store_b is None:
        missing = left if store_a is None else right
        raise CompareError(f"{missing.layout.path}: no installed checkpoint backend holds its "
                           "checkpoints")
    try:
        differing = store_a.differing_files(a, store_b, b)
    except CheckpointError as exc:
        raise CompareError(f"cannot compare checkpoint {a[:12]} of {left.layout.path} with "
                           f"{b[:12]} of {right.layout.path}: {exc}") from None
    found: list[FileDifference] = []
    for path, (one, other) in differing.items():
        change = _file_change(path, left, a, one, right, b, other)
        if change is not None:
            change.path = _json_safe(path)
            found.append(change)
    return found


def _file_change(path: str, left: _Execution, a: str, one: StoredFile | None,
                 right: _Execution, b: str, other: StoredFile | None
                 ) -> FileDifference | None:
    """How the file at ``path`` differs (None: it does not, in bytes and kind)."""
    if one is None or other is None:
        return _one_sided(path, left, a, one, right, b, other)
    same_kind = (one.executable, one.symlink) == (other.executable, other.symlink)
    comparable = _algorithm(one) == _algorithm(other)
    if comparable and one.digest == other.digest:
        return None if same_kind else FileDifference(
            path=path, change="changed", size_a=one.size, size_b=other.size, mode=_kind(other))
    if comparable and max(one.size, other.size) > TEXT_LIMIT:
        return FileDifference(path=path, change="changed", binary=True, size_a=one.size,
                              size_b=other.size, mode=None if same_kind else _kind(other))
    data_a, data_b = left.read(a, path, one), right.read(b, path, other)
    if data_a == data_b and same_kind:
        return None  # another digest algorithm, the same bytes
    return _content_change(path, one, other, data_a, data_b)


def _one_sided(path: str, left: _Execution, a: str, one: StoredFile | None,
               right: _Execution, b: str, other: StoredFile | None) -> FileDifference:
    """A file only one side has: its text as the whole diff (from or to ``/dev/null``, as
    ``git diff`` shows a new file), or its size."""
    change: Literal["added", "removed"] = "added" if one is None else "removed"
    entry = other if one is None else one
    assert entry is not None
    text = None
    if not entry.symlink and entry.size <= TEXT_LIMIT:
        text = _text(right.read(b, path, entry) if one is None else left.read(a, path, entry))
    found = FileDifference(path=path, change=change, size_a=one.size if one else None,
                           size_b=other.size if other else None, binary=text is None)
    if text is not None:
        before, after = ("", text) if one is None else (text, "")
        found.diff, found.truncated = _text_diff(
            before, after, _json_safe(path), absent="a" if one is None else "b")
    return found


def _json_safe(name: str) -> str:
    """A file name as JSON can carry it: bytes that are not UTF-8 (kept by the file system as
    lone surrogates) written as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _algorithm(entry: StoredFile) -> str:
    return entry.digest.split(":", 1)[0]


def _kind(entry: StoredFile) -> str:
    if entry.symlink:
        return "symlink"
    return "executable" if entry.executable else "not executable"


def _content_change(path: str, one: StoredFile, other: StoredFile, data_a: bytes | None,
                    data_b: bytes | None) -> FileDifference:
    assert data_a is not None and data_b is not None
    mode = _kind(other) if (one.executable, one.symlink) != (other.executable,
                                                             other.symlink) else None
    text_a, text_b = _text(data_a), _text(data_b)
    if text_a is None or text_b is None:
        return FileDifference(path=path, change="changed", binary=True, size_a=one.size,
                              size_b=other.size, mode=mode)
    diff, cut = _text_diff(text_a, text_b, _json_safe(path))
    return FileDifference(path=path, change="changed", size_a=one.size, size_b=other.size,
                          mode=mode, diff=diff, truncated=cut)


def _text(data: bytes) -> str | None:
    if len(data) > TEXT_LIMIT or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _text_diff(a: str, b: str, name: str, *, absent: str | None = None) -> tuple[str, bool]:
    """A unified diff, cut at :data:`DIFF_LINES` lines (and whether it was); ``absent``: the
    side (``a`` or ``b``) that has no such file, named ``/dev/null``."""
    old, new = ("/dev/null" if absent == side else f"{side}/{name}" for side in ("a", "b"))
    lines = list(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                      old, new))
    cut = len(lines) > DIFF_LINES
    shown = lines[:DIFF_LINES]
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in shown), cut


def _final_answer(layout: ExecutionLayout, run_id: str, codon_id: str) -> str | None:
    """The agent's final answer in the codon's log (its last ``result`` record's text)."""
    if not plain_name(run_id) or not plain_name(codon_log_name(codon_id)):
        return None  # a name from the state that would lead out of the execution
    path = layout.codon_log_path(run_id, codon_id)
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if b'"result"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") == "result":
            text = record.get("result")
            return text if isinstance(text, str) else None
    return None


def _summary(execution: _Execution) -> ExecutionSummary:
    sides = [_side(item) for item in execution.thread]
    return ExecutionSummary(path=str(execution.layout.path), forked_from=execution.forked_from,
                            status=_status_word(execution), cost=sum(s.cost for s in sides),
                            input_tokens=sum(s.input_tokens for s in sides),
                            output_tokens=sum(s.output_tokens for s in sides),
                            codons=len(sides))


def _status_word(execution: _Execution) -> str:
    from hankweave.execution.document import execution_document

    return execution_document(execution.state, path=str(execution.layout.path), hank_path=None,
                              data_path=None).execution.status


def _relation(left: _Execution, right: _Execution) -> str | None:
    for name, one, other, other_name in (("B", right, left, "A"), ("A", left, right, "B")):
        origin = one.forked_from
        if origin is not None and Path(origin.execution) == other.layout.path:
            return f"{name} is a fork of {other_name} after codon {origin.codon}"
    origin_a, origin_b = left.forked_from, right.forked_from
    if origin_a and origin_b and origin_a.execution == origin_b.execution:
        return f"A and B are both forks of {origin_a.execution}"
    return None
