"""Run options are declared once (``hankweave.config.run_options``): the command line, the
settings layer, the run intent and its messages all come from the declaration."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hankweave.app.request import LaunchRequest
from hankweave.cli.replay_cmd import replay_command
from hankweave.cli.run_cmd import run_command
from hankweave.config.run_options import RECORDED_OPTIONS, RUN_OPTIONS, RunOption, settings_layer
from hankweave.config.settings import Settings, resolve_settings
from hankweave.execution.intent import GivenIntent, RunIntent, changes, merge_intent, reused

SAMPLES: dict[type, Any] = {float: 1.5, int: 7, str: "sonnet", bool: True}
KEY_SAMPLES: dict[str, Any] = {"anthropicBaseUrl": "http://127.0.0.1:9", "sandbox.mode": "required",
                               "withoutProxy": False}  # --proxy: the default is true
SETTING_OPTIONS = list(RUN_OPTIONS)
"""The options whose setting has a field: every one."""


def given(option: RunOption) -> Any:
    """What the command line hands over for the option given (a flag: its value)."""
    if option.flag_value is not None:
        return option.flag_value
    return KEY_SAMPLES.get(option.key, SAMPLES[option.value])


def resolved_value(settings: Settings, key: str) -> Any:
    data = settings.model_dump(by_alias=True)
    for part in key.split("."):
        data = data[part]
    return data


@pytest.mark.parametrize("option", SETTING_OPTIONS, ids=lambda option: option.flag)
def test_every_run_option_given_sets_its_setting_over_the_defaults(option, tmp_path: Path):
    cli = settings_layer({option.name: given(option)})
    settings = resolve_settings(cwd=tmp_path, hank=None, env={}, cli=cli).settings

    expected = given(option)
    if option.key == "outputDirectory":
        expected = tmp_path / "sonnet"
    assert resolved_value(settings, option.key) == expected
    assert resolved_value(Settings(), option.key) != expected


@pytest.mark.parametrize("option", RUN_OPTIONS, ids=lambda option: option.flag)
def test_an_option_not_given_leaves_the_lower_layers_alone(option):
    assert settings_layer({option.name: None}) == {}


def test_a_switch_turned_off_on_the_command_line_does_not_override_the_files():
    # --no-ignore-rig-failures drops a recorded "on"; it never forces hankweave.json's off.
    assert settings_layer({"ignore_rig_failures": False}) == {}
    assert settings_layer({"ignore_rig_failures": True}) == {"ignoreRigFailures": True}


def test_hankweave_run_help_lists_every_declared_option_and_marks_the_recorded_ones():
    text = CliRunner().invoke(run_command, ["--help"], terminal_width=200).output
    entries = {entry.split()[0].rstrip(","): " ".join(entry.split())
               for entry in re.split(r"\n  (?=-)", text.partition("Options:")[2])
               if entry.strip()}
    for option in RUN_OPTIONS:
        assert option.help in entries[option.flag]
        assert ("Kept for resumes with -e." in entries[option.flag]) == bool(option.recorded)


def test_hankweave_replay_takes_the_same_output_option():
    text = CliRunner().invoke(replay_command, ["--help"]).output
    assert "-o, --output DIR" in text


def test_a_launch_request_takes_run_options_by_name():
    request = LaunchRequest.of(hank="h", max_cost=2.5, options={"model": "haiku"})
    assert request.hank == "h"
    assert request.options == {"model": "haiku", "max_cost": 2.5}


@pytest.mark.parametrize("option", RECORDED_OPTIONS, ids=lambda option: option.flag)
def test_each_recorded_option_is_kept_reused_and_its_change_reported(option):
    value = given(option)
    recorded = merge_intent(None, GivenIntent(**{option.name: value}))
    data = json.loads(recorded.to_json_bytes())

    assert RunIntent.model_validate(data) == recorded
    assert reused(recorded, GivenIntent()) == [f"{option.recorded} {option.shown(value)}"]
    other = (not value) if option.value is bool else SAMPLES[option.value] * 2
    (line,) = changes(recorded, merge_intent(recorded, GivenIntent(**{option.name: other})))
    assert line.startswith(f"{option.recorded} ({option.flag}): {option.shown(value)} -> ")


def test_a_command_line_option_that_is_not_recorded_is_refused_by_the_intent():
    with pytest.raises(TypeError, match="port"):
        GivenIntent(port=8080)


def test_every_scalar_setting_of_the_file_is_settable_through_the_environment(tmp_path: Path):
    # The variables come from hankweave.json's schema: checkpoints.changeHints, once missing
    # from a hand-kept table, is one of them.
    resolved = resolve_settings(cwd=tmp_path, hank=None, cli={}, env={
        "HANKWEAVE_RUNTIME_CHECKPOINTS_CHANGE_HINTS": "false",
        "HANKWEAVE_RUNTIME_TELEMETRY_ENABLED": "no"})

    assert resolved.warnings == []
    assert resolved.settings.checkpoints.change_hints is False
