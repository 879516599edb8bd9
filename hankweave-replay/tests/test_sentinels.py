"""A replay never runs sentinels: the recording has no provider to ask, and what the recorded
run's sentinels found is already in it."""

from __future__ import annotations

from replay_helpers import PLUGINS, codon

NOTE = {"id": "note", "name": "Note", "kind": "note",
        "trigger": {"type": "event", "on": ["codon.started"]},
        "execution": {"strategy": "immediate"}}


def test_a_replay_runs_no_sentinels(project):
    project.env["HANKWEAVE_PLUGIN_MODULES"] = f"{PLUGINS},sentinel_plugin"
    project.write_hank([codon("a", sentinels=[{"sentinelConfig": NOTE}]), codon("b")])
    recorded = project.record({"a": {"messages": 1}, "b": {"messages": 1}})
    assert recorded.code == 0
    assert [e["data"]["content"] for e in recorded.events if e["type"] == "sentinel.output"] \
        == ["trigger 1: codon.started"]

    replayed = project.replay()

    assert replayed.code == 0, replayed.notices
    assert not [e for e in replayed.events if e["type"].startswith("sentinel.")]
    infos = [e["data"]["message"] for e in replayed.events if e["type"] == "info"]
    assert "Sentinels of codon a are not run (1 configured): this run plays a recording" in infos
    assert replayed.state.runs[0].codons[0].sentinels is None
