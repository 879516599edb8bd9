"""Keeping a large state out of the garbage collector's full collections.

CPython's cyclic collector visits every tracked object in a full (generation 2) collection.
With a 5,000-record state in memory (about 35,000 objects) one takes ~50 ms, and it falls on
whatever allocation happens to trigger it, a transition's acknowledgement included.  Rescanning
the state finds nothing: its records are long-lived and acyclic, and reference counting frees
the ones a transition replaces.

So while a store holding a large state is open, every full collection is followed by
``gc.freeze()``: what survived it moves to the permanent generation, and the next full
collection visits only what was allocated since.  A frozen object that later becomes cyclic
garbage is not collected until it is unfrozen, so closing the last such store unfreezes the
heap and the collector sees everything again.

Loading a state is the other case: parsing builds tens of thousands of acyclic objects, so
the collections it triggers find no garbage, yet each full one visits the whole heap (the
dashboard's, say, which may hold other executions' states): :func:`collections_paused`.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Any

_holders = 0
_guard = threading.Lock()


def _freeze_after_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def hold(*, collect_now: bool = False) -> None:
    """Keep full collections short until the matching :func:`release`.  ``collect_now`` pays
    for the first, long one here (when opening a store) rather than on some later transition."""
    global _holders
    with _guard:
        _holders += 1
        if _holders > 1:
            return
        gc.callbacks.append(_freeze_after_full_collection)
    if collect_now:
        gc.collect()  # collects what is garbage now; the callback then freezes the rest


def release() -> None:
    """Undo one :func:`hold`; the last one gives the collector the whole heap back."""
    global _holders
    with _guard:
        if _holders == 0:
            return
        _holders -= 1
        if _holders:
            return
        gc.callbacks.remove(_freeze_after_full_collection)
        gc.unfreeze()


def holding() -> bool:
    return _holders > 0


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """No cyclic collection inside the block (one that builds only acyclic objects)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
