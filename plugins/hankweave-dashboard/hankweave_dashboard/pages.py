"""The data of an execution's page: built from ``state.json`` (and the tail of the journal),
never from the whole journal, so a long execution's page is as fast as a short one's.

Each function takes an execution directory and returns JSON data; the conversation of a codon
comes from its codon log, the files it changed from its checkpoints, its sentinels' outputs
from their files.  Large texts are cut (``MAX_TEXT``) and say so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hankweave.api import (
    ExecutionLayout,
    Family,
    HankweaveState,
    StateLoadError,
    codon_cost,
    codon_cost_complete,
    codon_tokens,
    document_of,
    failure_kind,
    journal_last_seq,
    read_state_strict,
    record_checkpoints,
    spent_so_far,
)
from hankweave_dashboard.catalog import (
    BadRequest,
    NotFound,
    badge_of,
    current_codon,
    identity,
    liveness,
    resume_command,
)

MAX_TEXT = 20_000
"""Characters of one text block shown; the rest is cut, with a note."""
MAX_ITEMS = 2_000
"""Conversation items shown of one codon log."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._#:-]{0,199}$")
"""A run or codon id as it can appear in a URL (no path separators)."""


def load(path: Path) -> HankweaveState:
    try:
        return read_state_strict(ExecutionLayout(path).hankweave_dir)[0]
    except StateLoadError as exc:
        raise NotFound(f"the state of {path} cannot be read: {exc}") from None


def checked_name(value: str, what: str) -> str:
    if not NAME_PATTERN.match(value):
        raise BadRequest(f"{value!r} is not a {what} id")
    return value


def cut(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"


# ----- the page -----


def execution_page(ident: str, path: Path,
                   served_id: Callable[[Path], str | None]) -> dict[str, Any]:
    """The page's data; ``served_id`` gives the dashboard's id of a related execution it
    serves (a fork's source, a fork), None for one it does not."""
    state = load(path)
    layout = ExecutionLayout(path)
    document = document_of(path, state)
    try:
        last_seq = journal_last_seq(layout.events_file)
    except OSError:
        last_seq = 0
    alive = liveness(path)
    entries = plan(state)
    tokens = {key: sum(entry["tokens"][key] for entry in entries) for key in _TOKEN_KEYS}
    spent = spent_so_far(state)
    status = document.execution.status
    return {
        "id": ident,
        "path": str(path),
        "name": path.name,
        **identity(path, document.execution.hank_path),
        "badge": badge_of(status, state, document.execution.pending_interruptions),
        # The cards show what the budget counts, so they agree with its bars.
        "spent": {"dollars": spent.dollars, "seconds": spent.seconds},
        "resumeCommand": resume_command(path, status, alive.live),
        "live": alive.live,
        "runtime": {"pid": alive.pid, "host": alive.host} if alive.live else None,
        "lastSeq": last_seq,
        "currentCodon": current_codon(state),
        "execution": document.execution.model_dump(mode="json", by_alias=True),
        "thread": document.thread.model_dump(mode="json", by_alias=True),
        "runs": [_run(run) for run in state.runs],
        "plan": entries,
        "tokens": tokens,
        "interruptions": document.interruptions,
        "family": family(document.execution.family, served_id),
    }


def family(found: Family | None, served_id: Callable[[Path], str | None],
           ) -> dict[str, Any] | None:
    """The fork family (``execution.family``) with each member's ``id`` on this dashboard
    (None: not served, so named, not linked) and its directory's ``name``; None when the
    execution has no relations."""
    if found is None or found.empty:
        return None

    def member(item: Any) -> dict[str, Any]:  # a FamilyMember
        ident = served_id(Path(item.path)) if item.exists else None
        return {**item.model_dump(mode="json"), "id": ident, "name": Path(item.path).name}

    return {"ancestors": [member(item) for item in found.ancestors],
            "forks": [member(item) for item in found.forks]}


_TOKEN_KEYS = ("input", "output", "cacheRead", "cacheWrite")


def _tokens(record: Any) -> dict[str, int]:
    usage = codon_tokens(record)
    return {"input": usage.input_tokens, "output": usage.output_tokens,
            "cacheRead": usage.cache_read_tokens, "cacheWrite": usage.cache_creation_tokens}


def plan(state: HankweaveState) -> list[dict[str, Any]]:
    """Every plan entry (loop iterations included) with its latest attempt and totals."""
    attempts: dict[str, list[tuple[str, Any]]] = {}
    for run in reversed(state.runs):  # oldest first
        for record in run.codons:
            attempts.setdefault(record.codon_id, []).append((run.run_id, record))
    asking = {item.codon_id for item in state.interruptions if item.status == "pending"}
    entries = []
    for entry in state.execution_plan:
        tried = attempts.get(entry.codon_id, [])
        loop = entry.loop_context
        latest = tried[-1] if tried else None
        tokens = dict.fromkeys(_TOKEN_KEYS, 0)
        for _, record in tried:
            for key, value in _tokens(record).items():
                tokens[key] += value
        entries.append({
            "codonId": entry.codon_id,
            "name": entry.codon.name,
            "loopId": loop.loop_id if loop else None,
            "iteration": loop.iteration if loop else None,
            "status": latest[1].status if latest else "pending",
            "shown": _shown(latest[1], entry.codon_id in asking) if latest else "pending",
            "runId": latest[0] if latest else None,
            "attempts": len(tried),
            "cost": sum(codon_cost(record) for _, record in tried),
            "costComplete": all(codon_cost_complete(record) for _, record in tried),
            "tokens": tokens,
            "startTime": latest[1].start_time if latest else None,
            "endTime": getattr(latest[1], "end_time", None) if latest else None,
            "failure": _failure(latest[1]) if latest else None,
            "hasLog": latest is not None,
            "sentinelCost": sum(_sentinel_cost(record) for _, record in tried),
        })
    return entries


def _shown(record: Any, asking: bool) -> str:
    """The status a person reads: an attempt that ended to wait for an answer is ``waiting``
    (``answered`` once the answer is in), one a person stopped is ``stopped``."""
    reason = getattr(record, "failure_reason", None)
    if record.status != "failed" or reason is None:
        return str(record.status)
    kind = failure_kind(reason.type, reason.message)
    return "answered" if kind == "waiting" and not asking else kind


def _failure(record: Any) -> str | None:
    reason = getattr(record, "failure_reason", None)
    return reason.message if reason is not None else None


def _sentinel_cost(record: Any) -> float:
    sentinels = getattr(record, "sentinels", None)
    return float(getattr(sentinels, "total_cost", 0.0) or 0.0)


def _run(run: Any) -> dict[str, Any]:
    conditions = run.starting_conditions.model_dump(mode="json", by_alias=True,
                                                    exclude_none=True)
    return {"runId": run.run_id, "status": run.status, "startTime": run.start_time,
            "endTime": run.end_time, "startingConditions": conditions,
            "codons": [{"codonId": r.codon_id, "status": r.status,
                        "attempt": getattr(r, "attempt", None) or 1,
                        "cost": codon_cost(r)} for r in run.codons]}


# ----- one codon: its record, conversation, changed files, sentinel outputs -----


def record_of(state: HankweaveState, run_id: str, codon_id: str) -> Any:
    """The latest attempt of ``codon_id`` in run ``run_id``."""
    run = state.run_by_id(run_id)
    if run is None:
        raise NotFound(f"no run {run_id} in this execution")
    for record in reversed(run.codons):
        if record.codon_id == codon_id:
            return record
    raise NotFound(f"codon {codon_id} did not run in run {run_id}")


def conversation(path: Path, run_id: str, codon_id: str) -> dict[str, Any]:
    """The codon's log as conversation items: assistant text and thinking, tool calls with
    their results, errors and the final result."""
    from hankweave.api import LogReadReport, read_log

    checked_name(run_id, "run")
    checked_name(codon_id, "codon")
    record_of(load(path), run_id, codon_id)
    log = ExecutionLayout(path).codon_log_path(run_id, codon_id)
    items: list[dict[str, Any]] = []
    report = LogReadReport()
    total = 0
    try:
        for record in read_log(log, report):
            for item in _items(record):
                total += 1
                if len(items) < MAX_ITEMS:
                    items.append(item)
    except FileNotFoundError:
        return {"items": [], "note": "this codon has no log yet", "total": 0}
    note = None
    if total > len(items):
        note = f"the first {len(items):,} of {total:,} items are shown"
    if report.torn_tail:
        note = (note + "; " if note else "") + "the log's last line is still being written"
    return {"items": items, "note": note, "total": total}


def _items(record: Any) -> list[dict[str, Any]]:
    kind = getattr(record, "type", None)
    if kind == "assistant":
        return [_block(block) for block in record.message.blocks]
    if kind == "user":
        return [_block(block) for block in record.message.blocks]
    if kind == "result":
        return [{"kind": "result", "error": bool(record.is_error), "subtype": record.subtype,
                 "text": cut(record.result or ""), "cost": record.total_cost_usd,
                 "turns": record.num_turns}]
    if kind == "system":
        subtype = getattr(record, "subtype", None)
        if subtype == "init":
            return [{"kind": "system", "text": f"session {record.session_id} started"
                     + (f" with {record.model}" if record.model else "")}]
        if subtype == "compact_boundary":
            return [{"kind": "system", "text": "the conversation was compacted"}]
        return []
    return [{"kind": "unknown", "text": cut(str(getattr(record, "reason", "")))}]


def _block(block: Any) -> dict[str, Any]:
    import json

    kind = getattr(block, "type", None)
    if kind == "text":
        return {"kind": "text", "text": cut(block.text or "")}
    if kind == "thinking":
        return {"kind": "thinking", "text": cut(getattr(block, "thinking", "") or "")}
    if kind == "tool_use":
        return {"kind": "tool_use", "id": block.id, "name": block.name,
                "input": cut(json.dumps(block.input, indent=2, ensure_ascii=False))}
    if kind == "tool_result":
        return {"kind": "tool_result", "toolUseId": block.tool_use_id,
                "error": bool(block.failed), "text": cut(block.text)}
    return {"kind": "other", "text": cut(json.dumps(block.to_dict(), ensure_ascii=False))}


def sentinel_outputs(path: Path, run_id: str, codon_id: str) -> dict[str, Any]:
    """The output files the sentinels wrote for this codon (``<id>-<codonId>-*``)."""
    checked_name(run_id, "run")
    checked_name(codon_id, "codon")
    record = record_of(load(path), run_id, codon_id)
    outputs_root = ExecutionLayout(path).sentinels_dir / "outputs"
    files = []
    if outputs_root.is_dir():
        for folder in sorted(p for p in outputs_root.iterdir() if p.is_dir()):
            for file in sorted(folder.glob(f"{folder.name}-{_glob_safe(codon_id)}-*")):
                try:
                    text = file.read_text(errors="replace")
                except OSError as exc:
                    text = f"(cannot read: {exc.strerror or exc})"
                files.append({"sentinel": folder.name, "file": file.name, "text": cut(text)})
    sentinels = getattr(record, "sentinels", None)
    states = getattr(sentinels, "executed", None) or getattr(sentinels, "loaded", None) or []
    return {"outputs": files,
            "sentinels": [s.model_dump(mode="json", by_alias=True) for s in states]}


def _glob_safe(text: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", text)


def checkpoints_of(state: HankweaveState, run_id: str, codon_id: str) -> tuple[str, str]:
    """The checkpoints a codon's own changes lie between: its rig-setup checkpoint (else the
    previous record's end checkpoint, else the execution's initial one) and its end one."""
    record = record_of(state, run_id, codon_id)
    marks = dict(record_checkpoints(record))
    end = next((sha for kind, sha in record_checkpoints(record) if kind != "rig-setup"), None)
    if end is None:
        raise NotFound(f"codon {codon_id} of run {run_id} has no end checkpoint yet")
    base = marks.get("rig-setup") or _previous_end(state, record) or state.initial_checkpoint
    if base is None:
        raise NotFound(f"no checkpoint before codon {codon_id} of run {run_id}")
    return base, end


def _previous_end(state: HankweaveState, target: Any) -> str | None:
    previous = None
    for run in reversed(state.runs):
        for record in run.codons:
            if record is target:
                return previous
            ends = [sha for kind, sha in record_checkpoints(record) if kind != "rig-setup"]
            if ends:
                previous = ends[0]
    return previous
