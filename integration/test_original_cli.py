"""Scripts written for Hankweave 0.10.0's command line run here: ``hankweave run data/`` takes a
single argument as the data unless it ends in .json, ``--config``/``--data`` name the hank and
the data, ``--ignore-data-mismatch`` resumes on changed data (docs/cli.md, "run")."""

from __future__ import annotations

import json
from pathlib import Path

from hankweave.execution.meta import load_execution_meta
from integration.conftest import Project, codon


def data_of(execution: Path) -> Path:
    """The data source an execution was made from."""
    return Path(load_execution_meta(execution / ".hankweave" / "execution-meta.json")
                .read_only_source_data_path)


def completed(project: Project) -> list[str]:
    return [c.codon_id for run in project.state().runs for c in run.codons
            if c.status == "completed"]


def test_a_single_data_argument_runs_the_hank_of_the_current_directory(project):
    (project.root / "hank.json").write_text(json.dumps({"hank": [codon("a")]}))

    done = project.hw("run", "data", "-e", str(project.exec_dir), "--headless")

    assert done.returncode == 0, done.stderr
    assert completed(project) == ["a"]
    assert data_of(project.exec_dir) == project.data
    assert (project.exec_dir / "agentRoot" / "read_only_data_source" / "input.txt").is_file()


def test_a_single_json_argument_is_the_hank_and_the_data_is_the_current_directory(project):
    (project.root / "my.json").write_text(json.dumps({"hank": [codon("b")]}))

    done = project.hw("run", "my.json", "-e", str(project.exec_dir), "--headless")

    assert done.returncode == 0, done.stderr
    assert completed(project) == ["b"]
    assert data_of(project.exec_dir) == project.root


def test_config_and_data_options_name_the_hank_and_the_data(project):
    project.write_hank([codon("c")])

    done = project.hw("run", "--config", str(project.hank_dir), "--data", "data",
                      "-e", str(project.exec_dir), "--headless")

    assert done.returncode == 0, done.stderr
    assert completed(project) == ["c"]
    assert data_of(project.exec_dir) == project.data


def test_a_hank_given_as_argument_and_as_config_is_refused_before_anything_runs(project):
    project.write_hank([codon("a")])

    refused = project.hw("run", "hank/hank.json", "--config", "hank", "-e",
                         str(project.exec_dir), "--headless")

    assert refused.returncode == 2
    assert "The hank is given twice" in refused.stderr and "Traceback" not in refused.stderr
    assert not project.exec_dir.exists()


def test_our_hank_argument_with_inline_input_keeps_working(project):
    project.write_hank([codon("a")])

    done = project.hw("run", "hank", "-i", "some text", "-e", str(project.exec_dir),
                      "--headless")

    assert done.returncode == 0, done.stderr
    assert completed(project) == ["a"]


def test_ignore_data_mismatch_resumes_an_execution_whose_data_changed(project):
    project.write_hank([codon("a"), codon("b")])
    project.write_script({"b": {"result": "error", "errorText": "API Error: 400 bad request"}})
    first = project.run()
    assert first.returncode == 1, first.stderr
    (project.data / "more.txt").write_text("new data\n")

    refused = project.run()
    assert refused.returncode == 2
    assert "Data source has changed" in refused.stderr
    assert "--ignore-data-mismatch" in refused.stderr

    project.write_script({})
    resumed = project.run("--ignore-data-mismatch")

    assert resumed.returncode == 0, resumed.stderr
    assert "continuing with the new data because of --ignore-data-mismatch" in resumed.stderr
    assert sorted(completed(project)) == ["a", "b"]
    linked = project.exec_dir / "agentRoot" / "read_only_data_source"
    assert (linked / "more.txt").read_text() == "new data\n"
