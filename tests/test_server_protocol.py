"""The WebSocket protocol against a server on a bare event bus: handshake, history, refusals,
tokens, slow and abrupt clients.  A real ``websockets`` client on 127.0.0.1 throughout."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.request

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from hankweave.events.catalogue import ErrorData, HistoryBatchData, ServerReadyData
from hankweave.server.protocol import CONTROL_COMMANDS
from tests.test_server_support import (
    TOKEN,
    bus_server,
    command,
    events_of,
    journal_seqs,
    open_client,
    receive,
    receive_until,
    run,
)


def emit_infos(bus, count, start=0):
    for number in range(start, start + count):
        bus.emit("info", {"message": f"event {number}"})


# ----- handshake and history -----


def test_handshake_gets_its_response_then_server_ready(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (bus, server):
            emit_infos(bus, 3)
            ws, response = await open_client(server.url, mode="readonly")
            async with ws:
                ready = await receive(ws)
            return response, ready, server.port

    response, ready, port = run(scenario())
    assert response["data"]["mode"] == "readonly"
    assert response["data"]["eventHistory"] == []
    assert response["data"]["totalEvents"] == 3 and response["data"]["lastSeq"] == 3
    assert ready["type"] == "server.ready"
    data = ServerReadyData.model_validate(ready["data"])
    assert data.port == port
    assert "seq" not in ready  # connection events are never journaled


def test_send_previous_events_gives_the_last_fifty_oldest_first(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (bus, server):
            emit_infos(bus, 60)
            ws, response = await open_client(server.url, sendPreviousEvents=True)
            await ws.close()
            return response

    history = run(scenario())["data"]["eventHistory"]
    assert [event["seq"] for event in history] == list(range(11, 61))


def test_after_seq_replays_the_journal_in_bounded_batches_then_goes_live(tmp_path):
    async def scenario():
        async with bus_server(tmp_path, history_batch_events=4) as (bus, server):
            emit_infos(bus, 10)
            ws, response = await open_client(server.url, afterSeq=3)
            async with ws:
                received = await receive_until(
                    ws, lambda m: m["type"] == "history.batch" and not m["data"]["hasMore"])
                emit_infos(bus, 2, start=10)
                received += [await receive(ws), await receive(ws)]
            return response, received

    response, received = run(scenario())
    assert response["data"]["lastSeq"] == 10
    batches = [m for m in received if m["type"] == "history.batch"]
    assert [len(b["data"]["events"]) for b in batches] == [4, 3]
    assert [b["data"]["hasMore"] for b in batches] == [True, False]
    for batch in batches:
        HistoryBatchData.model_validate(batch["data"])
    assert [e["seq"] for e in events_of(received)] == list(range(4, 13))


def test_after_seq_with_nothing_newer_sends_one_empty_final_batch(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (bus, server):
            emit_infos(bus, 2)
            ws, _ = await open_client(server.url, afterSeq=2)
            async with ws:
                return await receive_until(ws, lambda m: m["type"] == "history.batch")

    batch = run(scenario())[-1]
    assert batch["data"] == {"events": [], "hasMore": False}


def test_clients_joining_while_events_pour_in_miss_none_and_repeat_none(tmp_path):
    # Events come from the loop and from another thread while clients hand shake at various
    # points; each client must see exactly seq afterSeq+1 .. last, in order.
    total = 600

    async def scenario():
        async with bus_server(tmp_path, history_batch_events=50) as (bus, server):
            emit_infos(bus, 100)

            def from_thread():
                emit_infos(bus, 150, start=1000)

            async def from_loop():
                for number in range(total - 250):
                    bus.emit("info", {"message": f"loop {number}"})
                    if number % 7 == 0:
                        await asyncio.sleep(0)

            async def client(after):
                ws, _ = await open_client(server.url, afterSeq=after)
                seen = []
                async with ws:
                    while not seen or seen[-1] < total:
                        message = await receive(ws)
                        seen += [e["seq"] for e in events_of([message])]
                return after, seen

            thread = threading.Thread(target=from_thread)
            clients = [asyncio.create_task(client(after)) for after in (0, 50, 99)]
            thread.start()
            await asyncio.sleep(0)
            clients.append(asyncio.create_task(client(20)))
            await from_loop()
            await asyncio.to_thread(thread.join)
            clients.append(asyncio.create_task(client(300)))
            return await asyncio.gather(*clients)

    for after, seen in run(scenario()):
        assert seen == list(range(after + 1, total + 1)), after
    assert journal_seqs(tmp_path) == list(range(1, total + 1))


def test_history_sync_sends_what_came_before_the_live_stream(tmp_path):
    async def scenario():
        async with bus_server(tmp_path, history_batch_events=2) as (bus, server):
            emit_infos(bus, 5)
            ws, _ = await open_client(server.url)
            async with ws:
                emit_infos(bus, 1, start=5)
                live = await receive_until(ws, lambda m: m.get("seq") == 6)
                await ws.send(json.dumps({"type": "history.sync", "id": "h",
                                          "data": {"afterSeq": 1}}))
                synced = await receive_until(ws, lambda m: m["type"] == "command.response")
            return live, synced

    live, synced = run(scenario())
    assert [e["seq"] for e in events_of(live)] == [6]
    batches = [m for m in synced if m["type"] == "history.batch"]
    assert [b["data"]["hasMore"] for b in batches] == [True, False]
    # Up to the start of this client's live stream: nothing it already has live.
    assert [e["seq"] for e in events_of(batches)] == [2, 3, 4, 5]
    assert synced[-1]["data"]["commandId"] == "h"


# ----- refusals -----


def _error(message):
    assert message["type"] == "error", message
    ErrorData.model_validate(message["data"])
    assert message["data"]["fatal"] is False
    return message["data"]


def test_commands_before_the_handshake_are_refused(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (_, server), connect(server.url) as ws:
            await ws.send(json.dumps({"type": "ping", "id": "p"}))
            return await receive(ws)

    data = _error(run(scenario()))
    assert data["code"] == "HANDSHAKE_REQUIRED"
    assert data["context"] == {"command": "ping", "commandId": "p"}


@pytest.mark.parametrize(("frame", "code"), [
    ("{not json", "INVALID_JSON"),
    (b"\xff\xfe binary garbage", "INVALID_JSON"),
    ("[1, 2]", "INVALID_COMMAND"),
    ('{"id": "x"}', "INVALID_COMMAND"),
    ('{"type": "codon.explode", "id": "x"}', "UNKNOWN_COMMAND"),
    ('{"type": "codon.start", "id": "x", "data": {}}', "INVALID_COMMAND"),
    ('{"type": "rollback.toCodon", "id": "x", "data": {"codonId": "a", "bogus": 1}}',
     "INVALID_COMMAND"),
    ('{"type": "ping", "id": "x", "data": {"unexpected": true}}', "INVALID_COMMAND"),
])
def test_bad_messages_get_a_typed_error_and_the_connection_stays_usable(tmp_path, frame, code):
    async def scenario():
        async with bus_server(tmp_path) as (_, server):
            ws, _ = await open_client(server.url)
            async with ws:
                await receive(ws)  # server.ready
                await ws.send(frame)
                refusal = await receive(ws)
                pong = await command(ws, "ping", command_id="after")
            return refusal, pong

    refusal, pong = run(scenario())
    assert _error(refusal)["code"] == code
    assert pong["type"] == "command.response"


def test_invalid_command_errors_name_the_field_and_the_command(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (_, server):
            ws, _ = await open_client(server.url)
            async with ws:
                return await command(ws, "codon.start", {"skipPreCommands": True}, "s1")

    data = _error(run(scenario()))
    assert "codonId" in data["message"] and data["context"]["commandId"] == "s1"


def test_an_oversized_frame_is_refused_and_a_huge_one_closes_only_that_connection(tmp_path):
    async def scenario():
        async with bus_server(tmp_path, max_frame=1000) as (bus, server):
            ws, _ = await open_client(server.url)
            other, _ = await open_client(server.url)
            async with ws, other:
                await receive(ws)
                await ws.send(json.dumps({"type": "ping", "id": "big", "pad": "x" * 2000}))
                refusal = await receive(ws)
                pong = await command(ws, "ping", command_id="small")
                await ws.send("x" * 10_000)  # beyond the hard ceiling
                with pytest.raises(ConnectionClosed) as closed:
                    while True:
                        await receive(ws)
                bus.emit("info", {"message": "still here"})
                alive = await receive_until(other, lambda m: m.get("seq") == 1)
            return refusal, pong, closed.value, alive

    refusal, pong, closed, alive = run(scenario())
    assert _error(refusal)["code"] == "FRAME_TOO_LARGE"
    assert pong["type"] == "command.response"
    assert closed.rcvd is not None and closed.rcvd.code == 1009
    assert alive[-1]["data"]["message"] == "still here"


def test_a_read_only_client_is_refused_every_control_command(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (_, server):
            ws, response = await open_client(server.url, mode="read-only", token=TOKEN)
            replies = {}
            async with ws:
                for number, kind in enumerate(sorted(CONTROL_COMMANDS)):
                    data = {"codon.start": {"codonId": "a"},
                            "rollback.toCodon": {"codonId": "a"},
                            "rollback.toCheckpoint": {"checkpointSha": "abcd1234"},
                            "interruption.answer": {"interruptionId": "int-1", "answer": "x"},
                            }.get(kind)
                    replies[kind] = await command(ws, kind, data, command_id=f"c{number}")
            return response, replies

    response, replies = run(scenario())
    assert response["data"]["mode"] == "readonly"
    assert "server.shutdown" in replies and "server.force_shutdown" in replies
    for kind, reply in replies.items():
        assert _error(reply)["code"] == "INSUFFICIENT_PERMISSIONS", kind


def test_a_wrong_token_is_refused_logged_and_leaves_a_read_only_connection(tmp_path, caplog):
    async def scenario():
        async with bus_server(tmp_path) as (bus, server):
            ws, response = await open_client(server.url, mode="readandwrite", token="guess")
            async with ws:
                first = await receive(ws)
                skip = await command(ws, "codon.skip", command_id="s")
                pong = await command(ws, "ping", command_id="p")
                bus.emit("info", {"message": "watching"})
                watched = await receive_until(ws, lambda m: m.get("seq") == 1)
            return response, first, skip, pong, watched

    with caplog.at_level(logging.WARNING, logger="hankweave.server"):
        response, first, skip, pong, watched = run(scenario())
    assert response["data"]["mode"] == "readonly"
    assert _error(first)["code"] == "INVALID_TOKEN"
    assert _error(skip)["code"] == "INSUFFICIENT_PERMISSIONS"
    assert pong["type"] == "command.response"
    assert watched[-1]["data"]["message"] == "watching"
    assert any("wrong control token" in record.message for record in caplog.records)
    assert "guess" not in caplog.text


def test_asking_for_control_without_a_token_gives_a_read_only_connection(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (_, server):
            ws, response = await open_client(server.url, mode="readandwrite")
            async with ws:
                return response, await receive(ws)

    response, notice = run(scenario())
    assert response["data"]["mode"] == "readonly"
    data = _error(notice)
    assert data["code"] == "TOKEN_REQUIRED" and data["severity"] == "warning"


def test_the_right_token_grants_control_and_ping_broadcast_reaches_everyone(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (_, server):
            controller, response = await open_client(server.url, token=TOKEN)
            watcher, _ = await open_client(server.url)
            async with controller, watcher:
                reply = await command(controller, "ping.broadcast", command_id="b")
                pong = (await receive_until(watcher, lambda m: m["type"] == "pong"))[-1]
                skip = await command(controller, "codon.skip", command_id="s")
            return response, reply, pong, skip

    response, reply, pong, skip = run(scenario())
    assert response["data"]["mode"] == "readandwrite"
    assert reply["type"] == "command.response"
    assert pong["data"]["clientId"] == response["data"]["clientId"]
    assert _error(skip)["code"] == "NO_RUNTIME"


# ----- slow, abrupt and many clients -----


def test_a_client_that_never_reads_is_disconnected_while_another_keeps_receiving(tmp_path):
    count = 300

    async def scenario():
        async with bus_server(tmp_path, max_queue=20, write_high_water=16 * 1024) as (bus, server):
            # A websockets client stops reading its socket once max_queue messages wait.
            slow = await connect(server.url, max_queue=1, max_size=None)
            await slow.send(json.dumps({"type": "handshake", "data": {}}))
            normal, _ = await open_client(server.url)
            big = "x" * 64 * 1024

            async def read_all():
                seqs = []
                while len(seqs) < count:
                    message = await receive(normal, timeout=10)
                    seqs += [e["seq"] for e in events_of([message])]
                return seqs

            reader = asyncio.create_task(read_all())
            for number in range(count):
                bus.emit("info", {"message": f"{number} {big}"})
                await asyncio.sleep(0.002)  # a pace the reading client keeps up with
            seqs = await reader
            async with asyncio.timeout(10):
                while server.client_count > 1:
                    await asyncio.sleep(0.01)
            # What the slow client had buffered, then its notice and the close.
            notice = None
            with pytest.raises(ConnectionClosed):
                while True:
                    message = json.loads(await asyncio.wait_for(slow.recv(), 20))
                    if message["type"] == "error":
                        notice = message
            await normal.close()
            return seqs, notice, slow.close_code

    seqs, notice, close_code = run(scenario())
    assert seqs == list(range(1, count + 1))
    assert close_code in (1013, 1006)
    if notice is not None:  # the notice may not survive an aborted connection
        assert notice["data"]["code"] == "CLIENT_TOO_SLOW"


def test_abrupt_disconnects_leave_the_server_serving(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (bus, server):
            for _ in range(20):
                ws, _ = await open_client(server.url, afterSeq=0)
                ws.transport.abort()  # no closing handshake
                emit_infos(bus, 5)
            async with asyncio.timeout(20):  # (room for a loaded machine)
                while server.client_count:
                    await asyncio.sleep(0.01)
            ws, _ = await open_client(server.url, afterSeq=0)
            async with ws:
                seen = events_of(await receive_until(ws, lambda m: m["type"] == "history.batch"
                                                     and not m["data"]["hasMore"]))
            return [e["seq"] for e in seen]

    assert run(scenario()) == list(range(1, 101))


def test_a_plain_http_request_gets_a_json_explanation(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (_, server):
            def fetch():
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=5)
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.headers["Content-Type"], json.loads(exc.read())
                raise AssertionError("expected an HTTP error")

            return await asyncio.to_thread(fetch)

    status, content_type, body = run(scenario())
    assert status == 400 and content_type == "application/json"
    assert body["error"] == "HTTP API not available"


def test_a_browser_page_cannot_connect(tmp_path):
    async def scenario():
        async with bus_server(tmp_path) as (_, server):
            with pytest.raises(InvalidStatus) as refused:
                await connect(server.url, origin="https://evil.example")
            return refused.value.response.status_code

    assert run(scenario()) == 403
