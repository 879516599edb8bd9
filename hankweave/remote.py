"""Remote hanks: a git repository address as the hank argument (Hankweave 0.11).

Addresses (docs/remote-hanks.md):

* a GitHub, GitLab or Bitbucket page URL: ``https://github.com/OWNER/REPO``, with
  ``/tree/REF/PATH`` or ``/blob/REF/PATH`` (GitLab ``/-/tree/...``, Bitbucket ``/src/...``);
* any git URL (``https://…/repo.git``, ``ssh://``, ``git://``, ``file://``) or ``git@HOST:PATH``;
* either followed by ``#REF`` or ``#REF/PATH``.

REF is a branch, a tag or a commit (7 to 40 hex digits); a ref with slashes is told from the
path by the refs the remote has (the longest that fits). Without REF the remote's default
branch is used. PATH is a hank directory, a hank file or a ``.hank`` bundle inside the
repository (default: the repository root).

The cache (``<cacheDir>/hanks/<repo key>/``) keeps one checkout per commit, never changed once
written, and the commit each ref last resolved to. Each run asks the remote (``git ls-remote``,
no download) what the ref points at now; a checkout of that commit already in the cache is used
as it is. A commit ref needs no network at all. When the remote cannot be reached, the ref's
cached commit is used and the notice says how old it is.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from hankweave.config.errors import ConfigError
from hankweave.fsutil import atomic_write_bytes, parse_iso, private_dir, utc_now_iso
from hankweave.secrets import MASK, mask_url_credentials

__all__ = ["RemoteHank", "RemoteHankError", "fetch_remote_hank", "is_remote_address",
           "parse_remote_address"]

_REMOTE_PREFIXES = ("https://", "http://", "git@", "ssh://", "git://", "file://")
_HOSTED = {"github.com": ("tree", "blob"), "gitlab.com": ("-",), "bitbucket.org": ("src",)}
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_FULL_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SAFE_REF = re.compile(r"^refs/(heads|tags)/(?!-)(?!.*\.\.)[A-Za-z0-9._/+-]+(\^\{\})?$")
"""The branch and tag names a remote hank may use: no option-like, spaced or odd names."""
GIT_TIMEOUT_S = 120
_HEAD_BRANCH = " head-branch"
"""Key of :meth:`_Git.ls_remote`'s answer holding the default branch's name."""


class RemoteHankError(ConfigError):
    """A remote hank that cannot be fetched or found (the message says which and why)."""


@dataclass(frozen=True)
class RemoteAddress:
    """A parsed remote hank address."""

    clone_url: str
    ref_and_path: str
    """What follows the repository: ``REF``, ``REF/PATH`` or "" (the default branch)."""
    given: str

    @property
    def shown(self) -> str:
        return scrub(self.given, self.given)


@dataclass(frozen=True)
class RemoteHank:
    """A remote hank, checked out in the cache."""

    address: RemoteAddress
    ref: str | None
    commit: str
    path: str
    """The hank inside the repository ("" for the root)."""
    checkout: Path
    notice: str

    @property
    def local(self) -> Path:
        return self.checkout / self.path if self.path else self.checkout

    def record(self) -> dict[str, str]:
        """What the execution records (``remote`` in ``execution-meta.json``)."""
        record = {"url": scrub(self.address.clone_url, self.address.given), "commit": self.commit}
        if self.ref:
            record["ref"] = self.ref
        if self.path:
            record["path"] = self.path
        return record


def scrub(text: str, url: str) -> str:
    """``text`` with every credential of ``url`` masked, whatever characters it holds (a
    password with a quote or a comma defeats a pattern), and any other URL's password."""
    try:
        parts = urlsplit(url.partition("#")[0])
        user, password = parts.username, parts.password
    except ValueError:
        user = password = None
    if password:
        text = text.replace(password, MASK)
    elif user and "@" in url:  # a lone token in the user name's place
        text = text.replace(f"{user}@", f"{MASK}@")
    return mask_url_credentials(text)


def is_remote_address(argument: str) -> bool:
    return argument.startswith(_REMOTE_PREFIXES)


def parse_remote_address(given: str) -> RemoteAddress:
    """Split ``given`` into the URL to clone and what names the ref and the path."""
    base, _, fragment = given.partition("#")
    if base.startswith("git@"):
        if ":" not in base:
            raise RemoteHankError(f"{given}: a git@ address is git@HOST:PATH")
        return RemoteAddress(base, fragment.strip("/"), given)
    parts = urlsplit(base)
    if parts.scheme not in ("https", "http", "ssh", "git", "file") or (
            parts.scheme != "file" and not parts.netloc):
        raise RemoteHankError(f"{scrub(given, given)}: not a repository URL")
    host = (parts.hostname or "").lower()
    segments = [s for s in parts.path.split("/") if s]
    if host in _HOSTED and parts.scheme in ("https", "http"):
        if len(segments) < 2:
            raise RemoteHankError(f"{scrub(given, given)}: a {host} URL names OWNER/REPO")
        repo = segments[1].removesuffix(".git")
        clone = f"{parts.scheme}://{parts.netloc}/{segments[0]}/{repo}.git"
        rest = segments[2:]
        if rest and rest[0] == "-":  # GitLab: /-/tree/REF/PATH
            rest = rest[1:]
        if len(rest) >= 2 and rest[0] in ("tree", "blob", "src"):
            tail = "/".join(rest[1:])
            return RemoteAddress(clone, fragment.strip("/") or tail, given)
        return RemoteAddress(clone, fragment.strip("/"), given)
    return RemoteAddress(base, fragment.strip("/"), given)


def fetch_remote_hank(given: str, cache_root: Path, *,
                      env: dict[str, str] | None = None) -> RemoteHank:
    """The hank ``given`` names, checked out in the cache (see the module docstring).

    Raises:
        RemoteHankError: the address is bad, the ref is unknown, or the remote cannot be
            reached and nothing for this ref is cached.
    """
    address = parse_remote_address(given)
    cache = _RepoCache(cache_root, address.clone_url)
    git = _Git(env)
    listed, reach_error = git.ls_remote(address.clone_url)
    ref, path, commit, notice = _resolve(address, listed, reach_error, cache)
    checkout = cache.checkout(commit)
    if checkout is None:
        if reach_error is not None:
            raise RemoteHankError(
                f"{address.shown}: the remote cannot be reached ({reach_error}) and commit"
                f" {commit[:12]} is not in the cache ({cache.root})")
        checkout = cache.store(git, address.clone_url, _full_ref(ref, listed), commit)
    if reach_error is None:  # what each named ref points at now, for when it cannot be asked
        if ref is not None and _full_ref(ref, listed) is not None:
            cache.remember(ref, commit)
        if not address.ref_and_path:
            cache.remember("", commit)  # the default branch
    safe_path = _safe_subpath(address, path)
    _refuse_links(address, checkout, safe_path)
    return RemoteHank(address, ref, commit, safe_path, checkout,
                      f"remote hank {address.shown}: {notice}")


def _resolve(address: RemoteAddress, listed: dict[str, str] | None, reach_error: str | None,
             cache: _RepoCache) -> tuple[str | None, str, str, str]:
    """(ref, path in the repository, commit, what to tell the person)."""
    rest = address.ref_and_path
    if listed is not None:
        if not rest:
            head = listed.get("HEAD")
            if head is None:
                raise RemoteHankError(f"{address.shown}: the remote has no default branch; give"
                                      " one as #REF")
            branch = listed.get(_HEAD_BRANCH)
            shown = f"default branch {branch}" if branch else "default branch"
            return branch, "", head, f"{shown} at {head[:12]}"
        ref = _longest_ref(rest, listed)
        if ref is not None:
            commit = listed[f"refs/tags/{ref}^{{}}"] if f"refs/tags/{ref}^{{}}" in listed \
                else listed.get(f"refs/heads/{ref}") or listed[f"refs/tags/{ref}"]
            return ref, rest[len(ref):].lstrip("/"), commit, f"{ref} at {commit[:12]}"
    first, _, path = rest.partition("/")
    if _COMMIT.match(first):
        found = cache.commit_by_prefix(first) if len(first) < 40 else first
        if found is None:
            raise RemoteHankError(f"{address.shown}: give a commit as all 40 hex digits (an"
                                  f" abbreviated one, {first}, cannot be fetched)")
        return first, path, found, f"commit {found[:12]}"
    if listed is not None:
        names = sorted(n.removeprefix("refs/heads/").removeprefix("refs/tags/")
                       for n in listed if n.startswith(("refs/heads/", "refs/tags/"))
                       and not n.endswith("^{}"))
        raise RemoteHankError(f"{address.shown}: the remote has no branch or tag {first!r}"
                              f" (it has: {', '.join(names[:12]) or 'none'})")
    cached = cache.cached_ref(rest)
    if cached is None:
        raise RemoteHankError(f"{address.shown}: the remote cannot be reached ({reach_error})"
                              f" and {rest or 'its default branch'} is not in the cache"
                              f" ({cache.root}); try again when it can be reached")
    ref, commit, fetched_at = cached
    return (ref or None, rest[len(ref):].lstrip("/"), commit,
            f"the remote cannot be reached ({reach_error}); using the cached"
            f" {ref or 'default branch'} at {commit[:12]}, last checked {_age(fetched_at)} ago")


def _full_ref(ref: str | None, listed: dict[str, str] | None) -> str | None:
    """``refs/heads/REF`` or ``refs/tags/REF``, as the remote listed it (None: a commit)."""
    for prefix in ("refs/heads/", "refs/tags/"):
        if ref and listed and f"{prefix}{ref}" in listed:
            return f"{prefix}{ref}"
    return None


def _longest_ref(rest: str, listed: dict[str, str]) -> str | None:
    best = None
    for name in listed:
        for prefix in ("refs/heads/", "refs/tags/"):
            if not name.startswith(prefix) or name.endswith("^{}"):
                continue
            short = name[len(prefix):]
            if (rest == short or rest.startswith(short + "/")) and (
                    best is None or len(short) > len(best)):
                best = short
    return best


def _safe_subpath(address: RemoteAddress, path: str) -> str:
    if not path:
        return ""
    normal = posixpath.normpath(path)
    if path.startswith("/") or normal == ".." or normal.startswith("../") or "\\" in path:
        raise RemoteHankError(f"{address.shown}: {path!r} is not a path inside the repository")
    return "" if normal == "." else normal


def _refuse_links(address: RemoteAddress, checkout: Path, path: str) -> None:
    """No step from the checkout to the hank file is a symlink: a repository's link would
    make a "remote" hank read this machine's files."""
    current = checkout
    steps = [part for part in path.split("/") if part]
    for part in steps:
        current = current / part
        _refuse_link(address, checkout, current)
    if current.is_dir():
        _refuse_link(address, checkout, current / "hank.json")


def _refuse_link(address: RemoteAddress, checkout: Path, step: Path) -> None:
    if step.is_symlink():
        shown = step.relative_to(checkout).as_posix()
        raise RemoteHankError(f"{address.shown}: {shown} is a symlink in the repository;"
                              " a remote hank may not link out of its checkout")


def _age(timestamp: str) -> str:
    try:
        seconds = max(0, int((datetime.now(UTC) - parse_iso(timestamp)).total_seconds()))
    except ValueError:
        return "an unknown time"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class _Git:
    def __init__(self, env: dict[str, str] | None) -> None:
        self.env = {**(env if env is not None else os.environ), "GIT_TERMINAL_PROMPT": "0",
                    "GIT_ASKPASS": "", "SSH_ASKPASS": "", "LC_ALL": "C"}

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=cwd, env=self.env, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              check=False)

    def ls_remote(self, url: str) -> tuple[dict[str, str] | None, str | None]:
        """The remote's refs (name -> commit, with ``HEAD``), or why it could not be asked."""
        try:
            result = self.run("ls-remote", "--symref", "--", url)
        except FileNotFoundError:
            raise RemoteHankError("git is not installed: a remote hank needs git") from None
        except subprocess.TimeoutExpired:
            return None, f"git ls-remote gave no answer in {GIT_TIMEOUT_S}s"
        if result.returncode != 0:
            lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
            fatal = [line for line in lines if line.startswith("fatal:")]
            reason = (fatal or lines or [f"git ls-remote exited {result.returncode}"])[0]
            return None, scrub(reason.removeprefix("fatal: "), url)
        refs: dict[str, str] = {}
        for line in result.stdout.splitlines():
            value, _, name = line.partition("\t")
            if value.startswith("ref: ") and name == "HEAD":
                target = value.removeprefix("ref: ")
                if _SAFE_REF.match(target) and target.startswith("refs/heads/"):
                    refs[_HEAD_BRANCH] = target.removeprefix("refs/heads/")
            elif _FULL_COMMIT.match(value) and (name == "HEAD" or _SAFE_REF.match(name)):
                refs[name] = value  # a ref name git itself would refuse is not offered
        return refs, None


class _RepoCache:
    """``<cacheDir>/hanks/<key>/``: ``trees/<commit>/`` checkouts and ``refs.json``."""

    def __init__(self, cache_root: Path, clone_url: str) -> None:
        import hashlib

        key = hashlib.sha256(clone_url.encode()).hexdigest()[:16]
        self.root = cache_root / "hanks" / key
        self.trees = self.root / "trees"
        self.refs_file = self.root / "refs.json"

    def _refs(self) -> dict[str, dict[str, str]]:
        """``refs.json``, keeping only well-formed entries (a damaged file is an empty cache)."""
        try:
            data = json.loads(self.refs_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {name: entry for name, entry in data.items()
                if isinstance(entry, dict) and isinstance(entry.get("commit"), str)
                and _FULL_COMMIT.match(entry["commit"]) and isinstance(
                    entry.get("checkedAt", ""), str)}

    def cached_ref(self, rest: str) -> tuple[str, str, str] | None:
        refs = self._refs()
        names = [n for n in refs if rest == n or rest.startswith(n + "/")]
        if not rest and "" in refs:
            names = [""]
        for name in sorted(names, key=len, reverse=True):
            entry = refs[name]
            if self.checkout(entry["commit"]) is not None:
                return name, entry["commit"], entry.get("checkedAt") or utc_now_iso()
        return None

    def commit_by_prefix(self, prefix: str) -> str | None:
        if not self.trees.is_dir():
            return None
        found = [p.name for p in self.trees.iterdir() if p.name.startswith(prefix)]
        return found[0] if len(found) == 1 else None

    def checkout(self, commit: str) -> Path | None:
        """The checkout of ``commit`` (a real directory here, not a link planted elsewhere)."""
        if not _FULL_COMMIT.match(commit):
            return None
        path = self.trees / commit
        return path if path.is_dir() and not path.is_symlink() else None

    def remember(self, ref: str, commit: str) -> None:
        """``ref`` (``""``: the default branch) pointed at ``commit`` just now."""
        refs = self._refs()
        refs[ref] = {"commit": commit, "checkedAt": utc_now_iso()}
        atomic_write_bytes(self.refs_file, (json.dumps(refs, indent=2) + "\n").encode())

    def store(self, git: _Git, url: str, ref: str | None, commit: str) -> Path:
        private_dir(self.trees)
        staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=self.trees))
        try:
            self._fetch(git, url, ref, commit, staging)
            actual = git.run("rev-parse", "HEAD", cwd=staging).stdout.strip()
            shutil.rmtree(staging / ".git")
            target = self.trees / actual
            if target.exists():
                shutil.rmtree(staging)
            else:
                os.rename(staging, target)
            return target
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _fetch(self, git: _Git, url: str, ref: str | None, commit: str, into: Path) -> None:
        """Fetch ``commit`` (by its full ref name when it has one: never a word git could
        read as an option) into ``into`` and check it out."""
        git.run("init", "-q", cwd=into)
        wanted = ref if ref is not None and ref.startswith("refs/") else commit
        result = git.run("fetch", "-q", "--depth", "1", "--no-tags", "--", url, wanted,
                         cwd=into)
        if result.returncode != 0 and wanted == commit:  # a server that refuses a bare commit
            result = git.run("fetch", "-q", "--no-tags", "--", url, "+refs/*:refs/fetched/*",
                             cwd=into)
        if result.returncode != 0:
            raise RemoteHankError(f"{scrub(url, url)}: git fetch failed:"
                                  f" {scrub(result.stderr.strip(), url)}")
        done = git.run("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit,
                       cwd=into)
        if done.returncode != 0:
            raise RemoteHankError(f"{scrub(url, url)}: commit {commit[:12]} is not what the"
                                  f" remote sent for {wanted}: {done.stderr.strip()}")
