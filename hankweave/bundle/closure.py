"""The closure of a hank: exactly the files a bundle must carry for the hank to run the same.

Not the whole directory: ``hank.json``, the root ``.gitignore`` when there is one, and every
file the hank refers to (docs/bundles.md): global and codon prompt files, rig ``copy.from``
sources (a directory is walked, minus what the ignore rules leave out), sentinel config files
and the prompt and schema files they name. Every ref first passes the strict-reference
preflight (:mod:`hankweave.config.refs`), so nothing outside the hank directory, no symlink and
no special file can get in.

Ignore rules inside copied directories: the root ``.gitignore`` when there is one (even an empty
one replaces the defaults), else :data:`DEFAULT_IGNORE_PATTERNS`; a ``.git`` component is never
copied. Each file is read once: the bytes hashed are the bytes packed.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hankweave.bundle.canonical import utf8_key
from hankweave.bundle.lock import sha256_hex
from hankweave.bundle.tar import Mode, Quotas

__all__ = ["DEFAULT_IGNORE_PATTERNS", "DEFAULT_QUOTAS", "Closure", "Finding", "compute_closure"]

LOCK_NAME = "hank.lock"
HANK_FILE = "hank.json"
GITIGNORE = ".gitignore"

DEFAULT_IGNORE_PATTERNS: tuple[str, ...] = (
    "node_modules/", ".hankweave/", ".DS_Store", "__pycache__/", "*.log", "dist/", "build/",
    "target/", ".venv/", "venv/", "coverage/", ".cache/",
)
"""What copied directories leave out when the hank has no root ``.gitignore`` (Hankweave
0.12's list: its fingerprint is the lock's ``ignoreDefaults``)."""
IGNORE_DEFAULTS_FINGERPRINT = sha256_hex("\n".join(DEFAULT_IGNORE_PATTERNS))

DEFAULT_QUOTAS = Quotas(max_members=50_000, max_member_bytes=1024**3,
                        max_total_bytes=2 * 1024**3)

Severity = Literal["error", "warn"]


@dataclass(frozen=True)
class Finding:
    """One thing ``pack`` has to say about the hank (an error stops it)."""

    severity: Severity
    category: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: {self.detail}"


@dataclass(frozen=True)
class ClosureFile:
    path: str
    """The bundle path: the hank-relative POSIX path."""
    data: bytes
    mode: Mode

    @property
    def sha256(self) -> str:
        return sha256_hex(self.data)


@dataclass(frozen=True)
class RefRecord:
    """What a ref resolved to: a file, or a copied directory (hashed as a tree)."""

    kind: Literal["file", "dir"]
    path: str
    sha256: str
    mode: Mode = "644"


@dataclass
class Closure:
    """The result of :func:`compute_closure`: the files, or why there are none."""

    hank_dir: Path
    raw: dict[str, Any] | None = None
    files: dict[str, ClosureFile] = field(default_factory=dict)
    refs: dict[tuple[str, str], RefRecord] = field(default_factory=dict)
    """Each ref by (the directory it resolves from, as written)."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def sorted_files(self) -> list[ClosureFile]:
        return [self.files[p] for p in sorted(self.files, key=utf8_key)]

    def error(self, category: str, where: str, detail: str) -> None:
        self.findings.append(Finding("error", category, where, detail))

    def warn(self, category: str, where: str, detail: str) -> None:
        self.findings.append(Finding("warn", category, where, detail))


def hank_file_of(argument: Path) -> Path:
    """The hank file a ``pack`` argument names: a directory's ``hank.json``, or the file."""
    return argument / HANK_FILE if argument.is_dir() else argument


def compute_closure(hank_file: Path, quotas: Quotas = DEFAULT_QUOTAS) -> Closure:
    """The closure of the hank in ``hank_file`` (see the module docstring)."""
    hank_file = Path(os.path.abspath(hank_file))
    closure = Closure(hank_dir=hank_file.parent)
    _check_reserved(closure, hank_file)
    data = _read_root(closure, hank_file, quotas)
    if data is None:
        return closure
    _Walker(closure, quotas).collect(hank_file, data)
    return closure


def _check_reserved(closure: Closure, hank_file: Path) -> None:
    lock = closure.hank_dir / LOCK_NAME
    if hank_file.name == LOCK_NAME:
        closure.error("reserved-path", LOCK_NAME, f"the hank file {hank_file.name} occupies the"
                      " reserved hank.lock path; pack writes the generated lock there: rename it")
    elif os.path.lexists(lock) and not stat.S_ISREG(os.lstat(lock).st_mode):
        closure.error("reserved-path", LOCK_NAME, "hank.lock is a reserved bundle member owned by"
                      " pack and must be a regular file if present")


def _read_root(closure: Closure, hank_file: Path, quotas: Quotas) -> bytes | None:
    try:
        info = os.stat(hank_file)
    except OSError:
        closure.error("missing-file", HANK_FILE, f"{hank_file} does not exist")
        return None
    if not stat.S_ISREG(info.st_mode):
        closure.error("missing-file", HANK_FILE, f"{hank_file} is not a regular file")
        return None
    if info.st_size > quotas.max_member_bytes:
        closure.error("closure-too-large", HANK_FILE, f"{hank_file} is {info.st_size} bytes;"
                      f" bundle members are limited to {quotas.max_member_bytes} bytes")
        return None
    data = hank_file.read_bytes()
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        closure.error("invalid-json", HANK_FILE, f"not valid JSON ({exc})")
        return None
    if not isinstance(raw, dict):
        closure.error("schema-error", HANK_FILE, "the hank file must hold a JSON object")
        return None
    closure.raw = raw
    return data


_UNSAFE_NAME = re.compile(r'[\\:*?"<>|\x00-\x1f\x7f]')
_DEVICE = re.compile(r"^(con|prn|aux|nul|com[1-9]|lpt[1-9])(\.|$)", re.IGNORECASE)


def unsafe_member_path(key: str) -> str | None:
    """Why ``key`` may not be a bundle member's path, or None."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "a name that is not UTF-8"
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


def printable(text: str) -> str:
    """``text`` with control, bidi and undecodable characters escaped (names reach a
    terminal)."""
    return "".join(ch if ch.isprintable() and ch not in _BIDI else
                   ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for ch in text)


_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _mode(info: os.stat_result) -> Mode:
    return "755" if info.st_mode & 0o111 else "644"


class _Walker:
    """Adds every ref's files to the closure, or a finding for each that cannot be added."""

    def __init__(self, closure: Closure, quotas: Quotas) -> None:
        self.closure = closure
        self.quotas = quotas
        self.root = closure.hank_dir
        self.total = 0
        self.ignore = _IgnoreRules.for_hank(self.root)

    def collect(self, hank_file: Path, data: bytes) -> None:
        from hankweave.config.errors import ConfigError, HankValidationError
        from hankweave.config.hank import load_hank
        from hankweave.config.refs import (
            check_hank_refs,
            check_ref_files_exist,
            iter_hank_refs,
            sentinel_file_refs,
        )

        self._add(HANK_FILE, data, _mode(os.stat(hank_file)))
        self._add_gitignore()
        try:
            hank = load_hank(hank_file)
        except HankValidationError as exc:
            for issue in exc.errors:
                self.closure.error("schema-error", issue.path, issue.message)
            return
        except ConfigError as exc:
            self.closure.error("schema-error", HANK_FILE, str(exc))
            return
        problems = check_hank_refs(hank, self.root)
        problems = problems or check_ref_files_exist(hank, self.root)
        for issue in problems:
            self.closure.error("bad-ref", issue.path, issue.message)
        if problems:
            return
        for site in iter_hank_refs(hank):
            self._ref(site.path, site.raw, site.base, site.relative, site.kind == "copy-source")
            if site.kind == "sentinel-config":
                for inner in sentinel_file_refs(site, self.root) or []:
                    self._ref(f"{site.path} ({inner.origin}).{inner.label}", inner.raw,
                              inner.base, inner.relative, False)

    def _ref(self, where: str, raw: str, base: str, relative: str, copy: bool) -> None:
        if (base, raw) in self.closure.refs:
            return
        if relative == LOCK_NAME:
            self.closure.error("reserved-path", where,
                               f"{raw}: hank.lock is a reserved bundle member owned by pack")
            return
        path = self.root / relative
        if copy and relative == ".":
            self.closure.error("copy-from-hank-dir", where, f'copy source "{raw}" is the hank'
                               " directory itself; move the files into a subdirectory and copy"
                               " that")
            return
        if copy and path.is_dir():
            record = self._tree(where, raw, relative)
        else:
            record = self._file(where, raw, relative)
        if record is not None:
            self.closure.refs[(base, raw)] = record

    def _file(self, where: str, raw: str, relative: str) -> RefRecord | None:
        existing = self.closure.files.get(relative)
        if existing is not None:
            return RefRecord("file", relative, existing.sha256, existing.mode)
        read = self._read(where, raw, relative)
        if read is None:
            return None
        data, mode = read
        if not self._add(relative, data, mode, where):
            return None
        return RefRecord("file", relative, sha256_hex(data), mode)

    def _read(self, where: str, raw: str, relative: str) -> tuple[bytes, Mode] | None:
        """The file's bytes and mode, read through one descriptor that is not a symlink's
        (a file swapped for a link after the checks cannot slip its target in)."""
        problem = unsafe_member_path(relative)
        if problem:
            self.closure.error("non-portable-path", where, f"{printable(relative)}: {problem};"
                               " rename the file")
            return None
        try:
            fd = os.open(self.root / relative, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            self.closure.error("missing-file", where, f"{raw} cannot be read"
                               f" ({exc.strerror or exc})")
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self.closure.error("missing-file", where, f"{raw} is not a regular file")
                return None
            if info.st_size > self.quotas.max_member_bytes:
                self.closure.error("closure-too-large", where, f"{raw} is {info.st_size} bytes;"
                                   " bundle members are limited to"
                                   f" {self.quotas.max_member_bytes} bytes")
                return None
            return handle.read(), _mode(info)

    def _tree(self, where: str, raw: str, relative: str) -> RefRecord | None:
        if self.ignore.ignored(relative, is_dir=True):
            self.closure.error("ignored-copy-root", where, f'"{raw}" is a directory excluded by'
                               f" {self.ignore.source}, so every file in it would be excluded;"
                               " adjust the rules or copy a different source")
            return None
        found: list[tuple[str, str, str]] = []  # (path inside the tree, mode, sha256)
        ignored: list[str] = []
        empty: list[str] = []
        if not self._walk(where, raw, relative, "", found, ignored, empty):
            return None
        if not found:
            extra = (f" after ignore rules ({_entries(len(ignored))} ignored)" if ignored
                     else "")
            self.closure.error("empty-copy-root", where, f"{raw} contains no files{extra}; the"
                               " bundle cannot recreate an empty copy source")
            return None
        for folder in empty:
            self.closure.warn("empty-dir", where,
                              f"{folder} is empty; excluded from bundle and tree hash")
        if ignored:
            shown = ", ".join(ignored[:3]) + (", …" if len(ignored) > 3 else "")
            self.closure.warn("ignored-paths", where, f"{_entries(len(ignored))} excluded by"
                              f" {self.ignore.source}: {shown}")
        lines = sorted((f"{rel}\0{mode}\0{digest}\n" for rel, mode, digest in found), key=utf8_key)
        return RefRecord("dir", relative, sha256_hex("".join(lines)))

    def _walk(self, where: str, raw: str, relative: str, inner: str,
              found: list[tuple[str, str, str]], ignored: list[str], empty: list[str]) -> bool:
        folder = self.root / relative / inner
        names = sorted(os.listdir(folder), key=lambda n: n.encode("utf-8", "surrogateescape"))
        kept = 0
        for name in names:
            rel_inner = f"{inner}{name}"
            hank_rel = posixpath.join(relative, rel_inner)
            info = os.lstat(folder / name)
            is_dir = stat.S_ISDIR(info.st_mode)
            if self.ignore.ignored(hank_rel, is_dir=is_dir):
                ignored.append(rel_inner + ("/" if is_dir else ""))
                continue
            kept += 1
            if stat.S_ISLNK(info.st_mode):
                self.closure.error("symlink-ref", where, f'"{raw}" contains a symlink at'
                                   f' "{hank_rel}"; symlinks are not allowed anywhere in a copied'
                                   " tree")
                return False
            if name == GITIGNORE:
                self.closure.error("invalid-ignore-rules", where, f'"{raw}" contains a nested'
                                   f' .gitignore at "{hank_rel}"; hank ignore rules live in one'
                                   " .gitignore at the hank root")
                return False
            if is_dir:
                if not self._walk(where, raw, relative, rel_inner + "/", found, ignored, empty):
                    return False
            elif not stat.S_ISREG(info.st_mode):
                self.closure.error("missing-file", where, f'"{raw}" contains a non-regular file'
                                   f' at "{hank_rel}"; only regular files and directories can be'
                                   " copied")
                return False
            else:
                record = self._file(where, hank_rel, hank_rel)
                if record is None:
                    return False
                found.append((rel_inner, record.mode, record.sha256))
        if not kept and inner:
            empty.append(posixpath.join(relative, inner.rstrip("/")))
        return True

    def _add_gitignore(self) -> None:
        path = self.root / GITIGNORE
        if os.path.lexists(path) and stat.S_ISREG(os.lstat(path).st_mode):
            read = self._read(GITIGNORE, GITIGNORE, GITIGNORE)
            if read is not None:
                self._add(GITIGNORE, *read)

    def _add(self, path: str, data: bytes, mode: Mode, where: str | None = None) -> bool:
        if path in self.closure.files:
            return True
        if len(self.closure.files) >= self.quotas.max_members:
            self.closure.error("closure-too-large", where or path,
                               f"bundle exceeds {self.quotas.max_members} members")
            return False
        self.total += len(data)
        if self.total > self.quotas.max_total_bytes:
            self.closure.error("closure-too-large", where or path,
                               f"bundle exceeds {self.quotas.max_total_bytes} total bytes")
            return False
        self.closure.files[path] = ClosureFile(path, data, mode)
        return True


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


class _IgnoreRules:
    """The gitignore rules copied directories are filtered by: the hank's root ``.gitignore``
    when there is one, else :data:`DEFAULT_IGNORE_PATTERNS` (``source`` says which)."""

    def __init__(self, lines: tuple[str, ...], source: str) -> None:
        import pathspec

        self.source = source
        self._spec = pathspec.GitIgnoreSpec.from_lines(lines)

    @classmethod
    def for_hank(cls, hank_dir: Path) -> _IgnoreRules:
        path = hank_dir / GITIGNORE
        if os.path.lexists(path) and stat.S_ISREG(os.lstat(path).st_mode):
            text = path.read_text(encoding="utf-8", errors="replace")
            return cls(tuple(text.splitlines()), "the hank .gitignore")
        return cls(DEFAULT_IGNORE_PATTERNS, "the default ignore rules")

    def ignored(self, relative: str, *, is_dir: bool) -> bool:
        if any(part.lower() == ".git" for part in relative.split("/")):
            return True
        return bool(self._spec.match_file(relative + ("/" if is_dir else "")))
