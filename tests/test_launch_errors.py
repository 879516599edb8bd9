"""A run that cannot start says why, with exit code 2, and leaves nothing behind."""

from __future__ import annotations

import pytest

from hankweave.app.request import LaunchError
from hankweave.execution import ExecutionLayout, load_execution_meta, save_execution_meta
from tests.runtime_harness import Project, codon


@pytest.fixture
def project(tmp_path) -> Project:
    project = Project(tmp_path)
    project.write_hank([codon("a")])
    return project


def test_an_uninstalled_checkpoint_backend_is_refused_before_setup(project):
    project.env["HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND"] = "nope"
    with pytest.raises(LaunchError, match='"nope" is not installed') as caught:
        project.run()
    assert caught.value.exit_code == 2
    assert not project.exec_dir.exists()


def test_a_missing_hank_file_is_refused(project):
    (project.hank_dir / "hank.json").unlink()
    with pytest.raises(LaunchError, match="no hank file"):
        project.run()


def test_replay_without_the_replay_plugin_names_the_package(project, tmp_path):
    with pytest.raises(LaunchError, match="pip install hankweave-replay"):
        project.run(replay=str(tmp_path / "recording"))


def test_resuming_a_replay_without_the_replay_plugin_never_runs_it_live(project):
    assert project.run().code == 0
    layout = ExecutionLayout(project.exec_dir)
    meta = load_execution_meta(layout.meta_file)
    save_execution_meta(layout.meta_file, meta.model_copy(update={
        "recording": ".hankweave/recording"}))

    with pytest.raises(LaunchError, match=r"Cannot resume the replay in .*pip install"
                                          r" hankweave-replay"):
        project.run()
    assert len(project.state().runs) == 1
