"""The conversation a conversational sentinel keeps across its triggers, one file per codon run.

A conversational sentinel sends ``[system, ...history, user]`` to its model (docs/sentinels.md).
The history lives in ``<exec>/.hankweave/sentinels/history/<sentinelId>-codon-<codonId>.json``,
so each codon instance (``review#2`` apart from ``review#1``) starts its own conversation, and a
restarted runtime picks up where the last acknowledged turn left it: every turn rewrites the file
atomically (:func:`~hankweave.fsutil.atomic_write_bytes`).

The file is Hankweave 0.10.0's format, a JSON array of
``{"message": {"role": "user" | "assistant", "content": str}, "tokens"?: int}``.  Reading it is
forgiving within limits: a few broken entries are dropped, but a file that is not a JSON array,
or whose entries are more than 20% broken, is cleared and reported as corruption so the caller
can raise the sentinel's ``corruption`` error.

Pure and synchronous: no clock, no event bus; the caller decides what an error means.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes, private_dir
from hankweave.sentinels.config import MaxTokensTrimming, MaxTurnsTrimming

__all__ = [
    "INVALID_ENTRIES_LIMIT",
    "ConversationHistory",
    "HistoryEntry",
    "HistoryMessage",
    "estimate_tokens",
    "file_name_part",
    "history_path",
    "read_history",
    "trim",
]

INVALID_ENTRIES_LIMIT = 0.2
"""Share of invalid entries above which a history file is cleared instead of repaired."""

_UNSAFE_IN_FILE_NAMES = str.maketrans({"/": "_", "\\": "_", "\0": "_"})


class HistoryMessage(BaseModel):
    """One message of the conversation, as the model API takes it."""

    # Strict: a number where text belongs is a broken entry, not something to coerce.
    model_config = ConfigDict(strict=True, extra="ignore")

    role: Literal["user", "assistant"]
    content: str


class HistoryEntry(BaseModel):
    """One element of the history file: a message and, when the provider reported it, its size."""

    model_config = ConfigDict(strict=True, extra="ignore")

    message: HistoryMessage
    tokens: Annotated[int, Field(ge=0)] | None = None
    """Tokens the provider counted for this message; ``None`` when it reported nothing."""

    @property
    def token_count(self) -> int:
        """The counted tokens, or the estimate from the content when none were reported."""
        return self.tokens if self.tokens is not None else estimate_tokens(self.message.content)


def estimate_tokens(content: str) -> int:
    """The original's estimate for a message without a reported count: a token per 4 characters."""
    return math.ceil(len(content) / 4)


def file_name_part(text: str) -> str:
    """`text` made safe as part of one file name: path separators (and NUL) become ``_``.

    Everything else is kept (``review#2`` stays ``review#2``), so names stay readable.  A part
    cannot climb out of its directory once it has no separator: ``..`` alone is never a whole
    file name here, because callers always add a prefix or a suffix.
    """
    if not text:
        raise ValueError("an id used in a file name cannot be empty")
    return text.translate(_UNSAFE_IN_FILE_NAMES)


def history_path(history_dir: Path, sentinel_id: str, codon_id: str) -> Path:
    """The history file of `sentinel_id` in the codon run `codon_id` (its runtime id).

    Raises:
        ValueError: an id is empty, or the name would leave `history_dir` (it never should,
            once separators are replaced; the check keeps that a guarantee).
    """
    name = f"{file_name_part(sentinel_id)}-codon-{file_name_part(codon_id)}.json"
    path = history_dir / name
    if path.parent != history_dir:
        raise ValueError(f"history file name {name!r} would leave {history_dir}")
    return path


Strategy = MaxTurnsTrimming | MaxTokensTrimming


class ConversationHistory:
    """The history of one sentinel in one codon run, trimmed by its strategy.

    The file is read on first use (:meth:`load`, or implicitly by the other methods), so a
    sentinel that never fires never reads it.  Trimming applies before each call and to what is
    written back, so the file never holds more than the strategy allows.
    """

    def __init__(self, path: Path, strategy: Strategy) -> None:
        self.path = path
        self.strategy = strategy
        self.corruption: str | None = None
        """What was wrong with the file when it was loaded (it was then cleared), or ``None``."""
        self._entries: list[HistoryEntry] | None = None

    @property
    def loaded(self) -> bool:
        return self._entries is not None

    @property
    def entries(self) -> list[HistoryEntry]:
        """The current entries (a copy), loading the file if needed."""
        return list(self._load())

    def load(self) -> str | None:
        """Read the file if not yet read; return :attr:`corruption`.

        A missing file is an empty history.  A corrupt one is cleared in memory (the next
        :meth:`record_turn` replaces the file) and described, so the caller can raise its
        ``corruption`` error; later calls return the same description without reading again.

        Raises:
            OSError: the file exists but cannot be read.
        """
        self._load()
        return self.corruption

    def messages_for_call(self) -> list[dict[str, str]]:
        """The trimmed history to send between the system message and the new user message."""
        entries = self._load()
        entries[:] = trim(entries, self.strategy)
        return [{"role": entry.message.role, "content": entry.message.content} for entry in entries]

    def record_turn(
        self,
        user_content: str,
        assistant_content: str | dict[str, Any] | list[Any],
        user_tokens: int | None,
        assistant_tokens: int | None,
    ) -> None:
        """Append one exchange, trim, and durably rewrite the file.

        A structured answer is stored as its JSON text, as the original does, so every message
        content is a string the model API accepts.

        Raises:
            OSError: the file could not be written (the history in memory already holds the turn).
        """
        if not isinstance(assistant_content, str):
            # Compact, as JavaScript's JSON.stringify writes it.
            assistant_content = json.dumps(assistant_content, ensure_ascii=False,
                                           separators=(",", ":"))
        entries = self._load()
        entries.append(_entry("user", user_content, user_tokens))
        entries.append(_entry("assistant", assistant_content, assistant_tokens))
        entries[:] = trim(entries, self.strategy)
        self._save(entries)

    def _load(self) -> list[HistoryEntry]:
        if self._entries is None:
            self._entries, self.corruption = read_history(self.path)
        return self._entries

    def _save(self, entries: Sequence[HistoryEntry]) -> None:
        document = [entry.model_dump(exclude_none=True) for entry in entries]
        data = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
        private_dir(self.path.parent)  # .hankweave/sentinels/: docs/state.md "File modes"
        atomic_write_bytes(self.path, data.encode("utf-8"), mode=PRIVATE_FILE_MODE)


def _entry(role: Literal["user", "assistant"], content: str, tokens: int | None) -> HistoryEntry:
    return HistoryEntry(message=HistoryMessage(role=role, content=content), tokens=tokens)


def read_history(path: Path) -> tuple[list[HistoryEntry], str | None]:
    """The valid entries of a history file and what was corrupt about it (``None`` if nothing).

    Invalid entries are dropped while they are at most :data:`INVALID_ENTRIES_LIMIT` of the
    whole; beyond that the rest cannot be trusted either, and the history starts empty.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], None
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        return [], f"history file {path} is not valid JSON ({exc}); the history was cleared"
    if not isinstance(document, list):
        kind = type(document).__name__
        return [], f"history file {path} is not a JSON array (found {kind}); the history was cleared"
    entries = list(_valid_entries(document))
    invalid = len(document) - len(entries)
    if invalid > INVALID_ENTRIES_LIMIT * len(document):
        return [], (
            f"history file {path}: {invalid} of {len(document)} entries are invalid (more than "
            f"{INVALID_ENTRIES_LIMIT:.0%}); the history was cleared")
    return entries, None


def _valid_entries(document: list[object]) -> Iterator[HistoryEntry]:
    for raw in document:
        try:
            yield HistoryEntry.model_validate(raw)
        except ValidationError:
            continue


def trim(entries: Sequence[HistoryEntry], strategy: Strategy) -> list[HistoryEntry]:
    """`entries` without the oldest ones the strategy does not keep."""
    if isinstance(strategy, MaxTurnsTrimming):
        return _trim_turns(entries, strategy.max_turns)
    return _trim_tokens(entries, strategy.max_tokens)


def _trim_turns(entries: Sequence[HistoryEntry], max_turns: int) -> list[HistoryEntry]:
    """Keep the newest `max_turns` user/assistant pairs.

    Whole pairs go, oldest first, so the conversation still starts with a user message; a
    message at the front that is not the user half of a pair (left by a dropped invalid entry)
    goes first, whatever the count, since it belongs to no turn.
    """
    kept = list(entries)
    pairs = _pair_count(kept)
    while kept:
        if not _pair_at(kept, 0):
            del kept[0]
        elif pairs > max_turns:
            del kept[:2]
            pairs -= 1
        else:
            break
    return kept


def _pair_at(entries: Sequence[HistoryEntry], index: int) -> bool:
    return (
        index + 1 < len(entries)
        and entries[index].message.role == "user"
        and entries[index + 1].message.role == "assistant"
    )


def _pair_count(entries: Sequence[HistoryEntry]) -> int:
    count, index = 0, 0
    while index < len(entries):
        if _pair_at(entries, index):
            count, index = count + 1, index + 2
        else:
            index += 1
    return count


def _trim_tokens(entries: Sequence[HistoryEntry], max_tokens: int) -> list[HistoryEntry]:
    """Drop the oldest messages, one at a time, until the total is at or under `max_tokens`."""
    total = sum(entry.token_count for entry in entries)
    start = 0
    while start < len(entries) and total > max_tokens:
        total -= entries[start].token_count
        start += 1
    return list(entries[start:])
