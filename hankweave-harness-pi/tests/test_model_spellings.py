"""Model spellings on pi: a reasoning variant's effort reaches the provider in litellm's request
(both protocols), Anthropic's thinking goes back with its turn, and ``validate`` and ``run``
say what a fuzzy name or a variant resolved to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pi_helpers import PiProject, attempt, request

from hankweave.testing.mock_provider import MockProviderLog, scripted_mock

SCRIPT = {"rules": [
    {"name": "think", "when": {"lastUserMessage": "List the files", "afterToolResult": False},
     "reply": {"thinking": "I should look first.", "text": "Looking.",
               "toolCalls": [{"name": "bash", "input": {"command": "ls"}}]}},
    {"name": "listed", "when": {"lastUserMessage": "List the files", "afterToolResult": True},
     "reply": {"text": "Nothing here."}},
    {"name": "hello", "reply": {"text": "Hello!"}},
]}

mock = scripted_mock(SCRIPT)


def requests_of(log: Path, prompt: str) -> list[dict]:
    """The bodies of the requests whose last user message was ``prompt``."""
    return [dict(r.body) for r in MockProviderLog(log).requests()
            if any(m.get("content") == prompt or prompt in str(m.get("content"))
                   for m in r.messages[-1:])]


@pytest.mark.parametrize(("spec", "effort"), [
    ("gpt-5.2-xhigh", "xhigh"), ("openai/gpt-5.2-high", "high"), ("gpt-5.2", None)])
def test_the_variants_effort_is_the_requests_reasoning_effort(tmp_path: Path, mock, spec: str,
                                                             effort: str | None) -> None:
    prompt = f"Say hello ({spec})."

    run = attempt(request(tmp_path, mock[0], prompt, spec=spec), tmp_path)

    assert run.outcome.success, run.outcome
    [body] = requests_of(mock[1], prompt)
    assert body.get("reasoning_effort") == effort


def test_an_anthropic_variant_on_pi_asks_for_thinking_and_sends_it_back(tmp_path: Path,
                                                                       mock) -> None:
    prompt = "List the files (high)."

    run = attempt(request(tmp_path, mock[0], prompt,
                          spec="pi/anthropic/claude-sonnet-4-5-high"), tmp_path)

    assert run.outcome.success, run.outcome
    first, second = [r for r in MockProviderLog(mock[1]).requests()
                     if r.protocol == "anthropic" and prompt in r.conversation_text()]
    assert first.body["thinking"]["type"] == "enabled"
    assert first.body["thinking"]["budget_tokens"] > 0
    # The turn's thinking block, with its signature, precedes its tool call when the results go
    # back: Anthropic refuses a thinking turn's tool results without it.
    turn = [m for m in second.messages if m.get("role") == "assistant"][-1]
    kinds = [block["type"] for block in turn["content"]]
    assert kinds[0] == "thinking" and "tool_use" in kinds
    assert turn["content"][0]["thinking"] == "I should look first."
    assert turn["content"][0]["signature"] == "mock"


def test_an_anthropic_model_without_a_variant_does_not_think(tmp_path: Path, mock) -> None:
    prompt = "List the files (default)."

    run = attempt(request(tmp_path, mock[0], prompt, spec="pi/anthropic/claude-sonnet-4-5"),
                  tmp_path)

    assert run.outcome.success, run.outcome
    bodies = [r.body for r in MockProviderLog(mock[1]).requests()
              if prompt in r.conversation_text()]
    assert bodies and all("thinking" not in body for body in bodies)


# --- through `hankweave` processes ----------------------------------------------------------

def project_on(root: Path, *models: str) -> PiProject:
    project = PiProject(root, SCRIPT)
    if os.environ.get("PYTHONPATH"):  # a checkout whose packages are not the installed ones
        project.env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    project.write_hank([{"id": f"c{index}", "name": f"C{index}", "model": model,
                         "continuationMode": "fresh", "promptText": f"Say hello {index}."}
                        for index, model in enumerate(models)])
    return project


def test_validate_says_what_a_fuzzy_name_and_a_variant_resolved_to(tmp_path: Path) -> None:
    project = project_on(tmp_path, "gemini-flash", "gpt-5-high", "gemini-flash")

    done = project.hankweave("validate", str(project.hank_dir), str(project.data), "--offline")

    assert done.code == 0, done.stdout + done.stderr
    output = " ".join(done.stdout.split())  # the table may wrap
    assert output.count('model "gemini-flash" resolved to google/gemini-') == 1
    assert "openai/gpt-5 (reasoning high)" in output


def test_validate_refuses_a_variant_of_a_model_that_cannot_reason(tmp_path: Path) -> None:
    project = project_on(tmp_path, "gpt-5.2", "gpt-4o-high")

    done = project.hankweave("validate", str(project.hank_dir), str(project.data), "--offline")

    assert done.code == 2, done.stdout + done.stderr
    assert "hank[1].model" in done.stderr
    assert "'gpt-4o-high' (codon c1)" in done.stderr and "openai/gpt-4o does not reason" in (
        done.stderr)
    assert "Traceback" not in done.stderr


def test_run_sends_the_variants_effort_and_says_what_a_fuzzy_name_is(tmp_path: Path) -> None:
    project = project_on(tmp_path, "gpt-5.2-xhigh", "gemini-flash")

    done = project.run()

    assert done.code == 0, done.stdout + done.stderr
    assert 'model "gemini-flash" resolved to google/gemini-' in done.stdout + done.stderr
    efforts = {r.model: r.body.get("reasoning_effort") for r in project.model_requests()}
    assert efforts["gpt-5.2"] == "xhigh"
    assert [effort for model, effort in efforts.items() if model.startswith("gemini-")] == [None]
