"""Codon logs: one JSONL file per codon attempt, in the Claude Agent SDK message shape.

Every harness yields records of this shape and the runtime writes them through
:class:`CodonLogWriter`; everything the runtime learns about a session (its id, the assistant
messages, usage, the result, errors) comes from :class:`CodonLogParser`, live while the codon runs
and after the fact from the file (:func:`summarize_log`).  Replay reads the same files.

Record kinds: ``system`` (subtype ``init`` carries ``session_id``; ``compact_boundary`` marks an
automatic context compaction), ``assistant`` (``message.content`` blocks and ``message.usage``),
``user`` (``tool_result`` blocks) and a final ``result`` (``subtype``, ``is_error``,
``total_cost_usd``, ``usage``, ``num_turns``, ``duration_ms``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hankweave.fsutil import utc_now_iso
from hankweave.state.types import TokenUsage

SYNTHETIC_TIMEOUT_TEXT = "API Error: Request timed out."
_OUTPUT_MAX = re.compile(r"exceeded the .{0,40}output token maximum", re.IGNORECASE)
_INPUT_OVERFLOW = re.compile(r"prompt is too long|context_length_exceeded|context window",
                             re.IGNORECASE)

RecordKind = Literal["init", "system", "compact", "assistant", "user", "result", "unknown"]


def usage_from(raw: Mapping[str, Any] | None) -> TokenUsage | None:
    """The token usage of an SDK ``usage`` object, or None when the record carries none."""
    if not isinstance(raw, Mapping):
        return None

    def count(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0

    return TokenUsage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_creation_tokens=count("cache_creation_input_tokens"),
        cache_read_tokens=count("cache_read_input_tokens"),
    )


def content_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An assistant or user message's content as blocks (a plain string is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]


@dataclass(frozen=True)
class ParsedRecord:
    """What one log record means to the runtime."""

    kind: RecordKind
    record: dict[str, Any]
    session_id: str | None = None
    usage: TokenUsage | None = None
    blocks: tuple[dict[str, Any], ...] = ()
    synthetic_timeout: bool = False
    context_exceeded: bool = False


@dataclass
class CodonLogParser:
    """Derives a session's facts from its records, one record at a time."""

    session_id: str | None = None
    assistant_messages: int = 0
    usage_total: TokenUsage = field(default_factory=TokenUsage)
    messages_without_usage: int = 0
    result: dict[str, Any] | None = None
    synthetic_timeout: bool = False
    context_exceeded: bool = False
    unknown_records: int = 0

    def feed(self, record: Mapping[str, Any]) -> ParsedRecord:
        record = dict(record)
        kind = record.get("type")
        if kind == "system":
            return self._system(record)
        if kind == "assistant":
            return self._assistant(record)
        if kind == "user":
            message = record.get("message") if isinstance(record.get("message"), dict) else {}
            return ParsedRecord("user", record, blocks=tuple(content_blocks(message)))
        if kind == "result":
            return self._result(record)
        self.unknown_records += 1
        return ParsedRecord("unknown", record)

    def _system(self, record: dict[str, Any]) -> ParsedRecord:
        session = record.get("session_id") if isinstance(record.get("session_id"), str) else None
        if record.get("subtype") == "init" and session:
            if self.session_id is None:
                self.session_id = session
            return ParsedRecord("init", record, session_id=session)
        if record.get("subtype") == "compact_boundary":
            metadata = record.get("compact_metadata") or {}
            auto = isinstance(metadata, dict) and metadata.get("trigger") == "auto"
            self.context_exceeded = self.context_exceeded or auto
            return ParsedRecord("compact", record, session_id=session, context_exceeded=auto)
        return ParsedRecord("system", record, session_id=session)

    def _assistant(self, record: dict[str, Any]) -> ParsedRecord:
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        blocks = content_blocks(message)
        texts = _texts(blocks)
        synthetic = message.get("model") == "<synthetic>"
        timeout = SYNTHETIC_TIMEOUT_TEXT in texts
        exceeded = any(_OUTPUT_MAX.search(t) for t in texts) or (
            synthetic and texts == ["API Error: terminated"]
        )
        usage = usage_from(message.get("usage"))
        self.assistant_messages += 1
        if usage is None:
            self.messages_without_usage += 1
        else:
            self.usage_total = self.usage_total + usage
        self.synthetic_timeout = self.synthetic_timeout or timeout
        self.context_exceeded = self.context_exceeded or exceeded
        return ParsedRecord("assistant", record, usage=usage, blocks=tuple(blocks),
                            synthetic_timeout=timeout, context_exceeded=exceeded)

    def _result(self, record: dict[str, Any]) -> ParsedRecord:
        self.result = record
        text = error_text(record)
        exceeded = bool(text) and bool(_OUTPUT_MAX.search(text) or _INPUT_OVERFLOW.search(text))
        self.context_exceeded = self.context_exceeded or exceeded
        session = record.get("session_id") if isinstance(record.get("session_id"), str) else None
        return ParsedRecord("result", record, session_id=session, usage=usage_from(
            record.get("usage")), context_exceeded=exceeded)

    # -- derived facts --

    @property
    def result_received(self) -> bool:
        return self.result is not None

    @property
    def success(self) -> bool:
        """A result with subtype ``success`` that is not a disguised error."""
        return bool(self.result) and self.result.get("subtype") == "success" and not self.result.get(
            "is_error")

    @property
    def error_result_text(self) -> str | None:
        return error_text(self.result) if self.result is not None else None

    @property
    def usage_known(self) -> bool:
        """False when some assistant message carried no usage: totals are then a lower bound."""
        return self.messages_without_usage == 0


def is_success_result(record: Mapping[str, Any]) -> bool:
    return record.get("subtype") == "success" and not record.get("is_error")


def error_text(record: Mapping[str, Any] | None) -> str | None:
    """The error text of an error (or disguised-error) result, else None."""
    if record is None or is_success_result(record):
        return None
    for key in ("result", "error"):
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value
    errors = record.get("errors")
    if isinstance(errors, list) and errors:
        return "; ".join(str(e) for e in errors)
    return f"result {record.get('subtype', 'error')} without a message"


def final_cost_of(record: Mapping[str, Any]) -> float | None:
    value = record.get("total_cost_usd")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


# ----- files -----


class CodonLogWriter:
    """Appends records to a codon log, one JSON line each (survives a killed process)."""

    def __init__(self, path: Path, *, append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        self._fd: int | None = os.open(self.path, flags, 0o644)
        if append:
            os.lseek(self._fd, 0, os.SEEK_END)

    def write(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Write one record (stamped with ``timestamp`` if it has none) and return it."""
        if self._fd is None:
            raise ValueError(f"codon log {self.path} is closed")
        line = dict(record)
        line.setdefault("timestamp", utc_now_iso())
        data = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        os.write(self._fd, data.encode())
        return line

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


@dataclass
class LogReadReport:
    torn_tail: bool = False
    invalid_lines: list[int] = field(default_factory=list)


def read_log(path: Path, report: LogReadReport | None = None) -> Iterator[dict[str, Any]]:
    """The records of a codon log, skipping a torn last line and lines that are not objects."""
    report = report if report is not None else LogReadReport()
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1].strip():
        report.torn_tail = True
    for number, line in enumerate(lines[:-1], start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            report.invalid_lines.append(number)
            continue
        if isinstance(record, dict):
            yield record
        else:
            report.invalid_lines.append(number)


def summarize_log(path: Path) -> tuple[CodonLogParser, LogReadReport]:
    """Parse a whole codon log after the fact: the same facts the live parser derived."""
    parser = CodonLogParser()
    report = LogReadReport()
    for record in read_log(path, report):
        parser.feed(record)
    return parser, report


def log_file_name(codon_id: str) -> str:
    """``review#1`` → ``review-1-claude.log`` (the original's name for every harness)."""
    return f"{codon_id.replace('#', '-')}-claude.log"
