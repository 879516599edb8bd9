"""The files a codon changed, as unified diffs between two of its checkpoints.

The execution's checkpoint store is opened through the configured backend, as ``hankweave
inspect`` and ``rollback`` do.  Opening a store may repair or configure it, so this is done only
while no runtime holds the execution (:class:`Busy` otherwise).  A checkpoint's files never
change, so each checkpoint is written out once into the dashboard's scratch directory and kept
for the next diff (the :data:`KEEP` most recently used).
"""

from __future__ import annotations

import difflib
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from hankweave_dashboard.catalog import liveness
from hankweave_dashboard.pages import checked_name, checkpoints_of, load

KEEP = 16
"""Checkpoints kept written out."""
MAX_FILE_BYTES = 512 * 1024
"""Larger files are listed, not diffed."""
MAX_DIFF_LINES = 4_000


class Busy(Exception):
    """The store cannot be opened now (HTTP 409); the message says why and when it can."""


class DiffError(Exception):
    """The store cannot produce the diff (a missing backend, a damaged store): HTTP 500 with
    the message, never a traceback."""


class Differ:
    def __init__(self, scratch: Path | None = None) -> None:
        self._scratch = Path(scratch or tempfile.mkdtemp(prefix="hankweave-dashboard-"))
        self._trees: OrderedDict[tuple[str, str], Path] = OrderedDict()
        self._lock = threading.Lock()

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)

    def codon_diff(self, path: Path, run_id: str, codon_id: str) -> dict[str, Any]:
        checked_name(run_id, "run")
        checked_name(codon_id, "codon")
        base, end = checkpoints_of(load(path), run_id, codon_id)
        if liveness(path).live:
            raise Busy("the files a codon changed are shown while no runtime holds the"
                       " execution: its checkpoint store is not opened beside a runtime that"
                       " writes it. They appear here when the run ends.")
        with self._lock:  # one store at a time: diffs are rare, stores are not thread-safe
            return self._diff(path, base, end)

    def _diff(self, path: Path, base: str, end: str) -> dict[str, Any]:
        from hankweave.api import CheckpointError, ConfigError

        try:
            store = _open_store(path)
            try:
                changes = store.changed_files(base, end)
                old = self._tree(store, path, base) if changes else None
                new = self._tree(store, path, end) if changes else None
            finally:
                store.close()
        except (CheckpointError, ConfigError) as exc:
            raise DiffError(f"the checkpoint store of {path} cannot be read: {exc}") from None
        files = [_file_diff(change.path, change.change, old, new) for change in changes]
        return {"from": base, "to": end, "files": files}

    def _tree(self, store: Any, path: Path, checkpoint: str) -> Path:
        key = (str(path), checkpoint)
        if key in self._trees:
            self._trees.move_to_end(key)
            return self._trees[key]
        target = self._scratch / f"{len(self._trees)}-{checkpoint[:12]}"
        while target.exists():
            target = target.with_name(target.name + "x")
        store.materialize(checkpoint, target)
        self._trees[key] = target
        while len(self._trees) > KEEP:
            _, evicted = self._trees.popitem(last=False)
            shutil.rmtree(evicted, ignore_errors=True)
        return target


def _open_store(path: Path) -> Any:
    import os

    from hankweave.api import get_registry, resolve_settings

    settings = resolve_settings(cwd=Path.cwd(), hank=None, env=dict(os.environ), cli={})
    backend = get_registry().checkpoint_backend(settings.settings.checkpoints.backend)
    return backend(path)


def _file_diff(name: str, change: str, old: Path | None, new: Path | None) -> dict[str, Any]:
    before = _read(old / name) if old is not None and change != "added" else b""
    after = _read(new / name) if new is not None and change != "deleted" else b""
    entry: dict[str, Any] = {"path": name, "change": change}
    if before is None or after is None:
        return {**entry, "binary": False, "tooLarge": True, "diff": None}
    if b"\0" in before[:8192] or b"\0" in after[:8192]:
        return {**entry, "binary": True, "tooLarge": False, "diff": None}
    lines = list(difflib.unified_diff(
        before.decode(errors="replace").splitlines(keepends=True),
        after.decode(errors="replace").splitlines(keepends=True),
        fromfile=f"a/{name}" if change != "added" else "/dev/null",
        tofile=f"b/{name}" if change != "deleted" else "/dev/null"))
    cut = len(lines) > MAX_DIFF_LINES
    text = "".join(line if line.endswith("\n") else line + "\n"
                   for line in lines[:MAX_DIFF_LINES])
    if cut:
        text += f"… ({len(lines) - MAX_DIFF_LINES:,} more lines not shown)\n"
    return {**entry, "binary": False, "tooLarge": False, "diff": text}


def _read(file: Path) -> bytes | None:
    """The file's bytes; None when it is too large to diff; empty when it is not a file."""
    try:
        if file.is_symlink():
            return f"-> {file.readlink()}\n".encode()
        if file.stat().st_size > MAX_FILE_BYTES:
            return None
        return file.read_bytes()
    except OSError:
        return b""
