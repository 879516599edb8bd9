"""Replay recorded hankweave executions offline, and export them as portable recordings.

**Recordings.** ``hankweave export -e DIR -o FILE`` packs a finished execution into one
``.hwrec.tar.gz`` archive that replays on any machine::

    recording.json          the manifest (RecordingManifest): which codon records it covers
    state.json              the recorded state, run folders made relative
    execution-meta.json     hank and data paths pointing inside the archive
    hank/                   the hank directory: hank.json and every file it references
    data/                   the data source, when it is small (<= 10 MiB)
    logs/<runId>/*.log      the codon logs of the covered records
    snapshots/<checkpoint>/ each covered record's end-of-codon checkpoint, as plain files

Snapshots are written by the execution's own checkpoint backend
(:meth:`~hankweave.checkpoints.CheckpointStore.materialize`), so the archive never holds a
nested git repository.  Secrets are left out or redacted: no ``runtime.lock`` (the control
token), no ``logs/server.log``, no event journal, no environment; in every file written, the
values of the recorded ``env`` maps, of provider-key variables (those of the exporting shell and
those assigned anywhere in the recording), of secret-looking shell variables and the
``HANKWEAVE_<X>`` passthrough, and common token shapes become ``[REDACTED:<kind>]``
(:class:`hankweave.api.Redactor`; ``--no-redact`` opts out).

**Replay.** :class:`ReplayHarness` is the harness registered as ``replay``.  The kernel's
``--replay SOURCE`` (and ``hankweave replay SOURCE``) calls :meth:`ReplayHarness.open_recording`
with an archive, an unpacked recording or an execution directory (exported to a temporary
directory first, so there is one path), then runs the recorded hank in a fresh execution with a
harness class bound to the recording; the new execution keeps a copy of the opened recording
(``.hankweave/recording/``), which ``hankweave run -e DIR`` reopens to resume the replay.  Each
codon streams its recorded log records unchanged, instantly or with the recorded gaps, and just
before the ``result`` record that ends its last pass makes the recorded workspace effects
happen: the covered files of ``agentRoot/`` become exactly those of the recorded end-of-codon
snapshot.  A replay never calls a provider.

One concern per module:

=================  ==========================================================================
``format``         the archive's layout, its suffix and :class:`RecordingError`
``manifest``       ``recording.json`` (:class:`RecordingManifest`)
``execution``      reading the execution a recording is made of (``minimal``: 0.10.0 states)
``staging``        the staging directory, the hank and the data (``codons``: logs, snapshots)
``redaction``      the two-pass redaction of a staged recording
``export``         :func:`stage_recording` and :func:`export_recording`
``unpack``         :func:`unpack_recording` within :class:`ArchiveLimits`
``links``          where a symlink lands (shared by export, unpacking and playing)
``recording``      opening a source for replay (:class:`ReplayRecording`)
``player``         what a replay plays, codon by codon
``harness``        :class:`ReplayHarness`
``workspace``      :func:`apply_snapshot`: a codon's recorded workspace effects
``plugin``         the entry point every ``hankweave`` start loads (hooks, ``export``)
``cli``            what ``hankweave export`` does
=================  ==========================================================================

This package is imported by the entry point at every start, so it imports only the light
format module; every other name is imported when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hankweave.api import lazy_exports
from hankweave_replay.format import (
    FORMAT,
    FORMAT_VERSION,
    RECORDING_SUFFIX,
    RecordingError,
    __version__,
)

if TYPE_CHECKING:
    from hankweave_replay.cli import run_export_command
    from hankweave_replay.export import ExportResult, export_recording, stage_recording
    from hankweave_replay.harness import ReplayHarness
    from hankweave_replay.manifest import RecordedCodon, RecordingManifest, read_manifest
    from hankweave_replay.player import DEFAULT_MAX_DELAY_MS, SPEEDS, UNTIMED_GAP_MS
    from hankweave_replay.plugin import export_command
    from hankweave_replay.recording import ReplayRecording
    from hankweave_replay.staging import MAX_DATA_BYTES, MAX_HANK_FILE_BYTES
    from hankweave_replay.unpack import ArchiveLimits, unpack_recording
    from hankweave_replay.workspace import apply_snapshot

__getattr__ = lazy_exports(globals(), {
    "run_export_command": "hankweave_replay.cli",
    "ExportResult": "hankweave_replay.export",
    "export_recording": "hankweave_replay.export",
    "stage_recording": "hankweave_replay.export",
    "ReplayHarness": "hankweave_replay.harness",
    "RecordedCodon": "hankweave_replay.manifest",
    "RecordingManifest": "hankweave_replay.manifest",
    "read_manifest": "hankweave_replay.manifest",
    "DEFAULT_MAX_DELAY_MS": "hankweave_replay.player",
    "SPEEDS": "hankweave_replay.player",
    "UNTIMED_GAP_MS": "hankweave_replay.player",
    "export_command": "hankweave_replay.plugin",
    "ReplayRecording": "hankweave_replay.recording",
    "MAX_DATA_BYTES": "hankweave_replay.staging",
    "MAX_HANK_FILE_BYTES": "hankweave_replay.staging",
    "ArchiveLimits": "hankweave_replay.unpack",
    "unpack_recording": "hankweave_replay.unpack",
    "apply_snapshot": "hankweave_replay.workspace",
})

__all__ = [
    "DEFAULT_MAX_DELAY_MS",
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_DATA_BYTES",
    "MAX_HANK_FILE_BYTES",
    "RECORDING_SUFFIX",
    "SPEEDS",
    "UNTIMED_GAP_MS",
    "ArchiveLimits",
    "ExportResult",
    "RecordedCodon",
    "RecordingError",
    "RecordingManifest",
    "ReplayHarness",
    "ReplayRecording",
    "__version__",
    "apply_snapshot",
    "export_command",
    "export_recording",
    "read_manifest",
    "run_export_command",
    "stage_recording",
    "unpack_recording",
]
