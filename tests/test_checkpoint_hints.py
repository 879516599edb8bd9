"""The runtime hands a store that accepts them the changes its watcher saw, and nothing to one
that does not (docs/checkpoints.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hankweave.checkpoints import ChangeHint, Checkpoint
from hankweave.runtime.checkpointing import KnownCheckpoints
from hankweave.testing.memory_checkpoints import MemoryCheckpointStore
from hankweave.workspace_watch import WorkspaceWatcher


class HintedMemoryStore(MemoryCheckpointStore):
    """The memory store, recording the hint each create got."""

    accepts_change_hints: ClassVar[bool] = True

    def __init__(self, execution_dir: Path) -> None:
        super().__init__(execution_dir)
        self.hints: list[ChangeHint | None] = []

    def create(self, *, changes: ChangeHint | None = None, **kwargs: Any) -> Checkpoint:
        self.hints.append(changes)
        return super().create(**kwargs)


def _execution(tmp_path: Path) -> Path:
    (tmp_path / "agentRoot").mkdir(parents=True)
    return tmp_path


async def _create(known: KnownCheckpoints, codon: str) -> None:
    await known.create(kind="completed", run_id="r", codon_id=codon, codon_name=codon,
                       patterns=["**"], duration_ms=1)


@pytest.fixture
def needs_watcher(tmp_path: Path) -> None:
    probe = WorkspaceWatcher.start(tmp_path)
    if probe is None:
        pytest.skip("no workspace watcher on this platform")
    probe.close()


@pytest.mark.usefixtures("needs_watcher")
def test_each_checkpoint_gets_what_changed_since_the_previous_one(tmp_path: Path) -> None:
    store = HintedMemoryStore(_execution(tmp_path))
    known = KnownCheckpoints(store)

    async def scenario() -> None:
        await known.initialize()
        (store.work_tree / "a.txt").write_text("a")
        await _create(known, "one")
        (store.work_tree / "sub").mkdir()
        (store.work_tree / "sub" / "b.txt").write_text("b")
        await _create(known, "two")
        known.distrust_changes()  # as before rig setup commands
        await _create(known, "three")
        known.close()

    asyncio.run(scenario())
    one, two, three = store.hints
    assert one is not None and two is not None and three is not None
    assert (one.paths, one.complete) == (frozenset({"a.txt"}), True)
    assert (two.paths, two.complete, two.since) == (frozenset({"sub"}), True, one.until)
    assert three.complete is False


def test_no_hint_for_a_store_that_takes_none_or_when_hints_are_off(tmp_path: Path) -> None:
    plain = MemoryCheckpointStore(_execution(tmp_path / "plain"))
    switched_off = HintedMemoryStore(_execution(tmp_path / "off"))

    async def scenario() -> None:
        for known in (KnownCheckpoints(plain), KnownCheckpoints(switched_off,
                                                                change_hints=False)):
            await known.initialize()
            await _create(known, "one")  # the plain store would reject a changes= argument
            known.close()

    asyncio.run(scenario())
    assert switched_off.hints == [None]
