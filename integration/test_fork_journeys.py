"""Fork and compare, as a person does them: real ``hankweave`` processes on the mock provider.

A 4-codon dry run (outline, draft, review, ship: each writes one file) is forked after draft
with review's prompt changed; the fork runs review and ship only, and ``compare`` shows codons
1-2 identical (shared checkpoints) and 3-4 different with review.txt's diff.  The source's
bytes are the same before and after.  Then: a fork of a fork, a fork while the source runs, a
fork at a loop iteration, a refused ``--at``, a fork of a replay, and a Claude run continued on
a pi model with its conversation forked (docs/fork.md)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hankweave.state.store import load_state
from integration.test_replay_quickstart import offline_env

BACKENDS = ("git", "snapshot")
REVIEW = "Looks good.\nship it\n"
LOUD_REVIEW = "LOOKS GOOD!\nSHIP IT\n"


def codon(codon_id: str, prompt: str, model: str = "gpt-5.2", **extra: Any) -> dict[str, Any]:
    return {"id": codon_id, "name": codon_id.title(), "model": model,
            "continuationMode": "fresh", "promptText": prompt,
            "checkpointedFiles": ["**/*.txt"], **extra}


def write_rule(name: str, prompt: str, path: str, content: str, answer: str,
               **when: Any) -> dict[str, Any]:
    return {"name": name, "when": {"lastUserMessage": {"contains": prompt}, **when},
            "steps": [{"write": {"path": path, "content": content}}, {"answer": answer}]}


SCRIPT = {"rules": [
    write_rule("outline", "Step outline", "outline.txt", "1. intro\n2. body\n", "Outlined."),
    write_rule("draft", "Step draft", "draft.txt", "The draft.\n", "Drafted."),
    write_rule("loud", "Step review loudly", "review.txt", LOUD_REVIEW, "REVIEWED."),
    write_rule("hostile", "Step review hostilely", "[bold]\x1b[2Jx.txt",
               "\x1b[31mred\x1b]0;title\x07\n", "\x1b[2JDone."),
    write_rule("review", "Step review", "review.txt", REVIEW, "Reviewed."),
    write_rule("ship", "Step ship", "ship.txt", "shipped\n", "Shipped."),
    write_rule("iterate", "Step iterate", "iterations.txt", "another\n", "Iterated."),
], "default": {"text": "OK."}}


def hank(review_prompt: str = "Step review please.") -> dict[str, Any]:
    return {"hank": [codon("outline", "Step outline please."),
                     codon("draft", "Step draft please."),
                     codon("review", review_prompt),
                     codon("ship", "Step ship please.")]}


class Place:
    """A folder with the hank, its changed copy, the data, the script and the executions."""

    def __init__(self, root: Path, backend: str = "git") -> None:
        self.root = root
        for name, content in (("hank", hank()), ("hank2", hank("Step review loudly please.")),
                              ("hank3", hank("Step review hostilely please."))):
            (root / name).mkdir(parents=True, exist_ok=True)
            (root / name / "hank.json").write_text(json.dumps(content, indent=2))
        (root / "data").mkdir(exist_ok=True)
        (root / "data" / "input.txt").write_text("input\n")
        self.script = root / "script.json"
        self.script.write_text(json.dumps(SCRIPT))
        self.env = {**offline_env(root / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": backend}

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "hankweave", *args]

    def hw(self, *args: str, timeout: float = 240, env_extra: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), cwd=self.root,
                              env={**self.env, **(env_extra or {})}, text=True,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def run(self, execution: str, hank_dir: str = "hank", *extra: str
            ) -> subprocess.CompletedProcess[str]:
        return self.hw("run", hank_dir, "data", "-e", execution, "--headless",
                       "--mock-provider", str(self.script), *extra)

    def fork(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.hw("fork", *args, "--headless")

    def compare(self, a: str, b: str) -> dict[str, Any]:
        shown = self.hw("compare", a, b, "--json")
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)  # type: ignore[no-any-return]

    def document(self, execution: str) -> dict[str, Any]:
        shown = self.hw("inspect", "execution", "-e", execution, "--json")
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)  # type: ignore[no-any-return]

    def requests(self, execution: str) -> list[dict[str, Any]]:
        log = self.root / execution / ".hankweave" / "mock-provider" / "requests.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

    def work(self, execution: str) -> dict[str, str]:
        root = self.root / execution / "agentRoot"
        return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
                if p.is_file() and "read_only_data_source" not in p.parts}


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links as links) with its content's sha256 and mode."""
    found: dict[str, str] = {}
    for folder, directories, files in os.walk(root):
        for name in sorted(directories + files):
            path = Path(folder) / name
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = f"link {os.readlink(path)}"
            elif path.is_file():
                found[rel] = f"{oct(info.st_mode)} {hashlib.sha256(path.read_bytes()).hexdigest()}"
            else:
                found[rel] = f"dir {oct(info.st_mode)}"
    return found


def prompts_sent(requests: list[dict[str, Any]]) -> set[str]:
    text = json.dumps(requests)
    return {step for step in ("Step outline", "Step draft", "Step review", "Step ship")
            if step in text}


ONE_BACKEND = pytest.mark.parametrize("source", ["git"], indirect=True)
"""For what does not depend on the checkpoint backend: the git source only (both backends run
the fork and compare journeys above it)."""


@pytest.fixture(scope="module", params=BACKENDS)
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Place:
    place = Place(tmp_path_factory.mktemp(f"fork-{request.param}"), request.param)
    ran = place.run("src")
    assert ran.returncode == 0, ran.stderr
    return place


def test_a_fork_with_a_changed_prompt_reruns_only_what_follows_and_compares(source: Place
                                                                            ) -> None:
    before = tree_digest(source.root / "src")

    forked = source.fork("-e", "src", "--at", "draft", "-o", "changed", "--hank", "hank2",
                         "--mock-provider", str(source.script))

    assert forked.returncode == 0, forked.stderr
    assert f"hankweave compare {source.root / 'src'} {source.root / 'changed'}" in forked.stderr
    assert tree_digest(source.root / "src") == before  # the source, byte for byte
    assert source.work("changed") == {"outline.txt": "1. intro\n2. body\n",
                                      "draft.txt": "The draft.\n", "review.txt": LOUD_REVIEW,
                                      "ship.txt": "shipped\n"}
    # Only the codons after the fork point reached the provider, review with its new prompt.
    assert prompts_sent(source.requests("changed")) == {"Step review", "Step ship"}
    assert "Step review loudly" in json.dumps(source.requests("changed"))

    compared = source.compare("src", "changed")
    rows = {row["codonId"]: row for row in compared["codons"]}
    assert [row["codonId"] for row in compared["codons"]] == ["outline", "draft", "review", "ship"]
    for shared in ("outline", "draft"):
        assert rows[shared]["sameCheckpoint"] and rows[shared]["differences"] == []
    assert compared["firstDivergence"] == 3
    assert compared["relation"] == "B is a fork of A after codon draft"
    for changed in ("review", "ship"):
        assert "workspace" in rows[changed]["differences"]
        [difference] = rows[changed]["files"]
        assert difference["path"] == "review.txt" and difference["change"] == "changed"
        assert "-Looks good.\n" in difference["diff"] and "+LOOKS GOOD!\n" in difference["diff"]
    assert rows["review"]["sameOutput"] is False
    assert rows["ship"]["sameOutput"] is True
    assert rows["review"]["a"]["status"] == rows["review"]["b"]["status"] == "completed"

    family = source.document("changed")["execution"]["family"]
    assert family["ancestors"][0]["path"] == str(source.root / "src")
    assert family["ancestors"][0]["codon"] == "draft"
    forks = source.document("src")["execution"]["family"]["forks"]
    assert str(source.root / "changed") in [fork["path"] for fork in forks]


def test_a_fork_of_a_fork_and_an_unchanged_fork_compares_equal(source: Place) -> None:
    first = source.fork("-e", "src", "--at", "outline", "-o", "first", "--no-start")
    assert first.returncode == 0, first.stderr
    assert "Run it: hankweave run -e" in first.stderr
    assert source.hw("run", "-e", "first", "--headless").returncode == 0
    second = source.fork("-e", "first", "--at", "review", "-o", "second")
    assert second.returncode == 0, second.stderr

    assert prompts_sent(source.requests("second")) == {"Step ship"}
    compared = source.compare("first", "second")
    assert compared["firstDivergence"] is None
    assert [row["sameWorkspace"] for row in compared["codons"]] == [True] * 4
    assert source.hw("compare", "first", "second", "--exit-code").returncode == 0
    ancestors = source.document("second")["execution"]["family"]["ancestors"]
    assert [a["path"] for a in ancestors] == [str(source.root / "first"),
                                              str(source.root / "src")]
    shown = source.hw("inspect", "thread", "-e", "second")
    assert f"forked from {source.root / 'first'}" in shown.stdout
    assert f"which was forked from {source.root / 'src'}" in shown.stdout


@ONE_BACKEND
def test_at_a_codon_that_never_finished_is_refused_with_the_choices(source: Place) -> None:
    refused = source.fork("-e", "src", "--at", "publish")
    assert refused.returncode == 2
    assert "Choose one of: outline, draft, review, ship" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not list(source.root.glob("src-fork-*"))
    before = tree_digest(source.root / "src")
    inside = source.fork("-e", "src", "--at", "draft", "-o", "src/agentRoot/fork")
    assert inside.returncode == 2 and "one lies inside the other" in inside.stderr
    assert tree_digest(source.root / "src") == before


@ONE_BACKEND
def test_a_changed_history_is_refused_unless_allowed(source: Place) -> None:
    refused = source.fork("-e", "src", "--at", "ship", "--hank", "hank2", "--no-start")
    assert refused.returncode == 2
    assert "review: its prompt, settings or files differ" in refused.stderr
    allowed = source.fork("-e", "src", "--at", "ship", "--hank", "hank2", "--no-start",
                          "--allow-changed-history", "-o", "kept")
    assert allowed.returncode == 0, allowed.stderr
    meta = json.loads((source.root / "kept/.hankweave/execution-meta.json").read_text())
    assert meta["forkedFrom"]["changedHistory"] == [
        "review: its prompt, settings or files differ"]


def test_a_fork_while_the_source_runs(tmp_path: Path) -> None:
    place = Place(tmp_path)
    slow = dict(SCRIPT)
    slow["rules"] = [{"name": "slow", "when": {"lastUserMessage": {"contains": "Step review"}},
                      "reply": {"text": "thinking", "delayMs": 60_000}}, *SCRIPT["rules"]]
    place.script.write_text(json.dumps(slow))
    running = subprocess.Popen(
        place.command("run", "hank", "data", "-e", "src", "--headless", "--mock-provider",
                      str(place.script)),
        cwd=tmp_path, env=place.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _runs(tmp_path / "src", "review"):
            assert time.monotonic() < deadline and running.poll() is None
            time.sleep(0.1)
        refused = place.fork("-e", "src", "--at", "review")
        assert refused.returncode == 2 and "Choose one of: outline, draft" in refused.stderr

        forked = place.fork("-e", "src", "--at", "draft", "-o", "fork", "--no-start")
        assert forked.returncode == 0, forked.stderr
        state = json.loads((tmp_path / "fork/.hankweave/state.json").read_text())
        [run] = state["runs"]
        assert [c["codonId"] for c in run["codons"]] == ["outline", "draft"]
        assert run["status"] == "completed"
        events = (tmp_path / "fork/.hankweave/events/events.jsonl").read_text().splitlines()
        last = json.loads(events[-1])
        assert (last["type"], last["data"]["codonId"]) == ("codon.completed", "draft")
        assert running.poll() is None  # the source's run goes on
    finally:
        running.send_signal(signal.SIGINT)
        running.communicate(timeout=60)
    place.script.write_text(json.dumps(SCRIPT))
    ran = place.hw("run", "-e", "fork", "--headless", "--mock-provider", str(place.script))
    assert ran.returncode == 0, ran.stderr
    assert place.work("fork")["review.txt"] == REVIEW


def _runs(execution: Path, codon_id: str) -> bool:
    """Whether the runtime in ``execution`` has recorded ``codon_id`` running."""
    if not (execution / ".hankweave/state.wal").exists():
        return False
    state = load_state(execution / ".hankweave")[0]
    return any(c.codon_id == codon_id and c.status == "running"
               for run in state.runs for c in run.codons)


def test_a_fork_at_a_loop_iteration_runs_the_rest_of_the_loop(tmp_path: Path) -> None:
    place = Place(tmp_path)
    (tmp_path / "hank" / "hank.json").write_text(json.dumps({"hank": [
        codon("outline", "Step outline please."),
        {"type": "loop", "id": "L", "name": "Loop",
         "terminateOn": {"type": "iterationLimit", "limit": 3},
         "codons": [codon("iterate", "Step iterate please.")]},
        codon("ship", "Step ship please.")]}))
    assert place.run("src").returncode == 0

    forked = place.fork("-e", "src", "--at", "iterate#1", "-o", "fork")

    assert forked.returncode == 0, forked.stderr
    requests = place.requests("fork")
    assert sum("Step iterate" in json.dumps(r) for r in requests) >= 1
    state = json.loads((tmp_path / "fork/.hankweave/state.json").read_text())
    thread = [c["codonId"] for run in reversed(state["runs"]) for c in run["codons"]]
    assert thread == ["outline", "iterate#0", "iterate#1", "iterate#2", "ship"]
    compared = place.compare("src", "fork")
    assert [row["sameCheckpoint"] for row in compared["codons"]][:3] == [True] * 3


def test_a_fork_of_a_replay_continues_on_the_mock_provider(source: Place) -> None:
    exported = source.hw("export", "-e", "src", "-o", "src.hwrec.tar.gz")
    assert exported.returncode == 0, exported.stderr
    replayed = source.hw("run", "--replay", "src.hwrec.tar.gz", "-e", "replayed", "--headless")
    assert replayed.returncode == 0, replayed.stderr

    forked = source.fork("-e", "replayed", "--at", "draft", "-o", "replay-fork",
                         "--mock-provider", str(source.script))

    assert forked.returncode == 0, forked.stderr
    assert prompts_sent(source.requests("replay-fork")) == {"Step review", "Step ship"}
    assert source.work("replay-fork") == source.work("src")
    assert source.compare("replayed", "replay-fork")["codons"][1]["sameCheckpoint"]


def test_a_claude_conversation_forks_and_a_fork_continues_on_a_pi_model(tmp_path: Path
                                                                        ) -> None:
    """The fork's next codon continues the Claude session from the fork's own copy (the CLI
    finds it under the fork's work directory), and the source's transcripts stay as they were;
    a fork of the same run continues its last codon on a pi model."""
    place = Place(tmp_path)
    (tmp_path / "hank" / "hank.json").write_text(json.dumps({"hank": [
        codon("outline", "Step outline please.", model="haiku"),
        codon("draft", "Step draft please.", model="haiku", continuationMode="continue-previous"),
        codon("ship", "Step ship please.", model="haiku")]}))
    assert place.run("src").returncode == 0
    transcripts = tmp_path / "src/.hankweave/harnesses/claude"
    before = tree_digest(transcripts)

    forked = place.fork("-e", "src", "--at", "outline", "-o", "fork")

    assert forked.returncode == 0, forked.stderr
    assert tree_digest(transcripts) == before
    draft = next(r for r in place.requests("fork") if "Step draft" in json.dumps(r["request"]))
    assert "Step outline" in json.dumps(draft["request"])  # the conversation it continued
    assert draft["protocol"] == "anthropic"
    state = json.loads((tmp_path / "fork/.hankweave/state.json").read_text())
    records = {c["codonId"]: c for run in state["runs"] for c in run["codons"]}
    assert records["draft"]["previousSessionId"] == records["outline"]["claudeSessionId"]

    on_pi = place.fork("-e", "src", "--at", "draft", "-o", "pi", "-m", "gpt-5.2")

    assert on_pi.returncode == 0, on_pi.stderr
    [ship] = place.requests("pi")[:1]
    assert ship["protocol"] == "openai" and "Step ship" in json.dumps(ship["request"])
    assert place.work("pi") == place.work("src")


@ONE_BACKEND
@pytest.mark.parametrize("point", ["fork.copied", "fork.meta-written"])
def test_a_killed_fork_is_never_half_an_execution(source: Place, point: str) -> None:
    target = f"killed-{point}"
    killed = source.hw("fork", "-e", "src", "--at", "draft", "-o", target, "--no-start",
                       env_extra={"HANKWEAVE_TEST_KILL_AT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if point == "fork.copied":
        # Not an execution a resume takes; the next fork into it starts over.
        refused = source.hw("run", "hank", "data", "-e", target, "--headless")
        assert refused.returncode == 2 and "stopped while it was being made" in refused.stderr
    again = source.fork("-e", "src", "--at", "draft", "-o", target, "--no-start")
    if point == "fork.copied":
        assert again.returncode == 0, again.stderr
    else:  # the fork was complete: it is kept, and runs
        assert again.returncode == 2 and "not an empty directory" in again.stderr
    ran = source.hw("run", "-e", target, "--headless")
    assert ran.returncode == 0, ran.stderr
    assert source.work(target) == source.work("src")


@ONE_BACKEND
def test_compare_shows_an_agent_s_names_and_text_without_running_them(source: Place) -> None:
    """File names and contents are the agent's: the terminal gets them escaped, never as
    control sequences or rich markup."""
    forked = source.fork("-e", "src", "--at", "draft", "-o", "hostile", "--hank", "hank3",
                         "--mock-provider", str(source.script))
    assert forked.returncode == 0, forked.stderr

    shown = source.hw("compare", "src", "hostile")

    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "[bold]\\x1b[2Jx.txt" in shown.stdout  # the name, escaped, markup not applied
    assert "+\\x1b[31mred" in shown.stdout


def _hostile_copy(source: Place, name: str) -> Path:
    """A copy of the source whose state can be edited (its log folded away)."""
    import shutil

    copy = source.root / name
    shutil.copytree(source.root / "src", copy, symlinks=True)
    for log in (copy / ".hankweave").glob("state.wal*"):
        log.unlink()
    return copy


@ONE_BACKEND
def test_a_hostile_source_cannot_make_a_fork_write_outside_it(source: Place) -> None:
    """Names from a source's files (a run id, a planted symlink) never lead a fork outside its
    directory, and a directory that merely has a fork's marker is never removed."""
    hostile = _hostile_copy(source, "hostile-src")
    state = json.loads((hostile / ".hankweave/state.json").read_text())
    old_id = state["runs"][0]["runId"]
    state["runs"][0]["runId"] = state["currentRunId"] = "../../../loot"
    (hostile / ".hankweave/state.json").write_text(
        json.dumps(state).replace(f'"runId": "{old_id}"', '"runId": "../../../loot"'))
    (hostile / ".hankweave/harnesses/pi").mkdir(parents=True, exist_ok=True)
    (hostile / ".hankweave/harnesses/pi/escape").symlink_to(source.root / "src")
    (source.root / "loot").mkdir()
    (source.root / "loot/outline-claude.log").write_text("x")

    forked = source.fork("-e", "hostile-src", "--at", "draft", "-o", "deep/fork", "--no-start")

    assert forked.returncode == 0, forked.stderr
    assert not (source.root / "deep/loot").exists() and not (source.root / "loot").joinpath(
        "draft-claude.log").exists()
    assert not (source.root / "deep/fork/.hankweave/harnesses/pi/escape").exists()

    (source.root / "mine/.hankweave").mkdir(parents=True)
    (source.root / "mine/notes.txt").write_text("important")
    (source.root / "mine/.hankweave/forking").write_text("999999")
    refused = source.fork("-e", "src", "--at", "draft", "-o", "mine", "--no-start")
    assert refused.returncode == 2 and "not an empty directory" in refused.stderr
    assert (source.root / "mine/notes.txt").read_text() == "important"


@ONE_BACKEND
def test_a_fork_of_copied_data_copies_it_and_a_hank_with_other_codons_is_refused(
        source: Place) -> None:
    ran = source.run("copied", "hank", "--copy")
    assert ran.returncode == 0, ran.stderr
    forked = source.fork("-e", "copied", "--at", "draft", "-o", "copied-fork", "--no-start")
    assert forked.returncode == 0, forked.stderr
    data = source.root / "copied-fork/agentRoot/read_only_data_source/input.txt"
    assert data.read_text() == "input\n" and data.stat().st_nlink == 1  # not shared

    (source.root / "hank5").mkdir(exist_ok=True)
    more = hank()
    more["hank"].insert(2, codon("polish", "Step polish please."))
    (source.root / "hank5/hank.json").write_text(json.dumps(more))
    refused = source.fork("-e", "src", "--at", "draft", "--hank", "hank5", "--no-start")
    assert refused.returncode == 2, refused.stderr
    assert "other codons than the source's (added: polish)" in refused.stderr
