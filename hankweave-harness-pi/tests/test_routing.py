"""Which models run here, how they are called, and that validating them stays light."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hankweave.api import get_registry
from hankweave_harness_pi.providers import CredentialsError, ProviderOptions, route


@pytest.mark.parametrize(("spec", "full_id"), [
    ("gpt-5.2", "openai/gpt-5.2"),
    ("gemini-2.5-flash", "google/gemini-2.5-flash"),
    ("pi/deepseek/deepseek-chat", "deepseek/deepseek-chat"),
    ("pi/google/gemini-2.5-flash", "google/gemini-2.5-flash"),
    ("pi/anthropic/claude-haiku-4-5", "anthropic/claude-haiku-4-5"),
    ("openrouter/moonshotai/kimi-k2", "openrouter/moonshotai/kimi-k2"),
    ("pi/local/qwen3-coder", "local/qwen3-coder"),
])
def test_pi_spellings_and_non_anthropic_models_run_on_pi(spec: str, full_id: str) -> None:
    registry = get_registry()
    resolved = registry.resolve_model(spec)
    assert resolved.full_id == full_id
    assert registry.select_harness(resolved).name == "pi"


def test_plain_anthropic_models_stay_on_claude() -> None:
    registry = get_registry()
    assert registry.provider_for(registry.resolve_model("sonnet")).harness == "claude"


@pytest.mark.parametrize(("provider", "model_id", "env", "expected"), [
    ("openai", "gpt-5.2", {"OPENAI_API_KEY": "k"}, ("openai/gpt-5.2", None, "OPENAI_API_KEY")),
    ("google", "gemini-2.5-flash", {"GEMINI_API_KEY": "k"},
     ("gemini/gemini-2.5-flash", None, "GEMINI_API_KEY")),
    ("google", "gemini-2.5-flash", {"GOOGLE_API_KEY": "k"},
     ("gemini/gemini-2.5-flash", None, "GOOGLE_API_KEY")),
    ("moonshotai", "kimi-k2", {"OPENROUTER_API_KEY": "k"},
     ("openrouter/moonshotai/kimi-k2", None, "OPENROUTER_API_KEY")),
    ("openai", "gpt-5.2", {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
     ("openai/gpt-5.2", "http://127.0.0.1:9/v1", "OPENAI_API_KEY")),
])
def test_routes_keys_and_endpoints(provider: str, model_id: str, env: dict[str, str],
                                   expected: tuple[str, str | None, str]) -> None:
    found = route(provider, model_id, env)
    assert (found.model, found.api_base, found.key_variable) == expected


def test_a_local_openai_compatible_server_needs_no_key() -> None:
    found = route("local", "qwen3-coder", {}, ProviderOptions(
        api_base="http://127.0.0.1:8000/v1", protocol="openai"))
    assert (found.model, found.api_base, found.api_key) == (
        "openai/qwen3-coder", "http://127.0.0.1:8000/v1", None)


def test_a_missing_key_names_the_variable_to_set() -> None:
    with pytest.raises(CredentialsError, match=r"needs OPENROUTER_API_KEY.*HANKWEAVE_"):
        route("openrouter", "x/y", {})


def test_the_mock_provider_takes_every_model() -> None:
    env = {"HANKWEAVE_MOCK_PROVIDER_URL": "http://127.0.0.1:7", "OPENAI_API_KEY": "m",
           "ANTHROPIC_API_KEY": "m"}
    assert route("google", "gemini-2.5-flash", env).model == "openai/gemini-2.5-flash"
    assert route("google", "gemini-2.5-flash", env).api_base == "http://127.0.0.1:7/v1"
    assert route("anthropic", "claude-haiku-4-5", env).api_base == "http://127.0.0.1:7"


def test_under_the_proxy_every_model_routes_through_it_and_one_that_cannot_is_named() -> None:
    from hankweave_harness_pi.harness import _warn_if_around_the_proxy

    proxy = "http://127.0.0.1:8"
    env = {"HANKWEAVE_MOCK_PROVIDER_URL": "http://127.0.0.1:7", "HANKWEAVE_PROXY_URL": proxy,
           "OPENAI_API_KEY": "m", "ANTHROPIC_API_KEY": "m"}
    assert route("google", "gemini-2.5-flash", env).api_base == f"{proxy}/openai"
    assert route("anthropic", "claude-haiku-4-5", env).api_base == f"{proxy}/anthropic"

    warned: list[str] = []

    class Context:
        def warn(self, message: str) -> None:
            warned.append(message)

    direct = {"HANKWEAVE_PROXY_URL": proxy, "OPENAI_BASE_URL": f"{proxy}/openai",
              "OPENAI_API_KEY": "k", "GEMINI_API_KEY": "k"}
    _warn_if_around_the_proxy(route("openai", "gpt-5.2", direct), direct,
                              Context())  # type: ignore[arg-type]
    assert warned == []
    local = route("local", "qwen3-coder", direct, ProviderOptions(
        api_base="http://127.0.0.1:8000/v1", protocol="openai"))
    _warn_if_around_the_proxy(local, direct, Context())  # type: ignore[arg-type]
    _warn_if_around_the_proxy(route("google", "gemini-2.5-flash", direct), direct,
                              Context())  # type: ignore[arg-type]
    assert [message.split(" is called")[0] for message in warned] == [
        "Model local/qwen3-coder", "Model google/gemini-2.5-flash"]


def test_validating_pi_models_never_imports_litellm(tmp_path: Path) -> None:
    hank = tmp_path / "hank.json"
    hank.write_text(json.dumps({"hank": [
        {"id": f"c{i}", "name": f"C{i}", "model": spec, "continuationMode": "fresh",
         "promptText": "x"} for i, spec in enumerate(
            ["gpt-5.2", "pi/deepseek/deepseek-chat", "pi/google/gemini-2.5-flash"])]}))
    probe = ("import sys; from hankweave.cli import main; sys.argv = ['hankweave', 'validate',"
             f" {str(hank)!r}]\ntry:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             "print('LITELLM=' + str('litellm' in sys.modules), 'CODE=' + str(code))")
    # The keys let the preflight look up every route (as a codon will), still without litellm.
    keys = {"OPENAI_API_KEY": "sk-o", "DEEPSEEK_API_KEY": "sk-d", "GEMINI_API_KEY": "sk-g"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, **keys}, timeout=60, check=False)
    assert "LITELLM=False CODE=0" in done.stdout, done.stdout + done.stderr
