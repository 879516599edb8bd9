"""Interruptions: their records in the state, the answer rules, ``hankweave answer`` and
``hankweave inspect interruptions`` (issue 16's foundation: nothing creates them in a run yet)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import reduce
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hankweave.cli import cli
from hankweave.events.journal import read_journal
from hankweave.state.interruptions import (
    APPROVAL_OPTIONS,
    AnswerError,
    GivenAnswer,
    checked_answer,
    due_defaults,
    new_interruption_id,
    pending,
)
from hankweave.state.reducer import apply_transition
from hankweave.state.store import StateStore, load_state
from hankweave.state.transitions import (
    InterruptionAnswered,
    InterruptionAnsweredData,
    InterruptionCreated,
    InterruptionCreatedData,
    InvalidTransitionError,
)
from hankweave.state.types import HankweaveState, Interruption, dump_state
from tests.transition_builders import RUN, lifecycle_to, run_started


def interruption(interruption_id: str = "int-1-aaaaa", **fields: Any) -> Interruption:
    values: dict[str, Any] = {
        "id": interruption_id, "run_id": RUN, "codon_id": "a", "kind": "question",
        "question": "Which database?", "options": ["postgres", "sqlite"],
        "created_at": "2026-12-01T10:00:00.000Z", **fields}
    return Interruption.model_validate(values)


def created(item: Interruption) -> InterruptionCreated:
    return InterruptionCreated(data=InterruptionCreatedData(interruption=item))


def answered(interruption_id: str, answer: Any, by: str = "cli:alice") -> InterruptionAnswered:
    return InterruptionAnswered(data=InterruptionAnsweredData(
        interruption_id=interruption_id, answer=answer, answered_by=by))


def play(*transitions: Any) -> HankweaveState:
    return reduce(apply_transition, [run_started(), *lifecycle_to("a", "running"), *transitions],
                  HankweaveState())


# ----- the records -----


def test_an_interruption_is_created_pending_and_answered_once() -> None:
    state = play(created(interruption()))
    assert [i.id for i in pending(state)] == ["int-1-aaaaa"]

    state = apply_transition(state, answered("int-1-aaaaa", "sqlite"))

    item = state.interruption("int-1-aaaaa")
    assert item is not None
    assert (item.status, item.answer, item.answered_by) == ("answered", "sqlite", "cli:alice")
    assert item.answered_at and pending(state) == []
    with pytest.raises(InvalidTransitionError, match="already answered"):
        apply_transition(state, answered("int-1-aaaaa", "postgres"))


def test_unknown_duplicate_or_orphan_interruptions_are_refused() -> None:
    state = play(created(interruption()))
    with pytest.raises(InvalidTransitionError, match="no interruption 'int-nope'"):
        apply_transition(state, answered("int-nope", "sqlite"))
    with pytest.raises(InvalidTransitionError, match="already exists"):
        apply_transition(state, created(interruption()))
    with pytest.raises(InvalidTransitionError, match="has no record"):
        apply_transition(state, created(interruption("int-2-bbbbb", codon_id="zzz")))


def test_a_created_record_starts_pending_whatever_it_claims() -> None:
    state = play(created(interruption(status="answered", answer="x", answered_by="me")))
    item = state.interruption("int-1-aaaaa")
    assert item is not None and (item.status, item.answer, item.answered_by) == (
        "pending", None, None)


def test_state_json_has_no_interruptions_key_until_there_is_one() -> None:
    plain = json.loads(dump_state(play()))
    assert "interruptions" not in plain
    written = json.loads(dump_state(play(created(interruption()))))
    assert written["interruptions"][0]["id"] == "int-1-aaaaa"
    assert written["interruptions"][0]["codonId"] == "a"
    assert HankweaveState.model_validate(written).interruptions[0] == interruption()


def test_interruptions_survive_the_store(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path)
    for transition in (run_started(), *lifecycle_to("a", "running"), created(interruption()),
                       answered("int-1-aaaaa", "postgres")):
        store.transition_sync(transition)
    store.close_sync()
    state, _ = load_state(tmp_path)
    item = state.interruption("int-1-aaaaa")
    assert item is not None and item.answer == "postgres"


def test_interruption_ids_are_unique_and_sortable() -> None:
    ids = [new_interruption_id() for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(i.startswith("int-") for i in ids)


# ----- the answer rules -----


def answer_for(item: Interruption, **given: Any) -> Any:
    return checked_answer(play(created(item)), item.id, GivenAnswer(**given))


def test_an_answer_must_be_one_of_the_options() -> None:
    assert answer_for(interruption(), text="sqlite") == "sqlite"
    with pytest.raises(AnswerError, match=r"'mysql' is not an answer .* \(one of 'postgres',"
                                          r" 'sqlite'\)"):
        answer_for(interruption(), text="mysql")
    assert answer_for(interruption(), json_text='"postgres"') == "postgres"


def test_a_free_text_question_takes_text_or_json_but_not_nothing() -> None:
    free = interruption(options=None)
    assert answer_for(free, text="Use the staging bucket") == "Use the staging bucket"
    assert answer_for(free, json_text='{"bucket": "staging", "retries": 2}') == {
        "bucket": "staging", "retries": 2}
    with pytest.raises(AnswerError, match="empty answer"):
        answer_for(free, text="  ")
    with pytest.raises(AnswerError, match="--json: not JSON"):
        answer_for(free, json_text="{bucket")


def test_approve_and_reject_are_for_approvals_only() -> None:
    gate = interruption(kind="approval", gate="before", options=APPROVAL_OPTIONS,
                        question="Run deploy?")
    assert answer_for(gate, approve=True) == "approve"
    assert answer_for(gate, reject=True) == "reject"
    with pytest.raises(AnswerError, match="is a question, not an approval"):
        answer_for(interruption(), approve=True)


def test_exactly_one_form_of_answer() -> None:
    with pytest.raises(AnswerError, match="exactly one answer"):
        answer_for(interruption(), text="sqlite", json_text='"sqlite"')
    with pytest.raises(AnswerError, match="exactly one answer"):
        answer_for(interruption())


def test_an_unknown_or_answered_interruption_is_named() -> None:
    state = play(created(interruption()), answered("int-1-aaaaa", "sqlite"))
    with pytest.raises(AnswerError, match=r"already answered \('sqlite' by cli:alice"):
        checked_answer(state, "int-1-aaaaa", GivenAnswer(text="postgres"))
    with pytest.raises(AnswerError, match=r"no interruption 'int-x'.*pending: none"):
        checked_answer(state, "int-x", GivenAnswer(text="postgres"))


def test_deadlines_passed_give_their_defaults() -> None:
    soon = interruption("int-1-aaaaa", deadline="2026-12-01T11:00:00.000Z",
                        default_answer="sqlite")
    later = interruption("int-2-bbbbb", deadline="2026-12-01T13:00:00.000Z",
                         default_answer="postgres")
    state = play(created(soon), created(later), created(interruption("int-3-ccccc")))
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert [(item.id, default) for item, default in due_defaults(state, now)] == [
        ("int-1-aaaaa", "sqlite")]


# ----- hankweave answer / inspect interruptions -----


@pytest.fixture
def execution(tmp_path: Path) -> Path:
    hankweave_dir = tmp_path / "exec" / ".hankweave"
    store = StateStore.open(hankweave_dir)
    for transition in (run_started(), *lifecycle_to("a", "running"), created(interruption()),
                       created(interruption("int-2-bbbbb", kind="approval", gate="after",
                                            options=APPROVAL_OPTIONS,
                                            question="Keep the migration?"))):
        store.transition_sync(transition)
    store.close_sync()
    return tmp_path / "exec"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_hankweave_answer_records_the_answer_and_journals_it(execution: Path) -> None:
    done = invoke("answer", "-e", str(execution), "int-2-bbbbb", "--approve", "--by", "ops")

    assert done.exit_code == 0, done.output
    assert "Answered int-2-bbbbb: 'approve'. Resume with: hankweave run -e" in done.output
    item = load_state(execution / ".hankweave")[0].interruption("int-2-bbbbb")
    assert item is not None and (item.answer, item.answered_by) == ("approve", "ops")
    events = list(read_journal(execution / ".hankweave" / "events" / "events.jsonl"))
    (event,) = [e for e in events if e.type == "interruption.answered"]
    assert event.data == {"interruptionId": "int-2-bbbbb", "codonId": "a",
                          "answer": "approve", "answeredBy": "ops"}


def test_bad_answers_are_refused_and_change_nothing(execution: Path) -> None:
    before = (execution / ".hankweave" / "state.json").read_bytes() if (
        execution / ".hankweave" / "state.json").exists() else None
    log = execution / ".hankweave" / "state.wal"
    log_before = log.read_bytes() if log.exists() else None
    for args, message in (
            (["int-1-aaaaa", "mysql"], "'mysql' is not an answer interruption int-1-aaaaa"),
            (["int-1-aaaaa", "--approve"], "is a question, not an approval"),
            (["int-9-zzzzz", "sqlite"], "no interruption 'int-9-zzzzz'"),
            (["int-1-aaaaa"], "give exactly one answer")):
        done = CliRunner().invoke(cli, ["answer", "-e", str(execution), *args])
        assert done.exit_code == 2, done.output
        assert message in done.output
        assert "Traceback" not in done.output
    state = load_state(execution / ".hankweave")[0]
    assert all(item.status == "pending" for item in state.interruptions)
    after = (execution / ".hankweave" / "state.json").read_bytes() if (
        execution / ".hankweave" / "state.json").exists() else None
    assert after == before
    assert (log.read_bytes() if log.exists() else None) == log_before


def test_answering_twice_is_refused(execution: Path) -> None:
    assert invoke("answer", "-e", str(execution), "int-1-aaaaa", "sqlite").exit_code == 0
    again = CliRunner().invoke(cli, ["answer", "-e", str(execution), "int-1-aaaaa", "postgres"])
    assert again.exit_code == 2
    assert "was already answered ('sqlite' by cli:" in again.output


def test_answer_outside_an_execution_is_a_clear_error(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["answer", "-e", str(tmp_path), "int-1", "x"])
    assert done.exit_code != 0
    assert "not an execution directory" in done.output


def test_inspect_interruptions_lists_them_and_their_answers(execution: Path) -> None:
    invoke("answer", "-e", str(execution), "int-1-aaaaa", "sqlite", "--by", "alice")

    table = invoke("inspect", "interruptions", "-e", str(execution))
    assert "int-1-aaaaa" in table.output and "int-2-bbbbb" in table.output
    assert "Keep the migration?" in table.output
    assert "1 waiting: hankweave answer" in table.output

    listed = json.loads(invoke("inspect", "interruptions", "-e", str(execution), "--pending",
                               "--json").output)
    assert [(i["id"], i["kind"], i["gate"], i["options"]) for i in listed] == [
        ("int-2-bbbbb", "approval", "after", ["approve", "reject"])]
    everything = json.loads(invoke("inspect", "interruptions", "-e", str(execution),
                                   "--json").output)
    assert [(i["id"], i["status"], i.get("answer")) for i in everything] == [
        ("int-1-aaaaa", "answered", "sqlite"), ("int-2-bbbbb", "pending", None)]
