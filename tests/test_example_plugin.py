"""The example plugin of docs/writing-plugins.md, installed for real.

`pip install -e docs/examples/hankweave-sink-jsonl` into this interpreter, then, in fresh
processes (an editable install is only visible to interpreters started after it): a new plugin
manager discovers it through its entry point, `hankweave plugins --json` lists it, and its
sink writes a line per event.  The module is uninstalled afterwards.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "hankweave-sink-jsonl"
DISTRIBUTION = "hankweave-sink-jsonl"
EVENT = {"type": "codon.started", "timestamp": "2026-01-01T00:00:00Z", "data": {"codonId": "plan"}}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANKWEAVE_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env | extra


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=600,
    )


def is_installed() -> bool:
    try:
        importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def example_installed() -> Iterator[None]:
    if is_installed():
        yield  # installed by the developer: use it, leave it
        return
    before = set(EXAMPLE.iterdir())
    try:
        # Offline first; setuptools without `wheel` cannot build editables that way, so then
        # let pip fetch the build backend into an isolated environment.
        failures = []
        for isolation in (["--no-build-isolation"], []):
            result = pip("install", "--no-deps", *isolation, "-e", str(EXAMPLE))
            if result.returncode == 0:
                break
            failures.append(result.stderr.strip().splitlines()[-1:] or ["(no output)"])
        else:
            pytest.skip(f"cannot pip install the example plugin: {failures}")
        yield
    finally:
        if is_installed():
            pip("uninstall", "--yes", DISTRIBUTION)
        for leftover in set(EXAMPLE.iterdir()) - before:  # egg-info and build directories
            shutil.rmtree(leftover, ignore_errors=True)


@pytest.mark.usefixtures("example_installed")
def test_a_fresh_plugin_manager_discovers_the_installed_example() -> None:
    result = python(
        "import json\n"
        "from hankweave.plugins import list_plugins, make_plugin_manager\n"
        "from hankweave.registry import Registry\n"
        "pm = make_plugin_manager(strict=True)\n"
        "print(json.dumps({'plugins': [i.name for i in list_plugins(pm)],\n"
        "                  'sinks': sorted(Registry(pm).event_sinks())}))\n",
        HANKWEAVE_LOAD_PLUGINS="jsonl",
    )

    assert json.loads(result.stdout) == {"plugins": ["jsonl"], "sinks": ["jsonl-file"]}


@pytest.mark.usefixtures("example_installed")
def test_hankweave_plugins_lists_the_installed_example() -> None:
    # Through the real root group; `plugins` is added if the CLI does not register it yet.
    result = python(
        "from hankweave.cli import cli\n"
        "from hankweave.cli.plugins_cmd import plugins_command\n"
        "cli.commands.setdefault('plugins', plugins_command)\n"
        "cli.main(['plugins', '--json'], prog_name='hankweave')\n"
    )

    listed = {plugin["name"]: plugin for plugin in json.loads(result.stdout)}
    assert listed["jsonl"] == {
        "name": "jsonl",
        "distribution": DISTRIBUTION,
        "version": "0.1.0",
        "hooks": ["register_event_sinks"],
        "builtin": False,
        "error": None,
    }


@pytest.mark.usefixtures("example_installed")
def test_the_installed_example_sink_writes_a_line_per_event(tmp_path: Path) -> None:
    events_file = tmp_path / "events.jsonl"

    python(
        "from hankweave.plugins import make_plugin_manager\n"
        "from hankweave.registry import Registry\n"
        "sink = Registry(make_plugin_manager()).event_sinks()['jsonl-file']()\n"
        f"sink.handle({EVENT!r})\n"
        "sink.close()\n",
        HANKWEAVE_LOAD_PLUGINS="jsonl",
        HANKWEAVE_SINK_JSONL_PATH=str(events_file),
    )

    assert [json.loads(line) for line in events_file.read_text().splitlines()] == [EVENT]


# ----- the example module and its walkthrough, without installing -----


@pytest.fixture
def sink_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example module imported from its source directory."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "hankweave_sink_jsonl", raising=False)
    return importlib.import_module("hankweave_sink_jsonl")


def test_the_example_sink_appends_to_the_path_it_is_given(sink_module: Any, tmp_path: Path) -> None:
    path = tmp_path / "nested" / "events.jsonl"
    path.parent.mkdir()
    path.write_text('{"type": "earlier"}\n')

    sink = sink_module.JsonlFileSink(path=path)
    sink.handle(EVENT)
    sink.handle({"type": "codon.completed", "data": {"text": "naïve"}})
    sink.close()

    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["type"] for line in lines] == [
        "earlier",
        "codon.started",
        "codon.completed",
    ]
    assert "naïve" in lines[-1]


def test_the_example_sink_needs_a_path(sink_module: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sink_module.PATH_VARIABLE, raising=False)

    with pytest.raises(ValueError, match="pass a path or set HANKWEAVE_SINK_JSONL_PATH"):
        sink_module.JsonlFileSink()


def test_the_walkthrough_quotes_the_example_verbatim() -> None:
    walkthrough = (ROOT / "docs" / "writing-plugins.md").read_text(encoding="utf-8")
    module = (EXAMPLE / "hankweave_sink_jsonl.py").read_text(encoding="utf-8")
    module += (EXAMPLE / "tests" / "test_jsonl_sink.py").read_text(encoding="utf-8")
    pyproject = (EXAMPLE / "pyproject.toml").read_text(encoding="utf-8")

    blocks = re.findall(r"```(python|toml)\n(.*?)```", walkthrough, re.DOTALL)
    quoted_module = [code for lang, code in blocks if lang == "python" and "JsonlFileSink" in code]
    quoted_toml = [code for lang, code in blocks if lang == "toml"]

    assert quoted_toml == [pyproject]
    assert len(quoted_module) >= 2
    for code in quoted_module:
        if "make_plugin_manager" not in code:  # the usage examples are not quotes
            assert code in module, f"docs/writing-plugins.md quotes code the example lacks:\n{code}"


def test_the_example_passes_the_sink_contract() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        capture_output=True, text=True, timeout=120,
        env=clean_env(PYTHONPATH=os.pathsep.join([str(EXAMPLE), str(ROOT)])), cwd=EXAMPLE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout


# ----- the installed example in real runs -----

HANK = {"hank": [{"id": "a", "name": "A", "model": "fake", "continuationMode": "fresh",
                  "promptText": "Do a."}]}


def run_hank(tmp_path: Path, name: str, settings: dict[str, Any] | None = None,
             **env: str) -> subprocess.CompletedProcess[str]:
    """``hankweave run`` of a one-codon fake hank in ``tmp_path/name``, the example loaded."""
    project = tmp_path / name
    (project / "hank").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "hank" / "hank.json").write_text(json.dumps(HANK))
    if settings is not None:
        (project / "hankweave.json").write_text(json.dumps(settings))
    return subprocess.run(
        [sys.executable, "-m", "hankweave", "run", "hank", "data", "-e", "exec", "--headless"],
        capture_output=True, text=True, timeout=120, cwd=project, stdin=subprocess.DEVNULL,
        env=clean_env(HANKWEAVE_HOME=str(tmp_path / "home"), HANKWEAVE_LOAD_PLUGINS="jsonl",
                      HANKWEAVE_PLUGIN_MODULES="hankweave.testing.fake_harness,"
                                               "hankweave.testing.memory_checkpoints",
                      HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND="memory", **env))


@pytest.mark.usefixtures("example_installed")
def test_an_installed_sink_that_is_not_enabled_does_not_touch_a_run(tmp_path: Path) -> None:
    result = run_hank(tmp_path, "plain")

    assert result.returncode == 0, result.stderr
    assert "jsonl-file" not in result.stderr


@pytest.mark.usefixtures("example_installed")
def test_an_enabled_sink_gets_every_journaled_event(tmp_path: Path) -> None:
    events_file = tmp_path / "sink" / "events.jsonl"
    result = run_hank(tmp_path, "enabled", {"events": {"sinks": [
        {"name": "jsonl-file", "config": {"path": str(events_file)}}]}})

    assert result.returncode == 0, result.stderr
    sunk = [json.loads(line) for line in events_file.read_text().splitlines()]
    journal = tmp_path / "enabled" / "exec" / ".hankweave" / "events" / "events.jsonl"
    journaled = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sunk == journaled
    assert "codon.completed" in {event["type"] for event in sunk}


@pytest.mark.usefixtures("example_installed")
def test_a_sink_with_bad_settings_is_reported_and_skipped(tmp_path: Path) -> None:
    result = run_hank(tmp_path, "bad", {"events": {"sinks": [
        {"name": "jsonl-file", "config": {"path": "x.jsonl", "colour": "red"}}]}})

    assert result.returncode == 0, result.stderr
    assert "events.sinks[0].config.colour" in result.stderr
    assert "skipped" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.usefixtures("example_installed")
def test_a_sink_that_cannot_be_built_stops_a_strict_run_before_anything_exists(
        tmp_path: Path) -> None:
    result = run_hank(tmp_path, "strict", {"events": {"sinks": [{"name": "jsonl-file"}]}},
                      HANKWEAVE_STRICT_PLUGINS="1")

    assert result.returncode == 2, result.stderr
    assert "events.sinks[0]" in result.stderr and "could not be built" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "strict" / "exec").exists()
