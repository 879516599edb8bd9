"""Settings of Hankweave 0.10.0 whose mechanism hankweave does not have are refused, naming the
reason and the layer that set them; the values that describe what hankweave does are accepted
(docs/differences.md, "Settings")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hankweave.config.hank import HankFile
from hankweave.config.run_options import settings_layer
from hankweave.config.settings import (
    UNSUPPORTED_SETTINGS,
    ResolvedSettings,
    UnsupportedSettingsError,
    resolve_settings,
    runtime_env_variable,
    settings_env,
)

REFUSED: dict[str, Any] = {
    "logParsingInterval": 1000,
    "sentinel.enablePersistence": False,
    "sentinel.healthCheckGracePeriodMs": 2000,
    "sentinel.waitForAllHealthChecks": True,
    "telemetry.enabled": True,
    "telemetry.endpoint": "https://telemetry.example.com",
    "telemetry.debug": True,
}
"""A refused value of each unsupported setting (Hankweave 0.10.0's defaults included: a value
that asks for a mechanism hankweave lacks is refused even when it was the original's
default)."""

ACCEPTED: dict[str, Any] = {
    "sentinel.enablePersistence": True,
    "sentinel.waitForAllHealthChecks": False,
    "telemetry.enabled": False,
    "telemetry.debug": False,
}
"""The values that say what hankweave does anyway."""


def nested(key: str, value: Any) -> dict[str, Any]:
    *sections, last = key.split(".")
    data: dict[str, Any] = {last: value}
    for section in reversed(sections):
        data = {section: data}
    return data


def resolve(tmp_path: Path, *, file: dict[str, Any] | None = None,
            env: dict[str, str] | None = None, cli: dict[str, Any] | None = None,
            overrides: dict[str, Any] | None = None) -> ResolvedSettings:
    if file is not None:
        (tmp_path / "hankweave.json").write_text(json.dumps(file))
    hank = None if overrides is None else HankFile.model_validate(
        {"hank": [{"id": "a", "name": "A", "model": "sonnet", "continuationMode": "fresh",
                   "promptText": "x"}], "overrides": overrides})
    return resolve_settings(cwd=tmp_path, hank=hank, env=env or {}, cli=cli or {})


def refusal(tmp_path: Path, **layers: Any) -> list[str]:
    with pytest.raises(UnsupportedSettingsError) as raised:
        resolve(tmp_path, **layers)
    return [str(issue) for issue in raised.value.errors]


def test_every_unsupported_setting_has_a_refused_sample():
    assert sorted(REFUSED) == sorted(rule.key for rule in UNSUPPORTED_SETTINGS)


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_refused_value_in_hankweave_json_names_the_file_key_and_reason(key, tmp_path):
    (issue,) = refusal(tmp_path, file=nested(key, REFUSED[key]))

    rule = next(rule for rule in UNSUPPORTED_SETTINGS if rule.key == key)
    assert issue.startswith(f"hankweave.json:{key}: {key} {json.dumps(REFUSED[key])} is refused")
    assert rule.reason in issue


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_refused_value_in_the_environment_names_the_variable(key, tmp_path):
    variable = runtime_env_variable(key)
    text = str(REFUSED[key]).lower()

    (issue,) = refusal(tmp_path, env={variable: text})

    assert issue.startswith(f"{variable}: {key} ")


@pytest.mark.parametrize("key", sorted(ACCEPTED))
def test_a_value_that_states_what_hankweave_does_is_accepted(key, tmp_path):
    resolved = resolve(tmp_path, file=nested(key, ACCEPTED[key]))

    assert resolved.warnings == []


def test_the_proxy_is_a_setting_now_and_every_layer_reaches_it(tmp_path):
    assert resolve(tmp_path).settings.without_proxy is True  # off by default, as the original
    assert resolve(tmp_path, cli=settings_layer({"without_proxy": False})
                   ).settings.without_proxy is False  # --proxy
    assert resolve(tmp_path, file={"withoutProxy": False}).settings.without_proxy is False
    # The flag beats the file either way.
    assert resolve(tmp_path, file={"withoutProxy": False},
                   cli=settings_layer({"without_proxy": True})).settings.without_proxy is True


def test_sentinel_settings_in_the_hanks_overrides_are_refused_with_their_json_path(tmp_path):
    (issue,) = refusal(tmp_path, overrides={"sentinel": {"healthCheckGracePeriodMs": 500}})

    assert issue.startswith("overrides.sentinel.healthCheckGracePeriodMs: ")
    assert "no provider health checks" in issue


def test_every_refused_value_is_reported_at_once(tmp_path):
    issues = refusal(tmp_path, file={"logParsingInterval": 500, "telemetry": {"enabled": True}},
                     env={"HANKWEAVE_RUNTIME_LOG_PARSING_INTERVAL": "100"})

    assert [issue.split(":")[0] for issue in issues] == [
        "HANKWEAVE_RUNTIME_LOG_PARSING_INTERVAL", "hankweave.json"]


def test_telemetry_keys_outside_the_originals_schema_are_errors(tmp_path):
    (tmp_path / "hankweave.json").write_text(json.dumps({"telemetry": {"sampleRate": 1}}))

    with pytest.raises(Exception, match=r"telemetry\.sampleRate"):
        resolve(tmp_path)


def test_anthropic_base_url_becomes_the_agents_anthropic_base_url(tmp_path):
    settings = resolve(tmp_path, file={"anthropicBaseUrl": "http://127.0.0.1:4000"}).settings
    unset = tmp_path / "unset"
    unset.mkdir()

    assert settings_env(settings) == {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000"}
    assert settings_env(resolve(unset).settings) == {}


def test_anthropic_base_url_must_be_an_http_url(tmp_path):
    with pytest.raises(Exception, match="anthropicBaseUrl must be an http"):
        resolve(tmp_path, env={"HANKWEAVE_RUNTIME_ANTHROPIC_BASE_URL": "api.anthropic.com"})
