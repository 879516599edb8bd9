"""The checkpoints themselves: ``manifests/<id>.json`` and ``refs.json``.

A manifest is written atomically, and only after every object it names is durable, so a
checkpoint is either whole or absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hankweave.api import (
    PRIVATE_FILE_MODE,
    CheckpointStorageError,
    atomic_write_bytes,
    fsync_dir,
)
from hankweave_checkpoint_snapshot.formats import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    Manifest,
    Refs,
    manifest_id,
)


class Manifests:
    """Every manifest of one store, read once and then kept up to date in memory, and the
    current checkpoint (``refs.json``)."""

    def __init__(self, manifests_dir: Path, refs_path: Path) -> None:
        self.manifests_dir = manifests_dir
        self.refs_path = refs_path
        self._manifests: dict[str, Manifest] | None = None
        # The newest manifest and the newest of each branch (kept with ``_manifests``): a
        # commit needs both, and a long loop's store holds thousands of manifests.
        self._tips: tuple[Manifest | None, dict[str, Manifest]] | None = None
        self._refs: Refs | None = None

    def forget(self) -> None:
        """Read everything from disk again on next use."""
        self._manifests = self._refs = self._tips = None

    def loaded(self) -> dict[str, Manifest]:
        if self._manifests is None:
            return self.load()
        return self._manifests

    def load(self) -> dict[str, Manifest]:
        """Every manifest on disk (read once per instance; later kept up to date in memory)."""
        if self._manifests is not None:
            return self._manifests
        manifests: dict[str, Manifest] = {}
        try:
            names = os.listdir(self.manifests_dir)
        except FileNotFoundError:
            names = []
        except OSError as exc:
            raise CheckpointStorageError(f"cannot list checkpoints in {self.manifests_dir}: "
                                         f"{exc}") from exc
        for name in names:
            match = MANIFEST_NAME.fullmatch(name)
            if match is None:
                continue  # a temp file of an interrupted write: not a checkpoint
            manifest = self._read_manifest(self.manifests_dir / name)
            if manifest.id != match.group(1):
                raise CheckpointStorageError(
                    f"checkpoint manifest {self.manifests_dir / name} holds id {manifest.id}")
            manifests[manifest.id] = manifest
        self._manifests, self._tips = manifests, None
        return manifests

    @staticmethod
    def _read_manifest(path: Path) -> Manifest:
        try:
            raw = json.loads(path.read_bytes())
            manifest = Manifest.model_validate(raw)
        except OSError as exc:
            raise CheckpointStorageError(f"cannot read checkpoint manifest {path}: {exc}") from exc
        except (ValueError, ValidationError) as exc:
            raise CheckpointStorageError(f"checkpoint manifest {path} is corrupt: "
                                         f"{' '.join(str(exc).split())}") from exc
        if manifest_id(raw) != manifest.id:
            raise CheckpointStorageError(
                f"checkpoint manifest {path} is corrupt: its content does not match its id")
        return manifest

    def newest(self) -> tuple[Manifest | None, dict[str, Manifest]]:
        """The newest manifest, and the newest of each branch."""
        if self._tips is None:
            newest: Manifest | None = None
            tips: dict[str, Manifest] = {}
            for manifest in self.loaded().values():
                if newest is None or manifest.sequence > newest.sequence:
                    newest = manifest
                tip = tips.get(manifest.branch)
                if tip is None or manifest.sequence > tip.sequence:
                    tips[manifest.branch] = manifest
            self._tips = (newest, tips)
        return self._tips

    def head(self) -> str | None:
        """The current checkpoint: the newest, unless a restore happened after it."""
        manifests = self.loaded()
        newest, _ = self.newest()
        if newest is None:
            return None
        refs = self._load_refs()
        if refs is not None and refs.sequence >= newest.sequence and refs.head in manifests:
            return refs.head
        return newest.id

    def _load_refs(self) -> Refs | None:
        if self._refs is None:
            try:
                self._refs = Refs.model_validate_json(self.refs_path.read_bytes())
            except FileNotFoundError:
                return None
            except (OSError, ValueError) as exc:
                raise CheckpointStorageError(f"cannot read {self.refs_path}: {exc}") from exc
        return self._refs

    def set_head(self, manifest: Manifest) -> None:
        """Make ``manifest`` the current checkpoint (a restore made it so)."""
        newest, _ = self.newest()
        refs = Refs(head=manifest.id, sequence=newest.sequence if newest else manifest.sequence)
        atomic_write_bytes(self.refs_path, refs.model_dump_json(indent=2).encode() + b"\n",
                           mode=PRIVATE_FILE_MODE)
        self._refs = refs

    def write(self, fields: dict[str, Any]) -> Manifest:
        """Write the manifest of a new checkpoint on ``fields["branch"]`` and return it.

        ``fields`` are the checkpoint's own; the sequence number, parent, nonce and id are
        added here.  The parent is the branch's newest checkpoint, or (first on its branch)
        the current one.
        """
        manifests = self.loaded()
        newest, branch_tips = self.newest()
        branch = fields["branch"]
        tip = branch_tips.get(branch)
        fields = {
            "format": MANIFEST_FORMAT,
            "sequence": (newest.sequence if newest is not None else -1) + 1,
            **fields,
            "parent": tip.id if tip is not None else self.head(),
            "nonce": secrets.token_hex(8),
        }
        fields["id"] = manifest_id(fields)
        manifest = Manifest.model_validate(fields)
        body = json.dumps(manifest.model_dump(), indent=2, ensure_ascii=True).encode() + b"\n"
        atomic_write_bytes(self.manifests_dir / f"{manifest.id}.json", body,
                           mode=PRIVATE_FILE_MODE)
        manifests[manifest.id] = manifest
        branch_tips[branch] = manifest
        self._tips = (manifest, branch_tips)
        return manifest

    def remove(self, removed: Iterable[Manifest]) -> None:
        """Delete these checkpoints' manifests (pruned)."""
        removed = list(removed)
        for manifest in removed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.manifests_dir / f"{manifest.id}.json")
            del self.loaded()[manifest.id]
        if removed:
            fsync_dir(self.manifests_dir)
            self._tips = None
