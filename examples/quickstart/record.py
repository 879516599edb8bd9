"""Regenerate the quickstart's bundled recording (``recording.hwrec.tar.gz``).

    python examples/quickstart/record.py [OUTPUT]

Runs the quickstart hank, written for ``haiku``, with the scripted fake agent of
``hankweave.testing`` standing in for every model (``HANKWEAVE_FAKE_ALL=1``) and playing
``fake-script.json``, then exports the execution next to this file.  Costs are computed with
haiku's catalogue prices.  Needs hankweave, hankweave-replay and a checkpoint backend (git by
default) installed; no provider and no API key.  ``OUTPUT`` writes the recording elsewhere (the
tests use it to check that regenerating gives an equivalent recording).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDING = HERE / "recording.hwrec.tar.gz"


def main(output: Path = RECORDING) -> int:
    """Record the quickstart into ``output``; return the exit code."""
    with tempfile.TemporaryDirectory(prefix="hankweave-quickstart-") as scratch_dir:
        scratch = Path(scratch_dir)
        # The fake harness counts attempts in a file next to its script: keep that out of here.
        script = scratch / "fake-script.json"
        shutil.copyfile(HERE / "fake-script.json", script)
        env = {**os.environ,
               "HANKWEAVE_FAKE_ALL": "1",
               "HANKWEAVE_PLUGIN_MODULES": "hankweave.testing.fake_harness",
               "HANKWEAVE_FAKE_SCRIPT": str(script),
               "HANKWEAVE_HOME": str(scratch / "home")}
        execution = scratch / "execution"
        hankweave = [sys.executable, "-m", "hankweave"]
        steps = [
            [*hankweave, "run", str(HERE), str(HERE / "data"), "-e", str(execution),
             "--headless"],
            [*hankweave, "export", "-e", str(execution), "-o", str(output)],
        ]
        for step in steps:
            done = subprocess.run(step, env=env, stdin=subprocess.DEVNULL, check=False)
            if done.returncode != 0:
                print(f"record.py: hankweave {step[3]} failed (exit {done.returncode})",
                      file=sys.stderr)
                return done.returncode
    print(f"Recorded {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else RECORDING))
