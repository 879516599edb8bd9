"""The two files of the repository the backend owns: ``config`` and ``info/attributes``.

git reads both from the repository, and an agent can write both from ``agentRoot``, so the
store keeps them exactly as written here (:class:`OwnedFiles`, enforced before every git
process of the store).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import secrets
import stat
import sys
from pathlib import Path

from hankweave.api import CheckpointStorageError

log = logging.getLogger("hankweave.checkpoints.git")

IDENTITY_NAME = "Hankweave Runtime"
IDENTITY_EMAIL = "runtime@hankweave.invalid"
LAYOUT_VERSION = "2"
"""Written into the repository's config (``hankweave.layout``) and bumped when
:func:`repository_config` changes.  A config without this version's line is an older layout,
brought up to date without a warning; a changed config with it was changed by someone else."""

_CONFIG = """\
# Written by hankweave. Any change to this file is undone before the next git command
# (docs/checkpoints.md, "What is trusted").
[core]
\trepositoryformatversion = 0
\tfilemode = {filemode}
\tbare = false
\tautocrlf = false
\tsymlinks = true
\tlogallrefupdates = false
\thooksPath = {devnull}
\tfsmonitor = false
\tuntrackedCache = false
\tquotePath = false
{filesystem}[user]
\tname = {name}
\temail = {email}
[commit]
\tgpgsign = false
[tag]
\tgpgsign = false
[gc]
\tauto = 0
[maintenance]
\tauto = false
[hankweave]
\tlayout = {layout}
"""
_LAYOUT_LINE = f"[hankweave]\n\tlayout = {LAYOUT_VERSION}\n".encode()


def repository_config(*, filemode: bool, ignorecase: bool, precomposeunicode: bool) -> bytes:
    """The exact bytes of the repository's ``config``.

    What the backend needs and nothing else: no include, no filter or diff driver, no program.
    No reflogs (they would keep pruned checkpoints' objects alive); garbage collection only
    when the store's ``prune`` asks for it.  The three flags are what ``git init``
    would have found out about the disk, found the same way (:func:`probe_filesystem`).
    """
    filesystem = "".join(
        f"\t{key} = true\n" for key, on in (("ignorecase", ignorecase),
                                            ("precomposeunicode", precomposeunicode)) if on)
    return _CONFIG.format(filemode=str(filemode).lower(), devnull=os.devnull,
                          filesystem=filesystem, name=IDENTITY_NAME, email=IDENTITY_EMAIL,
                          layout=LAYOUT_VERSION).encode()


# info/attributes outranks every .gitattributes in agentRoot: the agent's eol, filter or
# encoding attributes must not change the bytes we store and write back.
REPOSITORY_ATTRIBUTES = (
    "# hankweave: checkpoints store and restore files byte for byte\n"
    "* -text -eol -filter -ident -working-tree-encoding\n"
)


def probe_filesystem(directory: Path) -> dict[str, bool]:
    """What ``git init`` finds out about the disk ``directory`` is on, found the same way: an
    executable bit that sticks (``core.filemode``), a name that also answers in another
    letter case (``core.ignorecase``), a precomposed name that answers decomposed (macOS,
    ``core.precomposeunicode``)."""
    probe = directory / f"hankweave-probe-{os.getpid()}-{secrets.token_hex(4)}"
    probe.write_bytes(b"")
    try:
        before = probe.stat().st_mode
        probe.chmod(before ^ stat.S_IXUSR)
        filemode = probe.stat().st_mode != before
        ignorecase = os.path.exists(directory / probe.name.upper())
    finally:
        probe.unlink()
    precompose = False
    if sys.platform == "darwin":
        composed = directory / f"hankweave-probe-{os.getpid()}-\u00c4"
        composed.write_bytes(b"")
        try:
            precompose = os.path.exists(directory / composed.name.replace("\u00c4", "A\u0308"))
        finally:
            composed.unlink()
    return {"filemode": filemode, "ignorecase": ignorecase, "precomposeunicode": precompose}


def read_plain(directory: Path, name: str, *, follow_directory: bool) -> bytes | None:
    """The bytes of the regular file ``directory/name``; None when it is missing, is not a
    regular file or a symlink, or (unless ``follow_directory``) ``directory`` is a symlink."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | (0 if follow_directory else nofollow)
    try:
        dir_fd = os.open(directory, flags)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | nofollow, dir_fd=dir_fd)
        with open(fd, "rb") as fh:
            return fh.read() if stat.S_ISREG(os.fstat(fh.fileno()).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(dir_fd)


@functools.cache
def _canonical_configs() -> frozenset[bytes]:
    """Every config the backend may have written: one per combination of the disk's flags.
    Accepting any of them gives nothing away (they are booleans about the disk), and spares
    probing the disk, or writing, on every store opened on a disk that cannot be written."""
    return frozenset(
        repository_config(filemode=a, ignorecase=b, precomposeunicode=c)
        for a, b, c in itertools.product((False, True), repeat=3))


class OwnedFiles:
    """The repository's ``config`` and ``info/attributes``, kept exactly as the backend writes
    them.

    git reads both from the repository, and an agent can write both from ``agentRoot``: a
    config names programs (``core.fsmonitor``, hooks, filter and diff drivers, included
    files that name more) and the attributes pick the drivers.  :meth:`enforce` runs before
    every git process of the store; it reads the two small files and, when either differs
    from its canonical bytes, puts the canonical bytes back atomically and says so.
    """

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self._config: bytes | None = None

    @property
    def config(self) -> bytes:
        """The config to write: probed (:func:`probe_filesystem`) the first time it is
        needed, beside the repository."""
        if self._config is None:
            self._config = repository_config(**probe_filesystem(self.git_dir.parent))
        return self._config

    def enforce(self) -> None:
        """Restore whichever file differs; a repository not yet built is left alone."""
        config = read_plain(self.git_dir, "config", follow_directory=True)
        upgrading = False
        if config not in _canonical_configs():
            if config is None and not self.git_dir.is_dir():
                return  # nothing built yet: building the repository writes both
            # A config of an older layout (or Hankweave 0.10.0's) is brought up to date.
            upgrading = config is not None and _LAYOUT_LINE not in config
            self._restore(self.git_dir, "config", self.config, quietly=upgrading)
        info = self.git_dir / "info"
        attributes = REPOSITORY_ATTRIBUTES.encode()
        if read_plain(info, "attributes", follow_directory=False) != attributes:
            self._restore(info, "attributes", attributes, quietly=upgrading)

    @staticmethod
    def _restore(directory: Path, name: str, data: bytes, *, quietly: bool) -> None:
        _replace_file(directory, name, data)
        if not quietly:
            what = "config" if name == "config" else "info/attributes"
            log.warning("the checkpoint repository's %s had been changed, probably by an "
                        "agent; restored (%s)", what, directory / name)


def _replace_file(directory: Path, name: str, data: bytes) -> None:
    """Write ``directory/name`` atomically; a symlink or file where ``directory`` should be
    is replaced by a real directory first."""
    try:
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            directory.unlink()
        directory.mkdir(exist_ok=True)
        tmp = directory / f"{name}.hankweave-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)
    except OSError as exc:
        raise CheckpointStorageError(
            f"the checkpoint repository's {directory / name} was changed and cannot be put "
            f"back, so git is not run against it: {exc}") from exc

