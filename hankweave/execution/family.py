"""An execution's fork family: the executions it was forked from, and its forks.

A fork names its source in ``execution-meta.json`` (``forkedFrom``), and the source is never
written, so the family is read from the forks: ancestors by following ``forkedFrom``, and an
execution's forks by looking at the executions beside it and beside each ancestor (where
``hankweave fork`` puts them unless ``-o`` says otherwise), in the directory they share.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from hankweave.execution.layout import HANKWEAVE_DIR, META_FILE
from hankweave.execution.meta import ExecutionMetaError, ForkOrigin, load_execution_meta

MAX_ANCESTORS = 64
"""A ``forkedFrom`` chain longer than this (or a cycle, from copied directories) is cut."""


class FamilyMember(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True)

    path: str
    codon: str
    """Where the fork leaves its source: it continues after this codon."""
    checkpoint: str
    run_id: str
    forked_at: str
    exists: bool = True
    """An ancestor that was deleted or moved is still named, as the fork recorded it."""


class Family(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True)

    ancestors: list[FamilyMember]
    """The source, its source, …: each with the point the execution below it forked at."""
    forks: list[FamilyMember]
    """The forks of this execution found beside it, oldest first."""

    @property
    def empty(self) -> bool:
        return not self.ancestors and not self.forks


def _origin(execution: Path) -> ForkOrigin | None:
    meta = execution / HANKWEAVE_DIR / META_FILE
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.stat(meta).st_mode):
            return None  # as in _cached_origin
    try:
        return load_execution_meta(execution / HANKWEAVE_DIR / META_FILE).forked_from
    except ExecutionMetaError:
        return None


def _member(path: str, origin: ForkOrigin) -> FamilyMember:
    return FamilyMember(path=path, codon=origin.codon, checkpoint=origin.checkpoint,
                        run_id=origin.run_id, forked_at=origin.forked_at,
                        exists=os.path.isdir(path))


def ancestors(execution: Path) -> list[FamilyMember]:
    """The chain of sources, nearest first; each carries the fork point below it."""
    chain: list[FamilyMember] = []
    seen = {os.path.abspath(execution)}
    origin = _origin(execution)
    while origin is not None and len(chain) < MAX_ANCESTORS:
        source = os.path.abspath(origin.execution)
        chain.append(_member(source, origin))
        if source in seen:
            break
        seen.add(source)
        origin = _origin(Path(source))
    return chain


_ORIGINS: dict[str, tuple[str, ForkOrigin | None]] = {}
"""Each execution's ``forkedFrom`` as last read, by path, with the metadata's ``(mtime, size)``
stamp: a list of many executions (the dashboard's) asks for each one's forks, and reading
every sibling's metadata each time would make that quadratic."""


def _cached_origin(execution: str) -> ForkOrigin | None:
    meta = os.path.join(execution, HANKWEAVE_DIR, META_FILE)
    try:
        info = os.stat(meta)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None  # a FIFO would block the read, a directory fail it: no execution's
    stamp = f"{info.st_mtime_ns}:{info.st_size}"
    cached = _ORIGINS.get(execution)
    if cached is None or cached[0] != stamp:
        cached = (stamp, _origin(Path(execution)))
        _ORIGINS[execution] = cached
    return cached[1]


def forks_of(execution: Path) -> list[FamilyMember]:
    """The executions beside ``execution`` that were forked from it, oldest first."""
    own = os.path.abspath(execution)
    found: list[FamilyMember] = []
    try:
        entries = list(os.scandir(os.path.dirname(own)))
    except OSError:
        return []
    for entry in entries:
        if entry.path == own or not entry.is_dir(follow_symlinks=False):
            continue
        origin = _cached_origin(entry.path)
        if origin is not None and os.path.abspath(origin.execution) == own:
            found.append(_member(entry.path, origin))
    return sorted(found, key=lambda member: (member.forked_at, member.path))


def family_of(execution: Path) -> Family:
    return Family(ancestors=ancestors(execution), forks=forks_of(execution))
