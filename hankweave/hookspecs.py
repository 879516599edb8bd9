"""Hook specifications: every way a plugin can extend hankweave.

A plugin is a module (or an object) with functions marked ``@hankweave.hookimpl`` whose names
are hooks below.  An installed distribution exposes it under the ``hankweave`` entry-point
group::

    [project.entry-points.hankweave]
    jsonl = "hankweave_sink_jsonl"

Two kinds of hook, and only these, so that pluggy stays off the runtime's hot paths:

**Registration hooks** (``register_*``) are called once, when something first asks the
registry for that kind of object.  Each receives a ``register`` callback that the plugin calls
once per object it contributes.  The kernel owns what the callback does with it: it checks the
base class and the name, refuses duplicate names (naming both plugins), and remembers which
plugin registered what.  The runtime then calls the registered objects directly.

**The decision hook** (``select_harness``) is ``firstresult``: plugins are asked in turn and
the first answer that is not None wins.  A plugin declines by returning None.  The kernel's
own rule is implemented with ``trylast=True``, so every plugin is asked before it.

An implementation may accept any subset of a hook's arguments, by name; arguments added to a
spec later do not break existing plugins.  pluggy does not isolate plugins: an exception raised
in a hook implementation propagates to the caller, which is why registration is all the hooks
do at run time.  Hook call order is the reverse of registration order unless ``tryfirst`` or
``trylast`` says otherwise.  Documentation and an example for each hook:
``docs/plugin-hooks.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from hankweave.checkpoints import CheckpointStore
    from hankweave.events.sink import EventSink
    from hankweave.harness import Harness
    from hankweave.models import ModelEntry, ProviderEntry
    from hankweave.proxy.types import ProxyMiddleware
    from hankweave.sentinel import SentinelKind, SentinelTrigger

PROJECT_NAME = "hankweave"
"""The pluggy project name, which is also the entry-point group plugins are listed under."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marker for hook specifications (used in this module only)."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marker plugins put on their hook implementations: ``@hankweave.hookimpl``."""


# ----- registration hooks -----


@hookspec
def register_harnesses(register: Callable[[type[Harness]], None]) -> None:
    """Register harness classes: the agents that run codons.

    Called once per plugin manager, the first time the runtime or a command needs the
    installed harnesses (to select one for a codon, or to list them).

    :param register: call ``register(HarnessClass)`` once per harness.  The class must be a
        concrete subclass of :class:`hankweave.harness.Harness` with a non-empty ``name``;
        it is registered under that name.  Registering a name another plugin also registers
        is an error naming both plugins.

    The return value is ignored.  The runtime then builds one instance per codon attempt
    (extensions included) with the harness's validated ``harnesses.<name>`` settings, iterates
    ``run_codon(request, context)`` per pass and awaits ``aclose()`` once (``docs/harnesses.md``).
    Implemented by the harness distributions
    (``hankweave-harness-claude`` registers ``claude``, ``hankweave-harness-pi`` registers
    ``pi``) and by test plugins registering fakes.
    """


@hookspec
def register_checkpoint_backends(register: Callable[[type[CheckpointStore]], None]) -> None:
    """Register checkpoint store classes: the ways a workspace can be snapshotted.

    Called once per plugin manager, the first time a checkpoint backend is looked up.  The
    runtime then uses the backend named by the ``checkpoints.backend`` setting; selection is
    by name, never by install order.

    :param register: call ``register(StoreClass)`` once per backend.  The class must be a
        concrete subclass of :class:`hankweave.checkpoints.CheckpointStore` with a non-empty
        ``name``.  Duplicate names are an error naming both plugins.

    The return value is ignored.  Implemented by backend distributions such as
    ``hankweave-checkpoint-git`` (backend ``git``).
    """


@hookspec
def register_event_sinks(register: Callable[[type[EventSink]], None]) -> None:
    """Register event sink classes: consumers of the execution's event stream.

    Called once per plugin manager, when a run builds its sinks or a command lists them.  A run
    builds only the sinks settings enable (``events.sinks``: name and ``config``, validated by
    the sink's ``Config``), before the execution directory is touched, and feeds each every
    event from a worker thread of its own through a bounded queue; a sink that raises is
    detached and reported, the others go on.

    :param register: call ``register(SinkClass)`` once per sink.  The class must be a
        concrete subclass of :class:`hankweave.events.sink.EventSink` with a non-empty ``name``.
        Duplicate names are an error naming both plugins.

    The return value is ignored.  Implemented by sink distributions (see the
    ``hankweave-sink-jsonl`` example in ``docs/writing-plugins.md``).
    """


@hookspec
def register_proxy_middleware(register: Callable[[type[ProxyMiddleware]], None]) -> None:
    """Register LLM proxy middleware classes: code that sees every agent request on its way
    to the provider (``--proxy``, docs/proxy.md).

    Called once per plugin manager, when a run that uses the proxy builds its middleware or a
    command lists them.  A run builds only the middleware settings enable
    (``proxy.middleware``: name and ``config``, validated by the class's ``Config``), once,
    before the execution directory is touched, and calls them in that order for every request:
    ``on_request`` (change the request, or answer it), ``on_response`` (change the status and
    headers before the body streams through) and ``on_complete`` (what was recorded).

    :param register: call ``register(MiddlewareClass)`` once per middleware.  The class must be
        a concrete subclass of :class:`hankweave.proxy.types.ProxyMiddleware` with a non-empty
        ``name``.  Duplicate names are an error naming both plugins.

    The return value is ignored.  Implemented by middleware distributions (the
    ``hankweave-proxy-headers`` example adds configured headers to every request).
    """


@hookspec
def register_sentinel_triggers(register: Callable[[type[SentinelTrigger]], None]) -> None:
    """Register sentinel trigger types: the rules that decide when a sentinel fires.

    Called once per plugin manager, when a sentinel config is loaded (``hankweave validate``, a
    codon's start).  A config's ``trigger.type`` selects the class by name, and the class's
    ``Config`` (a :class:`~hankweave.sentinel.TriggerConfig`) validates the ``trigger`` object.
    The runtime builds one instance per loaded sentinel as ``TriggerClass(config)`` with the
    validated model (a problem the model finds, or a ``ValueError`` of the constructor, is a
    load failure that names the sentinel) and feeds it every event sentinels observe
    (server-state and agentic-backbone events) through
    :meth:`~hankweave.sentinel.SentinelTrigger.observe`.

    :param register: call ``register(TriggerClass)`` once per trigger type.  The class must
        be a concrete subclass of :class:`hankweave.sentinel.SentinelTrigger` whose ``name`` is
        the ``trigger.type`` value it implements.  Duplicate names are an error naming both
        plugins, the built-in ``event`` and ``sequence`` included.

    The return value is ignored.  The kernel's ``event`` and ``sequence`` types are registered
    by its default plugin ``hankweave.default_plugins.sentinels``.
    """


@hookspec
def register_sentinel_kinds(register: Callable[[type[SentinelKind]], None]) -> None:
    """Register sentinel kinds: what runs when a sentinel fires.

    Called once per plugin manager, when a sentinel config is loaded.  A config's ``kind``
    (default ``llm``, the built-in LLM call) selects the class by name, and its ``options``
    are validated by the class's ``Options`` model.  The runtime builds one instance per
    loaded sentinel as ``KindClass(setup)`` and awaits ``fire(firing)`` for each trigger, one
    at a time; outputs, events, state and failure counting stay the runtime's
    (``hankweave/sentinel.py``; ``docs/sentinels.md``, "Sentinel kinds").

    :param register: call ``register(KindClass)`` once per kind, a concrete subclass of
        :class:`hankweave.sentinel.SentinelKind` with a non-empty ``name``.  Duplicate names
        (``llm`` included) are an error naming both plugins.

    The return value is ignored.  The kernel's ``llm`` kind is registered by its default
    plugin ``hankweave.default_plugins.sentinels``.  Example:
    ``plugins/hankweave-sentinel-command``.
    """


@hookspec
def register_models(register: Callable[[ModelEntry | ProviderEntry], None]) -> None:
    """Register model catalogue entries: models, their aliases and prices, and provider routing.

    Called once per plugin manager, the first time a model name is resolved (validating a
    hank, selecting a harness, pricing usage) or the catalogue is listed.

    :param register: call ``register(entry)`` once per entry, where ``entry`` is a
        :class:`hankweave.models.ModelEntry` (one provider's model, with aliases such as
        ``haiku``, context and output limits, prices per million tokens and an optional
        harness override) or a :class:`hankweave.models.ProviderEntry` (which harness runs a
        provider's models, and which distribution provides it).  A second entry with the same
        ``provider/model`` id, alias or provider id is an error naming both plugins.

    The return value is ignored.  The kernel's built-in catalogue registers the models of the
    providers hankweave routes and the routing of the original (Anthropic and
    Anthropic-on-Bedrock models to the ``claude`` harness, every other provider to ``pi``);
    catalogue plugins add more.  The built-in entries are the fallback: a plugin's entry with
    the same id, alias or provider id replaces the built-in one (the Claude harness registers
    the Anthropic models of its own release this way), and only two plugins' entries clash.
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands to the ``hankweave`` command line.

    Called once, when the ``hankweave`` console script starts and before it parses its
    arguments.  Commands should import heavy libraries inside the command function, so that
    ``hankweave --help`` stays fast.

    :param cli: the root click group.  Add commands with ``@cli.command()`` or
        ``cli.add_command(...)``.  A command whose name is already taken (by the kernel or
        another plugin) is an error naming both.

    The return value is ignored.  Implemented by plugins that ship their own tooling, for
    example a checkpoint backend's maintenance commands.
    """


# ----- decision hooks -----


@hookspec(firstresult=True)
def select_harness(
    model: ModelEntry,
    provider: ProviderEntry | None,
    harnesses: Mapping[str, type[Harness]],
) -> str | None:
    """Choose the harness that runs a codon; return its registered name, or None to decline.

    Called each time a codon attempt is about to start, after its model name has been
    resolved against the catalogue.  Selection happens this late, never stored, so resumed
    executions pick up routing changes (as in the original).

    :param model: the codon's resolved catalogue entry (real ``provider_id`` and
        ``model_id``, and ``harness_override`` if the model forces a harness).
    :param provider: the catalogue's routing entry that applies to this model (its
        provider's own entry when its ``model_pattern`` matches, else the ``"*"`` entry), or
        None when the catalogue has neither.
    :param harnesses: the installed harness classes by name.  Only these can run the codon.

    Stops at the first non-None result.  The caller checks that the name is one of
    ``harnesses`` and raises :class:`hankweave.harness.HarnessNotInstalledError` when it is
    not.  The kernel's default (``trylast``) applies the original's rule: a model's
    ``harness_override`` wins, then the provider entry's harness; when that harness is not
    installed it raises ``HarnessNotInstalledError`` naming the package to install.
    Implement this hook to route some models elsewhere (for example, every model to a replay
    harness); return None for the models you leave to the others.
    """
