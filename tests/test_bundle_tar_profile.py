"""The canonical tar of a bundle, byte for byte as Hankweave 0.12 writes it (its pack-tar
tests' vectors, in our words), and read by tools that know nothing of it: Python's ``tarfile``
and the system's ``tar``."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from hankweave.bundle.closure import DEFAULT_QUOTAS
from hankweave.bundle.tar import BLOCK, Member, pax_path_record, read_tar, write_tar


def member(path: str, text: str, mode: str = "644") -> Member:
    return Member(path, text.encode(), mode)  # type: ignore[arg-type]


def headers(data: bytes) -> list[tuple[str, str, str, int]]:
    """(name, typeflag, mode, size) of each record, read without the writer's code."""
    out, offset = [], 0
    while offset + BLOCK <= len(data) and any(data[offset:offset + BLOCK]):
        block = data[offset:offset + BLOCK]
        checksum = int(block[148:156].split(b"\0")[0], 8)
        assert checksum == sum(block[:148]) + 8 * 32 + sum(block[156:])
        assert block[257:265] == b"ustar\x0000" and block[136:148] == b"00000000000\0"
        assert block[108:124] == b"0000000\x000000000\0"  # uid and gid zero
        size = int(block[124:136].rstrip(b"\0"), 8)
        out.append((block[:100].rstrip(b"\0").decode(), chr(block[156]),
                    block[100:108].rstrip(b"\0").decode(), size))
        offset += BLOCK * (1 + -(-size // BLOCK))
    return out


def test_only_file_records_with_zeroed_owners_and_times():
    data = write_tar([member("hank.lock", "{}\n"), member("prompts/deep/nested/a.md", "hi\n")])
    assert [(n, t, m) for n, t, m, _ in headers(data)] == [
        ("hank.lock", "0", "0000644"), ("prompts/deep/nested/a.md", "0", "0000644")]


@pytest.mark.parametrize("size", [0, 511, 512, 513])
def test_content_is_block_padded_and_the_end_is_two_zero_blocks(size: int):
    data = write_tar([member("f.bin", "x" * size)])
    assert len(data) == BLOCK * (1 + -(-size // BLOCK) + 2)
    assert data[-2 * BLOCK:] == b"\0" * (2 * BLOCK)
    assert headers(data)[0][3] == size


def test_the_executable_bit_is_kept():
    assert headers(write_tar([member("bin/run.sh", "#!/bin/sh\n", "755")]))[0][2] == "0000755"


def test_a_path_of_100_bytes_is_plain_and_101_bytes_takes_a_pax_record():
    for path in ("a" * 94 + "/x.md", "a" * 95 + "/x.md"):
        assert [h[:2] for h in headers(write_tar([member(path, "y")]))] == [(path, "0")]
    long = "a" * 96 + "/x.md"
    data = write_tar([member(long, "y")])
    assert [h[1] for h in headers(data)] == ["x", "0"]
    assert headers(data)[0][0] == "PaxHeaders/0"
    assert data[BLOCK:BLOCK + 111] == f"111 path={long}\n".encode()


def test_pax_headers_are_named_by_the_member_s_index():
    one, two = "d" * 120 + "/one.md", "d" * 120 + "/two.md"
    names = [h[0] for h in headers(write_tar([member("short.md", "s"), member(one, "1"),
                                              member(two, "2")]))]
    assert names == ["short.md", "PaxHeaders/1", one[:100], "PaxHeaders/2", two[:100]]


def test_pax_lengths_count_utf8_bytes_and_survive_the_digit_rollover():
    assert pax_path_record("v" * 91) == f"101 path={'v' * 91}\n".encode()
    multibyte = "é" * 60 + "/x.md"
    record = pax_path_record(multibyte)
    assert int(record.split(b" ")[0]) == len(record)
    name = headers(write_tar([member(multibyte, "y")]))[1][0]
    assert "\ufffd" not in name and multibyte.startswith(name)  # cut at a code point


def test_order_is_the_writer_s_and_bytes_are_stable():
    members = [member("hank.lock", "{}\n"), member("b.md", "b"), member("a.md", "a")]
    assert write_tar(members) == write_tar(members)
    assert [h[0] for h in headers(write_tar(members))] == ["hank.lock", "b.md", "a.md"]
    assert read_tar(write_tar(members), DEFAULT_QUOTAS) == members


def test_python_tarfile_reads_long_and_multibyte_paths(tmp_path: Path):
    long = f"nested/{'p' * 120}/prompt.md"
    multibyte = "prompts/héllo-wörld.md"
    data = write_tar([member("hank.lock", '{"v":1}\n'), member(long, "long content\n"),
                      member(multibyte, "unicode content\n", "755")])
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        found = {info.name: (info.mode, info.mtime, info.uid, info.uname) for info in archive}
        assert found == {"hank.lock": (0o644, 0, 0, ""), long: (0o644, 0, 0, ""),
                         multibyte: (0o755, 0, 0, "")}
        reader = archive.extractfile(long)
        assert reader is not None and reader.read() == b"long content\n"


@pytest.mark.skipif(shutil.which("tar") is None, reason="no system tar")
def test_the_system_tar_lists_and_extracts_it(tmp_path: Path):
    long = f"nested/{'p' * 120}/prompt.md"
    multibyte = "prompts/héllo-wörld.md"
    archive = tmp_path / "t.tar"
    archive.write_bytes(write_tar([member("hank.lock", '{"v":1}\n'), member(long, "long\n"),
                                   member(multibyte, "unicode\n", "755")]))
    listing = subprocess.run(["tar", "-tf", archive], capture_output=True, text=True, check=True)
    assert listing.stdout.split("\n")[:3] == ["hank.lock", long, multibyte]
    extracted = subprocess.run(["tar", "-xOf", archive, multibyte], capture_output=True,
                               check=True)
    assert extracted.stdout == b"unicode\n"
