"""The stored result of an execution (Agency's ``Execution.result``): what its last run ended
with, written to ``.hankweave/result.json`` when a run ends (unless it ends waiting for a
person, or crashes: a resume follows), read into the execution document and ``inspect``.

It summarises; the state, the journal and the workspace keep everything.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes

RESULT_TEXT_LIMIT = 2000
"""The longest final text kept (characters); the codon log has all of it."""


class _Result(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True, use_attribute_docstrings=True)


class ResultOutput(_Result):
    path: str
    """Relative to ``agentRoot/``, ``/``-separated."""
    bytes: int
    sha256: str


class ResultCodons(_Result):
    completed: int = 0
    failed: int = 0
    skipped: int = 0


class ExecutionResult(_Result):
    """``.hankweave/result.json``."""

    status: str
    """The run's status: ``completed``, ``failed``, ``cancelled`` or ``timeout``."""
    run_id: str
    user: str | None = None
    finished_at: str
    codons: ResultCodons
    """The execution thread's codons by their newest status."""
    cost: float
    input_tokens: int
    output_tokens: int
    duration_ms: int
    """From the execution's first run's start (a fork's: its own first run's) to this run's
    end."""
    outputs: list[ResultOutput]
    """The files the codons' ``outputFiles`` name, as they are in ``agentRoot/`` now."""
    final_text: str | None = None
    """The last completed codon's final answer (at most :data:`RESULT_TEXT_LIMIT`
    characters)."""
    failure: str | None = None
    """The newest failed codon and its reason, when the run did not complete."""


def write_result(path: Path, result: ExecutionResult) -> None:
    atomic_write_bytes(path, result.model_dump_json(indent=2).encode("utf-8"),
                       mode=PRIVATE_FILE_MODE)


def read_result(path: Path) -> ExecutionResult | None:
    """The stored result; None when there is none yet, or it cannot be read (the state still
    has everything it summarises)."""
    try:
        return ExecutionResult.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ValidationError):
        return None
