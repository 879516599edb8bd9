"""The content-addressed object store: ``objects/<2 hex>/<62 hex>``, named by SHA-256.

An object is written to ``tmp/``, fsynced (in batches, on a few threads) and only then renamed
into place, so it is never seen torn; :meth:`ObjectStore.sync` also fsyncs the directories it
entered, before any manifest may refer to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hankweave.api import PRIVATE_FILE_MODE, CheckpointStorageError, fsync_dir, private_dir
from hankweave_checkpoint_snapshot.formats import HASH, FileEntry, SymlinkEntry

SMALL_FILE_BYTES = 4 * 1024 * 1024
"""Files up to this size are read whole; larger ones are streamed in chunks."""

CHUNK_BYTES = 1024 * 1024

MAX_PENDING_OBJECTS = 64
"""Objects written but not yet fsynced, each holding an open file, before a batch is flushed."""

FSYNC_THREADS = 8
"""fsyncs issued together share the file system's journal commits: a batch of 100 is several
times faster on a few threads than one after another."""

VERIFIED_BYTES_BUDGET = 64 * 1024 * 1024
"""How much verified object content a restore keeps in memory between checking and writing."""

OPEN_READ = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
OPEN_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


class ObjectStore:
    """The objects of one store; remembers which exist and which are waiting for an fsync."""

    def __init__(self, objects_dir: Path, tmp_dir: Path) -> None:
        self.objects_dir = objects_dir
        self.tmp_dir = tmp_dir
        # Objects seen to exist in this process, and directories to fsync before a manifest
        # may refer to what they hold.
        self.known: set[str] = set()
        self._unsynced_dirs: set[str] = set()
        self._pending: dict[str, tuple[int, str]] = {}  # digest -> (open fd, temp file)
        self._tmp_counter = 0

    def forget(self) -> None:
        """Forget which objects exist (they are looked up again on disk)."""
        self.known.clear()

    def store_file(self, full: str) -> tuple[str, int, os.stat_result]:
        """Hash a work-tree file and store it as an object unless it already is one.

        Returns its hash, its size and the ``fstat`` taken before reading it, which is what
        the stat cache may remember.
        """
        fd = os.open(full, OPEN_READ)
        try:
            st = os.fstat(fd)
            with open(fd, "rb", closefd=False) as source:
                if st.st_size <= SMALL_FILE_BYTES:
                    data = source.read()
                    digest = hashlib.sha256(data).hexdigest()
                    if not self.has(digest):
                        self._write(digest, [data])
                    return digest, len(data), st
                digest, size = hash_stream(source)
                if not self.has(digest):
                    source.seek(0)
                    # The file may change between the two reads: name the object after what
                    # was actually copied.
                    digest, size = self._write(None, read_chunks(source))
                return digest, size, st
        finally:
            os.close(fd)

    def path(self, digest: str) -> str:
        return os.path.join(self.objects_dir, digest[:2], digest[2:])

    def has(self, digest: str, *, durable: bool = False) -> bool:
        """Whether the object exists (or is pending); ``durable`` when it is known to be on disk.

        An object found but not known to be durable may have been renamed into place by a
        process killed before it synced the directory, so that directory is synced before a
        manifest refers to it.
        """
        if digest in self.known or digest in self._pending:
            return True
        path = self.path(digest)
        if not os.path.isfile(path):
            return False
        self.known.add(digest)
        if not durable:
            self._unsynced_dirs.add(os.path.dirname(path))
        return True

    def _write(self, digest: str | None, chunks: Iterable[bytes], *,
                      hashed: bool = False) -> tuple[str, int]:
        """Write an object to a temp file in ``tmp/``, to be fsynced and renamed into place.

        ``digest`` is the expected hash, or None to name the object after what was written;
        ``hashed``: ``digest`` is already the hash of these (immutable) bytes, so they are not
        hashed again.  The object becomes visible only in :meth:`_flush`, after its
        fsync, so it is never seen torn.
        """
        if len(self._pending) >= MAX_PENDING_OBJECTS:
            self._flush()
        self._tmp_counter += 1
        tmp = os.path.join(self.tmp_dir, f"{os.getpid()}-{self._tmp_counter}.tmp")
        hasher = hashlib.sha256()
        size = 0
        fd = os.open(tmp, OPEN_CREATE, PRIVATE_FILE_MODE)  # the agent's files, stored privately
        try:
            for chunk in chunks:
                if not hashed:
                    hasher.update(chunk)
                size += len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            written = digest if hashed and digest is not None else hasher.hexdigest()
            if digest is not None and written != digest:
                raise CheckpointStorageError(f"object {digest} changed while it was written")
            duplicate = digest is None and self.has(written)
        except BaseException:
            close_and_unlink(fd, tmp)
            raise
        if duplicate:
            close_and_unlink(fd, tmp)
        else:
            self._pending[written] = (fd, tmp)
        return written, size

    def _flush(self) -> None:
        """fsync the pending objects together, then rename them into ``objects/``."""
        pending, self._pending = self._pending, {}
        try:
            try:
                in_parallel(os.fsync, [fd for fd, _ in pending.values()])
            finally:
                for fd, _ in pending.values():
                    os.close(fd)
            for digest, (_, tmp) in pending.items():
                path = self.path(digest)
                try:
                    os.replace(tmp, path)
                except FileNotFoundError:
                    private_dir(os.path.dirname(path))
                    self._unsynced_dirs.add(str(self.objects_dir))
                    os.replace(tmp, path)
                self._unsynced_dirs.add(os.path.dirname(path))
                self.known.add(digest)
        except BaseException:
            for _, tmp in pending.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise

    def discard_pending(self) -> None:
        """Drop the objects of a create that failed before they were flushed."""
        pending, self._pending = self._pending, {}
        for fd, tmp in pending.values():
            close_and_unlink(fd, tmp)

    def adopt(self, source: ObjectStore, digest: str, what: str) -> None:
        """Make ``source``'s object ``digest`` one of this store's: a hard link (an object is
        never written again, and a prune only unlinks its own name), or a verified copy where
        the file system cannot link.  Durable after :meth:`sync`; ``what`` names it in
        errors."""
        if self.has(digest):
            return
        path = self.path(digest)
        fan = os.path.dirname(path)
        if not os.path.isdir(fan):
            private_dir(fan)
            self._unsynced_dirs.add(str(self.objects_dir))
        try:
            os.link(source.path(digest), path)
        except FileNotFoundError:
            raise object_error(what, digest, "is missing") from None
        except FileExistsError:
            pass
        except OSError:  # another file system, or hard links refused
            self._write(digest, source.chunks(digest, what))
            return
        self.known.add(digest)
        self._unsynced_dirs.add(fan)

    def put_bytes(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if not self.has(digest):
            self._write(digest, [data], hashed=True)
        return digest

    def sync(self) -> None:
        """Make every object durable and visible (before a manifest may refer to it)."""
        self._flush()
        objects_dir = str(self.objects_dir)
        # Fan-out directories first, so a new one's entries are on disk before the new name.
        in_parallel(fsync_dir, [d for d in self._unsynced_dirs if d != objects_dir])
        if objects_dir in self._unsynced_dirs:
            fsync_dir(objects_dir)
        self._unsynced_dirs.clear()

    def read(self, digest: str, what: str) -> bytes:
        """An object's bytes, verified against its hash; ``what`` names it in errors."""
        try:
            with open(self.path(digest), "rb") as source:
                data = source.read()
        except FileNotFoundError:
            raise object_error(what, digest, "is missing") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise object_error(what, digest, "is corrupt (its SHA-256 differs)")
        return data

    def chunks(self, digest: str, what: str) -> Iterator[bytes]:
        """Stream an object, raising at the end if its hash does not match after all."""
        hasher = hashlib.sha256()
        try:
            source = open(self.path(digest), "rb")  # noqa: SIM115 - a generator owns it
        except FileNotFoundError:
            raise object_error(what, digest, "is missing") from None
        with source:
            for chunk in read_chunks(source):
                hasher.update(chunk)
                yield chunk
        if hasher.hexdigest() != digest:
            raise object_error(what, digest, "is corrupt (its SHA-256 differs)")

    def verified_contents(
        self, writes: Sequence[tuple[str, FileEntry | SymlinkEntry]], failure: str,
    ) -> dict[str, bytes | None]:
        """Check every object a restore or materialize will write; keep small ones in memory.

        Objects beyond the memory budget map to None and are streamed (and checked again).
        ``failure`` says what a missing or corrupt object means for the caller.
        """
        contents: dict[str, bytes | None] = {}
        budget = VERIFIED_BYTES_BUDGET
        for path, entry in writes:
            if not isinstance(entry, FileEntry) or entry.hash in contents:
                continue
            what = f"{failure}: the stored content of {path}"
            if entry.size <= min(budget, SMALL_FILE_BYTES):
                contents[entry.hash] = self.read(entry.hash, what)
                budget -= entry.size
            else:
                for _ in self.chunks(entry.hash, what):
                    pass
                contents[entry.hash] = None
        return contents

    def on_disk(self) -> Iterator[tuple[str, str]]:
        """``(digest, path)`` of every object on disk (a writer's temp file is none)."""
        for fan in os.scandir(self.objects_dir):
            if not (fan.is_dir(follow_symlinks=False) and len(fan.name) == 2):
                continue
            for obj in os.scandir(fan.path):
                digest = fan.name + obj.name
                if HASH.fullmatch(digest):
                    yield digest, obj.path

    def unreferenced(self, referenced: set[str]) -> list[tuple[str, str]]:
        """``(digest, path)`` of every object on disk that is not in ``referenced``."""
        return [(digest, path) for digest, path in self.on_disk() if digest not in referenced]

    def delete(self, garbage: Sequence[tuple[str, str]]) -> None:
        """Remove these objects (``(digest, path)``) and every fan-out directory they empty."""
        for digest, path in garbage:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            self.known.discard(digest)
        for fan_dir in {os.path.dirname(path) for _, path in garbage}:
            try:
                os.rmdir(fan_dir)
            except OSError:
                fsync_dir(fan_dir)  # still holds live objects
        fsync_dir(self.objects_dir)


def in_parallel(function: Callable[[Any], object], items: Sequence[Any]) -> None:
    """Apply ``function`` to every item, on a few threads when there are several."""
    if len(items) < 3:
        for item in items:
            function(item)
        return
    # Imported here, not with the module: every start of hankweave imports the module.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(FSYNC_THREADS, len(items))) as pool:
        for _ in pool.map(function, items):
            pass


def close_and_unlink(fd: int, path: str) -> None:
    os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)



def read_chunks(source: Any) -> Iterator[bytes]:
    read: Callable[[int], bytes] = source.read
    while chunk := read(CHUNK_BYTES):
        yield chunk


def hash_stream(source: Any) -> tuple[str, int]:
    hasher = hashlib.sha256()
    size = 0
    for chunk in read_chunks(source):
        hasher.update(chunk)
        size += len(chunk)
    return hasher.hexdigest(), size


def object_error(what: str, digest: str, problem: str) -> CheckpointStorageError:
    return CheckpointStorageError(f"{what} (object {digest}) {problem}")
