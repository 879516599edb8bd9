"""``hank.lock``: what a bundle holds, and the hash that names it (Hankweave 0.12, lock v1).

```
{"bundleHash": "<sha256>", "codonInputs": {"<codon key>": "<sha256>"},
 "files": {"<path>": {"mode": "644" | "755", "sha256": "<sha256>"}},
 "ignoreDefaults": "<sha256>", "name": "...", "runtime": {"min": "0.12.0"}, "v": 1,
 "version": "..."}
```

written as canonical JSON (:mod:`hankweave.bundle.canonical`) and a newline. Only ``v``,
``files`` and ``runtime`` are the bundle's identity: ``bundleHash`` is the sha256 of
``hankweave-bundle-v1\\0`` and their canonical JSON, so the lock names its own bundle without
hashing archive bytes. ``name``, ``version`` and ``codonInputs`` are derived from the files (so
a reader recomputes them rather than trusting them); ``ignoreDefaults`` fingerprints the
default ignore rules the bundle was packed under. A lock with any other key is refused: inside
``v: 1`` an unknown key means a newer or a damaged lock, and guessing is not safe.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hankweave.bundle.canonical import canonical_json

__all__ = [
    "BUNDLE_HASH_PREFIX",
    "COMPATIBLE_RUNTIME",
    "HankLock",
    "LockError",
    "LockedFile",
    "bundle_hash",
    "parse_lock",
    "serialize_lock",
    "sha256_hex",
]

BUNDLE_HASH_PREFIX = "hankweave-bundle-v1\0"
COMPATIBLE_RUNTIME = "0.12.0"
"""The Hankweave release whose hank format this runtime implements: a bundle's ``runtime.min``
defaults to it, and a bundle that needs a later one is refused."""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")

Sha256 = Annotated[str, Field(pattern=_SHA256.pattern)]


class LockError(ValueError):
    """A ``hank.lock`` that cannot be used."""


def sha256_hex(data: bytes | memoryview | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class LockedFile(_Strict):
    """One member: its mode (the executable bit changes what a copied script does) and hash."""

    mode: Literal["644", "755"]
    sha256: Sha256


class LockedRuntime(_Strict):
    min: str

    @field_validator("min")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not SEMVER.match(value):
            raise ValueError(f"{value!r} is not a SemVer version (like 0.12.0)")
        return value


class HankLock(_Strict):
    """The content of ``hank.lock`` (see the module docstring)."""

    v: Literal[1]
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    bundle_hash: Sha256 = Field(alias="bundleHash")
    files: dict[str, LockedFile]
    codon_inputs: dict[str, Sha256] = Field(alias="codonInputs")
    runtime: LockedRuntime
    ignore_defaults: Sha256 = Field(alias="ignoreDefaults")

    def as_json(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, mode="json")


def bundle_hash(files: dict[str, LockedFile], runtime_min: str) -> str:
    """The identity of a bundle: its files (paths, modes, hashes) and the runtime it needs."""
    identity = {"v": 1, "files": {path: entry.model_dump() for path, entry in files.items()},
                "runtime": {"min": runtime_min}}
    return sha256_hex(BUNDLE_HASH_PREFIX + canonical_json(identity))


def serialize_lock(lock: HankLock) -> bytes:
    """The lock's file content: canonical JSON and one newline."""
    return (canonical_json(lock.as_json()) + "\n").encode("utf-8")


def parse_lock(data: bytes, where: str, *, max_files: int | None = None) -> HankLock:
    """The lock in ``data`` (``where``: what to call it in messages).

    Raises:
        LockError: not JSON, not a v1 lock, or its ``bundleHash`` is not the hash of its files.
    """
    import json

    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise LockError(f"{where} is not JSON: {exc}") from None
    if isinstance(raw, dict) and raw.get("v") not in (1, None):
        raise LockError(f"{where} is lock format v{raw.get('v')}; this hankweave reads v1")
    files = raw.get("files") if isinstance(raw, dict) else None
    if max_files is not None and isinstance(files, dict) and len(files) > max_files:
        raise LockError(f"{where} lists {len(files)} files; a bundle holds at most {max_files}")
    try:
        lock = HankLock.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors(include_url=False))
        raise LockError(f"{where} is not a valid hank.lock: {problems}") from None
    expected = bundle_hash(lock.files, lock.runtime.min)
    if expected != lock.bundle_hash:
        raise LockError(f"{where}: bundleHash {lock.bundle_hash[:12]}… is not the hash of the"
                        f" files it lists ({expected[:12]}…); the lock was edited or damaged")
    return lock


def version_tuple(version: str) -> tuple[int, int, int]:
    match = SEMVER.match(version)
    if not match:
        raise LockError(f"{version!r} is not a SemVer version")
    return int(match.group(1)), int(match.group(2)), int(match.group(3))
