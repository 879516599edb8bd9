"""The bubblewrap sandbox of agent processes (hankweave.sandbox), with the real ``bwrap``:
what a command inside may read, write and reach.  Skipped without bubblewrap, unless
``HANKWEAVE_SANDBOX_REQUIRED=1`` (CI installs it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hankweave.sandbox import Sandbox, bubblewrap_problem

if bubblewrap_problem() is not None:
    if os.environ.get("HANKWEAVE_SANDBOX_REQUIRED") == "1":
        raise RuntimeError(f"HANKWEAVE_SANDBOX_REQUIRED=1, but {bubblewrap_problem()}")
    pytestmark = pytest.mark.skip(reason=str(bubblewrap_problem()))


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, Path]:
    """A home with a secret, two executions side by side, and data."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    executions = tmp_path / "executions"
    for name in ("mine", "other"):
        (executions / name / "agentRoot").mkdir(parents=True)
        (executions / name / ".hankweave").mkdir()
        (executions / name / ".hankweave" / "state.json").write_text("{}\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("input\n")
    (executions / "mine" / "agentRoot" / "read_only_data_source").symlink_to(data)
    return {"home": home, "mine": executions / "mine", "other": executions / "other",
            "data": data, "root": tmp_path}


def run(box: Sandbox, command: str, cwd: Path, **wrap: object) -> subprocess.CompletedProcess[str]:
    argv = box.wrap(["bash", "-c", command], path_env=os.environ["PATH"], **wrap)  # type: ignore[arg-type]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30,
                          check=False)


def sandbox_of(machine: dict[str, Path], network: bool = False) -> Sandbox:
    return Sandbox.for_execution(machine["mine"], machine["mine"] / "agentRoot",
                                 data=machine["data"], home=machine["home"], network=network)


def test_the_workspace_is_writable_and_the_data_readable(machine: dict[str, Path]) -> None:
    work = machine["mine"] / "agentRoot"
    done = run(sandbox_of(machine), "echo made > out.txt && cat read_only_data_source/input.txt"
               " && echo temp > /tmp/t && cat /tmp/t", work)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "input\ntemp\n"
    assert (work / "out.txt").read_text() == "made\n"
    assert not Path("/tmp/t").exists() or Path("/tmp/t").read_text() != "temp\n"


@pytest.mark.parametrize(("what", "command"), [
    ("a secret in the home directory", "cat {home}/.ssh/id_ed25519"),
    ("its own state", "cat {mine}/.hankweave/state.json"),
    ("its own state, changed", "echo '{{\"runs\": []}}' > {mine}/.hankweave/state.json"),
    ("another execution", "ls {other}/agentRoot"),
    ("the data, changed", "echo changed > {data}/input.txt"),
    ("a file beside the workspace", "echo x > {mine}/planted.txt"),
    ("a file in the home directory", "echo x > {home}/.bashrc"),
    ("the system", "echo x > /etc/hankweave-planted"),
])
def test_what_is_not_the_agent_s_cannot_be_read_or_changed(
        machine: dict[str, Path], what: str, command: str) -> None:
    before = {path: path.read_bytes() for path in machine["root"].rglob("*") if path.is_file()}
    done = run(sandbox_of(machine), command.format(**machine), machine["mine"] / "agentRoot")
    assert done.returncode != 0, (what, done.stdout)
    after = {path: path.read_bytes() for path in machine["root"].rglob("*") if path.is_file()}
    assert after == before, what
    assert not Path("/etc/hankweave-planted").exists()


def test_no_network_means_not_even_loopback(machine: dict[str, Path]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        probe = (f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}),"
                 " timeout=2)'")
        assert run(sandbox_of(machine), probe, machine["mine"] / "agentRoot").returncode != 0
        allowed = run(sandbox_of(machine, network=True), probe, machine["mine"] / "agentRoot")
        assert allowed.returncode == 0, allowed.stderr


def test_the_harness_s_own_folders_are_bound_back(machine: dict[str, Path]) -> None:
    config = machine["mine"] / ".hankweave" / "claude-config"
    config.mkdir()
    done = run(sandbox_of(machine), f"echo s > {config}/session.jsonl", machine["mine"],
               writable=[config])
    assert done.returncode == 0, done.stderr
    assert (config / "session.jsonl").read_text() == "s\n"
    assert run(sandbox_of(machine), f"cat {machine['mine']}/.hankweave/state.json",
               machine["mine"], writable=[config]).returncode != 0


def test_a_home_inside_the_executions_folder_is_hidden_with_it(tmp_path: Path) -> None:
    executions = tmp_path / "executions"
    (executions / "mine" / "agentRoot").mkdir(parents=True)
    home = executions / "home"
    home.mkdir()
    (home / "secret").write_text("s\n")
    box = Sandbox.for_execution(executions / "mine", executions / "mine" / "agentRoot",
                                data=None, home=home, network=False)
    done = run(box, f"cat {home}/secret; echo ok > out.txt", executions / "mine" / "agentRoot")
    assert "No such file" in done.stderr and done.returncode == 0, done.stderr
    assert (executions / "mine" / "agentRoot" / "out.txt").read_text() == "ok\n"


def _path_without_bubblewrap(folder: Path) -> str:
    """A PATH with python, bash and git, and no bwrap."""
    folder.mkdir()
    for tool in ("python3", "bash", "sh", "git"):
        found = shutil.which(tool)
        if found is not None:
            (folder / tool).symlink_to(found)
    return str(folder)


def test_without_bubblewrap_auto_says_so_once_per_execution_and_runs(tmp_path: Path) -> None:
    from hankweave.testing.project import HankProject

    project = HankProject(tmp_path / "project")
    project.write_hank([{"id": "a", "name": "A", "model": "fake", "continuationMode": "fresh",
                         "promptText": "Work."}])
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"codons": {"a": [{"result": "error"}, {"messages": 1}]}}))
    env = {**project.env, "PATH": _path_without_bubblewrap(tmp_path / "bin"),
           "HANKWEAVE_FAKE_SCRIPT": str(script)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hankweave", "run", *args, "-e",
                               str(project.exec_dir), "--headless"], env=env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=60,
                              check=False)

    first = run(str(project.hank_dir), str(project.data))
    second = run()  # the failed codon again: the same execution, said already

    warning = "agents run without a sandbox: bubblewrap (bwrap) is not installed"
    assert first.returncode != 0 and warning in first.stderr
    assert second.returncode == 0, second.stderr
    assert warning not in second.stderr
