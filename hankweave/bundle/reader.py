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

import os
import posixpath
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hankweave.bundle.closure import DEFAULT_QUOTAS, HANK_FILE, LOCK_NAME
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
from hankweave.fsutil import write_fully

__all__ = ["MAX_ARCHIVE_BYTES", "BundleError", "OpenedBundle", "is_bundle_path", "open_bundle"]

MAX_ARCHIVE_BYTES = DEFAULT_QUOTAS.max_total_bytes + 128 * 1024**2
_UNSAFE_NAME = re.compile(r'[\\:*?"<>|\x00-\x1f\x7f]')
_DEVICE = re.compile(r"^(con|prn|aux|nul|com[1-9]|lpt[1-9])(\.|$)", re.IGNORECASE)

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
    lock = parse_lock(members[0].data, "hank.lock")
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
    import zstandard

    try:
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        out = reader.read(MAX_ARCHIVE_BYTES + 1)
    except zstandard.ZstdError as exc:
        raise _Refused(f"is not a zstd archive ({exc}); a .hank file is made by"
                       " `hankweave pack`") from None
    if len(out) > MAX_ARCHIVE_BYTES:
        raise _Refused(f"unpacks to more than {MAX_ARCHIVE_BYTES} bytes")
    return out


def unsafe_member_path(key: str) -> str | None:
    """Why ``key`` may not be a bundle member's path, or None."""
    parts = key.split("/")
    if key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path"
    if any(p.lower() == ".git" for p in parts):
        return "git metadata is never bundled"
    if key == LOCK_NAME:
        return "hank.lock is the lock itself"
    if _UNSAFE_NAME.search(key):
        return "a character that is not portable (\\ : * ? \" < > | or a control character)"
    for part in parts:
        if _DEVICE.match(part):
            return f'"{part}" is a reserved device name on Windows'
        if part.endswith((".", " ")):
            return f'"{part}" ends with a dot or space'
    return None


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
        if digest != entry.sha256 or member.mode != entry.mode:
            differing.append(f"{member.path} (hank.lock: sha256 {entry.sha256[:12]}… mode"
                             f" {entry.mode}; bundle: sha256 {digest[:12]}… mode {member.mode})")
    lines = ([f"missing {p}" for p in missing] + [f"extra {p}" for p in extra]
             + [f"differs: {d}" for d in differing])
    if lines:
        raise _Refused("does not match its hank.lock, so nothing of it was used:\n"
                       + "\n".join(f"  - {line}" for line in lines))


def _extract(path: Path, lock: HankLock, members: list[Member], root: Path) -> OpenedBundle:
    from hankweave.fsutil import private_dir

    target = root / lock.bundle_hash
    existed = target.exists()
    if existed and _still_matches(target, lock):
        return OpenedBundle(path, target, lock, "reused")
    private_dir(root)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        for member in members:
            _write_member(staging, member)
        if existed:
            shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if target.exists() and _still_matches(target, lock):  # a concurrent extraction won
            return OpenedBundle(path, target, lock, "reused")
        raise _Refused(f"cannot extract it into {target}: {exc.strerror or exc}") from None
    return OpenedBundle(path, target, lock, "repaired" if existed else "fresh")


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
