"""``hankweave validate`` on hanks with sentinels: every config is loaded as the codon's start
would load it, and what cannot load is reported at its JSON path; nothing heavy is imported.

Also the compatibility configs of ``tests/compat/sentinels/`` (written from the original's
documented schema) through the command: the accepted ones validate without a warning and
render as the original's Eta would; those under ``rejected/`` are refused at their path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from hankweave.cli.validate_cmd import validate_command
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry
from hankweave.sentinels.config import parse_sentinel_config
from hankweave.sentinels.llm import PreparedPrompts
from hankweave.sentinels.templates import sentinel_prompt_context

REPO = Path(__file__).resolve().parents[1]
COMPAT = Path(__file__).parent / "compat" / "sentinels"
PLUGIN_MODULES = "hankweave.testing.fake_harness,tests.sentinel_kind_plugin"


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """The built-ins plus the modules ``HANKWEAVE_PLUGIN_MODULES`` names (the fake harness and
    the ``counting`` sentinel kind); no installed plugin changes the outcome."""
    pm = make_plugin_manager(load_entrypoints=False,
                             env={"HANKWEAVE_PLUGIN_MODULES": PLUGIN_MODULES})
    registry = Registry(pm)
    monkeypatch.setattr("hankweave.registry.get_registry", lambda: registry)
    return registry


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A managed root that does not exist yet, no HANKWEAVE_* or provider key, a clean cwd."""
    for name in list(os.environ):
        if name.startswith("HANKWEAVE_") or name.endswith("_API_KEY"):
            monkeypatch.delenv(name)
    managed = tmp_path / "managed"
    monkeypatch.setenv("HANKWEAVE_HOME", str(managed))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return managed


# ----- building hanks -----


def sentinel(**fields: Any) -> dict[str, Any]:
    """A valid LLM sentinel config, with ``fields`` added or replaced (None removes one)."""
    config = {
        "id": "watcher",
        "name": "Watcher",
        "trigger": {"type": "event", "on": ["tool.result"],
                    "conditions": [{"path": "isError", "operator": "equals", "value": True}]},
        "execution": {"strategy": "immediate"},
        "userPromptText": "What failed? <%= JSON.stringify(it.events[0].data) %>",
        "model": "anthropic/claude-haiku-4-5",
        **fields,
    }
    return {key: value for key, value in config.items() if value is not None}


def counting(**options: Any) -> dict[str, Any]:
    """A config of the plugin kind ``counting`` (no model, no prompt: not an LLM sentinel)."""
    return {"id": "count", "name": "Count", "kind": "counting",
            "trigger": {"type": "event", "on": ["*"]},
            "execution": {"strategy": "count", "threshold": 5}, "options": options}


def write_hank(root: Path, entries: list[dict[str, Any]],
               files: dict[str, str] | None = None) -> Path:
    """A one-codon hank (fake model) whose codon attaches ``entries``; ``files`` are written
    relative to the hank directory first."""
    for name, text in {"prompts/review.md": "Review the code.\n", "data/input.txt": "data\n",
                       **(files or {})}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    hank = {"hank": [{"id": "review", "name": "Review", "model": "fake",
                      "continuationMode": "fresh", "promptFile": "prompts/review.md",
                      "sentinels": entries}]}
    (root / "hank.json").write_text(json.dumps(hank, indent=2), encoding="utf-8")
    return root


def file_entry(root: Path, config: dict[str, Any], settings: dict[str, Any] | None = None,
               name: str = "watch.json") -> dict[str, Any]:
    """Write ``config`` to ``sentinels/<name>`` and return the codon entry that attaches it."""
    path = root / "sentinels" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    entry: dict[str, Any] = {"sentinelConfig": f"sentinels/{name}"}
    if settings is not None:
        entry["settings"] = settings
    return entry


REQUIRED = {"failCodonIfNotLoaded": True}


def validate(hank_dir: Path, *args: str) -> Result:
    """``validate --offline``: these are the configs' checks; credentials have their own tests
    (tests/test_agent_preflight.py)."""
    group = click.Group("hankweave")
    group.add_command(validate_command)
    return CliRunner().invoke(group, ["validate", str(hank_dir), str(hank_dir / "data"),
                                         "--offline", *args])


def report(hank_dir: Path) -> dict[str, Any]:
    """The ``--json`` report; its exit code must agree with its verdict."""
    result = validate(hank_dir, "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == (0 if data["valid"] else 2), result.output
    return data


def the_error(hank_dir: Path) -> dict[str, str]:
    """The one error of an invalid hank (``{path, message}``), and no warning beside it."""
    data = report(hank_dir)
    assert not data["valid"]
    (error,) = data["errors"]
    assert data["warnings"] == []
    return error


def config_problems(message: str) -> list[str]:
    """The ``- <path>: <message>`` lines of a sentinel config error's message (indented under
    the config's line)."""
    return [line.lstrip().removeprefix("- ") for line in message.splitlines()[1:]]


# ----- (a) a valid config -----


def test_a_valid_file_config_validates_without_a_not_run_warning(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, sentinel(), REQUIRED)])

    human = validate(hank_dir)
    data = report(hank_dir)

    assert human.exit_code == 0, human.output
    assert human.stdout.rstrip().endswith("The hank is valid.")
    assert "not run" not in human.output and "Warnings" not in human.output
    assert data["valid"] and data["errors"] == [] and data["warnings"] == []


def test_a_valid_inline_config_and_an_optional_one_validate_without_credentials(
        tmp_path: Path) -> None:
    # Credentials are the codon start's to check (the run may give them); validate needs none.
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [{"sentinelConfig": sentinel(id="inline-one")},
                          file_entry(hank_dir, sentinel(model="openai/gpt-4.1-mini"))])

    data = report(hank_dir)

    assert data["valid"], data["errors"]
    assert data["warnings"] == []


# ----- (b) output.format -----


def test_output_format_json_is_an_error_at_its_path_when_the_codon_requires_it(
        tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, sentinel(output={"format": "json"}), REQUIRED)])
    config_file = hank_dir / "sentinels" / "watch.json"

    human = validate(hank_dir)
    error = the_error(hank_dir)

    assert human.exit_code == 2
    assert human.stdout == ""
    assert f"  - hank[0].sentinels: sentinels/watch.json: Invalid sentinel config {config_file}" \
        in human.stderr
    assert error["path"] == "hank[0].sentinels"
    assert error["message"].startswith(
        f"sentinels/watch.json: Invalid sentinel config {config_file}: 1 problem\n")
    assert config_problems(error["message"]) == [
        "output.format: format \"json\" must be one of 'text' or 'jsonl'"]


def test_output_format_json_is_an_error_too_when_the_codon_does_not_require_it(
        tmp_path: Path) -> None:
    # docs/sentinels.md: without failCodonIfNotLoaded a run skips such a sentinel, but validate
    # rejects a config that cannot load either way, as the original's validation does (its
    # "[WARNING]" sentinel problems still fail the load: reference §1.7).
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, sentinel(output={"format": "json"}))])

    error = the_error(hank_dir)

    assert error["path"] == "hank[0].sentinels"
    assert config_problems(error["message"]) == [
        "output.format: format \"json\" must be one of 'text' or 'jsonl'"]


# ----- (c) the trigger type -----


def test_an_unknown_trigger_type_lists_the_built_in_ones(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    config = sentinel(trigger={"type": "regex", "on": ["tool.result"]})
    write_hank(hank_dir, [file_entry(hank_dir, config, REQUIRED)])

    error = the_error(hank_dir)

    assert config_problems(error["message"]) == [
        "trigger.type: \"type\" must be one of 'event', 'sequence', not 'regex'"]


# ----- (d) condition paths -----


@pytest.mark.parametrize(("trigger", "path", "message"), [
    ({"type": "event", "on": ["codon.completed"],
      "conditions": [{"path": "nope", "operator": "equals", "value": True}]},
     "trigger.conditions[0].path",
     'Invalid path "nope" for event type "codon.completed" (its data has: budgetExceeded,'
     " codonId, cost, costComplete, duration, exitStatus, failureIgnored, failureReason,"
     " success)"),
    ({"type": "event", "on": ["codon.completed", "tool.result"],
      "conditions": [{"path": "success", "operator": "equals", "value": True},
                     {"path": "exitStatus.reason", "operator": "equals", "value": "SIGTERM"}]},
     "trigger.conditions[1].path",
     'Path "exitStatus.reason" is not valid for any of the specified event types'
     " (codon.completed, tool.result)"),
    ({"type": "sequence", "interestFilter": {"on": ["assistant.action", "tool.result"]},
      "pattern": [{"type": "assistant.action"},
                  {"type": "tool.result",
                   "conditions": [{"path": "exitCode", "operator": "equals", "value": 1}]}]},
     "trigger.pattern[1].conditions[0].path",
     'Invalid path "exitCode" for event type "tool.result" (its data has: codonId,'
     " executionTimeMs, isError, originalLength, result, toolName, toolUseId, truncated)"),
])
def test_a_condition_path_missing_from_the_payload_is_an_error_at_its_path(
        tmp_path: Path, trigger: dict[str, Any], path: str, message: str) -> None:
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, sentinel(trigger=trigger), REQUIRED)])

    error = the_error(hank_dir)

    assert config_problems(error["message"]) == [f"{path}: {message}"]


def test_a_path_into_one_member_of_a_union_is_accepted(tmp_path: Path) -> None:
    # exitStatus is success | error {code} | killed {signal}: the walk goes through unions.
    trigger = {"type": "event", "on": ["codon.completed"],
               "conditions": [{"path": "exitStatus.signal", "operator": "equals",
                               "value": "SIGTERM"}]}
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, sentinel(trigger=trigger), REQUIRED)])

    assert report(hank_dir)["valid"]


def test_a_wildcard_trigger_skips_the_path_check(tmp_path: Path) -> None:
    trigger = {"type": "event", "on": ["*"],
               "conditions": [{"path": "anything.at.all", "operator": "equals", "value": 1}]}
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, sentinel(trigger=trigger), REQUIRED)])

    assert report(hank_dir)["valid"]


# ----- (e) structured output schemas -----


@pytest.mark.parametrize(("schema", "construct", "where"), [
    ("z.object({ to: z.string().email() })", "`.email`", "1:27"),
    ("z.object({ n: z.number() }).refine(v => v.n > 0)", "`.refine`", "1:29"),
])
def test_an_unsupported_zod_construct_is_an_error_naming_it(
        tmp_path: Path, schema: str, construct: str, where: str) -> None:
    hank_dir = tmp_path / "hank"
    config = sentinel(structuredOutput={"output": "object", "schemaStr": schema})
    write_hank(hank_dir, [file_entry(hank_dir, config, REQUIRED)])

    error = the_error(hank_dir)

    assert error["path"] == "hank[0].sentinels"
    assert error["message"].startswith(
        "sentinels/watch.json: structuredOutput: schemaStr: unsupported Zod construct"
        f" {construct} at {where} (supported")


def test_an_unsupported_construct_in_a_schema_file_names_the_file(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    config = sentinel(structuredOutput={"output": "object", "schemaFile": "review.schema.ts"})
    entry = file_entry(hank_dir, config, REQUIRED)
    write_hank(hank_dir, [entry], files={"sentinels/review.schema.ts": (
        'import { z } from "zod";\n\n'
        "export default z.object({ tree: z.lazy(() => z.string()) });\n")})

    error = the_error(hank_dir)

    assert "review.schema.ts: unsupported Zod construct `z.lazy` at 3:35" in error["message"]


# ----- (f) prompts -----


def test_a_missing_user_prompt_file_of_a_file_config_is_an_error(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    config = sentinel(userPromptText=None, userPromptFile="prompts/gone.md")
    write_hank(hank_dir, [file_entry(hank_dir, config)])

    error = the_error(hank_dir)

    # The config's refs resolve from its own directory (sentinels/), and the message says so.
    assert error == {
        "path": "hank[0].sentinels[0].sentinelConfig",
        "message": f'userPromptFile in "sentinels/watch.json": "prompts/gone.md" does not exist'
                   f" ({hank_dir / 'sentinels' / 'prompts' / 'gone.md'})"}


def test_a_missing_user_prompt_file_of_an_inline_config_is_an_error_at_its_field(
        tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    config = sentinel(userPromptText=None, userPromptFile=["prompts/review.md", "prompts/gone.md"])
    write_hank(hank_dir, [{"sentinelConfig": config, "settings": REQUIRED}])

    error = the_error(hank_dir)

    assert error == {
        "path": "hank[0].sentinels[0].sentinelConfig.userPromptFile[1]",
        "message": f'"prompts/gone.md" does not exist ({hank_dir / "prompts" / "gone.md"})'}


def test_a_config_without_a_user_prompt_is_an_error(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, sentinel(userPromptText=None), REQUIRED)])

    error = the_error(hank_dir)

    assert config_problems(error["message"]) == [
        "<root>: Each sentinel must have at least one of `userPromptFile` or `userPromptText`"
        " defined."]


# ----- (g) a plugin kind -----


def test_a_plugin_kind_with_valid_options_validates(tmp_path: Path, registry: Registry) -> None:
    assert "counting" in registry.sentinel_kinds()
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, counting(label="edits", every=2), REQUIRED)])

    data = report(hank_dir)

    assert data["valid"], data["errors"]
    assert data["warnings"] == []


def test_bad_options_of_a_plugin_kind_are_errors_at_their_options_paths(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    config = counting(label=3, every=0, unit="lines", colour="red")
    write_hank(hank_dir, [file_entry(hank_dir, config, REQUIRED)])

    error = the_error(hank_dir)

    problems = config_problems(error["message"])
    assert {problem.split(":")[0] for problem in problems} == {
        "options.label", "options.every", "options.unit", "options.colour"}
    assert "options.every: Input should be greater than or equal to 1 (got 0)" in problems
    assert any(problem.startswith('options.colour: Unrecognized field "colour"')
               for problem in problems)


def test_a_required_option_of_a_plugin_kind_is_reported_missing(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    config = {key: value for key, value in counting().items() if key != "options"}
    write_hank(hank_dir, [file_entry(hank_dir, config, REQUIRED)])

    error = the_error(hank_dir)

    assert [problem.split(":")[0] for problem in config_problems(error["message"])] \
        == ["options.label"]


def test_an_unknown_kind_lists_the_installed_ones(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, {**counting(label="x"), "kind": "tally"},
                                     REQUIRED)])

    error = the_error(hank_dir)

    (problem,) = config_problems(error["message"])
    assert problem.startswith("kind: Unknown sentinel kind 'tally' (installed: ")
    installed = problem.split("(installed: ")[1].split(";")[0]
    assert {name.strip(" '") for name in installed.split(",")} == {"llm", "counting"}
    assert "register_sentinel_kinds" in problem


def test_an_unknown_kind_lists_each_installed_kind_once(tmp_path: Path) -> None:
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, {**counting(label="x"), "kind": "tally"},
                                     REQUIRED)])

    (problem,) = config_problems(the_error(hank_dir)["message"])

    assert "(installed: 'llm', 'counting';" in problem


def test_the_kind_is_unknown_without_the_plugin(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pm = make_plugin_manager(load_entrypoints=False,
                             env={"HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness"})
    monkeypatch.setattr("hankweave.registry.get_registry", lambda: Registry(pm))
    hank_dir = tmp_path / "hank"
    write_hank(hank_dir, [file_entry(hank_dir, counting(label="edits"), REQUIRED)])

    (problem,) = config_problems(the_error(hank_dir)["message"])

    assert problem.startswith("kind: Unknown sentinel kind 'counting' (installed: 'llm'")


# ----- nothing heavy is imported -----

HEAVY = ("litellm", "anthropic", "claude_agent_sdk", "celery", "git", "jsonschema", "aiohttp",
         "openai")

PROBE = """
import sys
from hankweave.cli import cli
from hankweave.cli.plugins_cmd import install_plugin_commands
install_plugin_commands(cli)
try:
    cli.main(sys.argv[1:], standalone_mode=False)
except SystemExit as exc:
    print("\\nEXIT=" + str(exc.code))
print("\\nLOADED=" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def sentinel_hank(root: Path) -> Path:
    """A hank whose codon attaches every accepted compatibility config (LLM sentinels with Eta
    templates, Zod schemas, sequence triggers, conversations), an inline structured one and a
    ``counting`` one."""
    shutil.copytree(COMPAT, root / "sentinels", ignore=shutil.ignore_patterns("rejected"))
    entries = [{"sentinelConfig": f"sentinels/{path.name}", "settings": REQUIRED}
               for path in sorted(COMPAT.glob("*.json"))]
    entries.append({"sentinelConfig": sentinel(id="inline-verdict", structuredOutput={
        "output": "array", "schemaStr": "z.object({ file: z.string(), ok: z.boolean() })"})})
    entries.append(file_entry(root, counting(label="events"), REQUIRED, name="count.json"))
    return write_hank(root, entries)


def test_validate_of_a_hank_with_llm_sentinels_imports_no_heavy_library(tmp_path: Path) -> None:
    hank_dir = sentinel_hank(tmp_path / "hank")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANKWEAVE_")}
    # The plugin kind comes in through the variable, as a user's local plugin would.
    env.update(HANKWEAVE_HOME=str(tmp_path / "managed"), HANKWEAVE_PLUGIN_MODULES=PLUGIN_MODULES,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))

    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), "validate", str(hank_dir),
         str(hank_dir / "data"), "--offline"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    assert "The hank is valid." in done.stdout, done.stdout + done.stderr
    assert "EXIT=" not in done.stdout
    loaded = [line for line in done.stdout.splitlines() if line.startswith("LOADED=")]
    assert loaded == ["LOADED="], done.stderr


# ----- the compatibility configs (tests/compat/sentinels) -----


def test_every_accepted_compat_config_validates_on_one_codon_without_warnings(
        tmp_path: Path) -> None:
    hank_dir = sentinel_hank(tmp_path / "hank")

    data = report(hank_dir)

    assert data["valid"], data["errors"]
    assert data["warnings"] == []


REJECTED: dict[str, tuple[str, str]] = {
    # file: (JSON path in the config, what the original's schema says at that path)
    "format-with-structured-output.json": ("output.format", "structuredOutput"),
    "conversational-without-system-prompt.json": ("conversational", "system prompt"),
    "tool-input-path.json": ("trigger.conditions[1].path", '"toolInput.command"'),
}


def test_every_rejected_compat_config_has_its_expectation() -> None:
    assert sorted(path.name for path in (COMPAT / "rejected").glob("*.json")) == sorted(REJECTED)


@pytest.mark.parametrize("name", sorted(REJECTED))
@pytest.mark.parametrize("required", [True, False], ids=["required", "optional"])
def test_a_rejected_compat_config_fails_validation_at_its_path(
        tmp_path: Path, name: str, required: bool) -> None:
    path, words = REJECTED[name]
    hank_dir = tmp_path / "hank"
    config = json.loads((COMPAT / "rejected" / name).read_text(encoding="utf-8"))
    write_hank(hank_dir, [file_entry(hank_dir, config, REQUIRED if required else None,
                                     name=name)])

    error = the_error(hank_dir)

    (problem,) = config_problems(error["message"])
    assert problem.startswith(f"{path}: ") and words in problem


def prepared(name: str) -> PreparedPrompts:
    path = COMPAT / f"{name}.json"
    config = parse_sentinel_config(json.loads(path.read_text(encoding="utf-8")), str(path))
    return PreparedPrompts(config, COMPAT)


def render(name: str, events: list[dict[str, Any]]) -> tuple[str | None, str]:
    """(system, user) of a compat config rendered for ``events`` in codon ``build#2``."""
    prompts = prepared(name)
    context = sentinel_prompt_context(
        events=events, current_time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        codon={"id": "build#2", "name": "Sentinel", "description": None,
               "startTime": "2026-01-02T03:00:00.000Z"})
    system = prompts.system.render(context) if prompts.system is not None else None
    return system, prompts.user.render(context)


def test_the_count_digest_renders_as_etas_trimming_rules_say() -> None:
    # Eta's default autoTrim [false, "nl"] eats the newline after every tag (interpolations
    # too), so the template doubles the newlines it keeps; toFixed pads as JavaScript does.
    events = [{"type": "token.usage", "data": {"outputTokens": out, "cacheReadTokens": 900,
                                               "totalCost": cost}}
              for out, cost in ((120, 0.0012), (5000, 0.05), (80, 0.001))]

    system, user = render("token-digest", events)

    assert system == "You watch how an agent spends tokens and flag waste."
    assert user == ("Codon build#2 (Sentinel), 3 messages:\n"
                    "1. 120 out, 900 cached, $0.0012\n"
                    "2. 5000 out, 900 cached, $0.0500\n"
                    "3. 80 out, 900 cached, $0.0010\n"
                    "Heavy messages: 5000\n"
                    "Check time: 2026-01-02T03:04:05.000Z")
    light = [{"type": "token.usage", "data": {"outputTokens": 10, "cacheReadTokens": 0,
                                              "totalCost": 0.00004}}]
    assert render("token-digest", light)[1] == (
        "Codon build#2 (Sentinel), 1 messages:\n1. 10 out, 0 cached, $0.0000\n"
        "No heavy messages.\nCheck time: 2026-01-02T03:04:05.000Z")


def test_the_sequence_config_renders_its_prompt_files_then_its_text() -> None:
    events = [
        {"type": "assistant.action", "data": {"action": "tool_use", "toolName": "Edit",
                                              "content": ""}},
        {"type": "tool.result", "data": {"toolName": "Bash", "isError": True,
                                         "executionTimeMs": 45250, "result": "FAIL a.test.ts"}},
        {"type": "assistant.action", "data": {"action": "message",
                                              "content": "Done: all tests pass."}},
    ]

    _, user = render("fix-then-retest", events)

    # (45.25).toFixed(1) is "45.3" in JavaScript (Python's round-half-even would say 45.2).
    assert user == ("The agent edited a file, a test run failed, and the agent then wrote:\n"
                    "Done: all tests pass.\nThe failing run (45.3s):\nFAIL a.test.ts"
                    "\n\nAnswer with CONSISTENT or INCONSISTENT, then one sentence.")


def test_the_conversational_config_joins_its_system_prompt_file_and_text() -> None:
    events = [{"type": "assistant.action", "data": {"action": "message",
                                                    "content": "Use sqlite."}},
              {"type": "codon.completed", "data": {"success": False}}]

    system, user = render("session-memory", events)

    memory = (COMPAT / "prompts" / "memory-system.md").read_text(encoding="utf-8")
    assert system == f"{memory}\n\nReply with the updated list only."
    assert user == "[assistant.action] Use sqlite.\n[codon.completed] codon failed\n"


def test_the_zod_schema_config_becomes_this_json_schema() -> None:
    schema = prepared("review-findings").schema

    assert schema is not None
    assert schema["required"] == ["verdict", "confidence", "summary", "findings"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["verdict"] == {"type": "string", "enum": ["ship", "revise", "block"],
                                     "description": "Overall call"}
    assert properties["confidence"] == {"type": "number", "minimum": 0, "maximum": 1}
    assert properties["followUp"] == {"type": ["string", "null"]}  # optional and nullable
    findings = properties["findings"]
    assert findings["type"] == "array" and findings["description"] == "Each problem found"
    item = findings["items"]
    assert item["required"] == ["file", "severity", "note"]  # line and tags are optional
    assert item["additionalProperties"] is False
    assert item["properties"]["note"] == {"type": ["string", "null"]}
    assert item["properties"]["line"] == {"type": "integer", "exclusiveMinimum": 0}
    assert item["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
