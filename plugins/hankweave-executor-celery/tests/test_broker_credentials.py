"""A broker URL's password never reaches the terminal (issue 34 item 6): ``submit``,
``status``, ``cancel`` and ``worker`` name the broker they cannot reach with its password
masked, whether the URL came from the environment or from ``--broker``.

The broker is a closed port on 127.0.0.1, so these need no ``redis-server``."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery_helpers import Project, free_port

SECRET = "hunter2-s3cret"


@pytest.fixture
def nowhere(tmp_path: Path) -> tuple[Project, str]:
    url = f"redis://worker:{SECRET}@127.0.0.1:{free_port()}/0"
    return Project(tmp_path, url), url


def commands(project: Project) -> list[tuple[str, ...]]:
    hank = project.hank("hank", ["a"])
    return [("submit", str(hank), str(project.data("set"))), ("status",), ("status", "--json"),
            ("cancel", "-e", str(project.root / "somewhere")), ("worker", "-n", "nobody@%h")]


def test_an_unreachable_broker_is_named_without_its_password(
        nowhere: tuple[Project, str]) -> None:
    project, url = nowhere
    for args in commands(project):
        done = project.hankweave(*args, check=False)
        assert done.returncode == 1, (args, done.stderr)
        assert SECRET not in done.stdout + done.stderr, (args, done.stderr)
        masked = url.replace(SECRET, "***")
        assert f"Cannot reach the Celery broker at {masked}" in done.stderr, done.stderr
    assert not project.home.exists()


def test_a_broker_given_on_the_command_line_is_masked_too(
        nowhere: tuple[Project, str]) -> None:
    project, url = nowhere
    for args in commands(project):
        done = project.hankweave(*args, "--broker", url, check=False,
                                 env={"HANKWEAVE_CELERY_BROKER": ""})
        assert done.returncode == 1, (args, done.stderr)
        assert SECRET not in done.stdout + done.stderr, (args, done.stderr)


def test_a_malformed_broker_setting_is_refused_without_echoing_it(tmp_path: Path) -> None:
    url = f"redis://:{SECRET}@127.0.0.1:notaport/0"
    project = Project(tmp_path, url)
    done = project.hankweave("status", check=False)
    assert done.returncode != 0
    assert SECRET not in done.stdout + done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_silence_shorter_than_two_heartbeats_is_refused_in_words(tmp_path: Path) -> None:
    from hankweave_executor_celery.settings import load_settings

    from hankweave.api import ConfigError

    env = {"HANKWEAVE_CELERY_WORKER_SILENCE": "5", "HANKWEAVE_CELERY_WORKER_HEARTBEAT": "10"}
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env, cwd=tmp_path)
    assert str(caught.value) == (
        "Invalid Celery executor settings: workerSilenceS must be at least twice"
        " workerHeartbeatS, or one late heartbeat makes a live worker look gone")
