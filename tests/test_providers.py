"""litellm routes and credentials (``hankweave.providers``): the sentinels' keys and endpoints.

The codons' routes are tested with the pi harness (``hankweave-harness-pi/tests``); these run
without litellm installed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from hankweave.providers import (
    CredentialsError,
    ProviderOptions,
    Route,
    route,
    sentinel_key_variable,
    sentinel_route,
)

MOCK = {"HANKWEAVE_MOCK_PROVIDER_URL": "http://127.0.0.1:7", "OPENAI_API_KEY": "mock-openai",
        "ANTHROPIC_API_KEY": "mock-anthropic"}


def test_the_sentinel_variable_comes_before_the_standard_one() -> None:
    found = sentinel_route("openai/gpt-5-mini", {
        "HANKWEAVE_SENTINEL_OPENAI_API_KEY": "sentinel", "OPENAI_API_KEY": "codon"})
    assert (found.api_key, found.key_variable) == (
        "sentinel", "HANKWEAVE_SENTINEL_OPENAI_API_KEY")


@pytest.mark.parametrize(("model", "env", "variable"), [
    ("openai/gpt-5-mini", {"OPENAI_API_KEY": "k"}, "OPENAI_API_KEY"),
    ("anthropic/claude-haiku-4-5", {"ANTHROPIC_API_KEY": "k"}, "ANTHROPIC_API_KEY"),
    ("google/gemini-2.5-flash", {"GEMINI_API_KEY": "k"}, "GEMINI_API_KEY"),
    ("google/gemini-2.5-flash", {"GOOGLE_API_KEY": "k"}, "GOOGLE_API_KEY"),
    ("google/gemini-2.5-flash", {"GEMINI_API_KEY": "k", "GOOGLE_API_KEY": "g"},
     "GEMINI_API_KEY"),
    ("openrouter/moonshotai/kimi-k2", {"OPENROUTER_API_KEY": "k"}, "OPENROUTER_API_KEY"),
    ("moonshotai/kimi-k2", {"OPENROUTER_API_KEY": "k"}, "OPENROUTER_API_KEY"),
    ("acme/m-1", {"ACME_API_KEY": "k"}, "ACME_API_KEY"),
])
def test_without_the_sentinel_variable_the_standard_ones_give_the_key(
        model: str, env: dict[str, str], variable: str) -> None:
    found = sentinel_route(model, env)
    assert (found.key_variable, found.api_key) == (variable, env[variable])


@pytest.mark.parametrize(("provider", "variable"), [
    ("google", "HANKWEAVE_SENTINEL_GOOGLE_API_KEY"),
    ("OpenRouter", "HANKWEAVE_SENTINEL_OPENROUTER_API_KEY"),
    ("my-local", "HANKWEAVE_SENTINEL_MY_LOCAL_API_KEY"),
])
def test_the_sentinel_variable_is_named_after_the_provider(provider: str, variable: str) -> None:
    assert sentinel_key_variable(provider) == variable
    found = sentinel_route(f"{provider}/m", {variable: "k"})
    assert (found.key_variable, found.api_key) == (variable, "k")


@pytest.mark.parametrize(("model", "litellm_model", "display"), [
    ("google/gemini-2.5-flash", "gemini/gemini-2.5-flash", "google/gemini-2.5-flash"),
    ("openai/gpt-5-mini", "openai/gpt-5-mini", "openai/gpt-5-mini"),
    ("anthropic/claude-haiku-4-5", "anthropic/claude-haiku-4-5", "anthropic/claude-haiku-4-5"),
    ("openrouter/moonshotai/kimi-k2", "openrouter/moonshotai/kimi-k2",
     "openrouter/moonshotai/kimi-k2"),
    ("moonshotai/kimi-k2", "openrouter/moonshotai/kimi-k2", "moonshotai/kimi-k2"),
    ("zai/glm-4.6", "zai/glm-4.6", "zai/glm-4.6"),
    ("Google/gemini-2.5-flash", "gemini/gemini-2.5-flash", "google/gemini-2.5-flash"),
])
def test_the_litellm_model_string(model: str, litellm_model: str, display: str) -> None:
    env = {"HANKWEAVE_SENTINEL_" + model.split("/")[0].upper() + "_API_KEY": "k"}
    found = sentinel_route(model, env)
    assert (found.model, found.display, found.provider) == (
        litellm_model, display, display.split("/")[0])


@pytest.mark.parametrize(("model", "variable"), [
    ("openai/gpt-5-mini", "OPENAI_BASE_URL"),
    ("openai/gpt-5-mini", "OPENAI_API_BASE"),
    ("anthropic/claude-haiku-4-5", "ANTHROPIC_BASE_URL"),
    ("openrouter/moonshotai/kimi-k2", "OPENROUTER_API_BASE"),
    ("moonshotai/kimi-k2", "OPENROUTER_API_BASE"),
    ("google/gemini-2.5-flash", "GEMINI_API_BASE"),
    ("deepseek/deepseek-chat", "DEEPSEEK_API_BASE"),
])
def test_the_endpoint_comes_from_the_providers_base_url_variable(model: str,
                                                                  variable: str) -> None:
    env = {sentinel_key_variable(model.split("/")[0]): "k", variable: "http://127.0.0.1:9/v1"}
    assert sentinel_route(model, env).api_base == "http://127.0.0.1:9/v1"
    del env[variable]
    assert sentinel_route(model, env).api_base is None


def test_openai_base_url_comes_before_openai_api_base() -> None:
    found = sentinel_route("openai/gpt-5-mini", {
        "OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://a/v1", "OPENAI_API_BASE": "http://b/v1"})
    assert found.api_base == "http://a/v1"


def test_another_providers_base_url_is_not_used() -> None:
    found = sentinel_route("google/gemini-2.5-flash", {
        "GEMINI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert found.api_base is None


@pytest.mark.parametrize("model", ["anthropic/claude-haiku-4-5", "Anthropic/claude-haiku-4-5"])
def test_the_mock_takes_anthropic_models_over_the_anthropic_protocol(model: str) -> None:
    found = sentinel_route(model, {**MOCK, "HANKWEAVE_SENTINEL_ANTHROPIC_API_KEY": "real"})
    assert found == Route("anthropic", "anthropic/claude-haiku-4-5", "anthropic/claude-haiku-4-5",
                          "http://127.0.0.1:7", "mock-anthropic", "ANTHROPIC_API_KEY")
    assert found.anthropic
    assert found == route("anthropic", "claude-haiku-4-5", MOCK)


@pytest.mark.parametrize(("model", "provider", "model_id"), [
    ("google/gemini-2.5-flash", "google", "gemini-2.5-flash"),
    ("openai/gpt-5-mini", "openai", "gpt-5-mini"),
    ("openrouter/moonshotai/kimi-k2", "openrouter", "moonshotai/kimi-k2"),
    ("moonshotai/kimi-k2", "moonshotai", "kimi-k2"),
])
def test_the_mock_takes_every_other_model_over_the_openai_protocol(
        model: str, provider: str, model_id: str) -> None:
    found = sentinel_route(model, MOCK)
    assert found == Route(provider, f"openai/{model_id}", model, "http://127.0.0.1:7/v1",
                          "mock-openai", "OPENAI_API_KEY")
    assert not found.anthropic
    assert found == route(provider, model_id, MOCK)


def test_the_mock_needs_no_key_of_the_sentinels_own() -> None:
    found = sentinel_route("google/gemini-2.5-flash",
                           {"HANKWEAVE_MOCK_PROVIDER_URL": "http://127.0.0.1:7"})
    assert (found.api_base, found.api_key) == ("http://127.0.0.1:7/v1", None)


@pytest.mark.parametrize(("model", "message"), [
    ("google/gemini-2.5-flash", "Sentinel model google/gemini-2.5-flash needs"
     " HANKWEAVE_SENTINEL_GOOGLE_API_KEY or GEMINI_API_KEY"),
    ("openai/gpt-5-mini", "Sentinel model openai/gpt-5-mini needs"
     " HANKWEAVE_SENTINEL_OPENAI_API_KEY or OPENAI_API_KEY"),
    ("openrouter/moonshotai/kimi-k2", "Sentinel model openrouter/moonshotai/kimi-k2 needs"
     " HANKWEAVE_SENTINEL_OPENROUTER_API_KEY or OPENROUTER_API_KEY"),
])
def test_a_missing_key_names_both_variables(model: str, message: str) -> None:
    with pytest.raises(CredentialsError) as raised:
        sentinel_route(model, {"ANTHROPIC_API_KEY": "not this one", "OPENAI_API_KEY": ""})
    assert str(raised.value) == message


def test_an_unknown_provider_may_go_without_a_key() -> None:
    found = sentinel_route("ollama/llama3", {})
    assert (found.model, found.api_key, found.key_variable) == ("ollama/llama3", None, None)


@pytest.mark.parametrize("model", ["claude-haiku-4-5", "", "google/", "/gemini-2.5-flash"])
def test_a_model_without_a_provider_is_refused(model: str) -> None:
    with pytest.raises(CredentialsError, match=r"needs a full <provider>/<model> id"):
        sentinel_route(model, {"ANTHROPIC_API_KEY": "k", **MOCK})


def test_a_codons_key_setting_is_the_only_variable_it_reads() -> None:
    options = ProviderOptions(api_key_env="MY_KEY")
    assert route("openai", "gpt-5.2", {"MY_KEY": "m", "OPENAI_API_KEY": "o"},
                 options).key_variable == "MY_KEY"
    with pytest.raises(CredentialsError, match=r"needs MY_KEY"):
        route("openai", "gpt-5.2", {"OPENAI_API_KEY": "o"}, options)


def test_the_module_imports_no_llm_client() -> None:
    probe = ("import sys, hankweave.providers; print(sorted(m for m in sys.modules"
             " if m.split('.')[0] in ('litellm', 'openai', 'anthropic', 'httpx')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_a_non_anthropic_bedrock_model_reaches_litellm_as_bedrock() -> None:
    """Issue 36 item 5: litellm's Bedrock prefix is ``bedrock``, not our ``amazon-bedrock``."""
    found = route("amazon-bedrock", "meta.llama3-1-70b-instruct-v1:0", {})
    assert found.model == "bedrock/meta.llama3-1-70b-instruct-v1:0"
    assert found.display == "amazon-bedrock/meta.llama3-1-70b-instruct-v1:0"
