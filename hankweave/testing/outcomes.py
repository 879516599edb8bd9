"""What a run left, per codon, in a form tests compare (for example a recording and its replay)."""

from __future__ import annotations

from typing import Any

from hankweave.state.types import HankweaveState


def codon_outcomes(state: HankweaveState) -> dict[str, dict[str, Any]]:
    """Status, cost, tokens, message count, session, failure and extensions of the newest record
    of each codon id (runs oldest first, so later records win)."""
    out: dict[str, dict[str, Any]] = {}
    for run in reversed(state.runs):
        for record in run.codons:
            reason = getattr(record, "failure_reason", None)
            tokens = getattr(record, "final_tokens", None) or getattr(
                record, "partial_tokens", None)
            out[record.codon_id] = {
                "status": record.status,
                "cost": getattr(record, "final_cost", None) or getattr(
                    record, "partial_cost", None),
                "tokens": tokens.model_dump() if tokens is not None else None,
                "messages": getattr(record, "assistant_message_count", None),
                "session": getattr(record, "claude_session_id", None),
                "failure": (reason.type, reason.message, reason.retriable) if reason else None,
                "extensions": getattr(record, "extension_count", None),
            }
    return out
