"""A plugin's trigger type and sentinel kind, run by the runtime end to end (no LLM involved).

The plugin module is ``tests.sentinel_test_plugins``: the ``every-nth`` trigger and the
``tally`` kind, loaded through ``HANKWEAVE_PLUGIN_MODULES`` like any plugin.
"""

from __future__ import annotations

from typing import Any

import pytest

from hankweave.app.preflight import PreflightError
from hankweave.config.hank import CodonSentinel
from hankweave.sentinels.config import SentinelConfigLoader, SentinelLoadError
from tests.runtime_harness import Project, codon
from tests.sentinel_test_plugins import EveryNthTrigger, TallySentinel

PLUGINS = "hankweave.testing.fake_harness,hankweave.testing.memory_checkpoints," \
          "tests.sentinel_test_plugins"


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    project.env["HANKWEAVE_PLUGIN_MODULES"] = PLUGINS
    return project


def tally(sentinel_id: str = "tally", **fields: Any) -> dict[str, Any]:
    return {"id": sentinel_id, "name": "Tally", "kind": "tally",
            "trigger": {"type": "every-nth", "n": 2, "of": "state.transition"},
            "execution": {"strategy": "immediate"}, **fields}


def attached(config: dict[str, Any], **settings: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"sentinelConfig": config}
    if settings:
        entry["settings"] = settings
    return entry


def test_a_plugin_trigger_and_kind_run_during_their_codon(project):
    project.write_hank([codon("a", sentinels=[attached(tally(options={"label": "changes"}))]),
                        codon("b")])

    outcome = project.run({"a": {"messages": 2}, "b": {"messages": 2}})

    assert outcome.code == 0
    (loaded,) = outcome.of_type("sentinel.loaded")
    assert loaded["triggerType"] == "every-nth"
    assert loaded["model"] == "tally"  # a kind without a model shows its name
    outputs = outcome.of_type("sentinel.output")
    assert outputs, "the tally sentinel never fired"
    assert all(o["content"].endswith("2 changes (state.transition)") for o in outputs)
    assert [o["triggerNumber"] for o in outputs] == list(range(1, len(outputs) + 1))
    # Every output went to the default log file, each after the join string.
    (log,) = (project.hankweave_dir / "sentinels" / "outputs" / "tally").glob("tally-a-*.md")
    assert log.read_text().count("\n---\n") == len(outputs)
    # Costs in the record, apart from the codon's own.
    record = outcome.record("a")
    (state,) = record.sentinels.executed
    assert state.total_triggers == len(outputs)
    assert state.total_cost == pytest.approx(0.01 * len(outputs))
    assert record.sentinels.total_cost == pytest.approx(0.01 * len(outputs))
    assert state.status == "unloaded" and state.unload_reason == "codon-complete"
    assert record.final_cost != record.sentinels.total_cost
    # Unloaded with its codon: nothing of it during b.
    events = outcome.events
    unloaded = next(i for i, e in enumerate(events) if e["type"] == "sentinel.unloaded")
    b_started = next(i for i, e in enumerate(events) if e["type"] == "codon.started"
                     and e["data"]["codonId"] == "b")
    assert unloaded < b_started
    assert not any(e["type"].startswith("sentinel.") for e in events[b_started:])
    assert outcome.record("b").sentinels is None


def test_failures_in_a_row_unload_the_sentinel_and_the_codon_completes(project):
    config = tally(options={"failFirst": 5}, errorHandling={"maxConsecutiveFailures": 2},
                   trigger={"type": "every-nth", "n": 1, "of": "state.transition"})
    project.write_hank([codon("a", sentinels=[attached(config)])])

    outcome = project.run({"a": {"messages": 3}})

    assert outcome.code == 0 and outcome.statuses() == [("a", "completed")]
    errors = outcome.of_type("sentinel.error")
    assert [e["message"] for e in errors] == ["failure 1 on purpose",
                                                      "failure 2 on purpose"]
    (unloaded,) = outcome.of_type("sentinel.unloaded")
    assert unloaded["reason"] == "consecutive-failures"
    assert not outcome.of_type("sentinel.output")
    (state,) = outcome.record("a").sentinels.executed
    assert (state.total_triggers, state.status, state.unload_reason) == (
        2, "unloaded", "consecutive-failures")


def test_a_debounced_batch_is_flushed_before_the_codon_completes(project):
    config = tally(trigger={"type": "event", "on": ["state.transition"]},
                   execution={"strategy": "debounce", "milliseconds": 300000})
    project.write_hank([codon("a", sentinels=[attached(config)])])

    outcome = project.run({"a": {"messages": 2}})

    # The whole codon's transitions in one trigger, then (second drain) the final transition.
    first, last = outcome.of_type("sentinel.output")
    assert first["eventCount"] > 3 and last["eventCount"] == 1
    transitions = [e["transition"]["data"] for e in outcome.of_type("state.transition")
                   if e["transitionType"] == "CodonTransitioned"]
    assert [(t["from"], t["to"]) for t in transitions][-2:] == [
        ("running", "completing-sentinels"), ("completing-sentinels", "completed")]
    output_at = next(i for i, e in enumerate(outcome.events) if e["type"] == "sentinel.output")
    completed_at = next(i for i, e in enumerate(outcome.events) if e["type"] == "codon.completed")
    assert output_at < completed_at


def test_a_sentinel_on_codon_completed_runs_in_the_second_drain(project):
    config = tally(trigger={"type": "event", "on": ["codon.completed"]})
    project.write_hank([codon("a", sentinels=[attached(config)])])

    outcome = project.run({"a": {"messages": 1}})

    (output,) = outcome.of_type("sentinel.output")
    assert output["content"] == "#1: 1 events (codon.completed)"
    # Recorded although the codon had already finished.
    assert outcome.record("a").sentinels.total_cost == pytest.approx(0.01)


def test_a_config_a_plugin_trigger_rejects_stops_the_run_before_it_starts(project):
    bad = tally(trigger={"type": "every-nth", "n": 0})
    project.write_hank([codon("a", sentinels=[attached(bad)])])

    with pytest.raises(PreflightError, match=r"trigger \(every-nth\): n must be a positive"):
        project.run({"a": {"messages": 1}})


def test_a_plugin_trigger_with_a_bad_key_is_reported_as_a_load_failure_of_its_sentinel(tmp_path):
    entry = CodonSentinel.model_validate(
        attached(tally(trigger={"type": "every-nth", "n": 0})), by_alias=True, by_name=False)
    loader = SentinelConfigLoader(triggers={"every-nth": EveryNthTrigger},
                                  kinds={"tally": TallySentinel})

    result = loader.load([entry], tmp_path, codon_id="a")

    assert result.configs == []
    assert result.errors == [SentinelLoadError(
        "inline:tally", "trigger (every-nth): n must be a positive integer", False)]


def test_an_unknown_key_of_a_plugin_trigger_is_reported_at_that_key(tmp_path):
    entry = CodonSentinel.model_validate(
        attached(tally(trigger={"type": "every-nth", "n": 2, "every": 3})),
        by_alias=True, by_name=False)
    loader = SentinelConfigLoader(triggers={"every-nth": EveryNthTrigger},
                                  kinds={"tally": TallySentinel})

    (error,) = loader.load([entry], tmp_path, codon_id="a").errors

    assert error.error == ('trigger (every-nth): every: Unrecognized field "every".'
                           " Valid fields are: type, n, of.")


def test_a_required_sentinel_that_cannot_start_fails_the_codon(project):
    required = attached(tally(options={"failLoad": True}), failCodonIfNotLoaded=True)
    project.write_hank([codon("a", sentinels=[required]), codon("b")])

    outcome = project.run({"a": {"messages": 1}, "b": {"messages": 1}})

    assert outcome.statuses() == [("a", "failed")]
    reason = outcome.record("a").failure_reason
    assert reason.type == "sentinel-load-failure" and reason.retriable is False
    assert reason.sentinel_refs == ["inline:tally"]
    (error,) = [e for e in outcome.of_type("error") if e.get("code")]
    assert error["code"] == "SENTINEL_LOAD_FAILURE" and error["fatal"] is True
    assert "the tally service is not available" in error["message"]


def test_an_optional_sentinel_that_cannot_start_is_reported_and_skipped(project):
    project.write_hank([codon("a", sentinels=[attached(tally(options={"failLoad": True})),
                                              attached(tally("other"))])])

    outcome = project.run({"a": {"messages": 2}})

    assert outcome.statuses() == [("a", "completed")]
    (warning,) = [e for e in outcome.of_type("error") if e.get("code")]
    assert warning["severity"] == "warning"
    assert [e["sentinelId"] for e in outcome.of_type("sentinel.loaded")] == ["other"]


def test_options_a_kind_rejects_stop_the_run_before_it_starts(project):
    project.write_hank([codon("a", sentinels=[attached(tally(options={"colour": "red"}))])])

    with pytest.raises(PreflightError, match=r'options\.colour: Unrecognized field "colour"'):
        project.run({"a": {"messages": 1}})


def test_a_kinds_failures_are_sentinel_failed_and_a_bad_error_type_is_its_bug(project):
    plain = tally("plain", options={"failFirst": 1},
                  trigger={"type": "event", "on": ["codon.completed"]})
    buggy = tally("buggy", options={"failFirst": 1, "failWith": "command-failed"},
                  trigger={"type": "event", "on": ["codon.completed"]})
    project.write_hank([codon("a", sentinels=[attached(plain), attached(buggy)])])

    outcome = project.run({"a": {"messages": 1}})

    assert outcome.code == 0 and outcome.statuses() == [("a", "completed")]
    errors = {e["sentinelId"]: e for e in outcome.of_type("sentinel.error")}
    assert errors["plain"]["errorType"] == "sentinel-failed"
    assert errors["plain"]["message"] == "failure 1 on purpose"
    # A plugin that names an error type the catalogue does not know fails its trigger, and
    # the drain does not hang on it.
    assert errors["buggy"]["errorType"] == "sentinel-failed"
    assert errors["buggy"]["message"].startswith(
        "ValueError: unknown sentinel error type 'command-failed'")


def test_a_kind_that_crashes_while_loading_is_a_load_failure_not_a_crash(project):
    project.write_hank([codon("a", sentinels=[attached(tally(options={"crashLoad": True}))])])

    outcome = project.run({"a": {"messages": 1}})

    assert outcome.code == 0 and outcome.statuses() == [("a", "completed")]
    (warning,) = [e for e in outcome.of_type("error") if e.get("code")]
    assert "RuntimeError: the tally kind has a bug" in warning["message"]
    assert outcome.of_type("sentinel.loaded") == []
