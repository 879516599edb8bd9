"""Sentinels as the CLI shows them: journal summaries and the state table's Sentinels column."""

from __future__ import annotations

from functools import reduce

from rich.console import Console

from hankweave.cli.inspect import _render_state
from hankweave.cli.journal_cmd import summarize_event
from hankweave.state.reducer import apply_transition
from hankweave.state.types import HankweaveState
from tests.transition_builders import lifecycle_to, moved, run_started, sentinels


def test_the_journal_summarizes_each_sentinel_event() -> None:
    assert summarize_event("sentinel.loaded", {
        "sentinelId": "lint", "codonId": "build", "model": "command", "triggerType": "event",
        "executionStrategy": "debounce"}) == "lint on build  command  event/debounce"
    assert summarize_event("sentinel.output", {
        "sentinelId": "lint", "triggerNumber": 2, "cost": 0.00125,
        "content": "2 problems\nfound"}) == "lint #2  $0.0013  2 problems found"
    assert summarize_event("sentinel.error", {
        "sentinelId": "lint", "errorType": "llm-call-failed", "message": "rate limited"}
    ) == "lint llm-call-failed: rate limited"
    assert summarize_event("sentinel.unloaded", {
        "sentinelId": "lint", "reason": "consecutive-failures", "llmCallCount": 3,
        "finalCost": 0}) == "lint consecutive-failures  3 calls  $0.0000"
    assert summarize_event("sentinel.triggered", {
        "sentinelId": "lint", "triggerNumber": 4, "eventCount": 7}) == "lint #4  7 events"


def test_inspect_state_shows_each_codons_sentinels_apart_from_its_cost() -> None:
    transitions = [run_started(), *lifecycle_to("a", "running"), sentinels("a", cost=0.25),
                   moved("a", "running", "completed")]
    state = reduce(apply_transition, transitions, HankweaveState())
    console = Console(width=200, record=True)
    _render_state(state, console)
    text = console.export_text()
    assert "Sentinels" in text
    assert "1: 1 call, $0.2500" in text
    assert "sentinels $0.2500 (not in the total)" in text


def test_inspect_state_has_no_sentinels_column_without_sentinels() -> None:
    transitions = [run_started(), *lifecycle_to("a", "running"),
                   moved("a", "running", "completed")]
    state = reduce(apply_transition, transitions, HankweaveState())
    console = Console(width=200, record=True)
    _render_state(state, console)
    assert "Sentinels" not in console.export_text()
