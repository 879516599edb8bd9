"""What a prune removes: the checkpoints the policy does not keep, then unreferenced objects."""

from __future__ import annotations

from collections.abc import Iterable

from hankweave.api import RetentionPolicy
from hankweave_checkpoint_snapshot.formats import Manifest
from hankweave_checkpoint_snapshot.manifests import Manifests
from hankweave_checkpoint_snapshot.objects import ObjectStore
from hankweave_checkpoint_snapshot.statcache import StatCache
from hankweave_checkpoint_snapshot.trees import Trees


def expired(manifests: Iterable[Manifest], policy: RetentionPolicy) -> list[Manifest]:
    """The checkpoints ``policy`` does not keep, newest first (never the initial one)."""
    kept_per_run: dict[str | None, int] = {}
    removed: list[Manifest] = []
    for manifest in sorted(manifests, key=lambda m: m.sequence, reverse=True):
        rank = kept_per_run.get(manifest.run_id, 0)
        kept_per_run[manifest.run_id] = rank + 1
        if (manifest.kind != "initial" and manifest.id not in policy.keep_ids
                and rank >= policy.keep_last_per_run):
            removed.append(manifest)
    return removed


def collect_garbage(manifests: Manifests, trees: Trees, objects: ObjectStore,
                    stat_cache: StatCache) -> None:
    """Delete every object that no manifest's tree refers to."""
    garbage = objects.unreferenced(trees.referenced(manifests.loaded().values()))
    if not garbage:
        return
    doomed = {digest for digest, _ in garbage}
    # A cache entry is trusted to name a durable object, so before any object goes, the
    # cache is rewritten without it, durably: no older copy naming it can come back.
    cache = stat_cache.load()
    kept = {path: entry for path, entry in cache.items() if entry[4] not in doomed}
    stat_cache.save(kept, durable=True)
    trees.forget(doomed)
    objects.delete(garbage)
