"""A sentinel kind for the replay tests: it writes one line per trigger, so a replay that ran
sentinels would show it.  Loaded through ``HANKWEAVE_PLUGIN_MODULES``."""

from __future__ import annotations

from collections.abc import Callable

from hankweave.api import SentinelAnswer, SentinelFiring, SentinelKind, hookimpl


class NoteSentinel(SentinelKind):
    name = "note"

    async def fire(self, firing: SentinelFiring) -> SentinelAnswer:
        return SentinelAnswer(f"trigger {firing.number}: {firing.events[0]['type']}")


@hookimpl
def register_sentinel_kinds(register: Callable[[type[SentinelKind]], None]) -> None:
    register(NoteSentinel)
