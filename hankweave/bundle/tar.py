"""The canonical tar inside a ``.hank`` bundle: one byte form, written and read strictly.

The profile is Hankweave 0.12's, so a bundle either side packs opens on the other:

* regular-file records only, in the writer's order (``hank.lock`` first, then the files sorted
  by their UTF-8 bytes); no directory records, links or devices;
* a path over 100 UTF-8 bytes gets one PAX header (type ``x``, name ``PaxHeaders/<index>``)
  holding a single ``path`` record, and its ustar name is the longest prefix that fits;
* mode ``0000644`` or ``0000755``, uid, gid and mtime zero, empty user and group names, ustar
  magic ``ustar\\0`` version ``00``, the checksum spelled ``NNNNNN\\0 ``;
* two zero blocks at the end, and nothing after them.

The reader is the writer's strict inverse: a header the writer would not have produced byte
for byte, a duplicate path, a link, a directory, trailing data or a member over its quota is a
:class:`BundleFormatError` that says where. Python's ``tarfile`` is not used: it accepts far
more than this, and what it accepts is what an attacker would send.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BLOCK", "BundleFormatError", "Member", "Mode", "Quotas", "pax_path_record", "read_tar",
           "write_tar"]

BLOCK = 512
NAME_FIELD = 100
MAX_SIZE = 8**11 - 1
Mode = Literal["644", "755"]

_REFUSED_TYPES = {"5": "a directory", "1": "a hard link", "2": "a symlink", "3": "a device",
                  "4": "a device", "6": "a FIFO", "L": "a GNU long name", "K": "a GNU long link",
                  "g": "a global PAX header", "\0": "an old-style file record"}


class BundleFormatError(ValueError):
    """The bytes are not a bundle this profile allows."""


@dataclass(frozen=True)
class Member:
    """One file of a bundle."""

    path: str
    data: bytes | memoryview
    """A reader's members are views into the archive it read (no copy of every file)."""
    mode: Mode


def _octal(value: int, width: int) -> bytes:
    digits = format(value, "o").rjust(width - 1, "0")
    if len(digits) > width - 1:
        raise ValueError(f"{value} does not fit a {width}-byte tar field")
    return digits.encode("ascii") + b"\0"


def _header(name: bytes, size: int, typeflag: bytes, mode: Mode) -> bytes:
    block = bytearray(BLOCK)
    block[0:len(name)] = name
    block[100:108] = _octal(0o755 if mode == "755" else 0o644, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = _octal(size, 12)
    block[136:148] = _octal(0, 12)
    block[148:156] = b" " * 8
    block[156:157] = typeflag
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[329:337] = _octal(0, 8)
    block[337:345] = _octal(0, 8)
    block[148:156] = format(sum(block), "o").rjust(6, "0").encode("ascii") + b"\0 "
    return bytes(block)


def _padded(data: bytes | memoryview) -> bytes:
    return bytes(data) + b"\0" * (-len(data) % BLOCK)


def pax_path_record(path: str) -> bytes:
    """``<length> path=<path>\\n``, the length counting its own digits."""
    rest = f" path={path}\n".encode()
    total = len(rest) + 1
    while len(str(total)) + len(rest) != total:
        total = len(str(total)) + len(rest)
    return str(total).encode("ascii") + rest


def _name_field(path: str) -> bytes:
    """The longest prefix of ``path`` that fits the ustar name field, cut at a code point."""
    full = path.encode("utf-8")
    if len(full) <= NAME_FIELD:
        return full
    end = NAME_FIELD
    while end > 0 and full[end] & 0b1100_0000 == 0b1000_0000:
        end -= 1
    return full[:end]


def write_tar(members: list[Member]) -> bytes:
    """``members``, in this order, as one canonical tar."""
    parts: list[bytes] = []
    for index, member in enumerate(members):
        if not member.path or "\0" in member.path:
            raise ValueError(f"invalid member path {member.path!r}")
        if len(member.data) > MAX_SIZE:
            raise ValueError(f"{member.path} is too large for a tar member")
        if len(member.path.encode("utf-8")) > NAME_FIELD:
            pax = pax_path_record(member.path)
            parts += [_header(f"PaxHeaders/{index}".encode("ascii"), len(pax), b"x", "644"),
                      _padded(pax)]
        parts += [_header(_name_field(member.path), len(member.data), b"0", member.mode),
                  _padded(member.data)]
    parts.append(b"\0" * (2 * BLOCK))
    return b"".join(parts)


@dataclass(frozen=True)
class Quotas:
    """How much a bundle may hold (the leading ``hank.lock`` is not counted against them)."""

    max_members: int
    max_member_bytes: int
    max_total_bytes: int


class _Reader:
    def __init__(self, data: bytes, quotas: Quotas, lock_name: str) -> None:
        self.data = data
        self.view = memoryview(data)
        self.quotas = quotas
        self.lock_name = lock_name
        self.offset = 0
        self.members: list[Member] = []
        self.names: set[str] = set()
        self.total = 0

    def fail(self, reason: str) -> BundleFormatError:
        return BundleFormatError(
            f"bad tar at byte {self.offset} (member {len(self.members) + 1}): {reason}")

    def read(self) -> list[Member]:
        if len(self.data) % BLOCK:
            raise self.fail("its length is not a whole number of 512-byte blocks")
        pending: str | None = None
        while self.offset < len(self.data):
            block = self.data[self.offset:self.offset + BLOCK]
            if not any(block):
                self._terminator(pending)
                return self.members
            typeflag, _, mode, name, body, following = self._record(block)
            if typeflag == b"x":
                pending = self._pax(pending, mode, name, body)
            else:
                self._member(name, pending, body, mode)
                pending = None
            self.offset = following
        raise self.fail("a PAX header is the last record" if pending else "no end marker")

    def _record(self, block: bytes) -> tuple[bytes, int, Mode, bytes, memoryview, int]:
        typeflag = block[156:157]
        if typeflag not in (b"0", b"x"):
            what = _REFUSED_TYPES.get(typeflag.decode("latin-1"), "an unknown record type")
            raise self.fail(f"{what} (type {typeflag!r}): a bundle holds only regular files")
        size_field = block[124:136]
        if len(size_field) != 12 or size_field[11:] != b"\0" or not all(
                48 <= c <= 55 for c in size_field[:11]):
            raise self.fail("invalid size field")
        size = int(size_field[:11], 8)
        mode_field = block[100:108]
        mode: Mode
        if mode_field == _octal(0o755, 8):
            mode = "755"
        elif mode_field == _octal(0o644, 8):
            mode = "644"
        else:
            raise self.fail("a file mode other than 644 or 755")
        name_field = block[:NAME_FIELD]
        name = name_field.split(b"\0", 1)[0]
        if _header(name, size, typeflag, mode) != block:
            raise self.fail("a header that is not in canonical form (checksum, owner, time or"
                            " padding differs)")
        if size > self.quotas.max_member_bytes:
            raise self.fail(f"a member of {size} bytes; members are limited to"
                            f" {self.quotas.max_member_bytes} bytes")
        start = self.offset + BLOCK
        end = start + size
        following = start + size + (-size % BLOCK)
        if following > len(self.data):
            raise self.fail("a member longer than the bytes left")
        if any(self.view[end:following]):
            raise self.fail("non-zero padding after a member")
        return typeflag, size, mode, name, self.view[start:end], following

    def _pax(self, pending: str | None, mode: Mode, name: bytes, view: memoryview) -> str:
        body = bytes(view)
        if pending is not None:
            raise self.fail("two PAX headers in a row")
        if mode != "644" or name != f"PaxHeaders/{len(self.members)}".encode("ascii"):
            raise self.fail("a PAX header with an unexpected name or mode")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a PAX record that is not UTF-8") from None
        length, _, rest = text.partition(" ")
        if not rest.startswith("path=") or not text.endswith("\n"):
            raise self.fail("a PAX header other than one path record")
        value = rest[len("path="):-1]
        if (not value or "\n" in value or "\0" in value
                or len(value.encode("utf-8")) <= NAME_FIELD
                or pax_path_record(value) != body or length != str(len(body))):
            raise self.fail("a PAX path record that is not in canonical form")
        return value

    def _member(self, name: bytes, pending: str | None, body: memoryview, mode: Mode) -> None:
        try:
            path = pending if pending is not None else name.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a member name that is not UTF-8") from None
        if not path or "\0" in path or _name_field(path) != name:
            raise self.fail(f"a member name that is not in canonical form ({path!r})")
        if path in self.names:
            raise self.fail(f"{path} appears twice")
        self.names.add(path)
        if not (not self.members and path == self.lock_name):
            if len(self.names) - (1 if self.lock_name in self.names else 0) > \
                    self.quotas.max_members:
                raise self.fail(f"more than {self.quotas.max_members} members")
            self.total += len(body)
            if self.total > self.quotas.max_total_bytes:
                raise self.fail(f"more than {self.quotas.max_total_bytes} bytes in all")
        self.members.append(Member(path, body, mode))

    def _terminator(self, pending: str | None) -> None:
        if pending is not None:
            raise self.fail("a PAX header is the last record")
        end = self.offset + 2 * BLOCK
        if len(self.data) < end or any(self.data[self.offset:end]):
            raise self.fail("the end marker is not two zero blocks")
        if len(self.data) != end:
            raise self.fail(f"{len(self.data) - end} bytes after the end marker")


def read_tar(data: bytes, quotas: Quotas, *, lock_name: str = "hank.lock") -> list[Member]:
    """The members of the canonical tar ``data``, in order (see the module docstring).

    Raises:
        BundleFormatError: ``data`` is not a canonical tar, or breaks ``quotas``.
    """
    return _Reader(data, quotas, lock_name).read()
