"""``hankweave init``: the example hank it scaffolds, and where it refuses to write."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from hankweave.cli.init_cmd import hank_name_for, init_command, scaffold_files
from hankweave.cli.validate_cmd import validate_command
from hankweave.config import HANK_SCHEMA_URL, load_hank
from hankweave.mock_provider.script import load_script
from hankweave.plugins import make_plugin_manager
from hankweave.registry import Registry
from hankweave.testing import fake_harness

EXPECTED_FILES = {
    "README.md",
    "data/sample.txt",
    "hank.json",
    "prompts/polish.md",
    "dry-run.json",
    "prompts/summarize.md",
    "prompts/survey.md",
    "prompts/system.md",
    "templates/report/report.md",
}


def cli_group() -> click.Group:
    group = click.Group("hankweave")
    group.add_command(init_command)
    group.add_command(validate_command)
    return group


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(cli_group(), list(map(str, args)))


def files_below(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_init_scaffolds_the_example_hank_in_a_new_directory(tmp_path: Path) -> None:
    target = tmp_path / "My Hank"

    result = run("init", target)

    assert result.exit_code == 0, result.output
    assert files_below(target) == EXPECTED_FILES
    raw = json.loads((target / "hank.json").read_text())
    assert next(iter(raw)) == "$schema"
    assert raw["$schema"] == HANK_SCHEMA_URL
    assert raw["meta"]["name"] == "my-hank"
    codons = [item for item in raw["hank"] if item.get("type") != "loop"]
    assert [c["continuationMode"] for c in codons] == ["fresh", "continue-previous"]
    assert codons[0]["rigSetup"][0]["copy"]["from"].startswith("templates/")
    assert all(c["checkpointedFiles"] for c in codons)
    assert all(c["model"] == "haiku" for c in codons)
    (loop,) = [item for item in raw["hank"] if item.get("type") == "loop"]
    assert loop["terminateOn"] == {"type": "iterationLimit", "limit": 2}
    assert loop["codons"][0]["outputFiles"]
    load_hank(target / "hank.json")  # schema-valid as written
    readme = (target / "README.md").read_text()
    assert readme.startswith("# my-hank\n")
    assert "HANKWEAVE_PLUGIN_MODULES=hankweave.testing.fake_harness" in readme
    assert "-m fake" in readme
    assert f"Created the hank 'my-hank' in {target}" in result.output
    assert raw["overrides"]["budget"] == {"maxDollars": 1, "maxTimeSeconds": 1800}
    script = load_script(target / "dry-run.json")  # the dry run's script is valid as written
    assert all(rule.steps for rule in script.rules)  # neutral steps: any harness can run it
    assert f"--mock-provider {target}/dry-run.json" in result.output.replace("'", "")


def test_init_without_an_argument_uses_the_current_empty_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    result = run("init")

    assert result.exit_code == 0, result.output
    assert files_below(tmp_path) == EXPECTED_FILES


def test_init_refuses_a_non_empty_directory_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")

    result = run("init", tmp_path)

    assert result.exit_code == 2
    assert (
        f"Directory {tmp_path} is not empty. Please run init in an empty directory or specify "
        "a new directory."
    ) in result.output
    assert files_below(tmp_path) == {"notes.txt"}
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_init_refuses_a_path_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "hank.json"
    target.write_text("{}")

    result = run("init", target)

    assert result.exit_code == 2
    assert "is not a directory" in result.output
    assert target.read_text() == "{}"


def test_the_scaffold_passes_validate_with_the_fake_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pm = make_plugin_manager(load_entrypoints=False, env={})
    pm.register(fake_harness)
    monkeypatch.setattr("hankweave.registry.get_registry", lambda: Registry(pm))
    for name in list(os.environ):
        if name.startswith("HANKWEAVE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HANKWEAVE_HOME", str(tmp_path / "managed"))
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "example"
    assert run("init", target).exit_code == 0

    result = run("validate", target, target / "data", "-m", "fake", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["valid"] is True
    assert report["warnings"] == []
    assert [c["id"] for c in report["codons"]] == ["survey", "summarize", "polish"]
    assert report["rigOperations"] == 1
    human = run("validate", target, target / "data", "-m", "fake")
    assert human.exit_code == 0, human.output
    assert "The hank is valid." in human.stdout


def test_scaffold_templates_are_found_as_package_data() -> None:
    assert {relative for relative, _ in scaffold_files()} == EXPECTED_FILES


@pytest.mark.parametrize(
    ("name", "slug"), [("My Hank", "my-hank"), ("data_2024", "data-2024"), ("---", "example-hank")]
)
def test_hank_names_are_made_from_the_directory_name(name: str, slug: str) -> None:
    assert hank_name_for(Path("/tmp") / name) == slug
