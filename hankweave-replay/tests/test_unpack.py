"""``unpack_recording``: a hostile archive is refused whole, before it can write outside."""

from __future__ import annotations

import io
import tarfile

import pytest

from hankweave_replay import RecordingError, unpack_recording


def archive(path, *members):
    """A .tar.gz of (name, kind, payload) members: kind is file, dir, symlink, hardlink, fifo."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = payload.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                         "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE,
                         "device": tarfile.CHRTYPE}[kind]
            info.linkname = payload or ""
            tar.addfile(info)
    return path


@pytest.mark.parametrize(("member", "why"), [
    (("/etc/evil", "file", "x"), "absolute path"),
    (("../evil", "file", "x"), "'..'"),
    (("snapshots/c1/../../../evil", "file", "x"), "'..'"),
    (("hank/link", "symlink", "hank.json"), "symlink outside snapshots/"),
    (("snapshots/c1/up", "symlink", "../../../etc/passwd"), "pointing outside its snapshot"),
    (("snapshots/c1/abs", "symlink", "/etc/passwd"), "pointing outside its snapshot"),
    (("snapshots/c1/hard", "hardlink", "recording.json"), "hard link"),
    (("snapshots/c1/pipe", "fifo", None), "device file or FIFO"),
    (("snapshots/c1/tty", "device", None), "device file or FIFO"),
])
def test_unsafe_members_are_refused(tmp_path, member, why):
    source = archive(tmp_path / "r.tar.gz", ("recording.json", "file", "{}"), member)
    with pytest.raises(RecordingError, match=why):
        unpack_recording(source, tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_nothing_is_written_through_a_symlink(tmp_path):
    source = archive(tmp_path / "r.tar.gz",
                     ("snapshots/c1/dir", "symlink", "."),
                     ("snapshots/c1/dir/x.txt", "file", "x"))
    with pytest.raises(RecordingError, match="through a symlink"):
        unpack_recording(source, tmp_path / "out")


def test_a_member_cannot_replace_a_symlink(tmp_path):
    source = archive(tmp_path / "r.tar.gz",
                     ("snapshots/c1/a", "file", "a"),
                     ("snapshots/c1/link", "symlink", "a"),
                     ("snapshots/c1/link", "file", "overwrite"))
    with pytest.raises(RecordingError, match="replace a symlink"):
        unpack_recording(source, tmp_path / "out")


def test_safe_members_are_unpacked(tmp_path):
    source = archive(tmp_path / "r.tar.gz",
                     ("recording.json", "file", "{}"),
                     ("snapshots/c1/sub/a.txt", "file", "a"),
                     ("snapshots/c1/sub/link", "symlink", "a.txt"),
                     ("snapshots/c1/up", "symlink", "sub/../sub/a.txt"))
    unpack_recording(source, tmp_path / "out")
    root = tmp_path / "out"
    assert (root / "snapshots/c1/sub/link").read_text() == "a"
    assert (root / "snapshots/c1/up").is_symlink()


def test_a_file_that_is_not_an_archive_is_refused(tmp_path):
    bogus = tmp_path / "r.hwrec.tar.gz"
    bogus.write_text("hello")
    with pytest.raises(RecordingError, match="not a recording archive"):
        unpack_recording(bogus, tmp_path / "out")


def test_a_damaged_archive_is_refused(tmp_path):
    source = archive(tmp_path / "r.tar.gz", ("recording.json", "file", "{}" * 5000))
    data = source.read_bytes()
    source.write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordingError, match="damaged"):
        unpack_recording(source, tmp_path / "out")
