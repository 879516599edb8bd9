"""A hank project for in-process tests: a hank directory, its data and an execution directory.

:class:`HankProject` lays them out under a test's ``tmp_path`` with an environment that loads
only what a test names: the kernel's test plugins (the scripted fake agent and the in-memory
checkpoint backend) by module, and installed plugins by entry-point name, so a run never
depends on what else is installed.  Test suites subclass it with their own ways of running
(the kernel's runtime tests, the replay plugin's record-and-replay, a plugin's own runs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TEST_PLUGINS = ("hankweave.testing.fake_harness", "hankweave.testing.memory_checkpoints")
"""The fake agent and the in-memory checkpoint backend, loaded by module."""


class HankProject:
    """``root/hank``, ``root/data`` (with one input file) and ``root/exec``."""

    def __init__(self, root: Path, *, plugin_modules: tuple[str, ...] = TEST_PLUGINS,
                 load_plugins: str = "", env: dict[str, str] | None = None) -> None:
        """`plugin_modules`: loaded by module name; `load_plugins`: the installed plugins
        (entry-point names, comma-separated) to load besides, none by default."""
        self.root = root
        self.hank_dir = root / "hank"
        self.data = root / "data"
        self.exec_dir = root / "exec"
        for path in (self.hank_dir, self.data):
            path.mkdir(parents=True)
        (self.data / "input.txt").write_text("some input\n")
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", ""),
            "HANKWEAVE_HOME": str(root / "home"),
            "HANKWEAVE_LOAD_PLUGINS": load_plugins,
            "HANKWEAVE_PLUGIN_MODULES": ",".join(plugin_modules),
            "HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND": "memory",
            **(env or {}),
        }

    @property
    def agent_root(self) -> Path:
        return self.exec_dir / "agentRoot"

    @property
    def hankweave_dir(self) -> Path:
        return self.exec_dir / ".hankweave"

    def write_hank(self, items: list[dict[str, Any]], **root: Any) -> None:
        """``hank.json`` with ``items`` as its ``hank`` and ``root``'s other keys."""
        (self.hank_dir / "hank.json").write_text(json.dumps({"hank": items, **root}, indent=2))

    def write_file(self, relative: str, text: str) -> None:
        """A file in the hank directory (a prompt file, a sentinel config)."""
        path = self.hank_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
