"""From the CLI's stream-json frames to codon-log records, with the original's conversions.

The CLI writes one JSON frame per line on stdout, already in the codon log's shapes (the log
format is the Claude Agent SDK's).  Each frame is kept as the CLI wrote it (its ``uuid``,
``parent_tool_use_id``, ``request_id`` and timings included) except:

* frames the log has no use for are dropped: ``stream_event``, ``tool_progress``,
  ``auth_status``, ``rate_limit_event``, the control protocol, frames meant for the SDK host
  only, and replayed user messages (``isReplay``: a resumed session's history);
* of the ``system`` frames only ``init``, ``hook_response``, ``compact_boundary`` and
  ``status`` are kept;
* an error ``result`` without a ``result`` text gets ``result: ""`` (its messages stay in
  ``errors``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

KEPT_TYPES = frozenset({"system", "assistant", "user", "result"})
KEPT_SYSTEM_SUBTYPES = frozenset({"init", "hook_response", "compact_boundary", "status"})


def codon_log_record(frame: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record to log for ``frame``, or None to drop it."""
    kind = frame.get("type")
    if kind not in KEPT_TYPES or frame.get("sdk_host_only"):
        return None
    if kind == "system" and frame.get("subtype") not in KEPT_SYSTEM_SUBTYPES:
        return None
    if kind == "user" and frame.get("isReplay"):
        return None
    record = dict(frame)
    if kind == "result" and record.get("subtype") != "success" \
            and not isinstance(record.get("result"), str):
        record["result"] = ""
    return record


def is_result(record: Mapping[str, Any]) -> bool:
    return record.get("type") == "result"


def is_success(record: Mapping[str, Any]) -> bool:
    return is_result(record) and record.get("subtype") == "success" \
        and not record.get("is_error")


class SessionCosts:
    """The session totals the CLI reports, turned into what each pass cost.

    The CLI's ``total_cost_usd`` is the whole session's: a resumed session (``continue-previous``,
    every extension) starts from the cost it had, while ``usage`` covers only this process.  The
    codon log's results cover their own pass (the kernel adds up an attempt's passes), so each
    result's ``total_cost_usd`` becomes the session's growth since the pass began; the CLI's own
    figure stays in ``session_total_cost_usd``.  The last total of every session is kept in the
    harness's folder (``sessions.json``), so a codon that continues an earlier codon's session,
    in this run or after a restart, starts from it.  A fork (``--fork-session``, every attempt
    that resumes a session) reports a total that includes its parent's (measured with the
    bundled CLI, also after another fork of the same parent failed), so its pass starts from
    the parent's total, under the parent's id (``PassPlan.resume``).
    """

    FILE = "sessions.json"

    def __init__(self, folder: Path) -> None:
        self.path = folder / self.FILE

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {key: float(value) for key, value in data.items()
                if isinstance(value, int | float)} if isinstance(data, dict) else {}

    def total(self, session_id: str | None) -> float:
        """The session's cost so far (0 for a new session or one never seen)."""
        return self._read().get(session_id, 0.0) if session_id else 0.0

    def per_pass(self, record: dict[str, Any], started_at: float) -> dict[str, Any]:
        """``record`` (a result) with the pass's own cost, the session's total remembered."""
        total = record.get("total_cost_usd")
        session_id = record.get("session_id")
        if not isinstance(total, int | float) or isinstance(total, bool) or not session_id:
            return record
        self._remember(str(session_id), float(total))
        if started_at <= 0:
            return record
        return {**record, "total_cost_usd": round(max(0.0, total - started_at), 12),
                "session_total_cost_usd": total}

    def _remember(self, session_id: str, total: float) -> None:
        from hankweave.api import PRIVATE_FILE_MODE, atomic_write_bytes

        totals = self._read()
        totals[session_id] = total
        # Under .hankweave/harnesses/: private, as everything there (docs/state.md).
        atomic_write_bytes(self.path, json.dumps(totals, indent=1).encode(),
                           mode=PRIVATE_FILE_MODE)
