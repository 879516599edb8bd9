"""The harness interface: what runs one codon's agent.

A harness takes a codon's prompt, model and workspace, drives an LLM agent there, and streams
the agent's messages back as codon-log records.  Harnesses are plugins
(``register_harnesses``); the kernel picks one per codon with the ``select_harness`` decision
hook and then calls it directly.  The kernel ships none: ``claude`` comes from
``hankweave-harness-claude``, ``pi`` from ``hankweave-harness-pi``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from hankweave.models import ModelEntry


class HarnessSelectionError(LookupError):
    """No harness can be chosen for a codon's model."""


class HarnessNotInstalledError(HarnessSelectionError):
    """A codon's model needs a harness that no installed plugin provides."""


@dataclass(frozen=True)
class CodonRequest:
    """Everything a harness needs to run one codon attempt."""

    prompt: str
    """The user prompt, fully assembled (files read, templates expanded)."""
    system_prompt: str | None
    """The system prompt to append to the harness's own, or None."""
    model: ModelEntry
    """The codon's resolved catalogue entry (real provider and model ids, limits, prices)."""
    work_dir: Path
    """The codon's workspace (the execution's ``agentRoot/``); the agent's tools stay inside."""
    session_id_to_resume: str | None = None
    """The agent session to continue (``continue-previous`` codons), or None for a fresh one."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment for the agent process: the runtime has already filtered and merged it."""
    codon_id: str = ""
    """The codon's runtime id (``review#1``), for logs and scripted harnesses."""
    run_id: str = ""
    """The run the attempt belongs to."""


class Harness(abc.ABC):
    """Runs codons with one kind of agent.

    Subclasses set :attr:`name` and :attr:`package` and implement :meth:`run_codon`; a plugin
    registers the class (not an instance) from ``register_harnesses``.  The runtime creates
    one instance per codon attempt, with no arguments.
    """

    name: ClassVar[str]
    """The name routing and settings use (``claude``, ``pi``); unique among installed harnesses."""

    package: ClassVar[str]
    """The distribution that ships this harness (``hankweave-harness-claude``), for messages."""

    @abc.abstractmethod
    async def run_codon(self, request: CodonRequest) -> AsyncIterator[dict[str, Any]]:
        """Run the agent for ``request`` and yield its codon-log records as they happen.

        Every record is one JSON object in the Claude-Agent-SDK message shape, which the
        runtime appends to the codon's log unchanged: first a ``system``/``init`` record
        carrying the ``session_id``, then ``assistant`` messages (with ``usage``) and ``user``
        tool results, and last one ``result`` record with ``total_cost_usd`` and ``usage``.
        Provider and tool failures are reported as records (an error ``result``), not raised;
        raising means the harness itself is broken.  The runtime cancels the iteration to
        stop a codon; the harness then ends its agent process before returning.
        """
        # The unreachable yield makes this an async generator, the same type as the
        # implementations, so overriding it type-checks.
        return
        yield


REPLAY_HARNESS = "replay"
"""The registered name of the harness that plays recordings (``hankweave-replay``)."""


@dataclass
class Recording:
    """A recorded execution opened for replay: what a run needs to play it back.

    Produced by :meth:`RecordingHarness.open_recording`; the kernel runs the recording's hank
    in a new execution directory with :attr:`harness` playing every codon.
    """

    hank_path: Path
    """The recorded hank file (inside the recording, or as discovered from its metadata)."""
    data_path: Path | None
    """The data source to link into the new execution (None: an empty one is used)."""
    harness: type[Harness]
    """The harness class that plays this recording's codons."""
    logs: Mapping[str, Path] = field(default_factory=dict)
    """Recorded codon logs by runtime codon id."""
    warnings: list[str] = field(default_factory=list)
    """Things the user should know (torn lines, unknown records, a missing data snapshot)."""

    def missing_logs(self, codon_ids: Sequence[str]) -> list[str]:
        """The planned codons without a recorded log (a loop id falls back to its base id)."""
        return [cid for cid in codon_ids
                if cid not in self.logs and cid.split("#", 1)[0] not in self.logs]

    def close(self) -> None:
        """Remove whatever opening the recording unpacked."""


class RecordingHarness(Harness):
    """A harness that plays recordings; the one registered as ``replay`` subclasses this."""

    @classmethod
    @abc.abstractmethod
    def open_recording(cls, source: Path, *, speed: str = "instant",
                       max_delay_ms: int | None = None) -> Recording:
        """Open a recorded execution directory or an exported recording file.

        ``speed`` is ``instant`` or ``recorded`` (the recorded gaps between records, each
        capped at ``max_delay_ms``).  Raises ``ValueError`` with a clear message when
        ``source`` is not a recording.
        """
