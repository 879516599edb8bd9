"""Opening a ``.hank`` bundle: verify every byte against its lock, then extract it once.

Nothing of a bundle is used before all of it is checked, in this order: a regular file of at
most :data:`MAX_ARCHIVE_BYTES`; zstd; the canonical tar profile (:mod:`hankweave.bundle.tar`);
``hank.lock`` first; a valid v1 lock whose paths are safe; ``hank.json`` present; each member
against the lock (every missing, extra or differing file is named, not only the first); the
``bundleHash`` recomputed from the files; the runtime it needs. Only then is it extracted, into
a content-addressed cache (``<cacheDir>/bundles/<bundleHash>/``): a staging directory renamed
into place, so a half-written extraction is never used. An existing extraction is used again
only if it still holds exactly the bundle's files, byte for byte and mode for mode.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hankweave.bundle.closure import (
    DEFAULT_QUOTAS,
    HANK_FILE,
    LOCK_NAME,
    printable,
    unsafe_member_path,
)
from hankweave.bundle.lock import (
    COMPATIBLE_RUNTIME,
    HankLock,
    LockError,
    parse_lock,
    sha256_hex,
    version_tuple,
)
from hankweave.bundle.tar import BundleFormatError, Member, read_tar
from hankweave.config.errors import ConfigError
from hankweave.fsutil import private_dir, write_fully

__all__ = ["MAX_ARCHIVE_BYTES", "BundleError", "OpenedBundle", "is_bundle_path", "open_bundle"]

MAX_ARCHIVE_BYTES = DEFAULT_QUOTAS.max_total_bytes + 128 * 1024**2
MAX_LOCK_BYTES = 64 * 1024**2
"""A lock of 50,000 files is about 10 MB: a larger one is not a lock pack writes."""
_CHUNK = 1024**2
_SHOWN = 20
"""How many missing, extra or differing files a refusal lists."""

Extraction = Literal["fresh", "reused", "repaired"]


class BundleError(ConfigError):
    """A bundle that cannot be used; nothing of it was run or extracted."""


@dataclass(frozen=True)
class OpenedBundle:
    """A verified bundle and where its files are."""

    bundle_path: Path
    hank_dir: Path
    lock: HankLock
    extraction: Extraction

    @property
    def hank_path(self) -> Path:
        return self.hank_dir / HANK_FILE

    @property
    def bundle_hash(self) -> str:
        return self.lock.bundle_hash


def is_bundle_path(argument: str | os.PathLike[str]) -> bool:
    """A hank argument that names a bundle file (a directory named ``x.hank`` is a hank)."""
    text = os.fspath(argument)
    return text.endswith((".hank", ".tar.zst")) and not os.path.isdir(text)


def bundle_cache_dir(cache_root: Path) -> Path:
    return cache_root / "bundles"


def open_bundle(path: Path, cache_root: Path) -> OpenedBundle:
    """Verify the bundle at ``path`` and extract it under ``cache_root`` (module docstring).

    Raises:
        BundleError: the bundle is not usable; the message names the file and what is wrong.
    """
    path = Path(os.path.abspath(path))
    try:
        lock, members = verify_bundle(path)
        return _extract(path, lock, members, bundle_cache_dir(cache_root))
    except (BundleFormatError, LockError, _Refused) as exc:
        raise BundleError(f"{path}: {exc}") from None


class _Refused(Exception):
    pass


def verify_bundle(path: Path) -> tuple[HankLock, list[Member]]:
    """The lock and files of the bundle at ``path``, every check passed."""
    data = _read(path)
    tar = _decompress(data)
    members = read_tar(tar, DEFAULT_QUOTAS)
    if not members or members[0].path != LOCK_NAME:
        raise _Refused("hank.lock must be the bundle's first member; this is not a packed hank")
    if len(members[0].data) > MAX_LOCK_BYTES:
        raise _Refused(f"its hank.lock is {len(members[0].data)} bytes; a lock is at most"
                       f" {MAX_LOCK_BYTES}")
    order = [m.path.encode("utf-8") for m in members[1:]]
    if order != sorted(order):
        raise _Refused("its files are not in the order pack writes them; this is not a"
                       " packed hank")
    lock = parse_lock(bytes(members[0].data), "hank.lock",
                      max_files=DEFAULT_QUOTAS.max_members)
    for key in lock.files:
        problem = unsafe_member_path(key)
        if problem:
            raise _Refused(f"hank.lock lists {key!r}: {problem}")
    if HANK_FILE not in lock.files:
        raise _Refused("hank.lock lists no hank.json")
    _compare(lock, members[1:])
    needed = lock.runtime.min
    if version_tuple(needed) > version_tuple(COMPATIBLE_RUNTIME):
        raise _Refused(f"the bundle needs a Hankweave {needed} runtime; this hankweave runs"
                       f" hanks of Hankweave {COMPATIBLE_RUNTIME} (repack it with --min-runtime"
                       f" {COMPATIBLE_RUNTIME} if it does not need more)")
    return lock, members


def _read(path: Path) -> bytes:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise _Refused("does not exist") from None
    if not stat.S_ISREG(info.st_mode):
        raise _Refused("is not a regular file")
    if info.st_size > MAX_ARCHIVE_BYTES:
        raise _Refused(f"is {info.st_size} bytes; a bundle may be at most {MAX_ARCHIVE_BYTES}")
    return path.read_bytes()


def _decompress(data: bytes) -> bytes:
    """One zstd frame, nothing after it, at most :data:`MAX_ARCHIVE_BYTES` unpacked (checked
    as it unpacks, so a bomb stops at the limit)."""
    import zstandard

    inflater = zstandard.ZstdDecompressor().decompressobj()
    out = bytearray()
    consumed = 0
    try:
        while consumed < len(data) and not inflater.eof:
            out += inflater.decompress(data[consumed:consumed + _CHUNK])
            consumed = min(len(data), consumed + _CHUNK)
            if len(out) > MAX_ARCHIVE_BYTES:
                raise _Refused(f"unpacks to more than {MAX_ARCHIVE_BYTES} bytes")
    except zstandard.ZstdError as exc:
        raise _Refused(f"is not a zstd archive ({exc}); a .hank file is made by"
                       " `hankweave pack`") from None
    if not inflater.eof:
        raise _Refused("is not a whole zstd archive (it ends early); a .hank file is made by"
                       " `hankweave pack`")
    trailing = len(inflater.unused_data) + len(data) - consumed
    if trailing:
        raise _Refused(f"has {trailing} bytes after its zstd frame")
    return bytes(out)


def _compare(lock: HankLock, members: list[Member]) -> None:
    by_path = {m.path: m for m in members}
    missing = [p for p in lock.files if p not in by_path]
    extra = [m.path for m in members if m.path not in lock.files]
    differing = []
    for member in members:
        entry = lock.files.get(member.path)
        if entry is None:
            continue
        digest = sha256_hex(member.data)
        changes = ([f"sha256 {digest[:12]}…, hank.lock says {entry.sha256[:12]}…"]
                   if digest != entry.sha256 else [])
        if member.mode != entry.mode:
            changes.append(f"mode {member.mode}, hank.lock says {entry.mode}")
        if changes:
            differing.append(f"{member.path} ({'; '.join(changes)})")
    lines = ([f"missing {p}" for p in missing] + [f"extra {p}" for p in extra]
             + [f"differs: {d}" for d in differing])
    if lines:
        shown = [printable(line) for line in lines[:_SHOWN]]
        if len(lines) > _SHOWN:
            shown.append(f"… and {len(lines) - _SHOWN} more")
        raise _Refused("does not match its hank.lock; nothing of it was used:\n"
                       + "\n".join(f"  - {line}" for line in shown))


def _extract(path: Path, lock: HankLock, members: list[Member], root: Path) -> OpenedBundle:
    target = root / lock.bundle_hash
    existed = os.path.lexists(target)
    if existed and _still_matches(target, lock):
        return OpenedBundle(path, target, lock, "reused")
    private_dir(root)
    _sweep_staging(root)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        for member in members:
            _write_member(staging, member)
        if existed:
            _remove(target)
        os.rename(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if target.exists() and _still_matches(target, lock):  # a concurrent extraction won
            return OpenedBundle(path, target, lock, "reused")
        raise _Refused(f"cannot extract it into {target}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return OpenedBundle(path, target, lock, "repaired" if existed else "fresh")


def _remove(target: Path) -> None:
    if target.is_symlink() or not target.is_dir():
        target.unlink()
    else:
        shutil.rmtree(target, ignore_errors=True)


def _sweep_staging(root: Path) -> None:
    """Staging folders an interrupted extraction left (over an hour old: not in progress)."""
    for leftover in root.glob(".staging-*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.lstat().st_mtime > 3600:
                shutil.rmtree(leftover)


def _write_member(staging: Path, member: Member) -> None:
    destination = staging / member.path
    if not os.path.abspath(destination).startswith(str(staging) + os.sep):
        raise _Refused(f"{member.path}: escapes the extraction directory")
    destination.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o755 if member.mode == "755" else 0o644
    fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        write_fully(fd, member.data)
    finally:
        os.close(fd)


def _still_matches(target: Path, lock: HankLock) -> bool:
    """The extraction holds exactly the locked files (and the lock), unchanged."""
    if target.is_symlink() or not target.is_dir():
        return False
    found: set[str] = set()
    for directory, _, names in os.walk(target):
        for name in names:
            full = Path(directory, name)
            relative = posixpath.relpath(full.as_posix(), target.as_posix())
            if relative == LOCK_NAME:
                continue
            entry = lock.files.get(relative)
            info = os.lstat(full)
            mode = "755" if info.st_mode & 0o111 else "644"
            if (entry is None or not stat.S_ISREG(info.st_mode) or mode != entry.mode
                    or sha256_hex(full.read_bytes()) != entry.sha256):
                return False
            found.add(relative)
    return found == set(lock.files)
