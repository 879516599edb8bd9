"""Unpacking a recording archive safely: a gzip-compressed tar, read as one metered stream
within :class:`ArchiveLimits`, each member checked before it is written."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tarfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

from hankweave_replay.format import SNAPSHOTS_DIR, RecordingError, size_text
from hankweave_replay.links import check_snapshot_links, link_stays_inside, resolves_inside

MAX_BYTES_ENV = "HANKWEAVE_REPLAY_MAX_BYTES"
MAX_MEMBERS_ENV = "HANKWEAVE_REPLAY_MAX_MEMBERS"
MAX_RATIO_ENV = "HANKWEAVE_REPLAY_MAX_RATIO"
RATIO_FLOOR_BYTES = 1024 * 1024
"""The compression ratio is checked only once this much is unpacked: a small archive of JSON
can legitimately be 20x (or 200x) smaller than its content, and cannot fill a disk."""
_CHUNK = 64 * 1024
"""Members are unpacked in chunks of this size, each counted before it is written."""
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
          (b"\x28\xb5\x2f\xfd", "zstandard"), (b"\x5d\x00\x00", "lzma"),
          (b"PK\x03\x04", "zip"))


@dataclass(frozen=True)
class ArchiveLimits:
    """How much one recording archive may unpack to, checked while it streams, so a
    decompression bomb is refused before it fills the disk.  Each limit is raised with its
    environment variable (:meth:`from_env`)."""

    max_bytes: int = 2 * 1024 ** 3
    """Total unpacked bytes (the tar stream: headers and contents), ``HANKWEAVE_REPLAY_MAX_BYTES``."""
    max_members: int = 100_000
    """Members (files, directories, links), ``HANKWEAVE_REPLAY_MAX_MEMBERS``."""
    max_ratio: float = 200.0
    """Unpacked bytes per archive byte, once :data:`RATIO_FLOOR_BYTES` are unpacked,
    ``HANKWEAVE_REPLAY_MAX_RATIO``."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ArchiveLimits:
        """The defaults, with each limit its environment variable sets (a positive number)."""
        default = cls()
        return cls(max_bytes=int(_limit(env, MAX_BYTES_ENV, default.max_bytes)),
                   max_members=int(_limit(env, MAX_MEMBERS_ENV, default.max_members)),
                   max_ratio=_limit(env, MAX_RATIO_ENV, default.max_ratio, float))


def _limit(env: Mapping[str, str], name: str, default: float, parse: type[float] = int
           ) -> float:
    """The positive number ``name`` sets (``parse``: int or float), else ``default``."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = 0
    if not value > 0:
        raise RecordingError(f"{name}={raw!r} is not a positive"
                             f" {'whole number' if parse is int else 'number'}")
    return value


class _MeteredStream:
    """The decompressed bytes of an archive, counted as the tar reader takes them: a read
    that would pass :attr:`ArchiveLimits.max_bytes` or the ratio raises, so nothing past a
    limit ever reaches the disk."""

    def __init__(self, source: Any, name: str, packed: int, limits: ArchiveLimits) -> None:
        self._source = source
        self._name = name
        self._packed = max(packed, 1)
        self._limits = limits
        self.unpacked = 0

    def read(self, size: int = -1) -> bytes:
        # Bounded whatever is asked: tarfile's stream reader loops over short reads.
        data: bytes = self._source.read(_CHUNK if size is None or size < 0
                                        else min(size, _CHUNK))
        self.unpacked += len(data)
        limits = self._limits
        if self.unpacked > limits.max_bytes:
            raise RecordingError(
                f"refusing to unpack {self._name}: it unpacks to more than"
                f" {size_text(limits.max_bytes)} ({MAX_BYTES_ENV}={limits.max_bytes}; raise it to"
                " open a recording this large); nothing of it was kept")
        if self.unpacked > RATIO_FLOOR_BYTES and \
                self.unpacked > limits.max_ratio * self._packed:
            raise RecordingError(
                f"refusing to unpack {self._name}: its compression ratio passes"
                f" {limits.max_ratio:g}x ({size_text(self._packed)} unpacking to more than"
                f" {size_text(self.unpacked)}; a decompression bomb?) ({MAX_RATIO_ENV}="
                f"{limits.max_ratio:g}; raise it to open this recording); nothing of it was"
                " kept")
        return data


def _compression(archive: Path) -> str:
    """What ``archive`` is compressed with, from its first bytes."""
    with open(archive, "rb") as handle:
        head = handle.read(512)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[257:262] == b"ustar":
        return "a plain tar (not compressed)"
    return "not a known archive format"


def unpack_recording(archive: Path, target: Path, *,
                     limits: ArchiveLimits | None = None) -> None:
    """Extract a recording archive into the new directory ``target``, refusing anything unsafe.

    Only what ``hankweave export`` writes is accepted: a gzip-compressed tar.  It is read as
    one stream, counted as it decompresses, within ``limits`` (default: from the environment,
    :meth:`ArchiveLimits.from_env`).  Refused (the whole archive, with a message naming the
    member): absolute names, names with ``..``, hard links, device files and FIFOs, symlinks
    outside ``snapshots/`` or resolving (through the links before them, and once all are
    unpacked) out of their snapshot, and members that would be written through or over a
    symlink.  A refused archive leaves nothing behind: ``target`` is removed.
    """
    archive = Path(archive)
    limits = ArchiveLimits.from_env(os.environ) if limits is None else limits
    damaged = (tarfile.TarError, EOFError, OSError, zlib.error)
    packed = _gzip_size(archive)
    target.mkdir(parents=True, exist_ok=False)
    try:
        _extract_stream(archive, packed, target, limits)
        check_snapshot_links(target)
    except BaseException as exc:
        shutil.rmtree(target, ignore_errors=True)
        if isinstance(exc, damaged) and not isinstance(exc, RecordingError):
            raise RecordingError(f"the archive is damaged: {exc}") from None
        raise


def _gzip_size(archive: Path) -> int:
    """The size of ``archive``, refused unless it is gzip-compressed (what export writes)."""
    try:
        found = _compression(archive)
        packed = archive.stat().st_size
    except OSError as exc:
        raise RecordingError(f"cannot read {archive}: {exc.strerror or exc}") from None
    if found != "gzip":
        raise RecordingError(
            f"{archive.name} is not a recording archive: recordings are gzip-compressed tar"
            f" files (.hwrec.tar.gz, as hankweave export writes them), and this one is"
            f" {found if found.startswith(('a ', 'not ')) else found + '-compressed'}")
    return packed


def _extract_stream(archive: Path, packed: int, target: Path, limits: ArchiveLimits) -> None:
    """Every member of ``archive``, in one metered pass, into ``target``."""
    with open(archive, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
        stream = _MeteredStream(unzipped, archive.name, packed, limits)
        try:
            # Stream mode: one pass, no seeking back (which would unpack again).
            tar = tarfile.open(  # noqa: SIM115 - closed below; its errors differ
                fileobj=cast("IO[bytes]", stream), mode="r|")
        except tarfile.ReadError as exc:
            raise RecordingError(f"not a recording archive (a .tar.gz): {exc}") from None
        with tar:
            for count, member in enumerate(tar, start=1):
                if count > limits.max_members:
                    raise RecordingError(
                        f"refusing to unpack {archive.name}: it holds more than"
                        f" {limits.max_members} members ({MAX_MEMBERS_ENV}="
                        f"{limits.max_members}; raise it to open a recording this"
                        " large); nothing of it was kept")
                _extract_member(tar, member, target)


_Refusal = Callable[[str], RecordingError]
"""Makes the error refusing the member being unpacked, from why."""


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    name = member.name

    def refuse(why: str) -> RecordingError:
        return RecordingError(f"refusing to unpack the archive: member {name!r} {why}")

    parts = _member_parts(name, refuse)
    if not parts:
        return  # the archive's own root
    dest = target.joinpath(*parts)
    _check_parents(target, parts, refuse)
    if os.path.islink(dest):
        raise refuse("would replace a symlink written by an earlier member")
    if member.isdir():
        dest.mkdir(parents=True, exist_ok=True)
    elif member.isfile():
        _write_file(tar, member, dest, refuse)
    elif member.issym():
        _write_symlink(member, parts, dest, target, refuse)
    elif member.islnk():
        raise refuse("is a hard link")
    else:
        raise refuse("is a device file or FIFO")


def _member_parts(name: str, refuse: _Refusal) -> list[str]:
    """The path parts of a member's name; refused when it is absolute or climbs out."""
    if "\x00" in name or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise refuse("has an absolute path")
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p != "."]
    if ".." in parts:
        raise refuse("climbs out of the archive with '..'")
    return parts


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path,
                refuse: _Refusal) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    if source is None:
        raise refuse("has no content")
    with source, open(dest, "wb") as out:
        while chunk := source.read(_CHUNK):
            out.write(chunk)
    dest.chmod(0o755 if member.mode & 0o111 else 0o644)


def _write_symlink(member: tarfile.TarInfo, parts: list[str], dest: Path, target: Path,
                   refuse: _Refusal) -> None:
    """A symlink is only ever part of a snapshot, and stays inside it."""
    if len(parts) < 3 or parts[0] != SNAPSHOTS_DIR:
        raise refuse("is a symlink outside snapshots/")
    if not link_stays_inside("/".join(parts[2:]), member.linkname):
        raise refuse(f"is a symlink pointing outside its snapshot ({member.linkname!r})")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Followed through the links already unpacked (``q -> .`` then ``p -> q/q/../..``):
    # the text alone says nothing about where a chain of links lands.
    if not resolves_inside(dest.parent / member.linkname, target / SNAPSHOTS_DIR / parts[1]):
        raise refuse(f"is a symlink that resolves outside its snapshot"
                     f" ({member.linkname!r}, through the links before it)")
    os.symlink(member.linkname, dest)


def _check_parents(target: Path, parts: list[str], refuse: _Refusal) -> None:
    current = target
    for part in parts[:-1]:
        current = current / part
        if os.path.islink(current):
            raise refuse("would be written through a symlink")
        if os.path.lexists(current) and not current.is_dir():
            raise refuse("lies under a file")
