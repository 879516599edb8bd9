"""The store's files on disk: their pydantic models, canonical JSON and ids.

See the package docstring for the layout.  Validators are built on first use, not at import:
every start of hankweave (--help included) may import this package, and most never read a
manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from hankweave.api import DATA_LINK, Checkpoint, CheckpointKind

STORE_DIR = (".hankweave", "checkpoints", "snapshot")
"""Where the store lives, relative to the execution directory."""

MANIFEST_FORMAT: Final = "hankweave-snapshot-manifest/1"
REFS_FORMAT: Final = "hankweave-snapshot-refs/1"
STAT_CACHE_FORMAT: Final = "hankweave-snapshot-stat-cache/1"

INITIAL_MESSAGE = "Initial checkpoint setup\n"
INITIAL_BRANCH = "main"

TREE_DELTA_FORMAT: Final = "hankweave-snapshot-tree-delta/1"
MAX_DELTA_CHAIN = 32
"""How many delta trees may follow one another before a tree is written whole again."""

ID = re.compile(r"[0-9a-f]{40}")
HASH = re.compile(r"[0-9a-f]{64}")
MANIFEST_NAME = re.compile(r"([0-9a-f]{40})\.json")


class _Model(BaseModel):
    # defer_build: validators are built on first use (see the module docstring).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class FileEntry(_Model):
    """A regular file of a tree: its content's object and its executable bit."""

    type: Literal["file"] = "file"
    hash: str = Field(pattern=HASH.pattern)
    size: int = Field(ge=0)
    executable: bool = False


class SymlinkEntry(_Model):
    """A symbolic link of a tree, stored as a link (its target is never followed)."""

    type: Literal["symlink"] = "symlink"
    target: str = Field(min_length=1)


TreeEntry: TypeAlias = Annotated[FileEntry | SymlinkEntry, Field(discriminator="type")]
Tree: TypeAlias = dict[str, FileEntry | SymlinkEntry]
TREE = TypeAdapter(dict[str, TreeEntry], config=ConfigDict(defer_build=True))


class TreeDelta(_Model):
    """A tree written as the changes to another one, its ``base``: ``changes`` maps a path to
    its new entry, or to null when the file is gone.  Written when a checkpoint that followed
    a change hint changed a few files of a large tree, so it costs what changed rather than a
    rewrite of every entry."""

    format: Literal["hankweave-snapshot-tree-delta/1"] = TREE_DELTA_FORMAT
    base: str = Field(pattern=HASH.pattern)
    changes: dict[str, TreeEntry | None]


class Manifest(_Model):
    """``manifests/<id>.json``: one checkpoint.

    ``id`` is the SHA-1 of the other fields (canonical JSON), which include a random ``nonce``,
    so two checkpoints of identical content still get different ids.
    """

    format: Literal["hankweave-snapshot-manifest/1"] = MANIFEST_FORMAT
    id: str = Field(pattern=ID.pattern)
    sequence: int = Field(ge=0, description="Creation order in this store; newest is highest.")
    kind: CheckpointKind
    run_id: str | None
    codon_id: str | None
    codon_name: str | None
    message: str
    timestamp: str
    branch: str
    parent: str | None = Field(
        description="The branch's previous checkpoint, or (first on its branch) the current one.")
    patterns: list[str]
    tree: str = Field(pattern=HASH.pattern)
    files: int = Field(ge=0)
    size: int = Field(ge=0, description="Total bytes of the checkpoint's regular files.")
    nonce: str

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(id=self.id, kind=self.kind, message=self.message,
                          timestamp=self.timestamp, branch=self.branch, run_id=self.run_id,
                          codon_id=self.codon_id)


class Refs(_Model):
    """``refs.json``: the checkpoint a restore made current, and when.

    Creating a checkpoint makes it current without writing this file: the current checkpoint
    is the newest one unless a restore happened after it (``sequence`` is the newest sequence
    number at the time of that restore).
    """

    format: Literal["hankweave-snapshot-refs/1"] = REFS_FORMAT
    head: str = Field(pattern=ID.pattern)
    sequence: int


def canonical_json(value: Any) -> bytes:
    # ASCII escapes keep file names that are not valid UTF-8 (surrogate-escaped str) encodable.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()



def manifest_id(fields: dict[str, Any]) -> str:
    body = {key: value for key, value in fields.items() if key != "id"}
    return hashlib.sha1(canonical_json(body)).hexdigest()


def is_safe_path(path: str) -> bool:
    """A relative "/"-separated path that stays inside the work tree and off the data link."""
    if not path or "\0" in path or path.startswith("/"):
        return False
    parts = path.split("/")
    return (parts[0] != DATA_LINK and ".git" not in parts
            and not any(part in ("", ".", "..") for part in parts))

