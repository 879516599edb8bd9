"""The names of the state files in ``.hankweave/``, in a module of their own so that what only
needs the names (the execution layout, ``hankweave validate``) does not load the store."""

from __future__ import annotations

from typing import Final

STATE_FILE: Final = "state.json"
BACKUP_FILE: Final = "state.json.bak"
WAL_FILE: Final = "state.wal"
"""The transition log replayed over ``state.json`` (docs/state.md)."""
PREVIOUS_WAL_FILE: Final = "state.wal.prev"
"""The log the last fold retired: it extends ``state.json.bak`` (docs/state.md)."""
FOLDING_WAL_FILE: Final = "state.wal.folding"
"""A log a background fold is writing into ``state.json``; ``state.wal`` follows it."""
NEXT_WAL_FILE: Final = "state.wal.next"
"""The next log, written before it takes ``state.wal``'s place."""
FOLD_MARKER_FILE: Final = "state.fold"
"""What the last background fold did: which log it folded, onto which ``state.json``, into which."""
LOCK_FILE_NAME: Final = "runtime.lock"
