"""Helpers of the command sentinel's tests: a sentinel built as the runtime builds it, its
firings, and a hank project run in-process through the kernel's launch path.

The project loads this package through its installed entry point (``HANKWEAVE_LOAD_PLUGINS``
names only it) and the kernel's test plugins by module: the fake agent and the in-memory
checkpoint backend, so a run needs no other sibling package.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hankweave_sentinel_command import CommandOptions, CommandSentinel

from hankweave.api import (
    HankweaveState,
    LaunchRequest,
    SentinelAnswer,
    SentinelFiring,
    SentinelSetup,
    launch,
    load_state,
)
from hankweave.testing import HankProject
from hankweave.testing.fake_harness import use_script

LINTER = [sys.executable, str(Path(__file__).with_name("syntax_linter.py"))]
"""A linter over Python files: ``<path>:<line>: <message>`` per file that does not compile."""
ECHO_ARGS = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
"""Prints its arguments as a JSON list."""
ECHO_STDIN = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.stdin.read()))"]
"""Prints what it read on stdin as a JSON string."""


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def build(agent_root: Path, *, env: dict[str, str] | None = None,
          **options: Any) -> CommandSentinel:
    """A command sentinel over ``agent_root`` with ``options`` (camelCase keys), built as the
    runtime builds one when its codon starts."""
    state = agent_root.parent / ".hankweave" / "sentinels"
    setup = SentinelSetup(
        sentinel_id="lint", name="Lint", description=None, codon_id="write", run_id="run-1",
        config=None, options=CommandOptions.model_validate(options),
        config_directory=agent_root.parent, execution_dir=agent_root.parent,
        agent_root=agent_root, state_dir=state,
        env=dict(os.environ) if env is None else env,
        codon_start_time="2026-01-01T00:00:00.000Z")
    return CommandSentinel(setup)


def firing(number: int = 1) -> SentinelFiring:
    return SentinelFiring(number=number, events=[{"type": "codon.completed", "data": {}}],
                          strategy="immediate", queued_at=datetime.now(UTC))


def fire(sentinel: CommandSentinel, number: int = 1) -> SentinelAnswer | None:
    return asyncio.run(sentinel.fire(firing(number)))


def report(sentinel: CommandSentinel, number: int = 1) -> str:
    """The text a firing wrote (it must write one)."""
    answer = fire(sentinel, number)
    assert answer is not None, "the firing wrote nothing"
    assert isinstance(answer.content, str)
    return answer.content


def body(text: str) -> str:
    """A report without its header: the command's output."""
    return text.split("\n\n", 1)[1]


def write(root: Path, files: dict[str, str]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


class Project(HankProject):
    """A hank, its data and an execution directory under ``root``, run in this process."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, load_plugins="sentinel-command",
                         env={"HANKWEAVE_STRICT_PLUGINS": "1"})
        self.events: list[dict[str, Any]] = []

    def write_watched_codon(self, codon_id: str, sentinel: dict[str, Any],
                   **settings: Any) -> None:
        """One codon on the fake model, with ``sentinel`` inline."""
        entry: dict[str, Any] = {"sentinelConfig": sentinel}
        if settings:
            entry["settings"] = settings
        codon = {"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
                 "continuationMode": "fresh", "promptText": f"Do {codon_id}.",
                 "sentinels": [entry]}
        (self.hank_dir / "hank.json").write_text(json.dumps({"hank": [codon]}, indent=2))

    def run(self, script: dict[str, Any]) -> int:
        """``hankweave run --headless`` with the fake agent playing ``script`` (by codon id)."""
        use_script({"codons": script})
        return launch(LaunchRequest(hank=str(self.hank_dir), data=str(self.data),
                                    execution=str(self.exec_dir), cwd=self.root, env=self.env,
                                    headless=True, on_event=self.events.append,
                                    notify=lambda _: None))

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [event["data"] for event in self.events if event["type"] == event_type]

    def output_logs(self, sentinel_id: str) -> list[Path]:
        """The sentinel's log files (one per codon attempt it loaded in)."""
        outputs = self.exec_dir / ".hankweave" / "sentinels" / "outputs" / sentinel_id
        return sorted(outputs.glob("*.md"))

    def state(self) -> HankweaveState:
        return load_state(self.exec_dir / ".hankweave")[0]


def sentinel_config(options: dict[str, Any], *, on: list[str] | None = None,
                    execution: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``command`` sentinel config, triggered by ``codon.completed`` unless ``on`` says."""
    return {"id": "lint", "name": "Lint", "kind": "command",
            "trigger": {"type": "event", "on": on or ["codon.completed"]},
            "execution": execution or {"strategy": "immediate"}, "options": options}
