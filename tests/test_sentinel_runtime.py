"""Sentinels in real runs: the http agent and the sentinels' litellm calls both talk to the
scripted mock provider, and the tests read the run's events, its state, its journal, the
sentinels' files and the mock's request log.

Four runs serve every test (each module fixture runs one hank once):

* ``watched``: codon ``plan`` with a sentinel per trigger kind, condition operator, strategy and
  template dialect, then codon ``build`` with none;
* ``reviewed``: codon ``review`` with structured-output sentinels (OpenAI and Anthropic
  protocols), conversational ones, and ones the mock refuses;
* ``tooled``: a fake-agent codon whose tool calls give ``tool.result`` events;
* ``unloadable``: codons whose sentinel cannot load (no key for its provider, no mock).

Every sentinel prompt starts with ``[<id>]``; the mock's rules answer by that tag
(tests/sentinel_support.py).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

import pytest

from hankweave.app.preflight import PreflightError
from hankweave.events.catalogue import routes_to_sentinels
from hankweave.sentinels import llm
from tests.runtime_harness import Project, codon
from tests.sentinel_support import (
    SentinelRun,
    answer,
    entry,
    mock_project,
    price,
    run_with_mock,
    sentinel,
    sequence,
    text,
    user_text,
)

SENTINEL_MODEL = "openai/gpt-5-mini"
HAIKU = "anthropic/claude-haiku-4-5"
BATCHED = ["codon.started", "assistant.action", "token.usage"]
"""What the batching sentinels watch: in ``plan``, codon.started, its one assistant message and
two token.usage events (the message's and the final one), in that order."""
TYPES = "{{ events | length }} {{ events | map(attribute='type') | join(',') }}"


def codon_rule(prompt: str, reply: str, tokens_in: int, tokens_out: int,
               delay_ms: int = 0) -> dict:
    """The mock's answer to a codon's prompt (after ``delay_ms``)."""
    return {"name": prompt, "when": {"lastUserMessage": prompt},
            "reply": {**text(reply, tokens_in, tokens_out), "delayMs": delay_ms}}


# ----- the watched run: triggers, conditions, strategies, templates, outputs -----


WINDOW_MS = 3000
"""``window-live``'s time window (see PLAN_DELAY_MS)."""
WATCHED = [
    entry(sentinel("star", "{{ codon.id }} {{ codon.name }}: {{ events | length }} "
                           "{{ events[0].type }}", on=["*"])),
    # A config file; its prompt file resolves against the config's directory.
    entry("sentinels/listed.json",
          outputPaths={"logFile": "notes/listed.md", "lastValueFile": "listed-last.txt"}),
    entry(sentinel("succeeded", "success={{ events[0].data.success }}", on=["codon.completed"],
                   conditions=[{"path": "success", "operator": "equals", "value": True}])),
    entry(sentinel("failed-only", "x", on=["codon.completed"],
                   conditions=[{"path": "success", "operator": "equals", "value": False}])),
    entry(sentinel("costs", "{{ events[0].data.transitionType }}", on=["state.transition"],
                   conditions=[{"path": "transitionType", "operator": "in",
                                "value": ["CostsIncremented", "CodonFinalCostSet"]}])),
    entry(sentinel("moves", "{{ events[0].data.transitionType }} "
                            "{{ events[0].data.transition.data.to | default('-') }}",
                   on=["state.transition"],
                   conditions=[{"path": "transitionType", "operator": "matches",
                                "value": "^Codon(Transitioned|FinalCostSet)$"}])),
    entry(sentinel("says-planned", "{{ events[0].data.content }}", on=["assistant.action"],
                   conditions=[{"path": "content", "operator": "contains", "value": "Planned"}])),
    entry(sentinel("says-nothing", "x", on=["assistant.action"],
                   conditions=[{"path": "content", "operator": "contains", "value": "nothing"}])),
    entry(sentinel("big-usage", "{{ events[0].data.inputTokens }}", on=["token.usage"],
                   conditions=[{"path": "inputTokens", "operator": "greaterThan", "value": 500},
                               {"path": "outputTokens", "operator": "lessThan", "value": 100}])),
    entry(sentinel("huge-usage", "x", on=["token.usage"],
                   conditions=[{"path": "inputTokens", "operator": "greaterThan",
                                "value": 1000}])),
    entry(sequence("seq-tail", "{{ events | map(attribute='type') | join(',') }}",
                   interest=BATCHED,
                   pattern=[{"type": "assistant.action", "conditions": [
                       {"path": "content", "operator": "contains", "value": "Plan"}]},
                       {"type": "token.usage"}])),
    entry(sequence("seq-gap", "{{ events | map(attribute='type') | join(',') }}",
                   interest=BATCHED, pattern=[{"type": "codon.started"}, {"type": "token.usage"}],
                   consecutive=False)),
    entry(sequence("seq-strict", "x", interest=BATCHED,
                   pattern=[{"type": "codon.started"}, {"type": "token.usage"}])),
    entry(sentinel("debounce", "<%= it.codon.id %> <%= it.events.length %>:"
                               "<% for (const e of it.events) { %> <%= e.type %><% } %>",
                   on=BATCHED, execution={"strategy": "debounce", "milliseconds": 300000})),
    entry(sentinel("count3", TYPES, on=BATCHED, execution={"strategy": "count", "threshold": 3})),
    entry(sentinel("window", TYPES, on=BATCHED,
                   execution={"strategy": "timeWindow", "milliseconds": 600000})),
    entry(sentinel("window-live", TYPES, on=["codon.started", "token.usage"],
                   execution={"strategy": "timeWindow", "milliseconds": WINDOW_MS}),
          reportToWebsocket={"triggers": True}),
    entry(sentinel("render-error", "{{ no_such_name }}")),
    entry(sentinel("quiet", "psst", reportToWebsocket={"outputs": True, "triggers": False}),
          reportToWebsocket={"outputs": False, "triggers": True}),
]
LISTED = {"id": "listed", "name": "Sentinel listed",
          "trigger": {"type": "event", "on": ["codon.started", "codon.completed"]},
          "execution": {"strategy": "immediate"}, "model": SENTINEL_MODEL,
          "userPromptFile": "prompts/listed.md", "joinString": "\\n##\\n"}
WATCHED_IDS = [item["sentinelConfig"]["id"] if isinstance(item["sentinelConfig"], dict)
               else "listed" for item in WATCHED]
PLAN_TOKENS = (1000, 50)
PLAN_DELAY_MS = 4500
"""The plan codon's reply comes this late: ``window-live`` ticks once before it (and the codon
ends before its second tick: margins of 1.5 s either way, for a loaded machine; CI runs another
tox env beside this one)."""
SLOW_IMPORT_S = 3.0


def _slow(import_litellm):
    """litellm's first import, as slow as when nothing has imported it yet (seconds)."""
    done = threading.Event()
    lock = threading.Lock()

    def slow_import():
        with lock:
            if not done.is_set():
                time.sleep(SLOW_IMPORT_S)
                done.set()
        return import_litellm()
    return slow_import


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> SentinelRun:
    return run_watched(tmp_path_factory.mktemp("watched"))


def run_watched(root) -> SentinelRun:
    project = mock_project(root)
    project.write_file("sentinels/listed.json", json.dumps(LISTED))
    project.write_file("sentinels/prompts/listed.md", "[listed] {{ events[0].type }}")
    project.write_hank([
        codon("plan", model="sonnet", promptText="Write the plan.", sentinels=WATCHED),
        codon("build", model="sonnet", promptText="Build it.")])
    rules = [answer("listed", text("Started."), contains="codon.started"),
             answer("listed", text("Completed."), contains="codon.completed"),
             answer("succeeded", text("Looks done.", 300, 30))]
    rules += [answer(tag, text(f"{tag} ok")) for tag in WATCHED_IDS
              if tag not in ("listed", "succeeded")]
    rules += [codon_rule("Write the plan.", "Planned.", *PLAN_TOKENS, delay_ms=PLAN_DELAY_MS),
              codon_rule("Build it.", "Built.", 1000, 50)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(llm, "_import_litellm", _slow(llm._import_litellm))
        run = run_with_mock(project, rules)
    assert run.outcome.code == 0, run.outcome.notices
    assert run.outcome.statuses() == [("plan", "completed"), ("build", "completed")]
    return run


def test_every_watched_sentinel_loads_and_unloads_with_its_codon(watched):
    loaded = watched.events("sentinel.loaded")
    assert [d["sentinelId"] for d in loaded] == WATCHED_IDS
    assert {(d["codonId"], d["model"]) for d in loaded} == {("plan", SENTINEL_MODEL)}
    sources = {d["sentinelId"]: (d["source"], d.get("sourcePath")) for d in loaded}
    assert sources.pop("listed") == (
        "file", str(watched.project.hank_dir / "sentinels" / "listed.json"))
    assert set(sources.values()) == {("inline", None)}
    assert {d["sentinelId"]: d["executionStrategy"] for d in loaded}["count3"] == "count"
    assert {d["sentinelId"]: d["triggerType"] for d in loaded}["seq-gap"] == "sequence"
    unloaded = watched.events("sentinel.unloaded")
    assert [(d["sentinelId"], d["reason"]) for d in unloaded] == [
        (tag, "codon-complete") for tag in WATCHED_IDS]


def test_the_first_llm_call_does_not_hold_up_the_codon(watched):
    # The first trigger imports litellm (slowly, here): the codon's own events go on meanwhile.
    def at(predicate) -> datetime:
        event = watched.outcome.events[watched.index(predicate)]
        return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))

    loaded = at(lambda e: e["type"] == "sentinel.loaded")
    started = at(lambda e: e["type"] == "codon.started" and e["data"]["codonId"] == "plan")
    first_answer = at(lambda e: e["type"] == "sentinel.output")
    assert (started - loaded).total_seconds() < SLOW_IMPORT_S
    assert (first_answer - loaded).total_seconds() >= SLOW_IMPORT_S


def test_a_star_trigger_fires_once_for_every_event_routed_to_sentinels(watched):
    seen = watched.observed("star")
    types = [event["type"] for event in seen]
    # Not its own events, nor the transitions recording its costs (that would never end).
    assert not any(t.startswith("sentinel.") for t in types)
    assert {"codon.started", "assistant.action", "token.usage", "state.transition",
            "codon.completed"} <= set(types)
    assert watched.prompts("star") == [f"plan Sentinel star: 1 {t}" for t in types]
    (state,) = [s for s in watched.outcome.record("plan").sentinels.executed if s.id == "star"]
    assert (state.total_triggers, state.llm_call_count) == (len(types), len(types))


def test_a_listed_trigger_fires_for_the_listed_types_only(watched):
    assert watched.prompts("listed") == ["codon.started", "codon.completed"]


def test_conditions_select_events_by_their_payload(watched):
    prompts = {tag: watched.prompts(tag) for tag in WATCHED_IDS}
    assert prompts["succeeded"] == ["success=True"]  # equals true
    assert prompts["failed-only"] == []  # equals false
    assert prompts["costs"] == ["CostsIncremented", "CodonFinalCostSet"]  # in
    assert prompts["moves"] == [  # matches: the transitions after the load, at `starting`
        "CodonTransitioned initializing", "CodonTransitioned running", "CodonFinalCostSet -",
        "CodonTransitioned completing-sentinels", "CodonTransitioned completed"]
    assert prompts["says-planned"] == ["Planned."]  # contains
    assert prompts["says-nothing"] == []
    assert prompts["big-usage"] == ["1000", "1000"]  # greaterThan and lessThan, both usages
    assert prompts["huge-usage"] == []  # 1000 is not greater than 1000


def test_sequence_triggers_consecutive_and_with_gaps(watched):
    # The pattern is checked at each token.usage; the second finds no new match.
    assert watched.prompts("seq-tail") == ["assistant.action,token.usage"]
    assert watched.prompts("seq-gap") == ["codon.started,token.usage"]
    assert watched.prompts("seq-strict") == []  # assistant.action lies in between
    assert [d["eventCount"] for d in watched.events("sentinel.output", "seq-gap")] == [2]


def test_a_count_strategy_fires_at_its_threshold_and_flushes_the_rest_at_completion(watched):
    assert watched.prompts("count3") == ["3 codon.started,assistant.action,token.usage",
                                         "1 token.usage"]
    first, rest = watched.events("sentinel.output", "count3")
    assert (first["eventCount"], rest["eventCount"]) == (3, 1)


def test_a_long_debounce_and_a_long_time_window_fire_once_in_the_first_drain(watched):
    # An Eta template: it.codon, it.events.length and a for...of loop.
    assert watched.prompts("debounce") == [
        "plan 4: codon.started assistant.action token.usage token.usage"]
    assert watched.prompts("window") == [
        "4 codon.started,assistant.action,token.usage,token.usage"]
    completing = watched.transition_index("plan", "completing-sentinels")
    completed = watched.transition_index("plan", "completed")
    for tag in ("debounce", "window"):
        (output,) = watched.events("sentinel.output", tag)
        assert output["eventCount"] == 4
        position = watched.index(lambda e, tag=tag: e["type"] == "sentinel.output"
                                 and e["data"]["sentinelId"] == tag)
        assert completing < position < completed


def test_a_time_window_ticks_during_the_codon_and_flushes_the_rest_at_completion(watched):
    # Ticks every WINDOW_MS (3 s) from the load: the first holds codon.started; the reply
    # (after PLAN_DELAY_MS, 4.5 s) brings both token.usage events, and the codon ends before
    # the next tick.
    assert watched.prompts("window-live") == ["1 codon.started", "2 token.usage,token.usage"]
    ticked, flushed = [watched.index(lambda e, n=n: e["type"] == "sentinel.triggered"
                                     and e["data"]["sentinelId"] == "window-live"
                                     and e["data"]["triggerNumber"] == n) for n in (1, 2)]
    reply = watched.index(lambda e: e["type"] == "assistant.action"
                          and e["data"]["codonId"] == "plan")
    assert ticked < reply < watched.transition_index("plan", "completing-sentinels") < flushed
    assert [d["eventCount"] for d in watched.events("sentinel.triggered", "window-live")] == [
        1, 2]
    assert [d["strategy"] for d in watched.events("sentinel.triggered", "window-live")] == [
        "timeWindow", "timeWindow"]


def test_a_codon_completed_trigger_runs_in_the_second_drain_and_is_recorded(watched):
    completed_event = watched.index(lambda e: e["type"] == "codon.completed"
                                    and e["data"]["codonId"] == "plan")
    output = watched.index(lambda e: e["type"] == "sentinel.output"
                           and e["data"]["sentinelId"] == "succeeded")
    unloaded = watched.index(lambda e: e["type"] == "sentinel.unloaded"
                             and e["data"]["sentinelId"] == "succeeded")
    assert completed_event < output < unloaded
    record = watched.outcome.record("plan")
    assert record.status == "completed"
    (state,) = [s for s in record.sentinels.executed if s.id == "succeeded"]
    assert state.llm_call_count == 1
    assert state.total_cost == pytest.approx(price(SENTINEL_MODEL, 300, 30))
    assert state.status == "unloaded" and state.unload_reason == "codon-complete"


def test_a_template_render_error_skips_the_trigger_and_the_codon_completes(watched):
    (error,) = watched.events("sentinel.error", "render-error")
    assert error["errorType"] == "template-render-failed"
    assert "no_such_name" in error["message"]
    assert error["retriable"] is False
    assert watched.requests("render-error") == []
    (state,) = [s for s in watched.outcome.record("plan").sentinels.executed
                if s.id == "render-error"]
    assert (state.total_triggers, state.llm_call_count, state.status) == (1, 0, "unloaded")
    # No other sentinel failed.
    assert [d["sentinelId"] for d in watched.events("sentinel.error")] == ["render-error"]


def test_report_to_websocket_settings_gate_outputs_and_triggers(watched):
    # The codon's settings ({outputs: false, triggers: true}) win over the config's.
    assert watched.events("sentinel.output", "quiet") == []
    # Nobody else asked for them (window-live's own settings do).
    assert {d["sentinelId"] for d in watched.events("sentinel.triggered")} == {
        "quiet", "window-live"}
    (triggered,) = watched.events("sentinel.triggered", "quiet")
    assert (triggered["triggerNumber"], triggered["eventCount"], triggered["strategy"]) == (
        1, 1, "immediate")
    assert watched.prompts("quiet") == ["psst"]  # it ran all the same...
    log = next((watched.project.hankweave_dir / "sentinels" / "outputs" / "quiet").glob("*.md"))
    assert log.read_text() == "\n---\nquiet ok\n"  # ...and wrote its output, default join


def test_text_outputs_go_to_the_configured_log_and_last_value_files(watched):
    log = watched.project.agent_root / "notes" / "listed.md"  # a path with "/": agent root
    assert log.read_text() == "\n##\nStarted.\n\n##\nCompleted.\n"
    last = watched.project.hankweave_dir / "sentinels" / "outputs" / "listed" / "listed-last.txt"
    assert last.read_text() == "Completed."
    # Without settings: <id>-<codon>-<epoch ms>.md in the sentinel's own directory.
    (default,) = (watched.project.hankweave_dir / "sentinels" / "outputs" / "count3").iterdir()
    assert default.name.startswith("count3-plan-") and default.suffix == ".md"
    assert default.read_text() == "\n---\ncount3 ok\n\n---\ncount3 ok\n"


def test_the_previous_codons_sentinels_are_gone_when_the_next_codon_has_none(watched):
    build_started = watched.index(lambda e: e["type"] == "codon.started"
                                  and e["data"]["codonId"] == "build")
    last_unload = max(watched.index(lambda e, tag=tag: e["type"] == "sentinel.unloaded"
                                    and e["data"]["sentinelId"] == tag) for tag in WATCHED_IDS)
    assert last_unload < build_started
    requests = watched.log.requests()
    (build,) = [r for r in requests if user_text(r) == "Build it."]
    sentinel_requests = [r for r in requests if (user_text(r) or "").startswith("[")]
    assert sentinel_requests and all(r.entry["seq"] < build.entry["seq"]
                                     for r in sentinel_requests)
    # build's events reached no sentinel, and its record never waited for one.
    after = watched.outcome.events[build_started:]
    assert not any(e["type"].startswith("sentinel.") for e in after)
    with pytest.raises(AssertionError):
        watched.transition_index("build", "completing-sentinels")
    assert watched.outcome.record("build").sentinels is None


def test_the_sentinels_costs_are_recorded_apart_from_the_codons(watched):
    record = watched.outcome.record("plan")
    states = {s.id: s for s in record.sentinels.executed}
    assert list(states) == WATCHED_IDS
    calls = {tag: len(watched.requests(tag)) for tag in WATCHED_IDS}
    assert {tag: s.llm_call_count for tag, s in states.items()} == calls
    one_call = price(SENTINEL_MODEL, 100, 10)
    for tag, state in states.items():
        expected = price(SENTINEL_MODEL, 300, 30) if tag == "succeeded" else calls[tag] * one_call
        assert state.total_cost == pytest.approx(expected), tag
    assert record.sentinels.total_cost == pytest.approx(sum(s.total_cost for s in states.values()))
    assert record.final_cost == pytest.approx(price("sonnet", *PLAN_TOKENS))
    (plan_done,) = [d for d in watched.outcome.of_type("codon.completed")
                    if d["codonId"] == "plan"]
    assert plan_done["cost"] == pytest.approx(record.final_cost)


# ----- the reviewed run: structured output, conversations, failures -----


VERDICT = "z.object({ verdict: z.enum(['ok', 'bad']), score: z.number().int() })"
TURNS = ["codon.started", "assistant.action", "codon.completed"]
REVIEWED = [
    entry(sentinel("obj-ok", "judge", structuredOutput={"output": "object",
                                                        "schemaStr": VERDICT})),
    entry(sentinel("obj-bad", "judge", structuredOutput={"output": "object",
                                                         "schemaStr": VERDICT})),
    entry(sentinel("hushed", "judge", structuredOutput={"output": "object", "schemaStr": VERDICT},
                   reportToWebsocket={"errors": False})),
    entry(sentinel("arr", "files", structuredOutput={
        "output": "array", "schemaStr": "z.object({ file: z.string() })"}),
        outputPaths={"logFile": "arr.jsonl", "lastValueFile": "arr.json"}),
    entry(sentinel("colour", "colour", structuredOutput={"output": "enum",
                                                         "enumValues": ["green", "red"]})),
    entry(sentinel("anth-native", "judge", model=HAIKU,
                   structuredOutput={"output": "object", "schemaStr": VERDICT})),
    entry(sentinel("anth-tool", "tags", model=HAIKU, structuredOutput={
        "output": "object", "schemaStr": "z.object({ tags: z.record(z.string()) })"})),
    entry(sentinel("chat", "turn about {{ events[0].type }}", on=TURNS,
                   systemPromptText="You watch a codon.",
                   conversational={"trimmingStrategy": {"type": "maxTurns", "maxTurns": 1}})),
    entry(sentinel("chat-long", "turn about {{ events[0].type }}", on=TURNS,
                   systemPromptText="You watch a codon too.",
                   conversational={"trimmingStrategy": {"type": "maxTurns", "maxTurns": 5}})),
    entry(sentinel("chat-json", "turn about {{ events[0].type }}", on=TURNS[:2],
                   systemPromptText="Answer in JSON.",
                   conversational={"trimmingStrategy": {"type": "maxTokens", "maxTokens": 1000}},
                   structuredOutput={"output": "object", "schemaStr": "z.object({ n: z.number() })"})),
    entry(sentinel("failing", "{{ events[0].type }}", on=["*"], llmParams={"maxRetries": 0},
                   errorHandling={"maxConsecutiveFailures": 2})),
    entry(sentinel("retried", "x", llmParams={"maxRetries": 1})),
]
REVIEWED_IDS = [item["sentinelConfig"]["id"] for item in REVIEWED]
CHAT_REPLIES = {"codon.started": "Seen the start.", "assistant.action": "Seen the message.",
                "codon.completed": "Seen the end."}
REVIEW_TOKENS = (2000, 100)


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory) -> SentinelRun:
    project = mock_project(tmp_path_factory.mktemp("reviewed"))
    project.write_hank([codon("review", model="sonnet", promptText="Review the code.",
                              sentinels=REVIEWED)])
    rules = [
        answer("obj-ok", text('{"verdict": "ok", "score": 7}')),
        answer("obj-bad", text('{"verdict": "maybe", "score": 7}')),
        answer("hushed", text("I think it is fine.")),
        answer("arr", text('{"elements": [{"file": "a.py"}, {"file": "b.py"}]}')),
        answer("colour", text('{"result": "green"}')),
        answer("anth-native", text('{"verdict": "bad", "score": 2}', 200, 20)),
        answer("anth-tool", {"toolCalls": [{"name": "json_tool_call",
                                            "input": {"tags": {"area": "tests"}}}],
                             "usage": {"inputTokens": 200, "outputTokens": 20}}),
        answer("failing", {"error": {"kind": "invalid_request",
                                     "message": "no sentinels here"}}),
        answer("retried", {"error": {"kind": "rate_limit", "retryAfter": 0}}),
        answer("chat-json", text('{"n": 1}'), contains="turn about codon.started"),
        answer("chat-json", text('{"n": 2}'), contains="turn about assistant.action"),
        codon_rule("Review the code.", "Reviewed.", *REVIEW_TOKENS),
    ]
    for tag in ("chat", "chat-long"):
        rules += [answer(tag, text(reply, 100 + i, 10 + i), contains=f"turn about {event}")
                  for i, (event, reply) in enumerate(CHAT_REPLIES.items())]
    run = run_with_mock(project, rules)
    assert run.outcome.code == 0, run.outcome.notices
    assert run.outcome.statuses() == [("review", "completed")]
    return run


def _outputs_dir(run: SentinelRun, tag: str):
    return run.project.hankweave_dir / "sentinels" / "outputs" / tag


def test_an_object_answer_is_checked_against_its_zod_schema(reviewed):
    (request,) = reviewed.requests("obj-ok")
    assert request.protocol == "openai"
    assert request.body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "obj-ok", "schema": {
            "type": "object", "required": ["verdict", "score"], "additionalProperties": False,
            "properties": {"verdict": {"type": "string", "enum": ["ok", "bad"]},
                           "score": {"type": "integer"}}}}}
    (output,) = reviewed.events("sentinel.output", "obj-ok")
    assert output["outputType"] == "structured"
    assert output["content"] == {"verdict": "ok", "score": 7}
    (log,) = _outputs_dir(reviewed, "obj-ok").glob("obj-ok-review-*.ndjson")
    assert log.read_text() == '{"verdict":"ok","score":7}\n'


def test_an_answer_outside_the_schema_or_not_json_is_a_sentinel_error(reviewed):
    (error,) = reviewed.events("sentinel.error", "obj-bad")
    assert error["errorType"] == "llm-call-failed"
    assert "does not match the schema" in error["message"] and "'maybe'" in error["message"]
    assert reviewed.events("sentinel.output", "obj-bad") == []
    (log,) = _outputs_dir(reviewed, "obj-bad").iterdir()
    assert log.read_text() == ""  # created at load, nothing written
    # errors: false hides the event; the state still counts the failed call.
    assert reviewed.events("sentinel.error", "hushed") == []
    states = {s.id: s for s in reviewed.outcome.record("review").sentinels.executed}
    for tag in ("obj-bad", "hushed"):
        assert (states[tag].llm_call_count, states[tag].failed_llm_calls) == (1, 1)
        assert states[tag].total_cost > 0  # a rejected answer was paid for all the same
        assert states[tag].status == "unloaded" and states[tag].unload_reason == "codon-complete"


def test_array_and_enum_answers_travel_wrapped_and_are_unwrapped(reviewed):
    (arr,) = reviewed.requests("arr")
    schema = arr.body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["elements"]
    assert schema["properties"]["elements"]["type"] == "array"
    assert schema["properties"]["elements"]["items"]["properties"] == {"file": {"type": "string"}}
    (output,) = reviewed.events("sentinel.output", "arr")
    assert output["content"] == [{"file": "a.py"}, {"file": "b.py"}]
    # outputPaths without "/": in the sentinel's own directory; a .jsonl log and .json value.
    assert (_outputs_dir(reviewed, "arr") / "arr.jsonl").read_text() == (
        '[{"file":"a.py"},{"file":"b.py"}]\n')
    assert json.loads((_outputs_dir(reviewed, "arr") / "arr.json").read_text()) == [
        {"file": "a.py"}, {"file": "b.py"}]
    (colour,) = reviewed.requests("colour")
    assert colour.body["response_format"]["json_schema"]["schema"]["properties"] == {
        "result": {"type": "string", "enum": ["green", "red"]}}
    (output,) = reviewed.events("sentinel.output", "colour")
    assert (output["outputType"], output["content"]) == ("structured", "green")


def test_structured_output_over_the_anthropic_protocol(reviewed):
    # A closed schema: litellm asks for Anthropic's native output_format; the answer is text.
    (native,) = reviewed.requests("anth-native")
    assert native.protocol == "anthropic" and native.body["model"] == "claude-haiku-4-5"
    assert native.body["output_format"]["type"] == "json_schema"
    assert native.body["output_format"]["schema"]["required"] == ["verdict", "score"]
    assert "tools" not in native.body
    (output,) = reviewed.events("sentinel.output", "anth-native")
    assert output["content"] == {"verdict": "bad", "score": 2}
    assert output["cost"] == pytest.approx(price(HAIKU, 200, 20))
    # An open object (z.record) cannot be native: litellm forces its json_tool_call tool, and
    # the mock's tool call comes back as the answer.
    (tool,) = reviewed.requests("anth-tool")
    assert [t["name"] for t in tool.body["tools"]] == ["json_tool_call"]
    assert tool.body["tool_choice"] == {"type": "tool", "name": "json_tool_call"}
    assert "output_format" not in tool.body
    (output,) = reviewed.events("sentinel.output", "anth-tool")
    assert output["content"] == {"tags": {"area": "tests"}}


def test_a_conversational_sentinel_carries_its_history_and_trims_it(reviewed):
    first, second, third = reviewed.requests("chat")
    system = {"role": "system", "content": "You watch a codon."}
    user = {event: {"role": "user", "content": f"[chat] turn about {event}"}
            for event in CHAT_REPLIES}
    reply = {event: {"role": "assistant", "content": said}
             for event, said in CHAT_REPLIES.items()}
    assert first.messages == [system, user["codon.started"]]
    assert second.messages == [system, user["codon.started"], reply["codon.started"],
                               user["assistant.action"]]
    # maxTurns 1: the first exchange is gone from the third request.
    assert third.messages == [system, user["assistant.action"], reply["assistant.action"],
                              user["codon.completed"]]
    history = reviewed.project.hankweave_dir / "sentinels" / "history"
    assert json.loads((history / "chat-codon-review.json").read_text()) == [
        {"message": user["codon.completed"], "tokens": 102},
        {"message": reply["codon.completed"], "tokens": 12}]
    # maxTurns 5 keeps every turn, in the requests and in the file.
    *_, last = reviewed.requests("chat-long")
    assert [m["content"] for m in last.messages] == [
        "You watch a codon too.",
        "[chat-long] turn about codon.started", "Seen the start.",
        "[chat-long] turn about assistant.action", "Seen the message.",
        "[chat-long] turn about codon.completed"]
    turns = json.loads((history / "chat-long-codon-review.json").read_text())
    assert [(t["message"]["role"], t.get("tokens")) for t in turns] == [
        ("user", 100), ("assistant", 10), ("user", 101), ("assistant", 11),
        ("user", 102), ("assistant", 12)]


def test_a_structured_answer_is_kept_in_the_history_as_json_text(reviewed):
    first, second = reviewed.requests("chat-json")
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "user"]
    assert json.loads(second.messages[2]["content"]) == {"n": 1}
    assert second.body["response_format"] == first.body["response_format"]
    outputs = reviewed.events("sentinel.output", "chat-json")
    assert [o["content"] for o in outputs] == [{"n": 1}, {"n": 2}]
    history = reviewed.project.hankweave_dir / "sentinels" / "history"
    turns = json.loads((history / "chat-json-codon-review.json").read_text())
    assert [json.loads(t["message"]["content"]) for t in turns[1::2]] == [{"n": 1}, {"n": 2}]


def test_llm_params_max_retries_reaches_the_call(reviewed):
    # maxRetries 1: the rate-limited call is made twice, then fails once, retriable.
    assert [r.status for r in reviewed.requests("retried")] == [429, 429]
    (error,) = reviewed.events("sentinel.error", "retried")
    assert (error["errorType"], error["retriable"]) == ("llm-call-failed", True)
    # maxRetries 0 and a refused request: one call per trigger.
    assert len(reviewed.requests("failing")) == 2


def test_consecutive_failures_unload_the_sentinel_and_the_codon_completes(reviewed):
    requests = reviewed.requests("failing")
    assert [r.status for r in requests] == [400, 400]
    errors = reviewed.events("sentinel.error", "failing")
    assert [(e["errorType"], e["consecutiveFailureCount"], e["retriable"]) for e in errors] == [
        ("llm-call-failed", 1, False), ("llm-call-failed", 2, False)]
    assert "no sentinels here" in errors[0]["message"]
    (unloaded,) = reviewed.events("sentinel.unloaded", "failing")
    assert unloaded["reason"] == "consecutive-failures"
    assert (unloaded["finalCost"], unloaded["llmCallCount"]) == (0, 2)
    # Events went on after the unload, and none reached it.
    position = reviewed.index(lambda e: e["type"] == "sentinel.unloaded"
                              and e["data"]["sentinelId"] == "failing")
    later = [e for e in reviewed.outcome.events[position:] if routes_to_sentinels(e["type"])
             and e["data"].get("transitionType") != "SentinelStatesUpdated"]
    assert any(e["type"] == "codon.completed" for e in later)
    record = reviewed.outcome.record("review")
    assert record.status == "completed"
    (state,) = [s for s in record.sentinels.executed if s.id == "failing"]
    assert (state.llm_call_count, state.failed_llm_calls, state.total_triggers) == (2, 2, 2)
    assert (state.status, state.unload_reason) == ("unloaded", "consecutive-failures")


def test_sentinel_states_are_journaled_after_the_load_each_trigger_and_each_drain(reviewed):
    journal = reviewed.project.journal()
    updates = [e["data"]["transition"]["data"] for e in journal
               if e["type"] == "state.transition"
               and e["data"]["transitionType"] == "SentinelStatesUpdated"]
    assert {u["codonId"] for u in updates} == {"review"}
    first, last = updates[0], updates[-1]
    assert [s["id"] for s in first["sentinelStates"]] == REVIEWED_IDS
    assert all(s["status"] == "active" and s["llmCallCount"] == 0
               for s in first["sentinelStates"])
    assert first["totalCost"] == 0
    record = reviewed.outcome.record("review")
    assert [s["status"] for s in last["sentinelStates"]] == ["unloaded"] * len(REVIEWED_IDS)
    assert last["totalCost"] == pytest.approx(record.sentinels.total_cost)
    # One at the load, one per trigger, one after each drain.
    triggers = sum(s.total_triggers for s in record.sentinels.executed)
    assert len(updates) == 1 + triggers + 2
    for index, tag in enumerate(REVIEWED_IDS):  # the counts only grow
        counts = [u["sentinelStates"][index]["llmCallCount"] for u in updates]
        assert counts == sorted(counts), tag


def test_the_reviewed_costs_are_catalogue_prices_kept_apart_from_the_codon(reviewed):
    record = reviewed.outcome.record("review")
    states = {s.id: s for s in record.sentinels.executed}
    expected = {
        # A rejected answer (obj-bad, hushed) was paid for; a refused call (failing,
        # retried) was not.
        "obj-ok": price(SENTINEL_MODEL, 100, 10), "obj-bad": price(SENTINEL_MODEL, 100, 10),
        "hushed": price(SENTINEL_MODEL, 100, 10),
        "arr": price(SENTINEL_MODEL, 100, 10), "colour": price(SENTINEL_MODEL, 100, 10),
        "anth-native": price(HAIKU, 200, 20), "anth-tool": price(HAIKU, 200, 20),
        "chat": sum(price(SENTINEL_MODEL, 100 + i, 10 + i) for i in range(3)),
        "chat-long": sum(price(SENTINEL_MODEL, 100 + i, 10 + i) for i in range(3)),
        "chat-json": 2 * price(SENTINEL_MODEL, 100, 10), "failing": 0.0, "retried": 0.0}
    assert {tag: states[tag].total_cost for tag in expected} == pytest.approx(expected)
    assert record.sentinels.total_cost == pytest.approx(sum(expected.values()))
    assert record.final_cost == pytest.approx(price("sonnet", *REVIEW_TOKENS))
    outputs = reviewed.events("sentinel.output")
    rejected = expected["obj-bad"] + expected["hushed"]
    assert sum(o["cost"] for o in outputs) == pytest.approx(sum(expected.values()) - rejected)


# ----- the tooled run: tool.result payloads (the fake agent makes tool calls) -----


@pytest.fixture(scope="module")
def tooled(tmp_path_factory) -> SentinelRun:
    """The fake harness plays the codon (its scripted tool calls become tool.result events);
    the sentinels still ask the mock."""
    project = Project(tmp_path_factory.mktemp("tooled"))
    project.write_hank([codon("work", sentinels=[
        entry(sentinel("bash-listing", "{{ events[0].data.toolName }}: "
                                       "{{ events[0].data.result | replace('\\n', ' ') }}",
                       on=["tool.result"],
                       conditions=[{"path": "toolName", "operator": "in", "value": ["Bash"]},
                                   {"path": "result", "operator": "matches",
                                    "value": "\\.txt$"},
                                   {"path": "originalLength", "operator": "greaterThan",
                                    "value": 5},
                                   {"path": "isError", "operator": "equals", "value": False}])),
        entry(sentinel("tool-errors", "x", on=["tool.result"],
                       conditions=[{"path": "isError", "operator": "equals", "value": True}])),
    ])])
    script = project.root / "script.json"
    script.write_text(json.dumps({"rules": [answer("bash-listing", text("Listed."))]}))
    outcome = project.run({"work": {"tools": [
        {"name": "Bash", "input": {"command": "ls"}, "result": "a.txt\nb.txt"},
        {"name": "Bash", "input": {"command": "pwd"}, "result": "/work"},
        {"name": "Read", "input": {"file_path": "a.txt"}, "result": "some.txt"}]}},
        mock_provider=str(script))
    assert outcome.code == 0, outcome.notices
    return SentinelRun(project, outcome)


def test_conditions_on_tool_result_payloads(tooled):
    results = tooled.outcome.of_type("tool.result")
    assert [(r["toolName"], r["isError"]) for r in results] == [
        ("Bash", False), ("Bash", False), ("Read", False)]
    # Only the first: the second Bash result does not match, the Read is not Bash.
    assert tooled.prompts("bash-listing") == ["Bash: a.txt b.txt"]
    assert tooled.prompts("tool-errors") == []
    (state,) = tooled.outcome.record("work").sentinels.executed[:1]
    assert (state.id, state.llm_call_count) == ("bash-listing", 1)


# ----- the unloadable run: failCodonIfNotLoaded -----


@pytest.fixture(scope="module")
def unloadable(tmp_path_factory):
    """No mock provider: a google sentinel needs its key, and the environment has none (the
    preflight's warning; the codon runs without it).  The required sentinel's prompt file is
    there at the preflight, and the codon's own rig setup removes it: the hank changed under
    the run, which only the sentinel's load at the codon's start can find."""
    project = Project(tmp_path_factory.mktemp("unloadable"))
    for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "HANKWEAVE_SENTINEL_GOOGLE_API_KEY"):
        project.env.pop(variable, None)
    gemini = sentinel("gem", "x", model="google/gemini-2.5-flash")
    prompt = project.hank_dir / "gem-prompt.md"
    prompt.parent.mkdir(parents=True, exist_ok=True)
    prompt.write_text("[gem] x")
    vanishing = sentinel("gem", "x", userPromptFile="gem-prompt.md",
                         userPromptText=None, model=SENTINEL_MODEL)
    vanishing = {k: v for k, v in vanishing.items() if v is not None}
    remove = {"type": "command", "command": {"run": f"rm {prompt}"}}
    project.env["OPENAI_API_KEY"] = "sk-never-used"
    project.write_hank([codon("lenient", sentinels=[entry(gemini)]),
                        codon("strict", rigSetup=[remove],
                              sentinels=[entry(vanishing, failCodonIfNotLoaded=True)]),
                        codon("never")])
    return project.run()


def test_a_required_sentinel_without_its_key_stops_the_run_before_it_starts(tmp_path):
    project = Project(tmp_path)
    for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "HANKWEAVE_SENTINEL_GOOGLE_API_KEY"):
        project.env.pop(variable, None)
    gemini = sentinel("gem", "x", model="google/gemini-2.5-flash")
    project.write_hank([codon("first"), codon("strict", sentinels=[
        entry(gemini, failCodonIfNotLoaded=True)])])

    with pytest.raises(PreflightError, match=r"sentinel gem: .*HANKWEAVE_SENTINEL_GOOGLE_API_KEY"):
        project.run()
    assert not project.exec_dir.exists() or not any(project.exec_dir.iterdir())


def test_a_sentinel_that_cannot_load_is_a_warning_without_fail_codon_if_not_loaded(unloadable):
    assert any("sentinel gem:" in notice and "would run without it" in notice
               for notice in unloadable.notices)
    (warning,) = [d for d in unloadable.of_type("error") if d.get("codon") == "lenient"]
    assert warning["code"] == "SENTINEL_LOAD_FAILURE"
    assert (warning["fatal"], warning["severity"]) == (False, "warning")
    assert "HANKWEAVE_SENTINEL_GOOGLE_API_KEY or GEMINI_API_KEY" in warning["message"]
    record = unloadable.record("lenient")
    assert record.status == "completed" and record.sentinels is None
    assert unloadable.of_type("sentinel.loaded") == []


def test_fail_codon_if_not_loaded_fails_the_codon_at_its_start(unloadable):
    assert unloadable.code == 1
    assert unloadable.statuses() == [("lenient", "completed"), ("strict", "failed")]
    record = unloadable.record("strict")
    assert record.failed_during == "starting"
    assert record.failure_reason.type == "sentinel-load-failure"
    assert record.failure_reason.retriable is False
    assert record.failure_reason.sentinel_refs == ["inline:gem"]
    (error,) = [d for d in unloadable.of_type("error") if d.get("codon") == "strict"]
    assert error["code"] == "SENTINEL_LOAD_FAILURE"
    assert (error["fatal"], error["severity"]) == (True, "codon")
    (completed,) = [d for d in unloadable.of_type("codon.completed") if d["codonId"] == "strict"]
    assert completed["success"] is False
    assert completed["failureReason"]["sentinelRefs"] == ["inline:gem"]
    assert not any(d["codonId"] == "strict" for d in unloadable.of_type("codon.started"))


def test_a_sentinel_on_a_reasoning_variant_asks_its_model_at_that_effort(tmp_path):
    """``openai/gpt-5-high`` is gpt-5 asked for high reasoning effort, as for a codon."""
    project = mock_project(tmp_path)
    project.write_hank([codon("plan", model="sonnet", promptText="Plan.", sentinels=[
        entry(sentinel("deep", "think", model="openai/gpt-5-high"))])])
    run = run_with_mock(project, [answer("deep", text("Thought.")),
                                  codon_rule("Plan.", "Planned.", 10, 5)])

    (request,) = run.requests("deep")
    assert request.body["model"] == "gpt-5"
    assert request.body["reasoning_effort"] == "high"
