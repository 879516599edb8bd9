"""The runtime's side of the LLM proxy (docs/proxy.md): which codon's agent is running, whether
its ceilings let a request go, and where what an answer used is counted.

Codons run one at a time, so a request belongs to the attempt running when it arrives.  The
attempt decides (:meth:`~hankweave.runtime.codon_runner.CodonRunner.admit_request`): past a
ceiling the request is refused and the attempt stops at it, as at an agent's message past it;
at a ceiling that asks, the request waits for the person's answer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hankweave.proxy.types import Admission

if TYPE_CHECKING:
    from hankweave.runtime.codon_runner import CodonRunner


class ProxyGate:
    """Implements :class:`hankweave.proxy.types.Gate` for one runtime."""

    def __init__(self) -> None:
        self._runner: CodonRunner | None = None

    def attach(self, runner: CodonRunner) -> None:
        """``runner``'s attempt starts: the requests that come now are its agent's."""
        self._runner = runner

    def detach(self, runner: CodonRunner) -> None:
        if self._runner is runner:
            self._runner = None

    def current_codon(self) -> str | None:
        return self._runner.codon_id if self._runner is not None else None

    async def admit(self) -> Admission:
        runner = self._runner
        if runner is None:
            return Admission()  # between codons (a rig command's call): nothing to count
        began = time.monotonic()
        refusal = await runner.admit_request()
        return Admission(codon_id=runner.codon_id, refusal=refusal,
                         held_s=time.monotonic() - began if runner.budget else 0.0,
                         charge=runner.metered)
