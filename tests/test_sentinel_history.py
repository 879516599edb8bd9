"""A conversational sentinel's history file: loading, corruption, trimming, durable rewrites."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hankweave.sentinels.config import MaxTokensTrimming, MaxTurnsTrimming
from hankweave.sentinels.history import (
    ConversationHistory,
    HistoryEntry,
    estimate_tokens,
    history_path,
)


def turns(max_turns: int) -> MaxTurnsTrimming:
    return MaxTurnsTrimming.model_validate({"type": "maxTurns", "maxTurns": max_turns},
                                           by_alias=True, by_name=False)


def tokens(max_tokens: int) -> MaxTokensTrimming:
    return MaxTokensTrimming.model_validate({"type": "maxTokens", "maxTokens": max_tokens},
                                            by_alias=True, by_name=False)


def entry(role: str, content: str, tokens: int | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"message": {"role": role, "content": content}}
    if tokens is not None:
        raw["tokens"] = tokens
    return raw


def pairs(count: int) -> list[dict[str, Any]]:
    return [e for n in range(1, count + 1) for e in (entry("user", f"u{n}"),
                                                     entry("assistant", f"a{n}"))]


def write(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def contents(history: ConversationHistory) -> list[str]:
    return [message["content"] for message in history.messages_for_call()]


# --------------------------------------------------------------------------------------------
# The file's place
# --------------------------------------------------------------------------------------------


def test_history_path_keeps_loop_codon_ids(tmp_path: Path) -> None:
    assert history_path(tmp_path, "watcher", "review#2") == tmp_path / "watcher-codon-review#2.json"


@pytest.mark.parametrize("codon_id", ["../../etc/passwd", "..", "a/../../b", "..\\x"])
def test_history_path_never_leaves_its_directory(tmp_path: Path, codon_id: str) -> None:
    path = history_path(tmp_path, "watcher", codon_id)
    assert path.parent == tmp_path
    assert "/" not in path.name and "\\" not in path.name


def test_history_path_replaces_separators(tmp_path: Path) -> None:
    assert history_path(tmp_path, "w", "../x").name == "w-codon-.._x.json"


def test_history_path_rejects_empty_ids(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        history_path(tmp_path, "watcher", "")


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def test_missing_file_is_an_empty_history(tmp_path: Path) -> None:
    history = ConversationHistory(tmp_path / "h.json", turns(5))
    assert history.load() is None
    assert history.messages_for_call() == []


def test_file_is_read_on_first_use_not_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    history = ConversationHistory(path, turns(5))
    write(path, pairs(1))
    assert not history.loaded
    assert history.messages_for_call() == [
        {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}]
    assert history.loaded


def test_file_is_read_once(tmp_path: Path) -> None:
    path = write(tmp_path / "h.json", pairs(1))
    history = ConversationHistory(path, turns(5))
    history.load()
    write(path, pairs(3))
    assert contents(history) == ["u1", "a1"]


def test_tokens_are_read_back(tmp_path: Path) -> None:
    path = write(tmp_path / "h.json", [entry("user", "u", 7), entry("assistant", "a")])
    history = ConversationHistory(path, turns(5))
    assert [e.tokens for e in history.entries] == [7, None]


@pytest.mark.parametrize("text", ["{not json", "", "\xff\xfe"])
def test_invalid_json_is_cleared_and_reported(tmp_path: Path, text: str) -> None:
    path = tmp_path / "h.json"
    path.write_bytes(text.encode("latin-1"))
    history = ConversationHistory(path, turns(5))
    problem = history.load()
    assert problem is not None and "not valid JSON" in problem and str(path) in problem
    assert history.corruption == problem
    assert history.messages_for_call() == []


def test_json_that_is_not_an_array_is_cleared_and_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "h.json", {"messages": pairs(1)})
    history = ConversationHistory(path, turns(5))
    problem = history.load()
    assert problem is not None and "not a JSON array" in problem and "dict" in problem
    assert history.messages_for_call() == []


def test_corruption_is_found_by_an_implicit_load_too(tmp_path: Path) -> None:
    path = write(tmp_path / "h.json", "a string")
    history = ConversationHistory(path, turns(5))
    assert history.messages_for_call() == []
    assert history.corruption is not None


def test_up_to_a_fifth_invalid_entries_are_dropped(tmp_path: Path) -> None:
    document: list[object] = [*pairs(2), {"message": {"role": "system", "content": "x"}}]
    document += [entry("user", "u3"), entry("assistant", "a3")]  # 1 invalid of 5: 20%
    history = ConversationHistory(write(tmp_path / "h.json", document), turns(10))
    assert history.load() is None
    assert contents(history) == ["u1", "a1", "u2", "a2", "u3", "a3"]


def test_more_than_a_fifth_invalid_entries_clear_the_history(tmp_path: Path) -> None:
    document = [*pairs(2), {"message": {"role": "user", "content": 5}}, {"tokens": 3}]
    history = ConversationHistory(write(tmp_path / "h.json", document), turns(10))
    problem = history.load()
    assert problem is not None and "2 of 6 entries are invalid" in problem
    assert history.messages_for_call() == []


@pytest.mark.parametrize("bad", [
    {"message": {"role": "user"}},
    {"message": {"role": "tool", "content": "x"}},
    {"message": {"role": "user", "content": "x"}, "tokens": "12"},
    {"message": {"role": "user", "content": "x"}, "tokens": -1},
    {"message": {"role": "user", "content": "x"}, "tokens": True},
    ["user", "x"],
    None,
])
def test_what_counts_as_an_invalid_entry(tmp_path: Path, bad: object) -> None:
    document = [*pairs(2), bad]  # 1 of 5: dropped, not cleared
    history = ConversationHistory(write(tmp_path / "h.json", document), turns(10))
    assert history.load() is None
    assert len(history.entries) == 4


def test_a_corrupt_file_is_replaced_at_the_next_turn(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text("[{", encoding="utf-8")
    history = ConversationHistory(path, turns(5))
    history.record_turn("q", "a", None, None)
    assert json.loads(path.read_text(encoding="utf-8")) == [entry("user", "q"),
                                                            entry("assistant", "a")]


# --------------------------------------------------------------------------------------------
# maxTurns
# --------------------------------------------------------------------------------------------


def test_max_turns_keeps_a_history_at_the_limit(tmp_path: Path) -> None:
    history = ConversationHistory(write(tmp_path / "h.json", pairs(3)), turns(3))
    assert contents(history) == ["u1", "a1", "u2", "a2", "u3", "a3"]


def test_max_turns_drops_the_oldest_pairs_past_the_limit(tmp_path: Path) -> None:
    history = ConversationHistory(write(tmp_path / "h.json", pairs(5)), turns(3))
    assert contents(history) == ["u3", "a3", "u4", "a4", "u5", "a5"]


def test_max_turns_drops_an_unpaired_leading_message_first(tmp_path: Path) -> None:
    document = [entry("assistant", "orphan"), *pairs(2)]
    history = ConversationHistory(write(tmp_path / "h.json", document), turns(2))
    assert contents(history) == ["u1", "a1", "u2", "a2"]


def test_max_turns_drops_an_orphan_left_at_the_front_by_trimming(tmp_path: Path) -> None:
    document = [entry("user", "u1"), entry("assistant", "a1"), entry("user", "lone"),
                entry("user", "u2"), entry("assistant", "a2")]
    history = ConversationHistory(write(tmp_path / "h.json", document), turns(1))
    assert contents(history) == ["u2", "a2"]


def test_max_turns_counts_only_complete_pairs(tmp_path: Path) -> None:
    document = [*pairs(2)[:2], entry("user", "lone"), *pairs(2)[2:]]
    history = ConversationHistory(write(tmp_path / "h.json", document), turns(2))
    assert contents(history) == ["u1", "a1", "lone", "u2", "a2"]


def test_max_turns_of_recorded_turns_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    history = ConversationHistory(path, turns(2))
    for n in range(1, 5):
        history.record_turn(f"u{n}", f"a{n}", None, None)
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert [e["message"]["content"] for e in on_disk] == ["u3", "a3", "u4", "a4"]
    assert contents(history) == ["u3", "a3", "u4", "a4"]


# --------------------------------------------------------------------------------------------
# maxTokens
# --------------------------------------------------------------------------------------------


def test_estimate_is_a_token_per_four_characters_rounded_up() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_max_tokens_keeps_a_history_exactly_at_the_limit(tmp_path: Path) -> None:
    document = [entry("user", "u1", 4), entry("assistant", "a1", 6)]
    history = ConversationHistory(write(tmp_path / "h.json", document), tokens(10))
    assert contents(history) == ["u1", "a1"]


def test_max_tokens_drops_oldest_messages_one_by_one(tmp_path: Path) -> None:
    document = [entry("user", "u1", 4), entry("assistant", "a1", 6), entry("user", "u2", 3),
                entry("assistant", "a2", 5)]  # 18 in all
    history = ConversationHistory(write(tmp_path / "h.json", document), tokens(14))
    assert contents(history) == ["a1", "u2", "a2"]
    history = ConversationHistory(write(tmp_path / "h.json", document), tokens(13))
    assert contents(history) == ["u2", "a2"]


def test_max_tokens_estimates_messages_without_a_count(tmp_path: Path) -> None:
    document = [entry("user", "x" * 9), entry("assistant", "y" * 8), entry("user", "z" * 4, 1)]
    # Estimated 3 + 2, counted 1: 6 in all.
    history = ConversationHistory(write(tmp_path / "h.json", document), tokens(6))
    assert len(contents(history)) == 3
    history = ConversationHistory(write(tmp_path / "h.json", document), tokens(5))
    assert contents(history) == ["y" * 8, "z" * 4]


def test_max_tokens_uses_the_counts_given_with_a_turn(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    history = ConversationHistory(path, tokens(100))
    history.record_turn("short", "short", 60, 30)
    history.record_turn("q", "a", 5, 5)
    # 60 + 30 + 5 + 5 = 100: at the limit, nothing dropped.
    assert contents(history) == ["short", "short", "q", "a"]
    history.record_turn("q2", "a2", 1, None)  # 102 with the estimate of "a2": the first goes
    assert contents(history) == ["short", "q", "a", "q2", "a2"]
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert on_disk[0] == entry("assistant", "short", 30)
    assert on_disk[-1] == entry("assistant", "a2")


def test_max_tokens_drops_everything_when_one_message_exceeds_the_limit(tmp_path: Path) -> None:
    history = ConversationHistory(tmp_path / "h.json", tokens(10))
    history.record_turn("q", "x" * 100, 1, None)
    assert history.messages_for_call() == []


# --------------------------------------------------------------------------------------------
# Recording turns
# --------------------------------------------------------------------------------------------


def test_recorded_turns_survive_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "history" / "w-codon-c.json"
    history = ConversationHistory(path, turns(5))
    history.record_turn("first question", "first answer", 12, 4)
    history.record_turn("second", "ünïcode ✓", None, 3)
    again = ConversationHistory(path, turns(5))
    assert again.load() is None
    assert again.messages_for_call() == history.messages_for_call() == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "ünïcode ✓"},
    ]
    assert [e.tokens for e in again.entries] == [12, 4, None, 3]


def test_the_file_holds_the_original_format(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    ConversationHistory(path, turns(5)).record_turn("q", "a", 3, None)
    assert json.loads(path.read_text(encoding="utf-8")) == [
        {"message": {"role": "user", "content": "q"}, "tokens": 3},
        {"message": {"role": "assistant", "content": "a"}},
    ]


def test_recording_keeps_what_the_file_held(tmp_path: Path) -> None:
    path = write(tmp_path / "h.json", pairs(1))
    ConversationHistory(path, turns(5)).record_turn("u2", "a2", None, None)
    contents_on_disk = [e["message"]["content"]
                        for e in json.loads(path.read_text(encoding="utf-8"))]
    assert contents_on_disk == ["u1", "a1", "u2", "a2"]


def test_the_rewrite_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    history = ConversationHistory(path, turns(5))
    history.record_turn("q", "a", None, None)
    history.record_turn("q", "a", None, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.json"]


def test_the_rewrite_replaces_the_file_rather_than_writing_into_it(tmp_path: Path) -> None:
    path = write(tmp_path / "h.json", pairs(1))
    before = path.stat().st_ino
    ConversationHistory(path, turns(5)).record_turn("q", "a", None, None)
    assert path.stat().st_ino != before


@pytest.mark.parametrize("answer", [{"verdict": "ok", "note": "é"}, [1, "two"]])
def test_structured_answers_are_stored_as_json_text(tmp_path: Path, answer: Any) -> None:
    path = tmp_path / "h.json"
    history = ConversationHistory(path, turns(5))
    history.record_turn("q", answer, None, None)
    stored = json.loads(path.read_text(encoding="utf-8"))[1]["message"]["content"]
    assert isinstance(stored, str)
    assert json.loads(stored) == answer
    assert stored == json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
    assert history.messages_for_call()[1] == {"role": "assistant", "content": stored}


def test_a_failed_write_raises_os_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("", encoding="utf-8")
    history = ConversationHistory(blocker / "h.json", turns(5))
    with pytest.raises(OSError):
        history.record_turn("q", "a", None, None)


def test_entries_validate_as_the_file_format() -> None:
    parsed = HistoryEntry.model_validate(entry("user", "x", 2))
    assert parsed.model_dump(exclude_none=True) == entry("user", "x", 2)
