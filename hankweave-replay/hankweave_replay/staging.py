"""The staging directory of an export: the unpacked recording as it is written, member by
member, with the notes of what was left out; the hank directory and the data source."""

from __future__ import annotations

import json
import os
import posixpath
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave_replay.format import DATA_DIR, HANK_DIR, RECORDING_SUFFIX, RecordingError, size_text
from hankweave_replay.redaction import redact_tree

if TYPE_CHECKING:
    from hankweave.api import ExecutionLayout

MAX_DATA_BYTES = 10 * 1024 * 1024
"""A data source larger than this (in total) is left out of the archive, with a note."""
MAX_HANK_FILE_BYTES = 10 * 1024 * 1024
"""A hank-directory file larger than this is left out (hank files are prompts and templates)."""

Collected = tuple[list[tuple[str, Path, os.stat_result]], list[str]]
"""The files of a directory that go into a recording (member path, file, its ``lstat``), and
what is left out of it."""


@dataclass
class Staging:
    """What one export collects while it writes the staging directory."""

    root: Path
    notes: list[str] = field(default_factory=list)
    redactions: Counter[str] = field(default_factory=Counter)
    redacted_files: list[str] = field(default_factory=list)

    def write(self, relative: str, data: bytes, *, executable: bool = False) -> None:
        """Write one archive member (redacted later, once every member is known)."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o755 if executable else 0o644)

    def redact(self, env: Mapping[str, str]) -> None:
        """Replace every secret in every staged file (symlinks of snapshots are not files)."""
        counts, files = redact_tree(self.root, env)
        self.redactions.update(counts)
        self.redacted_files.extend(files)

    def note_redactions(self) -> int:
        """Note how many secrets were replaced and where; the total."""
        total = sum(self.redactions.values())
        if total:
            shown = ", ".join(self.redacted_files[:10])
            more = len(self.redacted_files) - 10
            self.notes.append(f"{total} secret(s) replaced with [REDACTED:<kind>] in"
                              f" {shown}{f' and {more} more file(s)' if more > 0 else ''}")
        return total


def stage_hank(staging: Staging, hank_file: Path, skip: set[Path]) -> str:
    """Copy the hank directory; the hank file's member path."""
    _copy_files(staging, HANK_DIR, "hank directory",
                _collect(hank_file.parent, skip, keep=hank_file))
    member = f"{HANK_DIR}/{hank_file.name}"
    if not (staging.root / member).is_file():
        raise RecordingError(f"the hank file {hank_file} cannot be recorded (a dotfile or not"
                             " a regular file)")
    return member


def stage_data(staging: Staging, layout: ExecutionLayout, meta: Mapping[str, Any],
               skip: set[Path]) -> str | None:
    """Copy the data source when it is small; None (with a note) when it is not recorded.

    The execution's own data link (or copy) is what its agents saw, so it is read first; the
    source named in the metadata is the fallback.
    """
    given = meta.get("readOnlySourceDataPath")
    named = Path(given) if isinstance(given, str) and given else None
    source = layout.data_link if layout.data_link.exists() else named
    if source is None or not source.exists():
        staging.notes.append(f"the data source {named.name if named else '(unknown)'} no"
                             " longer exists; the replay uses an empty data directory")
        return None
    if source.is_file():
        size = source.stat().st_size
        if size > MAX_DATA_BYTES:
            staging.notes.append(_data_too_large(named, size))
            return None
        member = f"{DATA_DIR}/{named.name if named else 'data'}"
        staging.write(member, source.read_bytes())
        return member
    collected = _collect(source, skip)
    size = sum(info.st_size for _, _, info in collected[0])
    if size > MAX_DATA_BYTES:
        staging.notes.append(_data_too_large(named, size))
        return None
    _copy_files(staging, DATA_DIR, "data source", collected)
    (staging.root / DATA_DIR).mkdir(exist_ok=True)  # an empty data source is still one
    return DATA_DIR


def neutral_meta(meta: Mapping[str, Any], hank_member: str, data_member: str | None) -> bytes:
    """``execution-meta.json`` with the recording machine's paths replaced by archive paths."""
    neutral = dict(meta)
    neutral.pop("readOnlySourceResolvedDataPath", None)
    neutral.pop("recording", None)  # a replayed execution's own copy: not in the archive
    neutral["readOnlySourceDataPath"] = data_member or ""
    neutral["hankPath"] = hank_member
    bundle = neutral.get("bundlePath")
    if isinstance(bundle, str) and not isinstance(neutral.get("remote"), dict):
        neutral["bundlePath"] = posixpath.basename(bundle)  # the bundle's name, not its folder
    remote = neutral.get("remote")
    if isinstance(remote, dict) and str(remote.get("url", "")).startswith("file:"):
        neutral["remote"] = {**remote, "url": "file://…/" + posixpath.basename(
            str(remote["url"]).rstrip("/"))}
    return (json.dumps(neutral, indent=2, ensure_ascii=False) + "\n").encode()


def _data_too_large(source: Path | None, size: int) -> str:
    # Names, not paths: a recording carries no path of the machine it was made on.
    return (f"the data source {source.name if source else ''} ({size_text(size)}) is larger"
            f" than {size_text(MAX_DATA_BYTES)} and was left out; the replay uses an empty data"
            " directory unless DATA is given")


def _skipped_name(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def _collect(source: Path, skip: set[Path], keep: Path | None = None) -> Collected:
    """The files of a hank or data directory that go into a recording, and what is left out.

    Dotfiles and dot-directories (``.git``, ``.env``, ...), ``__pycache__``, earlier recordings
    and the paths in ``skip`` are left out silently; symlinks, special files, execution
    directories and files over :data:`MAX_HANK_FILE_BYTES` are left out and listed.  ``keep``
    (the hank file) is taken whatever its size.
    """
    files: list[tuple[str, Path, os.stat_result]] = []
    left_out: list[str] = []
    for directory, dirnames, filenames in os.walk(source):
        base = Path(directory)
        rel_dir = base.relative_to(source).as_posix()
        prefix = "" if rel_dir == "." else f"{rel_dir}/"
        kept = []
        for name in sorted(dirnames):
            path = base / name
            if _skipped_name(name) or Path(os.path.abspath(path)) in skip:
                continue
            if path.is_symlink() or (path / ".hankweave").is_dir():
                left_out.append(f"{prefix}{name}/")
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = base / name
            if (_skipped_name(name) or name.endswith(RECORDING_SUFFIX)
                    or Path(os.path.abspath(path)) in skip):
                continue  # an example's bundled recording, the archive being written
            info = path.lstat()
            too_large = info.st_size > MAX_HANK_FILE_BYTES and path != keep
            if not stat.S_ISREG(info.st_mode) or too_large:
                left_out.append(f"{prefix}{name}")
                continue
            files.append((f"{prefix}{name}", path, info))
    return files, left_out


def _copy_files(staging: Staging, member_root: str, what: str, collected: Collected) -> None:
    files, left_out = collected
    for rel, path, info in files:
        staging.write(f"{member_root}/{rel}", path.read_bytes(),
                      executable=bool(info.st_mode & 0o111))
    if left_out:
        shown = ", ".join(left_out[:10])
        more = f" and {len(left_out) - 10} more" if len(left_out) > 10 else ""
        staging.notes.append(f"left out of the {what} (links, special files, execution"
                             f" directories or files over {size_text(MAX_HANK_FILE_BYTES)}):"
                             f" {shown}{more}")
