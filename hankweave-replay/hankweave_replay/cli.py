"""What ``hankweave export`` does once its options are parsed (the command itself is defined in
:mod:`hankweave_replay.plugin`, which every ``hankweave`` start loads)."""

from __future__ import annotations

from pathlib import Path

import click

from hankweave_replay.export import export_recording
from hankweave_replay.format import RecordingError
from hankweave_replay.manifest import RecordingManifest


def run_export_command(execution_dir: Path, output: Path | None, backend: str | None,
                       redact: bool = True) -> None:
    """What ``hankweave export`` does: write the recording and say where it is and what it
    redacted."""
    from hankweave.api import CLIError

    if not redact:
        click.echo("Warning: --no-redact: the recording will hold the execution's secrets"
                   " verbatim (env values, provider keys, tokens printed in logs); share it only"
                   " with people who may see them.", err=True)
    try:
        result = export_recording(execution_dir, output, backend=backend, redact=redact)
    except RecordingError as exc:
        raise CLIError(f"Cannot export {execution_dir}: {exc}") from None
    manifest = result.manifest
    snapshots = len({c.snapshot for c in manifest.codons if c.snapshot})
    click.echo(f"Wrote {result.path} ({result.size / 1024:.1f} KiB): {len(manifest.codons)}"
               f" codon(s), {snapshots} workspace snapshot(s)")
    if redact:
        click.echo(_redaction_summary(manifest))
    for note in manifest.notes:
        click.echo(f"  note: {note}")
    click.echo(f"Replay it offline:  hankweave replay {result.path}")


def _redaction_summary(manifest: RecordingManifest) -> str:
    """``Redacted 3 secrets: 1 env, 1 provider-key, 1 token``."""
    total = manifest.redactions
    kinds = ", ".join(f"{count} {kind}" for kind, count in manifest.redactions_by_kind.items())
    return f"Redacted {total} secret{'' if total == 1 else 's'}{f': {kinds}' if kinds else ''}"
