"""The event catalogue: payload models, categories, the envelope."""

from __future__ import annotations

import json
import math
import re
from typing import Any, get_args

import pytest

from hankweave.events import (
    AGENTIC_BACKBONE_EVENTS,
    ALL_EVENT_TYPES,
    CONNECTION_EVENTS,
    EVENT_DATA_MODELS,
    EVENT_SCHEMA_VERSION,
    SENTINEL_EVENTS,
    SERVER_STATE_EVENTS,
    EventDataError,
    EventError,
    ServerEvent,
    UnknownEventTypeError,
    category_of,
    is_journaled,
    make_event,
    routes_to_sentinels,
    validate_event_data,
)
from hankweave.events.catalogue import (
    TRANSITION_TYPES,
    FileUpdatedData,
    InfoData,
    PongData,
    ServerIdleData,
    StateSnapshotData,
    dump_event_data,
)
from hankweave.events.journal import encode_event
from hankweave.state.transitions import StateTransition
from tests.state_builders import completed
from tests.transition_builders import run_started

TS = "2026-02-05T10:00:00.123Z"
RESULTING = {"currentRunId": "run-1", "runCount": 1, "totalCost": 0.5, "currentRunCost": 0.25}
SNAPSHOT_CODON = {"codonId": "review#0", "status": "completed", "startTime": TS, "finalCost": 0.4}

# One representative payload per event type, written as the original writes it.
SAMPLES: dict[str, dict[str, Any]] = {
    # connection
    "server.ready": {
        "serverVersion": "0.1.0",
        "executionPath": "/exec",
        "agentRootPath": "/exec/agentRoot",
        "dataPath": "/exec/agentRoot/read_only_data_source",
        "port": 41234,
    },
    "pong": {"message": "pong", "timestamp": TS, "clientId": "c1"},
    "history.batch": {
        "events": [{"id": "1-abc", "timestamp": TS, "type": "info", "data": {"message": "hello"}}],
        "hasMore": False,
    },
    "incomplete.codon": {"codonId": "a", "codonName": "A", "message": "not finished"},
    # codon lifecycle
    "codon.started": {
        "codonId": "review#0",
        "codonName": "Review",
        "sessionId": "sess-1",
        "startTime": TS,
        "promptMetadata": {"name": "review", "tags": ["qa"], "version": 2},
    },
    "codon.completed": {
        "codonId": "review#0",
        "success": False,
        "cost": 0.12,
        "duration": 5400,
        "exitStatus": {"type": "error", "code": 1},
        "failureReason": {"type": "rate-limit", "retriable": True, "retryAfterMs": 30000},
        "budgetExceeded": {"currency": "cost", "limit": 1, "used": 1.2},
    },
    "codon.extended": {
        "codonId": "write",
        "codonName": "Write",
        "extensionNumber": 2,
        "exhaustWithPrompt": "Keep going.",
        "cumulativeTokens": 12000,
        "cumulativeCost": 0.8,
    },
    "loop.iteration.completed": {
        "loopId": "refine",
        "iteration": 0,
        "durationMs": 1200.5,
        "costUsd": 0.3,
        "tokensUsed": 900,
        "isFinal": True,
        "terminationReason": "iteration_limit",
    },
    # agent activity
    "assistant.action": {
        "codonId": "review#0",
        "action": "tool_use",
        "content": "",
        "toolName": "Write",
        "toolInput": {"file_path": "notes.md", "content": "é 漢字"},
        "toolUseId": "toolu_01",
    },
    "token.usage": {
        "codonId": "review#0",
        "inputTokens": 3,
        "outputTokens": 120,
        "cacheCreationTokens": 0,
        "cacheReadTokens": 2000,
        "totalCost": 0.0012,
        "modelId": "claude-sonnet-4",
    },
    "tool.result": {
        "codonId": "review#0",
        "toolUseId": "toolu_01",
        "toolName": "Write",
        "result": "File written",
        "truncated": False,
        "originalLength": 12,
        "executionTimeMs": 31,
        "isError": False,
    },
    "file.updated": {
        "path": "/exec/agentRoot/notes.md",
        "filename": "notes.md",
        "action": "created",
        "sha256": "ab" * 32,
        "bytes": 11,
        "source": {"kind": "tool_use", "toolUseId": "toolu_01"},
    },
    "filetree.updated": {
        "tree": [
            {
                "name": "src",
                "path": "src",
                "isDirectory": True,
                "children": [
                    {
                        "name": "a.py",
                        "path": "src/a.py",
                        "isDirectory": False,
                        "lastModified": TS,
                        "children": [],
                    }
                ],
            }
        ]
    },
    # rig
    "rig.setup.completed": {
        "codonId": "build",
        "rigType": "commands",
        "commandCount": 2,
        "durationMs": 800,
        "createdCheckpoint": True,
    },
    "rig.setup.failed": {
        "codonId": "build",
        "failureType": "command_failed",
        "exitCode": 2,
        "commandIndex": 1,
        "ignored": False,
    },
    "rig.output": {"codonId": "build", "stream": "stderr", "line": "warning: x", "commandIndex": 0},
    # server status
    "error": {"message": "boom", "fatal": False, "severity": "operation", "code": "X"},
    "info": {"message": "Rig setup started", "details": ["a", "b"]},
    "server.idle": {"reason": "startup", "message": "Server ready."},
    "state.snapshot": {
        "currentCodon": {"codonId": "next", "status": "running", "startTime": TS},
        "completedCodons": [SNAPSHOT_CODON],
        "fileTree": [],
        "totalCost": 0.4,
        "totalTime": 61000,
        "recentFileAccess": {"path": "notes.md", "timestamp": TS},
        "isRollingBack": False,
    },
    "state.transition": {
        "transitionType": "CodonStarted",
        "runId": "run-1",
        "codonId": "review#0",
        "transition": {
            "type": "CodonStarted",
            "data": {"runId": "run-1", "codonId": "review#0"},
            "timestamp": TS,
        },
        "resultingState": RESULTING,
    },
    "checkpoint.list": {
        "runId": "run-1",
        "checkpoints": [
            {
                "codonId": "review#0",
                "codonName": "Review",
                "checkpointType": "completed",
                "sha": "c" * 40,
                "status": "completed",
                "timestamp": TS,
            }
        ],
        "currentBranch": "run-run-1",
    },
    "budget.summary": {
        "ceiling": {"maxDollars": 5},
        "allocation": "proportional",
        "rows": [
            {
                "codonId": "refine#1",
                "loopContext": {"loopId": "refine", "iteration": 1, "codonIndexInLoop": 0},
                "status": "completed",
                "budget": {"maxDollars": 1.25, "maxOutputTokens": 4000},
                "actual": {"dollars": 0.5, "timeSeconds": 30, "outputTokens": 1200},
            }
        ],
        "totals": {"budgetDollars": 5, "actualDollars": 0.5, "actualTimeSeconds": 30},
    },
    # rollback and archive
    "rollback.started": {
        "fromRun": "run-2",
        "fromCodon": "c",
        "toCodon": "a",
        "toCheckpoint": "a" * 40,
        "checkpointType": "completed",
        "codonsToProcess": ["c", "b"],
    },
    "rollback.progress": {"currentStep": 1, "totalSteps": 3, "message": "Rolling back c"},
    "rollback.codonCheckpoint": {
        "codonId": "a",
        "codonName": "A",
        "checkpoint": "a" * 40,
        "checkpointType": "completed",
        "message": "restored",
    },
    "rollback.rigCleanup": {
        "codonId": "b",
        "codonName": "B",
        "directories": ["data"],
        "status": "partial",
        "successfulCleanups": 0,
        "failedCleanups": [{"directory": "data", "error": "EBUSY"}],
    },
    "rollback.completed": {
        "fromRun": "run-2",
        "toRun": "run-3",
        "checkpoint": "a" * 40,
        "codonId": "a",
        "codonName": "A",
        "checkpointType": "completed",
        "autoRestart": False,
    },
    "rollback.archiveRestore": {
        "codonId": "a" * 40,
        "restoredPaths": ["out/report.md"],
        "status": "completed",
    },
    "archive.completed": {"codonId": "a", "archivedPaths": ["tmp/x"]},
    "archive.partial": {
        "codonId": "a",
        "archivedPaths": [],
        "failedPaths": [{"path": "tmp/y", "error": "EACCES"}],
    },
    # sentinels
    "sentinel.loaded": {
        "sentinelId": "watch",
        "codonId": "review#0",
        "model": "anthropic/claude-haiku",
        "triggerType": "event",
        "executionStrategy": "debounce",
        "conversational": False,
        "source": "file",
        "sourcePath": "sentinels/watch.json",
    },
    "sentinel.unloaded": {
        "sentinelId": "watch",
        "codonId": "review#0",
        "reason": "codon-complete",
        "finalCost": 0.01,
        "llmCallCount": 3,
    },
    "sentinel.error": {
        "sentinelId": "watch",
        "codonId": "review#0",
        "errorType": "llm-call-failed",
        "message": "timeout",
        "retriable": True,
        "consecutiveFailureCount": 2,
    },
    "sentinel.output": {
        "sentinelId": "watch",
        "codonId": "review#0",
        "triggerNumber": 1,
        "outputType": "structured",
        "content": {"verdict": "ok"},
        "cost": 0.002,
        "tokens": {"input": 300, "output": 40},
        "eventCount": 1,
    },
    "sentinel.triggered": {
        "sentinelId": "watch",
        "codonId": "review#0",
        "triggerNumber": 1,
        "strategy": "debounce",
        "eventCount": 4,
        "queueSize": 0,
    },
    # beyond the original
    "sink.failed": {"sink": "jsonl", "error": "OSError: disk full", "disabled": True},
    "budget.limits": {
        "codonId": "x#1",
        "loopContext": {"loopId": "L", "iteration": 1, "codonIndexInLoop": 0},
        "ceiling": {"maxDollars": 10, "maxTimeSeconds": 3600, "allocation": "proportional",
                    "shares": {"L": 0.5}, "onExceeded": "fail"},
        "limits": {"maxDollars": 4, "dollarsSource": "shared pool of loop L",
                   "maxTimeSeconds": 540, "timeSource": "loop L time left",
                   "maxOutputTokens": 20000, "maxContextTokens": 150000,
                   "onExceeded": "fail", "onExceededSource": "hank"},
        "loop": {"maxDollars": 5, "dollarsSource": "proportional share (50% of $10.00)",
                 "maxTimeSeconds": 600, "timeSource": "loop cap"},
        "spentDollars": 1.5,
        "elapsedSeconds": 120.5,
    },
    "proxy.request": {
        "requestId": "19a3f-1", "codonId": "draft", "upstream": "anthropic", "method": "POST",
        "path": "/v1/messages", "model": "claude-sonnet-4-5", "streamed": True, "status": 200,
        "inputTokens": 1850, "outputTokens": 420, "cacheReadTokens": 1200,
        "cacheCreationTokens": 0, "cost": 0.0091, "ttfbMs": 412.5, "durationMs": 3120.2,
    },
    "budget.warning": {
        "codonId": "draft", "scope": "run", "currency": "cost", "limit": 10, "used": 8.02,
        "source": "run ceiling", "fraction": 0.8,
        "message": "80% of the run's $10.00 ceiling used ($8.02; run ceiling)",
    },
    "interruption.created": {
        "interruptionId": "int-1796150000000-ab12c", "runId": "r1", "codonId": "deploy",
        "kind": "approval", "question": "Deploy to production?",
        "options": ["approve", "reject"], "deadline": "2026-12-02T09:00:00.000Z",
    },
    "interruption.answered": {
        "interruptionId": "int-1796150000000-ab12c", "codonId": "deploy",
        "answer": "approve", "answeredBy": "cli:alice",
    },
    "run.crashed": {
        "runId": "r1", "detectedAt": "2026-12-02T09:00:00.000Z", "codonId": "review",
        "codonStatus": "running", "endedAgentPids": [4242], "next": "rollback",
        "afterCodonId": "plan",
        "message": "Run r1 crashed while codon review was running; rolling back to the last"
                   " successful codon, plan, and retrying codon review",
    },
}


def test_every_event_type_has_a_sample_payload() -> None:
    assert set(SAMPLES) == ALL_EVENT_TYPES == set(EVENT_DATA_MODELS)


@pytest.mark.parametrize("event_type", sorted(SAMPLES))
def test_sample_payload_validates_and_round_trips_through_json(event_type: str) -> None:
    payload = SAMPLES[event_type]
    # Every sample key is a declared field: a wrong alias would land in the extras instead.
    assert not validate_event_data(event_type, payload).model_extra
    event = make_event(event_type, payload, seq=7)

    # Written exactly as given: camelCase, nothing added, nothing dropped.
    assert event.data == payload
    line = encode_event(event)
    back = ServerEvent.model_validate_json(line)
    assert back == event
    assert back.data == payload
    assert back.typed_data() == validate_event_data(event_type, payload)
    assert json.loads(line)["data"] == payload


def test_category_sets_hold_the_36_original_types_plus_seven_of_ours() -> None:
    ours = {"sink.failed", "budget.limits", "budget.warning", "proxy.request",
            "interruption.created", "interruption.answered", "run.crashed"}
    assert len(SERVER_STATE_EVENTS) == 27
    assert len(AGENTIC_BACKBONE_EVENTS) == 7
    assert len(SENTINEL_EVENTS) == 5
    assert len(CONNECTION_EVENTS) == 4
    assert len(ALL_EVENT_TYPES) == 43
    assert len(ALL_EVENT_TYPES - ours) == 36
    assert ours <= SERVER_STATE_EVENTS


@pytest.mark.parametrize(
    ("event_type", "category", "journaled", "to_sentinels"),
    [
        ("codon.completed", "server-state", True, True),
        ("state.transition", "server-state", True, True),
        ("sink.failed", "server-state", True, True),
        ("assistant.action", "agentic-backbone", True, True),
        ("rig.output", "agentic-backbone", True, True),
        ("sentinel.output", "sentinel", True, False),
        ("sentinel.triggered", "sentinel", True, False),
        ("server.ready", "connection", False, False),
        ("history.batch", "connection", False, False),
    ],
)
def test_category_decides_journaling_and_sentinel_routing(
    event_type: str, category: str, journaled: bool, to_sentinels: bool
) -> None:
    assert category_of(event_type) == category
    assert is_journaled(event_type) is journaled
    assert routes_to_sentinels(event_type) is to_sentinels


def test_unknown_type_is_refused_everywhere() -> None:
    with pytest.raises(UnknownEventTypeError, match=r"'codon\.exploded'"):
        validate_event_data("codon.exploded", {})
    with pytest.raises(UnknownEventTypeError):
        make_event("codon.exploded", {})
    with pytest.raises(UnknownEventTypeError):
        category_of("codon.exploded")
    assert not is_journaled("codon.exploded")
    assert not routes_to_sentinels("codon.exploded")


def test_invalid_payload_error_names_the_type_and_each_bad_field() -> None:
    with pytest.raises(EventDataError) as caught:
        validate_event_data("codon.started", {"codonId": 12, "codonName": "R", "startTime": TS})
    message = str(caught.value)
    assert "'codon.started'" in message
    assert "codonId" in message
    assert "sessionId" in message
    assert caught.value.event_type == "codon.started"


def test_nan_is_refused_where_json_cannot_carry_it() -> None:
    payload = dict(SAMPLES["token.usage"], totalCost=math.nan)
    with pytest.raises(EventDataError, match="totalCost"):
        validate_event_data("token.usage", payload)


def test_unknown_fields_survive_for_forward_compatibility() -> None:
    payload = dict(SAMPLES["info"], addedByANewerRuntime={"x": 1})
    event = make_event("info", payload)
    assert event.data["addedByANewerRuntime"] == {"x": 1}


def test_snake_case_keys_are_accepted_and_written_camel_case() -> None:
    event = make_event(
        "rig.output", {"codon_id": "b", "stream": "stdout", "line": "ok", "command_index": 0}
    )
    assert event.data == {"codonId": "b", "stream": "stdout", "line": "ok", "commandIndex": 0}


def test_absent_optional_fields_are_omitted_not_null() -> None:
    event = make_event("server.idle", {"reason": "startup", "message": "ready"})
    assert event.data == {"reason": "startup", "message": "ready"}
    error = make_event("error", {"message": "x", "fatal": True})
    assert "codon" not in error.data
    assert "severity" not in error.data


def test_integers_stay_integers_and_floats_stay_floats() -> None:
    event = make_event("codon.completed", dict(SAMPLES["codon.completed"], cost=0, duration=1.5))
    assert encode_event(event).count(b'"cost":0,') == 1
    assert event.data["duration"] == 1.5


def test_file_updated_accepts_the_content_shape_and_the_fingerprint_shape() -> None:
    with_content = {"path": "/x/a.md", "filename": "a.md", "action": "modified", "content": "hi"}
    fingerprint = SAMPLES["file.updated"]
    codon_start = dict(fingerprint, source={"kind": "codon-start"})
    body = validate_event_data("file.updated", with_content)
    sha = validate_event_data("file.updated", fingerprint)
    at_start = validate_event_data("file.updated", codon_start)
    assert isinstance(body, FileUpdatedData) and body.content == "hi"
    assert isinstance(sha, FileUpdatedData) and sha.byte_count == 11
    assert sha.source is not None and sha.source.kind == "tool_use"
    assert isinstance(at_start, FileUpdatedData) and at_start.source is not None
    assert at_start.source.kind == "codon-start"


def test_file_updated_without_body_or_fingerprint_is_refused() -> None:
    with pytest.raises(EventDataError, match="content or sha256"):
        validate_event_data("file.updated", {"path": "a", "filename": "a", "action": "created"})


def test_recent_file_access_accepts_both_shapes() -> None:
    base = SAMPLES["state.snapshot"]
    with_body = dict(base, recentFileAccess={"path": "a.md", "content": "x", "timestamp": TS})
    full = validate_event_data("state.snapshot", with_body)
    light = validate_event_data("state.snapshot", base)
    assert isinstance(full, StateSnapshotData) and full.recent_file_access is not None
    assert full.recent_file_access.content == "x"
    assert isinstance(light, StateSnapshotData) and light.recent_file_access is not None
    assert light.recent_file_access.content is None


def test_tool_use_action_needs_its_tool_use_id() -> None:
    payload = {k: v for k, v in SAMPLES["assistant.action"].items() if k != "toolUseId"}
    with pytest.raises(EventDataError, match="toolUseId"):
        validate_event_data("assistant.action", payload)


def test_state_transition_types_are_those_of_the_state_machine() -> None:
    union = get_args(get_args(StateTransition)[0])
    assert set(TRANSITION_TYPES) == {t.model_fields["type"].default for t in union}
    assert "ExecutionPlanUpdated" in TRANSITION_TYPES


def test_state_transition_accepts_the_transition_object_itself() -> None:
    transition = run_started("run-9")
    model = validate_event_data(
        "state.transition",
        {
            "transitionType": "RunStarted",
            "runId": "run-9",
            "transition": transition,
            "resultingState": dict(RESULTING, currentRunId="run-9"),
        },
    )
    data = dump_event_data(model)
    assert data["transition"]["type"] == "RunStarted"
    assert data["transition"]["data"]["runId"] == "run-9"
    assert data["transition"]["data"]["startingConditions"] == {"type": "fresh"}


def test_state_transition_allows_a_null_current_run() -> None:
    payload = dict(SAMPLES["state.transition"], resultingState=dict(RESULTING, currentRunId=None))
    assert make_event("state.transition", payload).data["resultingState"]["currentRunId"] is None


def test_state_transition_type_must_match_the_transition() -> None:
    payload = dict(SAMPLES["state.transition"], transitionType="RunFailed")
    with pytest.raises(EventDataError, match="differs"):
        validate_event_data("state.transition", payload)


def test_snapshot_accepts_state_codon_records_with_all_their_fields() -> None:
    record = completed("review#0", cost=0.4, sha="d" * 40)
    payload = dict(SAMPLES["state.snapshot"], completedCodons=[record])
    data = make_event("state.snapshot", payload).data
    codon = data["completedCodons"][0]
    assert codon["codonId"] == "review#0"
    assert codon["status"] == "completed"
    assert codon["completionCheckpoint"] == "d" * 40
    assert codon["finalCost"] == 0.4


def test_sink_failed_always_says_disabled() -> None:
    assert make_event("sink.failed", {"sink": "s", "error": "E"}).data["disabled"] is True
    with pytest.raises(EventDataError):
        validate_event_data("sink.failed", {"sink": "s", "error": "E", "disabled": False})


def test_model_instance_is_accepted_and_a_foreign_model_refused() -> None:
    assert make_event("info", InfoData(message="typed")).data == {"message": "typed"}
    with pytest.raises(EventError, match="must be a mapping or a InfoData"):
        make_event("info", PongData(message="pong", timestamp=TS))


def test_envelope_has_id_timestamp_and_schema_version() -> None:
    event = make_event("info", {"message": "x"})
    assert re.fullmatch(r"\d{13}-[0-9a-z]{9}", event.id)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", event.timestamp)
    assert event.schema_version == EVENT_SCHEMA_VERSION == 1
    assert event.seq is None
    assert "seq" not in event.to_wire()
    assert list(make_event("info", {"message": "x"}, seq=3).to_wire())[:2] == [
        "seq",
        "schemaVersion",
    ]


def test_envelope_written_by_the_original_reads_without_seq() -> None:
    line = '{"id":"1738760000123-ab12cd34e","timestamp":"2026-02-05T10:00:00.123Z","type":"server.idle","data":{"reason":"startup","message":"Ready."}}'
    event = ServerEvent.model_validate_json(line)
    assert event.seq is None and event.schema_version is None
    assert event.category == "server-state"
    typed = event.typed_data()
    assert isinstance(typed, ServerIdleData) and typed.reason == "startup"
