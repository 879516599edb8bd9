"""Settings resolution: layer precedence, env variables, model override, the agent env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hankweave.config import ConfigError, HankFile, Loop, RuntimeConfigValidationError, parse_hank
from hankweave.config.settings import (
    EnvironmentSettingsError,
    MissingEnvironmentError,
    Settings,
    agent_env,
    apply_model_override,
    check_required_env,
    effective_shim_idle_timeout,
    hankweave_passthrough,
    resolve_settings,
    runtime_env_variable,
)


def codon(**fields: Any) -> dict[str, Any]:
    return {
        "id": "write",
        "name": "Write",
        "promptText": "Write the report.",
        "model": "sonnet",
        "continuationMode": "fresh",
        **fields,
    }


def hank_with(**root: Any) -> HankFile:
    return parse_hank({"hank": [codon()], **root})


def write_runtime_config(cwd: Path, data: object) -> Path:
    path = cwd / "hankweave.json"
    path.write_text(json.dumps(data))
    return path


def resolve(
    cwd: Path,
    *,
    hank: HankFile | None = None,
    env: dict[str, str] | None = None,
    cli: dict[str, Any] | None = None,
) -> Settings:
    return resolve_settings(cwd=cwd, hank=hank, env=env or {}, cli=cli or {}).settings


# --- layers -----------------------------------------------------------------------------------


def test_without_any_layer_the_runtime_defaults_apply(tmp_path: Path) -> None:
    resolved = resolve_settings(cwd=tmp_path, hank=None, env={}, cli={})

    settings = resolved.settings
    assert (settings.port, settings.host, settings.autostart) == (0, "127.0.0.1", True)
    assert settings.show_costs is True
    assert settings.anthropic_base_url is None
    assert settings.data_hash_time_limit == 5000
    assert settings.idle_timeout == 0
    assert settings.shim_idle_timeout is None
    assert settings.ignore_rig_failures is False
    assert settings.budget.max_dollars is None
    assert settings.budget.allocation == "shared"
    assert (settings.checkpoints.backend, settings.checkpoints.keep_last_per_run) == ("git", 50)
    assert (settings.overwrite_output, settings.headless) == (False, False)
    assert settings.model_override is None
    assert resolved.warnings == []
    assert resolved.runtime_config_path is None


def test_hankweave_json_in_the_launch_directory_overrides_defaults(tmp_path: Path) -> None:
    path = write_runtime_config(tmp_path, {"port": 4242, "showCosts": False, "idleTimeout": 30})

    resolved = resolve_settings(cwd=tmp_path, hank=None, env={}, cli={})

    assert resolved.settings.port == 4242
    assert resolved.settings.show_costs is False
    assert resolved.settings.idle_timeout == 30
    assert resolved.runtime_config_path == path


def test_hank_overrides_beat_hankweave_json_and_sections_merge_deeply(tmp_path: Path) -> None:
    write_runtime_config(
        tmp_path,
        {
            "dataHashTimeLimit": 1000,
            "shimIdleTimeout": 60,
            "harnesses": {"claude": {"maxTurns": 5, "permissionMode": "plan"}},
        },
    )
    hank = hank_with(
        overrides={
            "dataHashTimeLimit": 9000,
            "shimIdleTimeout": 300,
            "harnesses": {"claude": {"maxTurns": 40}},
        }
    )

    settings = resolve(tmp_path, hank=hank)

    assert settings.data_hash_time_limit == 9000
    assert settings.shim_idle_timeout == 300
    assert settings.harnesses["claude"] == {"maxTurns": 40, "permissionMode": "plan"}


def test_environment_beats_hank_overrides(tmp_path: Path) -> None:
    hank = hank_with(overrides={"dataHashTimeLimit": 9000})

    settings = resolve(tmp_path, hank=hank, env={"HANKWEAVE_RUNTIME_DATA_HASH_TIME_LIMIT": "7000"})

    assert settings.data_hash_time_limit == 7000


def test_cli_options_beat_the_environment(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        env={"HANKWEAVE_RUNTIME_PORT": "5000", "HANKWEAVE_RUNTIME_AUTOSTART": "true"},
        cli={"port": 6000, "autostart": False},
    )

    assert settings.port == 6000
    assert settings.autostart is False


def test_none_in_a_higher_layer_never_overwrites_a_lower_one(tmp_path: Path) -> None:
    write_runtime_config(tmp_path, {"port": 4242, "checkpoints": {"changeHints": False}})

    settings = resolve(
        tmp_path, cli={"port": None, "checkpoints": {"changeHints": None}, "model": None}
    )

    assert settings.port == 4242
    assert settings.checkpoints.change_hints is False
    assert settings.model is None


def test_cli_only_settings_come_through(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"overwriteOutput": True, "headless": True, "port": 0})

    assert (settings.overwrite_output, settings.headless, settings.port) == (True, True, 0)


def test_output_directory_is_resolved_against_the_launch_directory(tmp_path: Path) -> None:
    write_runtime_config(tmp_path, {"outputDirectory": "out"})

    assert resolve(tmp_path).output_directory == tmp_path / "out"
    assert resolve(tmp_path, cli={"outputDirectory": Path("../cli-out")}).output_directory == (
        tmp_path.parent / "cli-out"
    )


def test_checkpoint_settings_come_from_hankweave_json(tmp_path: Path) -> None:
    write_runtime_config(tmp_path, {"checkpoints": {"keepLastPerRun": 5, "changeHints": False},
                                    "host": "0.0.0.0"})

    settings = resolve(tmp_path)

    assert (settings.checkpoints.backend, settings.checkpoints.keep_last_per_run) == ("git", 5)
    assert settings.checkpoints.change_hints is False
    assert settings.host == "0.0.0.0"


def test_resolved_settings_serialise_with_json_names(tmp_path: Path) -> None:
    dumped = resolve(tmp_path).model_dump(mode="json")

    assert dumped["dataHashTimeLimit"] == 5000
    assert dumped["checkpoints"] == {"backend": "git", "keepLastPerRun": 50, "changeHints": True}


# --- invalid hankweave.json -------------------------------------------------------------------


def test_invalid_json_in_hankweave_json_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hankweave.json"
    path.write_text('{"port": ')

    with pytest.raises(RuntimeConfigValidationError) as caught:
        resolve(tmp_path)

    assert str(path) in str(caught.value)


def test_invalid_settings_in_hankweave_json_are_an_error_naming_file_and_field(
    tmp_path: Path,
) -> None:
    path = write_runtime_config(tmp_path, {"port": "eighty", "colour": "blue"})

    with pytest.raises(RuntimeConfigValidationError) as caught:
        resolve(tmp_path)

    assert str(path) in str(caught.value)
    assert [issue.path for issue in caught.value.errors] == ["port", "colour"]


def test_invalid_cli_options_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Invalid command-line options"):
        resolve(tmp_path, cli={"budget": {"maxDollars": -1}})


# --- environment variables --------------------------------------------------------------------


def test_env_values_are_parsed_by_type(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        env={
            "HANKWEAVE_RUNTIME_SHOW_COSTS": "no",
            "HANKWEAVE_RUNTIME_AUTOSTART": "0",
            "HANKWEAVE_RUNTIME_IDLE_TIMEOUT": " 12 ",
            "HANKWEAVE_RUNTIME_MODEL": "opus",
        },
    )

    assert settings.show_costs is False
    assert settings.autostart is False
    assert settings.idle_timeout == 12
    assert settings.model == "opus"


def test_shim_idle_timeout_can_be_set_through_the_environment(tmp_path: Path) -> None:
    settings = resolve(tmp_path, env={"HANKWEAVE_RUNTIME_SHIM_IDLE_TIMEOUT": "240"})

    assert settings.shim_idle_timeout == 240


def test_sentinel_and_checkpoint_sections_can_be_set_through_the_environment(
    tmp_path: Path,
) -> None:
    settings = resolve(
        tmp_path,
        env={
            "HANKWEAVE_RUNTIME_SENTINEL_ENABLE_PERSISTENCE": "true",
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
        },
    )

    assert settings.checkpoints.backend == "memory"


def test_unknown_runtime_env_variable_is_a_warning_not_an_error(tmp_path: Path) -> None:
    resolved = resolve_settings(
        cwd=tmp_path,
        hank=None,
        env={"HANKWEAVE_RUNTIME_FOO": "1", "HANKWEAVE_RUNTIME_SENTINEL_BAR": "x"},
        cli={},
    )

    assert resolved.warnings == [
        "Ignoring environment variable HANKWEAVE_RUNTIME_FOO: it is not a runtime setting.",
        "Ignoring environment variable HANKWEAVE_RUNTIME_SENTINEL_BAR: it is not a runtime "
        "setting.",
    ]
    assert resolved.settings == Settings()


def test_budget_env_variable_warning_points_to_the_cli_flags(tmp_path: Path) -> None:
    resolved = resolve_settings(
        cwd=tmp_path, hank=None, env={"HANKWEAVE_RUNTIME_BUDGET_MAX_DOLLARS": "3"}, cli={}
    )

    assert "--max-cost" in resolved.warnings[0]
    assert resolved.settings.budget.max_dollars is None


def test_bad_env_values_are_errors_naming_every_variable(tmp_path: Path) -> None:
    env = {
        "HANKWEAVE_RUNTIME_AUTOSTART": "maybe",
        "HANKWEAVE_RUNTIME_PORT": "eighty",
        "HANKWEAVE_RUNTIME_IDLE_TIMEOUT": "300",
    }

    with pytest.raises(EnvironmentSettingsError) as caught:
        resolve(tmp_path, env=env)

    assert [issue.path for issue in caught.value.errors] == [
        "HANKWEAVE_RUNTIME_AUTOSTART",
        "HANKWEAVE_RUNTIME_IDLE_TIMEOUT",
        "HANKWEAVE_RUNTIME_PORT",
    ]
    assert 'got "maybe"' in str(caught.value)


def test_env_value_rejected_by_the_schema_names_its_variable(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentSettingsError) as caught:
        resolve(tmp_path, env={"HANKWEAVE_RUNTIME_SENTINEL_HEALTH_CHECK_GRACE_PERIOD_MS": "0"})

    (issue,) = caught.value.errors
    assert issue.path == "HANKWEAVE_RUNTIME_SENTINEL_HEALTH_CHECK_GRACE_PERIOD_MS"
    assert issue.message == "Input should be greater than 0 (got 0)"


def test_empty_env_value_counts_as_unset(tmp_path: Path) -> None:
    assert resolve(tmp_path, env={"HANKWEAVE_RUNTIME_PORT": ""}).port == 0


def test_env_variable_names_are_derived_from_setting_paths() -> None:
    assert runtime_env_variable("showCosts") == "HANKWEAVE_RUNTIME_SHOW_COSTS"
    assert (
        runtime_env_variable("sentinel.healthCheckGracePeriodMs")
        == "HANKWEAVE_RUNTIME_SENTINEL_HEALTH_CHECK_GRACE_PERIOD_MS"
    )


# --- model override and budgets ---------------------------------------------------------------


def test_model_from_any_layer_becomes_the_global_override(tmp_path: Path) -> None:
    write_runtime_config(tmp_path, {"model": "haiku"})
    hank = hank_with(overrides={"model": "opus"})

    assert resolve(tmp_path).model_override == "haiku"
    assert resolve(tmp_path, hank=hank).model_override == "opus"
    assert resolve(tmp_path, hank=hank, cli={"model": "sonnet"}).model_override == "sonnet"


def test_model_override_replaces_every_codon_model_including_loop_codons() -> None:
    hank = parse_hank(
        {
            "hank": [
                codon(id="a", model="haiku"),
                {
                    "type": "loop",
                    "id": "L",
                    "name": "Loop",
                    "terminateOn": {"type": "iterationLimit", "limit": 2},
                    "codons": [codon(id="b", model="opus")],
                },
            ]
        }
    )

    overridden = apply_model_override(hank, "sonnet")

    first, loop = overridden.hank
    assert first.model == "sonnet"
    assert isinstance(loop, Loop)
    assert loop.codons[0].model == "sonnet"
    assert hank.hank[0].model == "haiku"  # the original is untouched
    assert apply_model_override(hank, None) is hank


def test_budget_ceiling_is_the_smaller_of_hankweave_json_and_overrides(tmp_path: Path) -> None:
    write_runtime_config(tmp_path, {"budget": {"maxDollars": 10, "maxTimeSeconds": 100}})
    hank = hank_with(
        overrides={
            "budget": {
                "maxDollars": 5,
                "maxTimeSeconds": 600,
                "allocation": "proportional",
                "shares": {"write": 0.5},
                "onExceeded": "fail",
            }
        }
    )

    budget = resolve(tmp_path, hank=hank).budget

    assert (budget.max_dollars, budget.max_time_seconds) == (5, 100)
    assert (budget.allocation, budget.shares, budget.on_exceeded) == (
        "proportional",
        {"write": 0.5},
        "fail",
    )


def test_cli_budget_replaces_the_ceiling_even_when_larger(tmp_path: Path) -> None:
    write_runtime_config(tmp_path, {"budget": {"maxDollars": 10}})
    hank = hank_with(overrides={"budget": {"maxDollars": 5}})

    budget = resolve(tmp_path, hank=hank, cli={"budget": {"maxDollars": 50}}).budget

    assert budget.max_dollars == 50


def test_shim_idle_timeout_prefers_codon_then_settings_then_harness(tmp_path: Path) -> None:
    plain = parse_hank({"hank": [codon()]}).hank[0]
    own = parse_hank({"hank": [codon(shimIdleTimeout=30)]}).hank[0]
    configured = resolve(tmp_path, cli={"shimIdleTimeout": 90})

    assert effective_shim_idle_timeout(own, configured.shim_idle_timeout, 180) == 30
    assert effective_shim_idle_timeout(plain, configured.shim_idle_timeout, 180) == 90
    assert effective_shim_idle_timeout(plain, Settings().shim_idle_timeout, 180) == 180


# --- agent environment and requirements -------------------------------------------------------


def test_hankweave_prefixed_variables_reach_agents_without_the_prefix() -> None:
    env = {"PATH": "/bin", "HANKWEAVE_API_TOKEN": "t0k", "API_TOKEN": "old"}

    result = agent_env(env)

    assert result["API_TOKEN"] == "t0k"
    assert result["PATH"] == "/bin"


def test_unset_value_removes_the_variable_from_agents() -> None:
    result = agent_env({"SECRET": "s", "HANKWEAVE_SECRET": "unset"})

    assert "SECRET" not in result


def test_runtime_sentinel_and_control_variables_are_not_passed_through() -> None:
    env = {
        "HANKWEAVE_RUNTIME_PORT": "1",
        "HANKWEAVE_SENTINEL_OPENAI_API_KEY": "k",
        "HANKWEAVE_HOME": "/h",
        "HANKWEAVE_LOAD_PLUGINS": "",
        "HANKWEAVE_DISABLE_PLUGINS": "x",
        "HANKWEAVE_TRACE_PLUGINS": "1",
        "HANKWEAVE_STRICT_PLUGINS": "1",
        "HANKWEAVE_REPLAY_MAX_DELAY_MS": "5",
        "HANKWEAVE_REPLAY_MAX_BYTES": "5",
        "HANKWEAVE_REPLAY_MAX_MEMBERS": "5",
        "HANKWEAVE_REPLAY_MAX_RATIO": "5",
    }

    passthrough = hankweave_passthrough(env)

    assert passthrough.set == {}
    assert passthrough.unset == frozenset()
    assert set(agent_env(env)) == set(env)


def test_codon_env_wins_over_the_passthrough() -> None:
    result = agent_env(
        {"HANKWEAVE_MODE": "a", "HANKWEAVE_GONE": "unset"}, {"MODE": "b", "GONE": "c"}
    )

    assert (result["MODE"], result["GONE"]) == ("b", "c")


def test_required_env_is_satisfied_by_the_variable_or_its_prefixed_form() -> None:
    hank = hank_with(requirements={"env": ["A_KEY", "B_KEY"]})

    check_required_env(hank, {"A_KEY": "a", "HANKWEAVE_B_KEY": "b"})


def test_missing_required_env_names_every_missing_variable() -> None:
    hank = hank_with(requirements={"env": ["A_KEY", "B_KEY", "C_KEY"]})

    with pytest.raises(MissingEnvironmentError) as caught:
        check_required_env(hank, {"A_KEY": "", "B_KEY": "b", "HANKWEAVE_B_KEY": "unset"})

    assert caught.value.missing == ["A_KEY", "B_KEY", "C_KEY"]
    assert str(caught.value).startswith(
        "Missing required environment variables: A_KEY, B_KEY, C_KEY\n"
        "These are declared in the hank's requirements.env field."
    )
