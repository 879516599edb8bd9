"""The runtime's side of the LLM proxy (docs/proxy.md): which codon's agent is running, whether
its ceilings let a request go, and where what an answer used is counted.

Codons run one at a time, so a request belongs to the attempt running when it arrives.  The
attempt decides (:meth:`~hankweave.runtime.codon_runner.CodonRunner.admit_request`): past a
ceiling the request is refused and the attempt ends at it, at a ceiling that asks the request
waits for the person's answer.  An answer is priced by the model the request named (a side
request on a smaller model costs what that model costs), else by the codon's model.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hankweave.codonlog import Price, catalogue_price
from hankweave.proxy.types import Admission

if TYPE_CHECKING:
    from hankweave.models import ModelEntry
    from hankweave.runtime.codon_runner import CodonRunner
    from hankweave.state.types import TokenUsage

WirePrices = Callable[[str | None], Price | None]
"""A request's model, as the wire names it, to its catalogue price (None: unknown)."""

_DATED = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def wire_prices(models: Mapping[str, ModelEntry]) -> WirePrices:
    """Prices by the model id a request names: exactly a catalogue model's id, a dated id
    (``claude-haiku-4-5-20251001``) as its undated one, a ``provider/model`` by its model;
    never a guess at the closest model."""
    by_id: dict[str, ModelEntry] = {}
    for entry in models.values():
        by_id.setdefault(entry.model_id.lower(), entry)

    @functools.cache
    def price(model: str | None) -> Price | None:
        if not model:
            return None
        name = model.lower().rsplit("/", 1)[-1]
        entry = by_id.get(name) or by_id.get(_DATED.sub("", name))
        return catalogue_price(entry) if entry is not None and entry.cost else None

    return price


class ProxyGate:
    """Implements :class:`hankweave.proxy.types.Gate` for one runtime."""

    def __init__(self, prices: WirePrices | None = None) -> None:
        self._runner: CodonRunner | None = None
        self._prices = prices or (lambda model: None)

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
        if runner is None:  # between codons (a rig command's call): priced, counted nowhere
            return Admission(charge=self._cost)
        began = time.monotonic()
        refusal = await runner.admit_request()

        def charge(usage: TokenUsage, model: str | None) -> float | None:
            return runner.metered(usage, self._cost(usage, model))

        return Admission(codon_id=runner.codon_id, refusal=refusal,
                         held_s=time.monotonic() - began, charge=charge)

    def _cost(self, usage: TokenUsage, model: str | None) -> float | None:
        price = self._prices(model)
        return price(usage) if price is not None else None
