"""A checkpoint's files read without opening the store, as ``list_read_only`` reads: with the
``git`` executable alone (:class:`~hankweave_checkpoint_git.commands.GitReader`) and the
repository's object files, writing nothing, so it is safe while a runtime writes the store.

``manifest`` lists a tree with ``ls-tree`` and takes each blob's size from its loose object's
header, read here (one small read per object, about twice as fast as ``ls-tree -l``), asking
``cat-file`` only for the packed ones.  A blob never changes, so what was found is kept.

``differing`` compares two checkpoints, of one repository or of two (a fork's and its
source's), tree by tree: objects are named by their content in every repository, so a
subtree with the same id on both sides is equal and is not listed at all.
"""

from __future__ import annotations

import os
import zlib

from hankweave.api import CheckpointNotFoundError, CheckpointStorageError, StoredFile

from hankweave_checkpoint_git.commands import GitReader

_HEADER_BYTES = 64
"""Enough of a loose object to inflate its header ("blob <size>\\0")."""

_OPEN_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


class StoredFiles:
    """The size of each blob and the :class:`StoredFile` of each blob and mode seen, kept for
    the store's lifetime: a comparison reads many checkpoints of one execution, which share
    most of their files."""

    def __init__(self) -> None:
        self._sizes: dict[bytes, int] = {}
        self._known: dict[tuple[bytes, bytes], StoredFile] = {}

    def forget(self) -> None:
        self._sizes.clear()
        self._known.clear()

    def manifest(self, reader: GitReader, sha: str) -> dict[str, StoredFile]:
        """Every file of commit ``sha`` by path."""
        entries = [(os.fsdecode(name), mode, oid) for name, mode, kind, oid in
                   _listing(reader.run("ls-tree", "-r", "-z", "--full-tree", sha))
                   if kind == b"blob"]  # not a gitlink: a checkpoint never holds one
        return self.stored(reader, entries)

    def stored(self, reader: GitReader, entries: list[tuple[str, bytes, bytes]]
               ) -> dict[str, StoredFile]:
        """``(path, mode, blob id)`` entries as :class:`StoredFile` by path."""
        sizes, known = self._sizes, self._known
        unknown = {oid: None for _, _, oid in entries if oid not in sizes}
        if unknown:
            sizes.update(blob_sizes(reader, unknown))
        found: dict[str, StoredFile] = {}
        for path, mode, oid in entries:
            stored = known.get((mode, oid))
            if stored is None:
                stored = known[mode, oid] = StoredFile(
                    f"git-blob:{oid.decode()}", sizes[oid], executable=mode == b"100755",
                    symlink=mode == b"120000")
            found[path] = stored
        return found


Side = tuple[GitReader, StoredFiles]
"""One side of a comparison: a repository's reader and what is known of its blobs."""


def differing(one: Side, tree_one: str, other: Side, tree_other: str
              ) -> dict[str, tuple[StoredFile | None, StoredFile | None]]:
    """The files that differ between two trees (``<commit>^{tree}`` or tree ids) of two
    repositories, by path: each side's entry, None where it has none."""
    blobs: tuple[dict[str, tuple[str, bytes, bytes]], ...] = ({}, {})
    pending: list[tuple[bytes, str | None, str | None]] = [(b"", tree_one, tree_other)]
    while pending:
        prefix, tree_a, tree_b = pending.pop()
        listed_a, listed_b = _entries(one[0], tree_a), _entries(other[0], tree_b)
        for name in listed_a.keys() | listed_b.keys():
            found = (listed_a.get(name), listed_b.get(name))
            if found[0] == found[1]:
                continue  # the same blob, or the same subtree: equal, nothing below is read
            below = [entry[2].decode() if entry and entry[1] == b"tree" else None
                     for entry in found]
            if below != [None, None]:
                pending.append((prefix + name + b"/", below[0], below[1]))
            for side, entry in zip(blobs, found, strict=True):
                if entry and entry[1] == b"blob":
                    path = os.fsdecode(prefix + name)
                    side[path] = (path, entry[0], entry[2])
    stored = [files.stored(reader, list(side.values()))
              for (reader, files), side in zip((one, other), blobs, strict=True)]
    return {path: (stored[0].get(path), stored[1].get(path))
            for path in sorted(blobs[0].keys() | blobs[1].keys())}


def _entries(reader: GitReader, tree: str | None) -> dict[bytes, tuple[bytes, bytes, bytes]]:
    """A tree's entries by name: ``(mode, kind, id)``; none for no tree."""
    if tree is None:
        return {}
    return {name: (mode, kind, oid) for name, mode, kind, oid in
            _listing(reader.run("ls-tree", "-z", tree))}


def _listing(listed: bytes) -> list[tuple[bytes, bytes, bytes, bytes]]:
    """``ls-tree -z`` output as ``(name, mode, kind, id)``."""
    rows: list[tuple[bytes, bytes, bytes, bytes]] = []
    for record in listed.split(b"\0"):
        if record:
            meta, _, name = record.partition(b"\t")
            mode, kind, oid = meta.split(b" ")
            rows.append((name, mode, kind, oid))
    return rows


def blob_sizes(reader: GitReader, oids: dict[bytes, None]) -> dict[bytes, int]:
    """Each blob's size: from its loose object, else (packed) from ``cat-file``."""
    objects = os.fsencode(reader.git_dir / "objects")
    sizes: dict[bytes, int] = {}
    packed: list[bytes] = []
    for oid in oids:
        size = loose_blob_size(b"%s/%s/%s" % (objects, oid[:2], oid[2:]))
        if size is None:
            packed.append(oid)
        else:
            sizes[oid] = size
    if packed:
        out = reader.run("cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)",
                         stdin=b"".join(oid + b"\n" for oid in packed))
        for line in out.splitlines():
            oid, kind, *rest = line.split(b" ")
            if kind != b"blob" or not rest:
                raise CheckpointStorageError(
                    f"object {oid.decode()} of the checkpoint repository {reader.git_dir} is "
                    f"{'missing' if kind == b'missing' else 'not a blob'}")
            sizes[oid] = int(rest[0])
    return sizes


def loose_blob_size(path: bytes) -> int | None:
    """The size in a loose blob's header; None when there is no such loose object (it is
    packed, or was packed since) or its header cannot be read here."""
    try:
        fd = os.open(path, _OPEN_READ)
    except OSError:
        return None
    try:
        head = os.read(fd, _HEADER_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        header = zlib.decompressobj().decompress(head, 32)
    except zlib.error:
        return None
    kind, _, rest = header.partition(b" ")
    size, nul, _ = rest.partition(b"\0")
    if kind != b"blob" or not nul or not size.isdigit():
        return None
    return int(size)


def file_bytes(reader: GitReader, sha: str, path: str) -> bytes:
    """The bytes of the file ``path`` of commit ``sha`` (a symlink: its target)."""
    missing = CheckpointNotFoundError(f"checkpoint {sha[:12]} holds no file {path!r}")
    if not path:
        raise missing
    status, out, err = reader.call("cat-file", "blob", f"{sha}:{path}")
    if status == 0:
        return out
    # Only now find out why: no such file (or a directory there), or a damaged repository.
    entry = reader.run("ls-tree", "-z", "--full-tree", sha, "--", path).split(b"\0", 1)[0]
    if not entry or entry.split(b" ", 2)[1] != b"blob":
        raise missing
    raise CheckpointStorageError(
        f"cannot read {path!r} of checkpoint {sha[:12]} from the checkpoint repository "
        f"{reader.git_dir}: {err.strip()}")
