"""Regenerate the quickstart's bundled recording (``recording.hwrec.tar.gz``).

    python examples/quickstart/record.py [OUTPUT]

Runs the quickstart hank live, on the Claude harness: the real Claude Code CLI for every codon,
talking to the scripted mock provider (``hankweave run --mock-provider mock-script.json``)
instead of Anthropic, so it needs no API key and sends nothing anywhere but 127.0.0.1.  The
script answers each codon's requests: the agent reads the notes and writes them with the CLI's
own Read and Write tools.  Then the execution is exported next to this file.  Needs hankweave,
hankweave-harness-claude, hankweave-replay and a checkpoint backend (git by default) installed.
``OUTPUT`` writes the recording elsewhere (the tests use it to check that regenerating gives an
equivalent recording).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDING = HERE / "recording.hwrec.tar.gz"
SCRIPT = HERE / "mock-script.json"

# Whatever the environment holds, the agents get only the mock's address and dummy key.
PROVIDER_VARIABLES = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "HANKWEAVE_")


def main(output: Path = RECORDING) -> int:
    """Record the quickstart into ``output``; return the exit code."""
    with tempfile.TemporaryDirectory(prefix="hankweave-quickstart-") as scratch_dir:
        scratch = Path(scratch_dir)
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(PROVIDER_VARIABLES)}
        env["HANKWEAVE_HOME"] = str(scratch / "home")
        execution = scratch / "execution"
        hankweave = [sys.executable, "-m", "hankweave"]
        steps = [
            [*hankweave, "run", str(HERE), str(HERE / "data"), "-e", str(execution),
             "--headless", "--mock-provider", str(SCRIPT)],
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
