"""``hankweave pack``: write a hank as one ``.hank`` bundle with its ``hank.lock``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from hankweave.cli.errors import CLIError
from hankweave.exitcodes import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from hankweave.bundle.closure import Finding
    from hankweave.bundle.pack import PackResult


@click.command("pack")
@click.argument("hank", required=False, default=".", metavar="[HANK]")
@click.option("-o", "--output", metavar="FILE.hank",
              help="The bundle to write (default: <meta.name>-<meta.version>.hank here).")
@click.option("--no-lock", is_flag=True,
              help="Do not write hank.lock beside the hank (the bundle holds its own).")
@click.option("--check", is_flag=True,
              help="Only check that the hank can be packed; write nothing.")
@click.option("--min-runtime", metavar="VERSION",
              help="The oldest Hankweave runtime the bundle says it needs (default: 0.12.0).")
def pack_command(hank: str, output: str | None, no_lock: bool, check: bool,
                 min_runtime: str | None) -> None:
    """Pack HANK (a hank directory or its hank.json; default: here) into a .hank bundle.

    The bundle holds exactly what the hank refers to (hank.json, prompts, sentinel configs and
    their files, copied directories minus ignored junk) and a hank.lock with every file's
    sha256 and mode. The same hank packs to the same bytes. `hankweave run FILE.hank DATA`
    checks every file against the lock before anything runs (docs/bundles.md).
    """
    from hankweave.bundle.pack import PackError, pack_hank

    if check and output:
        raise CLIError("--check writes nothing: --output does not go with it")
    try:
        result = pack_hank(Path(hank), output=Path(output) if output else None, check=check,
                           write_sidecar=not no_lock, runtime_min=min_runtime)
    except PackError as exc:
        raise CLIError(str(exc), EXIT_FAILED) from None
    closure = result.closure
    _show_findings(closure.findings)
    if not closure.ok:
        raise CLIError(f"{hank}: {len(closure.errors)} problem(s) above; nothing was packed",
                       EXIT_USAGE)
    if check:
        click.echo(f"{hank}: can be packed ({len(closure.files)} files)")
        return
    assert result.lock is not None and result.output is not None
    _show_bundle(result)


def _show_findings(findings: list[Finding]) -> None:
    from hankweave.bundle.closure import printable

    for finding in sorted(findings, key=lambda f: (f.severity != "error", f.category, f.where)):
        label = "error" if finding.severity == "error" else "warning"
        click.echo(printable(f"{label}: {finding.where}: {finding.detail}"
                             f" [{finding.category}]"), err=True)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / 1024 / 1024:.1f} MiB"


def _show_bundle(result: PackResult) -> None:
    from hankweave.bundle.closure import printable

    lock, closure, output = result.lock, result.closure, result.output
    assert lock is not None and output is not None  # a bundle was written
    unpacked = sum(len(f.data) for f in closure.files.values())
    click.echo(f"Packed {output}")
    for item in closure.sorted_files():
        flag = " · executable" if item.mode == "755" else ""
        click.echo(f"  {printable(item.path)}  {_size(len(item.data))}{flag}")
    click.echo(f"  {len(closure.files)} files · {_size(unpacked)} unpacked ·"
               f" {_size(result.bundle_bytes)} bundle")
    click.echo(f"  bundleHash {lock.bundle_hash}")
    click.echo(f"  runtime.min {lock.runtime.min}")
    if result.sidecar is not None:
        click.echo(f"  wrote {result.sidecar}")
    click.echo(f"Run it: hankweave run {_quoted(output)} DATA")


def _quoted(path: Path) -> str:
    import shlex

    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    return shlex.quote(str(shown))
