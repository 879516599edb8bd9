"""A plugin module for ``tests/test_sentinel_validate.py``: the sentinel kind ``counting``.

Loaded with ``HANKWEAVE_PLUGIN_MODULES=tests.sentinel_kind_plugin``.  Its options model is what
``hankweave validate`` checks a config's ``options`` against; it never calls a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import Field

from hankweave.api import (
    SentinelAnswer,
    SentinelFiring,
    SentinelKind,
    SentinelOptions,
    hookimpl,
)


class CountingOptions(SentinelOptions):
    """``options`` of a ``counting`` sentinel (camelCase, unknown keys rejected)."""

    label: str
    """What the count is of: ``"3 edits"``."""
    every: Annotated[int, Field(ge=1)] = 1
    """Report every n-th firing only."""
    unit: Literal["events", "batches"] = "events"


class CountingSentinel(SentinelKind):
    """Writes how many events fired it."""

    name = "counting"
    Options = CountingOptions

    async def fire(self, firing: SentinelFiring) -> SentinelAnswer | None:
        options: CountingOptions = self.setup.options  # type: ignore[assignment]
        if firing.number % options.every:
            return None
        count = len(firing.events) if options.unit == "events" else 1
        return SentinelAnswer(f"{count} {options.label}")


@hookimpl
def register_sentinel_kinds(register: Callable[[type[SentinelKind]], None]) -> None:
    register(CountingSentinel)
