"""A plugin module for the sentinel tests: a trigger type and a sentinel kind, no LLM.

Loaded with ``HANKWEAVE_PLUGIN_MODULES=...,tests.sentinel_test_plugins``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import field_validator

from hankweave.api import (
    SentinelAnswer,
    SentinelError,
    SentinelFatalError,
    SentinelFiring,
    SentinelKind,
    SentinelOptions,
    SentinelTrigger,
    TriggerConfig,
    hookimpl,
)


class EveryNthConfig(TriggerConfig):
    n: int = 1
    """How many events make one batch."""
    of: str | None = None
    """The one event type counted (None: every type)."""

    @field_validator("n")
    @classmethod
    def _positive(cls, n: int) -> int:
        if n < 1:
            raise ValueError("n must be a positive integer")
        return n


class EveryNthTrigger(SentinelTrigger):
    """``{"type": "every-nth", "n": 3, "of": "state.transition"}``: the last n such events."""

    name = "every-nth"
    Config = EveryNthConfig
    config: EveryNthConfig

    def __init__(self, config: TriggerConfig | None = None) -> None:
        super().__init__(config)
        self.batch: list[Mapping[str, Any]] = []

    def observe(self, event: Mapping[str, Any]) -> Sequence[Mapping[str, Any]] | None:
        if self.config.of is not None and event.get("type") != self.config.of:
            return None
        self.batch.append(event)
        if len(self.batch) < self.config.n:
            return None
        batch, self.batch = self.batch, []
        return batch


class TallyOptions(SentinelOptions):
    label: str = "events"
    fail_first: int = 0
    """Fail this many firings first (to test failure counting)."""
    fail_with: str | None = None
    """The ``error_type`` the failures give (None: the default)."""
    fail_load: bool = False
    """Refuse to load, as a kind does when what it needs is missing at run time."""
    crash_load: bool = False
    """Raise something unexpected while loading (a kind's bug)."""


class TallySentinel(SentinelKind):
    """Writes how many events of which types fired it; costs a cent per firing."""

    name = "tally"
    Options = TallyOptions

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        if setup.options.crash_load:
            raise RuntimeError("the tally kind has a bug")
        if setup.options.fail_load:
            raise SentinelFatalError("the tally service is not available", "configuration")
        self.fired = 0

    async def fire(self, firing: SentinelFiring) -> SentinelAnswer:
        self.fired += 1
        options: TallyOptions = self.setup.options  # type: ignore[assignment]
        if self.fired <= options.fail_first:
            raise SentinelError(f"failure {self.fired} on purpose", error_type=options.fail_with)
        types = sorted({str(event["type"]) for event in firing.events})
        return SentinelAnswer(f"#{firing.number}: {len(firing.events)} {options.label}"
                              f" ({', '.join(types)})", cost=0.01)


@hookimpl
def register_sentinel_triggers(register: Callable[[type[SentinelTrigger]], None]) -> None:
    register(EveryNthTrigger)


@hookimpl
def register_sentinel_kinds(register: Callable[[type[SentinelKind]], None]) -> None:
    register(TallySentinel)
