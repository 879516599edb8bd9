"""The kernel's sentinel triggers and kind, registered through the hooks any plugin uses.

The ``event`` and ``sequence`` trigger types (those of the sentinel config format) and the
``llm`` kind (the kind of a config that names none).  Registered here rather than wired into
the config loader, their names are the registry's like any plugin's: a plugin that registers
one of them is an error naming both plugins.

The classes are imported when the registry collects them (a sentinel config loads), not when
hankweave starts; the ``llm`` kind imports litellm only at its first call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hankweave.hookspecs import hookimpl

if TYPE_CHECKING:
    from hankweave.sentinel import SentinelKind, SentinelTrigger


@hookimpl
def register_sentinel_triggers(register: Callable[[type[SentinelTrigger]], None]) -> None:
    from hankweave.sentinels.triggers import EventTriggerType, SequenceTriggerType

    register(EventTriggerType)
    register(SequenceTriggerType)


@hookimpl
def register_sentinel_kinds(register: Callable[[type[SentinelKind]], None]) -> None:
    from hankweave.sentinels.llm import LlmSentinel

    register(LlmSentinel)
