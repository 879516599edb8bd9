"""``hankweave validate``: the full preflight, its summary, its JSON report and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from hankweave.cli.validate_cmd import mask_value, validate_command
from hankweave.execution.setup import SetupRequest, setup_execution
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry
from hankweave.testing import fake_harness


@pytest.fixture(autouse=True)
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """Only the built-ins and the fake harness: no installed plugin changes the outcome."""
    pm = make_plugin_manager(load_entrypoints=False, env={})
    pm.register(fake_harness)
    registry = Registry(pm)
    monkeypatch.setattr("hankweave.registry.get_registry", lambda: registry)
    return registry


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A managed root that does not exist yet, a clean HANKWEAVE_* environment, a clean cwd."""
    for name in list(os.environ):
        if name.startswith("HANKWEAVE_"):
            monkeypatch.delenv(name)
    managed = tmp_path / "managed"
    monkeypatch.setenv("HANKWEAVE_HOME", str(managed))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # no stray hankweave.json from the repository
    return managed


def cli_group() -> click.Group:
    group = click.Group("hankweave")
    group.add_command(validate_command)
    return group


def validate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli_group(), ["validate", *map(str, args)])


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": codon_id,
        "name": f"Codon {codon_id}",
        "model": "fake",
        "continuationMode": "fresh",
        "promptFile": f"prompts/{codon_id}.md",
        **fields,
    }


def write_hank(root: Path, hank: dict[str, Any], prompts: tuple[str, ...] = ()) -> Path:
    (root / "prompts").mkdir(parents=True, exist_ok=True)
    for name in prompts:
        (root / "prompts" / f"{name}.md").write_text(f"Do the {name} work.\n")
    (root / "hank.json").write_text(json.dumps(hank, indent=2))
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "input.txt").write_text("some data\n")
    return root


def rich_hank(root: Path) -> Path:
    (root / "templates").mkdir(parents=True)
    (root / "templates" / "notes.md").write_text("# Notes\n")
    (root / "system.md").write_text("Be careful.\n")
    hank = {
        "meta": {"name": "demo", "version": "1.2.0"},
        "globalSystemPromptFile": "system.md",
        "overrides": {"budget": {"maxDollars": 5}},
        "hank": [
            codon(
                "plan",
                rigSetup=[
                    {"type": "copy", "copy": {"from": "templates/notes.md", "to": "notes.md"}},
                    {"type": "command", "command": {"run": "echo ready"}},
                ],
                checkpointedFiles=["notes.md"],
                budget={"maxDollars": 1.5, "maxTimeSeconds": 60},
            ),
            codon("write", continuationMode="continue-previous", checkpointedFiles=["out/**"]),
            {
                "type": "loop",
                "id": "refine",
                "name": "Refine",
                "terminateOn": {"type": "iterationLimit", "limit": 3},
                "codons": [codon("polish", onFailure="retry")],
            },
        ],
    }
    return write_hank(root, hank, ("plan", "write", "polish"))


def test_valid_hank_prints_the_summary_and_exits_0(tmp_path: Path, home: Path) -> None:
    hank_dir = rich_hank(tmp_path / "demo")

    result = validate(hank_dir, hank_dir / "data")

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Hank: demo 1.2.0" in out
    assert "Codons: 3" in out
    for cell in ("plan", "write", "polish", "Codon plan", "fake/scripted", "continue-previous"):
        assert cell in out
    assert "refine (Refine): 3 iterations, codons polish" in out
    assert "Prompt files: 3 (prompts/plan.md, prompts/write.md, prompts/polish.md)" in out
    assert "System prompt files: 1 (system.md)" in out
    assert "Rig operations: 2" in out
    assert "Codons with checkpointed files: 2 (plan, write)" in out
    assert "Budget ceiling: dollars $5.00" in out
    (plan_row,) = [line for line in out.splitlines() if line.startswith("plan ")]
    assert "$1.50 (codon cap)" in plan_row and "60s (codon cap)" in plan_row
    assert f"a new directory would be created under {home}" in out
    assert out.rstrip().endswith("The hank is valid.")


def test_invalid_hank_lists_every_problem_with_its_path_and_exits_2(
    tmp_path: Path, home: Path
) -> None:
    hank = {
        "hank": [
            codon("a", prompts="typo"),
            codon("b", model="no-such-model"),
            codon("c", promptFile="prompts/missing.md"),
            {
                "type": "loop",
                "id": "l",
                "name": "L",
                "terminateOn": {"type": "iterationLimit", "limit": 0},
                "codons": [codon("d")],
            },
        ]
    }
    hank_dir = write_hank(tmp_path / "bad", hank, ("a", "b", "d"))

    result = validate(hank_dir, hank_dir / "data")

    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "Validation failed:"
    assert any(line.startswith("  - hank[0].prompts: ") and "promptFile" in line for line in lines)
    assert any(line.startswith("  - hank[3].terminateOn.limit: ") for line in lines)
    assert "Traceback" not in result.output


def test_every_problem_of_a_schema_valid_hank_is_reported_together(
    tmp_path: Path, home: Path
) -> None:
    hank = {"hank": [codon("a", model="no-such-model"), codon("b", promptFile="prompts/nope.md")]}
    hank_dir = write_hank(tmp_path / "bad", hank, ("a",))

    result = validate(hank_dir, tmp_path / "no-data")

    assert result.exit_code == 2
    paths = [line.split(":")[0].strip(" -") for line in result.stderr.splitlines()[1:]]
    assert {"hank[0].model", "hank[1].promptFile", "data"} <= set(paths)
    assert 'Unknown model "no-such-model"' in result.stderr
    assert "Traceback" not in result.output


def test_stdin_data_is_refused_because_validate_stores_nothing(tmp_path: Path, home: Path) -> None:
    hank_dir = rich_hank(tmp_path / "demo")

    result = CliRunner().invoke(cli_group(), ["validate", str(hank_dir), "-"], input="text")

    assert result.exit_code == 2
    assert "cannot read DATA from stdin" in result.output
    assert not home.exists()


def test_a_missing_hank_file_is_one_problem_at_the_root(tmp_path: Path, home: Path) -> None:
    result = validate(tmp_path / "nowhere" / "hank.json", tmp_path)

    assert result.exit_code == 2
    assert "  - <root>: Hank file not found:" in result.stderr
    assert "Traceback" not in result.output


def test_json_report_has_the_documented_shape(tmp_path: Path, home: Path) -> None:
    hank_dir = rich_hank(tmp_path / "demo")

    result = validate(hank_dir, hank_dir / "data", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {"valid", "errors", "warnings", "codons", "executionDir"} <= set(report)
    assert report["valid"] is True
    assert report["errors"] == []
    assert [c["id"] for c in report["codons"]] == ["plan", "write", "polish"]
    first = report["codons"][0]
    assert first["resolvedModel"] == "fake/scripted"
    assert first["harness"] == "fake"
    assert first["budget"] == {"maxDollars": 1.5, "maxTimeSeconds": 60}
    assert report["codons"][2]["loop"] == "refine"
    assert report["loops"] == [
        {
            "id": "refine",
            "name": "Refine",
            "termination": {"type": "iterationLimit", "limit": 3},
            "codons": ["polish"],
            "budget": None,
        }
    ]
    assert report["rigOperations"] == 2
    assert report["budget"]["maxDollars"] == 5
    assert report["executionDir"] == {
        "mode": "auto",
        "managedRoot": str(home),
        "path": None,
        "action": "create",
        "hankChanged": False,
    }


def test_json_report_of_an_invalid_hank_lists_errors_and_exits_2(
    tmp_path: Path, home: Path
) -> None:
    hank_dir = write_hank(tmp_path / "bad", {"hank": [codon("a", model="nope")]}, ("a",))

    result = validate(hank_dir, hank_dir / "data", "--json")

    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["valid"] is False
    assert report["errors"][0]["path"] == "hank[0].model"
    assert set(report["errors"][0]) == {"path", "message"}


def test_model_override_replaces_every_codon_model(tmp_path: Path, home: Path) -> None:
    # haiku resolves, but the Claude harness is not installed in this registry.
    hank = {
        "hank": [
            codon("a", model="haiku"),
            {
                "type": "loop",
                "id": "l",
                "name": "L",
                "terminateOn": {"type": "iterationLimit", "limit": 2},
                "codons": [codon("b", model="haiku", onFailure="ignore")],
            },
        ]
    }
    hank_dir = write_hank(tmp_path / "h", hank, ("a", "b"))

    without = validate(hank_dir, hank_dir / "data")
    with_override = validate(hank_dir, hank_dir / "data", "-m", "fake", "--json")

    assert without.exit_code == 2
    assert "hank[0].model" in without.stderr and "hank[1].codons[0].model" in without.stderr
    assert with_override.exit_code == 0, with_override.output
    report = json.loads(with_override.stdout)
    assert report["modelOverride"] == "fake"
    assert {c["resolvedModel"] for c in report["codons"]} == {"fake/scripted"}


def test_execution_preview_creates_nothing(tmp_path: Path, home: Path) -> None:
    hank_dir = rich_hank(tmp_path / "demo")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    result = validate(hank_dir, hank_dir / "data")

    assert result.exit_code == 0, result.output
    assert not home.exists()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_execution_preview_names_the_execution_a_run_would_resume(
    tmp_path: Path, home: Path
) -> None:
    hank_dir = rich_hank(tmp_path / "demo")
    data = hank_dir / "data"
    existing = setup_execution(SetupRequest(data_path=data, hank_path=hank_dir / "hank.json"))
    meta_before = existing.layout.meta_file.read_bytes()
    (hank_dir / "hank.json").write_text((hank_dir / "hank.json").read_text() + "\n")

    result = validate(hank_dir, data, "--json")

    assert result.exit_code == 0, result.output
    preview = json.loads(result.stdout)["executionDir"]
    assert preview["action"] == "resume"
    assert preview["path"] == str(existing.execution_path)
    assert preview["hankChanged"] is True
    assert existing.layout.meta_file.read_bytes() == meta_before
    human = validate(hank_dir, data)
    assert f"would resume {existing.execution_path} (hank.json changed" in human.stdout


def test_explicit_execution_directory_under_the_managed_root_is_refused(
    tmp_path: Path, home: Path
) -> None:
    hank_dir = rich_hank(tmp_path / "demo")

    result = validate(hank_dir, hank_dir / "data", "-e", home / "mine")

    assert result.exit_code == 2
    assert "  - execution: Cannot create a new execution in" in result.stderr
    assert not home.exists()


def test_passthrough_variables_are_listed_masked(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANKWEAVE_GITHUB_TOKEN", "ghp_verysecretvalue")
    monkeypatch.setenv("HANKWEAVE_DEBUG_LEVEL", "unset")
    hank_dir = rich_hank(tmp_path / "demo")

    result = validate(hank_dir, hank_dir / "data")

    assert result.exit_code == 0, result.output
    assert "HANKWEAVE_GITHUB_TOKEN -> GITHUB_TOKEN=ghp****" in result.stdout
    assert "HANKWEAVE_DEBUG_LEVEL -> DEBUG_LEVEL=unset (removed" in result.stdout
    assert "verysecret" not in result.stdout


def test_mask_value_hides_short_values_entirely() -> None:
    assert mask_value("short") == "****"
    assert mask_value("sk-ant-0123456789") == "sk-****"


def test_a_bad_runtime_setting_variable_is_reported_by_name(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANKWEAVE_RUNTIME_PORT", "eighty")
    hank_dir = rich_hank(tmp_path / "demo")

    result = validate(hank_dir, hank_dir / "data")

    assert result.exit_code == 2
    assert '  - HANKWEAVE_RUNTIME_PORT: expected a whole number, got "eighty"' in result.stderr


def test_an_invalid_hankweave_json_is_reported_with_its_file(tmp_path: Path, home: Path) -> None:
    Path("hankweave.json").write_text('{"port": "x", "colour": 1}')
    hank_dir = rich_hank(tmp_path / "demo")

    result = validate(hank_dir, hank_dir / "data")

    assert result.exit_code == 2
    assert "  - hankweave.json:port: " in result.stderr
    assert "  - hankweave.json:colour: " in result.stderr


def test_validate_imports_no_provider_library_or_git(tmp_path: Path) -> None:
    hank_dir = rich_hank(tmp_path / "demo")
    script = textwrap.dedent(
        """
        import sys
        from hankweave.cli.validate_cmd import validate_command
        try:
            validate_command.main(sys.argv[1:], standalone_mode=False)
        except SystemExit as exc:
            assert not exc.code, exc.code
        heavy = ("litellm", "anthropic", "claude_agent_sdk", "git")
        print("LOADED", [name for name in heavy if name in sys.modules])
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANKWEAVE_")}
    env.update(
        HANKWEAVE_HOME=str(tmp_path / "managed"),
        HANKWEAVE_PLUGIN_MODULES="hankweave.testing.fake_harness",
    )

    done = subprocess.run(
        [sys.executable, "-c", script, str(hank_dir), str(hank_dir / "data")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert "The hank is valid." in done.stdout
    assert "LOADED []" in done.stdout


# ----- settings that plugins define -----


def validate_json(hank_dir: Path, settings: dict[str, Any] | None = None,
                  **env: str) -> dict[str, Any]:
    if settings is not None:
        Path("hankweave.json").write_text(json.dumps(settings))
    for name, value in env.items():
        os.environ[name] = value
    try:
        result = validate(hank_dir, hank_dir / "data", "--json")
    finally:
        for name in env:
            os.environ.pop(name, None)
    report = json.loads(result.output)
    assert result.exit_code == (0 if report["valid"] else 2)
    return report


def test_harness_settings_are_checked_against_the_harness_with_their_paths(
        tmp_path: Path, home: Path) -> None:
    hank_dir = write_hank(tmp_path / "hank", {"hank": [codon("a")]}, prompts=("a",))
    report = validate_json(hank_dir, {"harnesses": {"fake": {"tools": 3, "colour": "red"}}},
                           HANKWEAVE_RUNTIME_HARNESSES_FAKE_SESSION_PREFIX="env")

    assert not report["valid"]
    paths = {error["path"]: error["message"] for error in report["errors"]}
    assert "(set in hankweave.json)" in paths["harnesses.fake.tools"]
    assert "harnesses.fake.colour" in paths
    assert "harnesses.fake.sessionPrefix" not in paths  # a valid value, from the environment


def test_a_bad_harness_setting_from_the_environment_names_the_variable(
        tmp_path: Path, home: Path) -> None:
    hank_dir = write_hank(tmp_path / "hank", {"hank": [codon("a")]}, prompts=("a",))
    report = validate_json(hank_dir, HANKWEAVE_RUNTIME_HARNESSES_FAKE_TOOLS="[1]")

    (error,) = report["errors"]
    assert error["path"] == "harnesses.fake.tools[0]"
    assert "HANKWEAVE_RUNTIME_HARNESSES_FAKE_TOOLS" in error["message"]


def test_valid_harness_settings_pass(tmp_path: Path, home: Path) -> None:
    hank_dir = write_hank(tmp_path / "hank", {"hank": [codon("a")]}, prompts=("a",))
    report = validate_json(hank_dir, {"harnesses": {"fake": {"tools": ["Read"]}}})

    assert report["valid"], report["errors"]


def test_an_enabled_sink_that_cannot_be_built_is_a_warning_or_under_strict_an_error(
        tmp_path: Path, home: Path) -> None:
    hank_dir = write_hank(tmp_path / "hank", {"hank": [codon("a")]}, prompts=("a",))
    settings = {"events": {"sinks": [{"name": "nope"}]}}

    relaxed = validate_json(hank_dir, settings)
    strict = validate_json(hank_dir, settings, HANKWEAVE_STRICT_PLUGINS="1")

    assert relaxed["valid"]
    assert any('events.sinks[0]: no installed event sink is named "nope"' in warning
               and "skipped" in warning for warning in relaxed["warnings"])
    assert not strict["valid"]
    assert strict["errors"][0]["path"] == "events.sinks[0]"


@pytest.mark.parametrize(("args", "note"), [
    (["hank"], "the only argument is the data, as Hankweave 0.10 reads it"),
    (["hank/hank.json"], "the current directory: DATA was not given"),
    (["hank", "data"], None),
])
def test_validate_says_how_it_chose_the_data(tmp_path, monkeypatch, args, note):
    """``validate`` with one argument, or none for the data, says which data it checks against
    and why, instead of silently taking a directory (issue 37, item 7)."""
    from click.testing import CliRunner

    from hankweave.cli.validate_cmd import validate_command

    (tmp_path / "hank").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "hank" / "hank.json").write_text(json.dumps({"hank": [
        {k: v for k, v in codon("a", promptText="Go.").items() if k != "promptFile"}]}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HANKWEAVE_HOME", str(tmp_path / "managed"))

    human = CliRunner().invoke(validate_command, [*args, "--offline"])
    report = json.loads(CliRunner().invoke(validate_command, [*args, "--offline", "--json"]).stdout)

    lines = human.output.splitlines()
    assert human.exit_code == 0, human.output
    data_line = next(i for i, line in enumerate(lines) if line.startswith("Data: "))
    if note is None:
        assert report["dataNote"] is None and not lines[data_line + 1].startswith("  the ")
    else:
        assert report["dataNote"].startswith(note)
        assert lines[data_line + 1].startswith(f"  {note}")
