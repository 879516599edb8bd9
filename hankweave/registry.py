"""A typed facade over the plugin hooks, so call sites never touch ``pm.hook`` directly.

Each ``register_*`` hook is called once per :class:`Registry`, the first time its kind of
object is asked for, and one plugin at a time: every plugin gets its own ``register``
callback, so each registered object is attributed to the plugin that registered it and a
duplicate name is reported with both plugins' names.
"""

from __future__ import annotations

import functools
import inspect
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, TypeVar

import pluggy

from hankweave.plugins import DEFAULT_PLUGINS

if TYPE_CHECKING:
    import click

    # The contracts load pydantic; the registry imports them when it collects, so that
    # installing plugin commands (every start, `--help` included) does not.
    from hankweave.checkpoints import CheckpointStore
    from hankweave.events.sink import EventSink
    from hankweave.harness import Harness
    from hankweave.models import ModelEntry, ProviderEntry, Resolution
    from hankweave.proxy.types import ProxyMiddleware
    from hankweave.sentinel import SentinelKind, SentinelTrigger

T = TypeVar("T")

Kind = Literal[
    "harness",
    "checkpoint backend",
    "event sink",
    "proxy middleware",
    "sentinel trigger",
    "sentinel kind",
    "model",
    "model alias",
    "provider",
]
"""What a registration is, as error messages and :meth:`Registry.registered_by` name it."""

_CLASS_KINDS = {
    "harness": "_harnesses",
    "checkpoint backend": "_checkpoint_backends",
    "event sink": "_event_sinks",
    "proxy middleware": "_proxy_middleware",
    "sentinel trigger": "_sentinel_triggers",
    "sentinel kind": "_sentinel_kinds",
}
_CATALOGUE_KINDS = {"model": "models", "model alias": "aliases", "provider": "providers"}

KERNEL = "hankweave"
"""The owner named for objects the kernel itself provides (its own CLI commands)."""


BUILTIN_CATALOGUE = "hankweave.default_plugins.model_catalogue"
"""The plugin name of the kernel's built-in model catalogue, whose entries plugins may replace."""

class RegistrationError(Exception):
    """A plugin registered something invalid (wrong type, missing name)."""


class DuplicateRegistrationError(RegistrationError):
    """Two registrations claim the same name."""


class _Collection(Generic[T]):
    """Registered objects by name, with the plugin that registered each."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.items: dict[str, T] = {}
        self.owners: dict[str, str] = {}
        self.defaults: set[str] = set()
        """Names registered as defaults, which another plugin's registration replaces."""

    def add(self, name: str, obj: T, plugin: str, *, default: bool = False) -> None:
        if name in self.defaults and not default:
            self.defaults.discard(name)
        elif name in self.items:
            owner = self.owners[name]
            if owner == plugin:
                raise DuplicateRegistrationError(
                    f'{self.kind} "{name}" is registered twice by {plugin}'
                )
            raise DuplicateRegistrationError(
                f'{self.kind} "{name}" is registered by both {owner} and {plugin}'
            )
        self.items[name] = obj
        self.owners[name] = plugin
        if default:
            self.defaults.add(name)

    def installed(self, *, include_builtin: bool) -> dict[str, T]:
        """The objects by name; those of the kernel's built-in plugins only if asked for."""
        if include_builtin:
            return dict(self.items)
        return {name: obj for name, obj in self.items.items()
                if self.owners[name] not in DEFAULT_PLUGINS}


class _Catalogue(NamedTuple):
    models: _Collection[ModelEntry]  # by lower-case provider/model id
    providers: _Collection[ProviderEntry]  # by lower-case provider id
    aliases: _Collection[ModelEntry]  # by lower-case alias


class Registry:
    """What the installed plugins provide, collected lazily from one plugin manager."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._command_groups: list[click.Group] = []
        self._resolutions: dict[str, Resolution] = {}

    # ----- registered classes -----

    def harnesses(self) -> dict[str, type[Harness]]:
        """Installed harness classes by name."""
        return dict(self._harnesses.items)

    def checkpoint_backends(self) -> dict[str, type[CheckpointStore]]:
        """Installed checkpoint store classes by name."""
        return dict(self._checkpoint_backends.items)

    def checkpoint_backend(self, name: str) -> type[CheckpointStore]:
        """The checkpoint store class called ``name``.

        Raises :class:`hankweave.checkpoints.BackendNotInstalledError` saying what is
        installed and which distribution provides ``name`` by convention.
        """
        from hankweave.checkpoints import BackendNotInstalledError

        backends = self._checkpoint_backends.items
        if name in backends:
            return backends[name]
        installed = ", ".join(sorted(backends)) or "none"
        raise BackendNotInstalledError(
            f'Checkpoint backend "{name}" is not installed (installed: {installed}); '
            f"install it with: pip install hankweave-checkpoint-{name}"
        )

    def event_sinks(self) -> dict[str, type[EventSink]]:
        """Installed event sink classes by name."""
        return dict(self._event_sinks.items)

    def proxy_middleware(self) -> dict[str, type[ProxyMiddleware]]:
        """Installed LLM proxy middleware classes by name."""
        return dict(self._proxy_middleware.items)

    def sentinel_triggers(self, *, include_builtin: bool = False
                          ) -> dict[str, type[SentinelTrigger]]:
        """Installed sentinel trigger classes by ``trigger.type`` name; the kernel's own
        (``event``, ``sequence``) only with ``include_builtin``.

        Raises :class:`DuplicateRegistrationError` when two plugins (a built-in one included)
        register the same name.
        """
        return self._sentinel_triggers.installed(include_builtin=include_builtin)

    def sentinel_kinds(self, *, include_builtin: bool = False) -> dict[str, type[SentinelKind]]:
        """Installed sentinel kind classes by ``kind`` name; the kernel's own (``llm``) only
        with ``include_builtin``.

        Raises :class:`DuplicateRegistrationError` when two plugins (a built-in one included)
        register the same name: a plugin cannot replace ``llm``.
        """
        return self._sentinel_kinds.installed(include_builtin=include_builtin)

    def registered_by(self, kind: Kind, name: str) -> str | None:
        """The plugin that registered ``name`` as a ``kind``, or None if none did.

        Model ids and aliases are looked up lower-case, as they are matched.
        """
        if kind in _CATALOGUE_KINDS:
            collection: _Collection[Any] = getattr(self._catalogue, _CATALOGUE_KINDS[kind])
            name = name.lower()
        else:
            collection = getattr(self, _CLASS_KINDS[kind])
        return collection.owners.get(name)

    # ----- models -----

    def models(self) -> dict[str, ModelEntry]:
        """Catalogue models by lower-case ``provider/model`` id."""
        return dict(self._catalogue.models.items)

    def providers(self) -> dict[str, ProviderEntry]:
        """Provider routing entries by (lower-case) provider id, ``"*"`` included."""
        return dict(self._catalogue.providers.items)

    def resolve_model(self, spec: str) -> ModelEntry:
        """The catalogue entry a hank's model name means (:meth:`resolve`'s model)."""
        return self.resolve(spec).model

    def resolve(self, spec: str) -> Resolution:
        """What a hank's model name means, and how it was found (docs/behaviour.md §4.2).

        After the original's rewrites (``opencode/``, ``openrouter/``, provider aliases), tried
        in order, case-insensitively: a ``provider/model`` id, an alias (``haiku``), a bare
        model id (under the provider its name suggests when several providers have it), the
        same under ``pi/`` (forced onto the pi harness); a reasoning variant (``gpt-5.2-high``,
        ``sonnet-xhigh``: the model its stem names, run at that effort); a ``pi/...`` route the
        catalogue does not know (a placeholder without price); last, the closest catalogue
        model (``gemini-flash``), as the original's fuzzy match scores it.  Raises
        :class:`hankweave.models.UnknownModelError` (naming the closest models) otherwise, and
        :class:`hankweave.models.ReasoningEffortError` for a variant of a model that does not
        reason.
        """
        found = self._resolutions.get(spec)
        if found is None:
            found = self._resolutions[spec] = self._resolve(spec)
        return found

    def _resolve(self, spec: str) -> Resolution:
        from hankweave.models import (
            Resolution,
            UnknownModelError,
            rewrite_model_spec,
            split_effort,
            with_effort,
        )

        canonical = rewrite_model_spec(spec)
        exact = self._exact(canonical)
        if exact is not None:
            return Resolution(spec=spec, model=exact)
        stem, effort = split_effort(canonical)
        if effort is not None:
            try:
                base = self._resolve(stem)
            except UnknownModelError as exc:
                raise type(exc)(f'"{spec}" is read as "{stem}" at reasoning effort {effort}:'
                                f" {exc}") from None
            return base.model_copy(update={
                "spec": spec, "requested_effort": effort,
                "model": with_effort(base.model, spec, effort)})
        placeholder = _pi_placeholder(canonical)
        if placeholder is not None:
            return Resolution(spec=spec, model=placeholder)
        return self._fuzzy(spec, canonical)

    def _exact(self, canonical: str) -> ModelEntry | None:
        """The model ``canonical`` names exactly, directly or as ``pi/<model>``; None if none."""
        from hankweave.models import PI_ROUTE

        head, _, rest = canonical.partition("/")
        if head.lower() == PI_ROUTE and rest:
            model = self._lookup(rest)
            return None if model is None else model.model_copy(
                update={"harness_override": PI_ROUTE})
        return self._lookup(canonical)

    def _lookup(self, spec: str) -> ModelEntry | None:
        """A catalogue model by ``provider/model`` id, alias or bare id; None if none.  Raises
        :class:`hankweave.models.UnknownModelError` for a bare id several providers share."""
        from hankweave.models import UnknownModelError, preferred_provider

        models, aliases = self._catalogue.models.items, self._catalogue.aliases.items
        key = spec.strip().lower()
        if key in models:
            return models[key]
        if key in aliases:
            return aliases[key]
        preferred = preferred_provider(key)
        if preferred is not None and f"{preferred}/{key}" in models:
            return models[f"{preferred}/{key}"]
        matches = [m for m in models.values() if m.model_id.lower() == key]
        if len(matches) > 1:
            ids = ", ".join(sorted(m.full_id for m in matches))
            raise UnknownModelError(f'Model "{spec}" is ambiguous ({ids}); name the provider')
        return matches[0] if matches else None

    def _fuzzy(self, spec: str, canonical: str) -> Resolution:
        """The closest catalogue model to ``canonical`` (of its provider, for a
        ``provider/name`` spelling of a catalogue provider)."""
        from hankweave.models import (
            FUZZY_THRESHOLD,
            SHORTCUTS,
            MatchKind,
            Resolution,
            UnknownModelError,
            closest_models,
            fuzzy_matches,
        )

        pool = list(self._catalogue.models.items.values())
        provider, slash, name = canonical.partition("/")
        if slash and name and any(m.provider_id.lower() == provider.lower() for m in pool):
            pool = [m for m in pool if m.provider_id.lower() == provider.lower()]
        else:
            name = canonical
        query = SHORTCUTS.get(name.lower(), name)
        ranked = fuzzy_matches(query, pool)
        if not ranked or ranked[0].score < FUZZY_THRESHOLD:
            near = ", ".join(m.full_id for m in closest_models(query, pool)) or "none"
            known = ", ".join(sorted(self._catalogue.aliases.items)) or "none"
            read = f' (read as "{canonical}")' if canonical != spec.strip() else ""
            raise UnknownModelError(
                f'Unknown model "{spec}"{read}: not a catalogue model id, provider/model id or'
                f" alias, and no catalogue model is close enough (closest: {near}; aliases:"
                f" {known})")
        best = ranked[0]
        also = [m.model.full_id for m in ranked[1:] if m.score >= best.score
                and m.preferred == best.preferred and m.family != best.family]
        return Resolution(spec=spec, model=best.model, match=MatchKind.FUZZY,
                          also_close=tuple(dict.fromkeys(also))[:3])

    def provider_for(self, model: ModelEntry) -> ProviderEntry | None:
        """The routing entry for ``model``: its provider's own if it applies, else ``"*"``."""
        from hankweave.models import ANY_PROVIDER

        providers = self._catalogue.providers.items
        own = providers.get(model.provider_id.lower())
        if own is not None and own.applies_to(model):
            return own
        return providers.get(ANY_PROVIDER)

    # ----- decisions and commands -----

    def select_harness(self, model: ModelEntry) -> type[Harness]:
        """The harness class that runs codons on ``model`` (the ``select_harness`` hook).

        Raises :class:`hankweave.harness.HarnessNotInstalledError` when the chosen harness is
        not installed, and :class:`HarnessSelectionError` when no plugin chose one.
        """
        from hankweave.harness import HarnessNotInstalledError, HarnessSelectionError

        installed = self._harnesses.items
        provider = self.provider_for(model)
        name = self.pm.hook.select_harness(
            model=model, provider=provider, harnesses=MappingProxyType(dict(installed))
        )
        if name is None:
            raise HarnessSelectionError(
                f"No harness selected for model {model.full_id}: no plugin chose one and the "
                f'model catalogue routes no harness for provider "{model.provider_id}"'
            )
        if name not in installed:
            available = ", ".join(sorted(installed)) or "none"
            raise HarnessNotInstalledError(
                f'Model {model.full_id} was routed to harness "{name}", which is not installed '
                f"(installed: {available}); install it with: pip install hankweave-harness-{name}"
            )
        return installed[name]

    def install_commands(self, cli: click.Group) -> None:
        """Let plugins add their commands to ``cli`` (once per group).

        Raises :class:`DuplicateRegistrationError` when a plugin's command takes a name the
        kernel or another plugin already uses.
        """
        if any(group is cli for group in self._command_groups):
            return
        self._command_groups.append(cli)
        owners = dict.fromkeys(cli.commands, KERNEL)
        for plugin in self._implementers("register_commands"):
            before = dict(cli.commands)
            self._call_one("register_commands", plugin, cli=cli)
            for name, command in cli.commands.items():
                if name not in before:
                    owners[name] = plugin
                elif before[name] is not command:
                    raise DuplicateRegistrationError(
                        f'command "{name}" is registered by both {owners[name]} and {plugin}'
                    )

    # ----- collection -----

    @functools.cached_property
    def _harnesses(self) -> _Collection[type[Harness]]:
        from hankweave.harness import Harness

        return self._collect_classes("register_harnesses", "harness", Harness)

    @functools.cached_property
    def _checkpoint_backends(self) -> _Collection[type[CheckpointStore]]:
        from hankweave.checkpoints import CheckpointStore

        return self._collect_classes(
            "register_checkpoint_backends", "checkpoint backend", CheckpointStore
        )

    @functools.cached_property
    def _event_sinks(self) -> _Collection[type[EventSink]]:
        from hankweave.events.sink import EventSink

        return self._collect_classes("register_event_sinks", "event sink", EventSink)

    @functools.cached_property
    def _proxy_middleware(self) -> _Collection[type[ProxyMiddleware]]:
        from hankweave.proxy.types import ProxyMiddleware

        return self._collect_classes("register_proxy_middleware", "proxy middleware",
                                     ProxyMiddleware)

    @functools.cached_property
    def _sentinel_triggers(self) -> _Collection[type[SentinelTrigger]]:
        from hankweave.sentinel import SentinelTrigger

        return self._collect_classes(
            "register_sentinel_triggers", "sentinel trigger", SentinelTrigger
        )

    @functools.cached_property
    def _sentinel_kinds(self) -> _Collection[type[SentinelKind]]:
        from hankweave.sentinel import SentinelKind

        return self._collect_classes("register_sentinel_kinds", "sentinel kind", SentinelKind)

    @functools.cached_property
    def _catalogue(self) -> _Catalogue:
        from hankweave.models import ModelEntry, ProviderEntry

        catalogue = _Catalogue(
            _Collection("model"), _Collection("provider"), _Collection("model alias")
        )
        models, providers, aliases = catalogue
        for plugin in self._implementers("register_models"):
            # The kernel's built-in catalogue is the fallback: a plugin's entry with the same
            # id, alias or provider replaces it (the Claude harness ships the Anthropic models
            # of its own release) instead of clashing with it.
            builtin = plugin == BUILTIN_CATALOGUE

            def register(entry: ModelEntry | ProviderEntry, _plugin: str = plugin,
                         _builtin: bool = builtin) -> None:
                if isinstance(entry, ModelEntry):
                    models.add(entry.full_id.lower(), entry, _plugin, default=_builtin)
                    for alias in entry.aliases:
                        aliases.add(alias.lower(), entry, _plugin, default=_builtin)
                elif isinstance(entry, ProviderEntry):
                    providers.add(entry.provider_id.lower(), entry, _plugin, default=_builtin)
                else:
                    raise RegistrationError(
                        f"plugin {_plugin} registered {entry!r} as a model catalogue entry, but "
                        f"it is neither a hankweave.models.ModelEntry nor a ProviderEntry"
                    )

            self._call_one("register_models", plugin, register=register)
        # A built-in alias whose model a plugin replaced names the replacement.
        for alias, entry in list(aliases.items.items()):
            current = models.items.get(entry.full_id.lower())
            if current is not None and current is not entry:
                aliases.items[alias] = current
        return catalogue

    # `base` is an abstract class, which mypy refuses for a `type[T]` parameter; the typed
    # cached properties above pin each collection's element type instead.
    def _collect_classes(self, hook_name: str, kind: Kind, base: type) -> _Collection[type[Any]]:
        collection: _Collection[type[Any]] = _Collection(kind)
        for plugin in self._implementers(hook_name):

            def register(cls: type[Any], _plugin: str = plugin) -> None:
                collection.add(_checked_name(cls, base, kind, _plugin), cls, _plugin)

            self._call_one(hook_name, plugin, register=register)
        return collection

    def _implementers(self, hook_name: str) -> list[str]:
        """Names of the plugins implementing ``hook_name``, in registration order.

        Registration order (built-ins first) rather than pluggy's reverse call order, so the
        first of two plugins claiming a name is the one named first.
        """
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        return list(dict.fromkeys(impl.plugin_name for impl in impls))

    def _call_one(self, hook_name: str, plugin: str, **kwargs: Any) -> None:
        # A subset caller still goes through pluggy (tracing, wrappers, argument checks) but
        # reaches only this plugin, so `register` knows whom it is called by.
        others = [
            impl.plugin
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls()
            if impl.plugin_name != plugin
        ]
        self.pm.subset_hook_caller(hook_name, remove_plugins=others)(**kwargs)


def _pi_placeholder(canonical: str) -> ModelEntry | None:
    """The placeholder a ``pi/<provider>/<model>`` or ``pi/<model>`` route to a model the
    catalogue does not know runs on (the provider guessed as the original does); None for any
    other spelling."""
    from hankweave.models import PI_ROUTE, pi_provider_for, placeholder_model

    head, _, rest = canonical.partition("/")
    if head.lower() != PI_ROUTE or not rest:
        return None
    provider, slash, model_id = rest.partition("/")
    if slash and model_id:
        return placeholder_model(provider, model_id)
    return placeholder_model(pi_provider_for(rest), rest)


def _checked_name(cls: object, base: type, kind: Kind, plugin: str) -> str:
    """``cls.name`` after checking that ``cls`` is a concrete, named subclass of ``base``."""
    base_path = f"{base.__module__}.{base.__qualname__}"
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise RegistrationError(
            f"plugin {plugin} registered {cls!r} as a {kind}, but it is not a subclass of "
            f"{base_path}"
        )
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise RegistrationError(
            f"plugin {plugin} registered {kind} class {cls.__qualname__}, which is abstract "
            f"(it does not implement {missing})"
        )
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise RegistrationError(
            f"plugin {plugin} registered {kind} class {cls.__qualname__} without a name "
            f"(set the class attribute `name`)"
        )
    return name


@functools.cache
def get_registry() -> Registry:
    """The command line's registry, over :func:`hankweave.plugins.get_plugin_manager`."""
    from hankweave.plugins import get_plugin_manager

    return Registry(get_plugin_manager())


@functools.cache
def builtin_registry() -> Registry:
    """A registry of the kernel's built-in plugins alone: no installed plugin, no switch.

    What hankweave provides whatever is installed (the ``llm`` sentinel kind, the ``event``
    and ``sequence`` triggers), for code that is handed only what plugins add.
    """
    from hankweave.plugins import make_plugin_manager

    return Registry(make_plugin_manager(load_entrypoints=False, env={}))


__all__ = [
    "DuplicateRegistrationError",
    "RegistrationError",
    "Registry",
    "builtin_registry",
    "get_registry",
]
