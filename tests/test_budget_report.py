"""The budget report's journal reading (``read_recorded_limits``): each event once, with
``after_seq``, for readers that keep what they read (the dashboard's budget bars)."""

from __future__ import annotations

from pathlib import Path

from hankweave.events.catalogue import make_event
from hankweave.events.journal import EventJournal, journal_path
from hankweave.runtime.budget_report import RecordedLimits, read_recorded_limits


def limits(journal: EventJournal, codon_id: str, dollars: float) -> None:
    data = {"codonId": codon_id, "ceiling": {"maxDollars": 10.0},
            "limits": {"maxDollars": dollars}, "spentDollars": 0, "elapsedSeconds": 0}
    journal.append(make_event("budget.limits", data, seq=journal.next_seq))


def info(journal: EventJournal) -> None:
    journal.append(make_event("info", {"message": "hello"}, seq=journal.next_seq))


def test_limits_are_read_incrementally_and_the_newest_wins(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    with EventJournal(path) as journal:
        limits(journal, "a", 1.0)
        info(journal)
        recorded = read_recorded_limits(path)
        assert recorded.codons["a"]["maxDollars"] == 1.0 and recorded.last_seq == 2
        limits(journal, "b", 2.0)
        limits(journal, "a", 3.0)
        info(journal)
    again = read_recorded_limits(path, recorded, after_seq=recorded.last_seq)
    assert again is recorded and recorded.last_seq == 5
    assert recorded.codons["a"]["maxDollars"] == 3.0 and recorded.codons["b"]["maxDollars"] == 2.0
    assert recorded.ceiling == {"maxDollars": 10.0}


def test_an_empty_reader_reads_nothing_from_an_empty_journal(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    EventJournal(path).close()
    recorded = read_recorded_limits(path, RecordedLimits())
    assert recorded.codons == {} and recorded.ceiling is None and recorded.last_seq == 0
