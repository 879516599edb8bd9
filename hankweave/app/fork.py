"""``hankweave fork``: a new execution whose history up to a codon is another's (docs/fork.md).

The fork is made from what the source has acknowledged, read without its lock, so the source
may be running and is never written:

* the state, cut right after the fork point: the source's runs that had started by then, the
  run holding the codon's record ending with it, and the interruptions of what is kept;
* the journal up to the event that completed the codon (its bytes, so ``seq`` goes on);
* the checkpoint store, holding every checkpoint the kept state names, under the same ids
  (:meth:`~hankweave.checkpoints.CheckpointStore.fork_into`: shared where immutable, copied
  otherwise), and ``agentRoot/`` restored to the codon's checkpoint;
* each harness's folder (the agents' conversations), copied, never shared
  (:meth:`~hankweave.harness.Harness.fork_state`), and the codon logs of the kept records;
* the run intent (``-m``, budgets, the mock provider's script), the data link, a replay's
  recording, and the execution metadata with ``forkedFrom``: the source, the codon, its run and
  its checkpoint.

Nothing read from the source leads out of the fork: symbolic links are left out of the
copies, run ids that are not plain names are not used as folders, and copied data is copied,
never linked.  The metadata is written last, behind ``.hankweave/forking``: until then the
directory is no execution a run takes, and a fork that fails removes what it made.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from hankweave.app.backends import detect_backend
from hankweave.checkpoints import CheckpointError, CheckpointStore
from hankweave.events.journal import encode_event, read_journal
from hankweave.execution.layout import (
    ExecutionLayout,
    codon_log_name,
    codon_stderr_name,
    plain_name,
)
from hankweave.execution.meta import (
    ExecutionMeta,
    ExecutionMetaError,
    ForkOrigin,
    load_execution_meta,
    save_execution_meta,
)
from hankweave.faults import kill_point
from hankweave.fsutil import (
    PRIVATE_FILE_MODE,
    atomic_write_bytes,
    pid_alive,
    private_dir,
    skip_symlinks,
    utc_now_iso,
)
from hankweave.state.loading import StateLoadError, read_state_strict
from hankweave.state.thread import ThreadCodon, analyze_execution_thread
from hankweave.state.types import (
    HankweaveState,
    Run,
    dump_state,
    end_checkpoint,
    is_live_run,
    referenced_checkpoint_ids,
)

if TYPE_CHECKING:
    from hankweave.registry import Registry


class ForkError(Exception):
    """The fork cannot be made; the message says why and what to do."""


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork leaves its source: the newest finished record of a codon in its thread."""

    codon_id: str
    run_id: str
    checkpoint: str
    end_time: str


@dataclass
class ForkResult:
    target: Path
    point: ForkPoint
    changed_history: list[str] = field(default_factory=list)
    """Codons up to the fork point whose inputs differ in the fork's hank (allowed by the
    caller), each as ``id: why``."""


def finished_codons(state: HankweaveState) -> list[ThreadCodon]:
    """The thread's codons a fork can start after (completed or skipped, with their end
    checkpoint), oldest first."""
    return [item for item in reversed(analyze_execution_thread(state).codons)
            if item.codon.status in ("completed", "skipped") and end_checkpoint(item.codon)]


def fork_point(state: HankweaveState, codon_id: str) -> ForkPoint:
    """The newest finished record of ``codon_id`` in the thread.  Refused with the choices
    when the codon never finished there."""
    choices = finished_codons(state)
    for item in reversed(choices):
        if item.codon.codon_id == codon_id:
            end_time = getattr(item.codon, "end_time", None) or item.codon.start_time
            return ForkPoint(codon_id, item.run_id, end_checkpoint(item.codon) or "", end_time)
    names = ", ".join(dict.fromkeys(item.codon.codon_id for item in choices))
    known = {item.codon.codon_id: item.codon.status
             for item in reversed(analyze_execution_thread(state).codons)}
    why = (f"its newest record is {known[codon_id]}" if codon_id in known
           else "it is not in the execution's thread")
    raise ForkError(f"cannot fork at {codon_id!r}: {why}; a fork starts after a codon that "
                    f"finished. Choose one of: {names or '(none has finished yet)'}")


def cut_state(state: HankweaveState, point: ForkPoint) -> HankweaveState:
    """The state as it was when the fork point's codon finished: the runs started by then,
    the codon's run ending with its record (and ended, if it went on or still runs)."""
    kept: list[Run] = []
    for run in reversed(state.runs):  # oldest first
        if run.run_id != point.run_id:
            kept.append(run)
            continue
        index = max(i for i, record in enumerate(run.codons) if record.codon_id == point.codon_id
                    and end_checkpoint(record) == point.checkpoint)
        if index + 1 < len(run.codons) or is_live_run(run.status):
            run = run.model_copy(update={"codons": run.codons[:index + 1],
                                         "status": "completed", "end_time": point.end_time})
        kept.append(run)
        break
    kept_records = {(run.run_id, record.codon_id) for run in kept for record in run.codons}
    interruptions = [item for item in state.interruptions
                     if (item.run_id, item.codon_id) in kept_records
                     and item.created_at <= point.end_time]
    return state.model_copy(update={"runs": list(reversed(kept)), "interruptions": interruptions,
                                    "current_run_id": point.run_id})


def journal_prefix(source: ExecutionLayout, point: ForkPoint) -> Iterator[bytes]:
    """The source journal's lines up to the ``codon.completed`` event of the fork point's
    record: the last one of its codon in its run before the run starts another codon (a
    failed attempt's comes before its retry's; a skipped codon's is not a success).

    A plain journal is copied as it is (two passes: only ``codon.*`` lines are parsed, and
    the file is never held whole); a dieted one is read through :func:`read_journal` and
    written again.  The newest line may be torn while a runtime writes: it is never copied.
    """
    path = source.events_file
    if not path.exists():
        if (source.events_dir / "events.jsonl.zst").exists():
            lines = [encode_event(event) for event in read_journal(path)]
            yield from lines[:_cut(lines, point)]
        return
    with open(path, "rb") as handle:
        count = _cut(_complete_lines(handle), point)
    with open(path, "rb") as handle:
        for _, line in zip(range(count), _complete_lines(handle), strict=False):
            yield line


def _complete_lines(handle: BinaryIO) -> Iterator[bytes]:
    for line in handle:
        if not line.endswith(b"\n"):
            return
        yield line


def _cut(lines: Iterable[bytes], point: ForkPoint) -> int:
    """How many of ``lines`` the fork keeps (all complete ones when the point's completion is
    not there, as in a journal older than ``runId``)."""
    kept, count = None, 0
    for count, line in enumerate(lines, start=1):
        if b'"codon.' not in line:
            continue
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            kind, data = event.get("type"), event.get("data") or {}
            if event.get("runId") not in (None, point.run_id) or not isinstance(data, dict):
                continue
            if kind == "codon.completed" and data.get("codonId") == point.codon_id:
                kept = count
            elif kind == "codon.started" and kept is not None and \
                    data.get("codonId") != point.codon_id:
                return kept
    return kept if kept is not None else count


def default_target(source: Path) -> Path:
    """``<source>-fork-<n>`` beside the source, the first that does not exist."""
    number = 1
    while True:
        candidate = source.with_name(f"{source.name}-fork-{number}")
        if not os.path.lexists(candidate):
            return candidate
        number += 1


def fork_execution(source_dir: Path, target_dir: Path | None, codon_id: str, *,
                   registry: Registry, hank_path: Path | None = None,
                   allow_changed_history: bool = False) -> ForkResult:
    """Make the fork (see the module docstring) and return where it is."""
    source = ExecutionLayout(source_dir)
    state = _source_state(source)
    meta = _source_meta(source)
    point = fork_point(state, codon_id)
    changed = _history_changes(meta, hank_path, state, point)
    if changed and not allow_changed_history:
        raise ForkError(
            "the fork's hank changes codons up to the fork point, whose results it keeps: "
            + "; ".join(changed) + ". Fork at an earlier codon, or pass "
            "--allow-changed-history to keep those results anyway")
    target = ExecutionLayout(target_dir if target_dir is not None else default_target(source.path))
    real_source, real_target = Path(os.path.realpath(source.path)), Path(
        os.path.realpath(target.path))
    if real_target.is_relative_to(real_source) or real_source.is_relative_to(real_target):
        raise ForkError(f"cannot fork {source.path} into {target.path}: one lies inside the "
                        "other, and the source is never written; give a directory beside it")
    backend = detect_backend(source, state, registry)
    if backend is None:
        installed = ", ".join(registry.checkpoint_backends()) or "none"
        raise ForkError(f"no installed checkpoint backend holds the checkpoints of "
                        f"{source.path} (installed: {installed}); install the backend it ran "
                        "with")
    made = _claim(target.path)
    try:
        _populate(source, target, state, meta, point, backend,
                  registry=registry, hank_path=hank_path, changed=changed)
    except BaseException:
        _undo(target.path, made)
        raise
    return ForkResult(target.path, point, changed)


def _source_state(source: ExecutionLayout) -> HankweaveState:
    if not source.state_file.exists() and not source.state_log_file.exists():
        raise ForkError(f"{source.path}: not an execution directory (no .hankweave/state.json)")
    try:
        return read_state_strict(source.hankweave_dir)[0]
    except (StateLoadError, OSError) as exc:
        raise ForkError(f"cannot read the state of {source.path}: {exc}") from None


def _source_meta(source: ExecutionLayout) -> ExecutionMeta:
    try:
        return load_execution_meta(source.meta_file)
    except ExecutionMetaError as exc:
        raise ForkError(str(exc)) from None


_FORK_ENTRIES = frozenset({".hankweave", "agentRoot", "rigArchive"})
"""What a fork makes at the top of its directory: a leftover holding anything else is not
only a fork's, and is never removed."""


def _claim(target: Path) -> bool:
    """Create the fork's directory: new, empty, or left by a killed fork (removed first).
    Returns whether the directory was made here (a failed fork removes it; an empty one the
    user made is emptied instead)."""
    layout = ExecutionLayout(target)
    marker = layout.fork_marker
    if (marker.is_file() and not marker.is_symlink() and not layout.meta_file.exists()
            and {entry.name for entry in os.scandir(target)} <= _FORK_ENTRIES):
        maker = marker.read_text(encoding="utf-8", errors="replace").strip()
        if maker.isdigit() and pid_alive(int(maker)):
            raise ForkError(f"{target} is being made by another hankweave fork (pid {maker})")
        shutil.rmtree(target)  # what a killed fork left: never an execution, nothing to keep
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(target, 0o700)
        made = True
    except FileExistsError:
        if not target.is_dir() or target.is_symlink() or any(target.iterdir()):
            raise ForkError(f"{target} already exists and is not an empty directory; give a "
                            "new directory with -o") from None
        made = False
    except OSError as exc:
        raise ForkError(f"cannot make the fork's directory {target}: {exc.strerror or exc}"
                        ) from None
    private_dir(layout.hankweave_dir)
    atomic_write_bytes(marker, str(os.getpid()).encode(), mode=PRIVATE_FILE_MODE)
    return made


def _undo(target: Path, made: bool) -> None:
    """Remove what a failed fork wrote: the directory it made, or the contents of the empty
    one it was given."""
    if made:
        shutil.rmtree(target, ignore_errors=True)
        return
    for entry in list(os.scandir(target)):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _populate(source: ExecutionLayout, target: ExecutionLayout, state: HankweaveState,
              meta: ExecutionMeta, point: ForkPoint, backend: type[CheckpointStore], *,
              registry: Registry, hank_path: Path | None, changed: list[str]) -> None:
    cut = cut_state(state, point)
    atomic_write_bytes(target.state_file, dump_state(_moved_paths(cut, source, target)),
                       mode=PRIVATE_FILE_MODE)
    private_dir(target.events_dir)
    with open(target.events_file, "wb") as out:
        for line in journal_prefix(source, point):
            out.write(line)
    os.chmod(target.events_file, PRIVATE_FILE_MODE)
    _copy_execution_files(source, target, cut, point)
    _copy_harness_state(source, target, registry)
    kill_point("fork.copied")  # test-only (docs/crash-testing.md)
    target.agent_root.mkdir()
    target.rig_archive.mkdir(exist_ok=True)
    _place_data(source, target)
    try:
        forker = backend(source.path)
        try:
            forker.fork_into(target.path, referenced_checkpoint_ids(cut))
        finally:
            forker.close()
        store = backend(target.path)
        try:
            store.initialize()
            store.restore(point.checkpoint)
        finally:
            store.close()
    except CheckpointError as exc:
        raise ForkError(f"cannot fork the checkpoints of {source.path}: {exc}") from None
    save_execution_meta(target.meta_file, _fork_meta(source, target, meta, point, hank_path,
                                                     changed))
    kill_point("fork.meta-written")  # test-only (docs/crash-testing.md)
    target.fork_marker.unlink()


def _moved_paths(state: HankweaveState, source: ExecutionLayout,
                 target: ExecutionLayout) -> HankweaveState:
    """The state with the run folders and codon logs it names in the source named in the
    fork, where their copies are."""
    def moved(value: str | None) -> str | None:
        if value is None or not Path(value).is_relative_to(source.path):
            return value
        return str(target.path / Path(value).relative_to(source.path))

    runs = []
    for run in state.runs:
        codons = [record.model_copy(update={
                      "claude_log_path": moved(getattr(record, "claude_log_path", None))})
                  if getattr(record, "claude_log_path", None) else record
                  for record in run.codons]
        runs.append(run.model_copy(update={"run_folder": moved(run.run_folder) or "",
                                           "codons": codons}))
    return state.model_copy(update={"runs": runs})


def _copy_execution_files(source: ExecutionLayout, target: ExecutionLayout,
                          cut: HankweaveState, point: ForkPoint) -> None:
    """The run intent and the mock provider's script, a replay's recording, the sentinels'
    records and the kept records' codon logs."""
    for path in (source.run_intent_file, source.mock_provider_script, source.given_warnings_file):
        if path.is_file():
            private_dir(_moved(path, source, target).parent)
            shutil.copy2(path, _moved(path, source, target))
    for folder in (source.recording_dir, source.sentinels_dir, source.rig_archive):
        if folder.is_dir() and not folder.is_symlink():
            # A recording is never written again (shared); the others are copies.
            shutil.copytree(folder, _moved(folder, source, target), ignore=skip_symlinks,
                            copy_function=_link_or_copy if folder == source.recording_dir
                            else shutil.copy2)
    for run in cut.runs:
        names = {name for record in run.codons
                 for name in (codon_log_name(record.codon_id), codon_stderr_name(record.codon_id))}
        folder = source.run_folder(run.run_id)
        if not plain_name(run.run_id) or folder.is_symlink() or not folder.is_dir():
            continue
        copy = private_dir(target.run_folder(run.run_id))
        for entry in folder.iterdir():
            if entry.is_file() and not entry.is_symlink() and (
                    run.run_id != point.run_id or entry.name in names):
                shutil.copy2(entry, copy / entry.name)


def _copy_harness_state(source: ExecutionLayout, target: ExecutionLayout,
                        registry: Registry) -> None:
    """Each harness's folder, through the harness (it knows what names the work directory)."""
    if not source.harnesses_dir.is_dir() or source.harnesses_dir.is_symlink():
        return
    harnesses = registry.harnesses()
    private_dir(target.harnesses_dir)
    for folder in sorted(source.harnesses_dir.iterdir()):
        if not folder.is_dir() or folder.is_symlink():
            continue
        harness = harnesses.get(folder.name)
        if harness is None:
            shutil.copytree(folder, target.harnesses_dir / folder.name, ignore=skip_symlinks)
        else:
            harness.fork_state(folder, target.harness_state_dir(folder.name),
                               source_work_dir=source.agent_root,
                               target_work_dir=target.agent_root)


def _place_data(source: ExecutionLayout, target: ExecutionLayout) -> None:
    """The data as the source has it: the same link, or a copy of the copy (never hard links:
    an agent that writes into its copy would write into the source's)."""
    link = source.data_link
    if link.is_symlink():
        pointed = os.readlink(link)
        where = Path(os.path.normpath(pointed))
        if where.is_absolute() and where.is_relative_to(source.path):
            pointed = str(target.path / where.relative_to(source.path))  # a replay's data
        os.symlink(pointed, target.data_link)
    elif link.is_dir():
        shutil.copytree(link, target.data_link, symlinks=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _moved(path: Path, source: ExecutionLayout, target: ExecutionLayout) -> Path:
    return target.path / path.relative_to(source.path)


def _fork_meta(source: ExecutionLayout, target: ExecutionLayout, meta: ExecutionMeta,
               point: ForkPoint, hank_path: Path | None, changed: list[str]) -> ExecutionMeta:
    """The source's metadata with its paths inside the source moved to the fork, the fork's
    hank, and where it came from."""
    data = json.loads(meta.to_json_bytes())
    for key, value in data.items():
        if isinstance(value, str) and os.path.isabs(value):
            where = Path(os.path.normpath(value))
            if where.is_relative_to(source.path):
                data[key] = str(target.path / where.relative_to(source.path))
    if data.get("readOnlySourceDataPath") != meta.read_only_source_data_path:
        # A replay's data is in its recording, now the fork's copy: the resume key is its hash.
        from hankweave.execution.datahash import hash_data_source

        data["dataHash"] = hash_data_source(Path(data["readOnlySourceDataPath"]))
    now = utc_now_iso()
    forked = ExecutionMeta.model_validate(data).model_copy(update={
        "created_at": now, "last_used": now,
        # A fork of a replay runs agents: the rest of the recording followed another history.
        "recording": None,
        "forked_from": ForkOrigin(execution=str(source.path), codon=point.codon_id,
                                  run_id=point.run_id, checkpoint=point.checkpoint,
                                  forked_at=now, changed_history=changed or None)})
    if hank_path is not None:
        from hankweave.execution.setup import compute_hank_hash

        forked = forked.model_copy(update={
            "hank_path": str(hank_path), "hank_hash": compute_hank_hash(hank_path),
            "bundle_hash": None, "bundle_path": None, "remote": None})
    return forked


def _history_changes(meta: ExecutionMeta, hank_path: Path | None, state: HankweaveState,
                     point: ForkPoint) -> list[str]:
    """The codons up to the fork point whose inputs (``codonInputs``, docs/bundles.md) differ
    between the source's hank and ``hank_path``, each as ``id: why``; none without a new hank.
    When the source's hank cannot be read any more, that is the one entry."""
    if hank_path is None:
        return []
    from hankweave.bundle.closure import compute_closure
    from hankweave.bundle.inputs import codon_inputs, codon_keys

    after = compute_closure(hank_path)
    if not after.ok:
        raise ForkError(f"{hank_path}: " + "; ".join(
            f"{f.where}: {f.detail}" for f in after.errors))
    before = compute_closure(Path(meta.hank_path)) if meta.hank_path else None
    if before is None or not before.ok:
        return [f"(the source's hank {meta.hank_path or '(not recorded)'} cannot be read "
                "any more, so nothing says whether they changed)"]
    _refuse_other_codons(codon_keys(before), codon_keys(after))
    old, new = codon_inputs(before), codon_inputs(after)
    changed: dict[str, str] = {}
    for item in reversed(analyze_execution_thread(cut_state(state, point)).codons):
        key = _inputs_key(item)
        if key in changed:
            continue
        if key not in new:
            changed[key] = "not in the new hank"
        elif old.get(key) != new[key]:
            changed[key] = "its prompt, settings or files differ"
    return [f"{key}: {why}" for key, why in changed.items()]


def _refuse_other_codons(before: list[str], after: list[str]) -> None:
    """A fork runs its source's plan: a hank that adds, removes or reorders codons is not
    one it can continue (the runtime would skip the new codons or stop at a missing one)."""
    if before == after:
        return
    added = [key for key in after if key not in before]
    removed = [key for key in before if key not in after]
    what = "; ".join(part for part in (
        f"added: {', '.join(added)}" if added else "", f"removed: {', '.join(removed)}"
        if removed else "", "" if added or removed else "the same codons in another order")
        if part)
    raise ForkError(f"the fork's hank has other codons than the source's ({what}). A fork "
                    "continues the source's plan with changed prompts, models and codon "
                    "settings; to run other codons, start a new execution of that hank")


def _inputs_key(item: ThreadCodon) -> str:
    """A thread record's key in ``codonInputs``: ``id``, or ``loop/child`` in a loop."""
    loop = item.codon.loop_context
    if loop is None:
        return item.codon.codon_id
    return f"{loop.loop_id}/{item.codon.codon_id.split('#', 1)[0]}"
