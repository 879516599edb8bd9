"""Where a symlink lands: the one set of checks export, unpacking, opening and applying a
snapshot share, so a recording's links can never reach outside the tree they belong to."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from hankweave_replay.format import SNAPSHOTS_DIR, RecordingError


def link_stays_inside(rel: str, target: str) -> bool:
    """Whether a symlink at ``rel`` (relative to a root) pointing at ``target`` stays inside it."""
    if not target or target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", target):
        return False
    parts: list[str] = list(PurePosixPath(rel).parent.parts)
    for part in PurePosixPath(target.replace("\\", "/")).parts:
        if part == "..":
            if not parts:
                return False
            parts.pop()
        elif part != ".":
            parts.append(part)
    return True


def resolves_inside(path: Path, area: Path) -> bool:
    """Whether ``path``, every symlink on it followed as the file system would, lands inside
    ``area`` (or is ``area`` itself)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(area))


def check_snapshot_links(root: Path) -> None:
    """Refuse a recording (unpacked at ``root``) holding a symlink that, with every link of the
    recording in place, resolves out of its snapshot: a later link can redirect an earlier
    one, and an unpacked recording was never checked while it was unpacked."""
    snapshots = root / SNAPSHOTS_DIR
    if not snapshots.is_dir():
        return
    for snapshot in sorted(snapshots.iterdir()):
        if snapshot.is_symlink():
            raise RecordingError(f"refusing the recording: {SNAPSHOTS_DIR}/{snapshot.name}"
                                 " is a symlink")
        if not snapshot.is_dir():
            continue
        for directory, dirnames, filenames in os.walk(snapshot):
            for entry in sorted(dirnames + filenames):
                path = Path(directory, entry)
                if path.is_symlink() and not resolves_inside(path, snapshot):
                    member = path.relative_to(root).as_posix()
                    raise RecordingError(
                        f"refusing the recording: member {member!r} is a symlink that resolves"
                        f" outside its snapshot ({os.readlink(path)!r}, through the links of"
                        " the recording)")
