"""Remote hanks (hankweave.remote): a repository address as HANK, pinned, cached, offline.

The repositories are local bare repositories served over ``file://`` and over ``git daemon``
on 127.0.0.1; the journeys go through the real CLI.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hankweave.remote import RemoteHankError, parse_remote_address
from tests.runtime_harness import Project, codon

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(*args: str | Path, cwd: Path) -> str:
    import os

    done = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          check=True, env={**os.environ, **GIT_ENV})
    return done.stdout.strip()


class Repo:
    """A working repository holding a hank under ``sub/hank``, pushed to ``served/repo.git``."""

    def __init__(self, root: Path) -> None:
        self.work = root / "work"
        self.served = root / "served"
        self.bare = self.served / "repo.git"
        self.work.mkdir(parents=True)
        self.served.mkdir()
        git("init", "-q", "-b", "main", cwd=self.work)
        git("init", "-q", "--bare", "-b", "main", self.bare, cwd=root)
        git("remote", "add", "origin", self.bare, cwd=self.work)

    def commit(self, prompt: str, tag: str | None = None) -> str:
        hank = self.work / "sub" / "hank"
        (hank / "prompts").mkdir(parents=True, exist_ok=True)
        (hank / "prompts" / "a.md").write_text(prompt)
        (hank / "hank.json").write_text(json.dumps({"hank": [
            codon("a", promptText=None, promptFile="prompts/a.md")]}))
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", prompt, cwd=self.work)
        if tag:
            git("tag", tag, cwd=self.work)
        git("push", "-q", "--tags", "origin", "main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


def hankweave(project: Project, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hankweave", *map(str, args)], cwd=project.root,
                          env=project.env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def run(project: Project, hank: str, name: str) -> subprocess.CompletedProcess[str]:
    return hankweave(project, "run", hank, project.data, "-e", project.root / name,
                     "--headless")


def recorded(project: Project, name: str) -> dict[str, object]:
    return json.loads((project.root / name / ".hankweave/execution-meta.json").read_text())


def read_prompt(meta: dict[str, object]) -> str:
    return (Path(str(meta["hankPath"])).parent / "prompts/a.md").read_text()


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "repo")


@pytest.fixture
def daemon(repo: Repo) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    # Until our daemon serves our repository: a port taken between the probe and the daemon's
    # bind (CI runs another tox env beside this one) ends the daemon, and another port is tried.
    for _ in range(5):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = f"git://127.0.0.1:{port}/repo.git"
        server = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
             f"--port={port}", f"--base-path={repo.served}", str(repo.served)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while server.poll() is None and subprocess.run(
                ["git", "ls-remote", url], capture_output=True, timeout=60,
                check=False).returncode != 0:
            if time.monotonic() > deadline:
                server.kill()
                server.wait()
                pytest.fail(f"git daemon did not serve {url} within 60 s")
            time.sleep(0.1)
        if server.poll() is None:
            break
    else:
        pytest.fail(f"git daemon could not serve on a free port (rc {server.poll()})")
    yield url, server
    server.terminate()
    server.wait(timeout=10)


# ----- addresses -----


@pytest.mark.parametrize(("given", "clone", "rest"), [
    ("https://github.com/acme/hanks", "https://github.com/acme/hanks.git", ""),
    ("https://github.com/acme/hanks/tree/v1/docs/hank", "https://github.com/acme/hanks.git",
     "v1/docs/hank"),
    ("https://github.com/acme/hanks.git#main/x", "https://github.com/acme/hanks.git", "main/x"),
    ("https://gitlab.com/acme/hanks/-/tree/dev/h", "https://gitlab.com/acme/hanks.git", "dev/h"),
    ("https://bitbucket.org/acme/hanks/src/v2/h", "https://bitbucket.org/acme/hanks.git",
     "v2/h"),
    ("git@github.com:acme/hanks.git#v1", "git@github.com:acme/hanks.git", "v1"),
    ("file:///srv/repo.git#feature/x/sub", "file:///srv/repo.git", "feature/x/sub"),
])
def test_addresses_parse(given: str, clone: str, rest: str):
    address = parse_remote_address(given)
    assert (address.clone_url, address.ref_and_path) == (clone, rest)


@pytest.mark.parametrize("given", ["https://github.com/acme", "git@nohost", "ftp://x/y.git"])
def test_bad_addresses_are_refused(given: str):
    with pytest.raises(RemoteHankError):
        parse_remote_address(given)


# ----- journeys -----


def test_a_pinned_tag_over_file_runs_and_is_recorded(project: Project, repo: Repo):
    first = repo.commit("Version one.", tag="v1")
    repo.commit("Version two.")
    url = f"file://{repo.bare}#v1/sub/hank"

    result = run(project, url, "e1")

    assert result.returncode == 0, result.stderr
    assert f"remote hank {url}: v1 at {first[:12]}" in result.stdout + result.stderr
    meta = recorded(project, "e1")
    assert meta["remote"] == {"url": f"file://{repo.bare}", "ref": "v1", "commit": first,
                              "path": "sub/hank"}
    assert read_prompt(meta) == "Version one."
    assert Path(str(meta["hankPath"])).is_relative_to(project.root / "home/.cache/hanks")


def test_a_branch_follows_the_remote_and_a_commit_pin_does_not(project: Project, repo: Repo):
    first = repo.commit("Version one.")
    url = f"file://{repo.bare}#main/sub/hank"
    assert run(project, url, "e1").returncode == 0
    second = repo.commit("Version two.")

    assert run(project, url, "e2").returncode == 0
    pinned = run(project, f"file://{repo.bare}#{first}/sub/hank", "e3")

    assert pinned.returncode == 0, pinned.stderr
    assert recorded(project, "e2")["remote"]["commit"] == second  # type: ignore[index]
    assert read_prompt(recorded(project, "e2")) == "Version two."
    assert read_prompt(recorded(project, "e3")) == "Version one."
    assert read_prompt(recorded(project, "e1")) == "Version one."  # a checkout never changes


def test_git_daemon_tag_and_branch_then_the_cache_with_the_server_stopped(
        project: Project, repo: Repo, daemon: tuple[str, subprocess.Popen[bytes]]):
    url, server = daemon
    tagged = repo.commit("Tagged.", tag="v1")
    head = repo.commit("Head of main.")
    assert run(project, f"{url}#v1/sub/hank", "tag").returncode == 0
    assert run(project, f"{url}#main/sub/hank", "branch").returncode == 0
    assert recorded(project, "tag")["remote"]["commit"] == tagged  # type: ignore[index]
    assert recorded(project, "branch")["remote"]["commit"] == head  # type: ignore[index]

    server.terminate()
    server.wait(timeout=10)
    offline = run(project, f"{url}#main/sub/hank", "offline")
    unknown = run(project, f"{url}#never-fetched/sub/hank", "unknown")

    assert offline.returncode == 0, offline.stderr
    said = offline.stdout + offline.stderr
    assert "the remote cannot be reached" in said
    assert f"using the cached main at {head[:12]}, last checked" in said
    assert read_prompt(recorded(project, "offline")) == "Head of main."
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "never-fetched/sub/hank is not in the cache" in unknown.stderr
    assert not (project.root / "unknown").exists()


def test_a_full_commit_is_fetched_from_git_daemon(
        project: Project, repo: Repo, daemon: tuple[str, subprocess.Popen[bytes]]):
    url, _ = daemon
    first = repo.commit("First.")
    repo.commit("Second.")

    result = run(project, f"{url}#{first}/sub/hank", "e")

    assert result.returncode == 0, result.stderr
    assert read_prompt(recorded(project, "e")) == "First."


def test_unknown_refs_and_paths_outside_the_repository_are_refused(project: Project,
                                                                   repo: Repo):
    repo.commit("One.", tag="v1")
    for address, said in ((f"file://{repo.bare}#nope", "has no branch or tag 'nope'"),
                          (f"file://{repo.bare}#v1/../../etc", "not a path inside"),
                          (f"file://{repo.bare}#v1/missing", "no hank file here")):
        result = run(project, address, "e")
        assert result.returncode == 2, result.stderr
        assert said in result.stderr and "Traceback" not in result.stderr
        assert not (project.root / "e").exists()


def test_the_cache_location_is_a_setting(project: Project, repo: Repo):
    repo.commit("One.", tag="v1")
    project.env["HANKWEAVE_RUNTIME_CACHE_DIR"] = str(project.root / "elsewhere")

    result = hankweave(project, "validate", f"file://{repo.bare}#v1/sub/hank", project.data)

    assert result.returncode == 0, result.stderr
    assert "elsewhere/hanks/" in result.stdout
    assert not (project.root / "home/.cache/hanks").exists()


# ----- an attacker's repository -----


def test_an_option_shaped_ref_runs_nothing(project: Project, repo: Repo, tmp_path: Path):
    """A branch named like a git option, even as the default branch, is never passed to git
    where an option could be read (it was: ``git fetch URL --upload-pack=…`` ran a command)."""
    repo.commit("One.")
    pwned = tmp_path / "pwned"
    evil = f"--upload-pack=touch${{IFS}}{pwned};git-upload-pack"
    head = git("rev-parse", "HEAD", cwd=repo.work)
    git("update-ref", f"refs/heads/{evil}", head, cwd=repo.bare)
    git("symbolic-ref", "HEAD", f"refs/heads/{evil}", cwd=repo.bare)
    git("branch", "-qD", "main", cwd=repo.bare)

    default = hankweave(project, "validate", f"file://{repo.bare}#{head}/sub/hank", project.data)
    named = hankweave(project, "validate", f"file://{repo.bare}#{evil}/sub/hank", project.data)
    bare = hankweave(project, "validate", f"file://{repo.bare}", project.data)

    assert not pwned.exists()
    assert default.returncode == 0, default.stderr
    assert named.returncode == 2 and "Traceback" not in named.stderr
    assert bare.returncode == 2 and "Traceback" not in bare.stderr
    assert not pwned.exists()


def test_a_symlink_in_the_repository_cannot_lead_out_of_the_checkout(project: Project,
                                                                     repo: Repo):
    repo.commit("One.")
    (repo.work / "linked").symlink_to("/etc")
    (repo.work / "sub" / "evil").mkdir()
    (repo.work / "sub" / "evil" / "hank.json").symlink_to(project.hank_dir / "hank.json")
    project.write_hank([codon("local")])
    git("add", "-A", cwd=repo.work)
    git("commit", "-q", "-m", "links", cwd=repo.work)
    git("push", "-q", "origin", "main", cwd=repo.work)

    for path, link in (("linked", "linked"), ("sub/evil", "sub/evil/hank.json")):
        result = hankweave(project, "validate", f"file://{repo.bare}#main/{path}", project.data)
        assert result.returncode == 2, result.stdout
        assert f"{link} is a symlink in the repository" in result.stderr


def test_a_url_password_never_shows_whatever_it_holds(project: Project, repo: Repo):
    secret = "se,c'ret\"pw"
    url = f"https://user:{secret}@127.0.0.1:9/repo.git#main"
    result = hankweave(project, "validate", url, project.data)
    assert result.returncode == 2
    assert secret not in result.stdout + result.stderr and "se,c" not in result.stderr
    assert "user:***@127.0.0.1" in result.stderr


def test_a_planted_cache_entry_is_not_trusted(project: Project, repo: Repo):
    repo.commit("One.", tag="v1")
    assert hankweave(project, "validate", f"file://{repo.bare}#v1/sub/hank",
                     project.data).returncode == 0
    [cache] = (project.root / "home/.cache/hanks").iterdir()
    planted = project.root / "planted"
    (planted / "sub/hank").mkdir(parents=True)
    (planted / "sub/hank/hank.json").write_text(json.dumps({"hank": [codon("planted")]}))
    (cache / "refs.json").write_text(json.dumps({"v1": {"commit": str(planted)},
                                                "main": "not an object"}))
    repo.bare.rename(repo.bare.with_name("moved.git"))

    result = hankweave(project, "validate", f"file://{repo.bare}#v1/sub/hank", project.data)

    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "v1/sub/hank is not in the cache" in result.stderr


def test_an_annotated_tag_resolves_to_its_commit(project: Project, repo: Repo):
    first = repo.commit("Tagged with a message.")
    git("tag", "-a", "v2", "-m", "release two", cwd=repo.work)
    git("push", "-q", "origin", "v2", cwd=repo.work)
    repo.commit("Later.")

    result = hankweave(project, "validate", f"file://{repo.bare}#v2/sub/hank", project.data)

    assert result.returncode == 0, result.stderr
    assert f"v2 at {first[:12]}" in result.stdout + result.stderr


def test_a_resume_fetches_the_same_commit_again_when_the_cache_was_deleted(
        project: Project, repo: Repo):
    import shutil

    first = repo.commit("One.")
    assert run(project, f"file://{repo.bare}#main/sub/hank", "e").returncode == 0
    repo.commit("Two.")  # the branch moved: a resume still runs the commit it started with
    shutil.rmtree(project.root / "home/.cache")

    again = hankweave(project, "run", "-e", project.root / "e", "--headless")

    assert again.returncode == 0, again.stderr
    assert f"commit {first[:12]}" in again.stdout + again.stderr
    assert read_prompt(recorded(project, "e")) == "One."
