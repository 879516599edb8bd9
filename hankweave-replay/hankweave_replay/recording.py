"""Opening a recording for replay: an archive (unpacked safely), an unpacked recording or an
execution directory (staged first, so every source replays the same way)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave_replay.export import stage_recording
from hankweave_replay.format import MANIFEST_FILE, RecordingError
from hankweave_replay.links import check_snapshot_links
from hankweave_replay.manifest import RecordingManifest, read_manifest
from hankweave_replay.player import DEFAULT_MAX_DELAY_MS, SPEEDS, Playback, Player, read_playback
from hankweave_replay.unpack import unpack_recording

if TYPE_CHECKING:
    from hankweave.api import Harness


@dataclass
class ReplayRecording:
    """A recording opened for replay (see
    :meth:`~hankweave_replay.harness.ReplayHarness.open_recording`): what
    ``hankweave run --replay`` plays (the kernel's ``Playback``)."""

    root: Path
    """The unpacked recording: the source itself, or the temporary directory it was unpacked
    into.  The new execution keeps a copy of it, which a resume opens."""
    hank_path: Path
    """The recorded hank file (inside the recording)."""
    data_path: Path | None
    """The data source to link into the new execution (None: an empty one is used)."""
    harness: type[Harness]
    """The harness class, bound to this recording, that plays its codons."""
    logs: Mapping[str, Path] = field(default_factory=dict)
    """Recorded codon logs by runtime codon id."""
    warnings: list[str] = field(default_factory=list)
    """Things the user should know (torn lines, unknown records, a missing data snapshot)."""
    complete: bool = True
    """Whether the recorded execution had finished its plan."""
    reached: tuple[str, ...] = ()
    """The codon ids the recording has records of."""
    agentless: frozenset[str] = frozenset()
    """Codons whose recorded record ended before an agent started (no log is needed)."""
    manifest: RecordingManifest | None = None
    cleanup: Path | None = None
    """The temporary directory the recording was unpacked into, removed by :meth:`close`."""

    def missing_logs(self, codon_ids: Sequence[str]) -> list[str]:
        """The planned codons this recording cannot play.

        A codon needs a log unless its recorded record ended before an agent started.  When
        the recording stopped early (a failed or stopped run), codons planned after the last
        one it reached are not missing: the replay stops where the recording did.
        """
        from hankweave.api import base_codon_id

        def known(codon_id: str, names: Any) -> bool:
            return codon_id in names or base_codon_id(codon_id) in names

        last = len(codon_ids) - 1
        if not self.complete:
            reached = [i for i, cid in enumerate(codon_ids) if known(cid, self.reached)]
            last = reached[-1] if reached else -1
        return [cid for i, cid in enumerate(codon_ids) if i <= last
                and not known(cid, self.logs) and not known(cid, self.agentless)]

    def close(self) -> None:
        """Remove the temporary directory the recording was unpacked into (if any)."""
        if self.cleanup is not None:
            shutil.rmtree(self.cleanup, ignore_errors=True)
            self.cleanup = None


def open_recording(source: Path, harness: type[Harness], *, speed: str,
                   max_delay_ms: int | None) -> ReplayRecording:
    """Open ``source`` for replay with a subclass of ``harness`` bound to it (see
    :meth:`~hankweave_replay.harness.ReplayHarness.open_recording`)."""
    if speed not in SPEEDS:
        raise RecordingError(f"unknown replay speed {speed!r} (use {' or '.join(SPEEDS)})")
    delay = DEFAULT_MAX_DELAY_MS if max_delay_ms is None else max(0, int(max_delay_ms))
    source = Path(source)
    if source.is_dir() and (source / MANIFEST_FILE).is_file():
        return _open_unpacked(source, harness=harness, speed=speed, max_delay_ms=delay,
                              cleanup=None)
    if not source.exists():
        raise RecordingError(f"{source}: no such file or directory")
    if source.is_dir() and not (source / ".hankweave").is_dir():
        raise RecordingError(f"{source} is neither an execution directory (no .hankweave/)"
                             f" nor an unpacked recording (no {MANIFEST_FILE})")
    scratch = Path(tempfile.mkdtemp(prefix="hankweave-replay-"))
    try:
        root = scratch / "recording"
        if source.is_dir():
            stage_recording(source, root, env=os.environ, cwd=Path.cwd(), minimal=True)
        else:
            unpack_recording(source, root)
        return _open_unpacked(root, harness=harness, speed=speed, max_delay_ms=delay,
                              cleanup=scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


@dataclass
class _Codons:
    """What a recording's codons give its replay."""

    playbacks: dict[str, Playback] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    agentless: set[str] = field(default_factory=set)


def _open_unpacked(root: Path, *, harness: type[Harness], speed: str,
                   max_delay_ms: int, cleanup: Path | None) -> ReplayRecording:
    # An unpacked recording (or an execution's kept copy) was not checked by unpack_recording.
    check_snapshot_links(root)
    manifest = read_manifest(root)
    hank_path = root / manifest.hank
    if not hank_path.is_file():
        raise RecordingError(f"the recording's hank file {manifest.hank} is missing")
    data_path = root / manifest.data if manifest.data else None
    if data_path is not None and not data_path.exists():
        data_path = None
    warnings = [f"recording: {note}" for note in manifest.notes]
    codons = _read_codons(root, manifest, warnings)
    player = Player(codons.playbacks, frozenset(codons.agentless), speed, max_delay_ms)
    bound = type(harness.__name__, (harness,), {"player": player,
                                                "__module__": harness.__module__})
    return ReplayRecording(
        root=root, hank_path=hank_path, data_path=data_path, harness=bound, logs=codons.logs,
        warnings=warnings, complete=manifest.complete,
        reached=tuple(c.codon_id for c in manifest.codons),
        agentless=frozenset(codons.agentless), manifest=manifest, cleanup=cleanup)


def _read_codons(root: Path, manifest: RecordingManifest, warnings: list[str]) -> _Codons:
    """Each recorded codon's playback; what the user should know is added to ``warnings``."""
    codons = _Codons()
    for codon in manifest.codons:
        if codon.status == "skipped":
            # A skip is a user's command, not something the agent did: it is not replayed.
            warnings.append(f"codon {codon.codon_id} was skipped in the recorded run; the"
                            " replay plays what its agent recorded and does not skip it")
        if codon.log is None:
            codons.agentless.add(codon.codon_id)
            continue
        log_path = root / codon.log
        if not log_path.is_file():
            continue  # reported by missing_logs, before anything runs
        codons.playbacks[codon.codon_id] = read_playback(root, codon, codon.log, warnings)
        codons.logs[codon.codon_id] = log_path
    return codons
