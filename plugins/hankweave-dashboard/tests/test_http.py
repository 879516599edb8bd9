"""Every JSON endpoint of a real ``hankweave dashboard`` process, and bad input: a malformed
id is 400, an unknown one 404, a locked or read-only dashboard 403, never a traceback."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from dashboard_helpers import LONG, PACED, Dashboard, Project, dashboard, wait_for

from hankweave.api import ExecutionLayout


def get(served: Dashboard, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(served.api(path), timeout=30, **kwargs)


def post(served: Dashboard, path: str, body: Any, key: str | None = None,
         **kwargs: Any) -> httpx.Response:
    headers = {"Content-Type": "application/json", **kwargs.pop("headers", {})}
    if key is not None:
        headers["X-Hankweave-Key"] = key
    return httpx.post(served.api(path), content=json.dumps(body), headers=headers, timeout=30,
                      **kwargs)


def the_id(served: Dashboard, name: str) -> str:
    rows = get(served, "/api/executions").json()["executions"]
    return next(row["id"] for row in rows if row["name"] == name)


def assert_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert words in body["error"], body
    assert "Traceback" not in response.text


def test_the_list_has_each_execution_with_its_facts(served: Dashboard, finished: Path) -> None:
    data = get(served, "/api/executions").json()
    (row,) = data["executions"]
    assert row["path"] == str(finished.resolve())
    assert row["hank"] == "notes" and row["status"] == "completed" and row["live"] is False
    assert row["codons"] == 2 and row["finishedCodons"] == 2
    assert row["cost"] == pytest.approx(0.03)
    assert row["startTime"] and row["endTime"] and row["lastActivity"]
    assert data["control"] is True


def test_the_execution_page_data(served: Dashboard, finished: Path) -> None:
    page = get(served, f"/api/executions/{the_id(served, 'finished')}").json()
    assert page["execution"]["status"] == "completed" and page["live"] is False
    assert [entry["codonId"] for entry in page["plan"]] == ["write", "edit"]
    write = page["plan"][0]
    assert write["status"] == "completed" and write["cost"] == pytest.approx(0.02)
    assert write["tokens"]["output"] > 0 and write["runId"] == page["runs"][0]["runId"]
    assert page["tokens"]["output"] == sum(e["tokens"]["output"] for e in page["plan"])
    assert page["lastSeq"] > 10 and page["runtime"] is None
    assert page["thread"]["nextCodonId"] is None
    assert "token" not in json.dumps(page).lower().replace("tokens", "")


def test_a_codon_conversation_diff_sentinels_and_budget(served: Dashboard) -> None:
    ident = the_id(served, "finished")
    page = get(served, f"/api/executions/{ident}").json()
    run_id = page["plan"][1]["runId"]
    base = f"/api/executions/{ident}/runs/{run_id}/codons"

    log = get(served, f"{base}/write/log").json()
    kinds = [item["kind"] for item in log["items"]]
    assert "text" in kinds and "tool_use" in kinds and kinds[-1] == "result"

    diff = get(served, f"{base}/edit/diff").json()
    (changed,) = diff["files"]
    assert changed["path"] == "notes.md" and changed["change"] == "modified"
    assert "+second line" in changed["diff"]
    first = get(served, f"{base}/write/diff").json()
    assert {f["path"]: f["change"] for f in first["files"]} == {"extra.txt": "added",
                                                                "notes.md": "added"}

    sentinels = get(served, f"{base}/write/sentinels").json()
    assert sentinels == {"outputs": [], "sentinels": []}
    outputs = Path(page["path"]) / ".hankweave" / "sentinels" / "outputs" / "critic"
    outputs.mkdir(parents=True)
    (outputs / "critic-write-1796000000000.md").write_text("Looks fine.\n")
    (outputs / "critic-edit-1796000000001.md").write_text("Not this codon's.\n")
    (shown,) = get(served, f"{base}/write/sentinels").json()["outputs"]
    assert shown == {"sentinel": "critic", "file": "critic-write-1796000000000.md",
                     "text": "Looks fine.\n"}

    budget = get(served, f"/api/executions/{ident}/budget").json()
    assert [entry["codonId"] for entry in budget["entries"]] == ["write", "edit"]
    assert budget["spentDollars"] == pytest.approx(0.03)
    assert get(served, f"/api/executions/{ident}/budget").json() == budget  # incremental


def test_the_event_stream_resumes_after_a_seq(served: Dashboard) -> None:
    ident = the_id(served, "finished")
    last = get(served, f"/api/executions/{ident}").json()["lastSeq"]

    def first_ids(headers: dict[str, str], query: str, count: int) -> list[int]:
        seqs: list[int] = []
        with httpx.stream("GET", served.api(f"/api/executions/{ident}/events{query}"),
                          headers=headers, timeout=30) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("id: "):
                    seqs.append(int(line[4:]))
                    if len(seqs) == count:
                        break
        return seqs

    assert first_ids({}, f"?afterSeq={last - 3}", 3) == [last - 2, last - 1, last]
    # A reconnecting browser sends Last-Event-ID; it wins over the URL's afterSeq.
    assert first_ids({"Last-Event-ID": str(last - 1)}, "?afterSeq=0", 1) == [last]


@pytest.mark.parametrize(("path", "status", "words"), [
    ("/api/executions/not-an-id", 400, "not an execution id"),
    ("/api/executions/0123456789abcdef", 404, "no execution 0123456789abcdef"),
    ("/api/executions/../../etc/passwd", 404, "no such page"),
    ("/api/nothing", 404, "no such page"),
])
def test_bad_execution_ids(served: Dashboard, path: str, status: int, words: str) -> None:
    assert_error(get(served, path), status, words)


def test_bad_codon_requests(served: Dashboard) -> None:
    ident = the_id(served, "finished")
    run_id = get(served, f"/api/executions/{ident}").json()["runs"][0]["runId"]
    base = f"/api/executions/{ident}/runs"
    assert_error(get(served, f"{base}/{run_id}/codons/nope/log"), 404, "did not run")
    assert_error(get(served, f"{base}/1-nope/codons/write/log"), 404, "no run 1-nope")
    assert_error(get(served, f"{base}/{run_id}/codons/%2E%2E/diff"), 400, "not a codon id")
    assert_error(get(served, f"{base}/{run_id}/codons/write/sentinels?x=1",
                     headers={"Host": "evil.example"}), 400, "")
    assert_error(get(served, f"/api/executions/{ident}/events?afterSeq=-4"), 400,
                 "afterSeq must be a seq")


def test_a_foreign_host_is_refused(served: Dashboard) -> None:
    # DNS rebinding: a page on another name that resolves to 127.0.0.1 gets nothing.
    response = get(served, "/api/executions", headers={"Host": "attacker.example:80"})
    assert response.status_code == 400 and "executions" not in response.text


def test_control_needs_the_key(served: Dashboard) -> None:
    ident = the_id(served, "finished")
    assert_error(post(served, "/api/unlock", {}), 403, "control is locked")
    assert_error(post(served, "/api/unlock", {}, key="wrong"), 403, "control is locked")
    assert post(served, "/api/unlock", {}, key=served.key).json()["ok"] is True
    assert_error(post(served, f"/api/executions/{ident}/control", {"action": "skip"}), 403,
                 "locked")


def test_control_of_a_finished_execution_and_bad_bodies(served: Dashboard) -> None:
    ident = the_id(served, "finished")
    url = f"/api/executions/{ident}/control"
    assert_error(post(served, url, {"action": "skip"}, key=served.key), 409,
                 "No hankweave runtime is running")
    assert_error(post(served, url, {"action": "explode"}, key=served.key), 400, "action")
    assert_error(post(served, url, {"action": "start"}, key=served.key), 400, "needs a codonId")
    assert_error(post(served, url, ["skip"], key=served.key), 400, "bad request body")
    response = httpx.post(served.api(url), content="action=skip", timeout=30,
                          headers={"Content-Type": "application/x-www-form-urlencoded",
                                   "X-Hankweave-Key": served.key or ""})
    assert_error(response, 400, "must be JSON")
    answer = f"/api/executions/{ident}/interruptions/int-1-abcde/answer"
    assert_error(post(served, answer, {"answer": "yes", "approve": True}, key=served.key), 400,
                 "exactly one")
    assert_error(post(served, answer, {"answer": "yes"}, key=served.key), 409, "int-1-abcde")


def test_a_read_only_dashboard_never_unlocks(project: Project, finished: Path) -> None:
    with dashboard(project, "--read-only") as served:
        assert served.key is None
        assert_error(post(served, "/api/unlock", {}, key="anything"), 403, "read-only")
        assert get(served, "/api/executions").json()["control"] is False


def test_an_answer_with_no_runtime_is_recorded(project: Project) -> None:
    hank = project.hank("asks", {"ask": {"askHuman": "Which colour?", "messages": 1}})
    execution = project.run(hank, project.data("set-b"), "asks")
    state = project.state(execution)
    (item,) = [i for i in state.interruptions if i.status == "pending"]
    with dashboard(project) as served:
        ident = the_id(served, "asks")
        row = next(r for r in get(served, "/api/executions").json()["executions"]
                   if r["id"] == ident)
        assert row["status"] == "interrupted" and row["pendingInterruptions"] == 1
        reply = post(served, f"/api/executions/{ident}/interruptions/{item.id}/answer",
                     {"answer": "teal", "by": "tester"}, key=served.key).json()
        assert reply["forwarded"] is False and reply["answer"] == "teal"
        answered = project.state(execution).interruption(item.id)
        assert answered.status == "answered" and answered.answer == "teal"
        assert answered.answered_by == "tester"
        again = post(served, f"/api/executions/{ident}/interruptions/{item.id}/answer",
                     {"answer": "red"}, key=served.key)
        assert_error(again, 409, "already")


def test_an_unreadable_execution_is_listed_with_why(served: Dashboard, project: Project) -> None:
    broken = project.executions / "broken" / ".hankweave"
    broken.mkdir(parents=True)
    (broken / "state.json").write_text("{not json")
    rows = {row["name"]: row for row in get(served, "/api/executions").json()["executions"]}
    assert rows["broken"]["status"] == "unreadable" and rows["broken"]["error"]
    assert_error(get(served, f"/api/executions/{rows['broken']['id']}"), 404, "cannot be read")


def test_a_live_execution_controls_and_defers_its_diffs(project: Project) -> None:
    hank = project.hank("live", {"a": {**PACED, "writeFiles": {"a.md": "a\n"}}, "b": LONG})
    execution = project.executions / "live"
    run = project.start(hank, project.data("set-l"), execution)
    wait_for("b to run", lambda: execution.joinpath(".hankweave", "state.json").exists()
             and project.codon_status(execution, "b") == "running")
    with dashboard(project) as served:
        ident = the_id(served, "live")
        page = get(served, f"/api/executions/{ident}").json()
        assert page["live"] is True and page["runtime"]["pid"] == run.pid
        assert page["currentCodon"] == "b"
        run_id = page["runs"][0]["runId"]
        assert_error(get(served, f"/api/executions/{ident}/runs/{run_id}/codons/a/diff"), 409,
                     "when the run ends")
        reply = post(served, f"/api/executions/{ident}/control", {"action": "skip"},
                     key=served.key)
        assert reply.status_code == 200 and reply.json()["command"] == "codon.skip", reply.text
        assert run.wait(timeout=60) == 0
        assert project.codon_status(execution, "b") == "skipped"
        wait_for("the lock to go", lambda: not get(
            served, f"/api/executions/{ident}").json()["live"])
        diff = get(served, f"/api/executions/{ident}/runs/{run_id}/codons/a/diff").json()
        assert [f["path"] for f in diff["files"]] == ["a.md"]


# ----- what a person tells executions apart by (issue 37) -----


def rows_by_name(served: Dashboard) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in get(served, "/api/executions").json()["executions"]}


def test_each_row_is_named_by_its_hank_s_name_and_its_execution(project: Project) -> None:
    hank = project.hank("folder-name", {"only": {"messages": 1}},
                        meta={"name": "harbour-report", "version": "1.0.0"})
    data = project.data("set-n")
    project.run(hank, data, "monday")
    project.run(hank, data, "tuesday")
    with dashboard(project) as served:
        rows = rows_by_name(served)
    assert {name: (row["title"], row["replayOf"]) for name, row in rows.items()} == {
        "monday": ("harbour-report", None), "tuesday": ("harbour-report", None)}


def test_interrupted_executions_say_why_and_how_to_go_on(project: Project) -> None:
    asks = project.hank("asks", {"ask": {"askHuman": "Which colour?", "messages": 1}})
    waiting = project.run(asks, project.data("set-w"), "waiting")
    notes = project.hank("notes", {"write": {"messages": 1, "writeFiles": {"a.md": "a\n"}},
                                   "edit": {"messages": 1, "writeFiles": {"a.md": "b\n"}}})
    rolled = project.run(notes, project.data("set-r"), "rolled")
    done = subprocess.run([sys.executable, "-m", "hankweave", "rollback", "-e", str(rolled),
                           "--to", "write"], env=project.env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    with dashboard(project) as served:
        rows = rows_by_name(served)
        # One status in the state, three different situations on the page.
        assert rows["waiting"]["status"] == rows["rolled"]["status"] == "interrupted"
        assert rows["waiting"]["badge"] == {"kind": "waiting", "text": "waiting for you"}
        assert rows["rolled"]["badge"] == {"kind": "rolled-back",
                                           "text": "rolled back to write"}
        page = get(served, f"/api/executions/{rows['rolled']['id']}").json()
        assert page["badge"] == rows["rolled"]["badge"]
        assert page["resumeCommand"] == f"hankweave run -e {rolled.resolve()}"
        (item,) = [i for i in project.state(waiting).interruptions if i.status == "pending"]
        post(served, f"/api/executions/{rows['waiting']['id']}/interruptions/{item.id}/answer",
             {"answer": "teal"}, key=served.key)
        answered = rows_by_name(served)["waiting"]
        assert answered["badge"] == {"kind": "paused", "text": "answered: ready to go on"}
        command = answered["resumeCommand"]
    # The command the page shows, pasted: the run goes on with the answer.
    argv = shlex.split(command)
    assert argv[0] == "hankweave"
    pasted = subprocess.run([sys.executable, "-m", "hankweave", *argv[1:]], env=project.env,
                            capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            timeout=120, check=False)
    assert pasted.returncode == 0, pasted.stderr
    assert project.codon_status(waiting, "ask") == "completed"


def test_the_cost_and_time_cards_are_the_budget_s_figures(project: Project) -> None:
    # A skipped codon's partial cost counts against the budget: the cards must say so too.
    hank = project.hank("budgeted", {"slow": {**LONG, "cost": 0.25}, "then": PACED},
                        overrides={"budget": {"maxDollars": 5}})
    execution = project.executions / "budgeted"
    run = project.start(hank, project.data("set-b2"), execution)
    wait_for("the slow codon to spend", lambda: execution.joinpath(".hankweave",
                                                                   "state.json").exists()
             and project.codon_status(execution, "slow") == "running")
    with dashboard(project) as served:
        ident = the_id(served, "budgeted")
        post(served, f"/api/executions/{ident}/control", {"action": "skip"}, key=served.key)
        assert run.wait(timeout=60) == 0
        page = get(served, f"/api/executions/{ident}").json()
        budget = get(served, f"/api/executions/{ident}/budget").json()
        row = rows_by_name(served)["budgeted"]
    assert page["spent"] == {"dollars": pytest.approx(budget["spentDollars"]),
                             "seconds": pytest.approx(budget["elapsedSeconds"])}
    assert row["cost"] == pytest.approx(budget["spentDollars"])
    assert row["seconds"] == pytest.approx(budget["elapsedSeconds"])


@pytest.mark.parametrize("path", ["/executions/0123456789abcdef", "/executions/not-an-id",
                                  "/nothing/here"])
def test_a_page_that_is_not_here_says_so_in_html(served: Dashboard, path: str) -> None:
    answer = get(served, path, headers={"Accept": "text/html"})
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("text/html")
    assert "Not found" in answer.text and 'href="/"' in answer.text
    assert "loading" not in answer.text and "Traceback" not in answer.text


def test_the_not_found_page_escapes_what_the_url_said(served: Dashboard) -> None:
    answer = get(served, "/<script>alert(1)</script>", headers={"Accept": "text/html"})
    assert answer.status_code == 404
    assert "<script>" not in answer.text and "&lt;script&gt;" in answer.text


def test_a_replay_is_named_by_its_hank_and_its_recording(project: Project) -> None:
    recording = Path(__file__).resolve().parents[3] / "examples/quickstart/recording.hwrec.tar.gz"
    env = {**project.env, "HANKWEAVE_LOAD_PLUGINS": "checkpoint-git,dashboard,replay"}
    done = subprocess.run([sys.executable, "-m", "hankweave", "replay", str(recording), "-e",
                           str(project.executions / "replayed"), "--headless"], env=env,
                          cwd=project.root, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    with dashboard(project) as served:
        row = rows_by_name(served)["replayed"]
    assert (row["title"], row["replayOf"]) == ("quickstart", "recording.hwrec.tar.gz")


def test_a_dieted_execution_reads_as_it_did(served: Dashboard, finished: Path) -> None:
    """``hankweave --diet-journal`` compresses the journal; the page and its event stream see
    the original events (hankweave.events.diet)."""
    ident = the_id(served, "finished")
    before = get(served, f"/api/executions/{ident}").json()
    dieted = subprocess.run([sys.executable, "-m", "hankweave", "--diet-journal", str(finished)],
                            capture_output=True, text=True, timeout=60)
    assert dieted.returncode == 0, dieted.stderr
    assert not ExecutionLayout(finished).events_file.exists()

    after = get(served, f"/api/executions/{ident}").json()

    assert after["lastSeq"] == before["lastSeq"] > 10
    assert after["plan"] == before["plan"]
    seqs: list[int] = []
    with httpx.stream("GET", served.api(f"/api/executions/{ident}/events?afterSeq=0"),
                      timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("id: "):
                seqs.append(int(line[4:]))
                if len(seqs) == 3:
                    break
    assert seqs == [1, 2, 3]


def test_a_bundle_run_says_where_its_hank_came_from(project: Project, tmp_path: Path) -> None:
    from hankweave.api import pack_hank

    hank = project.hank("bundled", {"only": {"messages": 1}})
    packed = pack_hank(hank, output=Path("bundled.hank"), cwd=tmp_path)
    assert packed.output is not None and packed.lock is not None
    execution = project.executions / "from-bundle"
    done = subprocess.run([sys.executable, "-m", "hankweave", "run", str(packed.output),
                           str(project.data("b")), "-e", str(execution), "--headless"],
                          env=project.env, cwd=project.root, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    with dashboard(project) as served:
        page = get(served, f"/api/executions/{the_id(served, 'from-bundle')}").json()
    assert page["execution"]["hankSource"] == {
        "bundleHash": packed.lock.bundle_hash, "bundlePath": str(packed.output),
        "remote": None}
