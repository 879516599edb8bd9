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

The metadata is written last: until then the directory is no execution a resume would take,
and a fork that fails removes what it made.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hankweave.checkpoints import CheckpointError, CheckpointStore
from hankweave.events.journal import encode_event, read_journal
from hankweave.execution.layout import ExecutionLayout, codon_log_name, codon_stderr_name
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
    """The source journal's lines up to the ``codon.completed`` event of the fork point.

    A plain journal is copied line by line as it is (only ``codon.completed`` lines are
    parsed); a dieted one is read whole through :func:`read_journal` and written again.
    The newest line may be torn while a runtime writes: it is never part of the prefix.
    """
    path = source.events_file
    if not path.exists():
        if (source.events_dir / "events.jsonl.zst").exists():
            for event in read_journal(path):
                line = encode_event(event)
                yield line
                if _completes(json.loads(line), point):
                    return
        return
    with open(path, "rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                return
            yield line
            if b'"codon.completed"' in line:
                with contextlib.suppress(ValueError):
                    if _completes(json.loads(line), point):
                        return


def _completes(event: object, point: ForkPoint) -> bool:
    if not isinstance(event, dict) or event.get("type") != "codon.completed":
        return False
    data = event.get("data") or {}
    return (isinstance(data, dict) and data.get("codonId") == point.codon_id
            and data.get("success") is True
            and event.get("runId") in (None, point.run_id))


def default_target(source: Path) -> Path:
    """``<source>-fork-<n>`` beside the source, the first that does not exist."""
    number = 1
    while True:
        candidate = source.with_name(f"{source.name}-fork-{number}")
        if not os.path.lexists(candidate):
            return candidate
        number += 1


def detect_backend(layout: ExecutionLayout, state: HankweaveState,
                   registry: Registry) -> type[CheckpointStore]:
    """The installed checkpoint backend whose store in ``layout`` holds the state's initial
    checkpoint (an execution does not record its backend; each lists its store read-only)."""
    initial = state.initial_checkpoint
    for backend in registry.checkpoint_backends().values():
        listed = backend(layout.path).list_read_only()
        if listed and (initial is None or any(c.id == initial for c in listed)):
            return backend
    installed = ", ".join(registry.checkpoint_backends()) or "none"
    raise ForkError(f"no installed checkpoint backend holds the checkpoints of {layout.path} "
                    f"(installed: {installed}); install the backend it ran with")


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
    _claim(target.path)
    try:
        _populate(source, target, state, meta, point, registry,
                  hank_path=hank_path, changed=changed)
    except BaseException:
        shutil.rmtree(target.path, ignore_errors=True)
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


FORKING_MARKER = "forking"
"""``.hankweave/forking``: the pid of the ``hankweave fork`` making the directory, removed
once its metadata is written.  A directory that still has it after that process is gone is
what a killed fork left, and the next fork into it starts over."""


def _claim(target: Path) -> None:
    """Create the fork's directory: new, empty, or left by a killed fork."""
    layout = ExecutionLayout(target)
    marker = layout.hankweave_dir / FORKING_MARKER
    if marker.is_file() and not layout.meta_file.exists():
        maker = marker.read_text(encoding="utf-8", errors="replace").strip()
        if maker.isdigit() and pid_alive(int(maker)):
            raise ForkError(f"{target} is being made by another hankweave fork (pid {maker})")
        shutil.rmtree(target)  # what a killed fork left: never an execution, nothing to keep
    if os.path.lexists(target) and (
            not target.is_dir() or target.is_symlink() or any(target.iterdir())):
        raise ForkError(f"{target} already exists and is not an empty directory; give a "
                        "new directory with -o")
    private_dir(layout.hankweave_dir)
    atomic_write_bytes(marker, str(os.getpid()).encode(), mode=PRIVATE_FILE_MODE)


def _populate(source: ExecutionLayout, target: ExecutionLayout, state: HankweaveState,
              meta: ExecutionMeta, point: ForkPoint, registry: Registry, *,
              hank_path: Path | None, changed: list[str]) -> None:
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
    backend = detect_backend(source, state, registry)
    try:
        backend(source.path).fork_into(target.path, referenced_checkpoint_ids(cut))
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
    (target.hankweave_dir / FORKING_MARKER).unlink()


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
        if folder.is_dir():
            shutil.copytree(folder, _moved(folder, source, target), symlinks=True,
                            copy_function=_link_or_copy if folder == source.recording_dir
                            else shutil.copy2)
    for run in cut.runs:
        names = {name for record in run.codons
                 for name in (codon_log_name(record.codon_id), codon_stderr_name(record.codon_id))}
        folder = source.run_folder(run.run_id)
        if not folder.is_dir():
            continue
        copy = private_dir(target.run_folder(run.run_id))
        for entry in folder.iterdir():
            if entry.is_file() and (run.run_id != point.run_id or entry.name in names):
                shutil.copy2(entry, copy / entry.name)


def _copy_harness_state(source: ExecutionLayout, target: ExecutionLayout,
                        registry: Registry) -> None:
    """Each harness's folder, through the harness (it knows what names the work directory)."""
    if not source.harnesses_dir.is_dir():
        return
    harnesses = registry.harnesses()
    private_dir(target.harnesses_dir)
    for folder in sorted(source.harnesses_dir.iterdir()):
        if not folder.is_dir() or folder.is_symlink():
            continue
        harness = harnesses.get(folder.name)
        if harness is None:
            shutil.copytree(folder, target.harnesses_dir / folder.name, symlinks=True)
        else:
            harness.fork_state(folder, target.harness_state_dir(folder.name),
                               source_work_dir=source.agent_root,
                               target_work_dir=target.agent_root)


def _place_data(source: ExecutionLayout, target: ExecutionLayout) -> None:
    """The data as the source has it: the same link, or a copy (hard links: it is read-only
    data)."""
    link = source.data_link
    if link.is_symlink():
        pointed = os.readlink(link)
        if os.path.isabs(pointed) and Path(pointed).is_relative_to(source.path):
            pointed = str(target.path / Path(pointed).relative_to(source.path))  # a replay's
        os.symlink(pointed, target.data_link)
    elif link.is_dir():
        shutil.copytree(link, target.data_link, symlinks=True, copy_function=_link_or_copy)


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
    inside = re.compile(re.escape(str(source.path)) + r"(?=/|$)")
    data = json.loads(meta.to_json_bytes())
    for key, value in data.items():
        if isinstance(value, str) and inside.match(value):
            data[key] = inside.sub(lambda _: str(target.path), value, count=1)
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
    from hankweave.bundle.inputs import codon_inputs

    after = compute_closure(hank_path)
    if not after.ok:
        raise ForkError(f"{hank_path}: " + "; ".join(
            f"{f.where}: {f.detail}" for f in after.errors))
    before = compute_closure(Path(meta.hank_path)) if meta.hank_path else None
    if before is None or not before.ok:
        return [f"(the source's hank {meta.hank_path or '(not recorded)'} cannot be read "
                "any more, so nothing says whether they changed)"]
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


def _inputs_key(item: ThreadCodon) -> str:
    """A thread record's key in ``codonInputs``: ``id``, or ``loop/child`` in a loop."""
    loop = item.codon.loop_context
    if loop is None:
        return item.codon.codon_id
    return f"{loop.loop_id}/{item.codon.codon_id.split('#', 1)[0]}"
