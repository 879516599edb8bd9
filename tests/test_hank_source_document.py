"""An execution made from a bundle says so in its document and in ``inspect execution``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hankweave.api import pack_hank
from hankweave.execution.document import document_of
from hankweave.state.loading import load_state
from tests.runtime_harness import Project, codon


def test_the_document_and_inspect_name_the_bundle(tmp_path: Path):
    project = Project(tmp_path)
    project.write_hank([codon("a")])
    packed = pack_hank(project.hank_dir, output=Path("a.hank"), cwd=tmp_path)
    assert packed.output is not None and packed.lock is not None
    done = subprocess.run([sys.executable, "-m", "hankweave", "run", str(packed.output),
                           str(project.data), "-e", str(project.exec_dir), "--headless"],
                          cwd=tmp_path, env=project.env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr

    document = document_of(project.exec_dir, load_state(project.hankweave_dir)[0])
    shown = subprocess.run([sys.executable, "-m", "hankweave", "inspect", "execution", "-e",
                            str(project.exec_dir)], cwd=tmp_path, env=project.env,
                           capture_output=True, text=True, timeout=60)

    source = document.execution.hank_source
    assert source is not None
    assert (source.bundle_hash, source.bundle_path) == (packed.lock.bundle_hash,
                                                        str(packed.output))
    assert f"from bundle {packed.output} (bundleHash {packed.lock.bundle_hash})" in shown.stdout
