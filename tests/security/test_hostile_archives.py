"""Issue 34 items 3 and 5: a recording archive built to hurt whoever opens it.

A decompression bomb (bzip2, or gzip past the ratio, or too many members) must be refused
before it fills the disk: the tests watch the bytes and files under the replay's temporary
directory and its execution directory while ``hankweave replay`` runs, not only afterwards
(a bomb unpacked and then deleted has already filled the disk).  Chained symlinks must not
put a link to ``/`` or ``/etc/passwd`` anywhere.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.security.support import Project, codon, needs, record_and_export, repack_recording

MiB = 1024 * 1024


class Usage:
    """The most bytes and directory entries seen at once under some directories."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        self.peak_entries = 0


def _measure(roots: list[Path]) -> tuple[int, int]:
    size = entries = 0
    for root in roots:
        for directory, dirnames, filenames in os.walk(root):
            entries += len(dirnames) + len(filenames)
            for name in filenames:
                with contextlib.suppress(FileNotFoundError):  # removed while we looked
                    size += os.lstat(os.path.join(directory, name)).st_size
    return size, entries


@contextmanager
def watching(*roots: Path) -> Iterator[Usage]:
    usage = Usage()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            size, entries = _measure(list(roots))
            usage.peak_bytes = max(usage.peak_bytes, size)
            usage.peak_entries = max(usage.peak_entries, entries)
            time.sleep(0.002)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield usage
    finally:
        done.set()
        thread.join()


def replay_watched(project: Project, archive: Path, **env: str):
    """``hankweave replay ARCHIVE`` with its temporary files in a directory of the test;
    (result, usage, that directory, the execution directory)."""
    needs("replay")
    scratch, target = project.root / "tmp", project.root / "replayed"
    scratch.mkdir()
    with watching(scratch, target) as usage:
        result = project.hw("replay", str(archive), "-e", str(target), "--headless",
                            env={"TMPDIR": str(scratch), **env})
    return result, usage, scratch, target


def assert_nothing_left(scratch: Path, target: Path) -> None:
    assert _measure([scratch, target]) == (0, 0)


def zeros_member(name: str, size: int) -> tuple[tarfile.TarInfo, io.RawIOBase]:
    info = tarfile.TarInfo(name)
    info.size = size
    return info, _Zeros(size)


def test_a_bzip2_bomb_is_refused_before_it_fills_the_disk(project):
    bomb = project.root / "bomb.hwrec.tar.gz"  # named as a recording, packed with bzip2
    with tarfile.open(bomb, "w:bz2") as tar:
        tar.addfile(*zeros_member("data/zeros", 300 * MiB))
    assert bomb.stat().st_size < 16 * 1024

    result, usage, scratch, target = replay_watched(project, bomb)

    assert result.returncode == 2
    assert usage.peak_bytes < 4 * MiB
    assert_nothing_left(scratch, target)


def test_a_gzip_past_the_compression_ratio_is_refused_at_default_limits(project):
    bomb = project.root / "bomb.hwrec.tar.gz"
    with tarfile.open(bomb, "w:gz") as tar:
        tar.addfile(*zeros_member("data/zeros", 128 * MiB))

    result, usage, scratch, target = replay_watched(project, bomb)

    assert result.returncode == 2
    assert usage.peak_bytes < 32 * MiB
    assert_nothing_left(scratch, target)


def test_a_gzip_of_too_many_members_is_refused_while_streaming(project):
    bomb = project.root / "many.hwrec.tar.gz"
    with tarfile.open(bomb, "w:gz") as tar:
        for n in range(3000):
            tar.addfile(tarfile.TarInfo(f"hank/f{n}"), io.BytesIO(b""))

    result, usage, scratch, target = replay_watched(project, bomb,
                                                    HANKWEAVE_REPLAY_MAX_MEMBERS="200")

    assert result.returncode == 2
    assert usage.peak_entries < 400
    assert_nothing_left(scratch, target)


def test_chained_symlinks_in_a_recording_are_refused(project):
    needs("git", "replay")
    source = record_and_export(project, [codon("a", checkpointedFiles=["**"])],
                               {"a": {"writeFiles": {"a.md": "alpha"}}})

    def plant(root: Path) -> None:
        manifest = json.loads((root / "recording.json").read_text())
        snapshot = root / "snapshots" / manifest["codons"][0]["snapshot"]
        # Each link's text stays inside the snapshot; followed, p climbs out to /.
        (snapshot / "q").symlink_to(".")
        (snapshot / "p").symlink_to("/".join(["q"] * 16 + [".."] * 16))
        (snapshot / "passwd").symlink_to("p/etc/passwd")

    archive = repack_recording(source, project.root / "links.hwrec.tar.gz", plant)

    result, _, scratch, target = replay_watched(project, archive)

    escaping = [path for path in _links(project.root)
                if os.path.realpath(path) in ("/", "/etc/passwd")]
    assert escaping == []
    assert result.returncode == 2
    assert_nothing_left(scratch, target)


def _links(root: Path) -> Iterator[Path]:
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            if os.path.islink(os.path.join(directory, name)):
                yield Path(directory, name)


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, read without ever holding them all."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n
