"""Live control of a real runtime (FakeHarness agents, in-memory checkpoints) over WebSocket:
each command's effect on the run, the refusals, reconnection without gaps, many clients."""

from __future__ import annotations

import asyncio
import os
import random
import stat
import time

import pytest

from hankweave.runtime.errors import RuntimeCommandError
from hankweave.server import is_loopback, serve_runtime
from hankweave.state.lock import read_lock
from hankweave.testing.fake_harness import use_script
from tests.runtime_harness import Project, codon, wait_for_status
from tests.test_server_support import (
    ServedRun,
    command,
    command_messages,
    events_of,
    journal_seqs,
    open_client,
    receive,
    receive_until,
    run,
)

SLOW = {"messages": 12, "delayMs": 8}
HANG = {"hang": True}


@pytest.fixture
def project(tmp_path):
    yield Project(tmp_path)
    use_script(None)


async def controller(served):
    ws, response = await open_client(served.url, token=served.token)
    assert response["data"]["mode"] == "readandwrite"
    return ws


async def idle(ws, reason=None):
    """Wait for the runtime's next ``server.idle`` event."""
    messages = await receive_until(ws, lambda m: m["type"] == "server.idle" and (
        reason is None or m["data"]["reason"] == reason), timeout=10)
    return messages[-1]["data"]


def ok(reply):
    assert reply["type"] == "command.response", reply
    return reply["data"]


def refused(reply, code="COMMAND_REFUSED"):
    assert reply["type"] == "error", reply
    assert reply["data"]["code"] == code, reply
    return reply["data"]["message"]


# ----- history and reconnection -----


def test_reconnecting_with_after_seq_during_a_run_gets_every_event_exactly_once(project):
    project.write_hank([codon("a"), codon("b"), codon("c")])
    rng = random.Random(7)

    async def scenario():
        async with ServedRun(project, {"a": SLOW, "b": SLOW, "c": HANG}) as served:
            bus = served.runtime.emit.__self__

            def caught_up() -> bool:
                # Nothing more comes once c hangs: then every event must have arrived.
                return served.runtime.commands.codon_in_progress() == ("c", "running") and \
                    bool(seen) and seen[-1] >= bus.last_seq

            seen: list[int] = []
            connections = 0
            while not caught_up():
                ws, _ = await open_client(served.url, afterSeq=seen[-1] if seen else 0)
                connections += 1
                budget = rng.randint(1, 25)
                while budget and not caught_up():
                    try:
                        message = await receive(ws, timeout=0.1)
                    except TimeoutError:
                        continue
                    seen += [e["seq"] for e in events_of([message])]
                    budget -= 1
                ws.transport.abort()  # gone without a goodbye
            target = bus.last_seq
            served.runtime.commands.skip()
            await served.wait()
        return seen, connections, target

    seen, connections, target = run(scenario())
    assert connections > 5
    assert seen[:target] == list(range(1, target + 1))
    assert len(seen) == len(set(seen))
    assert journal_seqs(project.exec_dir)[:target] == seen[:target]


def test_state_transitions_carry_the_resulting_state(project):
    project.write_hank([codon("a")])

    async def scenario():
        async with ServedRun(project, {"a": {"cost": 0.25}}, autostart=False) as served:
            ws = await controller(served)
            async with ws:
                ok(await command(ws, "codon.next"))
                messages = await receive_until(ws, lambda m: m.get("type") == "server.idle")
            return [m for m in messages if m.get("type") == "state.transition"]

    transitions = run(scenario())
    assert transitions
    last = transitions[-1]["data"]["resultingState"]
    assert set(last) == {"currentRunId", "runCount", "totalCost", "currentRunCost"}
    assert last["totalCost"] == pytest.approx(0.25)


def test_a_client_joining_mid_codon_is_told_which_codon_is_in_progress(project):
    project.write_hank([codon("a")])

    async def scenario():
        async with ServedRun(project, {"a": HANG}) as served:
            await wait_for_status(served.runtime, "a", "running")
            ws, _ = await open_client(served.url)
            async with ws:
                return await receive_until(ws, lambda m: m["type"] == "incomplete.codon")

    message = run(scenario())[-1]
    assert message["data"]["codonId"] == "a" and "running" in message["data"]["message"]


# ----- commands and their effects -----


def test_skip_skips_the_running_codon_and_the_run_goes_on(project):
    project.write_hank([codon("a"), codon("b")])

    async def scenario():
        async with ServedRun(project, {"a": HANG}) as served:
            await wait_for_status(served.runtime, "a", "running")
            ws = await controller(served)
            async with ws:
                reply = await command(ws, "codon.skip")
            code = await served.wait()
        return reply, code, served.outcome

    reply, code, _ = run(scenario())
    assert ok(reply)["message"] == "Skipping codon a"
    assert code == 0
    assert project.state().runs[0].codons[0].status == "skipped"
    assert [c.status for c in project.state().runs[0].codons] == ["skipped", "completed"]


def test_force_stop_fails_the_codon_without_retry_and_waits_for_the_next_command(project):
    project.write_hank([codon("a", onFailure="retry", retryConfig={"delayMs": 0}), codon("b")])

    async def scenario():
        async with ServedRun(project, {"a": HANG}) as served:
            await wait_for_status(served.runtime, "a", "running")
            ws = await controller(served)
            async with ws:
                stop = await command(ws, "codon.forceStop", {"reason": "off the rails"})
                waiting = await idle(ws)
                assert served.runtime.commands.waiting_for_command
                nxt = await command(ws, "codon.next", command_id="n")
            code = await served.wait()
        return stop, waiting, nxt, code

    stop, waiting, nxt, code = run(scenario())
    assert ok(stop)["result"] == {"codonId": "a"}
    assert "force stopped" in waiting["message"]
    assert ok(nxt)["result"] == {"codonId": "b"}
    assert code == 0
    a, b = project.state().runs[0].codons
    assert a.status == "failed" and a.failure_reason.message == "Force stopped: off the rails"
    assert a.failure_reason.retriable
    assert b.status == "completed"


def test_without_autostart_codons_start_on_next_and_start_commands(project):
    project.write_hank([codon("a"), codon("b"), codon("c")])

    async def scenario():
        async with ServedRun(project, autostart=False) as served:
            ws = await controller(served)
            async with ws:
                first = await command(ws, "codon.next", command_id="1")
                await idle(ws, "codon-completed")
                unknown = await command(ws, "codon.start", {"codonId": "zzz"}, "2")
                jump = await command(ws, "codon.start", {"codonId": "c"}, "3")
                await idle(ws, "codon-completed")
                last = await command(ws, "codon.next", command_id="4")
            code = await served.wait()
        return first, unknown, jump, last, code

    first, unknown, jump, last, code = run(scenario())
    assert ok(first)["result"] == {"codonId": "a"}
    assert "zzz" in refused(unknown)
    assert ok(jump)["message"] == "Starting codon c"
    assert ok(last)["message"] == "No more codons to run: the run completes"
    assert code == 0
    run_record = project.state().runs[0]
    assert [(c.codon_id, c.status) for c in run_record.codons] == [("a", "completed"),
                                                                   ("c", "completed")]
    assert run_record.status == "completed"


def test_starting_while_a_codon_runs_is_refused(project):
    project.write_hank([codon("a"), codon("b")])

    async def scenario():
        async with ServedRun(project, {"a": HANG}) as served:
            await wait_for_status(served.runtime, "a", "running")
            ws = await controller(served)
            async with ws:
                replies = [await command(ws, "codon.next", command_id="n"),
                           await command(ws, "codon.start", {"codonId": "b"}, "s"),
                           await command(ws, "codon.redo", command_id="r"),
                           await command(ws, "rollback.toLastSuccess", command_id="l")]
                served.runtime.commands.skip()
            await served.wait()
        return replies

    messages = [refused(reply) for reply in run(scenario())]
    assert messages[0].startswith("Codon already running (a)")
    assert messages[3] == "Cannot rollback while a codon is running; skip or stop it first"


def test_redo_runs_the_most_recent_codon_again(project):
    project.write_hank([codon("a"), codon("b")])

    async def scenario():
        async with ServedRun(project, autostart=False) as served:
            ws = await controller(served)
            async with ws:
                ok(await command(ws, "codon.next", command_id="1"))
                await idle(ws, "codon-completed")
                redo = await command(ws, "codon.redo", command_id="2")
                await idle(ws, "codon-completed")
                ok(await command(ws, "server.shutdown", command_id="3"))
            return redo, await served.wait()

    redo, code = run(scenario())
    assert ok(redo)["message"] == "Running codon a again"
    assert code == 0
    assert [(c.codon_id, c.status) for c in project.state().runs[0].codons] == [
        ("a", "completed"), ("a", "completed")]


async def run_codons(ws, count: int) -> None:
    """Step ``count`` codons with ``codon.next``, each to its completion."""
    for number in range(count):
        ok(await command(ws, "codon.next", command_id=f"n{number}"))
        await idle(ws, "codon-completed")


async def roll_back(ws, codon_id: str) -> tuple[list[dict], dict]:
    """``rollback.toCodon``: the events it sent, then its reply."""
    *events, reply = await command_messages(ws, "rollback.toCodon", {"codonId": codon_id}, "r")
    return events, reply


def test_rollback_to_a_codon_restores_its_files_and_continues_after_it(project):
    project.write_hank([codon("a", checkpointedFiles=["**"]), codon("b")])
    script = {"a": {"writeFiles": {"notes.md": "alpha"}},
              "b": {"writeFiles": {"notes.md": "beta"}}}

    async def scenario():
        async with ServedRun(project, script, autostart=False) as served:
            ws = await controller(served)
            async with ws:
                await run_codons(ws, 2)
                before = (project.agent_root / "notes.md").read_text()
                events, reply = await roll_back(ws, "a")
                after = (project.agent_root / "notes.md").read_text()
                ok(await command(ws, "codon.next", command_id="again"))
                await idle(ws, "codon-completed")
                ok(await command(ws, "server.shutdown", command_id="bye"))
            return before, reply, events, after, await served.wait()

    before, reply, events, after, code = run(scenario())
    assert (before, after) == ("beta", "alpha")
    data = ok(reply)
    assert data["result"]["codonId"] == "a" and data["result"]["checkpointType"] == "completed"
    kinds = [m["type"] for m in events]
    assert "rollback.started" in kinds and "rollback.completed" in kinds
    assert events[-1]["data"]["reason"] == "rollback-completed"
    assert code == 0
    state = project.state()
    newest = state.runs[0]
    assert newest.starting_conditions.reason == "rollback"
    assert newest.starting_conditions.source.after_codon == "a"
    assert [(c.codon_id, c.status) for c in newest.codons] == [("b", "completed")]
    assert newest.status == "completed"
    assert (project.agent_root / "notes.md").read_text() == "beta"


def test_a_rollback_reports_its_steps_the_restored_checkpoint_and_the_rig_cleanup(project):
    (project.hank_dir / "kit").mkdir()
    (project.hank_dir / "kit" / "tool.sh").write_text("echo kit\n")
    project.write_hank([
        codon("a", checkpointedFiles=["**"]),
        codon("b", rigSetup=[{"type": "copy", "copy": {"from": "kit", "to": "kit"}}])])
    script = {"a": {"writeFiles": {"notes.md": "alpha"}},
              "b": {"writeFiles": {"notes.md": "beta"}}}

    async def scenario():
        async with ServedRun(project, script, autostart=False) as served:
            ws = await controller(served)
            async with ws:
                await run_codons(ws, 2)
                copied = (project.agent_root / "kit" / "tool.sh").exists()
                events, reply = await roll_back(ws, "a")
                ok(reply)
                ok(await command(ws, "server.shutdown", command_id="bye"))
            await served.wait()
            return copied, events

    copied, events = run(scenario())
    rollback = [m for m in events if m["type"].startswith("rollback.")]
    assert [m["type"] for m in rollback] == [
        "rollback.started", "rollback.progress", "rollback.progress",
        "rollback.codonCheckpoint", "rollback.rigCleanup", "rollback.completed"]
    started, undo, apply, restored, cleanup, _ = (m["data"] for m in rollback)
    assert started["codonsToProcess"] == ["b"]
    assert (undo["currentStep"], undo["totalSteps"]) == (1, 2) and "b" in undo["message"]
    assert (apply["currentStep"], apply["totalSteps"]) == (2, 2)
    assert restored["codonId"] == "a" and restored["checkpoint"] == started["toCheckpoint"]
    assert copied and not (project.agent_root / "kit").exists()
    assert cleanup == {"codonId": "b", "codonName": cleanup["codonName"], "directories": ["kit"],
                       "status": "completed", "successfulCleanups": 1}
    journaled = [e["type"] for e in project.journal() if e["type"].startswith("rollback.")]
    assert journaled == [m["type"] for m in rollback]


def test_checkpoint_list_answers_the_sender_only_and_rollback_takes_a_prefix(project):
    project.write_hank([codon("a", checkpointedFiles=["**"]), codon("b")])

    async def scenario():
        async with ServedRun(project, {"a": {"writeFiles": {"x.md": "1"}}},
                             autostart=False) as served:
            ws = await controller(served)
            watcher, _ = await open_client(served.url)
            async with ws, watcher:
                await run_codons(ws, 2)
                await ws.send('{"type":"checkpoint.list","id":"list"}')
                messages = await receive_until(ws, lambda m: m["type"] == "command.response")
                sha = next(c["sha"] for c in messages[-1]["data"]["result"]["checkpoints"]
                           if c["codonId"] == "a" and c["checkpointType"] == "completed")
                rollback = await command(ws, "rollback.toCheckpoint",
                                         {"checkpointSha": sha[:8], "autoRestart": True}, "r")
                await idle(ws, "codon-completed")  # b ran again by itself
                ok(await command(ws, "server.shutdown", command_id="bye"))
                watched = await receive_until(watcher, lambda m: m.get("type") == "state.transition"
                                              and m["data"]["transitionType"] == "RunCompleted")
            return messages, rollback, watched, await served.wait()

    messages, rollback, watched, code = run(scenario())
    listing = [m for m in messages if m["type"] == "checkpoint.list"]
    assert len(listing) == 1 and "seq" not in listing[0]  # a reply, not a journaled event
    entries = listing[0]["data"]["checkpoints"]
    assert [e["codonId"] for e in entries][:2] == ["b", "a"]  # newest first
    assert ok(rollback)["result"]["codonId"] == "a"
    assert not any(m["type"] == "checkpoint.list" for m in watched)
    assert code == 0
    assert [(c.codon_id, c.status) for c in project.state().runs[0].codons] == [
        ("b", "completed")]


def test_commands_during_a_rollback_are_refused(project, monkeypatch):
    project.write_hank([codon("a"), codon("b")])

    async def scenario():
        async with ServedRun(project, autostart=False) as served:
            store = served.runtime.checkpoints
            restore = store.restore

            def slow_restore(sha):
                time.sleep(0.3)
                restore(sha)

            monkeypatch.setattr(store, "restore", slow_restore)
            first, second = await controller(served), await controller(served)
            async with first, second:
                ok(await command(first, "codon.next", command_id="n"))
                await idle(first, "codon-completed")
                rolling = asyncio.create_task(command(first, "rollback.toLastSuccess",
                                                      command_id="r"))
                while not served.runtime.commands.rolling_back:
                    await asyncio.sleep(0.005)
                during = await command(second, "codon.next", command_id="d")
                after = await rolling
            return during, after

    during, after = run(scenario())
    assert refused(during, "ROLLBACK_IN_PROGRESS")
    assert ok(after)["result"]["codonId"] == "a"


def test_a_read_only_client_cannot_shut_the_run_down(project):
    project.write_hank([codon("a"), codon("b")])

    async def scenario():
        async with ServedRun(project, {"a": SLOW}) as served:
            ws, _ = await open_client(served.url)
            async with ws:
                shutdown = await command(ws, "server.shutdown", command_id="s")
                force = await command(ws, "server.force_shutdown", command_id="f")
            code = await served.wait()
        return shutdown, force, code

    shutdown, force, code = run(scenario())
    refused(shutdown, "INSUFFICIENT_PERMISSIONS")
    refused(force, "INSUFFICIENT_PERMISSIONS")
    assert code == 0
    assert [c.status for c in project.state().runs[0].codons] == ["completed", "completed"]


@pytest.mark.parametrize(("kind", "exit_code"), [("server.shutdown", 0),
                                                 ("server.force_shutdown", 1)])
def test_shutdown_commands_stop_the_run(project, kind, exit_code):
    project.write_hank([codon("a"), codon("b")])

    async def scenario():
        async with ServedRun(project, {"a": HANG}) as served:
            await wait_for_status(served.runtime, "a", "running")
            ws = await controller(served)
            async with ws:
                reply = await command(ws, kind, {"reason": "done for today"})
                after = await command(ws, "codon.next", command_id="late")
            return reply, after, await served.wait()

    reply, after, code = run(scenario())
    ok(reply)
    refused(after, "SHUTTING_DOWN")
    assert code == exit_code
    run_record = project.state().runs[0]
    assert [c.status for c in run_record.codons] == ["failed"]
    assert run_record.codons[0].failure_reason.message == "Interrupted: client request"


def test_the_runtime_methods_refuse_what_the_protocol_refuses(project):
    # The CLI uses the same methods: same rules without a server in between.
    project.write_hank([codon("a")])

    async def scenario():
        async with ServedRun(project, {"a": HANG}) as served:
            runtime = served.runtime
            await wait_for_status(runtime, "a", "running")
            errors = []
            for call in (runtime.commands.start_next, lambda: runtime.commands.start_codon("a"), runtime.commands.redo):
                with pytest.raises(RuntimeCommandError) as caught:
                    call()
                errors.append(str(caught.value))
            with pytest.raises(RuntimeCommandError):
                await runtime.commands.rollback_to_codon("a")
            assert runtime.commands.force_stop("test") == "a"
            async with asyncio.timeout(20):  # (room for a loaded machine)
                while not runtime.commands.waiting_for_command:
                    await asyncio.sleep(0.005)
            with pytest.raises(RuntimeCommandError, match="No running codon to stop"):
                runtime.commands.force_stop()
            assert runtime.commands.skip() is False
            return errors

    errors = run(scenario())
    assert all(message.startswith("Codon already running") for message in errors)


# ----- many clients -----


def test_two_hundred_connect_disconnect_cycles_leave_the_run_unaffected(project):
    project.write_hank([codon("a"), codon("b"), codon("c")])

    async def scenario():
        async with ServedRun(project, {"a": SLOW, "b": SLOW, "c": HANG}) as served:
            for cycle in range(200):
                ws, _ = await open_client(served.url, afterSeq=cycle % 50)
                if cycle % 3 == 0:
                    await receive(ws)
                if cycle % 2:
                    ws.transport.abort()
                else:
                    await ws.close()
            await wait_for_status(served.runtime, "c", "running")
            async with asyncio.timeout(20):  # (room for a loaded machine)
                while served.server.client_count:
                    await asyncio.sleep(0.01)
            served.runtime.commands.skip()
            return await served.wait()

    assert run(scenario(), timeout=60) == 0
    assert [c.status for c in project.state().runs[0].codons] == [
        "completed", "completed", "skipped"]


# ----- how the run serves -----


def test_the_port_is_in_the_lock_with_the_token_readable_by_the_owner_only(project):
    project.write_hank([codon("a")])

    async def scenario():
        async with ServedRun(project, {"a": HANG}) as served:
            lock = read_lock(project.hankweave_dir)
            mode = stat.S_IMODE(os.stat(project.hankweave_dir / "runtime.lock").st_mode)
            bus = served.runtime.emit.__self__
            again = await serve_runtime(served.runtime, bus, served.runtime.owned)
            return lock, mode, again is served.server, served.server.port

    lock, mode, same, port = run(scenario())
    assert lock.port == port and lock.token
    assert mode == 0o600
    assert same  # one server per runtime


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("127.1.2.3", True), ("0.0.0.0", False), ("::", False), ("192.168.1.4", False),
    ("example.com", False)])
def test_only_loopback_addresses_count_as_local(host, loopback):
    assert is_loopback(host) is loopback
