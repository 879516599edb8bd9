"""Watching ``agentRoot/`` between checkpoints, so a checkpoint can cost what the codon changed.

A :class:`WorkspaceWatcher` holds an inotify instance (Linux) with a watch on every directory of
the work tree except ``.git`` directories and the data link.  Nothing reads it while a codon
runs: the kernel queues the events, and :meth:`WorkspaceWatcher.drain`, called just before a
checkpoint, reads them all and returns a :class:`~hankweave.checkpoints.ChangeHint` with the
paths that changed since the previous drain.

A hint is *complete* only when no change can have escaped it.  It is marked incomplete, and
the store falls back to a full scan, when:

* the kernel's event queue overflowed (``IN_Q_OVERFLOW``: a codon that wrote more than
  ``fs.inotify.max_queued_events`` changes, such as an ``npm install``); the watches are then
  set up again from a walk, so the next interval is complete again;
* a directory could not be watched (``fs.inotify.max_user_watches`` reached, a permission);
  the watcher then stops producing complete hints;
* the work tree itself was removed, moved or replaced;
* the wall clock moved against the monotonic clock since the previous drain (stat-based
  caches compare timestamps);
* the runtime said so (:meth:`distrust`), for example around rig setup commands.

A directory created or moved in during the interval is reported as a path; the store treats a
path that is, or was, a directory as its whole subtree, because changes made inside it before
its watch existed produced no events.  Writes through a shared ``mmap`` produce no inotify
events at all; a workspace changed that way needs a full scan (``checkpoints.change_hints =
false``).  Where inotify is not available (macOS, Windows), :meth:`WorkspaceWatcher.start`
returns ``None`` and every checkpoint scans.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import secrets
import struct
import sys
import time
from pathlib import Path

from hankweave.checkpoints import ChangeHint
from hankweave.workspace import DATA_LINK

log = logging.getLogger(__name__)

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_UNMOUNT = 0x2000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_EXCL_UNLINK = 0x04000000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000

_WATCH_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO
               | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR
               | _IN_DONT_FOLLOW | _IN_EXCL_UNLINK)
_EVENT = struct.Struct("iIII")
_READ_BYTES = 1 << 16

CLOCK_TOLERANCE_S = 1.0
"""How far the wall clock may drift from the monotonic clock between two drains."""


class _Inotify:
    """The three inotify calls, through libc."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = (ctypes.c_int, ctypes.c_int)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self.fd = fd

    def add(self, path: str) -> int:
        wd = self._add(self.fd, os.fsencode(path), _WATCH_MASK)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"{os.strerror(ctypes.get_errno())}: {path}")
        return int(wd)

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)  # fails harmlessly for a watch the kernel already dropped

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class WorkspaceWatcher:
    """The changes under one work tree between drains (see the module docstring)."""

    def __init__(self, root: Path, inotify: _Inotify) -> None:
        self.root = Path(root)
        self.id = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._inotify = inotify
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory ("" is the root)
        self._wds: dict[str, int] = {}
        self._epoch = 0
        self._paths: set[str] = set()
        self._complete = True
        self._broken = False  # a watch could not be added: no complete hint from now on
        self._clock = self._clock_offset()
        self._watch_tree("")

    @classmethod
    def start(cls, root: Path) -> WorkspaceWatcher | None:
        """A watcher on ``root``, or None where inotify is unavailable or refuses."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            return cls(root, _Inotify())
        except (OSError, AttributeError) as exc:
            log.info("not watching %s for changes (checkpoints scan it): %s", root, exc)
            return None

    def close(self) -> None:
        self._inotify.close()

    def distrust(self) -> None:
        """Mark the current interval incomplete: the next hint makes the store scan."""
        self._complete = False

    def drain(self) -> ChangeHint:
        """Everything that changed since the previous drain; starts the next interval."""
        overflowed = self._read_events()
        offset = self._clock_offset()
        if abs(offset - self._clock) > CLOCK_TOLERANCE_S:
            self._complete = False
        self._clock = offset
        if overflowed or "" not in self._wds:
            self._complete = False
            self._resync()
        hint = ChangeHint(watcher=self.id, since=self._epoch, until=self._epoch + 1,
                          paths=frozenset(self._paths),
                          complete=self._complete and not self._broken)
        self._epoch += 1
        self._paths = set()
        self._complete = True
        return hint

    # ----- internals -----

    @staticmethod
    def _clock_offset() -> float:
        return time.time() - time.monotonic()

    def _read_events(self) -> bool:
        """Read every queued event; True if the kernel dropped some."""
        overflowed = False
        while True:
            try:
                data = os.read(self._inotify.fd, _READ_BYTES)
            except BlockingIOError:
                return overflowed
            except OSError as exc:
                log.warning("reading workspace events failed: %s", exc)
                return True
            if not data:
                return overflowed
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                name = os.fsdecode(data[start:start + length].rstrip(b"\0"))
                offset = start + length
                if mask & _IN_Q_OVERFLOW:
                    overflowed = True
                else:
                    self._event(wd, mask, name)

    def _event(self, wd: int, mask: int, name: str) -> None:
        directory = self._dirs.get(wd)
        if directory is None:
            return  # a watch dropped earlier (its directory was removed or moved away)
        if mask & (_IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT) and not name:
            if directory == "":
                self._complete = False  # agentRoot itself went away or moved
            if mask & _IN_IGNORED:
                self._forget_watch(wd)
            return
        if directory == "" and name == DATA_LINK:
            return
        if name.lower() == ".git":
            return  # a repository's internals are not workspace content
        path = f"{directory}/{name}" if directory else name
        self._paths.add(path)
        if mask & _IN_ISDIR:
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                self._watch_tree(path)
            elif mask & (_IN_MOVED_FROM | _IN_DELETE):
                self._unwatch_tree(path)

    def _watch_tree(self, rel: str) -> None:
        """Watch ``rel`` and every directory below it (``.git`` and the data link excepted)."""
        base = os.path.join(self.root, rel) if rel else str(self.root)
        for dirpath, dirnames, _ in os.walk(base):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir
            dirnames[:] = [d for d in dirnames if d.lower() != ".git"
                           and not (rel_dir == "" and d == DATA_LINK)]
            try:
                wd = self._inotify.add(dirpath)
            except OSError as exc:
                if not os.path.isdir(dirpath):
                    continue  # gone (or replaced) since it was listed: its parent's event says so
                log.warning("cannot watch %s for changes, so checkpoints scan the whole "
                            "workspace: %s", dirpath, exc)
                self._broken = True
                continue
            old = self._dirs.get(wd)
            if old is not None and old != rel_dir:
                self._wds.pop(old, None)  # the same directory, moved: adding returned its watch
            self._dirs[wd] = rel_dir
            self._wds[rel_dir] = wd

    def _unwatch_tree(self, rel: str) -> None:
        prefix = rel + "/"
        for rel_dir in [d for d in self._wds if d == rel or d.startswith(prefix)]:
            wd = self._wds.pop(rel_dir)
            self._dirs.pop(wd, None)
            self._inotify.remove(wd)

    def _forget_watch(self, wd: int) -> None:
        rel_dir = self._dirs.pop(wd, None)
        if rel_dir is not None and self._wds.get(rel_dir) == wd:
            del self._wds[rel_dir]

    def _resync(self) -> None:
        """After lost events, watch the tree as it is now (known watches are kept)."""
        if self.root.is_dir():
            self._watch_tree("")
