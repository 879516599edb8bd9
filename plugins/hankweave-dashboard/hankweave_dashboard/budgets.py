"""Budget bars: each plan entry's limits against its spending (``hankweave inspect budget``).

The limits a codon ran under are in the journal's ``budget.limits`` events, so they are read
incrementally: each execution's limits are kept with the seq they were read up to, and the next
request reads only the events after it (found by bisection).  The first request of a long
execution reads its journal once; the page's first render does not wait for it (the page asks
for the budget separately).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from hankweave.api import ExecutionLayout, RecordedLimits, budget_report, read_recorded_limits
from hankweave_dashboard.pages import load


class BudgetCache:
    def __init__(self) -> None:
        self._limits: dict[Path, RecordedLimits] = {}
        self._lock = threading.Lock()

    def report(self, path: Path) -> dict[str, Any]:
        state = load(path)
        journal = ExecutionLayout(path).events_file
        with self._lock:
            recorded = self._limits.get(path)
            fresh = recorded is None
            recorded = recorded or RecordedLimits()
            # No journal yet: nothing started, every limit is projected.
            with contextlib.suppress(OSError):
                read_recorded_limits(journal, recorded,
                                     after_seq=None if fresh else recorded.last_seq)
            self._limits[path] = recorded
        return budget_report(state, recorded)
