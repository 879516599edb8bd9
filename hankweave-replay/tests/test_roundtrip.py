"""Record with the fake agent, export, replay: the replay's state and work tree are the recording's."""

from __future__ import annotations

import json

from replay_helpers import checkpoint_files, codon, facts, loop

from hankweave.api import Registry, TokenUsage, catalogue_price, make_plugin_manager

WRITE_ALL = ["**"]


def assert_same_as_recording(recorded, replayed, tmp_path):
    assert facts(replayed.state) == facts(recorded.state)
    assert replayed.work_tree == recorded.work_tree
    # The new checkpoints hold what the recorded ones held.
    old = {c.codon_id: c for c in recorded.state.runs[0].codons}
    for record in replayed.state.runs[0].codons:
        mine = getattr(record, "completion_checkpoint", None)
        theirs = getattr(old[record.codon_id], "completion_checkpoint", None)
        if mine and theirs:
            assert checkpoint_files(replayed.exec_dir, mine, tmp_path / f"new-{mine}") == \
                checkpoint_files(recorded.exec_dir, theirs, tmp_path / f"old-{theirs}")


def test_happy_path_replays_state_files_and_checkpoints(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=WRITE_ALL), codon("b"), codon("c")])
    recorded = project.record({
        "a": {"messages": 2, "writeFiles": {"a.md": "alpha", "src/keep.txt": "k"},
              "cost": 0.02},
        "b": {"writeFiles": {"b.md": "beta"}, "deleteFiles": ["a.md"]},
        "c": {"messages": 3, "usage": {"inputTokens": 500, "outputTokens": 70,
                                       "cacheReadInputTokens": 300}}})
    assert recorded.code == 0

    replayed = project.replay()

    assert replayed.code == 0, replayed.notices
    assert [(c.codon_id, c.status) for c in replayed.state.runs[0].codons] == [
        ("a", "completed"), ("b", "completed"), ("c", "completed")]
    assert_same_as_recording(recorded, replayed, tmp_path)
    assert "a.md" not in replayed.work_tree  # b's deletion was replayed
    assert replayed.state.runs[0].codons[0].final_cost == 0.02


def test_replayed_logs_hold_the_recorded_records(project):
    project.write_hank([codon("a", checkpointedFiles=WRITE_ALL)])
    recorded = project.record({"a": {"messages": 2, "writeFiles": {"x.txt": "x"}}})
    replayed = project.replay()

    def lines(outcome):
        record = outcome.state.runs[0].codons[0]
        return [json.loads(line) for line in
                (outcome.exec_dir / record.claude_log_path).read_text().splitlines()]

    assert lines(replayed) == lines(recorded)


def test_a_loop_replays_every_iteration(project, tmp_path):
    project.write_hank([codon("setup", checkpointedFiles=WRITE_ALL),
                        loop("L", [codon("work")], limit=2)])
    recorded = project.record({
        "setup": {"writeFiles": {"plan.md": "plan"}},
        "work#0": {"writeFiles": {"log.md": "first"}, "messages": 2},
        "work#1": {"writeFiles": {"log.md": "first\nsecond"}, "cost": 0.5}})
    assert recorded.code == 0

    replayed = project.replay()

    assert replayed.code == 0, replayed.notices
    assert [c.codon_id for c in replayed.state.runs[0].codons] == ["setup", "work#0", "work#1"]
    assert_same_as_recording(recorded, replayed, tmp_path)
    assert replayed.work_tree["log.md"] == b"first\nsecond"


def test_a_failing_codon_replays_as_the_same_failure(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=WRITE_ALL), codon("b"), codon("c")])
    recorded = project.record({
        "a": {"writeFiles": {"a.md": "alpha"}},
        "b": {"result": "error", "errorText": "API Error: 401 invalid x-api-key",
              "writeFiles": {"half.md": "half done"}}})
    assert recorded.code != 0
    assert facts(recorded.state)["b"]["status"] == "failed"

    replayed = project.replay()

    assert replayed.code == recorded.code
    assert_same_as_recording(recorded, replayed, tmp_path)
    assert "c" not in facts(replayed.state)  # stopped where the recording stopped
    assert replayed.work_tree["half.md"] == b"half done"  # the error checkpoint's files


def test_a_continue_previous_chain_keeps_the_recorded_session(project, tmp_path):
    project.write_hank([
        codon("a", checkpointedFiles=WRITE_ALL),
        codon("b", continuationMode="continue-previous"),
        codon("c", continuationMode="continue-previous")])
    recorded = project.record({
        "a": {"sessionId": "sess-recorded-1", "writeFiles": {"a.md": "1"}},
        "b": {"writeFiles": {"a.md": "2"}},
        "c": {"writeFiles": {"c.md": "3"}}})
    assert recorded.code == 0

    replayed = project.replay()

    assert replayed.code == 0, replayed.notices
    assert_same_as_recording(recorded, replayed, tmp_path)
    # Each continuing codon forked the one before (a session of its own, as recorded).
    sessions = [c.claude_session_id for c in replayed.state.runs[0].codons]
    assert sessions[0] == "sess-recorded-1" and len(set(sessions)) == 3, sessions
    assert sessions == [c.claude_session_id for c in recorded.state.runs[0].codons]
    previous = [getattr(c, "previous_session_id", None) for c in replayed.state.runs[0].codons]
    assert previous == [None, *sessions[:2]]


def test_a_retried_codon_replays_its_newest_attempt(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=WRITE_ALL, onFailure="retry",
                              retryConfig={"maxAttempts": 2, "delayMs": 0})])
    recorded = project.record({"a": [
        {"result": "error", "errorText": "API Error: 529 overloaded"},
        {"writeFiles": {"ok.md": "second try"}, "cost": 0.3}]})
    assert recorded.code == 0
    assert [c.status for c in recorded.state.runs[0].codons] == ["failed", "completed"]

    replayed = project.replay()

    # Every attempt of a codon in one run writes the same log file, so only the newest
    # attempt is on record; its outcome and files are what replay reproduces.
    assert [c.status for c in replayed.state.runs[0].codons] == ["completed"]
    assert facts(replayed.state) == facts(recorded.state)
    assert replayed.work_tree == recorded.work_tree


def test_extensions_replay_pass_by_pass(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=WRITE_ALL, exhaustWithPrompt="Keep going.",
                              maxExtensions=5)])
    recorded = project.record({"a": [
        {"writeFiles": {"one.md": "1"}},
        {"writeFiles": {"two.md": "2"}},
        {"writeFiles": {"three.md": "3"}, "contextExceeded": True}]})
    assert recorded.code == 0
    assert recorded.state.runs[0].codons[0].extension_count == 2

    replayed = project.replay()

    assert replayed.code == 0, replayed.notices
    assert_same_as_recording(recorded, replayed, tmp_path)
    extended = [e for e in replayed.events if e["type"] == "codon.extended"]
    assert len(extended) == 2


def test_a_skipped_and_an_ignored_failure_replay(project, tmp_path):
    project.write_hank([codon("a", checkpointedFiles=WRITE_ALL, onFailure="ignore"),
                        codon("b")])
    recorded = project.record({
        "a": {"result": "error", "errorText": "API Error: 500 internal server error",
              "writeFiles": {"partial.md": "p"}},
        "b": {"writeFiles": {"b.md": "b"}}})
    assert recorded.code == 0

    replayed = project.replay()

    assert replayed.code == 0, replayed.notices
    assert_same_as_recording(recorded, replayed, tmp_path)


def test_recorded_speed_waits_the_recorded_gaps(project):
    project.write_hank([codon("a")])
    project.record({"a": {"messages": 3, "delayMs": 60}})
    source = project.export().path

    fast = project.replay(source)
    paced = project.replay(source, replay_speed="recorded")

    def duration(outcome):
        return next(e["data"]["duration"] for e in outcome.events
                if e["type"] == "codon.completed")

    assert duration(paced) >= 150  # three recorded gaps of about 60 ms
    assert duration(fast) < duration(paced)
    assert facts(paced.state) == facts(fast.state)


def test_recorded_gaps_are_capped(project, monkeypatch):
    project.write_hank([codon("a")])
    project.record({"a": {"messages": 2, "delayMs": 1000}})
    source = project.export().path
    project.env["HANKWEAVE_REPLAY_MAX_DELAY_MS"] = "10"

    paced = project.replay(source, replay_speed="recorded")

    duration = next(e["data"]["duration"] for e in paced.events if e["type"] == "codon.completed")
    # Not the recorded 2 s of gaps (the bound has room for a loaded machine: CI runs two tox
    # envs at once).
    assert duration < 1000


def test_a_hank_for_a_real_model_records_with_fake_agents_at_its_prices(project, monkeypatch,
                                                                        tmp_path):
    project.write_hank([codon("a", model="haiku", checkpointedFiles=WRITE_ALL)])
    monkeypatch.setenv("HANKWEAVE_FAKE_ALL", "1")  # the fake harness claims haiku
    recorded = project.record({"a": {"messages": 2, "writeFiles": {"a.md": "alpha"},
                                     "usage": {"inputTokens": 1000, "outputTokens": 100}}})
    monkeypatch.delenv("HANKWEAVE_FAKE_ALL")
    assert recorded.code == 0, recorded.notices

    replayed = project.replay()  # no live harness for haiku is installed: replay needs none

    assert replayed.code == 0, replayed.notices
    assert_same_as_recording(recorded, replayed, tmp_path)
    haiku = Registry(make_plugin_manager(env=project.env)).resolve_model("haiku")
    price = catalogue_price(haiku)(TokenUsage(input_tokens=3000, output_tokens=300))
    assert replayed.state.runs[0].codons[0].final_cost == price
