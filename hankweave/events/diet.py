"""The journal diet (Hankweave 0.11): a finished execution's journal, compressed and restorable
byte for byte.

In ``.hankweave/events/`` a diet replaces ``events.jsonl`` with:

* ``events.jsonl.zst``: the journal (zstd, level 3) with each large file body moved out: in a
  ``file.updated`` event's ``data`` or a ``state.snapshot``'s ``data.recentFileAccess``, a
  ``content`` string of at least 4096 UTF-8 bytes becomes, at the same key position,
  ``"contentRef":{"sha256":…,"bytes":…,"encoding":"utf-8","ref":"cas"}``;
* ``cas/<sha[:2]>/<sha>.zst``: each body once (zstd, level 19), named by its sha256;
* ``journal.meta.json``: ``schemaVersion`` and ``dietVersion`` 1, ``totalEvents``, and the
  ``originalSha256`` and ``originalBytes`` of the journal, which a restore must give back.

A line is rewritten only when putting the body back (``JSON.stringify`` of the event, as the
original writes it) gives the line exactly; every other byte, torn last line included, is kept
as it is. The diet is checked from disk before the original is removed, and a journal that
changed meanwhile aborts it. Restoring writes ``events.jsonl`` again, verified against
``originalSha256``, and never over a different journal. The formats are Hankweave's, so a
journal dieted by either restores with the other.

Readers need not restore: :func:`open_journal_bytes` gives a dieted journal's bytes, and a
runtime that opens a dieted execution for writing restores it first (and prunes the pair).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from hankweave.bundle.canonical import js_number
from hankweave.faults import kill_point
from hankweave.fsutil import atomic_write_bytes, utc_now_iso

__all__ = ["DietError", "DietReport", "diet_journal", "is_dieted", "open_journal_bytes",
           "restore_journal"]

THRESHOLD_BYTES = 4096
POINTER = "events.jsonl.zst"
MANIFEST = "journal.meta.json"
CAS_DIR = "cas"
JOURNAL = "events.jsonl"
STORAGE_META = "events.meta.json"
_MAX_SAFE_INT = 2**53
_INDEX_KEY = re.compile(r"^(0|[1-9]\d*)$")


class DietError(Exception):
    """The diet or the restore cannot be done; nothing was lost (the message says why)."""


@dataclass(frozen=True)
class DietReport:
    dieted: bool
    total_events: int
    original_bytes: int
    original_sha256: str
    extracted_bodies: int = 0
    unique_bodies: int = 0
    dieted_bytes: int = 0


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_dieted(events_dir: Path) -> bool:
    """Only the diet pair is here: no ``events.jsonl``."""
    return (not (events_dir / JOURNAL).exists() and (events_dir / POINTER).is_file()
            and (events_dir / MANIFEST).is_file())


# ----- JavaScript's JSON.stringify (what the original's lines are) -----


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` for a value :func:`_parse` read (keys in their order)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value)
    if isinstance(value, list):
        return "[" + ",".join(js_stringify(v) for v in value) + "]"
    return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{js_stringify(v)}"
                          for k, v in value.items()) + "}"


class _NotPortable(ValueError):
    """A line JavaScript would not give back the same (index-like keys, huge integers)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if any(_INDEX_KEY.match(key) for key, _ in pairs):
        raise _NotPortable("JavaScript reorders integer-like keys")
    return dict(pairs)


def _int(text: str) -> int:
    value = int(text)
    if abs(value) >= _MAX_SAFE_INT:
        raise _NotPortable("JavaScript rounds this integer")
    return value


def _parse(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_pairs, parse_int=_int)


def _body_holder(event: Any) -> dict[str, Any] | None:
    """The object holding a body (``content``/``contentRef``) in a body-bearing event."""
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        return None
    if event.get("type") == "file.updated":
        return event["data"]
    if event.get("type") == "state.snapshot":
        holder = event["data"].get("recentFileAccess")
        return holder if isinstance(holder, dict) else None
    return None


def _renamed(holder: dict[str, Any], old: str, new: str, value: Any) -> dict[str, Any]:
    return {(new if key == old else key): (value if key == old else item)
            for key, item in holder.items()}


def _replace_holder(event: dict[str, Any], holder: dict[str, Any]) -> dict[str, Any]:
    if event.get("type") == "file.updated":
        return {**event, "data": holder}
    return {**event, "data": {**event["data"], "recentFileAccess": holder}}


def _pointer_line(line: bytes, threshold: int) -> tuple[bytes, str, bytes] | None:
    """(the pointer line, the body's sha, the body) when ``line`` can lose its body."""
    if len(line) < threshold:
        return None
    try:
        text = line.decode("utf-8")
        if text.encode("utf-8") != line:
            return None
        event = _parse(text)
    except (UnicodeDecodeError, ValueError):
        return None
    holder = _body_holder(event)
    if holder is None or not isinstance(holder.get("content"), str):
        return None
    try:
        body = holder["content"].encode("utf-8")
    except UnicodeEncodeError:
        return None
    if len(body) < threshold or js_stringify(event) != text:
        return None
    digest = _sha(body)
    ref = {"sha256": digest, "bytes": len(body), "encoding": "utf-8", "ref": "cas"}
    pointer = _replace_holder(event, _renamed(holder, "content", "contentRef", ref))
    return js_stringify(pointer).encode("utf-8"), digest, body


# ----- the content store -----


def _cas_path(events_dir: Path, digest: str) -> Path:
    return events_dir / CAS_DIR / digest[:2] / f"{digest}.zst"


def _decompress(data: bytes) -> bytes:
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
        return reader.read()


def _read_body(events_dir: Path, digest: str) -> bytes:
    import zstandard

    path = _cas_path(events_dir, digest)
    try:
        body = _decompress(path.read_bytes())
    except FileNotFoundError:
        raise DietError(f"journal restore: CAS body {digest} is missing ({path})") from None
    except zstandard.ZstdError as exc:
        raise DietError(f"journal restore: CAS body {digest} is corrupt on disk ({exc})"
                        ) from None
    actual = _sha(body)
    if actual != digest:
        raise DietError(f"journal restore: CAS body {digest} is corrupt on disk (content hashes"
                        f" to {actual})")
    return body


def _write_body(events_dir: Path, digest: str, body: bytes) -> None:
    import zstandard

    path = _cas_path(events_dir, digest)
    with contextlib.suppress(DietError):
        _read_body(events_dir, digest)
        return  # already stored, and sound
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_bytes(path, zstandard.ZstdCompressor(level=19).compress(body), mode=0o600)


def _rehydrated(events_dir: Path, part: bytes) -> bytes:
    """One line of the pointer journal as the original line."""
    if b'"cas"' not in part:
        return part
    try:
        event = _parse(part.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return part
    holder = _body_holder(event)
    ref = holder.get("contentRef") if holder is not None else None
    if not (isinstance(ref, dict) and ref.get("ref") == "cas" and isinstance(
            ref.get("sha256"), str)):
        return part
    assert holder is not None
    body = _read_body(events_dir, ref["sha256"]).decode("utf-8")
    restored = _replace_holder(event, _renamed(holder, "contentRef", "content", body))
    return js_stringify(restored).encode("utf-8")


def _logical_bytes(events_dir: Path) -> bytes:
    import zstandard

    try:
        pointer = _decompress((events_dir / POINTER).read_bytes())
    except zstandard.ZstdError as exc:
        raise DietError(f"journal restore: {events_dir / POINTER} is damaged ({exc})") from None
    parts = pointer.split(b"\n")
    rebuilt = [_rehydrated(events_dir, part) for part in parts[:-1]] + [parts[-1]]
    return b"\n".join(rebuilt)


def _manifest(events_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((events_dir / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None
    valid = (isinstance(data, dict) and data.get("schemaVersion") == 1
             and data.get("dietVersion") == 1
             and isinstance(data.get("totalEvents"), int) and data["totalEvents"] >= 0
             and isinstance(data.get("originalBytes"), int) and data["originalBytes"] >= 0
             and isinstance(data.get("originalSha256"), str)
             and re.fullmatch(r"[0-9a-f]{64}", data["originalSha256"]) is not None)
    return data if valid else None


# ----- diet, restore, read -----


_TEMP = re.compile(r"\.tmp(?:-(\d+))?$")


def _sweep(events_dir: Path) -> None:
    """Temp files a killed diet or restore left (their process is gone): never the journal,
    the pair or a stored body."""
    from hankweave.fsutil import pid_alive

    folders = [events_dir, *(events_dir / CAS_DIR).glob("*")]
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            match = _TEMP.search(path.name)
            ours = folder != events_dir or path.name.startswith((JOURNAL, MANIFEST))
            if match is None or not ours:
                continue
            pid = match.group(1)
            if pid is None or not pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    path.unlink()


def diet_journal(events_dir: Path, threshold: int = THRESHOLD_BYTES) -> DietReport:
    """Diet the journal in ``events_dir`` (the module docstring); the caller holds the
    execution's lock. A journal already dieted (and restorable) is left as it is."""
    import zstandard

    _sweep(events_dir)
    journal = events_dir / JOURNAL
    if not journal.exists():
        manifest = _manifest(events_dir)
        if manifest is None or not (events_dir / POINTER).is_file():
            raise DietError(f"no {JOURNAL} in {events_dir} and no finished diet either")
        try:
            restores = _sha(_logical_bytes(events_dir)) == manifest["originalSha256"]
        except DietError as exc:
            raise DietError(f"{events_dir} looks dieted but its files do not restore ({exc}):"
                            " the diet is damaged, not complete") from None
        if not restores:
            raise DietError(f"{events_dir} looks dieted but does not restore to its original:"
                            " the diet is damaged, not complete")
        return DietReport(False, manifest["totalEvents"], manifest["originalBytes"],
                          manifest["originalSha256"])
    original = journal.read_bytes()
    parts = original.split(b"\n")
    rewritten, bodies, extracted, events = [], {}, 0, 0
    for part in parts[:-1]:
        if part.strip():
            with contextlib.suppress(ValueError):
                json.loads(part)
                events += 1
        found = _pointer_line(part, threshold)
        if found is None:
            rewritten.append(part)
            continue
        pointer, digest, body = found
        rewritten.append(pointer)
        bodies[digest] = body
        extracted += 1
    rewritten.append(parts[-1])
    for digest, body in bodies.items():
        _write_body(events_dir, digest, body)
    kill_point("diet.bodies")
    pointer_bytes = zstandard.ZstdCompressor(level=3).compress(b"\n".join(rewritten))
    manifest = {"schemaVersion": 1, "dietVersion": 1, **_event_schema(events_dir),
                "totalEvents": events, "originalSha256": _sha(original),
                "originalBytes": len(original), "segments": [{"id": 0, "events": events}],
                "dietedAt": utc_now_iso()}
    manifest_bytes = json.dumps(manifest, separators=(",", ":")).encode()
    staged = events_dir / f"{POINTER}.tmp"
    atomic_write_bytes(staged, pointer_bytes, mode=0o600)
    try:
        rebuilt = b"\n".join(
            [_rehydrated(events_dir, p) for p in _decompress(staged.read_bytes()).split(b"\n")
             [:-1]] + [parts[-1]])
        if _sha(rebuilt) != _sha(original):
            raise DietError(f"journal diet: verification failed for {events_dir}; the original"
                            " is left as it was")
        if not journal.exists() or _sha(journal.read_bytes()) != _sha(original):
            raise DietError(f"journal diet: {journal} changed while the diet ran; the original"
                            " is left as it was")
        os.replace(staged, events_dir / POINTER)
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
    kill_point("diet.promoted")
    atomic_write_bytes(events_dir / MANIFEST, manifest_bytes, mode=0o600)
    kill_point("diet.unlinking")
    journal.unlink()
    with contextlib.suppress(FileNotFoundError):
        (events_dir / STORAGE_META).unlink()
    cas = sum(p.stat().st_size for p in (events_dir / CAS_DIR).rglob("*.zst")) if (
        events_dir / CAS_DIR).is_dir() else 0
    return DietReport(True, events, len(original), _sha(original), extracted, len(bodies),
                      len(pointer_bytes) + cas + len(manifest_bytes))


def _event_schema(events_dir: Path) -> dict[str, int]:
    with contextlib.suppress(OSError, ValueError):
        value = json.loads((events_dir / STORAGE_META).read_bytes()).get("eventSchemaVersion")
        if isinstance(value, int) and not isinstance(value, bool):
            return {"eventSchemaVersion": value}
    return {}


def restore_journal(events_dir: Path) -> tuple[bool, int, str]:
    """Write ``events.jsonl`` back from the diet, verified: (restored now, bytes, sha256).
    The diet pair and the CAS are kept (a restore is a view; a runtime that boots on the
    directory prunes the pair)."""
    _sweep(events_dir)
    manifest = _manifest(events_dir)
    if manifest is None:
        raise DietError(f"journal restore: {events_dir} has no valid {MANIFEST}: not a dieted"
                        " execution")
    expected = manifest["originalSha256"]
    journal = events_dir / JOURNAL
    if journal.exists():
        current = journal.read_bytes()
        if _sha(current) == expected:
            return False, len(current), expected
        raise DietError(f"journal restore: {journal} already exists and is not the dieted"
                        f" original ({_sha(current)[:12]} vs {expected[:12]}); not overwriting it")
    data = _logical_bytes(events_dir)
    if _sha(data) != expected:
        raise DietError(f"journal restore: the diet in {events_dir} restores to {_sha(data)[:12]},"
                        f" not the original {expected[:12]}: its files are damaged")
    staged = events_dir / f"{JOURNAL}.tmp-{os.getpid()}"
    atomic_write_bytes(staged, data, mode=0o600)
    try:
        os.link(staged, journal)  # never over a journal that appeared meanwhile
        kill_point("restore.linked")
    except FileExistsError:
        if _sha(journal.read_bytes()) != expected:
            raise DietError(f"journal restore: {journal} appeared while restoring and is not"
                            " the dieted original; not overwriting it") from None
    finally:
        staged.unlink()
    return True, len(data), expected


def prune_diet_pair(events_dir: Path) -> None:
    """After a verified restore: remove the pair (the CAS stays for a later diet)."""
    for name in (POINTER, MANIFEST):
        with contextlib.suppress(FileNotFoundError):
            (events_dir / name).unlink()


def open_journal_bytes(path: Path) -> BinaryIO:
    """The journal at ``path`` for reading: the file, or a dieted journal's restored bytes."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        if not is_dieted(path.parent):
            raise
    return io.BytesIO(_logical_bytes(path.parent))
