"""The clients of the live-control server: ``hankweave attach`` (its view, rendered with rich's
recording console, and its reconnection) and ``hankweave ctl`` (through click's CliRunner,
against a live in-process server)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

import pytest
from click.testing import CliRunner
from rich.console import Console

from hankweave.cli.attach_cmd import AttachView, attach_command, follow, render_attach
from hankweave.cli.ctl_cmd import ctl_group
from hankweave.events.bus import EventBus
from hankweave.events.journal import EventJournal
from hankweave.server import ControlServer
from hankweave.server.client import (
    ControlClient,
    ControlRefusedError,
    NoServerError,
    ServerAddress,
    server_address,
)
from hankweave.state.lock import RuntimeLock
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon, wait_for_status
from tests.test_server_support import TOKEN, ServedRun, run


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


def screen(view: AttachView, width: int = 120) -> str:
    console = Console(record=True, width=width, color_system=None, force_terminal=False)
    console.print(render_attach(view, now=datetime.fromisoformat("2030-01-01T00:00:00+00:00")))
    return console.export_text()


# ----- attach: the view -----


def test_attach_shows_the_plan_the_current_codon_and_costs_of_a_run(project):
    project.write_hank([codon("draft"), codon("review"), codon("publish")])
    project.run({"draft": {"cost": 0.1, "text": "Drafting the summary"},
                           "review": {"cost": 0.05, "writeFiles": {"notes.md": "ok"},
                                      "text": "Reviewing the draft"},
                           "publish": {"hang": False, "result": "error",
                                       "errorText": "API Error: 401 unauthorized"}})
    view = AttachView()
    view.handle({"type": "handshake.response", "data": {"mode": "readonly"}})
    view.handle({"type": "server.ready", "data": {"executionPath": str(project.exec_dir),
                                                  "budget": {"maxDollars": 1.0}}})
    view.handle({"type": "history.batch", "data": {"events": project.journal(),
                                                   "hasMore": False}})
    text = screen(view)

    assert f"hankweave attach — {project.exec_dir}" in text
    for line in ("draft", "review", "publish"):
        assert line in text
    assert "completed" in text and "failed" in text
    assert "$0.1000" in text and "$0.0500" in text           # per-codon costs
    assert "budget $0.1501 of $1.0000 (15%)" in text          # spend against the ceiling
    assert "publish" in text.split("Recent events")[0]       # the last codon is current
    assert "RunFailed" in text.split("Recent events")[1]      # the event tail
    assert f"seq {project.journal()[-1]['seq']}" in text


def test_attach_streams_assistant_text_and_tool_calls_of_the_current_codon(project):
    project.write_hank([codon("write", checkpointedFiles=["**"])])
    project.run({"write": {"messages": 2, "text": "Writing the report",
                           "writeFiles": {"report.md": "# Report"}}})
    view = AttachView()
    for event in project.journal():
        view.apply(event)
    text = screen(view)

    assert "Writing the report (1/2)" in text and "Writing the report (2/2)" in text
    assert "⚙ Write(file_path=report.md)" in text
    assert "↳ Write ok" in text
    assert "· 1 tool call" in text


def test_attach_shows_sentinel_activity_and_idle_state():
    view = AttachView()
    for seq, (kind, data) in enumerate([
        ("sentinel.loaded", {"sentinelId": "watcher", "codonId": "a"}),
        ("sentinel.triggered", {"sentinelId": "watcher", "codonId": "a"}),
        ("sentinel.output", {"sentinelId": "watcher", "codonId": "a"}),
        ("server.idle", {"reason": "codon-completed", "message": "waiting for a command"}),
    ], start=1):
        view.apply({"seq": seq, "type": kind, "data": data})
    text = screen(view)
    assert "sentinels: 1 loaded, 1 triggered, 1 output (last: watcher output)" in text
    assert "idle: waiting for a command" in text


def test_attach_counts_each_event_once_however_often_it_is_replayed(project):
    project.write_hank([codon("a")])
    project.run({"a": {"cost": 0.2}})
    events = project.journal()
    once, twice = AttachView(), AttachView()
    for event in events:
        once.apply(event)
    for chunk in (events[:5], events[:9], events[3:], events):  # overlapping replays
        twice.handle({"type": "history.batch", "data": {"events": chunk, "hasMore": False}})
    assert screen(once) == screen(twice)
    assert twice.last_seq == events[-1]["seq"]


def test_attach_marks_codons_after_a_rollback_target_pending_again():
    view = AttachView()
    plan = [{"codonId": c, "codon": {"id": c, "name": c.upper()}} for c in ("a", "b", "c")]
    # The transitions a runtime makes: r1 completes a and b, then fails; r2 rolls back to a.
    run = {"serverPid": 1, "runFolder": "/runs", "gitBranch": "run"}
    transitions = [("RunStarted", {"runId": "r1", **run, "executionPlan": plan,
                                   "startingConditions": {"type": "fresh"}})]
    for codon_id in ("a", "b"):
        transitions.append(("CodonStarted", {"runId": "r1", "codonId": codon_id}))
        previous = "preparing"
        for to, metadata in (("starting", {}),
                             ("initializing", {"claudePid": 1, "claudeLogPath": "a.log"}),
                             ("running", {"claudeSessionId": "s"}),
                             ("completed", {"exitCode": 0, "resultMessageReceived": True,
                                            "checkpointSha": f"sha-{codon_id}"})):
            transitions.append(("CodonTransitioned", {"runId": "r1", "codonId": codon_id,
                                                      "from": previous, "to": to,
                                                      "metadata": metadata}))
            previous = to
    transitions.append(("RunFailed", {"runId": "r1"}))
    transitions.append(("RunStarted", {"runId": "r2", **run, "startingConditions": {
        "type": "continuation", "reason": "rollback",
        "source": {"runId": "r1", "afterCodon": "a", "checkpointSha": "sha-a"}}}))
    for seq, (kind, data) in enumerate(transitions, start=1):
        view.apply({"seq": seq, "type": "state.transition", "timestamp": "2030-01-01T00:00:00Z",
                    "data": {"transitionType": kind, "runId": data["runId"],
                             "transition": {"type": kind, "data": data}}})
    assert view.status == {"a": "completed"}
    assert view.run_id == "r2"


# ----- attach: following a server that restarts -----


def test_attach_follows_a_restarted_server_without_gaps_or_repeats(tmp_path):
    async def scenario():
        bus = EventBus(EventJournal(tmp_path / ".hankweave" / "events" / "events.jsonl"))
        servers = [ControlServer(bus)]
        await servers[0].start()
        view = RecordingView()
        stop = asyncio.Event()
        follower = asyncio.create_task(follow(
            view, lambda: ServerAddress(servers[-1].url), retry_delay=0.05, stop=stop))
        try:
            for number in range(30):
                bus.emit("info", {"message": f"first life {number}"})
            await _until(lambda: view.last_seq == 30)
            await servers[0].stop()  # the runtime restarts: a new server, a new port
            for number in range(30):
                bus.emit("info", {"message": f"while down {number}"})
            servers.append(ControlServer(bus))
            await servers[1].start()
            for number in range(30):
                bus.emit("info", {"message": f"second life {number}"})
            await _until(lambda: view.last_seq == 90)
        finally:
            stop.set()
            await follower
            await servers[-1].stop()
            bus.close()
        return view

    view = run(scenario())
    assert view.received == list(range(1, 91))  # as sent by the two servers, before dedup
    assert [line for line, _ in view.tail][-1].strip().endswith("info: second life 29")


class RecordingView(AttachView):
    """Records the seq of every journaled event the servers sent."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[int] = []

    def handle(self, message):
        events = (message["data"]["events"] if message.get("type") == "history.batch"
                  else [message])
        self.received += [e["seq"] for e in events if isinstance(e.get("seq"), int)]
        super().handle(message)


async def _until(condition, timeout=20.0):
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def test_attach_without_a_running_runtime_says_so(tmp_path):
    (tmp_path / ".hankweave").mkdir()
    result = CliRunner().invoke(attach_command, ["-e", str(tmp_path)])
    assert result.exit_code == 1
    assert "No hankweave runtime is running" in result.output


def test_attach_needs_a_directory_or_a_port():
    result = CliRunner().invoke(attach_command, [])
    assert result.exit_code == 2 and "give -e DIR" in result.output


# ----- ctl -----


async def ctl(*args: str):
    """``hankweave ctl`` in a worker thread (it runs its own event loop) against our server."""
    return await asyncio.to_thread(CliRunner().invoke, ctl_group, list(args), obj={},
                                   catch_exceptions=False)


def test_ctl_drives_a_run_started_without_autostart(project):
    project.write_hank([codon("a", checkpointedFiles=["**"]), codon("b"), codon("c")])
    script = {"a": {"writeFiles": {"a.md": "alpha"}}}

    async def scenario():
        results = {}
        async with ServedRun(project, script, autostart=False) as served:
            where = ["-e", str(project.exec_dir)]
            results["ping"] = await ctl(*where, "ping")
            results["skip"] = await ctl(*where, "skip")
            results["next"] = await ctl(*where, "next")
            await wait_for_status(served.runtime, "a", "completed")
            await _until(lambda: served.runtime.commands.waiting_for_command)
            results["start"] = await ctl(*where, "start", "c")
            await wait_for_status(served.runtime, "c", "completed")
            await _until(lambda: served.runtime.commands.waiting_for_command)
            results["checkpoints"] = await ctl(*where, "checkpoints", "--json")
            results["rollback"] = await ctl(*where, "rollback", "--to", "a")
            results["shutdown"] = await ctl(*where, "shutdown", "--reason", "test over")
            results["code"] = await served.wait()
        return results

    results = run(scenario(), timeout=60)
    assert (results["ping"].exit_code, results["ping"].output) == (0, "pong\n")
    assert results["skip"].exit_code == 1
    assert "No running codon to skip (COMMAND_REFUSED)" in results["skip"].output
    assert results["next"].output == "Starting codon a\n"
    assert results["start"].output == "Starting codon c\n"
    listing = json.loads(results["checkpoints"].output)
    assert {"a", "c"} <= {entry["codonId"] for entry in listing["checkpoints"]}
    assert results["rollback"].exit_code == 0
    assert results["rollback"].output.startswith("Rolled back to a (completed checkpoint")
    assert results["shutdown"].output == "Shutting down\n"
    assert results["code"] == 0
    newest = project.state().runs[0]
    assert newest.starting_conditions.reason == "rollback"


def test_ctl_stop_then_next(project):
    project.write_hank([codon("a"), codon("b")])

    async def scenario():
        async with ServedRun(project, {"a": {"hang": True}}) as served:
            where = ["-e", str(project.exec_dir)]
            await wait_for_status(served.runtime, "a", "running")
            stop = await ctl(*where, "stop", "--reason", "wrong direction")
            await _until(lambda: served.runtime.commands.waiting_for_command)
            nxt = await ctl(*where, "next")
            return stop, nxt, await served.wait()

    stop, nxt, code = run(scenario(), timeout=60)
    assert stop.output == "Codon a force stopped\n"
    assert nxt.output == "Starting codon b\n"
    assert code == 0
    assert project.state().runs[0].codons[0].failure_reason.message == \
        "Force stopped: wrong direction"


def test_ctl_rollback_needs_exactly_one_target(tmp_path):
    result = CliRunner().invoke(ctl_group, ["-e", str(tmp_path), "rollback"], obj={})
    assert result.exit_code == 2 and "exactly one of" in result.output


def test_ctl_with_no_runtime_running_says_so(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(ctl_group, ["-e", str(tmp_path / "nowhere"), "skip"], obj={})
    assert missing.exit_code == 1 and "is not an execution directory" in missing.output
    (tmp_path / ".hankweave").mkdir()
    no_lock = runner.invoke(ctl_group, ["-e", str(tmp_path), "skip"], obj={})
    assert no_lock.exit_code == 1 and "No hankweave runtime is running" in no_lock.output


def test_ctl_reports_a_runtime_whose_server_is_not_up(tmp_path):
    lock = RuntimeLock(tmp_path / ".hankweave")
    lock.acquire()
    try:
        result = CliRunner().invoke(ctl_group, ["-e", str(tmp_path), "skip"], obj={})
        assert result.exit_code == 1 and "has no WebSocket server yet" in result.output
        lock.update(port=1)  # a port nothing listens on
        result = CliRunner().invoke(ctl_group, ["-e", str(tmp_path), "skip"], obj={})
        assert result.exit_code == 1 and "Cannot connect to ws://127.0.0.1:1" in result.output
    finally:
        lock.release()


def test_ctl_with_a_stale_lock_says_the_runtime_is_gone(tmp_path):
    hankweave = tmp_path / ".hankweave"
    hankweave.mkdir()
    (hankweave / "runtime.lock").write_text(json.dumps(
        {"pid": 2 ** 22 + 12345, "port": 4242, "token": "x"}))
    result = CliRunner().invoke(ctl_group, ["-e", str(tmp_path), "skip"], obj={})
    assert result.exit_code == 1 and "is no longer running" in result.output


def test_ctl_with_a_wrong_token_is_refused_control(project):
    project.write_hank([codon("a")])

    async def scenario():
        async with ServedRun(project, {"a": {"hang": True}}) as served:
            lock = served.runtime.owned.lock
            real = lock.token
            path = lock.path
            data = json.loads(path.read_text())
            path.write_text(json.dumps({**data, "token": "not-the-token"}))
            try:
                return await ctl("-e", str(project.exec_dir), "skip")
            finally:
                path.write_text(json.dumps({**data, "token": real}))

    result = run(scenario())
    assert result.exit_code == 1
    assert "Control refused: Wrong control token" in result.output


# ----- the client library -----


def test_server_address_reads_port_and_token_from_the_lock(tmp_path):
    lock = RuntimeLock(tmp_path / ".hankweave")
    lock.acquire()
    try:
        lock.update(port=5555)
        address = server_address(tmp_path)
        assert address.url == "ws://127.0.0.1:5555" and address.token == lock.token
        assert server_address(tmp_path, port=6000, host="::1").url == "ws://[::1]:6000"
        assert lock.token not in repr(address)
    finally:
        lock.release()


def test_the_client_raises_when_control_is_not_granted(tmp_path):
    async def scenario():
        bus = EventBus(EventJournal(tmp_path / "events.jsonl"))
        server = ControlServer(bus, token=TOKEN)
        await server.start()
        try:
            with pytest.raises(ControlRefusedError) as refused:
                await ControlClient.connect(server.url, token="nope", require_control=True)
            client = await ControlClient.connect(server.url, token=TOKEN, require_control=True)
            async with client:
                reply = await client.command("ping")
            return refused.value, reply
        finally:
            await server.stop()
            bus.close()

    refused, reply = run(scenario())
    assert refused.code == "INVALID_TOKEN"
    assert reply.ok and reply.message == "pong"


def test_connecting_to_nothing_is_a_clear_error():
    async def scenario():
        with pytest.raises(NoServerError, match=r"Cannot connect to ws://127\.0\.0\.1:1"):
            await ControlClient.connect("ws://127.0.0.1:1", open_timeout=2)

    run(scenario())
