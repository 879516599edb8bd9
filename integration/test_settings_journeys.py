"""Every setting either does something or is refused with its reason (issue 36), through the
real command line: ``anthropicBaseUrl`` sends agents to another Anthropic endpoint,
``showCosts`` takes cost figures out of the terminal lines, ``withoutProxy`` turns the LLM
proxy on from every layer, and the settings of mechanisms hankweave lacks are refused, naming
the file, variable or flag that set them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hankweave.testing.mock_provider import MockProviderLog, start_mock_provider
from integration.conftest import Project, codon

REPO_ROOT = str(Path(__file__).resolve().parents[1])


def write_settings(project: Project, settings: dict) -> None:
    (project.root / "hankweave.json").write_text(json.dumps(settings))


# ----- anthropicBaseUrl -----


@pytest.fixture
def endpoint(tmp_path: Path):
    """An Anthropic endpoint of our own (a scripted mock provider) and its request log."""
    log = tmp_path / "endpoint-requests.jsonl"
    with start_mock_provider({"rules": [], "default": {"text": "Done at the endpoint."}},
                             log_path=log) as mock:
        yield mock.base_url, MockProviderLog(log)


@pytest.fixture
def http_project(project: Project) -> Project:
    """Agents that call ANTHROPIC_BASE_URL over HTTP (tests/http_agent.py), with a key and no
    base URL of their own."""
    project.env["HANKWEAVE_PLUGIN_MODULES"] = "tests.http_agent"
    # The run is a subprocess in the project's folder: it finds ``tests`` through the path.
    project.env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT,
                                                               project.env.get("PYTHONPATH")]))
    project.env["ANTHROPIC_API_KEY"] = "sk-test"
    project.env.pop("ANTHROPIC_BASE_URL", None)
    project.write_hank([codon("a", model="sonnet", promptText="Reach the endpoint.")])
    return project


def test_the_anthropic_base_url_flag_sends_agents_to_that_endpoint_and_is_kept(
        http_project, endpoint):
    url, log = endpoint

    done = http_project.run("--anthropic-base-url", url)

    assert done.returncode == 0, done.stderr
    (request,) = log.requests()
    assert "Reach the endpoint." in request.conversation_text()
    intent = json.loads((http_project.exec_dir / ".hankweave" / "run-intent.json").read_text())
    assert intent["anthropicBaseUrl"] == url


def test_anthropic_base_url_in_hankweave_json_sends_agents_to_that_endpoint(
        http_project, endpoint):
    url, log = endpoint
    write_settings(http_project, {"anthropicBaseUrl": url})

    done = http_project.run()

    assert done.returncode == 0, done.stderr
    assert len(log.requests()) == 1


def test_anthropic_base_url_from_the_environment_sends_agents_to_that_endpoint(
        http_project, endpoint):
    url, log = endpoint
    http_project.env["HANKWEAVE_RUNTIME_ANTHROPIC_BASE_URL"] = url

    done = http_project.run()

    assert done.returncode == 0, done.stderr
    assert len(log.requests()) == 1


# ----- showCosts -----


def test_costs_are_shown_by_default_and_hidden_by_show_costs_false(project):
    project.write_hank([codon("a")])
    project.write_script({"a": {"messages": 2}})

    shown = project.run()
    assert shown.returncode == 0, shown.stderr
    assert "codon a completed in" in shown.stderr and ", cost $0.0002," in shown.stderr

    write_settings(project, {"showCosts": False})
    hidden = project.run("-n", "-f")

    assert hidden.returncode == 0, hidden.stderr
    assert "codon a completed in" in hidden.stderr and "cost $" not in hidden.stderr


def test_show_costs_from_the_environment_hides_costs(project):
    project.write_hank([codon("a")])
    project.env["HANKWEAVE_RUNTIME_SHOW_COSTS"] = "false"

    done = project.run()

    assert done.returncode == 0, done.stderr
    assert "codon a completed in" in done.stderr and "cost $" not in done.stderr


# ----- refused settings -----


@pytest.mark.parametrize("layer", ["flag", "file", "env"])
def test_the_proxy_runs_when_any_layer_asks_and_the_flag_beats_the_file(project, layer):
    project.write_hank([codon("a")])
    args: tuple[str, ...] = ()
    if layer == "flag":
        args = ("--proxy",)
    elif layer == "file":
        write_settings(project, {"withoutProxy": False})
    else:
        project.env["HANKWEAVE_RUNTIME_WITHOUT_PROXY"] = "false"

    ran = project.run(*args)

    assert ran.returncode == 0, ran.stderr
    assert "LLM proxy: http://127.0.0.1:" in ran.stderr
    if layer == "file":
        again = project.run("--without-proxy")
        assert again.returncode == 0 and "LLM proxy:" not in again.stderr


@pytest.mark.parametrize(("where", "source"), [
    ("file", "hankweave.json:logParsingInterval"),
    ("env", "HANKWEAVE_RUNTIME_LOG_PARSING_INTERVAL"),
])
def test_validate_reports_a_refused_setting_with_where_it_came_from(project, where, source):
    project.write_hank([codon("a")])
    if where == "file":
        write_settings(project, {"logParsingInterval": 500})
    else:
        project.env["HANKWEAVE_RUNTIME_LOG_PARSING_INTERVAL"] = "500"

    checked = project.hw("validate", str(project.hank_dir), str(project.data), "--json")

    assert checked.returncode == 2
    report = json.loads(checked.stdout)
    (error,) = report["errors"]
    assert error["path"] == source
    assert "no agent log" in error["message"]


def test_sentinel_health_check_settings_in_a_hank_are_refused_by_run(project):
    project.write_hank([codon("a")], overrides={"sentinel": {"waitForAllHealthChecks": True}})

    refused = project.run()

    assert refused.returncode == 2
    assert "overrides.sentinel.waitForAllHealthChecks" in refused.stderr
    assert "no provider health checks" in refused.stderr
    assert not project.exec_dir.exists()


def test_anthropic_base_url_reaches_the_claude_cli_and_litellm(tmp_path, endpoint):
    # The real clients (the Claude Code CLI, litellm for a pi/anthropic/ codon), no --mock-
    # provider: only the setting points them at the endpoint.
    from integration.test_replay_quickstart import offline_env

    url, log = endpoint
    hank = tmp_path / "hank"
    hank.mkdir()
    (hank / "hank.json").write_text(json.dumps({"hank": [
        {"id": "survey", "name": "Survey", "model": "sonnet", "continuationMode": "fresh",
         "promptText": "Survey through the Claude CLI."},
        {"id": "polish", "name": "Polish", "model": "pi/anthropic/claude-haiku-4-5",
         "continuationMode": "fresh", "promptText": "Polish through litellm."}]}))
    (tmp_path / "hankweave.json").write_text(json.dumps({"anthropicBaseUrl": url}))
    env = {**offline_env(tmp_path / "home"), "ANTHROPIC_API_KEY": "sk-test",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "CLAUDE_CODE_MAX_RETRIES": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    execution = tmp_path / "exec"

    ran = subprocess.run([sys.executable, "-m", "hankweave", "run", str(hank), str(hank), "-e",
                          str(execution), "--headless"], cwd=tmp_path, env=env, text=True,
                         capture_output=True, timeout=240, stdin=subprocess.DEVNULL)

    assert ran.returncode == 0, ran.stderr
    texts = [request.conversation_text() for request in log.requests(protocol="anthropic")]
    assert any("Survey through the Claude CLI." in text for text in texts)
    assert any("Polish through litellm." in text for text in texts)
    logs = {p.name: p.read_text() for p in (execution / ".hankweave/runs").rglob("*-claude.log")}
    assert '"claude_code_version"' in logs["survey-claude.log"]
    assert '"model":"anthropic/claude-haiku-4-5"' in logs["polish-claude.log"]


# ----- executionBaseDir -----


def test_execution_base_dir_in_hankweave_json_is_where_auto_mode_keeps_executions(project):
    project.write_hank([codon("a")])
    write_settings(project, {"executionBaseDir": "executions"})
    del project.env["HANKWEAVE_HOME"]  # which would win

    done = project.hw("run", str(project.hank_dir), str(project.data), "--headless")

    assert done.returncode == 0, done.stderr
    (execution,) = (project.root / "executions").iterdir()
    assert (execution / ".hankweave" / "execution-meta.json").is_file()
    checked = project.hw("validate", str(project.hank_dir), str(project.data), "--json")
    preview = json.loads(checked.stdout)["executionDir"]
    assert (preview["action"], preview["path"]) == ("resume", str(execution))
