"""What a prune keeps, and the ref updates that remove the rest."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hankweave.api import RetentionPolicy

from hankweave_checkpoint_git.records import Record
from hankweave_checkpoint_git.refs import CHECKPOINT_REFS, RUN_BRANCHES


def split_by_policy(records: Sequence[Record], policy: RetentionPolicy,
                    always: Iterable[str | None]) -> tuple[list[Record], list[Record]]:
    """``records`` (newest first) split into those kept and those removed.

    Kept besides the policy: the ``always`` ids (the initial checkpoint, HEAD's commit) and
    checkpoints made by Hankweave 0.10.0 (no sequence: they are chained by parentage, so
    removing one would rewrite the ids of the others).  A ``keep_ids`` entry of at least four
    characters keeps every checkpoint whose id starts with it.
    """
    pinned = set(always)
    keep_ids = {k.strip().lower() for k in policy.keep_ids if len(k.strip()) >= 4}
    seen_per_run: dict[str | None, int] = {}
    kept: list[Record] = []
    removed: list[Record] = []
    for record in records:  # newest first
        checkpoint = record.checkpoint
        rank = seen_per_run.get(checkpoint.run_id, 0)
        seen_per_run[checkpoint.run_id] = rank + 1
        keep = (
            record.sequence is None
            or checkpoint.id in pinned
            or rank < policy.keep_last_per_run
            or any(checkpoint.id.startswith(k) for k in keep_ids)
        )
        (kept if keep else removed).append(record)
    return kept, removed


def ref_updates(removed: Sequence[Record], kept: Sequence[Record], branch_tips: str) -> str:
    """The ``git update-ref --stdin`` commands that drop the ``removed`` checkpoints' refs.

    ``branch_tips`` is ``for-each-ref --format='%(objectname) %(refname)' refs/heads/``: a run
    branch whose tip goes moves to the run's newest kept checkpoint, or is deleted.
    """
    gone = {r.checkpoint.id for r in removed}
    commands = [f"delete {CHECKPOINT_REFS}{sha} {sha}" for sha in sorted(gone)]
    for line in branch_tips.splitlines():
        tip, ref = line.split(" ", 1)
        if tip not in gone:
            continue
        run_id = ref.removeprefix(RUN_BRANCHES) if ref.startswith(RUN_BRANCHES) else None
        newest_kept = next((r.checkpoint.id for r in kept
                            if run_id is not None and r.checkpoint.run_id == run_id), None)
        commands.append(f"update {ref} {newest_kept} {tip}" if newest_kept
                        else f"delete {ref} {tip}")
    return "\n".join(commands) + "\n"
