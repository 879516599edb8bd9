"""The dashboard in a real browser: Playwright driving Debian's Chromium (``/usr/bin/chromium``,
or ``HANKWEAVE_CHROMIUM``; no browser download).  Skipped when there is no Chromium unless
``HANKWEAVE_BROWSER_REQUIRED=1`` (CI), which makes a missing browser a failure.  Each test
writes a screenshot of its page to ``HANKWEAVE_TEST_ARTIFACTS`` (default ``.artifacts/dashboard``
at the repository's root)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_helpers import LONG, PACED, WAIT_S, Dashboard, Project, dashboard, wait_for

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("HANKWEAVE_TEST_ARTIFACTS") or ROOT / ".artifacts" / "dashboard")
TIMEOUT_MS = WAIT_S * 1000


def _chromium() -> str | None:
    given = os.environ.get("HANKWEAVE_CHROMIUM")
    return given or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    if executable is None:
        if os.environ.get("HANKWEAVE_BROWSER_REQUIRED") == "1":
            pytest.fail("no Chromium: install Debian's chromium (.ci/run does) or set"
                        " HANKWEAVE_CHROMIUM")
        pytest.skip("no Chromium installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable,
                                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.shot_name = request.node.name
    try:
        yield opened
        assert errors == [], errors
    finally:
        if not getattr(opened, "shot_taken", False):  # a failed test: the page as it was left
            screenshot(opened)
        context.close()


def screenshot(page: Any) -> None:
    """The page as the test sees it (while its dashboard still serves it), as an artifact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{page.shot_name}.png"), full_page=True)
    page.shot_taken = True


def open_execution(page: Any, served: Dashboard, name: str) -> None:
    """From the list, by the link of the execution's row (its id is the link's target)."""
    page.goto(served.url)
    ident = _id_of(served, name)
    follow(page, f"#executions tbody tr[data-id='{ident}'] a")


def follow(page: Any, link: str) -> None:
    """Click ``link`` and wait for the page it opens to be ready (not the one it leaves,
    which may be ready still when the click returns: under load the new one comes later)."""
    with page.expect_navigation():
        page.click(link)
    page.wait_for_selector("body[data-ready='1']")


def _id_of(served: Dashboard, name: str) -> str:
    import httpx

    rows = httpx.get(served.api("/api/executions"), timeout=30).json()["executions"]
    return next(row["id"] for row in rows if row["name"] == name)


def unlock_with(page: Any, key: str | None) -> None:
    """Answer the page's control-key prompt with ``key``."""
    page.once("dialog", lambda dialog: dialog.accept(key or ""))


def test_the_list_renders_the_executions(project: Project, finished: Path, page: Any) -> None:
    other = project.hank("second", {"only": {"messages": 1, "cost": 0.5}})
    project.run(other, project.data("set-z"), "other")
    with dashboard(project) as served:
        page.goto(served.url)
        rows = page.locator("#executions tbody tr")
        wait_for("two rows", lambda: rows.count() == 2)
        text = page.locator("#executions").inner_text()
        assert "notes" in text and "second" in text and "completed" in text
        assert "$0.5000" in text and "2/2" in text
        page.click("th[data-sort=cost]")  # the most expensive first
        assert "second" in rows.first.inner_text()
        page.fill("#filter", "notes")
        wait_for("the filter", lambda: rows.count() == 1)
        assert "notes" in rows.first.inner_text()
        page.fill("#filter", "")
        rows.nth(1).wait_for()
        screenshot(page)


def test_a_running_hanks_page_updates_as_codons_complete(project: Project, page: Any) -> None:
    hank = project.hank("steps", {"a": {"messages": 16, "delayMs": 250}, "b": PACED, "c": PACED})
    execution = project.executions / "steps"
    run = project.start(hank, project.data("set-c"), execution)
    wait_for("codon a to run", lambda: execution.joinpath(".hankweave", "state.json").exists()
             and project.codon_status(execution, "a") == "running")
    with dashboard(project) as served:
        open_execution(page, served, "steps")
        assert page.is_visible("#live")
        page.evaluate("window.notReloaded = true")
        assert page.get_attribute("li[data-codon=c]", "data-status") == "pending"
        # Each codon's status changes on the page as the run reaches it, from live events.
        page.wait_for_selector("li[data-codon=a][data-status=completed]")
        page.wait_for_selector("li[data-codon=b][data-status=completed]")
        page.wait_for_selector("li[data-codon=c][data-status=completed]")
        page.wait_for_selector("#status.status-completed")
        assert run.wait(timeout=WAIT_S) == 0
        page.wait_for_selector("#live", state="hidden")
        assert page.evaluate("window.notReloaded") is True
        seqs = page.locator("#activity li").evaluate_all(
            "items => items.map(item => Number(item.dataset.seq))")
        assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs)
        screenshot(page)


def test_the_diff_view_shows_a_changed_file(served: Dashboard, page: Any) -> None:
    open_execution(page, served, "finished")
    page.click("li[data-codon=edit]")
    page.click("button[data-tab=files]")
    changed = page.locator(".file[data-path='notes.md']")
    changed.wait_for()
    text = changed.inner_text()
    assert "modified" in text.lower() and "+second line" in text
    assert page.locator("pre.diff span.add").first.inner_text().startswith("+")
    screenshot(page)
    page.click("button[data-tab=conversation]")
    page.wait_for_selector(".turn.final")


def test_an_interruption_answered_from_the_page_lets_the_run_resume(project: Project,
                                                                    page: Any) -> None:
    hank = project.hank("asks", {"ask": {"askHuman": "Which colour?", "messages": 1},
                                 "after": {"messages": 1}})
    execution = project.executions / "asks"
    run = project.start(hank, project.data("set-d"), execution, "--wait-for-answers")
    wait_for("the question", lambda: execution.joinpath(".hankweave", "state.json").exists()
             and any(i.status == "pending" for i in project.state(execution).interruptions))
    with dashboard(project) as served:
        open_execution(page, served, "asks")
        card = page.locator(".card.pending")
        card.wait_for()
        assert "Which colour?" in card.inner_text()
        page.fill(".card.pending textarea", "teal")
        screenshot(page)  # the question, waiting for its answer
        unlock_with(page, served.key)
        page.click(".card.pending button:has-text('Send answer')")
        page.wait_for_selector("li[data-codon=after][data-status=completed]")
        page.wait_for_selector("#interruptions-section", state="hidden")
        assert "teal" in page.inner_text("#answered")
        assert run.wait(timeout=WAIT_S) == 0
    (item,) = project.state(execution).interruptions
    assert item.answer == "teal" and item.answered_by == "dashboard"


def test_a_control_button_skips_a_codon(project: Project, page: Any) -> None:
    hank = project.hank("long", {"slow": LONG, "then": PACED})
    execution = project.executions / "long"
    run = project.start(hank, project.data("set-e"), execution)
    wait_for("the slow codon to run", lambda: execution.joinpath(".hankweave",
                                                                  "state.json").exists()
             and project.codon_status(execution, "slow") == "running")
    with dashboard(project) as served:
        open_execution(page, served, "long")
        page.wait_for_selector("li[data-codon=slow][data-status=running]")
        unlock_with(page, served.key)
        page.click("#unlock")
        page.wait_for_selector("#controls:not([hidden])")
        page.click("button[data-action=skip]")
        page.wait_for_selector("li[data-codon=slow][data-status=skipped]")
        page.wait_for_selector("li[data-codon=then][data-status=completed]")
        screenshot(page)
        assert run.wait(timeout=WAIT_S) == 0
    assert project.codon_status(execution, "slow") == "skipped"


def test_a_waiting_execution_answered_on_the_page_says_what_to_paste(project: Project,
                                                                      page: Any) -> None:
    import shlex
    import subprocess
    import sys

    hank = project.hank("asks", {"ask": {"askHuman": "Which colour?", "messages": 1}},
                        meta={"name": "colour-picker", "version": "1.0.0"})
    execution = project.run(hank, project.data("set-q"), "monday")  # exits 3: it waits
    with dashboard(project) as served:
        page.goto(served.url)
        row = page.locator("#executions tbody tr").first
        row.wait_for()
        text = row.inner_text()
        assert "colour-picker" in text and "monday" in text and "waiting for you" in text
        open_execution(page, served, "monday")
        assert page.inner_text("#status") == "waiting for you"
        assert "waits for your answer" in page.inner_text("#notice")
        # The codon ended to wait for a person: not a failure.
        assert page.inner_text("li[data-codon=ask] .badge") == "waiting for you"
        page.fill(".card.pending textarea", "teal")
        unlock_with(page, served.key)
        page.click(".card.pending button:has-text('Send answer')")
        page.wait_for_selector("#interruptions-section", state="hidden")
        page.wait_for_selector("#status.status-paused")
        page.wait_for_selector("li[data-codon=ask] .badge.status-answered")
        page.wait_for_selector("#notice:has-text('is recorded: the next run goes on with it')")
        command = page.inner_text("#notice .command code")
        assert command == f"hankweave run -e {shlex.quote(str(execution.resolve()))}"
        screenshot(page)
    argv = shlex.split(command)
    pasted = subprocess.run([sys.executable, "-m", "hankweave", *argv[1:]], env=project.env,
                            capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            timeout=120, check=False)
    assert pasted.returncode == 0, pasted.stderr
    (item,) = project.state(execution).interruptions
    assert item.answer == "teal"


def test_the_cards_agree_with_the_budget_panel(served: Dashboard, page: Any) -> None:
    open_execution(page, served, "finished")
    page.wait_for_selector("#budget .muted:has-text('spent')")
    cost = page.locator("#summary .fact:has-text('Cost') .value").inner_text()
    time = page.locator("#summary .fact:has-text('Time') .value").inner_text()
    budget = page.inner_text("#budget")
    assert f"spent {cost}" in budget and f"ran {time}" in budget


def test_an_unknown_execution_or_page_says_not_found(served: Dashboard, page: Any) -> None:
    for path in ("/executions/0123456789abcdef", "/no/such/page"):
        answer = page.goto(served.api(path))
        assert answer is not None and answer.status == 404
        assert "Not found" in page.inner_text("main")
        assert "loading" not in page.inner_text("body")
        if path.startswith("/executions/"):
            screenshot(page)
        page.click("text=Back to the list of executions")
        page.wait_for_selector("#executions")


def test_the_fork_family_links_to_the_compare_page(project: Project, finished: Path,
                                                    forked: Path, page: Any) -> None:
    with dashboard(project) as served:
        open_execution(page, served, "finished")
        family = page.locator("#family-section")
        family.wait_for()
        fork = page.locator("#family li.fork")
        assert "finished-fork" in fork.inner_text() and "after codon write" in fork.inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        family.screenshot(path=str(ARTIFACTS / f"{page.shot_name}-family.png"))

        follow(page, "#family li.fork a.compare-link")
        rows = page.locator("#codons tbody tr")
        assert rows.count() == 2
        assert "same (shared)" in rows.first.inner_text()
        first = page.locator("#codons tr.first-divergence")
        assert first.get_attribute("data-codon") == "edit"
        assert "first divergence" in first.inner_text() and "1 file differs" in first.inner_text()
        assert "B is a fork of A after codon write" in page.inner_text("#relation")
        diff = page.locator("#codon-2 .file[data-path='notes.md'] pre.diff")
        assert "+another line" in diff.locator("span.add").all_inner_texts()[-1]
        assert diff.locator("span.del").all_inner_texts()[-1].startswith("-second line")
        screenshot(page)

        follow(page, ".side[data-side=B] .side-head a")  # the fork's own page names its source
        source = page.locator("#family .relative.source")
        assert source.inner_text().startswith("Forked from finished after codon write")
        link = source.locator("a").first
        assert link.get_attribute("href") == f"/executions/{_id_of(served, 'finished')}"
        page.locator("#family-section").screenshot(
            path=str(ARTIFACTS / f"{page.shot_name}-fork-family.png"))


def test_the_compare_page_says_why_it_cannot_compare(project: Project, finished: Path,
                                                     page: Any) -> None:
    import shutil

    hank = project.hank("again", {"write": {"messages": 1, "writeFiles": {"notes.md": "x\n"}}})
    lost = project.run(hank, project.data("set-s"), "store-lost")
    shutil.rmtree(lost / ".hankweave" / "checkpoints")
    with dashboard(project) as served:
        page.goto(served.api(f"/compare?a={_id_of(served, 'finished')}"
                             f"&b={_id_of(served, 'store-lost')}"))
        page.wait_for_selector("body[data-ready='1']")
        assert "Cannot compare these executions" in page.inner_text("#error")
        assert "no installed checkpoint backend" in page.inner_text("#error")
        assert page.is_hidden("#table-section") and page.is_hidden("#loading")
        page.click("text=Back to the list of executions")
        page.wait_for_selector("#executions")


# ----- acting from a message (issue 42) -----

def test_a_link_from_a_message_shows_what_it_does_and_does_it_once_confirmed(
        project: Project, page: Any) -> None:
    from hankweave.api import act_url, link_claims, link_key, sign_link

    key_file = project.root / "link-key"
    project.env["HANKWEAVE_LINK_KEY_FILE"] = str(key_file)
    execution = project.budget_ask("asking")
    item = project.pending(execution)
    extend = next(claim for claim in link_claims(item, execution.resolve())
                  if claim.action == "extend")
    with dashboard(project) as served:
        page.goto(act_url(served.url, sign_link(extend, link_key(key_file))))
        page.wait_for_selector("body[data-ready='1']")
        # The token is out of the address bar (and the history) as soon as it is read.
        assert page.evaluate("location.href") == served.api("/act")
        assert page.inner_text("#summary") == "Extend the $2.00 ceiling of codon draft by $1.00?"
        assert "codon ceiling: $2.03 used of $2.00" in page.inner_text("#ceiling")
        assert "asking-hank · asking" in page.inner_text("#facts")
        screenshot(page)
        assert project.pending(execution) is not None  # showing it did nothing

        page.click("#confirm")
        page.wait_for_selector("body[data-acted='recorded']")
        assert "done. Nothing runs it now" in page.inner_text("#result-message")
        command = page.inner_text("#result-command code")
        assert command == f"hankweave run -e {execution.resolve()}"
        page.reload()  # the token is gone with the fragment: nothing is done again
        page.wait_for_selector("body[data-ready='1']")
        assert "has no token" in page.inner_text("#error")
    answered = project.state(execution).interruption(item.id)
    assert (answered.answer, answered.answered_by) == ({"extend": 1.0}, "webhook-link")


def test_a_budget_ask_is_extended_from_the_execution_page(project: Project,
                                                          page: Any) -> None:
    execution = project.budget_ask("ceiling")
    with dashboard(project) as served:
        open_execution(page, served, "ceiling")
        card = page.locator(".card.pending")
        card.wait_for()
        assert card.inner_text().startswith("budget · codon draft")
        assert "codon ceiling: $2.03 used of $2.00" in card.inner_text()
        assert page.input_value(".card.pending input.amount") == "1.00"  # half the ceiling
        page.fill(".card.pending input.amount", "1.50")
        screenshot(page)
        unlock_with(page, served.key)
        page.click(".card.pending button:has-text('Extend')")
        page.wait_for_selector("#interruptions-section", state="hidden")
        assert "extend by $1.50" in page.inner_text("#answered")
    (item,) = project.state(execution).interruptions
    assert (item.answer, item.answered_by) == ({"extend": 1.5}, "dashboard")
