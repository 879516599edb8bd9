"""``unpack_recording``: a hostile archive is refused whole, before it can write outside."""

from __future__ import annotations

import io
import os
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


# ----- chained symlinks: resolved against the real extraction root -----


def test_chained_symlinks_that_reach_the_root_are_refused(tmp_path):
    # Each link's text stays inside its snapshot; followed through the first, the second
    # climbs eight levels out of it, and the third reads /etc/passwd through the second.
    climb = "/".join(["q"] * 8 + [".."] * 8)
    source = archive(tmp_path / "r.tar.gz",
                     ("recording.json", "file", "{}"),
                     ("snapshots/c1/q", "symlink", "."),
                     ("snapshots/c1/p", "symlink", climb),
                     ("snapshots/c1/passwd", "symlink", "p/etc/passwd"))
    with pytest.raises(RecordingError, match=r"'snapshots/c1/p'.*resolves outside its snapshot"):
        unpack_recording(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_later_link_cannot_redirect_an_earlier_one(tmp_path):
    # x is checked while d/e does not exist (lexically it stays in c1); d -> . then makes
    # x resolve to c1/.. = snapshots/: the final check over every link refuses it.
    source = archive(tmp_path / "r.tar.gz",
                     ("recording.json", "file", "{}"),
                     ("snapshots/c1/x", "symlink", "d/e/../.."),
                     ("snapshots/c1/d", "symlink", "."))
    with pytest.raises(RecordingError, match=r"'snapshots/c1/x'.*resolves outside its snapshot"):
        unpack_recording(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_link_into_another_snapshot_is_refused(tmp_path):
    source = archive(tmp_path / "r.tar.gz",
                     ("recording.json", "file", "{}"),
                     ("snapshots/c2/a.txt", "file", "a"),
                     ("snapshots/c1/up", "symlink", "."),
                     ("snapshots/c1/x", "symlink", "up/../c2/a.txt"))
    with pytest.raises(RecordingError, match="resolves outside its snapshot"):
        unpack_recording(source, tmp_path / "out")


def test_an_unpacked_recording_with_an_escaping_link_is_refused(tmp_path):
    from hankweave_replay import ReplayHarness

    root = tmp_path / "unpacked"
    (root / "snapshots" / "c1").mkdir(parents=True)
    (root / "recording.json").write_text("{}")
    (root / "snapshots" / "c1" / "q").symlink_to(".")
    (root / "snapshots" / "c1" / "p").symlink_to("q/q/q/../../..")
    with pytest.raises(RecordingError, match=r"snapshots/c1/p.*resolves outside its snapshot"):
        ReplayHarness.open_recording(root)


def test_a_snapshot_link_that_would_leave_agent_root_is_never_created(tmp_path):
    from hankweave_replay import apply_snapshot

    work = tmp_path / "deep" / "er" / "agentRoot"
    work.mkdir(parents=True)
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "q").symlink_to(".")
    (snapshot / "p").symlink_to("q/q/../../..")
    with pytest.raises(RecordingError, match=r"'p'.*outside agentRoot"):
        apply_snapshot(snapshot, ["**"], work)
    assert not os.path.lexists(work / "p")


def test_a_snapshot_link_redirected_by_the_workspace_is_never_created(tmp_path):
    # Inside the snapshot x -> d/f stays put (d does not exist there); in agentRoot the
    # agent's own link d points outside, so x would too.
    from hankweave_replay import apply_snapshot

    work = tmp_path / "agentRoot"
    work.mkdir()
    (work / "d").symlink_to(tmp_path)
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "x").symlink_to("d/secret")
    with pytest.raises(RecordingError, match=r"'x'.*outside agentRoot"):
        apply_snapshot(snapshot, [], work)
    assert not os.path.lexists(work / "x")


# ----- what export writes, and nothing bigger -----


def test_a_bzip2_archive_is_refused_naming_its_compression(tmp_path):
    source = tmp_path / "r.hwrec.tar.gz"
    with tarfile.open(source, "w:bz2") as tar:
        data = b"{}"
        info = tarfile.TarInfo("recording.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(RecordingError, match=r"r\.hwrec\.tar\.gz.*bzip2"):
        unpack_recording(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("mode", "found"), [("w:xz", "xz"), ("w", "plain tar")])
def test_other_compressions_are_refused(tmp_path, mode, found):
    source = tmp_path / "r.tar"
    with tarfile.open(source, mode) as tar:
        info = tarfile.TarInfo("recording.json")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(RecordingError, match=found):
        unpack_recording(source, tmp_path / "out")


def test_too_many_members_are_refused_while_streaming(tmp_path, monkeypatch):
    monkeypatch.setenv("HANKWEAVE_REPLAY_MAX_MEMBERS", "50")
    members = [(f"hank/f{i}.txt", "file", "x") for i in range(60)]
    source = archive(tmp_path / "r.tar.gz", ("recording.json", "file", "{}"), *members)
    with pytest.raises(RecordingError, match=r"more than 50 members.*HANKWEAVE_REPLAY_MAX_MEMBERS"):
        unpack_recording(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_too_many_bytes_are_refused_before_they_are_written(tmp_path, monkeypatch):
    monkeypatch.setenv("HANKWEAVE_REPLAY_MAX_BYTES", str(256 * 1024))
    big = os.urandom(512 * 1024).hex()  # incompressible: the ratio stays low
    source = archive(tmp_path / "r.tar.gz", ("recording.json", "file", "{}"),
                     ("data/big.txt", "file", big))
    with pytest.raises(RecordingError, match="HANKWEAVE_REPLAY_MAX_BYTES"):
        unpack_recording(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_gzip_of_zeros_is_refused_by_its_ratio(tmp_path):
    source = tmp_path / "r.tar.gz"
    with tarfile.open(source, "w:gz") as tar:
        info = tarfile.TarInfo("data/zeros")
        info.size = 64 * 1024 * 1024
        tar.addfile(info, _Zeros(info.size))
    with pytest.raises(RecordingError, match=r"compression ratio.*HANKWEAVE_REPLAY_MAX_RATIO"):
        unpack_recording(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_small_archive_may_compress_well(tmp_path):
    # 600 KiB of repetitive JSON is far more than 200x smaller packed; the ratio applies only
    # past 1 MiB unpacked.
    source = archive(tmp_path / "r.tar.gz", ("recording.json", "file", "{}" * 300_000))
    unpack_recording(source, tmp_path / "out")
    assert (tmp_path / "out" / "recording.json").stat().st_size == 600_000


def test_a_raised_limit_opens_a_bigger_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("HANKWEAVE_REPLAY_MAX_MEMBERS", "1000")
    members = [(f"hank/f{i}.txt", "file", "x") for i in range(500)]
    unpack_recording(archive(tmp_path / "r.tar.gz", *members), tmp_path / "out")
    assert len(list((tmp_path / "out" / "hank").iterdir())) == 500


def test_a_bad_limit_setting_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HANKWEAVE_REPLAY_MAX_RATIO", "lots")
    source = archive(tmp_path / "r.tar.gz", ("recording.json", "file", "{}"))
    with pytest.raises(RecordingError, match="HANKWEAVE_REPLAY_MAX_RATIO"):
        unpack_recording(source, tmp_path / "out")


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, read without ever holding them all."""

    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n
