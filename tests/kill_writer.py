"""Child process for the SIGKILL test: applies a deterministic transition sequence and prints
the index of every transition whose ``await store.transition()`` has returned.

Usage: python tests/kill_writer.py HANKWEAVE_DIR START_INDEX [background]

With ``background``, every fold is a background fold (another process), however small the
state, so kills land before, during and after folds in flight.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hankweave.state.store import StateStore
from hankweave.state.transitions import StateTransition
from tests.transition_builders import (
    codon_started,
    costs,
    messages,
    moved,
    run_started,
)

BLOCK = 25  # transitions per codon: 4 to reach running, 20 updates, 1 completion


def transition_at(index: int) -> StateTransition:
    """The ``index``-th transition of an endless, deterministic run."""
    if index == 0:
        transition: StateTransition = run_started("kill-run", pid=1)
    else:
        codon, step = divmod(index - 1, BLOCK)
        cid = f"codon-{codon}"
        path = ["preparing", "starting", "initializing", "running"]
        if step == 0:
            transition = codon_started(cid, run_id="kill-run")
        elif step < 4:
            transition = moved(cid, path[step - 1], path[step], run_id="kill-run")
        elif step < BLOCK - 1:
            transition = (costs(cid, 0.001 * step, run_id="kill-run") if step % 2
                          else messages(cid, step, run_id="kill-run"))
        else:
            transition = moved(cid, "running", "completed", run_id="kill-run")
    transition.timestamp = f"2026-01-01T00:00:00.{index:09d}Z"
    return transition


async def main(hankweave_dir: Path, start: int, background: bool) -> None:
    options = {"inline_fold_max_bytes": 0, "fold_min_bytes": 8_000} if background else {}
    store = StateStore.open(hankweave_dir, fold_interval=0.01,
                            **{"fold_min_bytes": 20_000, **options})
    out = sys.stdout
    index = start
    while True:
        await store.transition(transition_at(index))
        out.write(f"{index}\n")
        out.flush()
        index += 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["background"]))
