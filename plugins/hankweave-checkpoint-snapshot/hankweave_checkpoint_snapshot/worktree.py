"""Writing into a work tree (a restore's ``agentRoot/``, or a materialize's target)."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from hankweave.api import DATA_LINK
from hankweave_checkpoint_snapshot.objects import OPEN_CREATE

OPEN_REWRITE = (os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))


class WorkTree:
    """The work-tree side of a restore: never steps through a symlink, never leaves the root."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self._dirs: dict[str, bool] = {"": True}  # relative dir -> is a real directory

    def holds_anything(self) -> bool:
        """Whether the work tree has an entry besides the data link (a missing one: no)."""
        try:
            with os.scandir(self.root) as entries:
                return any(entry.name != DATA_LINK for entry in entries)
        except FileNotFoundError:
            return False

    def full(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root  # not os.path.join: once per file

    def _is_real_dir(self, rel_dir: str) -> bool:
        known = self._dirs.get(rel_dir)
        if known is None:
            parent = rel_dir.rsplit("/", 1)[0] if "/" in rel_dir else ""
            try:
                known = self._is_real_dir(parent) and stat.S_ISDIR(
                    os.lstat(self.full(rel_dir)).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                known = False
            self._dirs[rel_dir] = known
        return known

    def lstat(self, path: str) -> os.stat_result | None:
        """The entry at ``path``, or None when it is missing or lies beyond a non-directory."""
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        if not self._is_real_dir(parent):
            return None
        try:
            return os.lstat(self.full(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def remove(self, path: str) -> bool:
        """Delete a file or link; a directory standing there now is left alone."""
        st = self.lstat(path)
        if st is None or stat.S_ISDIR(st.st_mode):
            return False
        os.unlink(self.full(path))
        return True

    def remove_emptied_dirs(self, removed: Iterable[str]) -> None:
        """Remove the directories that deleting ``removed`` left empty, deepest first."""
        candidates: set[str] = set()
        for path in removed:
            while "/" in path:
                path = path.rsplit("/", 1)[0]
                candidates.add(path)
        for rel_dir in sorted(candidates, key=lambda d: d.count("/"), reverse=True):
            try:
                os.rmdir(self.full(rel_dir))
            except OSError:
                continue  # not empty: it holds files no checkpoint covers, or kept ones
            self._dirs[rel_dir] = False
        # Cached answers below a removed directory are stale now.
        self._dirs = {d: real for d, real in self._dirs.items() if real}

    def _make_room(self, path: str) -> None:
        """Make ``path``'s parents real directories and ``path`` itself free.

        Whatever stands in the way (a file where a directory belongs, a link to a directory,
        a directory where the file belongs) is removed, as ``git checkout --force`` does.
        """
        parts = path.split("/")
        for depth in range(1, len(parts)):
            rel_dir = "/".join(parts[:depth])
            if self._dirs.get(rel_dir):
                continue
            full = self.full(rel_dir)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISDIR(st.st_mode):
                os.unlink(full)
                st = None
            if st is None:
                os.mkdir(full)
            self._dirs[rel_dir] = True
        full = self.full(path)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(full)
            self._dirs = {d: real for d, real in self._dirs.items()
                          if d != path and not d.startswith(path + "/")}
        else:
            os.unlink(full)

    def write_file(self, path: str, executable: bool, content: bytes | Iterable[bytes]) -> None:
        """Give ``path`` this content and executable bit.

        A regular file with no other hard link is rewritten in place (cheaper than unlinking
        and creating); anything else is replaced by a new file, so a write never goes through
        a symlink or into a file shared with another path.
        """
        fd = self._open_for_rewrite(path, executable)
        if fd is None:
            self._make_room(path)
            fd = os.open(self.full(path), OPEN_CREATE, 0o777 if executable else 0o666)
        try:
            for chunk in [content] if isinstance(content, bytes) else content:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def _open_for_rewrite(self, path: str, executable: bool) -> int | None:
        st = self.lstat(path)
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return None
        try:
            fd = os.open(self.full(path), OPEN_REWRITE)
        except OSError:
            return None
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink != 1 or opened.st_ino != st.st_ino:
            os.close(fd)  # changed under us: replace it instead
            return None
        try:
            os.ftruncate(fd, 0)
            mode = stat.S_IMODE(opened.st_mode)
            if executable_mode(mode, executable) != mode:
                os.fchmod(fd, executable_mode(mode, executable))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_symlink(self, path: str, target: str) -> None:
        self._make_room(path)
        os.symlink(target, self.full(path))

    def set_executable(self, path: str, executable: bool) -> None:
        full = self.full(path)
        os.chmod(full, executable_mode(stat.S_IMODE(os.lstat(full).st_mode), executable))


def executable_mode(mode: int, executable: bool) -> int:
    """Like git: executable means x wherever r is granted; not executable clears every x."""
    return (mode | stat.S_IXUSR | ((mode & 0o044) >> 2)) if executable else mode & ~0o111
