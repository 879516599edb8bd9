"""``outputFiles``: copying a completed codon's results out of agentRoot (docs/behaviour.md §1.5, docs/behaviour.md §3.6 step 11).

Each group first runs its ``beforeCopy`` commands in agentRoot, then copies what its globs
match into the output directory, keeping relative paths. The globs follow fast-glob with
``dot: true`` and ``onlyFiles: false`` as in Hankweave: dot files and directories match, and
``.gitignore`` is **not** applied (unlike checkpoints and archives). A matched directory is copied
with everything below it; symlinks are copied as symlinks.

Without ``overwrite`` an existing destination is kept and the copy is written beside it as
``<base>_<n>_<unixSeconds><ext>``. Any failure stops the copy and raises
:class:`OutputCopyError` naming the group; the runtime then fails the run.

The copy runs after the codon is recorded completed, so nothing would redo it after a crash:
:func:`copy_codon_outputs` records each copy that finished (``.hankweave/output-copy.json``),
and the next runtime finishes the copy of the newest completed codon when that record does
not name it (:mod:`hankweave.runtime.interrupted`), keeping what was already copied.
"""

from __future__ import annotations

import asyncio
import filecmp
import json
import os
import posixpath
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hankweave.config.hank import OutputFileGroup
from hankweave.faults import disk_write, kill_point
from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes
from hankweave.runtime.rig import CommandPolicy, CommandRunner, run_command
from hankweave.workspace import DATA_LINK, glob_regex

if TYPE_CHECKING:
    from hankweave.runtime.context import RunContext

__all__ = [
    "MAX_CONFLICT_COPIES",
    "OutputCopyError",
    "OutputCopyResult",
    "copy_codon_outputs",
    "copy_outputs",
    "expand_output_globs",
    "last_finished_copy",
    "resolve_conflict",
]

MAX_CONFLICT_COPIES = 99
"""Renamed copies tried per destination (``_1_`` … ``_99_``) before giving up."""


class OutputCopyError(Exception):
    """An output group could not be copied: ``Copy group <i> failed with: <cause>``."""

    def __init__(self, group_index: int, cause: str) -> None:
        super().__init__(f"Copy group {group_index} failed with: {cause}")
        self.group_index = group_index
        self.cause = cause


@dataclass
class OutputCopyResult:
    """What :func:`copy_outputs` wrote.

    Attributes:
        copied: every destination written (top-level matches; a directory counts once).
        renamed: ``(wanted, written)`` destination pairs for copies that found their path taken;
            the ``info`` event reports their basenames.
    """

    copied: list[Path] = field(default_factory=list)
    renamed: list[tuple[Path, Path]] = field(default_factory=list)


def _walk_all(root: Path) -> Iterator[tuple[str, bool]]:
    """``(relative path, is a real directory)`` for everything under ``root``, parents first.

    Symlinks are entries, never followed; only the input-data link is left out.
    """

    def visit(directory: Path, rel_dir: str) -> Iterator[tuple[str, bool]]:
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if rel_dir == "" and entry.name == DATA_LINK:
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            yield rel, is_dir
            if is_dir:
                yield from visit(Path(entry.path), rel)

    yield from visit(root, "")


def expand_output_globs(agent_root: Path, patterns: Sequence[str]) -> list[str]:
    """The paths under ``agent_root`` an output group copies, relative and ``/``-separated.

    Files, symlinks and directories match (dot files included, ``.gitignore`` ignored). A match
    inside a matched directory is dropped: copying the directory already brings it along, and
    copying it again would only collide with itself.
    """
    regexes = [glob_regex(pattern) for pattern in patterns if pattern.strip()]
    selected: list[str] = []
    copied_dirs: list[str] = []
    for rel, is_dir in _walk_all(agent_root):
        if any(rel.startswith(directory + "/") for directory in copied_dirs):
            continue
        if any(regex.fullmatch(rel) for regex in regexes):
            selected.append(rel)
            if is_dir:
                copied_dirs.append(rel)
    return selected


def resolve_conflict(destination: Path, *, now: float | None = None) -> Path:
    """A free path for a copy whose ``destination`` is taken: ``<base>_<n>_<unixSeconds><ext>``.

    Raises:
        FileExistsError: all of ``n`` = 1 … 99 are taken too.
    """
    stamp = int(time.time() if now is None else now)
    base, ext = posixpath.splitext(destination.name)
    for n in range(1, MAX_CONFLICT_COPIES + 1):
        candidate = destination.with_name(f"{base}_{n}_{stamp}{ext}")
        if not os.path.lexists(candidate):
            return candidate
    raise FileExistsError(
        f"Too many conflicting copies of '{destination.name}' (>{MAX_CONFLICT_COPIES}). "
        "Consider cleaning the output directory or using a unique output path."
    )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _copy_over(source: Path, destination: Path) -> None:
    """Copy ``source`` to ``destination``, replacing what is in the way (for ``overwrite``).

    Directories merge into an existing directory; anything else of a different kind is removed
    first, so a symlink is never written through.
    """
    source_is_dir = source.is_dir() and not source.is_symlink()
    if os.path.lexists(destination):
        destination_is_dir = destination.is_dir() and not destination.is_symlink()
        if not (source_is_dir and destination_is_dir):
            _remove(destination)
    if not source_is_dir:
        _copy_file(source, destination)
        return
    destination.mkdir(exist_ok=True)
    shutil.copystat(source, destination)
    for child in sorted(os.listdir(source)):
        _copy_over(source / child, destination / child)


def _copy_new(source: Path, destination: Path) -> None:
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, destination, symlinks=True, copy_function=_copy_file)
    else:
        _copy_file(source, destination)


_PARTIAL = ".hankweave-partial"
"""The suffix of a file being copied, renamed to its name once complete."""


def _copy_file(source: str | Path, destination: str | Path) -> None:
    """Copy a file or symlink so that ``destination`` is either absent or complete: a copy a
    crash cut short leaves only a ``.<name>.hankweave-partial`` file, which a resumed copy
    removes."""
    destination = Path(destination)
    partial = destination.with_name(f".{destination.name}{_PARTIAL}")
    shutil.copy2(source, partial, follow_symlinks=False)
    os.replace(partial, destination)


def _remove_partial(destination: Path) -> None:
    """Remove what an interrupted :func:`_copy_file` left for ``destination`` (and, for a
    directory, below it)."""
    candidates = [destination.with_name(f".{destination.name}{_PARTIAL}")]
    if destination.is_dir() and not destination.is_symlink():
        candidates += destination.rglob(f".*{_PARTIAL}")
    for leftover in candidates:
        if leftover.is_file() or leftover.is_symlink():
            leftover.unlink()


def _copied_before(source: Path, destination: Path) -> bool:
    """Whether an interrupted copy already wrote ``source`` to ``destination``: a symlink with
    the same target, or a file with the same bytes (a directory is finished by merging)."""
    if source.is_symlink() or destination.is_symlink():
        return (source.is_symlink() and destination.is_symlink()
                and os.readlink(source) == os.readlink(destination))
    return source.is_file() and destination.is_file() and filecmp.cmp(source, destination,
                                                                      shallow=False)


def _copy_group(
    patterns: Sequence[str], agent_root: Path, output_dir: Path, overwrite: bool,
    resume: bool = False,
) -> OutputCopyResult:
    result = OutputCopyResult()
    output_dir.mkdir(parents=True, exist_ok=True)
    for rel in expand_output_globs(agent_root, patterns):
        source = agent_root / rel
        if not os.path.lexists(source):
            # Gone since the glob ran (a beforeCopy command of another group, a watcher).
            continue
        destination = output_dir / rel
        destination.parent.mkdir(parents=True, exist_ok=True)
        disk_write(destination)  # test-only disk faults (docs/crash-testing.md)
        if resume:
            _remove_partial(destination)
            if os.path.lexists(destination) and _copied_before(source, destination):
                continue
        if overwrite or (resume and source.is_dir() and not source.is_symlink()
                         and destination.is_dir() and not destination.is_symlink()):
            _copy_over(source, destination)
        else:
            if os.path.lexists(destination):
                wanted, destination = destination, resolve_conflict(destination)
                result.renamed.append((wanted, destination))
            _copy_new(source, destination)
        result.copied.append(destination)
        kill_point("outputs.copy")  # test-only (docs/crash-testing.md)
    return result


async def copy_outputs(
    groups: Sequence[OutputFileGroup],
    *,
    agent_root: Path,
    output_dir: Path,
    env: Mapping[str, str],
    overwrite: bool,
    run_command: CommandRunner = run_command,
    resume: bool = False,
    commands: CommandPolicy = CommandPolicy.RUN,
    on_notice: Callable[[str], None] = lambda line: None,
) -> OutputCopyResult:
    """Run every output group: its ``beforeCopy`` commands, then its copy.

    Args:
        groups: the codon's ``outputFiles``.
        agent_root: where commands run and globs are matched.
        output_dir: where matches are copied (created if missing).
        env: the environment added to the runtime's own for ``beforeCopy`` commands (the
            codon's ``env``).
        overwrite: ``--overwrite-output``: replace existing destinations instead of renaming.
        run_command: the shell command runner (:func:`hankweave.runtime.rig.run_command`).
        resume: finish a copy a crash interrupted: a destination that already holds its
            source is left as it is, a directory is merged into.
        commands: whether ``beforeCopy`` commands run, are announced then run, or are skipped
            (a skipped command is not a failure: the copy goes on).
        on_notice: the line :meth:`CommandPolicy.notice` gives for a command.

    Raises:
        OutputCopyError: a command failed or a copy raised; later groups are not run.
    """
    command_env = {**os.environ, **env}
    total = OutputCopyResult()
    for index, group in enumerate(groups):
        for before in group.before_copy or ():
            notice = commands.notice(f"output group {index} beforeCopy", before.command.run)
            if notice is not None:
                on_notice(notice)
            if commands is CommandPolicy.SKIP:
                continue
            try:
                outcome = await run_command(before.command.run, cwd=agent_root, env=command_env)
            except OSError as exc:
                raise OutputCopyError(index, f"Command could not be started: {exc}") from exc
            if not outcome.ok:
                detail = outcome.stderr.strip().splitlines()[-1:] or [""]
                raise OutputCopyError(
                    index,
                    f"Command failed with exit code {outcome.exit_code}: {before.command.run}"
                    + (f" ({detail[0]})" if detail[0] else ""),
                )
        try:
            copied = await asyncio.to_thread(
                _copy_group, group.copy_, agent_root, output_dir, overwrite, resume
            )
        except OSError as exc:
            raise OutputCopyError(index, str(exc)) from exc
        total.copied.extend(copied.copied)
        total.renamed.extend(copied.renamed)
    return total


async def copy_codon_outputs(ctx: RunContext, codon_id: str, *, run_id: str | None = None,
                             resume: bool = False) -> bool:
    """Copy a completed codon's ``outputFiles`` out, when an output directory is set, and
    record that the copy finished (``.hankweave/output-copy.json``).

    ``run_id`` is the run of the codon's record (default: the current run).  Returns False
    when the copy failed: that is reported as a fatal error and the run ends; the next start
    copies again (:mod:`hankweave.runtime.interrupted`).
    """
    codon = ctx.codon_config(codon_id)
    output_dir = ctx.config.settings.output_directory
    if not codon.output_files or output_dir is None:
        return True
    try:
        copied = await copy_outputs(
            codon.output_files, agent_root=ctx.layout.agent_root, output_dir=output_dir,
            env=ctx.prompts.env(codon), overwrite=ctx.config.settings.overwrite_output, resume=resume,
            commands=ctx.config.commands,
            on_notice=lambda line: ctx.reporter.info(f"[REPLAY] codon {codon_id}: {line}"))
    except OutputCopyError as exc:
        ctx.reporter.error(f"{exc} (the next run of this execution copies the outputs of"
                           f" {codon_id} again)", codon=codon_id, fatal=True,
                           severity="operation")
        return False
    done = {"runId": run_id or ctx.run_id, "codonId": codon_id}
    atomic_write_bytes(ctx.layout.output_copy_marker, json.dumps(done).encode(),
                       mode=PRIVATE_FILE_MODE)
    for original, resolved in copied.renamed:
        ctx.reporter.info(f"Output {original.name} exists; copied as {resolved.name}")
    return True


def last_finished_copy(marker: Path) -> tuple[str, str] | None:
    """``(run id, codon id)`` of the record whose output copy finished last, if known."""
    try:
        done = json.loads(marker.read_bytes())
        return str(done["runId"]), str(done["codonId"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
