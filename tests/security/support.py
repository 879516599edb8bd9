"""Helpers of the attacker's suite (issue 34): each test is one way a recording, an execution
directory or an export could be turned against the person who opens or shares it.

Tests that need sibling packages (the git checkpoint backend, the replay plugin) ask for them
with :func:`needs`; ``tox -e integration`` installs them and sets
``HANKWEAVE_SECURITY_REQUIRED``, so there a missing package fails instead of skipping.  Every run is a real ``hankweave``
process with FakeHarness agents, asserting on bytes on disk, never on log messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hankweave.registry import get_registry
from hankweave.testing import HankProject

REQUIRED_ENV = "HANKWEAVE_SECURITY_REQUIRED"
SIBLINGS = "checkpoint-git,checkpoint-snapshot,replay"
"""The installed plugins (entry-point names) every run of the suite loads."""
_PACKAGES = {
    "git": ("checkpoint backend", "plugins/hankweave-checkpoint-git"),
    "snapshot": ("checkpoint backend", "plugins/hankweave-checkpoint-snapshot"),
    "replay": ("harness", "hankweave-replay"),
}


def needs(*names: str) -> None:
    """Skip (or fail, under ``tox -e integration``) unless the named plugins are installed."""
    registry = get_registry()
    have = {**{n: True for n in registry.checkpoint_backends()},
            **{n: True for n in registry.harnesses()}}
    for name in names:
        if name not in have:
            kind, path = _PACKAGES[name]
            message = f"needs the {name} {kind} (pip install -e {path}; tox -e integration)"
            if os.environ.get(REQUIRED_ENV):
                pytest.fail(message)
            pytest.skip(message)


class Project(HankProject):
    """A hank project run by real ``hankweave`` processes: the fake agent, playing the script
    in ``root/script.json``, and the installed sibling packages the attacks go through (the
    git backend is the default, as for a person)."""

    def __init__(self, root: Path) -> None:
        self.script = root / "script.json"
        super().__init__(root, plugin_modules=("hankweave.testing.fake_harness",),
                         load_plugins=SIBLINGS, env={"HANKWEAVE_FAKE_SCRIPT": str(self.script),
                                                     "HANKWEAVE_STRICT_PLUGINS": "1"})
        del self.env["HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND"]
        self.write_script({})

    def write_script(self, codons: dict[str, Any]) -> None:
        self.script.write_text(json.dumps({"codons": codons}))

    def hw(self, *args: str, timeout: float = 120,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``hankweave ARGS`` in a real process, no standard input."""
        return subprocess.run([sys.executable, "-m", "hankweave", *args], cwd=self.root,
                              env={**self.env, **(env or {})}, text=True, capture_output=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def run(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.hw("run", str(self.hank_dir), str(self.data), "-e", str(self.exec_dir),
                       "--headless", *extra, timeout=timeout)


def codon(codon_id: str, **fields: Any) -> dict[str, Any]:
    """A codon running on the fake model."""
    return {"id": codon_id, "name": f"Codon {codon_id}", "model": "fake",
            "continuationMode": "fresh", "promptText": f"Do {codon_id}.", **fields}



def record_and_export(project: Project, items: list[dict[str, Any]],
                      script: dict[str, Any]) -> Path:
    """Run ``items`` with the fake agent playing ``script``, export it; the archive's path."""
    project.write_hank(items)
    project.write_script(script)
    ran = project.run()
    assert ran.returncode == 0, ran.stderr
    archive = project.root / "rec.hwrec.tar.gz"
    exported = project.hw("export", "-e", str(project.exec_dir), "-o", str(archive))
    assert exported.returncode == 0, exported.stderr
    return archive


def repack_recording(source: Path, target: Path, edit: Callable[[Path], None]) -> Path:
    """What an attacker does to a recording: unpack ``source`` (trusted: our own export),
    let ``edit`` change the unpacked tree, and pack it again as export does (gzip)."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with tarfile.open(source, "r:gz") as tar:
            tar.extractall(root, filter="tar")
        edit(root)
        with tarfile.open(target, "w:gz") as tar:
            for path in sorted(root.rglob("*")):
                tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    return target
