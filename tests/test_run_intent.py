"""The run's intent (``.hankweave/run-intent.json``): where and how agents run belongs to the
execution, and a resume reuses it unless told otherwise (hankweave.execution.intent)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hankweave.app.launch import launch
from hankweave.app.request import LaunchError, LaunchRequest
from hankweave.execution.intent import (
    GivenIntent,
    RecordedScript,
    RunIntent,
    RunIntentError,
    changes,
    load_run_intent,
    merge_intent,
    reused,
    save_run_intent,
    script_copy,
)
from hankweave.execution.layout import ExecutionLayout
from hankweave.registry import get_registry
from hankweave.testing.mock_provider import MockProviderLog
from tests.runtime_harness import Project, codon

SCRIPT = RecordedScript(source="/hanks/script.json", sha256="a" * 64)
RECORDED = RunIntent(mock_provider=SCRIPT, model="haiku", max_cost=2.5, shim_idle_timeout=60,
                     ignore_rig_failures=True)


# ----- merging a command line with what the execution recorded -----

def test_a_resume_given_nothing_keeps_every_recorded_option():
    assert merge_intent(RECORDED, GivenIntent()) == RECORDED
    assert reused(RECORDED, GivenIntent()) == [
        "mock provider /hanks/script.json", "model override haiku", "dollar ceiling $2.5",
        "agent idle timeout 60 s", "ignore rig failures on"]
    assert changes(RECORDED, RECORDED) == []


def test_an_option_given_again_replaces_the_recorded_one_and_says_so():
    other = RecordedScript(source="/hanks/other.json", sha256="b" * 64)
    given = GivenIntent(mock_provider=other, model="sonnet", max_time=600)

    merged = merge_intent(RECORDED, given)

    assert merged == RECORDED.model_copy(update={"mock_provider": other, "model": "sonnet",
                                                 "max_time": 600})
    assert changes(RECORDED, merged) == [
        "mock provider (--mock-provider): /hanks/script.json -> /hanks/other.json",
        "model override (-m): haiku -> sonnet",
        "time ceiling (--max-time): none -> 600 s"]
    assert reused(RECORDED, given) == ["dollar ceiling $2.5", "agent idle timeout 60 s",
                                       "ignore rig failures on"]


def test_the_same_script_path_edited_shows_both_digests():
    edited = RecordedScript(source=SCRIPT.source, sha256="c" * 64)

    (line,) = changes(RECORDED, merge_intent(RECORDED, GivenIntent(mock_provider=edited)))

    assert line == (f"mock provider (--mock-provider): {SCRIPT.source} (sha256 aaaaaaaaaaaa)"
                    f" -> {SCRIPT.source} (sha256 cccccccccccc)")


def test_only_the_explicit_flags_drop_the_mock_provider_and_ignoring_rig_failures():
    given = GivenIntent(no_mock_provider=True, ignore_rig_failures=False)

    merged = merge_intent(RECORDED, given)

    assert (merged.mock_provider, merged.ignore_rig_failures) == (None, False)
    assert merged.model == "haiku"
    assert changes(RECORDED, merged) == [
        "mock provider (--mock-provider): /hanks/script.json -> none",
        "ignore rig failures (--ignore-rig-failures): on -> off"]
    assert reused(RECORDED, given) == ["model override haiku", "dollar ceiling $2.5",
                                       "agent idle timeout 60 s"]


def test_the_mock_provider_and_leaving_it_together_are_refused():
    with pytest.raises(RunIntentError, match="contradict"):
        merge_intent(None, GivenIntent(mock_provider=SCRIPT, no_mock_provider=True))


def test_a_fresh_execution_takes_the_command_line_alone():
    assert merge_intent(None, GivenIntent(model="sonnet")) == RunIntent(model="sonnet")


# ----- the file -----

def test_the_intent_and_the_script_copy_are_written_private_and_read_back(tmp_path):
    layout = ExecutionLayout(tmp_path)
    layout.hankweave_dir.mkdir()
    content = b'{"rules": [], "default": {"text": "ok"}}'
    intent = RECORDED.model_copy(update={
        "mock_provider": RecordedScript.of(tmp_path / "s.json", content)})

    save_run_intent(layout, intent, content)

    assert load_run_intent(layout) == intent
    assert script_copy(layout, intent).read_bytes() == content
    for path in (layout.run_intent_file, layout.mock_provider_script):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(layout.run_intent_file.read_text()) == {
        "version": 1, "mockProvider": {"source": str(tmp_path / "s.json"),
                                       "sha256": intent.mock_provider.sha256},
        "model": "haiku", "maxCost": 2.5, "shimIdleTimeout": 60, "ignoreRigFailures": True,
        "allowCommands": False}


def test_no_file_means_nothing_recorded(tmp_path):
    assert load_run_intent(ExecutionLayout(tmp_path)) is None


@pytest.mark.parametrize("text", ["{not json", '{"version": 1, "harness": "claude"}',
                                  '{"version": 2}'])
def test_an_unreadable_or_unknown_intent_is_an_error_naming_the_file(tmp_path, text):
    layout = ExecutionLayout(tmp_path)
    layout.hankweave_dir.mkdir()
    layout.run_intent_file.write_text(text)

    with pytest.raises(RunIntentError, match=r"run-intent\.json.*--mock-provider SCRIPT"):
        load_run_intent(layout)


def test_a_missing_or_changed_script_copy_is_an_error_with_both_ways_out(tmp_path):
    layout = ExecutionLayout(tmp_path)
    layout.hankweave_dir.mkdir()
    with pytest.raises(RunIntentError, match=r"cannot read.*--no-mock-provider"):
        script_copy(layout, RECORDED)
    save_run_intent(layout, RECORDED, b"{}")
    with pytest.raises(RunIntentError, match="changed since it was recorded"):
        script_copy(layout, RECORDED)


# ----- through the launch: a dry run that fails, resumed -----

FAILING_B = {"rules": [
    {"name": "a", "when": {"lastUserMessage": "Do a."}, "reply": {"text": "Done a."}},
    {"name": "b", "when": {"lastUserMessage": "Do b."},
     "reply": {"error": {"kind": "invalid_request"}}}]}


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    project.env["HANKWEAVE_PLUGIN_MODULES"] = (
        "tests.http_agent,hankweave.testing.memory_checkpoints")
    project.write_hank([codon("a", model="sonnet"), codon("b", model="sonnet")])
    (project.root / "script.json").write_text(json.dumps(FAILING_B))
    return project


def run(project: Project, notices: list[str], **options) -> int:
    return launch(LaunchRequest.of(hank=str(project.hank_dir), data=str(project.data),
                                cwd=project.root, env=project.env, headless=True,
                                notify=notices.append, **options))


def managed_execution(project: Project) -> ExecutionLayout:
    (intent,) = Path(project.env["HANKWEAVE_HOME"]).rglob("run-intent.json")
    return ExecutionLayout(intent.parent.parent)


def test_auto_mode_resumes_with_the_recorded_mock_and_model_and_leaves_only_when_told(
        project):
    haiku = get_registry().resolve_model("haiku").model_id
    notices: list[str] = []
    assert run(project, notices, mock_provider="script.json", model="haiku") == 1
    layout = managed_execution(project)
    log = MockProviderLog(layout.mock_provider_log)
    assert [(r.rule, r.model) for r in log.requests()] == [
        ("rules[0] (a)", haiku), ("rules[1] (b)", haiku)]

    # Without -e, from a project whose script is gone: the execution's copy still plays.
    (project.root / "script.json").unlink()
    assert run(project, notices) == 1

    assert [(r.rule, r.model, r.entry["auth"]) for r in log.requests()[2:]] == [
        ("rules[1] (b)", haiku, "mock")]
    assert any(n.startswith("[MOCK] Resuming with the options recorded") for n in notices)

    assert run(project, notices, no_mock_provider=True) == 1
    assert len(log.requests()) == 3  # the agent got no mock endpoint: nothing reached it
    recorded = load_run_intent(layout)
    assert recorded is not None
    assert (recorded.mock_provider, recorded.model) == (None, "haiku")


def test_a_damaged_intent_stops_a_resume_before_anything_runs(project):
    exec_dir = str(project.exec_dir)
    assert run(project, [], execution=exec_dir, mock_provider="script.json") == 1
    layout = ExecutionLayout(project.exec_dir)
    runs = len(project.state().runs)
    layout.run_intent_file.write_text("{")

    with pytest.raises(LaunchError, match=r"run-intent\.json"):
        run(project, [], execution=exec_dir)

    assert len(project.state().runs) == runs
    assert len(MockProviderLog(layout.mock_provider_log).requests()) == 2
