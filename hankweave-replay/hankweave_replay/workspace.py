"""A recorded codon's workspace effects: the files of ``agentRoot/`` that its checkpoint
patterns select made exactly those of its end-of-codon snapshot, never through a symlink."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

from hankweave_replay.format import RecordingError
from hankweave_replay.links import resolves_inside


def apply_snapshot(snapshot: Path, patterns: Sequence[str], work_dir: Path) -> None:
    """Make the files of ``work_dir`` that ``patterns`` select exactly those of ``snapshot``.

    Every snapshot file is written (content, executable bit; a symlink as a symlink), then
    every other file the patterns select (``.gitignore`` honoured, the data link never) is
    deleted, with directories that deletion emptied.  Nothing is ever written or deleted through
    a symlinked directory, so the effects stay inside ``work_dir``.  Files the patterns do not
    select (the agent's scratch, rig copies no checkpoint covers) are left alone, as a
    checkpoint restore leaves them.
    """
    from hankweave.api import resolve_patterns

    work_dir = Path(work_dir)
    wanted = sorted(_snapshot_files(snapshot))
    links = [rel for rel in wanted if (snapshot / rel).is_symlink()]
    for rel in wanted:
        if rel not in links:
            _install(snapshot / rel, work_dir, rel)
    for rel in links:
        _install_link(os.readlink(snapshot / rel), work_dir, rel)
    # With every link in place: a later link can redirect an earlier one.
    for rel in links:
        _check_link(work_dir, rel, remove=True)
    keep = set(wanted)
    for rel in resolve_patterns(work_dir, patterns):
        if rel not in keep:
            _remove(work_dir, rel)


def _snapshot_files(root: Path) -> Iterator[str]:
    for directory, dirnames, filenames in os.walk(root):
        base = Path(directory)
        for name in dirnames:
            if (base / name).is_symlink():
                yield (base / name).relative_to(root).as_posix()
        for name in filenames:
            yield (base / name).relative_to(root).as_posix()


def _install_link(link: str, work_dir: Path, rel: str) -> None:
    """Make ``rel`` the symlink ``link``, unless it would resolve outside ``work_dir`` (the
    snapshot stays inside its own tree, but ``work_dir`` may hold links it does not)."""
    dest = _safe_parent(work_dir, rel) / PurePosixPath(rel).name
    if dest.is_symlink() and os.readlink(dest) == link:
        _check_link(work_dir, rel, remove=False)
        return
    if not resolves_inside(dest.parent / link, work_dir):
        raise _escaping_link(rel, link)
    _clear(dest)
    os.symlink(link, dest)


def _check_link(work_dir: Path, rel: str, *, remove: bool) -> None:
    path = work_dir.joinpath(*PurePosixPath(rel).parts)
    if path.is_symlink() and not resolves_inside(path, work_dir):
        link = os.readlink(path)
        if remove:
            path.unlink()
        raise _escaping_link(rel, link)


def _escaping_link(rel: str, link: str) -> RecordingError:
    return RecordingError(f"refusing to apply the recorded snapshot: the symlink {rel!r} ->"
                          f" {link!r} would resolve outside agentRoot")


def _install(source: Path, work_dir: Path, rel: str) -> None:
    dest = _safe_parent(work_dir, rel) / PurePosixPath(rel).name
    data = source.read_bytes()
    mode = 0o755 if source.stat().st_mode & 0o111 else 0o644
    if dest.is_file() and not dest.is_symlink():
        current = dest.stat()
        if stat.S_IMODE(current.st_mode) & 0o111 == mode & 0o111 and \
                current.st_size == len(data) and dest.read_bytes() == data:
            return  # already as recorded: leave it (and its mtime) alone
    _clear(dest)
    dest.write_bytes(data)
    dest.chmod(mode)


def _safe_parent(work_dir: Path, rel: str) -> Path:
    """The directory that will hold ``rel``, made of real directories under ``work_dir``:
    a symlink or file in the way (the recorded agent replaced it) is removed, never followed."""
    current = work_dir
    for part in PurePosixPath(rel).parent.parts:
        current = current / part
        if current.is_symlink() or (os.path.lexists(current) and not current.is_dir()):
            current.unlink()
        current.mkdir(exist_ok=True)
    return current


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _remove(work_dir: Path, rel: str) -> None:
    parent = work_dir
    for part in PurePosixPath(rel).parent.parts:
        parent = parent / part
        if parent.is_symlink() or not parent.is_dir():
            return  # never delete through a link
    target = parent / PurePosixPath(rel).name
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    while parent != work_dir:
        try:
            parent.rmdir()  # only when the deletion emptied it
        except OSError:
            break
        parent = parent.parent
