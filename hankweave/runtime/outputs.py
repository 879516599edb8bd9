"""``outputFiles``: copying a completed codon's results out of agentRoot (docs/behaviour.md §1.5, docs/behaviour.md §3.6 step 11).

Each group first runs its ``beforeCopy`` commands in agentRoot, then copies what its globs
match into the output directory, keeping relative paths. The globs follow fast-glob with
``dot: true`` and ``onlyFiles: false`` as in Hankweave: dot files and directories match, and
``.gitignore`` is **not** applied (unlike checkpoints and archives). A matched directory is copied
with everything below it; symlinks are copied as symlinks.

Without ``overwrite`` an existing destination is kept and the copy is written beside it as
``<base>_<n>_<unixSeconds><ext>``. Any failure stops the copy and raises
:class:`OutputCopyError` naming the group; the runtime then fails the run.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hankweave.config.hank import OutputFileGroup
from hankweave.runtime.rig import CommandRunner, run_command
from hankweave.workspace import DATA_LINK, glob_regex

__all__ = [
    "MAX_CONFLICT_COPIES",
    "OutputCopyError",
    "OutputCopyResult",
    "copy_outputs",
    "expand_output_globs",
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
        shutil.copy2(source, destination, follow_symlinks=False)
        return
    destination.mkdir(exist_ok=True)
    shutil.copystat(source, destination)
    for child in sorted(os.listdir(source)):
        _copy_over(source / child, destination / child)


def _copy_new(source: Path, destination: Path) -> None:
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, destination, symlinks=True)
    else:
        shutil.copy2(source, destination, follow_symlinks=False)


def _copy_group(
    patterns: Sequence[str], agent_root: Path, output_dir: Path, overwrite: bool
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
        if overwrite:
            _copy_over(source, destination)
        else:
            if os.path.lexists(destination):
                wanted, destination = destination, resolve_conflict(destination)
                result.renamed.append((wanted, destination))
            _copy_new(source, destination)
        result.copied.append(destination)
    return result


async def copy_outputs(
    groups: Sequence[OutputFileGroup],
    *,
    agent_root: Path,
    output_dir: Path,
    env: Mapping[str, str],
    overwrite: bool,
    run_command: CommandRunner = run_command,
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

    Raises:
        OutputCopyError: a command failed or a copy raised; later groups are not run.
    """
    command_env = {**os.environ, **env}
    total = OutputCopyResult()
    for index, group in enumerate(groups):
        for before in group.before_copy or ():
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
                _copy_group, group.copy_, agent_root, output_dir, overwrite
            )
        except OSError as exc:
            raise OutputCopyError(index, str(exc)) from exc
        total.copied.extend(copied.copied)
        total.renamed.extend(copied.renamed)
    return total
