"""Where a sentinel writes its findings: the log of every answer and the file with the last one.

The codon entry's ``settings.outputPaths`` chooses the files (the config's own ``output`` is
accepted but not used, as in Hankweave 0.10.0).  Without a ``logFile`` the log goes to
``<exec>/.hankweave/sentinels/outputs/<id>/<id>-<codonId>-<epochms>.md`` (``.ndjson`` for
structured output); a name without ``/`` goes in that same directory, a path with ``/`` is taken
from the agent root, where the agent and the user look for files.  Every path must stay inside
the execution directory or the agent root, so a config cannot make a sentinel write elsewhere.

Each answer is appended and fsynced before the call counts as done, and the last-value file is
replaced atomically, so a reader (or the next boot after a kill) sees whole answers only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hankweave.config.hank import SentinelOutputPaths
from hankweave.faults import disk_write
from hankweave.fsutil import (
    PRIVATE_FILE_MODE,
    atomic_write_bytes,
    fsync_dir,
    open_private,
    private_dir,
    write_fully,
)
from hankweave.sentinels.history import file_name_part

__all__ = [
    "STRUCTURED_LAST_VALUE_SUFFIXES",
    "STRUCTURED_LOG_SUFFIXES",
    "SentinelOutputFiles",
    "default_log_name",
]

STRUCTURED_LOG_SUFFIXES = (".ndjson", ".jsonl")
"""What a structured sentinel's log file name must end with: one JSON value a line."""
STRUCTURED_LAST_VALUE_SUFFIXES = (".json",)

_LOG_SETTING = "outputPaths.logFile"
_LAST_VALUE_SETTING = "outputPaths.lastValueFile"


def default_log_name(sentinel_id: str, codon_id: str, epoch_ms: int, structured: bool) -> str:
    """``<id>-<codonId>-<epochms>.md`` (``.ndjson`` when structured): one log per sentinel load."""
    suffix = ".ndjson" if structured else ".md"
    return f"{file_name_part(sentinel_id)}-{file_name_part(codon_id)}-{epoch_ms}{suffix}"


@dataclass(frozen=True)
class SentinelOutputFiles:
    """The resolved output files of one sentinel in one codon run, and the writes to them."""

    log_file: Path
    """Every answer, appended: text joined by the join string, or one JSON line each."""
    last_value_file: Path | None
    """The latest answer alone, replaced each time; ``None`` when not configured."""
    structured: bool
    execution_dir: Path

    @classmethod
    def resolve(
        cls,
        *,
        sentinel_id: str,
        codon_id: str,
        epoch_ms: int,
        structured: bool,
        output_paths: SentinelOutputPaths | None,
        outputs_root: Path,
        execution_dir: Path,
        agent_root: Path,
    ) -> SentinelOutputFiles:
        """The files for `sentinel_id` loaded at `epoch_ms` in the codon run `codon_id`.

        `outputs_root` is ``<exec>/.hankweave/sentinels/outputs``.  An empty setting counts as
        absent, as in the original (which tests it for truthiness).

        Raises:
            ValueError: a configured path escapes the execution directory and the agent root,
                names a directory, has the wrong extension for structured output, or both
                settings name the same file.  The message names the setting and the path.
        """
        paths = output_paths or SentinelOutputPaths()
        own_dir = Path(os.path.abspath(outputs_root / file_name_part(sentinel_id)))
        roots = (Path(os.path.abspath(execution_dir)), Path(os.path.abspath(agent_root)))
        if paths.log_file:
            log_file = _configured(_LOG_SETTING, paths.log_file, own_dir, roots)
        else:
            log_file = own_dir / default_log_name(sentinel_id, codon_id, epoch_ms, structured)
        last_value_file = None
        if paths.last_value_file:
            last_value_file = _configured(_LAST_VALUE_SETTING, paths.last_value_file, own_dir, roots)
        if structured and paths.log_file:
            _check_suffix(_LOG_SETTING, paths.log_file, STRUCTURED_LOG_SUFFIXES)
        if structured and paths.last_value_file:
            _check_suffix(_LAST_VALUE_SETTING, paths.last_value_file, STRUCTURED_LAST_VALUE_SUFFIXES)
        if last_value_file == log_file:
            raise ValueError(
                f"{_LAST_VALUE_SETTING} {paths.last_value_file!r} is the same file as the log "
                f"({log_file}); the last value would overwrite the log")
        return cls(log_file, last_value_file, structured, roots[0])

    def create(self) -> None:
        """Create the directories and an empty log file (emptied if it exists), at load.

        The last-value file is left alone until the first answer replaces it.

        Raises:
            OSError: a directory or the log file cannot be created.
        """
        _make_parent(self.log_file, self._private(self.log_file))
        if self.last_value_file is not None:
            _make_parent(self.last_value_file, self._private(self.last_value_file))
        atomic_write_bytes(self.log_file, b"",
                           mode=PRIVATE_FILE_MODE if self._private(self.log_file) else None)

    def _private(self, path: Path) -> bool:
        """Whether ``path`` is in ``.hankweave/`` (0600 in 0700 folders, docs/state.md "File
        modes") rather than in the agent root, where the user's umask decides."""
        return Path(os.path.abspath(path)).is_relative_to(self.execution_dir / ".hankweave")

    def write_text(self, text: str, join_string: str) -> None:
        """Append ``join_string + text + "\\n"`` to the log; replace the last value with `text`.

        Raises:
            OSError: a write failed (the caller logs it; the answer still counts).
        """
        _append_durably(self.log_file, f"{join_string}{text}\n".encode(),
                        self._private(self.log_file))
        if self.last_value_file is not None:
            _replace(self.last_value_file, text, self._private(self.last_value_file))

    def write_structured(self, value: Any) -> None:
        """Append `value` as one compact JSON line; replace the last value with it, indented.

        Compact as JavaScript's ``JSON.stringify`` writes it, so a log matches the original's.

        Raises:
            OSError: a write failed.
            ValueError: `value` is not JSON (NaN or an infinity, say).
        """
        line = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        pretty = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False)
        _append_durably(self.log_file, f"{line}\n".encode(), self._private(self.log_file))
        if self.last_value_file is not None:
            _replace(self.last_value_file, pretty, self._private(self.last_value_file))

    def relative_to_execution(self, path: Path) -> str:
        """`path` relative to the execution directory, for events and state (absolute when it
        lies outside, in an agent root elsewhere)."""
        absolute = Path(os.path.abspath(path))
        if absolute.is_relative_to(self.execution_dir):
            return absolute.relative_to(self.execution_dir).as_posix()
        return str(absolute)



def _configured(setting: str, raw: str, own_dir: Path, roots: tuple[Path, ...]) -> Path:
    """A configured name or path, resolved and checked to stay inside one of `roots`."""
    if raw.endswith("/") or raw.rpartition("/")[2] in (".", ".."):
        raise ValueError(f"{setting} {raw!r} names a directory, not a file")
    execution_dir, agent_root = roots
    base = agent_root if "/" in raw else own_dir
    path = Path(os.path.abspath(os.path.join(base, raw)))
    if not any(path.is_relative_to(root) and path != root for root in roots):
        raise ValueError(
            f"{setting} {raw!r} resolves to {path}, outside the execution directory "
            f"({execution_dir}) and the agent root ({agent_root})")
    return path


def _check_suffix(setting: str, raw: str, suffixes: tuple[str, ...]) -> None:
    if not raw.endswith(suffixes):
        listed = " or ".join(suffixes)
        raise ValueError(
            f"{setting} {raw!r} must end with {listed} for a sentinel with structured output")


def _make_parent(path: Path, private: bool) -> None:
    if private:
        private_dir(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)


def _replace(path: Path, text: str, private: bool) -> None:
    _make_parent(path, private)
    atomic_write_bytes(path, text.encode(), mode=PRIVATE_FILE_MODE if private else None)


def _append_durably(path: Path, data: bytes, private: bool) -> None:
    """Append `data` and fsync it before returning: an acknowledged answer survives a crash.

    ``O_APPEND`` puts each write at the end, so a concurrent reader never sees a gap.
    """
    _make_parent(path, private)
    disk_write(path)
    created = not path.exists()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
    fd = open_private(path, flags) if private else os.open(path, flags | os.O_CREAT, 0o666)
    try:
        write_fully(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
