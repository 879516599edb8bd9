"""The ``replay`` harness: plays a codon's recorded records, paced as asked, and its recorded
workspace effects, instead of running an agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from hankweave.api import REPLAY_HARNESS, Harness
from hankweave_replay.player import UNTIMED_GAP_MS, Playback, Player
from hankweave_replay.recording import ReplayRecording, open_recording
from hankweave_replay.workspace import apply_snapshot

if TYPE_CHECKING:
    from hankweave.api import AttemptContext, CodonRequest


class ReplayHarness(Harness):
    """Plays recorded codon logs, and the recorded workspace effects, instead of an agent.

    The class registered as ``replay`` holds no recording; :meth:`open_recording` returns a
    subclass bound to one, which the runtime uses for every codon of the replay.
    """

    name: ClassVar[str] = REPLAY_HARNESS
    package: ClassVar[str] = "hankweave-replay"
    player: ClassVar[Player | None] = None

    @classmethod
    def open_recording(cls, source: Path, *, speed: str = "instant",
                       max_delay_ms: int | None = None) -> ReplayRecording:
        """Open an exported archive, an unpacked recording or an execution directory.

        An execution directory is staged into a temporary recording first (the export code),
        so both kinds of source replay the same way; an archive is unpacked safely (see
        :func:`~hankweave_replay.unpack.unpack_recording`).  Raises
        :class:`~hankweave_replay.format.RecordingError` (a ``ValueError``) with a clear
        message when ``source`` is not something replay can play.
        """
        return open_recording(source, cls, speed=speed, max_delay_ms=max_delay_ms)

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[dict[str, Any]]:
        """Stream the codon's recorded records; apply its workspace effects before the
        ``result`` that ends its last pass (or at the end of a log that has none).

        One call plays one pass, which ends at its ``result`` record; the next pass of the
        same attempt (an extension) continues after it.
        """
        player = type(self).player
        playback = player.playback_for(request.codon_id) if player is not None else None
        if player is None or playback is None:
            yield _no_recording(request.codon_id, player)
            return
        records = playback.records
        cursor = playback.cursor
        if not (0 < cursor < len(records) and records[cursor - 1].get("type") == "result"):
            # Only a pass that ended at a result is continued (an extension); anything else
            # (a retry, an attempt the runtime interrupted) plays the log from the start.
            playback.cursor = 0
        previous: dict[str, Any] | None = None
        while playback.cursor < len(records):
            index = playback.cursor
            record = records[index]
            if player.speed == "recorded" and previous is not None:
                await asyncio.sleep(_gap_ms(previous, record, player.max_delay_ms) / 1000)
            if index == playback.final_result:
                await _apply_effects(playback, request.work_dir)
            playback.cursor = index + 1
            previous = record
            yield dict(record)
            if record.get("type") == "result" and playback.cursor < len(records):
                return  # one pass ends at its result; an extension continues from here
        if playback.final_result is None:
            await _apply_effects(playback, request.work_dir)


def _no_recording(codon_id: str, player: Player | None) -> dict[str, Any]:
    """The error result of a codon the recording cannot play (replay never goes live)."""
    from hankweave.api import base_codon_id, error_result

    if player is None:
        text = ("The replay harness only plays recordings: run with --replay SOURCE or"
                " hankweave replay SOURCE")
    elif codon_id in player.agentless or base_codon_id(codon_id) in player.agentless:
        text = (f"Replay: codon {codon_id} ended before its agent started in the recorded run,"
                " so the recording has no agent log to play")
    else:
        text = (f"Replay: the recording has no log for codon {codon_id} (the recorded run never"
                " reached it); replay never calls a live provider")
    return error_result(text)


def _gap_ms(previous: Mapping[str, Any], record: Mapping[str, Any], cap_ms: int) -> float:
    from hankweave.api import parse_iso

    try:
        gap = (parse_iso(record["timestamp"]) - parse_iso(previous["timestamp"]))
        ms = gap.total_seconds() * 1000
    except (KeyError, TypeError, ValueError):
        ms = UNTIMED_GAP_MS
    if ms < 0:
        ms = UNTIMED_GAP_MS
    return min(ms, cap_ms)


async def _apply_effects(playback: Playback, work_dir: Path) -> None:
    if playback.snapshot is not None:
        await asyncio.to_thread(apply_snapshot, playback.snapshot, playback.patterns, work_dir)
