"""``hankweave cleanup``: remove one execution directory, after saying what it is.

Deliberate differences from Hankweave 0.10.0's ``--cleanup``: it targets exactly the ``-e``
directory and never runs execution setup first (which could create a directory only to delete
it); it refuses only a *live* runtime lock (a live process with a fresh heartbeat), so a stale
lock left by a crash does not block; and it refuses anything that is not an execution directory
(no ``.hankweave/``), the managed root, ``/`` and the home directory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hankweave.cli.errors import CLIError
from hankweave.cli.options import execution_option
from hankweave.exitcodes import EXIT_FAILED

if TYPE_CHECKING:
    from hankweave.execution.layout import ExecutionLayout

CANCELLED = "Cancelled; nothing removed."


@click.command("cleanup")
@execution_option("The execution directory to remove.")
@click.option("-y", "--yes", is_flag=True, help="Remove without asking for confirmation.")
def cleanup_command(execution_dir: Path, yes: bool) -> None:
    """Remove an execution directory (its state, journal, logs, checkpoints and agentRoot/).

    Shows what the directory holds and asks for confirmation first, unless -y is given; without
    a terminal to ask on, the answer is no. Refuses while a live runtime holds the directory's
    lock; a stale lock left by a crashed runtime does not block.
    """
    from hankweave.execution.layout import ExecutionLayout

    path = Path(os.path.abspath(execution_dir))
    _check_removable(path, _managed_roots())
    layout = ExecutionLayout(path)
    stale = _refuse_live_lock(layout)

    _describe(layout)
    if stale is not None:
        click.echo(f"A stale runtime lock is left from {stale}; it does not block removal.")
    if not yes and not _confirmed(f"Remove {path} and everything in it?"):
        click.echo(CANCELLED, err=True)
        # SystemExit rather than ctx.exit(): run_cli calls main(standalone_mode=False), which
        # returns the code of click's Exit instead of raising it, and would report success.
        raise SystemExit(EXIT_FAILED)

    # A runtime may have started while we were asking.
    _refuse_live_lock(layout)
    from hankweave.execution.setup import remove_tree

    try:
        remove_tree(path)
    except OSError as exc:
        where = exc.filename or path
        raise CLIError(
            f"Cleanup failed at {where}: {exc.strerror or exc}. Part of {path} may already be "
            "removed; fix the cause and run cleanup again.",
            EXIT_FAILED,
        ) from None
    click.echo(f"Removed {path}.")


# ----- checks -----


def _managed_roots() -> list[Path]:
    """Every managed executions root a launch from here could use: the resolved one, and each
    place it may come from (``$HANKWEAVE_HOME``, ``./hankweave.json``'s ``executionBaseDir``,
    ``$HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR``, the default), so none of them is removed as if
    it were one execution."""
    from hankweave.config.errors import ConfigError
    from hankweave.config.settings import RUNTIME_CONFIG_FILE, load_runtime_config
    from hankweave.execution.setup import managed_executions_root

    configured = None
    settings_file = Path(RUNTIME_CONFIG_FILE)
    # An invalid file names no root; the others are still protected.
    if settings_file.is_file():
        with contextlib.suppress(ConfigError):
            configured = load_runtime_config(settings_file).execution_base_dir
    candidates = [managed_executions_root(), managed_executions_root({}, configured),
                  managed_executions_root({}, os.environ.get(
                      "HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR")),
                  managed_executions_root({})]
    return list(dict.fromkeys(candidates))


def _check_removable(path: Path, managed_roots: list[Path]) -> None:
    if not os.path.lexists(path):
        raise CLIError(f"execution directory {path}: does not exist")
    if path.is_symlink():
        raise CLIError(
            f"{path} is a symbolic link; pass the directory it points to "
            f"({os.path.realpath(path)}) if that is the execution to remove"
        )
    if not path.is_dir():
        raise CLIError(f"execution directory {path}: not a directory")
    real = Path(os.path.realpath(path))
    protected = {
        Path("/"): "the root directory",
        Path(os.path.realpath(Path.home())): "your home directory",
        **{Path(os.path.realpath(root)): "the managed executions root" for root in managed_roots},
    }
    for place, what in protected.items():
        if real == place:
            raise CLIError(f"Refusing to remove {path}: it is {what}, not an execution directory")
        if place.is_relative_to(real):
            raise CLIError(
                f"Refusing to remove {path}: it contains {what} ({place}), so it is not an "
                "execution directory"
            )
    from hankweave.execution.layout import HANKWEAVE_DIR

    if not (path / HANKWEAVE_DIR).is_dir():
        raise CLIError(
            f"{path} is not an execution directory (it has no {HANKWEAVE_DIR}/); nothing removed"
        )


def _refuse_live_lock(layout: ExecutionLayout) -> str | None:
    """Raise if a live runtime holds the directory; else describe a stale lock, if any."""
    from hankweave.state.lock import LockCorruptError, lock_is_live, read_lock

    try:
        lock = read_lock(layout.hankweave_dir)
    except LockCorruptError:
        raise CLIError(
            f"Cannot read the runtime lock {layout.lock_file}, so a runtime may still be using "
            f"{layout.path}. If none is, delete that file and run cleanup again."
        ) from None
    except OSError as exc:
        raise CLIError(f"Cannot read {layout.lock_file}: {exc.strerror or exc}") from None
    if lock is None:
        return None
    if lock_is_live(lock):
        started = lock.startTime or "at an unknown time"
        raise CLIError(
            f"Refusing to remove {layout.path}: a hankweave runtime is using it (pid {lock.pid}, "
            f"started {started}). Stop it first, or wait for it to exit."
        )
    return lock.describe()


def _confirmed(question: str) -> bool:
    """Ask on the terminal; a session that cannot ask (no terminal, CI) answers no."""
    from hankweave.cli.run_cmd import interactive

    if not interactive():
        click.echo(f"{question} [y/N]: no (no terminal to ask on; pass -y to confirm)", err=True)
        return False
    try:
        return click.confirm(question, default=False, err=True)
    except click.exceptions.Abort:  # Ctrl-C or end of input at the prompt
        click.echo("", err=True)
        return False


# ----- description -----


def _describe(layout: ExecutionLayout) -> None:
    from hankweave.execution.meta import ExecutionMetaError, load_execution_meta

    click.echo(f"Execution directory: {layout.path}")
    try:
        meta = load_execution_meta(layout.meta_file)
    except ExecutionMetaError as exc:
        click.echo(f"  metadata:  unavailable ({exc})")
    else:
        click.echo(f"  hank:      {meta.hank_path or 'unknown'}")
        click.echo(f"  data:      {meta.read_only_source_data_path} ({meta.link_type})")
        click.echo(f"  created:   {_time(meta.created_at)}")
        click.echo(f"  last used: {_time(meta.last_used)}")
    size, files = disk_usage(layout.path)
    click.echo(
        f"  size:      {format_size(size)} in {files} files (the data source is not included "
        "when it is linked)"
    )


def _time(timestamp: str) -> str:
    return timestamp.replace("T", " ")[:19] if timestamp else "unknown"


def disk_usage(path: Path) -> tuple[int, int]:
    """Total size in bytes and number of files below ``path``, never following symlinks (so a
    linked data source is not counted)."""
    total = files = 0
    stack = [path]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
                    files += 1
            except OSError:
                continue
    return total, files


def format_size(size: int) -> str:
    """``512 B``, ``1.5 KiB``, ``12.0 MiB``..."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


__all__ = ["cleanup_command", "disk_usage", "format_size"]
