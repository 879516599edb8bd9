"""What a replay plays: each codon's recorded records, where its last pass ends, and where its
replay stands."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave_replay.format import SNAPSHOTS_DIR
from hankweave_replay.manifest import RecordedCodon

SPEEDS = ("instant", "recorded")
DEFAULT_MAX_DELAY_MS = 5000
"""The cap on one recorded gap in ``recorded`` pacing (the original's default)."""
UNTIMED_GAP_MS = 5
"""The gap in ``recorded`` pacing when a record has no usable timestamp (the original's)."""


@dataclass
class Playback:
    """One codon's recorded log, and where its replay stands."""

    codon_id: str
    log_member: str
    records: list[dict[str, Any]]
    final_result: int | None
    """Index of the ``result`` record that ends the last pass (see :func:`last_pass_result`),
    before which the workspace effects happen; None when the log has no result."""
    snapshot: Path | None
    patterns: tuple[str, ...]
    cursor: int = 0
    """The next record to play.  A pass stops after a ``result`` record; the next pass of the
    same attempt (an extension) continues here, and a new attempt starts again at 0."""


@dataclass
class Player:
    """Everything a bound :class:`~hankweave_replay.harness.ReplayHarness` plays from."""

    codons: dict[str, Playback]
    agentless: frozenset[str]
    speed: str
    max_delay_ms: int

    def playback_for(self, codon_id: str) -> Playback | None:
        from hankweave.api import base_codon_id

        found = self.codons.get(codon_id)
        if found is None and "#" in codon_id:
            base = self.codons.get(base_codon_id(codon_id))
            if base is not None:
                # A loop codon recorded under its base id: every iteration plays it afresh.
                found = self.codons.setdefault(codon_id, Playback(
                    codon_id, base.log_member, base.records, base.final_result, base.snapshot,
                    base.patterns))
        return found


def read_playback(root: Path, codon: RecordedCodon, log: str, warnings: list[str]) -> Playback:
    """The playback of ``codon`` from its log ``log`` in the recording at ``root``; what the
    user should know about the log and the snapshot is added to ``warnings``."""
    from hankweave.api import LogReadReport, UnknownRecord, read_log

    report = LogReadReport()
    # Unknown records are skipped, as the codon-log reader's contract says replay does.
    records = [record.to_dict() for record in read_log(root / log, report)
               if not isinstance(record, UnknownRecord)]
    for problem in report.problems:
        warnings.append(f"codon {codon.codon_id} ({log}): {problem}; skipped, the"
                        " valid records are replayed")
    if report.torn_tail:
        warnings.append(f"codon {codon.codon_id} ({log}): torn last line"
                        f" ({report.torn_tail_bytes} bytes) ignored; the valid records are"
                        " replayed")
    if not any(r.get("type") == "result" for r in records):
        warnings.append(f"codon {codon.codon_id} ({log}): the recorded log ends"
                        " without a result record (the agent was cut off); on replay the"
                        " codon fails as it exited without a result message")
    snapshot = root / SNAPSHOTS_DIR / codon.snapshot if codon.snapshot else None
    if snapshot is not None and not snapshot.is_dir():
        warnings.append(f"codon {codon.codon_id}: snapshot {codon.snapshot} is missing from"
                        " the recording; its file changes are not replayed")
        snapshot = None
    return Playback(codon.codon_id, log, records, last_pass_result(records), snapshot,
                    tuple(codon.checkpoint_patterns))


def last_pass_result(records: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the ``result`` that ends the codon's last pass: the first result after
    which no conversation record (``assistant``, ``user``, a new ``system`` ``init``) follows.

    A pass ends at its result, so what a log holds after that result is never played: the real
    Claude CLI can write an ``error_during_execution`` result after a success.  A log that
    extends its session (an extension: more messages after a result) ends its last pass at a
    later result.  When the last pass ends without a result (the agent was cut off during an
    extension), it is the log's last result; None for a log without any.
    """
    final: int | None = None
    last_result: int | None = None
    for index, record in enumerate(records):
        kind = record.get("type")
        if kind == "result":
            last_result = index
            if final is None:
                final = index
        elif kind in ("assistant", "user") or (kind == "system"
                                                and record.get("subtype") == "init"):
            final = None
    return final if final is not None else last_result
