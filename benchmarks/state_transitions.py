"""Per-transition cost of the durable state store, on a short and on a long history.

Prints one JSON line.  Workload: 20,000 transitions, 90% high-frequency updates (cost increments
and assistant-message counts) and 10% lifecycle transitions (a codon's start and status changes),
applied through ``StateStore.transition`` to each of two executions whose current run already
holds 10 or 5,000 codon records.

The two stores are measured interleaved, so that a noisy stretch of the machine hits both: the
workload is cut into rounds (20 by default) of whole codons, each with the same 90/10 mix, and
the rounds alternate small, large, small, large, ...  Both stores stay open for the whole run,
each in its own temporary execution directory and on its own event loop (so a timed fold runs,
and is timed, only in its own store's rounds; a background fold, in another process, is not
waited for at a round's end: ``benchmarks/state_latency.py`` counts every fold).  Round i of the small history is paired with
round i of the large one; the verdict uses the median of these paired large/small ratios, and
the reported per-side costs are the medians of the per-round us per transition.

Also measured in the same run:

* the floor: one fsync'd append of the same transition bytes, per transition;
* the original's design as the baseline: on every transition rewrite the whole ``state.json``
  (2-space indentation) atomically, keeping the previous copy as ``.bak``.

Targets: median paired large/small ratio <= 1.5 and <= 200 us per transition (median round) on
the large history.

Usage: python benchmarks/state_transitions.py [--transitions N] [--rounds N] [--baseline-samples N]

``--transitions`` is rounded down to whole codons per round (at least one codon per round).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from hankweave.state.store import StateStore
from hankweave.state.transitions import (
    AssistantMessageCountData,
    AssistantMessageCountUpdated,
    CodonMetadata,
    CodonStarted,
    CodonStartedData,
    CodonTransitioned,
    CodonTransitionedData,
    CostsIncremented,
    CostsIncrementedData,
    StateTransition,
)
from hankweave.state.types import (
    CompletedCodon,
    FreshStart,
    HankweaveState,
    Run,
    TokenUsage,
    dump_state,
)

RUN_ID = "1788337916070-bench"
UPDATES_PER_CODON = 45  # with 5 lifecycle transitions: 50 per codon, 10% lifecycle
CODON_TRANSITIONS = UPDATES_PER_CODON + 5


def history_state(records: int) -> HankweaveState:
    """A running run that already holds ``records`` completed codon records."""
    tokens = TokenUsage(input_tokens=25, output_tokens=654, cache_creation_tokens=683,
                        cache_read_tokens=56488)
    codons = [
        CompletedCodon(
            codon_id=f"history-{i}",
            start_time="2026-09-02T08:31:56.104Z",
            claude_pid=952404,
            claude_log_path=f".hankweave/runs/{RUN_ID}/history-{i}-claude.log",
            claude_session_id="83b52eaa-5147-4130-aef4-818c9c663c77",
            current_cost=0.01050655,
            current_tokens=tokens,
            assistant_message_count=3,
            extension_count=0,
            end_time="2026-09-02T08:32:08.079Z",
            final_cost=0.01050655,
            final_tokens=tokens,
            result_message_received=True,
            completion_checkpoint="4ae2cf9d1a341fe1108487ddc2cea91ae4dd71ef",
        )
        for i in range(records)
    ]
    run = Run(
        run_id=RUN_ID,
        run_folder=f"/tmp/exec/.hankweave/runs/{RUN_ID}",
        git_branch=f"run-{RUN_ID}",
        starting_conditions=FreshStart(),
        codons=codons,
        start_time="2026-09-02T08:31:56.071Z",
        server_pid=os.getpid(),
    )
    return HankweaveState(runs=[run], current_run_id=RUN_ID)


def iter_workload() -> Iterator[StateTransition]:
    """Transitions without end: codons that start, run, take updates and complete."""
    codon = 0
    while True:
        out: list[StateTransition] = []
        cid = f"bench-{codon}"

        def moved(frm: str, to: str, cid: str = cid, **meta: object) -> CodonTransitioned:
            return CodonTransitioned(
                data=CodonTransitionedData.model_validate(
                    {"runId": RUN_ID, "codonId": cid, "from": frm, "to": to,
                     "metadata": CodonMetadata(**meta)}
                )
            )

        out.append(CodonStarted(data=CodonStartedData(run_id=RUN_ID, codon_id=cid)))
        out.append(moved("preparing", "starting"))
        out.append(moved("starting", "initializing", claude_pid=900001,
                         claude_log_path=f".hankweave/runs/{RUN_ID}/{cid}-claude.log"))
        out.append(moved("initializing", "running", claude_session_id=f"session-{codon}"))
        for i in range(UPDATES_PER_CODON):
            if i % 2 == 0:
                out.append(CostsIncremented(data=CostsIncrementedData(
                    run_id=RUN_ID, codon_id=cid, cost_delta=0.0012,
                    tokens_delta=TokenUsage(input_tokens=12, output_tokens=40,
                                            cache_read_tokens=900))))
            else:
                out.append(AssistantMessageCountUpdated(data=AssistantMessageCountData(
                    run_id=RUN_ID, codon_id=cid, new_count=i // 2 + 1)))
        out.append(moved("running", "completed", checkpoint_sha="f" * 40,
                         result_message_received=True))
        yield from out
        codon += 1


def workload(count: int) -> list[StateTransition]:
    """The first ``count`` transitions of :func:`iter_workload`."""
    return list(itertools.islice(iter_workload(), count))


async def _apply_round(store: StateStore, transitions: list[StateTransition]) -> float:
    start = time.perf_counter()
    for transition in transitions:
        await store.transition(transition)
    # A timed (in-process) fold that started in this round finishes in it, not during the other
    # store's round.  A background fold runs in another process and holds up no transition, so
    # the round does not wait for it: benchmarks/state_latency.py, whose rounds are long enough
    # to hold several, ends each round only when its fold has finished too.
    background = {store._fold_task} if store._fold_task is not None else set()
    await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()} - background))
    return time.perf_counter() - start


def open_store(records: int, root: Path) -> StateStore:
    hw = root / f"store-{records}" / ".hankweave"
    hw.mkdir(parents=True)
    (hw / "state.json").write_bytes(dump_state(history_state(records)))
    return StateStore.open(hw)


def measure_interleaved(
    histories: list[int], rounds: list[list[StateTransition]], root: Path
) -> list[list[float]]:
    """Apply each round to every store in turn; per store, the us per transition of each round."""
    stores = [open_store(records, root) for records in histories]
    runners = [asyncio.Runner() for _ in stores]
    samples: list[list[float]] = [[] for _ in stores]
    try:
        for chunk in rounds:
            for store, runner, out in zip(stores, runners, samples, strict=True):
                out.append(runner.run(_apply_round(store, chunk)) / len(chunk) * 1e6)
    finally:
        for store, runner in zip(stores, runners, strict=True):
            runner.run(store.close())
            runner.close()
    return samples


def measure_floor(transitions: list[StateTransition], root: Path) -> float:
    """One fsync'd append of each transition's bytes."""
    lines = [t.model_dump_json(exclude_none=True).encode() + b"\n" for t in transitions]
    fd = os.open(root / "floor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for line in lines:
            os.write(fd, line)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
    return elapsed / len(lines) * 1e6


def measure_baseline(records: int, transitions: list[StateTransition], root: Path) -> float:
    """The original's design: reduce, then rewrite the whole file (2-space JSON) atomically."""
    from hankweave.state.reducer import apply_transition

    hw = root / f"baseline-{records}"
    hw.mkdir()
    path, tmp, bak = hw / "state.json", hw / "state.json.tmp", hw / "state.json.bak"
    state = history_state(records)
    path.write_bytes(dump_state(state))
    samples = []
    for transition in transitions:
        start = time.perf_counter()
        state = apply_transition(state, transition)
        shutil.copyfile(path, bak)
        text = json.dumps(state.model_dump(mode="json", by_alias=True, exclude_none=True),
                          indent=2)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        samples.append(time.perf_counter() - start)
    return statistics.fmean(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=20,
                        help="interleaved rounds per history (each a slice of whole codons)")
    parser.add_argument("--baseline-samples", type=int, default=50,
                        help="transitions timed for the (slow) baseline on each history")
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=5_000)
    args = parser.parse_args()

    per_round = max(1, args.transitions // (args.rounds * CODON_TRANSITIONS)) * CODON_TRANSITIONS
    transitions = workload(per_round * args.rounds)
    rounds = [transitions[i:i + per_round] for i in range(0, len(transitions), per_round)]
    with tempfile.TemporaryDirectory(prefix="hankweave-bench-") as tmp:
        root = Path(tmp)
        small_us, large_us = measure_interleaved([args.small, args.large], rounds, root)
        floor = measure_floor(transitions, root)
        sample = transitions[: args.baseline_samples]
        base_small = measure_baseline(args.small, sample, root)
        base_large = measure_baseline(args.large, sample, root)

    ratios = [large / small for small, large in zip(small_us, large_us, strict=True)]
    ratio = statistics.median(ratios)
    small, large = statistics.median(small_us), statistics.median(large_us)
    result = {
        "benchmark": "state_transitions",
        "transitions": len(transitions),
        "rounds": len(rounds),
        "transitions_per_round": per_round,
        "lifecycle_share": round(sum(t.type not in {"CostsIncremented",
                                     "AssistantMessageCountUpdated"} for t in transitions)
                                 / len(transitions), 3),
        "history_small_records": args.small,
        "history_large_records": args.large,
        "us_per_transition_small": round(small, 1),
        "us_per_transition_large": round(large, 1),
        "ratio_large_to_small": round(ratio, 3),
        "ratio_large_to_small_min": round(min(ratios), 3),
        "ratio_large_to_small_max": round(max(ratios), 3),
        "floor_fsync_append_us": round(floor, 1),
        "baseline_rewrite_us_small": round(base_small, 1),
        "baseline_rewrite_us_large": round(base_large, 1),
        "speedup_vs_baseline_large": round(base_large / large, 1),
        "targets": {"ratio_max": 1.5, "large_us_max": 200},
        "meets_targets": ratio <= 1.5 and large <= 200,
    }
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
