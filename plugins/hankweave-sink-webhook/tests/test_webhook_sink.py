"""The ``webhook`` sink: signed messages to a real receiver on 127.0.0.1, retries and what is
not retried, a receiver that is down, the queue's bound, secrets kept out of every output,
settings errors, action links, the Slack body, the sink contract, and one real run."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hankweave_sink_webhook import verify_signature
from hankweave_sink_webhook.outbox import Backoff, retry_after_s
from hankweave_sink_webhook.sink import WebhookSink
from pydantic import ValidationError
from webhook_helpers import (
    ROOT,
    RUN,
    SECRET,
    Project,
    Receiver,
    approval_asked,
    budget_asked,
    closed_port,
    event,
    run_interrupted,
    run_started,
    transition,
)

from hankweave.api import link_key, verify_link
from hankweave.testing import EventSinkContract

FAST = Backoff(base_s=0.02, cap_s=0.1)
"""Retries within milliseconds: the policy's timing is not what these tests are about."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver()
    try:
        yield started
    finally:
        started.close()


def sink_for(*urls: str, backoff: Backoff = FAST, **config: Any) -> WebhookSink:
    settings = WebhookSink.Config.model_validate({"urls": list(urls), "secret": SECRET,
                                                  **config})
    return WebhookSink(settings, backoff=backoff)


def fed(sink: WebhookSink, *events: dict[str, Any]) -> WebhookSink:
    for item in events:
        sink.handle(item)
    sink.close()
    return sink


def signed(request: Any, secret: str = SECRET) -> bool:
    return verify_signature(secret, request.headers.get("X-Hankweave-Timestamp"),
                            request.body, request.headers.get("X-Hankweave-Signature"))


# ----- what is sent -----


def test_a_receiver_gets_signed_messages_that_verify(tmp_path: Path,
                                                     receiver: Receiver) -> None:
    asked, ended = approval_asked(), run_interrupted()
    fed(sink_for(receiver.url), run_started(tmp_path), asked, ended)

    first, second = receiver.wait_for(2)
    assert [r.json["event"] for r in (first, second)] == ["interruption.created", "run.ended"]
    assert all(signed(request) for request in (first, second))
    assert first.headers["X-Hankweave-Event"] == "interruption.created"
    assert first.headers["X-Hankweave-Delivery"] == asked["id"] == first.json["id"]
    assert first.headers["Content-Type"] == "application/json"
    assert first.json == {
        "event": "interruption.created", "id": asked["id"], "execution": str(tmp_path),
        "runId": RUN, "timestamp": asked["timestamp"], "data": asked["data"],
        "summary": "codon publish waits for approval: Approve starting codon publish"
                   " (Publish)?"}
    assert second.json["data"] == {"runId": RUN, "status": "interrupted", "cost": 0.0,
                                   "waitingFor": ["int-1796524034928-e4qbi"]}
    assert second.json["id"] == f"{ended['id']}:run.ended"
    assert second.json["summary"] == f"run {RUN} is waiting for a person (1 answer needed);" \
                                     " spent $0.00"


def test_an_altered_or_forged_message_does_not_verify(tmp_path: Path,
                                                      receiver: Receiver) -> None:
    fed(sink_for(receiver.url), run_started(tmp_path), approval_asked())
    (request,) = receiver.wait_for(1)
    stamp, signature = (request.headers["X-Hankweave-Timestamp"],
                        request.headers["X-Hankweave-Signature"])
    assert verify_signature(SECRET, stamp, request.body, signature)
    altered = request.body.replace(b"approval", b"approvel")
    assert not verify_signature(SECRET, stamp, altered, signature)
    assert not verify_signature("another-secret", stamp, request.body, signature)
    assert not verify_signature(SECRET, str(int(stamp) + 1), request.body, signature)
    assert not verify_signature(SECRET, stamp, request.body, None)
    assert not verify_signature(SECRET, None, request.body, signature)
    assert not verify_signature(SECRET, "12e3", request.body, signature)


def test_an_old_timestamp_does_not_verify_even_signed_with_the_secret() -> None:
    from hankweave_sink_webhook.signing import sign_body

    body, stamp = b'{"event":"run.ended"}', 1_800_000_000
    good = sign_body(SECRET, stamp, body)
    assert verify_signature(SECRET, str(stamp), body, good, now=stamp + 299)
    assert not verify_signature(SECRET, str(stamp), body, good, now=stamp + 301)
    assert not verify_signature(SECRET, str(stamp), body, good, now=stamp - 301)  # the future
    assert verify_signature(SECRET, str(stamp), body, good, now=stamp + 3000, tolerance_s=3600)


@pytest.mark.parametrize(("ending", "status", "summary"), [
    ("RunCompleted", "completed", "completed; spent $0.03"),
    ("RunFailed", "failed", "failed; spent $0.03"),
    ("RunCancelled", "cancelled", "was cancelled; spent $0.03"),
])
def test_run_ended_says_how_the_run_ended(tmp_path: Path, receiver: Receiver, ending: str,
                                          status: str, summary: str) -> None:
    data: dict[str, Any] = {"runId": RUN}
    if ending == "RunCancelled":
        ending, data["outcome"] = "RunFailed", "cancelled"
    costly = transition("CostsIncremented", {"runId": RUN, "codonId": "a", "costDelta": 0.03},
                        seq=2, cost=0.03)
    fed(sink_for(receiver.url), run_started(tmp_path), costly,
        transition(ending, data, seq=3, cost=0.03, current=None))

    (request,) = receiver.wait_for(1)
    assert request.json["event"] == "run.ended"
    assert request.json["data"] == {"runId": RUN, "status": status, "cost": 0.03}
    assert request.json["summary"] == f"run {RUN} {summary}"


def test_a_crashed_run_ends_when_the_next_start_reports_it(tmp_path: Path,
                                                          receiver: Receiver) -> None:
    crashed = event("run.crashed", {
        "runId": "r-0", "detectedAt": "2026-12-06T03:00:00.000Z", "codonId": "a",
        "codonStatus": "running", "endedAgentPids": [], "next": "rollback",
        "message": "Run r-0 had crashed while codon a was running"}, seq=1, run_id=None)
    fed(sink_for(receiver.url, events=["run.ended", "run.crashed"]), crashed,
        run_started(tmp_path, seq=2))
    reported, ended = receiver.wait_for(2)
    assert (reported.json["event"], ended.json["event"]) == ("run.crashed", "run.ended")
    assert ended.json["data"] == {"runId": "r-0", "status": "crashed", "codonId": "a",
                                  "message": "Run r-0 had crashed while codon a was running"}
    assert ended.json["summary"] == "run r-0 crashed (found when the next run started)"
    assert len({reported.headers["X-Hankweave-Delivery"],
                ended.headers["X-Hankweave-Delivery"]}) == 2


def test_only_the_events_asked_for_are_sent(tmp_path: Path, receiver: Receiver) -> None:
    completed = event("codon.completed", {"codonId": "a", "success": True, "cost": 0.01,
                                          "duration": 10, "exitStatus": {"type": "success"}},
                      seq=4)
    fed(sink_for(receiver.url, events=["codon.completed"]), run_started(tmp_path),
        approval_asked(), completed, run_interrupted(5))
    time.sleep(0.2)
    (request,) = receiver.wait_for(1)
    assert request.json["event"] == "codon.completed"
    assert request.json["summary"] == "codon.completed (codon a)"


def test_a_budget_ask_says_what_was_reached_and_spent(tmp_path: Path,
                                                      receiver: Receiver) -> None:
    fed(sink_for(receiver.url), run_started(tmp_path), budget_asked())
    (request,) = receiver.wait_for(1)
    assert request.json["summary"] == ("codon draft reached its $2.00 ceiling; spent $2.03;"
                                       " extend by?")
    assert request.json["data"]["budget"]["limit"] == 2.0


def test_a_slack_body_has_the_summary_as_text_and_blocks(tmp_path: Path,
                                                         receiver: Receiver) -> None:
    asked = approval_asked()
    asked["data"]["question"] = "Ship <release> & tag?"
    fed(sink_for(receiver.url, format="slack"), run_started(tmp_path), asked)
    (request,) = receiver.wait_for(1)
    body = request.json
    assert set(body) == {"text", "blocks"}
    assert body["text"] == (f"[hankweave · {tmp_path.name}] codon publish waits for approval:"
                            " Ship &lt;release&gt; &amp; tag?")
    assert body["blocks"][0]["type"] == "section"
    assert "Ship &lt;release&gt; &amp; tag?" in body["blocks"][0]["text"]["text"]
    assert signed(request)


# ----- delivery -----


def test_a_failing_receiver_is_retried_and_gets_the_message_once_it_recovers(
        tmp_path: Path) -> None:
    receiver = Receiver(statuses=[500, 503, 200])
    try:
        sink = sink_for(receiver.url)
        sink.handle(run_started(tmp_path))
        sink.handle(approval_asked())
        requests = receiver.wait_for(3)
        sink.close()
    finally:
        receiver.close()
    assert len(requests) == 3
    assert len({r.headers["X-Hankweave-Delivery"] for r in requests}) == 1
    assert len({r.body for r in requests}) == 1
    assert all(signed(request) for request in requests)
    assert (sink.counts.delivered, sink.counts.lost) == (1, 0)


def test_too_many_requests_waits_as_the_receiver_asks(tmp_path: Path) -> None:
    receiver = Receiver(statuses=[429, 200], headers={"Retry-After": "1"})
    try:
        sink = sink_for(receiver.url)
        sink.handle(run_started(tmp_path))
        sink.handle(approval_asked())
        requests = receiver.wait_for(2)
        sink.close()
    finally:
        receiver.close()
    assert len(requests) == 2 and sink.counts.delivered == 1
    stamps = [int(r.headers["X-Hankweave-Timestamp"]) for r in requests]
    assert stamps[1] - stamps[0] >= 1  # waited (and signed the retry anew)
    assert retry_after_s("7") == 7.0 and retry_after_s("86400") == 60.0  # bounded
    assert retry_after_s("Wed, 21 Oct 2026 07:28:00 GMT",
                         now=1_792_567_670.0) == pytest.approx(10.0)
    assert retry_after_s("soon") is None


def test_the_end_of_the_run_still_retries_a_receiver_that_answers(tmp_path: Path) -> None:
    receiver = Receiver(statuses=[503, 200])
    try:
        sink = fed(sink_for(receiver.url), run_started(tmp_path), approval_asked())
        requests = receiver.wait_for(2)
    finally:
        receiver.close()
    assert len(requests) == 2
    assert (sink.counts.delivered, sink.counts.lost) == (1, 0)


@pytest.mark.parametrize("status", [400, 404, 302])
def test_a_rejected_or_redirected_message_is_not_retried(tmp_path: Path, status: int) -> None:
    receiver = Receiver(statuses=[status])
    try:
        sink = fed(sink_for(receiver.url), run_started(tmp_path), approval_asked())
        time.sleep(0.2)  # a retry, if any, would come within this (backoff of 0.02 s)
        requests = receiver.wait_for(1)
    finally:
        receiver.close()
    assert len(requests) == 1
    assert (sink.counts.delivered, sink.counts.failed) == (0, 1)


def test_a_receiver_that_is_down_does_not_slow_handle(tmp_path: Path) -> None:
    sink = sink_for(f"http://127.0.0.1:{closed_port()}/hook", backoff=Backoff())
    sink.handle(run_started(tmp_path))
    count = 500
    started = time.monotonic()
    for number in range(count):
        sink.handle(approval_asked(seq=10 + number, interruption=f"int-{number}"))
    handled = time.monotonic() - started
    started = time.monotonic()
    sink.close()
    closed = time.monotonic() - started
    # Generous bounds: 500 hand-offs take milliseconds; the close does not wait out retries.
    assert handled < 2.0
    assert closed < sink.flush_timeout_s + 5.0  # (room for a loaded machine: CI runs two envs)
    assert sink.counts.delivered == 0 and sink.counts.lost == count


def test_a_full_queue_drops_the_oldest_waiting_messages(tmp_path: Path,
                                                       receiver: Receiver) -> None:
    sink = sink_for(receiver.url, queueSize=3)
    sink.handle(run_started(tmp_path))
    receiver.hold.clear()  # the first message stays in flight
    sink.handle(approval_asked(seq=10, interruption="int-0"))
    deadline = time.monotonic() + 30
    while receiver.arrived < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert receiver.arrived == 1, "the first message never reached the receiver"
    for number in range(1, 6):  # 5 more for a queue of 3: the 2 oldest waiting go
        sink.handle(approval_asked(seq=10 + number, interruption=f"int-{number}"))
    receiver.hold.set()
    requests = receiver.wait_for(4)
    sink.close()
    assert [r.json["data"]["interruptionId"] for r in requests] == [
        "int-0", "int-3", "int-4", "int-5"]
    assert (sink.counts.delivered, sink.counts.dropped) == (4, 2)


def test_several_urls_each_get_every_message_in_order(tmp_path: Path,
                                                      receiver: Receiver) -> None:
    other = Receiver()
    try:
        fed(sink_for(receiver.url, other.url), run_started(tmp_path), approval_asked(),
            run_interrupted())
        for each in (receiver, other):
            assert [r.json["event"] for r in each.wait_for(2)] == ["interruption.created",
                                                                   "run.ended"]
    finally:
        other.close()


# ----- secrets -----


def test_the_secret_appears_in_no_log_nor_repr(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    failing = Receiver(statuses=[500, 400])
    caplog.set_level(logging.DEBUG, logger="hankweave")
    try:
        config = {"urls": [failing.url, f"http://127.0.0.1:{closed_port()}/x/s3cretpath"],
                  "secret": SECRET, "maxAttempts": 2}
        settings = WebhookSink.Config.model_validate(config)
        sink = WebhookSink(settings, backoff=FAST)
        fed(sink, run_started(tmp_path), approval_asked(), run_interrupted())
    finally:
        failing.close()
    logged = caplog.text + capsys.readouterr().err
    assert "gave up sending" in logged  # the failures were reported...
    assert f"127.0.0.1:{failing.server.server_address[1]}" in logged  # ...naming the receiver
    for text in (logged, repr(settings), str(settings), settings.model_dump_json(),
                 repr(sink)):
        assert SECRET not in text
    assert "s3cretpath" not in logged  # a webhook URL's path is often a credential too


def test_a_secret_can_come_from_the_environment(tmp_path: Path, receiver: Receiver,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", "from-the-environment")
    settings = WebhookSink.Config.model_validate(
        {"urls": [receiver.url], "secretEnv": "TEST_WEBHOOK_SECRET"})
    fed(WebhookSink(settings), run_started(tmp_path), approval_asked())
    (request,) = receiver.wait_for(1)
    assert signed(request, "from-the-environment")

    monkeypatch.delenv("TEST_WEBHOOK_SECRET")
    with pytest.raises(ValueError, match="secretEnv names TEST_WEBHOOK_SECRET, which"
                                         " is not set"):
        WebhookSink(settings)


def test_a_secret_file_must_be_readable_only_by_its_owner(tmp_path: Path,
                                                        receiver: Receiver) -> None:
    path = tmp_path / "secret"
    path.write_text("from-a-file\n")
    path.chmod(0o600)
    settings = WebhookSink.Config.model_validate({"urls": [receiver.url],
                                                  "secretFile": str(path)})
    fed(WebhookSink(settings), run_started(tmp_path), approval_asked())
    (request,) = receiver.wait_for(1)
    assert signed(request, "from-a-file")

    path.chmod(0o644)
    with pytest.raises(ValueError, match="readable only by you") as refused:
        WebhookSink(settings)
    assert "from-a-file" not in str(refused.value)


# ----- settings -----


def problems(config: dict[str, Any]) -> dict[tuple[Any, ...], str]:
    with pytest.raises(ValidationError) as caught:
        WebhookSink.Config.model_validate(config)
    return {error["loc"]: error["msg"] for error in caught.value.errors()}


def test_settings_errors_say_what_is_wrong_and_where() -> None:
    assert ("urls",) in problems({})
    assert ("urls",) in problems({"urls": []})
    assert "http:// or https://" in problems({"urls": ["ftp://example.com/x"]})[("urls", 0)]
    assert "http:// or https://" in problems({"urls": ["hooks.example.com/x"]})[("urls", 0)]
    assert "must name a host" in problems({"urls": ["https:///x"]})[("urls", 0)]
    assert "credentials" in problems({"urls": ["https://u:pw@example.com"]})[("urls", 0)]
    assert problems({"urls": ["https://example.com"], "urlz": []})[("urlz",)]
    assert "give one of" in str(problems({"urls": ["https://example.com"], "secret": "x",
                                          "secretEnv": "X"}))
    assert "would reach every agent" in str(problems({"urls": ["https://example.com"],
                                                      "secretEnv": "HANKWEAVE_SECRET"}))
    assert "run.ended" in problems({"urls": ["https://example.com"],
                                    "events": ["Run Ended"]})[("events", 0)]
    assert ("format",) in problems({"urls": ["https://example.com"], "format": "teams"})


def test_a_secret_that_is_not_text_is_refused_without_being_quoted() -> None:
    found = problems({"urls": ["https://example.com"], "secret": 8675309})
    assert "non-empty string" in found[("secret",)]
    assert "8675309" not in str(found)


def test_hankweave_validate_reports_each_bad_setting_at_its_path(tmp_path: Path) -> None:
    project = Project(tmp_path, sink=None)
    project.write({"a": {}})
    (tmp_path / "hankweave.json").write_text(json.dumps({"events": {"sinks": [
        {"name": "webhook", "config": {}},
        {"name": "webhook", "config": {"urls": ["ftp://hooks.example.com/T0/B0/s3cretpath"]}},
        {"name": "webhook", "config": {"urls": ["https://example.com"], "secrett": "x"}},
        {"name": "webhook", "config": {"urls": "https://hooks.example.com/T0/B0/s3cretpath"}}]}}))
    done = subprocess.run([sys.executable, "-m", "hankweave", "validate", str(project.hank),
                           str(project.data)], cwd=tmp_path, env=project.env,
                          capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "events.sinks[0].config.urls: give urls as a list of at least one http or https" \
        " URL" in output
    assert "events.sinks[3].config.urls: give urls as a list" in output
    assert "events.sinks[1].config.urls[0]: must start with http:// or https://" in output
    assert 'events.sinks[2].config.secrett: Unrecognized field "secrett"' in output
    assert "s3cretpath" not in output and "Traceback" not in output


# ----- action links -----

def test_a_pause_carries_signed_action_links_to_the_dashboard(
        tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HANKWEAVE_LINK_KEY_FILE", str(tmp_path / "link-key"))
    caplog.set_level(logging.DEBUG, logger="hankweave")
    fed(sink_for(receiver.url, dashboardUrl="http://127.0.0.1:7777/", linkTtlSeconds=600),
        run_started(tmp_path), approval_asked(), budget_asked(seq=3))
    approval, budget = (r.json for r in receiver.wait_for(2))

    key = link_key()
    assert [(link["action"], link["label"]) for link in approval["links"]] == [
        ("approve", "approve"), ("reject", "reject")]
    for link in approval["links"]:
        base, token = link["url"].split("#", 1)
        assert base == "http://127.0.0.1:7777/act"
        claim = verify_link(token, key)
        assert (claim.execution, claim.interruption, claim.action) == (
            str(tmp_path), "int-1796524034928-e4qbi", link["action"])
        assert claim.expires <= time.time() + 600
        assert token not in caplog.text
    assert [(link["action"], link.get("amount")) for link in budget["links"]] == [
        ("extend", 1.0), ("extend", 2.0), ("reject", None)]
    assert budget["links"][0]["label"] == "extend by $1.00"


# ----- the documentation's receiver -----


def replay_with_another_delivery_header(url: str, event: dict[str, Any], where: Path) -> int:
    """The message of ``event`` as the sink signs it, sent again with a changed (unsigned)
    ``X-Hankweave-Delivery``: what an attacker who captured a request can do."""
    from hankweave_sink_webhook.formats import json_body
    from hankweave_sink_webhook.notes import Composer
    from hankweave_sink_webhook.signing import sign_body

    composer = Composer(["interruption.created"], links=None)
    composer.bind(where)
    [note] = composer.compose(event)
    body = json_body(note)
    stamp = str(int(time.time()))
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "X-Hankweave-Timestamp": stamp,
        "X-Hankweave-Signature": sign_body(SECRET, stamp, body),
        "X-Hankweave-Delivery": "something-else"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return int(response.status)



def test_the_documented_receiver_verifies_and_drops_repeats(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "webhooks.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "receiver.py").write_text(code)
    port = closed_port()
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    env = {**os.environ, "PORT": str(port), "WEBHOOK_SECRET_FILE": str(secret_file)}
    server = subprocess.Popen([sys.executable, str(tmp_path / "receiver.py")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = f"http://127.0.0.1:{port}/hook"
        deadline = time.monotonic() + 60  # a Python start-up, on a loaded machine
        while True:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    f"the receiver never listened (rc {server.poll()})"
                time.sleep(0.05)
        asked = approval_asked()
        for _ in range(2):  # the same delivery twice: a retry the receiver must drop
            fed(sink_for(url), run_started(tmp_path), asked)
        replayed = replay_with_another_delivery_header(url, asked, tmp_path)
        assert replayed == 204  # acknowledged, and dropped: the signed body's id was seen
        forged = WebhookSink(WebhookSink.Config.model_validate(
            {"urls": [url], "secret": "not-the-secret"}), backoff=FAST)
        fed(forged, run_started(tmp_path), approval_asked(seq=3, interruption="int-forged"))
        fed(sink_for(url), run_started(tmp_path), run_interrupted())
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=10)
    assert output.splitlines() == [
        "interruption.created - codon publish waits for approval: Approve starting codon"
        " publish (Publish)?",
        f"run.ended - run {RUN} is waiting for a person; spent $0.00"]
    assert forged.counts.failed == 1  # 401: not retried


# ----- the contract, one real run, imports -----


class TestWebhookSinkContract(EventSinkContract):
    sink_class = WebhookSink

    def config(self, tmp_path: Path) -> dict[str, Any]:
        return {"urls": [f"http://127.0.0.1:{closed_port()}/hook"], "timeoutSeconds": 0.5}


def test_a_real_run_tells_the_receiver_of_its_pause_and_its_end(tmp_path: Path,
                                                                receiver: Receiver) -> None:
    project = Project(tmp_path, sink={"urls": [receiver.url],
                                      "secretEnv": "TEST_WEBHOOK_SECRET"},
                      env={"TEST_WEBHOOK_SECRET": SECRET})
    project.write({"draft": {}, "publish": {"approval": "before"}})
    done = project.run()
    assert done.returncode == 3, done.stderr  # waiting for a person

    created, ended = receiver.wait_for(2)
    assert all(signed(request) for request in (created, ended))
    assert [created.json["event"], ended.json["event"]] == ["interruption.created",
                                                            "run.ended"]
    journal = {item["id"]: item for item in project.journal()}
    asked = journal[created.headers["X-Hankweave-Delivery"]]
    assert asked["type"] == "interruption.created" and created.json["data"] == asked["data"]
    assert created.json["execution"] == str(project.execution)
    assert created.json["data"]["codonId"] == "publish"
    assert ended.json["data"]["status"] == "interrupted"
    assert ended.json["data"]["waitingFor"] == [asked["data"]["interruptionId"]]
    server_log = project.execution / ".hankweave" / "logs" / "server.log"
    for text in (done.stdout, done.stderr, server_log.read_text(),
                 json.dumps(project.journal())):
        assert SECRET not in text


def test_listing_the_sinks_does_not_import_the_http_client() -> None:
    probe = ("import sys\nfrom hankweave.api import get_registry\n"
             "assert 'webhook' in get_registry().event_sinks()\n"
             "print('urllib.request' in sys.modules,"
             " sorted(m for m in sys.modules if m.startswith('hankweave_sink_webhook.')))")
    env = {**os.environ, "HANKWEAVE_LOAD_PLUGINS": "sink-webhook"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    assert done.stdout.strip() == ("False ['hankweave_sink_webhook.plugin',"
                                   " 'hankweave_sink_webhook.signing',"
                                   " 'hankweave_sink_webhook.sink']")
