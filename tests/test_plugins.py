"""Plugin machinery: loading, switches, every hook, the registry facade, `hankweave plugins`.

Every hookspec has a `test_hook_<name>` test here (tests/test_plugin_hooks_documented.py
checks that).  Each test builds a fresh plugin manager; installed plugins are faked by
replacing `importlib.metadata.entry_points`.
"""

from __future__ import annotations

import asyncio
import builtins
import importlib.metadata
import json
import re
import subprocess
import sys
import types
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import hankweave
from hankweave.checkpoints import BackendNotInstalledError, Checkpoint, CheckpointStore
from hankweave.cli.plugins_cmd import install_plugin_commands, plugins_command
from hankweave.events import EventSink
from hankweave.harness import (
    AttemptContext,
    CodonRequest,
    Harness,
    HarnessNotInstalledError,
    HarnessSelectionError,
)
from hankweave.hookspecs import hookimpl
from hankweave.models import ModelCost, ModelEntry, ProviderEntry, UnknownModelError
from hankweave.plugins import (
    DEFAULT_PLUGINS,
    HankweavePluginManager,
    PluginLoadError,
    get_plugin_manager,
    list_plugins,
    make_plugin_manager,
)
from hankweave.registry import (
    DuplicateRegistrationError,
    RegistrationError,
    Registry,
    get_registry,
)
from hankweave.sentinel import SentinelAnswer, SentinelKind, SentinelOptions, SentinelTrigger
from hankweave.testing import attempt_context

PLUGIN_SWITCHES = (
    "HANKWEAVE_LOAD_PLUGINS",
    "HANKWEAVE_DISABLE_PLUGINS",
    "HANKWEAVE_STRICT_PLUGINS",
    "HANKWEAVE_TRACE_PLUGINS",
)


# ----- fakes: real subclasses of the kernel's base classes -----


class FakeHarness(Harness):
    """Streams a two-record codon log without running any agent."""

    name = "fake"
    package = "hankweave-testing"

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "system", "subtype": "init", "session_id": "s-1"}
        yield {"type": "result", "total_cost_usd": 0.0, "result": request.prompt}


class FakeClaude(FakeHarness):
    name = "claude"


class FakePi(FakeHarness):
    name = "pi"


class FakeReplay(FakeHarness):
    name = "replay"


class FakeStore(CheckpointStore):
    """Registered only, never run: each operation reports that it is not supported."""

    name = "memory"

    def initialize(self) -> str:
        return "initial"

    def create(self, **kwargs: Any) -> Checkpoint:
        raise NotImplementedError("FakeStore keeps no checkpoints")

    def list(self, **kwargs: Any) -> list[Checkpoint]:
        return []

    def resolve(self, id_or_prefix: str) -> Checkpoint:
        raise NotImplementedError("FakeStore keeps no checkpoints")

    def restore(self, checkpoint_id: str) -> None:
        raise NotImplementedError("FakeStore keeps no checkpoints")

    def changed_files(self, from_id: str, to_id: str) -> builtins.list[Any]:
        return []

    def prune(self, policy: Any) -> builtins.list[str]:
        return []


class GitLikeStore(FakeStore):
    name = "git"


class MemorySink(EventSink):
    name = "memory"

    def __init__(self) -> None:
        self.events: list[Mapping[str, Any]] = []

    def handle(self, event: Mapping[str, Any]) -> None:
        self.events.append(event)


class EveryEventTrigger(SentinelTrigger):
    name = "every-event"

    def observe(self, event: Mapping[str, Any]) -> Sequence[Mapping[str, Any]] | None:
        return [event]


def registering(hook: str, *objects: object) -> types.ModuleType:
    """A plugin module whose `hook` registers `objects`."""

    def impl(register: Callable[[Any], None]) -> None:
        for obj in objects:
            register(obj)

    module = types.ModuleType(f"plugin_{hook}")
    setattr(module, hook, hookimpl(impl))
    return module


def model(provider: str, model_id: str, **fields: Any) -> ModelEntry:
    return ModelEntry(
        provider_id=provider,
        model_id=model_id,
        name=model_id,
        context_limit=100_000,
        output_limit=8_000,
        **fields,
    )


class FakeDistribution:
    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version


class FakeEntryPoint:
    """An entry point of group `hankweave` whose load() returns `plugin` (or raises it)."""

    def __init__(
        self, name: str, plugin: object, dist: str = "hankweave-fake", version: str = "1.0"
    ) -> None:
        self.name = name
        self.group = "hankweave"
        self.value = f"fake_{name}"
        self.dist = FakeDistribution(dist, version)
        self._plugin = plugin

    def load(self) -> object:
        if isinstance(self._plugin, BaseException):
            raise self._plugin
        return self._plugin


# ----- fixtures -----


@pytest.fixture(autouse=True)
def no_plugin_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PLUGIN_SWITCHES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Replace the installed `hankweave` entry points with the given fakes."""

    def install(*entry_points: FakeEntryPoint) -> None:
        def fake_entry_points(**params: Any) -> list[FakeEntryPoint]:
            return list(entry_points) if params.get("group") == "hankweave" else []

        monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)

    return install


@pytest.fixture
def pm() -> HankweavePluginManager:
    return make_plugin_manager(load_entrypoints=False, env={})


@pytest.fixture
def registry(pm: HankweavePluginManager) -> Registry:
    return Registry(pm)


@pytest.fixture
def cli_plugin_manager() -> Iterator[None]:
    """The command line's cached plugin manager and registry, rebuilt for this test."""
    get_plugin_manager.cache_clear()
    get_registry.cache_clear()
    yield
    get_plugin_manager.cache_clear()
    get_registry.cache_clear()


# ----- every hook -----


def test_hook_register_harnesses(pm: HankweavePluginManager, registry: Registry) -> None:
    class HarnessPlugin:
        @hookimpl
        def register_harnesses(self, register: Callable[[type[Harness]], None]) -> None:
            register(FakeClaude)
            register(FakePi)

    pm.register(HarnessPlugin(), name="harness-plugin")

    assert registry.harnesses() == {"claude": FakeClaude, "pi": FakePi}
    assert registry.registered_by("harness", "claude") == "harness-plugin"


def test_hook_register_checkpoint_backends(pm: HankweavePluginManager, registry: Registry) -> None:
    class BackendPlugin:
        @hookimpl
        def register_checkpoint_backends(
            self, register: Callable[[type[CheckpointStore]], None]
        ) -> None:
            register(FakeStore)

    pm.register(BackendPlugin(), name="backend-plugin")

    assert registry.checkpoint_backends() == {"memory": FakeStore}
    assert registry.checkpoint_backend("memory") is FakeStore


def test_hook_register_event_sinks(pm: HankweavePluginManager, registry: Registry) -> None:
    class SinkPlugin:
        @hookimpl
        def register_event_sinks(self, register: Callable[[type[EventSink]], None]) -> None:
            register(MemorySink)

    pm.register(SinkPlugin(), name="sink-plugin")

    sink = registry.event_sinks()["memory"]()
    sink.handle({"type": "codon.started", "data": {}})
    assert isinstance(sink, MemorySink)
    assert sink.events == [{"type": "codon.started", "data": {}}]


def test_hook_register_proxy_middleware(pm: HankweavePluginManager, registry: Registry) -> None:
    from hankweave.app.plugin_settings import build_proxy_middleware
    from hankweave.config.settings import SinkSpec
    from hankweave.proxy.types import ProxyMiddleware, ProxyReply, ProxyRequest

    class Tagging(ProxyMiddleware):
        name = "tagging"

        async def on_request(self, request: ProxyRequest) -> ProxyReply | None:
            request.headers["x-tag"] = "tagged"
            return None

    class MiddlewarePlugin:
        @hookimpl
        def register_proxy_middleware(
            self, register: Callable[[type[ProxyMiddleware]], None]
        ) -> None:
            register(Tagging)

    pm.register(MiddlewarePlugin(), name="middleware-plugin")

    assert registry.proxy_middleware() == {"tagging": Tagging}
    assert registry.registered_by("proxy middleware", "tagging") == "middleware-plugin"
    (built,), problems = build_proxy_middleware(registry, [SinkSpec(name="tagging")])
    request = ProxyRequest(upstream="anthropic", protocol="anthropic", method="POST",
                           path="/v1/messages", headers={}, body=b"{}")
    assert problems == [] and asyncio.run(built.on_request(request)) is None
    assert request.headers == {"x-tag": "tagged"}
    _, problems = build_proxy_middleware(registry, [SinkSpec(name="tagged")])
    assert problems == ['proxy.middleware[0]: no installed proxy middleware is named "tagged"'
                        " (installed: tagging)"]


def test_hook_register_sentinel_triggers(pm: HankweavePluginManager, registry: Registry) -> None:
    class TriggerPlugin:
        @hookimpl
        def register_sentinel_triggers(
            self, register: Callable[[type[SentinelTrigger]], None]
        ) -> None:
            register(EveryEventTrigger)

    pm.register(TriggerPlugin(), name="trigger-plugin")

    every_event = registry.sentinel_triggers()["every-event"]
    trigger = every_event(every_event.Config.model_validate({"type": "every-event"}))
    assert trigger.observe({"type": "file.updated"}) == [{"type": "file.updated"}]


class CountingOptions(SentinelOptions):
    label: str = "events"


class CountingSentinel(SentinelKind):
    name = "counting"
    Options = CountingOptions

    async def fire(self, firing: Any) -> SentinelAnswer:
        return SentinelAnswer(f"{len(firing.events)} {self.setup.options.label}")


def test_hook_register_sentinel_kinds(pm: HankweavePluginManager, registry: Registry,
                                      tmp_path: Path) -> None:
    from hankweave.config.hank import CodonSentinel
    from hankweave.sentinels.config import SentinelConfigLoader

    class KindPlugin:
        @hookimpl
        def register_sentinel_kinds(self, register: Callable[[type[SentinelKind]], None]) -> None:
            register(CountingSentinel)

    pm.register(KindPlugin(), name="kind-plugin")
    assert registry.sentinel_kinds() == {"counting": CountingSentinel}
    assert registry.registered_by("sentinel kind", "counting") == "kind-plugin"

    loader = SentinelConfigLoader(kinds=registry.sentinel_kinds())
    config = {"id": "count", "name": "Count", "kind": "counting",
              "trigger": {"type": "event", "on": ["*"]}, "execution": {"strategy": "immediate"}}
    good = loader.load([CodonSentinel.model_validate(
        {"sentinelConfig": {**config, "options": {"label": "calls"}}})], tmp_path)
    assert good.errors == []
    (loaded,) = good.configs
    assert loaded.kind is CountingSentinel and loaded.options == CountingOptions(label="calls")
    bad = loader.load([CodonSentinel.model_validate(
        {"sentinelConfig": {**config, "options": {"colour": "red"}}})], tmp_path)
    (error,) = bad.errors
    assert "options.colour" in error.error
    unknown = SentinelConfigLoader().load([CodonSentinel.model_validate(
        {"sentinelConfig": config})], tmp_path)
    assert "Unknown sentinel kind 'counting' (installed: 'llm'" in unknown.errors[0].error


def test_hook_register_models(pm: HankweavePluginManager, registry: Registry) -> None:
    gemini = model("google", "gemini-exp-1", aliases=("gemini",), cost=ModelCost(input=1.25))

    class CataloguePlugin:
        @hookimpl
        def register_models(self, register: Callable[[ModelEntry | ProviderEntry], None]) -> None:
            register(gemini)
            register(ProviderEntry(provider_id="google", harness="pi", package="hankweave-pi"))

    pm.register(CataloguePlugin(), name="catalogue-plugin")

    assert registry.resolve_model("gemini") == gemini
    assert registry.models()["google/gemini-exp-1"] == gemini
    assert registry.provider_for(gemini) == registry.providers()["google"]
    assert registry.registered_by("model alias", "gemini") == "catalogue-plugin"


def test_hook_register_commands(pm: HankweavePluginManager, registry: Registry) -> None:
    class CommandPlugin:
        @hookimpl
        def register_commands(self, cli: click.Group) -> None:
            @cli.command()
            def hello() -> None:
                """Say hello."""
                click.echo("hello from a plugin")

    pm.register(CommandPlugin(), name="command-plugin")
    group = click.Group("hankweave")

    registry.install_commands(group)

    result = CliRunner().invoke(group, ["hello"])
    assert result.exit_code == 0, result.output
    assert result.output == "hello from a plugin\n"


def test_hook_select_harness(pm: HankweavePluginManager, registry: Registry) -> None:
    class ReplayEverything:
        @hookimpl
        def select_harness(
            self, model: ModelEntry, harnesses: Mapping[str, type[Harness]]
        ) -> str | None:
            return "replay" if "replay" in harnesses else None

    pm.register(registering("register_harnesses", FakeClaude, FakeReplay), name="harnesses")
    pm.register(ReplayEverything(), name="replay-everything")

    assert registry.select_harness(registry.resolve_model("haiku")) is FakeReplay


# ----- registration checks and attribution -----


def test_duplicate_names_are_errors_naming_both_plugins(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(registering("register_checkpoint_backends", GitLikeStore), name="plugin-a")
    pm.register(registering("register_checkpoint_backends", GitLikeStore), name="plugin-b")

    with pytest.raises(DuplicateRegistrationError) as excinfo:
        registry.checkpoint_backends()
    assert (
        str(excinfo.value) == 'checkpoint backend "git" is registered by both plugin-a and plugin-b'
    )


class LlmLookalike(CountingSentinel):
    name = "llm"


class EventLookalike(EveryEventTrigger):
    name = "event"


@pytest.mark.parametrize(("hook", "registered", "message"), [
    ("register_sentinel_kinds", LlmLookalike,
     'sentinel kind "llm" is registered by both hankweave.default_plugins.sentinels and '
     "lookalike"),
    ("register_sentinel_triggers", EventLookalike,
     'sentinel trigger "event" is registered by both hankweave.default_plugins.sentinels and '
     "lookalike"),
])
def test_a_plugin_registering_a_builtin_sentinel_name_is_an_error_naming_both(
    pm: HankweavePluginManager, registry: Registry, hook: str, registered: type, message: str
) -> None:
    pm.register(registering(hook, registered), name="lookalike")

    with pytest.raises(DuplicateRegistrationError) as excinfo:
        registry.sentinel_kinds()
        registry.sentinel_triggers()
    assert str(excinfo.value) == message


def test_the_builtin_sentinel_kind_and_triggers_are_registered_by_a_default_plugin(
    registry: Registry,
) -> None:
    from hankweave.sentinels.llm import LlmSentinel
    from hankweave.sentinels.triggers import EventTriggerType, SequenceTriggerType

    assert registry.sentinel_kinds(include_builtin=True) == {"llm": LlmSentinel}
    assert registry.sentinel_triggers(include_builtin=True) == {
        "event": EventTriggerType, "sequence": SequenceTriggerType}
    assert registry.registered_by("sentinel kind", "llm") == "hankweave.default_plugins.sentinels"
    assert registry.sentinel_kinds() == {} and registry.sentinel_triggers() == {}


def test_a_plugin_registering_a_name_twice_is_an_error(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(registering("register_harnesses", FakePi, FakePi), name="plugin-a")

    with pytest.raises(
        DuplicateRegistrationError, match='harness "pi" is registered twice by plugin-a'
    ):
        registry.harnesses()


def test_duplicate_model_aliases_name_both_plugins(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(
        registering("register_models", model("example", "haiku-clone", aliases=("clone",))),
        name="clone-catalogue",
    )
    pm.register(
        registering("register_models", model("other", "haiku-copy", aliases=("Clone",))),
        name="copy-catalogue",
    )

    with pytest.raises(DuplicateRegistrationError) as excinfo:
        registry.resolve_model("clone")
    assert str(excinfo.value) == (
        'model alias "clone" is registered by both clone-catalogue and copy-catalogue'
    )


def test_a_plugin_entry_replaces_the_built_in_catalogues(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    built_in = registry.resolve_model("haiku")
    pm.register(registering("register_models", model("example", "haiku-clone",
                                                      aliases=("Haiku",))), name="clone")
    newer = built_in.model_copy(update={"name": "Newer data", "aliases": ()})
    pm.register(registering("register_models", newer), name="newer")
    registry = Registry(pm)

    assert registry.resolve_model("haiku").full_id == "example/haiku-clone"
    assert registry.registered_by("model", "example/haiku-clone") == "clone"
    # The built-in entry's replacement is the one found by its id.
    assert registry.models()[built_in.full_id.lower()].name == "Newer data"


def test_a_replaced_built_in_model_keeps_its_built_in_aliases(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    built_in = registry.resolve_model("sonnet")
    pm.register(registering("register_models", built_in.model_copy(
        update={"name": "Sonnet, newer data", "aliases": ()})), name="newer")
    registry = Registry(pm)

    assert registry.resolve_model("sonnet").name == "Sonnet, newer data"


def test_a_class_of_the_wrong_kind_is_rejected(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(registering("register_harnesses", MemorySink), name="confused")

    with pytest.raises(RegistrationError, match=r"not a subclass of hankweave.harness.Harness"):
        registry.harnesses()


def test_an_abstract_class_is_rejected(pm: HankweavePluginManager, registry: Registry) -> None:
    class HalfSink(EventSink):
        name = "half"

    pm.register(registering("register_event_sinks", HalfSink), name="half-done")

    with pytest.raises(RegistrationError, match=r"abstract \(it does not implement handle\)"):
        registry.event_sinks()


def test_a_class_without_a_name_is_rejected(pm: HankweavePluginManager, registry: Registry) -> None:
    class Nameless(FakeHarness):
        name = ""

    pm.register(registering("register_harnesses", Nameless), name="nameless")

    with pytest.raises(
        RegistrationError, match=r"plugin nameless registered harness class .* without a name"
    ):
        registry.harnesses()


def test_register_models_rejects_other_objects(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(registering("register_models", {"provider_id": "x"}), name="dicts")

    with pytest.raises(RegistrationError, match=r"neither a hankweave.models.ModelEntry"):
        registry.models()


def test_a_plugin_command_cannot_replace_a_kernel_command(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    class Hijacker:
        @hookimpl
        def register_commands(self, cli: click.Group) -> None:
            cli.add_command(click.Command("inspect"))

    pm.register(Hijacker(), name="hijacker")
    group = click.Group("hankweave", commands=[click.Command("inspect")])

    with pytest.raises(
        DuplicateRegistrationError,
        match='command "inspect" is registered by both hankweave and hijacker',
    ):
        registry.install_commands(group)


def test_commands_are_installed_once_per_group(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    calls = []

    class Counting:
        @hookimpl
        def register_commands(self, cli: click.Group) -> None:
            calls.append(cli)
            cli.add_command(click.Command("counted"))

    pm.register(Counting(), name="counting")
    group = click.Group("hankweave")

    registry.install_commands(group)
    registry.install_commands(group)

    assert calls == [group]


def test_missing_checkpoint_backend_names_the_package(registry: Registry) -> None:
    with pytest.raises(BackendNotInstalledError) as excinfo:
        registry.checkpoint_backend("git")
    assert str(excinfo.value) == (
        'Checkpoint backend "git" is not installed (installed: none); '
        "install it with: pip install hankweave-checkpoint-git"
    )


def test_registration_hooks_are_called_once_per_registry(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    calls = []

    class Counting:
        @hookimpl
        def register_harnesses(self, register: Callable[[type[Harness]], None]) -> None:
            calls.append(1)
            register(FakePi)

    pm.register(Counting(), name="counting")

    registry.harnesses()
    registry.harnesses()
    registry.select_harness(model("openai", "gpt-5"))

    assert calls == [1]


# ----- the model catalogue -----


@pytest.mark.parametrize(("alias", "family"), [("haiku", "haiku"), ("sonnet", "sonnet"),
                                               ("OPUS", "opus")])
def test_default_catalogue_resolves_each_claude_alias_to_the_newest_of_its_family(
    registry: Registry, alias: str, family: str
) -> None:
    entry = registry.resolve_model(alias)

    def version(model_id: str) -> tuple[int, ...]:
        return tuple(int(part) for part in model_id.split("-")[2:])

    family_ids = [m.model_id for m in registry.models().values()
                  if m.provider_id == "anthropic"
                  and re.fullmatch(rf"claude-{family}-\d+(-\d{{1,2}})?", m.model_id)]
    assert entry.provider_id == "anthropic"
    assert entry.model_id == max(family_ids, key=version)
    assert entry.cost is not None and entry.cost.input > 0 and entry.cost.output > 0
    # Anthropic's prompt cache: reads cost less than fresh input, writes more.
    assert 0 < entry.cost.cache_read < entry.cost.input < entry.cost.cache_write
    assert entry.context_limit >= 200_000


def test_models_resolve_by_full_id_and_by_short_id(registry: Registry) -> None:
    assert registry.resolve_model("Anthropic/Claude-Sonnet-4-5").model_id == "claude-sonnet-4-5"
    assert registry.resolve_model("claude-opus-4-5").provider_id == "anthropic"


def test_an_unknown_model_lists_the_closest_models_and_the_aliases(registry: Registry) -> None:
    with pytest.raises(UnknownModelError) as excinfo:
        registry.resolve_model("gpt-7")
    message = str(excinfo.value)
    assert message.startswith('Unknown model "gpt-7": not a catalogue model id, provider/model'
                              " id or alias, and no catalogue model is close enough (closest: ")
    assert message.endswith("aliases: haiku, opus, sonnet)")


def test_a_short_id_two_providers_share_is_ambiguous(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(registering("register_models", model("vertex", "llama-9"), model("groq", "llama-9")),
                name="two-hosts")

    with pytest.raises(UnknownModelError, match=r"ambiguous \(groq/llama-9, vertex/llama-9\)"):
        registry.resolve_model("llama-9")


def test_a_short_id_is_looked_up_under_the_provider_its_name_suggests(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(registering("register_models", model("vertex", "claude-haiku-4-5")), name="vertex")

    assert registry.resolve_model("claude-haiku-4-5").full_id == "anthropic/claude-haiku-4-5"


# ----- harness selection -----


@pytest.fixture
def both_harnesses(pm: HankweavePluginManager) -> None:
    pm.register(registering("register_harnesses", FakeClaude, FakePi), name="harnesses")


@pytest.mark.usefixtures("both_harnesses")
def test_anthropic_models_run_on_the_claude_harness(registry: Registry) -> None:
    assert registry.select_harness(registry.resolve_model("sonnet")) is FakeClaude


@pytest.mark.usefixtures("both_harnesses")
@pytest.mark.parametrize(
    ("model_id", "harness"),
    [
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", FakeClaude),
        ("anthropic.claude-3-haiku-20240307-v1:0", FakeClaude),
        ("meta.llama3-70b-instruct-v1:0", FakePi),
    ],
)
def test_bedrock_runs_only_anthropic_models_on_the_claude_harness(
    registry: Registry, model_id: str, harness: type[Harness]
) -> None:
    assert registry.select_harness(model("amazon-bedrock", model_id)) is harness


@pytest.mark.usefixtures("both_harnesses")
@pytest.mark.parametrize("provider", ["openai", "google", "OpenRouter"])
def test_other_providers_run_on_the_pi_harness(registry: Registry, provider: str) -> None:
    assert registry.select_harness(model(provider, "some-model")) is FakePi


@pytest.mark.usefixtures("both_harnesses")
def test_a_harness_override_on_the_model_wins(registry: Registry) -> None:
    haiku_on_pi = registry.resolve_model("haiku").model_copy(update={"harness_override": "pi"})

    assert registry.select_harness(haiku_on_pi) is FakePi


def test_a_missing_harness_names_the_package_to_install(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    pm.register(registering("register_harnesses", FakePi), name="pi-only")

    with pytest.raises(HarnessNotInstalledError) as excinfo:
        registry.select_harness(registry.resolve_model("haiku"))
    assert str(excinfo.value) == (
        f"Model {registry.resolve_model('haiku').full_id} needs the Claude harness; "
        "install it with: pip install hankweave-harness-claude"
    )


def test_a_missing_pi_harness_names_its_package(registry: Registry) -> None:
    with pytest.raises(
        HarnessNotInstalledError,
        match="needs the Pi harness; install it with: pip install hankweave-harness-pi",
    ):
        registry.select_harness(model("openai", "gpt-5"))


@pytest.mark.usefixtures("both_harnesses")
def test_a_plugin_that_declines_leaves_the_choice_to_the_default(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    class Declines:
        @hookimpl
        def select_harness(self, model: ModelEntry) -> str | None:
            return None

    pm.register(Declines(), name="declines")

    assert registry.select_harness(registry.resolve_model("opus")) is FakeClaude


@pytest.mark.usefixtures("both_harnesses")
def test_a_plugin_selecting_an_uninstalled_harness_is_an_error(
    pm: HankweavePluginManager, registry: Registry
) -> None:
    class WantsReplay:
        @hookimpl
        def select_harness(self) -> str:
            return "replay"

    pm.register(WantsReplay(), name="wants-replay")

    with pytest.raises(
        HarnessNotInstalledError,
        match=r'routed to harness "replay", which is not installed \(installed: claude, pi\)',
    ):
        registry.select_harness(registry.resolve_model("opus"))


def test_without_any_routing_no_harness_is_selected() -> None:
    pm = make_plugin_manager(
        load_entrypoints=False,
        env={"HANKWEAVE_DISABLE_PLUGINS": "hankweave.default_plugins.model_catalogue"},
    )
    pm.register(registering("register_harnesses", FakePi), name="pi")

    with pytest.raises(HarnessSelectionError, match='routes no harness for provider "openai"'):
        Registry(pm).select_harness(model("openai", "gpt-5"))


def test_a_registered_harness_streams_codon_log_records(tmp_path: Path) -> None:
    request = CodonRequest(
        prompt="Write plan.md",
        system_prompt=None,
        model=model("openai", "gpt-5"),
        work_dir=tmp_path,
    )

    async def collect() -> list[dict[str, Any]]:
        context = attempt_context(tmp_path, request)
        return [record async for record in FakeClaude().run_codon(request, context)]

    records = asyncio.run(collect())
    assert [r["type"] for r in records] == ["system", "result"]
    assert records[-1]["result"] == "Write plan.md"


# ----- loading installed plugins -----


def test_builtins_are_registered_and_pass_check_pending(pm: HankweavePluginManager) -> None:
    assert [name for name, _ in pm.list_name_plugin()] == list(DEFAULT_PLUGINS)
    pm.check_pending()


def test_installed_plugins_are_registered_with_their_distribution(
    installed: Callable[..., None],
) -> None:
    installed(
        FakeEntryPoint(
            "memory",
            registering("register_event_sinks", MemorySink),
            "hankweave-sink-memory",
            "2.1",
        )
    )

    pm = make_plugin_manager(env={})

    assert Registry(pm).event_sinks() == {"memory": MemorySink}
    (info,) = list_plugins(pm)
    assert (info.name, info.distribution, info.version, info.hooks) == (
        "memory",
        "hankweave-sink-memory",
        "2.1",
        ("register_event_sinks",),
    )


def test_a_plugin_that_fails_to_import_is_skipped_with_one_warning(
    installed: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    installed(
        FakeEntryPoint("broken", ModuleNotFoundError("No module named 'nope'"), "hankweave-broken"),
        FakeEntryPoint("memory", registering("register_event_sinks", MemorySink)),
    )

    pm = make_plugin_manager(env={})

    assert capsys.readouterr().err == (
        'hankweave: plugin "broken" (hankweave-broken 1.0) failed to load: '
        "ModuleNotFoundError: No module named 'nope'; skipped\n"
    )
    assert not pm.has_plugin("broken")
    assert Registry(pm).event_sinks() == {"memory": MemorySink}
    assert [f.name for f in pm.load_failures] == ["broken"]


def test_strict_mode_makes_a_failed_plugin_fatal(installed: Callable[..., None]) -> None:
    installed(FakeEntryPoint("broken", ImportError("cannot import name 'X'"), "hankweave-broken"))

    with pytest.raises(PluginLoadError) as excinfo:
        make_plugin_manager(env={}, strict=True)
    assert str(excinfo.value) == (
        'plugin "broken" (hankweave-broken 1.0) failed to load: '
        "ImportError: cannot import name 'X'"
    )
    assert isinstance(excinfo.value.__cause__, ImportError)


def test_the_strict_switch_makes_a_failed_plugin_fatal(installed: Callable[..., None]) -> None:
    installed(FakeEntryPoint("broken", ImportError("boom")))

    with pytest.raises(PluginLoadError):
        make_plugin_manager(env={"HANKWEAVE_STRICT_PLUGINS": "1"})
    assert make_plugin_manager(env={"HANKWEAVE_STRICT_PLUGINS": "0"}).load_failures


def test_a_plugin_implementing_an_unknown_hook_is_skipped(
    installed: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    installed(FakeEntryPoint("typo", registering("register_harness", FakePi), "hankweave-typo"))

    pm = make_plugin_manager(env={})

    assert not pm.has_plugin("typo")
    assert "implements unknown hooks: register_harness" in capsys.readouterr().err


def test_a_hook_implementation_with_unknown_arguments_is_skipped(
    installed: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    class AsksForTooMuch:
        @hookimpl
        def register_harnesses(self, register: Any, settings: Any) -> None:
            """Asks for an argument the spec does not have."""

    installed(FakeEntryPoint("greedy", AsksForTooMuch()))

    pm = make_plugin_manager(env={})

    assert not pm.has_plugin("greedy")
    assert Registry(pm).harnesses() == {}
    assert "PluginValidationError" in capsys.readouterr().err


def test_the_same_name_from_two_distributions_loads_the_first_only(
    installed: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    installed(
        FakeEntryPoint(
            "git",
            registering("register_checkpoint_backends", GitLikeStore),
            "hankweave-checkpoint-git",
            "1.0",
        ),
        FakeEntryPoint(
            "git",
            registering("register_checkpoint_backends", GitLikeStore),
            "hankweave-git-fork",
            "0.3",
        ),
    )

    pm = make_plugin_manager(env={})

    assert capsys.readouterr().err == (
        'hankweave: plugin "git" (hankweave-git-fork 0.3) failed to load: PluginLoadError: '
        'the plugin name "git" is already used by hankweave-checkpoint-git 1.0; skipped\n'
    )
    assert Registry(pm).checkpoint_backends() == {"git": GitLikeStore}


def test_a_distribution_found_twice_is_loaded_once(
    installed: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = registering("register_harnesses", FakePi)
    installed(
        FakeEntryPoint("pi", plugin, "hankweave-harness-pi"),
        FakeEntryPoint("pi", plugin, "hankweave-harness-pi"),
    )

    pm = make_plugin_manager(env={})

    assert capsys.readouterr().err == ""
    assert Registry(pm).harnesses() == {"pi": FakePi}


@pytest.fixture
def three_plugins(installed: Callable[..., None]) -> None:
    installed(
        FakeEntryPoint(
            "claude", registering("register_harnesses", FakeClaude), "hankweave-harness-claude"
        ),
        FakeEntryPoint("pi", registering("register_harnesses", FakePi), "hankweave-harness-pi"),
        FakeEntryPoint(
            "memory", registering("register_event_sinks", MemorySink), "hankweave-sink-memory"
        ),
    )


def loaded(pm: HankweavePluginManager) -> list[str]:
    return [info.name for info in list_plugins(pm)]


@pytest.mark.usefixtures("three_plugins")
def test_the_allowlist_loads_only_the_plugins_it_names() -> None:
    pm = make_plugin_manager(env={"HANKWEAVE_LOAD_PLUGINS": "pi, hankweave_sink_memory"})

    assert loaded(pm) == ["pi", "memory"]


@pytest.mark.usefixtures("three_plugins")
def test_an_empty_allowlist_loads_no_installed_plugin() -> None:
    pm = make_plugin_manager(env={"HANKWEAVE_LOAD_PLUGINS": ""})

    assert loaded(pm) == []
    assert Registry(pm).resolve_model("haiku").model_id.startswith("claude-haiku-")


@pytest.mark.usefixtures("three_plugins")
def test_an_allowlisted_plugin_that_is_not_installed_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pm = make_plugin_manager(env={"HANKWEAVE_LOAD_PLUGINS": "claude,replay"})

    assert loaded(pm) == ["claude"]
    assert capsys.readouterr().err == (
        'hankweave: plugin "replay" listed in HANKWEAVE_LOAD_PLUGINS is not installed\n'
    )


@pytest.mark.usefixtures("three_plugins")
def test_the_blocklist_skips_the_plugins_it_names() -> None:
    pm = make_plugin_manager(env={"HANKWEAVE_DISABLE_PLUGINS": "claude,hankweave-sink-memory"})

    assert loaded(pm) == ["pi"]


def test_the_blocklist_can_disable_a_builtin() -> None:
    pm = make_plugin_manager(
        load_entrypoints=False,
        env={"HANKWEAVE_DISABLE_PLUGINS": "hankweave.default_plugins.model_catalogue"},
    )

    assert Registry(pm).models() == {}


@pytest.mark.usefixtures("three_plugins")
def test_entry_points_are_not_loaded_when_told_not_to() -> None:
    assert loaded(make_plugin_manager(load_entrypoints=False, env={})) == []


def test_the_cli_plugin_manager_is_built_once(cli_plugin_manager: None) -> None:
    assert get_plugin_manager() is get_plugin_manager()
    assert get_registry().pm is get_plugin_manager()


def test_hookimpl_is_importable_from_hankweave() -> None:
    from hankweave import hookimpl as exported

    assert exported is hookimpl
    assert hankweave.hookimpl is hookimpl


# ----- tracing -----


def test_the_trace_switch_prints_hook_calls_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pm = make_plugin_manager(load_entrypoints=False, env={"HANKWEAVE_TRACE_PLUGINS": "1"})

    Registry(pm).resolve_model("haiku")

    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("hankweave trace: register_models(register=<function ")
    assert lines[0].endswith("-> implementations: hankweave.default_plugins.model_catalogue")
    assert lines[1] == "hankweave trace: register_models returned []"


def test_tracing_reports_a_hook_that_raises(capsys: pytest.CaptureFixture[str]) -> None:
    pm = make_plugin_manager(load_entrypoints=False, env={"HANKWEAVE_TRACE_PLUGINS": "1"})

    with pytest.raises(HarnessNotInstalledError):
        Registry(pm).select_harness(model("openai", "gpt-5"))

    assert (
        "hankweave trace: select_harness raised HarnessNotInstalledError: Model openai/gpt-5"
        in (capsys.readouterr().err)
    )


def test_without_the_trace_switch_nothing_is_printed(
    pm: HankweavePluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    Registry(pm).resolve_model("haiku")

    assert capsys.readouterr().err == ""


# ----- `hankweave plugins` -----


@pytest.fixture
def installed_for_cli(installed: Callable[..., None], cli_plugin_manager: None) -> None:
    installed(
        FakeEntryPoint(
            "memory",
            registering("register_event_sinks", MemorySink),
            "hankweave-sink-memory",
            "2.1",
        ),
        FakeEntryPoint("broken", ImportError("No module named 'nope'"), "hankweave-broken", "0.1"),
    )


@pytest.mark.usefixtures("installed_for_cli")
def test_plugins_command_lists_plugins_and_load_errors() -> None:
    result = CliRunner().invoke(plugins_command, [])

    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "memory  (hankweave-sink-memory 2.1)\n"
        "  hooks: register_event_sinks\n"
        "broken  (hankweave-broken 0.1)\n"
        "  failed to load: ImportError: No module named 'nope'\n"
    )


@pytest.mark.usefixtures("installed_for_cli")
def test_plugins_command_json() -> None:
    result = CliRunner().invoke(plugins_command, ["--json"])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {
            "name": "memory",
            "distribution": "hankweave-sink-memory",
            "version": "2.1",
            "hooks": ["register_event_sinks"],
            "builtin": False,
            "error": None,
        },
        {
            "name": "broken",
            "distribution": "hankweave-broken",
            "version": "0.1",
            "hooks": [],
            "builtin": False,
            "error": "ImportError: No module named 'nope'",
        },
    ]


@pytest.mark.usefixtures("installed_for_cli")
def test_plugins_command_all_includes_the_builtins() -> None:
    result = CliRunner().invoke(plugins_command, ["--all", "--json"])

    assert result.exit_code == 0, result.output
    builtins = [p["name"] for p in json.loads(result.stdout) if p["builtin"]]
    assert builtins == list(DEFAULT_PLUGINS)


@pytest.mark.usefixtures("cli_plugin_manager")
def test_plugins_command_with_nothing_installed(installed: Callable[..., None]) -> None:
    installed()

    result = CliRunner().invoke(plugins_command, [])

    assert result.exit_code == 0, result.output
    assert result.stdout == "No plugins installed. (--all shows built-ins)\n"


@pytest.mark.usefixtures("installed_for_cli")
def test_plugins_command_reports_a_strict_failure_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANKWEAVE_STRICT_PLUGINS", "1")

    result = CliRunner().invoke(plugins_command, [])

    assert result.exit_code == 1
    assert result.output.startswith('Error: plugin "broken" (hankweave-broken 0.1) failed to load')
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("cli_plugin_manager")
def test_plugin_commands_join_the_command_line(installed: Callable[..., None]) -> None:
    @click.command("greet")
    def greet() -> None:
        click.echo("hi")

    plugin = types.ModuleType("greeter")
    plugin.register_commands = hookimpl(lambda cli: cli.add_command(greet))  # type: ignore[attr-defined]
    installed(FakeEntryPoint("greeter", plugin))
    group = click.Group("hankweave", commands=[plugins_command])

    install_plugin_commands(group)
    result = CliRunner().invoke(group, ["greet"])

    assert result.exit_code == 0, result.output
    assert result.output == "hi\n"


# ----- import cost -----


def test_importing_the_plugin_machinery_loads_no_heavy_library() -> None:
    code = (
        "import sys\n"
        "import hankweave\n"
        "light = 'pluggy' not in sys.modules\n"
        "from hankweave.plugins import make_plugin_manager\n"
        "from hankweave.registry import Registry\n"
        "Registry(make_plugin_manager(load_entrypoints=False)).resolve_model('haiku')\n"
        "heavy = [m for m in ('litellm', 'anthropic', 'claude_agent_sdk', 'git') if m in sys.modules]\n"
        "print(light, heavy)\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert result.stdout == "True []\n"


def test_a_plugin_module_that_cannot_be_imported_is_a_clear_error(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HANKWEAVE_HOME": str(tmp_path),
           "HANKWEAVE_PLUGIN_MODULES": "no_such_plugin_module"}
    done = subprocess.run([sys.executable, "-m", "hankweave", "--help"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert ("HANKWEAVE_PLUGIN_MODULES names 'no_such_plugin_module', which cannot be imported"
            in done.stderr)
