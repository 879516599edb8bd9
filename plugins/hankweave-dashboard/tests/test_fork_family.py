"""The fork family on an execution's page and the comparison of two executions
(``/api/compare``, ``/compare``), from a real ``hankweave dashboard`` over real forks
(``hankweave fork``, docs/fork.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from dashboard_helpers import Dashboard, Project, dashboard
from test_http import assert_error, get, the_id


def page_of(served: Dashboard, name: str) -> dict[str, Any]:
    return get(served, f"/api/executions/{the_id(served, name)}").json()


def compared(served: Dashboard, a: str, b: str) -> dict[str, Any]:
    answer = get(served, f"/api/compare?a={the_id(served, a)}&b={the_id(served, b)}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def the_id_of(execution: Path) -> str:
    """The id a dashboard would give ``execution``, had it served it."""
    from hankweave_dashboard.catalog import execution_id

    return execution_id(execution)


def write_checkpoint(project: Project, execution: Path) -> str:
    (record,) = [r for run in project.state(execution).runs for r in run.codons
                 if r.codon_id == "write"]
    from hankweave.api import end_checkpoint

    checkpoint = end_checkpoint(record)
    assert checkpoint is not None
    return checkpoint


def test_the_source_s_page_lists_its_fork(project: Project, finished: Path,
                                          forked: Path) -> None:
    with dashboard(project) as served:
        page = page_of(served, "finished")
        fork_id = the_id(served, "finished-fork")
    (fork,) = page["family"]["forks"]
    assert fork["id"] == fork_id and fork["name"] == "finished-fork"
    assert fork["path"] == str(forked.resolve()) and fork["exists"] is True
    assert fork["codon"] == "write"
    assert fork["checkpoint"] == write_checkpoint(project, finished)
    assert page["family"]["ancestors"] == []
    assert page["execution"]["family"]["forks"][0]["path"] == fork["path"]  # the document's


def test_the_fork_s_page_names_its_source(project: Project, finished: Path,
                                          forked: Path) -> None:
    with dashboard(project) as served:
        page = page_of(served, "finished-fork")
        source_id = the_id(served, "finished")
    (source,) = page["family"]["ancestors"]
    assert source["id"] == source_id and source["name"] == "finished"
    assert (source["codon"], source["exists"]) == ("write", True)
    assert page["family"]["forks"] == []


def test_an_execution_without_relations_has_no_family(served: Dashboard) -> None:
    page = page_of(served, "finished")
    assert page["family"] is None and page["execution"]["family"] is None


def test_a_source_the_dashboard_does_not_serve_is_named_not_linked(project: Project,
                                                                   finished: Path,
                                                                   forked: Path) -> None:
    with dashboard(project, str(forked)) as served:  # the fork alone
        (source,) = page_of(served, "finished-fork")["family"]["ancestors"]
        assert source["id"] is None and source["exists"] is True
        assert source["path"] == str(finished.resolve())
        assert_error(get(served, f"/api/executions/{the_id_of(finished)}"), 404,
                     "no execution")


def test_a_source_that_is_gone_says_so(project: Project, finished: Path, forked: Path) -> None:
    shutil.move(finished, project.root / "moved-away")
    with dashboard(project) as served:
        (source,) = page_of(served, "finished-fork")["family"]["ancestors"]
    assert source["exists"] is False and source["id"] is None


# ----- /api/compare -----


def test_a_fork_compared_with_its_source(project: Project, finished: Path,
                                         forked: Path) -> None:
    with dashboard(project) as served:
        data = compared(served, "finished", "finished-fork")
        ids = (the_id(served, "finished"), the_id(served, "finished-fork"))
    assert (data["a"]["id"], data["b"]["id"]) == ids
    assert (data["a"]["name"], data["b"]["name"]) == ("finished", "finished-fork")
    assert data["a"]["title"] == "notes" and data["b"]["forkedFrom"]["codon"] == "write"
    assert data["relation"] == "B is a fork of A after codon write"
    write, edit = data["codons"]
    assert write["codonId"] == "write" and write["sameCheckpoint"] is True
    assert write["sameWorkspace"] is True and write["differences"] == []
    assert edit["codonId"] == "edit" and "workspace" in edit["differences"]
    assert data["firstDivergence"] == edit["position"] == 2
    (notes,) = edit["files"]
    assert (notes["path"], notes["change"], notes["binary"]) == ("notes.md", "changed", False)
    assert "-second line\n" in notes["diff"] and "+another line\n" in notes["diff"]
    assert edit["a"]["cost"] == pytest.approx(0.01) and edit["b"]["cost"] == pytest.approx(0.015)


def test_an_execution_compared_with_itself(served: Dashboard) -> None:
    ident = the_id(served, "finished")
    data = get(served, f"/api/compare?a={ident}&b={ident}").json()
    assert data["firstDivergence"] is None and data["relation"] is None
    assert [row["sameCheckpoint"] for row in data["codons"]] == [True, True]
    assert all(row["differences"] == [] for row in data["codons"])


@pytest.mark.parametrize(("query", "status", "words"), [
    ("?a=0123456789abcdef&b={ident}", 404, "no execution 0123456789abcdef"),
    ("?a={ident}&b=../../etc", 400, "not an execution id"),
    ("?a={ident}", 400, "name the two executions"),
    ("", 400, "name the two executions"),
])
def test_compare_refuses_what_the_dashboard_does_not_serve(served: Dashboard, query: str,
                                                           status: int, words: str) -> None:
    ident = the_id(served, "finished")
    assert_error(get(served, "/api/compare" + query.format(ident=ident)), status, words)


def test_an_execution_that_cannot_be_compared_is_a_clear_400(served: Dashboard,
                                                             project: Project) -> None:
    hank = project.hank("again", {"write": {"messages": 1, "writeFiles": {"notes.md": "x\n"}}})
    lost = project.run(hank, project.data("set-s"), "store-lost")
    shutil.rmtree(lost / ".hankweave" / "checkpoints")  # its workspace cannot be read
    query = f"?a={the_id(served, 'finished')}&b={the_id(served, 'store-lost')}"
    assert_error(get(served, "/api/compare" + query), 400, "checkpoint")


@pytest.mark.parametrize(("query", "status", "words"), [
    ("?a=0123456789abcdef&b={ident}", 404, "Not found"),
    ("?a={ident}", 400, "Cannot compare"),
])
def test_the_compare_page_refuses_in_html(served: Dashboard, query: str, status: int,
                                          words: str) -> None:
    ident = the_id(served, "finished")
    answer = get(served, "/compare" + query.format(ident=ident),
                 headers={"Accept": "text/html"})
    assert answer.status_code == status
    assert answer.headers["content-type"].startswith("text/html")
    assert words in answer.text and 'href="/"' in answer.text and "Traceback" not in answer.text


def test_the_compare_page_is_served_for_two_known_ids(served: Dashboard) -> None:
    ident = the_id(served, "finished")
    answer = get(served, f"/compare?a={ident}&b={ident}")
    assert answer.status_code == 200 and "/static/compare.js" in answer.text
    assert answer.headers["content-security-policy"].startswith("default-src 'self'")
