"""In-process helpers: record a hank with the fake agent, export it, replay it.

Runs go through the kernel's real launch path (``launch(LaunchRequest(...))``) with only test
plugins loaded: ``FakeHarness``, the in-memory checkpoint backend and this plugin, so these tests
need no sibling backend.  The memory backend keeps its snapshots per process, which is why the
recording is exported in the same process that recorded it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hankweave_replay
from hankweave.api import HankweaveState, LaunchRequest, launch, load_state
from hankweave.testing import TEST_PLUGINS, HankProject
from hankweave.testing.fake_harness import use_script
from hankweave.testing.memory_checkpoints import MemoryCheckpointStore
from hankweave.testing.outcomes import codon_outcomes

PLUGINS = ",".join((*TEST_PLUGINS, "hankweave_replay.plugin"))


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    """A codon on the fake model; a field given as None is left out."""
    item = {"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
            "continuationMode": "fresh", "promptText": f"Do {codon_id}.", **fields}
    return {key: value for key, value in item.items() if value is not None}


def loop(loop_id: str, codons: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    return {"type": "loop", "id": loop_id, "name": f"Loop {loop_id}",
            "terminateOn": {"type": "iterationLimit", "limit": limit}, "codons": codons}


@dataclass
class Outcome:
    """A finished run: exit code, events, notices and where it ran."""

    code: int
    exec_dir: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def state(self) -> HankweaveState:
        return load_state(self.exec_dir / ".hankweave")[0]

    @property
    def work_tree(self) -> dict[str, bytes]:
        return work_tree(self.exec_dir)


def work_tree(exec_dir: Path) -> dict[str, bytes]:
    """Every file of ``agentRoot/`` except the data link, as bytes (links as their target)."""
    root = exec_dir / "agentRoot"
    files: dict[str, bytes] = {}
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "read_only_data_source"]
        for name in filenames + [d for d in dirnames if Path(directory, d).is_symlink()]:
            path = Path(directory, name)
            rel = path.relative_to(root).as_posix()
            if rel == "read_only_data_source":
                continue
            files[rel] = (os.readlink(path).encode() if path.is_symlink()
                          else path.read_bytes())
    return files


facts = codon_outcomes  # the same facts for a recording and its replay


def checkpoint_files(exec_dir: Path, checkpoint_id: str, target: Path) -> dict[str, bytes]:
    """The files of a memory-backend checkpoint."""
    store = MemoryCheckpointStore(exec_dir)
    store.materialize(checkpoint_id, target)
    return {p.relative_to(target).as_posix(): p.read_bytes()
            for p in target.rglob("*") if p.is_file()}


class Project(HankProject):
    """A hank, its data, a recorded execution and its replays, all under ``root``."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, plugin_modules=(*TEST_PLUGINS, "hankweave_replay.plugin"))
        self._replays = 0

    def _launch(self, watch: Callable[[dict[str, Any]], None] | None = None,
                **options: Any) -> Outcome:
        """Run in-process; ``watch`` sees every event as it happens."""
        events: list[dict[str, Any]] = []
        notices: list[str] = []

        def on_event(event: dict[str, Any]) -> None:
            events.append(event)
            if watch is not None:
                watch(event)

        exec_dir = Path(options.pop("execution"))
        code = launch(LaunchRequest(execution=str(exec_dir), headless=True, cwd=self.root,
                                    env=self.env, on_event=on_event,
                                    notify=notices.append, **options))
        return Outcome(code, exec_dir, events, notices)

    def record(self, script: dict[str, Any], **options: Any) -> Outcome:
        """Run the hank with the fake agent playing ``script`` (keyed by codon id)."""
        use_script({"codons": script})
        return self._launch(hank=str(self.hank_dir), data=str(self.data),
                            execution=self.exec_dir, **options)

    def export(self, output: Path | None = None, **options: Any
               ) -> hankweave_replay.ExportResult:
        return hankweave_replay.export_recording(
            self.exec_dir, output or self.root / "rec.hwrec.tar.gz", env=self.env,
            cwd=self.root, **options)

    def replay(self, source: Path | None = None, **options: Any) -> Outcome:
        """Replay ``source`` (default: a fresh export) into a new execution directory."""
        if source is None:
            source = self.export().path
        forbid_the_fake_agent()
        self._replays += 1
        return self._launch(replay=str(source), execution=self.root / f"replay{self._replays}",
                            **options)

    def resume(self, exec_dir: Path, **options: Any) -> Outcome:
        """``hankweave run -e EXEC_DIR`` with nothing else: a replayed execution resumes as a
        replay, from the recording it keeps."""
        forbid_the_fake_agent()
        return self._launch(execution=exec_dir, **options)


def forbid_the_fake_agent() -> None:
    # The fake agent must never run during a replay: an empty script would still "work".
    use_script({"codons": {}, "default": {"raiseError": "the fake agent ran in a replay"}})
