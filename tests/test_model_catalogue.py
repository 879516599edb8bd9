"""The built-in model catalogue (its bundled snapshot and the script that makes it) and the
model spellings of real hank files (docs/behaviour.md §4.2, §4.4)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hankweave.default_plugins.model_catalogue import snapshot
from hankweave.models import PI_ROUTE, UnknownModelError, rewrite_model_spec
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry(make_plugin_manager(env={"HANKWEAVE_LOAD_PLUGINS": ""}))


def load_script() -> ModuleType:
    path = ROOT / "scripts" / "refresh_model_catalogue.py"
    spec = importlib.util.spec_from_file_location("refresh_model_catalogue", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ----- the snapshot -----


def test_the_snapshot_names_its_source_and_every_alias_names_one_of_its_models() -> None:
    data = snapshot()
    ids = {f"{m.provider}/{m.id}" for m in data.models}

    assert data.source.startswith("litellm ")
    assert set(data.aliases) == {"haiku", "sonnet", "opus"}
    assert set(data.aliases.values()) <= ids


@pytest.mark.parametrize("name", [
    "gpt-5.2", "openai/gpt-5.2", "gpt-5", "o3", "gemini-2.5-pro", "google/gemini-2.5-flash",
    "claude-sonnet-4-5", "anthropic/claude-haiku-4-5",
    "amazon-bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0",
    "amazon-bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "amazon-bedrock/global.anthropic.claude-opus-4-5-20251101-v1:0",
    "mistral/codestral-latest", "deepseek-chat", "xai/grok-4.3",
])
def test_models_real_hanks_name_resolve_with_prices_and_limits(registry: Registry,
                                                                name: str) -> None:
    model = registry.resolve_model(name)

    assert model.cost is not None and model.cost.input > 0 and model.cost.output > 0
    assert model.context_limit >= model.output_limit > 0


def test_bare_ids_resolve_to_the_provider_their_name_suggests(registry: Registry) -> None:
    assert registry.resolve_model("gpt-5.2").provider_id == "openai"
    assert registry.resolve_model("gemini-2.5-pro").provider_id == "google"
    assert registry.resolve_model("deepseek-chat").provider_id == "deepseek"


def test_bedrock_anthropic_models_route_to_the_claude_harness_and_others_to_pi(
    registry: Registry,
) -> None:
    bedrock = registry.resolve_model("amazon-bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0")

    assert bedrock.provider_id == "amazon-bedrock"
    assert registry.provider_for(bedrock).harness == "claude"  # type: ignore[union-attr]
    assert registry.provider_for(registry.resolve_model("gpt-5.2")).harness == "pi"  # type: ignore[union-attr]


# ----- spellings -----


@pytest.mark.parametrize(("spec", "canonical"), [
    ("opencode/openai/gpt-5.2", "pi/openai/gpt-5.2"),
    ("openrouter/Anthropic/Claude-X", "pi/openrouter/Anthropic/Claude-X"),
    ("z-ai/glm-5", "zai/glm-5"),
    ("zhipuai/glm-5", "zai/glm-5"),
    ("pi/moonshot/kimi-k3", "pi/moonshotai/kimi-k3"),
    ("  sonnet ", "sonnet"),
    ("openrouter/", "openrouter/"),
])
def test_the_originals_rewrites(spec: str, canonical: str) -> None:
    assert rewrite_model_spec(spec) == canonical


def test_pi_route_keeps_a_known_models_prices_and_forces_pi(registry: Registry) -> None:
    model = registry.resolve_model("pi/openai/gpt-5.2")

    assert model.full_id == "openai/gpt-5.2"
    assert model.harness_override == PI_ROUTE
    assert model.cost == registry.resolve_model("gpt-5.2").cost


def test_pi_route_to_an_unknown_model_is_a_placeholder_without_price(registry: Registry) -> None:
    qualified = registry.resolve_model("pi/acme/coder-9")
    bare = registry.resolve_model("pi/gpt-9")
    guessed = registry.resolve_model("pi/some-model")

    assert (qualified.full_id, qualified.cost, qualified.harness_override) == (
        "acme/coder-9", None, PI_ROUTE)
    assert (qualified.context_limit, qualified.output_limit) == (200_000, 64_000)
    assert bare.full_id == "openai/gpt-9"
    assert guessed.full_id == "anthropic/some-model"


def test_openrouter_models_run_on_pi(registry: Registry) -> None:
    model = registry.resolve_model("openrouter/anthropic/claude-sonnet-4.5")

    assert model.full_id == "openrouter/anthropic/claude-sonnet-4.5"
    assert model.harness_override == PI_ROUTE


def test_an_unknown_rewritten_name_says_how_it_was_read(registry: Registry) -> None:
    with pytest.raises(UnknownModelError, match=r'"z-ai/glm-0" \(read as "zai/glm-0"\)'):
        registry.resolve_model("z-ai/glm-0")


# ----- the refresh script -----


def test_the_refresh_script_keeps_chat_models_of_routed_providers_in_usd_per_million() -> None:
    script = load_script()
    data = {
        "claude-sonnet-4-5": {"litellm_provider": "anthropic", "mode": "chat",
                              "max_input_tokens": 200000, "max_output_tokens": 64000,
                              "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
                              "cache_read_input_token_cost": 3e-07,
                              "cache_creation_input_token_cost": 3.75e-06},
        "claude-sonnet-5": {"litellm_provider": "anthropic", "mode": "chat",
                            "max_input_tokens": 1000000, "max_output_tokens": 128000},
        "claude-sonnet-4-5-20250929": {"litellm_provider": "anthropic", "mode": "chat",
                                       "max_input_tokens": 200000, "max_output_tokens": 64000},
        "us.anthropic.claude-sonnet-5": {"litellm_provider": "bedrock_converse", "mode": "chat",
                                         "max_input_tokens": 1000000, "max_output_tokens": 128000,
                                         "input_cost_per_token": 3.3e-06,
                                         "output_cost_per_token": 1.65e-05},
        "bedrock/us-east-1/anthropic.claude-v2": {"litellm_provider": "bedrock", "mode": "chat",
                                                  "max_input_tokens": 100000,
                                                  "max_output_tokens": 8191},
        "meta.llama3-70b": {"litellm_provider": "bedrock", "mode": "chat",
                            "max_input_tokens": 8000, "max_output_tokens": 2000},
        "gemini/gemini-2.5-pro": {"litellm_provider": "gemini", "mode": "chat",
                                  "max_input_tokens": 1048576, "max_output_tokens": 65535},
        "text-embedding-3-large": {"litellm_provider": "openai", "mode": "embedding",
                                   "max_input_tokens": 8191, "max_output_tokens": 1},
        "gpt-4o-audio-preview": {"litellm_provider": "openai", "mode": "chat",
                                 "max_input_tokens": 128000, "max_output_tokens": 16384},
        "sample_spec": {"mode": "one of: chat, embedding"},
    }

    result = script.convert(data, "test")
    models = {f"{m['provider']}/{m['id']}": m for m in result["models"]}

    assert set(models) == {"anthropic/claude-sonnet-4-5", "anthropic/claude-sonnet-5",
                           "anthropic/claude-sonnet-4-5-20250929",
                           "amazon-bedrock/us.anthropic.claude-sonnet-5", "google/gemini-2.5-pro"}
    assert models["anthropic/claude-sonnet-4-5"]["cost"] == {
        "input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}
    assert models["anthropic/claude-sonnet-4-5"]["name"] == "Claude Sonnet 4.5"
    assert "cost" not in models["anthropic/claude-sonnet-5"]  # litellm lists no price for it
    assert result["aliases"] == {"sonnet": "anthropic/claude-sonnet-5"}
