"""What an execution's LLM proxy record says (``hankweave inspect proxy``): its requests read
back from ``.hankweave/proxy/requests.jsonl``, and summed by codon.

Pure data: a running execution's record is read as far as its last complete line, and a line
that is not a record is counted and skipped, never fatal.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hankweave.proxy.types import ProxyRecord


@dataclass
class ProxyLogRead:
    """The records of one proxy log, and the lines that were not records."""

    records: list[ProxyRecord] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    """Line numbers (1-based) that are not records."""


def read_proxy_log(path: Path) -> ProxyLogRead:
    """Every complete record of ``path`` (raises ``OSError`` as opening it does)."""
    read = ProxyLogRead()
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1]:
        lines.pop()  # the line being written now: not a record yet
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            read.records.append(ProxyRecord.model_validate(json.loads(line)))
        except (ValueError, ValidationError):
            read.skipped.append(number)
    return read


def proxy_report(records: Iterable[ProxyRecord]) -> dict[str, Any]:
    """``{requests, refused, errors, held, inputTokens, outputTokens, cost, ttfbP50Ms,
    durationP50Ms, codons: [{codonId, ...the same}], problems: [records refused or failed]}``;
    codons in the order their first request came (None: requests between codons)."""
    records = list(records)
    by_codon: dict[str | None, list[ProxyRecord]] = {}
    for record in records:
        by_codon.setdefault(record.codon_id, []).append(record)
    return {**_totals(records),
            "codons": [{"codonId": codon, **_totals(group)} for codon, group in by_codon.items()],
            "problems": [record.to_json() for record in records
                         if record.refused or record.error or record.status >= 400]}


def _totals(records: list[ProxyRecord]) -> dict[str, Any]:
    costs = [r.cost for r in records if r.cost is not None]
    return {
        "requests": len(records),
        "refused": sum(1 for r in records if r.refused),
        "errors": sum(1 for r in records if r.error or r.status >= 500 or r.status == 0),
        "held": sum(1 for r in records if r.held_ms),
        "inputTokens": sum(r.input_tokens or 0 for r in records),
        "outputTokens": sum(r.output_tokens or 0 for r in records),
        "cacheReadTokens": sum(r.cache_read_tokens or 0 for r in records),
        "cost": round(sum(costs), 6) if costs else None,
        "ttfbP50Ms": _median(r.ttfb_ms for r in records if not r.refused),
        "durationP50Ms": _median(r.duration_ms for r in records if not r.refused),
    }


def _median(values: Iterable[float | None]) -> float | None:
    found = [value for value in values if value is not None]
    return round(statistics.median(found), 1) if found else None
