"""The sentinel contract: what decides when a sentinel fires, and what runs when it does.

A sentinel watches a codon's events and reports what it finds (``docs/sentinels.md``).  Two
kinds of plugin class make one up, both registered through hooks and then called directly by
the runtime, never through pluggy, so that a failing one is isolated and an event costs one
method call:

* a :class:`SentinelTrigger` (``register_sentinel_triggers``) turns the event stream into the
  batches that fire the sentinel; a config selects it with ``trigger.type`` and configures it
  with the rest of the ``trigger`` object, validated by the trigger's
  :attr:`~SentinelTrigger.Config` (a :class:`TriggerConfig`);
* a :class:`SentinelKind` (``register_sentinel_kinds``) handles each firing; a config selects
  it with ``kind`` and configures it with ``options``, validated by the kind's
  :attr:`~SentinelKind.Options` (a :class:`SentinelOptions`).

Both settings models derive from :class:`~hankweave.plugin_config.PluginConfig`, the base of
every plugin class's settings.

The kernel's own are registered the same way, by the built-in plugin
``hankweave.default_plugins.sentinels``: the ``event`` and ``sequence`` triggers and the
``llm`` kind.  A plugin that registers one of their names is an error naming both plugins.

One sentinel of one codon attempt, as the runtime drives it:

1. when the codon's config loads (and in ``hankweave validate``), the trigger's ``Config``
   validates the ``trigger`` object and the trigger is built once with it (its constructor's
   own checks), the kind's ``Options`` validate the config's ``options`` and
   :meth:`SentinelKind.check` checks what it names;
2. when the attempt starts, the runtime builds the trigger, ``TriggerClass(config)`` with the
   validated ``trigger`` object, and one kind instance, ``KindClass(setup)`` with a
   :class:`SentinelSetup` (the validated options and what the run provides);
3. each event the sentinel may see goes to :meth:`SentinelTrigger.observe`; the batches it
   returns are grouped by the config's execution strategy and queued;
4. each queued trigger is handed to :meth:`SentinelKind.fire` as a :class:`SentinelFiring`,
   one at a time; a :class:`SentinelAnswer` is written to the sentinel's outputs, a
   :class:`SentinelError` is reported and counted (too many in a row unload it);
5. when the codon completes (or a fatal error unloads it), :meth:`SentinelKind.aclose` is
   awaited once.

Triggering, batching, queueing, outputs, events, state and failure counting are the runtime's.
An event here is the JSON object the journal stores (``type``, ``timestamp``, ``data``, ...),
as a read-only mapping.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from hankweave.plugin_config import PluginConfig

if TYPE_CHECKING:
    from hankweave.models import ModelEntry


# ----- triggers: when a sentinel fires -----


class TriggerConfig(PluginConfig):
    """Base of a trigger type's settings model (:attr:`SentinelTrigger.Config`): the sentinel's
    ``trigger`` object, ``type`` included; strict, immutable, camelCase.

    A subclass adds the trigger's own keys, each with a default.  A ``ValueError`` one of its
    validators raises is shown to users as its text (name the key in it); pydantic's own
    findings (an unknown key, a wrong type) are shown at their key.
    """

    type: str
    """The ``trigger.type`` that selected the class: its registered name."""


class SentinelTrigger(abc.ABC):
    """Decides, event by event, when a sentinel fires.

    A trigger type is named by the ``type`` key of a sentinel's ``trigger`` configuration
    (the built-in ones are ``event`` and ``sequence``); the whole object is validated by
    :attr:`Config` when the config loads.  The runtime creates one instance per loaded
    sentinel, ``TriggerClass(config)`` with the validated model, and feeds it every event the
    sentinel may see.
    """

    name: ClassVar[str]
    """The ``trigger.type`` value this class implements; unique among installed triggers."""

    Config: ClassVar[type[TriggerConfig]] = TriggerConfig
    """The strict model of the ``trigger`` object (default: takes nothing but ``type``)."""

    def __init__(self, config: TriggerConfig | None = None) -> None:
        """Keep the validated ``trigger`` object (default: ``Config`` with only ``type``).

        A subclass may check here what its model cannot and raise :class:`ValueError` naming
        the bad key: the runtime reports it as a sentinel load failure, as it does a problem
        :attr:`Config` finds.
        """
        self.config = config if config is not None else self.Config(type=self.name)

    @abc.abstractmethod
    def observe(self, event: Mapping[str, object]) -> Sequence[Mapping[str, Any]] | None:
        """Take one event; return the batch of events that fires the sentinel now, or None.

        An ``event`` trigger returns ``[event]`` when the event matches; a ``sequence``
        trigger returns the events that completed its pattern.  (The batch is events this
        trigger was given; the runtime reads their ``type``, ``data`` and ``timestamp``.)
        """


# ----- kinds: what runs when a sentinel fires -----


class SentinelOptions(PluginConfig):
    """Base of a sentinel kind's options model (:attr:`SentinelKind.Options`): strict, camelCase,
    validated from the sentinel config's ``options`` when the config loads."""


class SentinelDefinition(Protocol):
    """A validated sentinel config as every kind may read it.

    The kernel's model is :class:`hankweave.sentinels.config.SentinelConfig`, which has more
    (prompts, LLM parameters, ...) for the built-in ``llm`` kind; a plugin kind keeps its own
    settings in :attr:`options`.
    """

    @property
    def id(self) -> str:
        """The sentinel's id (lower-case letters, digits and hyphens)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str | None: ...

    @property
    def model(self) -> str | None:
        """The ``<provider>/<model>`` the config names, if any."""

    @property
    def options(self) -> Mapping[str, Any] | None:
        """The ``options`` as written (:attr:`SentinelSetup.options` has them validated)."""


@dataclass(frozen=True)
class SentinelSetup:
    """What a sentinel kind is built with, once per loaded sentinel (one codon attempt)."""

    sentinel_id: str
    name: str
    description: str | None
    codon_id: str
    """The runtime codon id (``review#2`` in a loop)."""
    run_id: str
    config: SentinelDefinition
    """The validated sentinel config."""
    options: SentinelOptions
    """The config's ``options``, validated by the kind's :attr:`SentinelKind.Options`."""
    config_directory: Path
    """Where the config's own relative paths resolve from."""
    execution_dir: Path
    agent_root: Path
    """The agent's workspace: the files the codon works on."""
    state_dir: Path
    """The execution's ``.hankweave/sentinels/`` (``history/``, ``outputs/``); a plugin kind
    keeps its own files in a sub-directory named after it."""
    env: Mapping[str, str]
    """The runtime's environment (credentials, a mock provider's variables)."""
    codon_start_time: str
    """When the codon attempt started (ISO 8601)."""
    model_entry: ModelEntry | None = None
    """The catalogue's entry of the config's ``model`` (its prices), when it has one."""


@dataclass(frozen=True)
class SentinelFiring:
    """One trigger of a sentinel: the events that fired it."""

    number: int
    """1 for the sentinel's first trigger, then 2, ..."""
    events: Sequence[Mapping[str, object]]
    """The events as the journal has them (``type``, ``timestamp``, ``data``, ...)."""
    strategy: str
    """The config's execution strategy (``immediate``, ``debounce``, ``count``, ``timeWindow``)."""
    queued_at: datetime
    """When the trigger was queued: the prompt's ``world.currentTime``."""


@dataclass(frozen=True)
class SentinelAnswer:
    """What one firing found: written to the sentinel's outputs and its ``sentinel.output``."""

    content: str | dict[str, Any] | list[Any]
    """Text, or a JSON value when :attr:`structured`."""
    structured: bool = False
    """A JSON value (one JSONL line) rather than text."""
    cost: float = 0.0
    """Dollars this firing spent (an LLM call's price; 0 for a local command)."""
    input_tokens: int = 0
    output_tokens: int = 0
    llm_call: bool = False
    """The firing called an LLM (counted in the sentinel's ``llmCallCount``)."""


FatalType = Literal["template", "configuration", "corruption", "resource"]


ErrorType = Literal["llm-call-failed", "template-render-failed", "file-write-failed",
                    "sentinel-failed"]
ERROR_TYPES: tuple[str, ...] = ("llm-call-failed", "template-render-failed",
                                "file-write-failed", "sentinel-failed")


class SentinelError(Exception):
    """A firing failed: reported as ``sentinel.error`` and counted as a consecutive failure.

    A sentinel is unloaded after ``errorHandling.maxConsecutiveFailures`` of them in a row
    (conversational sentinels are not; see ``docs/sentinels.md``).  ``error_type`` is the
    event's: ``llm-call-failed`` when the firing reached an LLM (``llm_call``), else
    ``sentinel-failed``, unless given (``template-render-failed``, ``file-write-failed``).
    """

    retriable: bool = True

    def __init__(self, message: str, *, error_type: str | None = None,
                 retriable: bool | None = None, llm_call: bool = False,
                 cost: float = 0.0) -> None:
        super().__init__(message)
        self.cost = cost
        """What the failed firing spent anyway (an answer that did not fit its schema)."""
        if error_type is not None and error_type not in ERROR_TYPES:
            raise ValueError(f"unknown sentinel error type {error_type!r} (one of"
                             f" {', '.join(ERROR_TYPES)})")
        chosen = error_type or ("llm-call-failed" if llm_call else "sentinel-failed")
        self.error_type: ErrorType = chosen  # type: ignore[assignment]  # checked above
        if retriable is not None:
            self.retriable = retriable
        self.llm_call = llm_call
        """The firing reached the LLM (counted in ``failedLLMCalls``)."""


class SentinelFatalError(SentinelError):
    """A failure the sentinel cannot recover from: ``template`` and ``configuration`` errors
    unload it at once, a ``corruption`` (its history) unless it continues on error, and any with
    ``should_unload``; a ``resource`` error is reported but never unloads."""

    retriable = False

    def __init__(self, message: str, fatal_type: FatalType, *, should_unload: bool = False,
                 error_type: str | None = None) -> None:
        super().__init__(message, error_type=error_type)
        self.fatal_type: FatalType = fatal_type
        self.should_unload = should_unload


class SentinelKind(abc.ABC):
    """What runs when a sentinel fires: the built-in ``llm`` kind asks a model; a plugin's kind
    may run a command, call a service, anything that turns events into findings.

    A sentinel config selects its kind with ``kind`` (default ``llm``) and gives the kind's
    settings as ``options``, validated by :attr:`Options` when the config loads (by ``hankweave
    validate`` too).  The runtime builds one instance per loaded sentinel, calls :meth:`fire`
    for its triggers one at a time, and :meth:`aclose` when the sentinel unloads (the steps
    are in the module docstring).
    """

    name: ClassVar[str]
    """The ``kind`` value configs use; unique among installed kinds."""

    Options: ClassVar[type[SentinelOptions]] = SentinelOptions
    """The strict model of the config's ``options`` (default: takes none)."""

    @classmethod  # noqa: B027 - optional: most kinds have nothing to check
    def check(cls, config: SentinelDefinition, directory: Path) -> None:
        """Raise :class:`ValueError` if ``config`` cannot run (an unreadable file it names, ...).

        Called when the config loads, by ``hankweave validate`` too, before any run; the
        options are already valid.  ``directory`` is where the config's paths resolve from.
        """

    def __init__(self, setup: SentinelSetup) -> None:
        """Prepare the sentinel; raise :class:`SentinelFatalError` (``configuration``) or
        :class:`ValueError` when it cannot run: it is then reported as not loaded."""
        self.setup = setup

    @property
    def model(self) -> str:
        """What ``sentinel.loaded`` and the sentinel's state show as its model."""
        return self.setup.config.model or self.name

    @abc.abstractmethod
    async def fire(self, firing: SentinelFiring) -> SentinelAnswer | None:
        """Handle one trigger; return what it found (None: nothing to write), or raise
        :class:`SentinelError`.  Runs on the runtime's event loop: do blocking work in a
        thread (``asyncio.to_thread``) or a subprocess."""

    async def aclose(self) -> None:  # noqa: B027 - optional, most kinds hold nothing
        """Release what the sentinel holds; called once when it unloads."""


__all__ = [
    "ERROR_TYPES",
    "ErrorType",
    "FatalType",
    "SentinelAnswer",
    "SentinelDefinition",
    "SentinelError",
    "SentinelFatalError",
    "SentinelFiring",
    "SentinelKind",
    "SentinelOptions",
    "SentinelSetup",
    "SentinelTrigger",
    "TriggerConfig",
]
